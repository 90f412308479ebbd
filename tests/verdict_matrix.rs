//! The verdict matrix: one scenario per test, each causing one situation on purpose and
//! asserting what the verdict must say about it — trusted or untrusted, and on which side
//! (loader, network, target) the evidence lies.
//!
//! | scenario | expected |
//! |---|---|
//! | clean runs at 100, 1 000, 10 000, 30 000 req/s | trusted, nothing invalidates (run once more when the verdict lays it at the VM host: its steal, or a pause with neither run-queue wait nor throttling) |
//! | a neighbour's TIME_WAIT fills the host, keep-alive run | trusted, nothing about TIME_WAIT invalidates |
//! | a busy loop on the target's core | trusted |
//! | two busy loops at nice −10 on the loader's core | untrusted, loader |
//! | a cgroup CPU quota (5 % of a core) on the loader at 5 000 req/s | untrusted, loader (`cgroup_throttled`) |
//! | the loader stopped (SIGSTOP) for 300 ms mid-run | untrusted, loader |
//! | the loader stopped for 8 ms once mid-run | trusted, note `tail_own_delay`/loader |
//! | 25 % of SYNs dropped on the way to the target, no keep-alive | trusted, note `syn_retransmits`/network |
//! | 2 % packet loss both ways plus 5 ms delay | trusted, note `retransmits`/network |
//! | a slow target (capacity 40/s) driven at 100/s | trusted, notes on the target side |
//! | 64 ephemeral ports, no keep-alive | untrusted, loader (`ephemeral_ports`/`ports_exhausted`) |
//! | a stripped loader: the TLS uprobes cannot attach | trusted, `probe_unavailable`/loader note |
//! | two shards sharing the loader's one core at 2 000 req/s | trusted |
//! | the starvation matrix: busy loops on the loader's core (1 at nice 0, 2 at −5, 3 at −10) × 2 000 / 8 000 req/s × 16 / 64 connections × with / without the emergency stop | untrusted, loader, no pool wait or drop laid at the target's door (one loop at nice 0: the same, unless the shard never waited for its CPU — then its schedule held and it may be trusted) |
//! | the loader stopped for 1 s and 2 s at 8 000 req/s | untrusted, loader, nothing on the target |
//! | a 5 % CPU quota on the loader at 8 000 req/s | untrusted, loader, nothing on the target |
//! | a target at its capacity (16 workers × 10 ms = 1 600/s) at 2 000 req/s, the loader starved by 3 loops at −10 | untrusted, loader — and the target's saturation named beside it |
//! | a listener with a backlog of 1 that never accepts, the emergency stop on | trusted, `syn_retransmits`/network noted, the stop not the loader's |
//! | a stepped run starved by 3 loops at −10 from step 3 on | steps 1–2 trusted, 3–4 untrusted, loader, nothing on the target |
//!
//! The loader runs pinned to CPU 0 (`taskset -c 0`, one shard), the built-in target to CPU 1;
//! the scenarios run one at a time (a lock in the harness's `matrix`). Every run prints one
//! `MATRIX …` line (also appended to `target/tmp/verdict-matrix.txt`): scenario, expectation,
//! what the verdict said, its reasons with sides, the key figures, and whether a mismatch is
//! the verdict's or the set-up's. Run it as root:
//!
//! ```sh
//! cargo test --release -p loader-tests --test verdict_matrix -- --test-threads=1 --nocapture
//! ```
//!
//! Needs root (eBPF probes, namespaces, cgroups, nice −10); without root each test says why in
//! one line and passes, except under CI (`CI=true`), which must never skip. As root a missing
//! tool fails the scenario with the Debian package to install: `ip`/`tc`/`ss` (iproute2),
//! `nft` (nftables) or `iptables` (iptables), `sysctl` (procps), `strip`/`nm` (binutils).
//!
//! Traffic goes to 127.0.0.0/8 or stays inside network namespaces the scenario creates;
//! namespaces, cgroups, busy loops and the neighbour's TIME_WAIT are undone on drop, also
//! when a scenario fails. Every wait is bounded.

use loader_tests::common;
use loader_tests::matrix;

use std::thread;
use std::time::{Duration, Instant};

use common::{Hogs, Target};
use matrix::{
    Check, Continue, CpuQuota, Firewall, LOADER_CPU, NeighbourTimeWait, NetPair, Outcome, Run, Segments, TARGET_CPU,
    TARGET_IP, host_time_wait, on_loader_cpu, on_target_cpu, process_state, set_sysctl_in, setup, sysctl_in, try_netem,
};

/// The shape of every run unless a scenario needs otherwise: a 2 s warm-up, a 6 s measured
/// hold, one shard, a keep-alive pool of 32.
const SHAPE: &[&str] = &["--duration", "6s", "--warmup", "2s", "--threads", "1"];

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The built-in target pinned to the target's CPU, on loopback.
fn target(flags: &[&str]) -> Target {
    common::target_via(&strs(&on_target_cpu()), "127.0.0.1:0", flags)
}

/// A clean keep-alive run at `rate` against a quiet target on the other core.
///
/// A run during which this virtual machine's host took its CPUs (steal, or a pause the steal
/// figure misses) is not a clean run: when the verdict invalidates it only for delays it lays
/// at the host's door ([`spoiled`]), the scenario says so and runs again, up to
/// [`STEAL_ATTEMPTS`] runs in all; the last is judged whatever it says. (CI in a steal spell:
/// two runs in a row at 10,000 req/s each had 100–190 ms of steal, and per-second latency p99
/// 1.2 ms in the seconds with steal against 0.2 ms in those without.)
fn clean_run(scenario: &str, rate: &str) {
    let Some(_serial) = setup(scenario) else { return };
    let target = target(&[]);
    let o = unless_stolen(scenario, || {
        Run::new(scenario).args(&["--url", &target.url(), "--rate", rate, "--connections", "32"]).args(SHAPE).run()
    });
    if o.skip_without_ebpf() {
        return;
    }
    Check::new(&o).trusted().finish();
}

/// `run` once, and again while the run is spoiled by the VM's host ([`spoiled`]), up to
/// [`STEAL_ATTEMPTS`] runs in all; the last is judged whatever it says. For the scenarios
/// that want a trusted run: a host that takes the CPUs breaks their premise (a quiet host),
/// not the verdict. (CI, the busy-neighbour row at 1,000 req/s: 130 ms of steal, up to 80 ms
/// in one second, and send lag p99 1.42 ms, which the verdict rightly laid at the
/// hypervisor's door.)
fn unless_stolen(scenario: &str, mut run: impl FnMut() -> Outcome) -> Outcome {
    let mut o = run();
    for attempt in 2..=STEAL_ATTEMPTS {
        if o.skip_without_ebpf() {
            break;
        }
        let Some(why) = spoiled(&o) else { break };
        let last_second = common::wait_for_a_quiet_host();
        println!(
            "MATRIX {scenario}: {why}: not a clean run, run {attempt} of {STEAL_ATTEMPTS} (after a second with {last_second} ms of steal)"
        );
        o = run();
    }
    o
}

/// Runs of a clean scenario at most, while each is spoiled by the VM's host.
const STEAL_ATTEMPTS: u32 = 4;

/// Why an untrusted run of a clean scenario was the host's, not the loader's, if it was:
/// - every invalidating reason names the hypervisor's steal (`steal` in its sentence);
/// - or every one is `send_lag` finding the loader "not running when its sends were due" —
///   neither its own work nor a run-queue wait — or `read_lag` / `loader_held_connections`
///   with the run-queue p99 within its limit, with no cgroup throttling: in a clean
///   scenario nothing stops or throttles it, so its host paused it. This VM is nested, and
///   its steal figure does not show every such pause (CI, the 30,000 req/s row: send lag p99
///   0.28 ms, run-queue p99 0.02 ms, no steal, no throttling);
/// - or the verdict noted the host's steal (`host_steal`) and every invalidating reason is one
///   of the loader's own delays, with no throttling.
fn spoiled(o: &Outcome) -> Option<String> {
    if o.trusted() != Some(false) {
        return None;
    }
    let reasons = o.invalidating();
    if let Some(steal) = common::spoiled_by_steal(o.summary(), &reasons) {
        return Some(format!("the VM's host took {steal:.0} ms of its CPUs (steal) and the verdict names it"));
    }
    // Answers left unread, and the sends that waited on them, while no thread competed for
    // the loader's CPU (run-queue p99 within the limit): the same pause, seen from the reads.
    let rq_ok = o.summary()["probes"]["runqueue_us"]["p99"].as_f64().is_some_and(|us| us <= 1000.0);
    let paused = |r: &&serde_json::Value| {
        (r["code"] == "send_lag"
            && r["detail"].as_str().is_some_and(|d| d.contains("was not running when its sends were due")))
            || (rq_ok && (r["code"] == "read_lag" || r["code"] == "loader_held_connections"))
    };
    let throttled = o.summary()["health"]["peaks"]["cgroup_throttled_ms"].as_f64().unwrap_or(0.0);
    if !reasons.is_empty() && reasons.iter().all(paused) && throttled == 0.0 {
        return Some("the loader was not running when its sends were due, neither throttled nor waiting for a CPU: its host paused it".to_string());
    }
    // The verdict noted the host's steal and found only the loader's own delays: in a clean
    // scenario nothing else took its CPU (CI: two shards sharing a core in a spell of steal,
    // their waits for each other stretched to a run-queue finding and send lag p99 1.2 ms).
    let noted = o.reasons().iter().any(|r| r["code"] == "host_steal");
    let delays = ["runqueue_delay", "send_lag", "read_lag", "late_sends", "loader_held_connections"];
    (noted && !reasons.is_empty() && reasons.iter().all(|r| delays.iter().any(|c| r["code"] == *c)) && throttled == 0.0)
        .then(|| "the verdict noted the host's steal and found only the loader's own delays".to_string())
}

#[test]
fn clean_100_rps_is_trusted() {
    clean_run("clean_100_rps_is_trusted", "100");
}

#[test]
fn clean_1000_rps_is_trusted() {
    clean_run("clean_1000_rps_is_trusted", "1000");
}

#[test]
fn clean_10000_rps_is_trusted() {
    clean_run("clean_10000_rps_is_trusted", "10000");
}

#[test]
fn clean_30000_rps_is_trusted() {
    clean_run("clean_30000_rps_is_trusted", "30000");
}

/// Another process leaves ~7 000 TIME_WAIT sockets on the host (its own short connections,
/// client closing first) before a keep-alive run of 8 connections that opens 8 sockets of its
/// own. The host-wide figure is not the loader's doing: it may be annotated, never held
/// against the run.
#[test]
fn a_neighbours_time_wait_does_not_invalidate_a_keepalive_run() {
    let scenario = "a_neighbours_time_wait_does_not_invalidate_a_keepalive_run";
    let Some(_serial) = setup(scenario) else { return };
    let target = target(&[]);
    let before = host_time_wait();
    let neighbour = NeighbourTimeWait::create(7000);
    let at_start = host_time_wait();
    let o = unless_stolen(scenario, || {
        Run::new(scenario).args(&["--url", &target.url(), "--rate", "1000", "--connections", "8"]).args(SHAPE).run()
    });
    let at_end = host_time_wait();
    drop(neighbour);
    let cleared = host_time_wait();
    if o.skip_without_ebpf() {
        return;
    }
    Check::new(&o)
        .set_up(
            at_start >= 5000,
            format!("only {at_start} TIME_WAIT on the host at the start (before the neighbour: {before})"),
        )
        .set_up(at_end >= 5000, format!("the neighbour's TIME_WAIT was gone by the end ({at_end})"))
        .note(format!("host TW before {before}, at start {at_start}, at end {at_end}, after ss -K {cleared}"))
        .trusted()
        .none_invalidating_mentions("time_wait")
        .finish();
}

/// A busy loop (nice 0) pinned to the target's core: the target gets slower, the loader on
/// its own core does not. Trusted.
#[test]
fn a_busy_neighbour_on_the_targets_core_is_not_the_loaders_fault() {
    let scenario = "a_busy_neighbour_on_the_targets_core_is_not_the_loaders_fault";
    let Some(_serial) = setup(scenario) else { return };
    let target = target(&[]);
    let mut spinner = Hogs::pinned(TARGET_CPU, 1, 0);
    let o = unless_stolen(scenario, || {
        Run::new(scenario).args(&["--url", &target.url(), "--rate", "1000", "--connections", "32"]).args(SHAPE).run()
    });
    let alive = spinner.alive();
    drop(spinner);
    if o.skip_without_ebpf() {
        return;
    }
    let busy = o.core_busy_max(TARGET_CPU);
    Check::new(&o)
        .set_up(alive, "the busy loop died during the run")
        .note(format!("CPU {TARGET_CPU} busy max {busy:?} %"))
        .trusted()
        .finish();
}

/// Two busy loops at nice −10 pinned to the loader's core (ten times its CPU weight): the
/// loader waits in the run queue and falls behind. Untrusted, on the loader's side.
#[test]
fn a_cpu_hog_on_the_loaders_core_invalidates_on_the_loader_side() {
    let scenario = "a_cpu_hog_on_the_loaders_core_invalidates_on_the_loader_side";
    let Some(_serial) = setup(scenario) else { return };
    let target = target(&[]);
    let mut hogs = Hogs::pinned(LOADER_CPU, 2, -10);
    let o =
        Run::new(scenario).args(&["--url", &target.url(), "--rate", "1000", "--connections", "32"]).args(SHAPE).run();
    let alive = hogs.alive();
    drop(hogs);
    if o.skip_without_ebpf() {
        return;
    }
    let busy = o.core_busy_max(LOADER_CPU);
    Check::new(&o)
        .set_up(alive, "a hog died during the run")
        .note(format!("CPU {LOADER_CPU} busy max {busy:?} %"))
        .untrusted_on("loader", &[])
        .finish();
}

/// The loader started inside a cgroup allowed 5 % of one CPU, driven at 5 000 req/s (8–50 %
/// of a core of work, as idle CPUs poll or halt): it is throttled every period and its sends
/// go out late. Untrusted, on the loader's side, with `cgroup_throttled` among the reasons.
/// (At 20 %, with idle CPUs polling, the loader nearly fitted: 98 ms throttled in 8 s, at the
/// rule's 10 ms/s — the row then proved the quota, not the verdict. At 10 %, once the engine
/// got cheaper, CI's loader used 8.5 %: throttled 17 ms in the run, 37 sends late — a verdict
/// that had to tie the two, and a row that no longer proved a binding quota.)
#[test]
fn a_cgroup_cpu_quota_on_the_loader_invalidates_on_the_loader_side() {
    let scenario = "a_cgroup_cpu_quota_on_the_loader_invalidates_on_the_loader_side";
    let Some(_serial) = setup(scenario) else { return };
    let target = target(&[]);
    let quota = CpuQuota::create("quota", 5);
    let o = Run::new(scenario)
        .in_cgroup(&quota)
        .args(&["--url", &target.url(), "--rate", "5000", "--connections", "32"])
        .args(SHAPE)
        .run();
    let (periods, throttled_ms) = quota.throttled();
    let described = quota.describe();
    drop(quota);
    if o.skip_without_ebpf() {
        return;
    }
    Check::new(&o)
        .set_up(periods > 0, format!("the cgroup ({described}) was never throttled"))
        .note(format!("{described}: throttled {periods} periods, {throttled_ms:.0} ms (cgroup cpu.stat)"))
        .untrusted_on("loader", &["cgroup_throttled"])
        .finish();
}

/// `[   Ns] …` → N, for the per-second lines of `--plain`.
fn second_of(line: &str) -> Option<u32> {
    line.strip_prefix('[')?.split_once("s]")?.0.trim().parse().ok()
}

/// Stop the loader (SIGSTOP) for `pause`, 3 s into a 6 s hold at 1 000 req/s (after the
/// `[   5s]` line: 2 s of warm-up and 3 s of the hold), and finish the run.
fn run_with_a_stop(scenario: &str, pause: Duration) -> Option<(Outcome, Option<String>, Option<Duration>)> {
    let target = target(&[]);
    let running =
        Run::new(scenario).args(&["--url", &target.url(), "--rate", "1000", "--connections", "32"]).args(SHAPE).spawn();
    let line = running.wait_line(Duration::from_secs(40), |l| second_of(l) == Some(5));
    let mut stopped_for = None;
    if line.is_some() {
        let pid = running.pid;
        let stop = Instant::now();
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0, "SIGSTOP: {}", std::io::Error::last_os_error());
        let resume = Continue(pid);
        // Seen stopped at the end of the pause (a poll before it could outlast a short one).
        thread::sleep(pause.saturating_sub(stop.elapsed()).saturating_sub(Duration::from_micros(300)));
        let seen = process_state(pid) == Some('T');
        drop(resume);
        stopped_for = seen.then(|| stop.elapsed());
    }
    let o = running.finish();
    if o.skip_without_ebpf() {
        return None;
    }
    Some((o, line, stopped_for))
}

/// The loader stopped (SIGSTOP) for 300 ms, 3 s into a 6 s hold at 1 000 req/s. Run-queue
/// delay cannot see a stopped task; the 300 sends that leave late can. Untrusted, loader side.
#[test]
fn a_loader_stopped_for_300ms_invalidates_on_the_loader_side() {
    let scenario = "a_loader_stopped_for_300ms_invalidates_on_the_loader_side";
    let Some(_serial) = setup(scenario) else { return };
    let Some((o, line, stopped_for)) = run_with_a_stop(scenario, Duration::from_millis(300)) else { return };
    Check::new(&o)
        .set_up(line.is_some(), "no `[   5s]` line from --plain within 40 s: the stop was never sent")
        .set_up(stopped_for.is_some(), "the loader was never seen stopped (state T)")
        .note(format!("stopped {:?} after {:?}", stopped_for, line.unwrap_or_default()))
        .untrusted_on("loader", &[])
        .finish();
}

/// The loader stopped for 8 ms once, mid-hold, at 1 000 req/s: eight sends of six thousand
/// leave 1–8 ms late. The p99 (the 60th-worst sample) is untouched and no send is 10 ms late,
/// so the run stays trusted — but the p99.9 and the max are the loader's pause, and the
/// verdict says so (`tail_own_delay`, loader side, annotation).
#[test]
fn a_short_stop_is_trusted_and_named_in_the_tail_above_p99() {
    let scenario = "a_short_stop_is_trusted_and_named_in_the_tail_above_p99";
    let Some(_serial) = setup(scenario) else { return };
    let pause = Duration::from_millis(8);
    // Whether the loader was held up beyond the one stop — by what it was, or `None`. Judged
    // on the measurements, never on the verdict: a verdict that mistook the stop would fail
    // every attempt alike.
    let held_up = |o: &Outcome, stopped_for: Option<Duration>| {
        let main = o.main_phase();
        let lag_max = main["send_lag_ms"]["max"].as_f64().unwrap_or(0.0);
        let lag_p99 = main["send_lag_ms"]["p99"].as_f64().unwrap_or(0.0);
        let latency_p99 = main["latency_ms"]["p99"].as_f64().unwrap_or(0.0);
        let stopped_ms = stopped_for.unwrap_or(pause).as_secs_f64() * 1000.0;
        // At 1,000 req/s the stop delays one send per millisecond it lasts, and one more.
        let by_the_stop = stopped_ms.ceil() + 1.0;
        let sends = main["latency_ms"]["count"].as_f64().unwrap_or(0.0);
        if lag_max > stopped_ms + EXTRA_HOLD_UP_MS {
            Some(format!("sends up to {lag_max} ms late"))
        } else if by_the_stop < 0.01 * sends
            && lag_p99 > SEND_LAG_P99_NOT_THE_STOP_MS
            && lag_p99 >= LAG_SHARE_NOT_THE_STOP * latency_p99
        {
            Some(format!("send lag p99 {lag_p99} ms, which the stop's {by_the_stop} late sends of {sends} cannot set"))
        } else {
            None
        }
    };
    let Some((mut o, mut line, mut stopped_for)) = run_with_a_stop(scenario, pause) else { return };
    for attempt in 2..=STOP_ATTEMPTS {
        let Some(why) = held_up(&o, stopped_for) else { break };
        let last_second = common::wait_for_a_quiet_host();
        println!(
            "MATRIX {scenario}: stopped {stopped_for:?} but {why}: held up by more than the one stop, not the scenario; run {attempt} of {STOP_ATTEMPTS} (steal in the last second waited: {last_second} ms)"
        );
        let Some(again) = run_with_a_stop(scenario, pause) else { return };
        (o, line, stopped_for) = again;
    }
    let lag_max = o.main_phase()["send_lag_ms"]["max"].as_f64().unwrap_or(0.0);
    let mut check = Check::new(&o);
    check
        .set_up(line.is_some(), "no `[   5s]` line from --plain within 40 s: the stop was never sent")
        .set_up(stopped_for.is_some(), "the loader was never seen stopped (state T)")
        .set_up(
            stopped_for.is_some_and(|d| d < Duration::from_millis(10)),
            format!("the stop lasted {stopped_for:?}, not under 10 ms"),
        )
        .note(format!("stopped {:?}, send lag max {lag_max} ms", stopped_for));
    if let Some(why) = held_up(&o, stopped_for) {
        // The host held the loader up beyond the stop in every attempt (a noisy hour: this
        // machine, send lag p99 0.4–1.7 ms at 1,000 req/s four times running, steal). The
        // row cannot then single out the stop; what the verdict must still get right is whose
        // the delays were: the loader's (a note, or untrusted on its side), never the target's.
        check.note(format!("{why}: held up beyond the stop in all {STOP_ATTEMPTS} runs; judged on sides only")).expect(
            !o.reasons().iter().any(|r| r["side"] == "target"),
            "a reason on the target's side for the loader's pauses",
        );
        if o.trusted() == Some(false) {
            check.untrusted_on("loader", &[]);
        } else {
            check.trusted().annotated_on("loader", &[]);
        }
        check.finish();
        return;
    }
    check
        .expect(lag_max >= 5.0, format!("the stop shows in the send lag (max {lag_max} ms)"))
        .trusted()
        .annotated_on("loader", &["tail_own_delay"])
        .finish();
}

/// Runs of the short-stop scenario at most, while the loader's sends were held up well beyond
/// the stop the test made. (CI: a 7.9 ms stop, sends up to 16.4 ms late and 7 of them over
/// 10 ms — the `late_sends` rule then rightly invalidated a run whose latency p99 of 0.49 ms
/// the pause had raised from about 0.12 ms; locally the same row's sends are late by the stop
/// alone, 7.2–7.7 ms.)
const STOP_ATTEMPTS: u32 = 4;
/// Lateness beyond the stop's own length that is still the stop (the wake-up after SIGCONT).
const EXTRA_HOLD_UP_MS: f64 = 2.0;
/// A send lag p99 above this, when the stop's late sends are under 1 % of the phase, is the
/// host's, not the stop's. (CI: a 7.9 ms stop in a run whose every second had 2–4 ms hiccups
/// of the loader's wake-ups — no steal, no run-queue wait — send lag p99 0.43 ms, latency p99
/// 0.69 ms: the verdict rightly untrusted it; here the same day, 0.19 ms against a latency
/// p99 of 0.41 ms. A quiet run of this row: 0.01–0.04 ms.)
const SEND_LAG_P99_NOT_THE_STOP_MS: f64 = 0.1;
/// ... and only when it is this share of the latency p99 or more: a part of the p99 that the
/// run's figures carry. (CI: four runs in a noisy hour, the last with send lag p99 0.104 ms
/// inside a latency p99 of 0.96 ms — 11 %, the stop's run otherwise, and its verdict the
/// wanted one — failed the row as a set-up problem. The 0.43 ms in 0.69 ms above is 62 %.)
const LAG_SHARE_NOT_THE_STOP: f64 = 0.25;

/// Loader and target in two namespaces joined by a veth; in the target's namespace a quarter
/// of the connection-opening SYNs are dropped (nft `numgen random`, or iptables `statistic`).
/// No keep-alive, so every request opens a connection and some wait ≥ 1 s for the SYN
/// retransmit. The network's story: trusted, a non-invalidating `syn_retransmits` on the
/// network side.
#[test]
fn syn_drops_are_a_network_note_not_a_loader_fault() {
    let scenario = "syn_drops_are_a_network_note_not_a_loader_fault";
    let Some(_serial) = setup(scenario) else { return };
    let firewall = Firewall::pick();
    let pair = NetPair::create("syn");
    firewall.drop_incoming(&pair.target, Segments::Syn, 25);
    let target = common::target_via(&strs(&pair.target_prefix()), &format!("{TARGET_IP}:0"), &[]);
    let o = Run::new(scenario)
        .via(pair.loader_prefix())
        .args(&[
            "--url",
            &target.url(),
            "--rate",
            "50",
            "--duration",
            "6s",
            "--warmup",
            "1s",
            "--threads",
            "1",
            "--no-keepalive",
            "--connections",
            "64",
        ])
        .run();
    let dropped = firewall.dropped(&pair.target);
    drop(target);
    if o.skip_without_ebpf() {
        return;
    }
    Check::new(&o)
        .set_up(dropped > 0, format!("{firewall:?} dropped no SYN"))
        .note(format!("{dropped} SYNs dropped ({firewall:?}, 25 %)"))
        .trusted()
        .annotated_on("network", &["syn_retransmits"])
        .finish();
}

/// A listener that never accepts (backlog 1, `accept` never called): the kernel completes two
/// handshakes into its queue and drops every other SYN, so the loader's connects retransmit
/// their SYNs and time out, its requests wait for connections that never open, and the
/// emergency stop fires on the goodput. All of it is the target's (or the network's) story:
/// trusted, SYN retransmits and failed connects noted, nothing on the loader — not the requests
/// the stop aborted, not the waits for connections being opened (issue 46, finding 4: this run
/// was blamed on the loader's send lag and its emergency stop).
#[test]
fn a_target_that_accepts_no_connection_is_the_targets_story() {
    let scenario = "a_target_that_accepts_no_connection_is_the_targets_story";
    let Some(_serial) = setup(scenario) else { return };
    let listener = deaf_listener();
    let port = listener.1;
    let url = format!("http://127.0.0.1:{port}/");
    let o = Run::new(scenario)
        .args(&["--url", &url, "--rate", "50", "--duration", "10s", "--warmup", "0s", "--threads", "1"])
        .args(&["--connections", "16", "--timeout", "3s"])
        .run();
    drop(listener);
    if o.skip_without_ebpf() {
        return;
    }
    let stop = &o.summary()["analysis"]["emergency_stop"];
    Check::new(&o)
        .note(format!("emergency stop: {}", stop["detail"].as_str().unwrap_or("none")))
        .trusted()
        .annotated_on("network", &["syn_retransmits"])
        .expect(!stop["loader_behind"].as_bool().unwrap_or(false), "the stop was called the loader's")
        .finish();
}

/// A listening socket on 127.0.0.1 with a backlog of 1 that nobody accepts from, and its port.
fn deaf_listener() -> (std::os::fd::OwnedFd, u16) {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a descriptor this function owns; the address structures
    // are zeroed and filled before use.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let owned = std::os::fd::OwnedFd::from_raw_fd(fd);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        assert_eq!(libc::bind(fd, (&raw const addr).cast(), len), 0, "bind: {}", std::io::Error::last_os_error());
        assert_eq!(libc::listen(fd, 1), 0, "listen: {}", std::io::Error::last_os_error());
        let mut bound: libc::sockaddr_in = std::mem::zeroed();
        let mut bound_len = len;
        assert_eq!(libc::getsockname(fd, (&raw mut bound).cast(), &mut bound_len), 0);
        (owned, u16::from_be(bound.sin_port))
    }
}

/// A stepped run whose loader is starved from step 3 on: three busy loops at nice −10 start on
/// the loader's core when the progress line of the second that opens step 3 appears. Steps 1
/// and 2 stay trusted; step 3 and 4 are untrusted with the loader named; nothing is laid at the
/// target's door (issue 46: a fault that begins in step 3 never fails step 1).
#[test]
fn starvation_from_step_3_spoils_only_steps_3_and_4() {
    let scenario = "starvation_from_step_3_spoils_only_steps_3_and_4";
    let Some(_serial) = setup(scenario) else { return };
    let target = target(&[]);
    // Warm-up 1 s, then steps of 4 s: step 3 starts at t = 9 s.
    let attempt = || {
        let running = Run::new(scenario)
            .args(&["--url", &target.url(), "--profile", "step", "--steps", "1000,1500,2000,2500"])
            .args(&["--hold", "4s", "--warmup", "1s", "--threads", "1", "--connections", "32", "--no-emergency-stop"])
            .spawn();
        let line = running.wait_line(Duration::from_secs(40), |l| second_of(l) == Some(9));
        let mut hogs = line.as_ref().map(|_| Hogs::pinned(LOADER_CPU, 3, -10));
        let o = running.finish();
        let alive = hogs.as_mut().is_some_and(Hogs::alive);
        drop(hogs);
        (o, line, alive)
    };
    let steps_of = |o: &Outcome| o.summary()["verdict"]["steps"].as_array().cloned().unwrap_or_default();
    // Steps 1–2 set aside before the loops started are the VM's, not the starvation's (CI: a
    // spell of 120 ms/s of steal per core over the whole run; another time, the host's
    // wake-ups 10 ms late at 8 % of a core): run once more after a quiet second.
    let stolen_before_3 = |o: &Outcome| {
        steps_of(o).iter().filter(|t| t["phase"] == "step 1" || t["phase"] == "step 2").any(|t| t["trusted"] == false)
    };
    let (mut o, mut line, mut alive) = attempt();
    if o.skip_without_ebpf() {
        return;
    }
    if stolen_before_3(&o) {
        let quiet = common::wait_for_a_quiet_host();
        println!(
            "MATRIX {scenario}: steps 1–2 set aside before the loops started: run 2 of 2 (after a second with {quiet} ms of steal)"
        );
        (o, line, alive) = attempt();
    }
    let steps = steps_of(&o);
    let trust = |name: &str| steps.iter().find(|t| t["phase"] == name).and_then(|t| t["trusted"].as_bool());
    Check::new(&o)
        .set_up(line.is_some(), "no `[   9s]` line within 40 s: the loops never started")
        .set_up(alive, "a busy loop died during the run")
        .note(format!("steps: {}", serde_json::Value::Array(steps.clone())))
        .expect(trust("step 1") == Some(true), "step 1, before the starvation, is not trusted")
        .expect(trust("step 2") == Some(true), "step 2, before the starvation, is not trusted")
        .expect(trust("step 3") == Some(false), "step 3, starved, is trusted")
        .expect(trust("step 4") == Some(false), "step 4, starved, is trusted")
        .untrusted_on("loader", &[])
        .no_target_blame(TARGET_BLAME)
        .finish();
}

/// 2 % packet loss both ways and 5 ms of delay between loader and target (`tc netem` on the
/// veth; a kernel without netem gets the loss from the packet filter in each namespace and the
/// delay from the target's `--delay 5ms`, and the row says so). Retransmitted segments are
/// the network's story: trusted, a `retransmits` note on the network side.
#[test]
fn packet_loss_and_delay_are_a_network_note() {
    let scenario = "packet_loss_and_delay_are_a_network_note";
    let Some(_serial) = setup(scenario) else { return };
    let pair = NetPair::create("loss");
    let netem = try_netem(&pair.loader, &["delay", "5ms", "loss", "2%"])
        .and_then(|()| try_netem(&pair.target, &["delay", "5ms", "loss", "2%"]));
    let (firewall, target_flags, how) = match &netem {
        Ok(()) => (None, vec![], "tc netem delay 5ms loss 2% on both veth ends".to_owned()),
        Err(why) => {
            let firewall = Firewall::pick();
            firewall.drop_incoming(&pair.loader, Segments::AnyTcp, 2);
            firewall.drop_incoming(&pair.target, Segments::AnyTcp, 2);
            (
                Some(firewall),
                vec!["--delay", "5ms"],
                format!("{why}: 2 % loss by {firewall:?} in both namespaces, 5 ms delay by the target"),
            )
        }
    };
    let target = common::target_via(&strs(&pair.target_prefix()), &format!("{TARGET_IP}:0"), &target_flags);
    let o = unless_stolen(scenario, || {
        Run::new(scenario)
            .via(pair.loader_prefix())
            .args(&["--url", &target.url(), "--rate", "500", "--connections", "32"])
            .args(SHAPE)
            .run()
    });
    let dropped = firewall.map(|f| f.dropped(&pair.loader) + f.dropped(&pair.target));
    drop(target);
    if o.skip_without_ebpf() {
        return;
    }
    let mut check = Check::new(&o);
    if let Some(dropped) = dropped {
        check.set_up(dropped > 0, "the packet filter dropped nothing").note(format!("{dropped} segments dropped"));
    }
    // The pool's SYNs may be lost too (`syn_retransmits`), but what this scenario proves is
    // that lost data segments are noted: `retransmits`.
    check.note(how).trusted().annotated_on("network", &["retransmits"]).finish();
}

/// `loader target --workers 2 --delay 50ms` (capacity exactly 40/s) driven at 100/s through a
/// pool of 4: sends wait for a connection and some are dropped at the 2 s timeout. All of it
/// is the target's story: trusted, reasons on the target side, none invalidating.
#[test]
fn a_slow_target_is_the_targets_story() {
    let scenario = "a_slow_target_is_the_targets_story";
    let Some(_serial) = setup(scenario) else { return };
    let target = target(&["--workers", "2", "--delay", "50ms"]);
    let o = unless_stolen(scenario, || {
        Run::new(scenario)
            .args(&[
                "--url",
                &target.url(),
                "--rate",
                "100",
                "--connections",
                "4",
                "--timeout",
                "2s",
                "--no-emergency-stop",
            ])
            .args(SHAPE)
            .run()
    });
    if o.skip_without_ebpf() {
        return;
    }
    Check::new(&o).trusted().annotated_on("target", &[]).finish();
}

/// The loader in a namespace whose ephemeral range is 64 ports (`40000 40063`, TIME_WAIT
/// reuse off), no keep-alive at 200 req/s against a target on that namespace's loopback: the
/// loader closes first, every port sits in TIME_WAIT for 60 s, and connects start failing
/// within half a second. The loader's own limit: untrusted, loader side.
#[test]
fn ephemeral_port_exhaustion_invalidates_on_the_loader_side() {
    let scenario = "ephemeral_port_exhaustion_invalidates_on_the_loader_side";
    let Some(_serial) = setup(scenario) else { return };
    let ns = common::Netns::create("ports");
    set_sysctl_in(&ns, "net.ipv4.ip_local_port_range", "40000 40063");
    set_sysctl_in(&ns, "net.ipv4.tcp_tw_reuse", "0");
    let range = sysctl_in(&ns, "net.ipv4.ip_local_port_range");
    let reuse = sysctl_in(&ns, "net.ipv4.tcp_tw_reuse");
    let mut target_prefix: Vec<String> = ns.exec().iter().map(|s| (*s).to_owned()).collect();
    target_prefix.extend(on_target_cpu());
    let target = common::target_via(&strs(&target_prefix), "127.0.0.1:0", &[]);
    let mut loader_prefix: Vec<String> = ns.exec().iter().map(|s| (*s).to_owned()).collect();
    loader_prefix.extend(on_loader_cpu());
    let o = Run::new(scenario)
        .via(loader_prefix)
        .args(&[
            "--url",
            &target.url(),
            "--rate",
            "200",
            "--duration",
            "4s",
            "--warmup",
            "1s",
            "--threads",
            "1",
            "--no-keepalive",
            "--connections",
            "16",
            "--timeout",
            "2s",
            "--no-emergency-stop",
        ])
        .run();
    drop(target);
    if o.skip_without_ebpf() {
        return;
    }
    let connect_errors = o.main_phase()["errors"]["connect"].as_u64().unwrap_or(0);
    let failed_connects = o.summary.as_ref().map_or(0, |s| s["probes"]["connect_ms"]["failed"].as_u64().unwrap_or(0));
    Check::new(&o)
        .set_up(range == "40000 40063", format!("port range in the namespace is {range:?}"))
        .set_up(reuse == "0", format!("tcp_tw_reuse in the namespace is {reuse:?}"))
        .set_up(
            connect_errors > 0 || failed_connects > 0 || o.main_phase()["ok"].as_u64().unwrap_or(0) < 200,
            "the ports never ran out: no connect failed and nearly every request succeeded",
        )
        .note(format!("range {range}, connect errors {connect_errors}, failed connects (probe) {failed_connects}"))
        .untrusted_on("loader", &["ephemeral_ports", "ports_exhausted"])
        .no_target_blame(&["connect_failures"])
        .finish();
}

/// A stripped copy of the loader told to find its TLS-handshake markers by name
/// (`LOADER_TEST_UPROBES_BY_NAME`, the fallback where `/proc/self/maps` says nothing): the
/// names are gone from the symbol table, so those two uprobes cannot attach while every
/// tracepoint probe still does. The run is clean and trusted; the missing probe is reported
/// (`probes.availability.tls_handshakes` not "ok") and noted (`probe_unavailable`, loader side,
/// not invalidating). (By default the markers are found by their offset, stripped or not:
/// tests/tls.rs.)
#[test]
fn a_probe_that_cannot_attach_is_noted_and_the_run_stays_trusted() {
    let scenario = "a_probe_that_cannot_attach_is_noted_and_the_run_stays_trusted";
    let Some(_serial) = setup(scenario) else { return };
    let original = std::path::Path::new(common::loader_bin());
    let stripped = matrix::stripped_copy(original);
    let marker = "loader_tls_handshake_start";
    let in_original = matrix::has_symbol(original, marker);
    let in_stripped = matrix::has_symbol(&stripped, marker);
    let target = target(&[]);
    let o = unless_stolen(scenario, || {
        let by_name = vec!["env".to_string(), "LOADER_TEST_UPROBES_BY_NAME=1".to_string()];
        Run::new(scenario)
            .binary(&stripped)
            .via([by_name, matrix::on_loader_cpu()].concat())
            .args(&["--url", &target.url(), "--rate", "1000", "--connections", "32"])
            .args(SHAPE)
            .run()
    });
    if o.skip_without_ebpf() {
        return;
    }
    let availability = o.summary.as_ref().map_or(serde_json::Value::Null, |s| s["probes"]["availability"].clone());
    let tls = availability["tls_handshakes"].clone();
    let others_ok = availability
        .as_object()
        .is_some_and(|a| a.iter().filter(|(k, _)| *k != "tls_handshakes").all(|(_, v)| v == "ok"));
    Check::new(&o)
        .set_up(in_original, format!("the built loader has no {marker} symbol: nothing to strip"))
        .set_up(!in_stripped, format!("the stripped copy still names {marker}"))
        .note(format!("availability.tls_handshakes = {tls}"))
        .expect(tls != "ok" && !tls.is_null(), format!("probes.availability.tls_handshakes is {tls}, not a failure"))
        .expect(others_ok, format!("a tracepoint probe failed too: {availability}"))
        .trusted()
        .annotated_on("loader", &["probe_unavailable"])
        .finish();
}

/// Two shards sharing the loader's single core at 2 000 req/s (1 000 each, well within one
/// core): they take turns without falling behind. Trusted.
#[test]
fn two_shards_sharing_one_core_at_2000_rps_are_trusted() {
    let scenario = "two_shards_sharing_one_core_at_2000_rps_are_trusted";
    let Some(_serial) = setup(scenario) else { return };
    let target = target(&[]);
    let o = unless_stolen(scenario, || {
        Run::new(scenario)
            .args(&[
                "--url",
                &target.url(),
                "--rate",
                "2000",
                "--connections",
                "32",
                "--threads",
                "2",
                "--duration",
                "6s",
                "--warmup",
                "2s",
            ])
            .run()
    });
    if o.skip_without_ebpf() {
        return;
    }
    Check::new(&o).trusted().finish();
}

/// Pool waits and drops: what a starved loader used to lay at the target's door.
const TARGET_BLAME: &[&str] = &["pool_exhausted", "dropped_sends"];

/// `loops` busy loops at `nice` on the loader's core, started before it, while it runs at
/// `rate` through `connections` (with or without the emergency stop) against a healthy
/// target on the other core. The loader waited for its CPU: untrusted on the loader's side,
/// and no pool wait or drop blamed on the target. One loop at nice 0 may not starve it at
/// all (this kernel's scheduler lets a waking shard preempt a nice-0 loop: run-queue p99 of
/// a few µs, yet waits of a whole slice now and then: send lag p99 3–6 ms in CI): then it
/// may be trusted if its run-queue p99 stayed under the 1 ms limit, or untrusted on the
/// loader's side, never on any other.
fn starved(scenario: &str, loops: usize, nice: i32, rate: u32, connections: u32, emergency_stop: bool) {
    let Some(_serial) = setup(scenario) else { return };
    let target = target(&[]);
    let (url, rate, connections) = (target.url(), rate.to_string(), connections.to_string());
    let mut args = vec!["--url", url.as_str(), "--rate", &rate, "--connections", &connections];
    if !emergency_stop {
        args.push("--no-emergency-stop");
    }
    let attempt = || {
        let mut hogs = Hogs::pinned(LOADER_CPU, loops, nice);
        thread::sleep(Duration::from_millis(300));
        let o = Run::new(scenario).args(&args).args(SHAPE).run();
        let alive = hogs.alive();
        drop(hogs);
        (o, alive)
    };
    let (mut o, mut alive) = attempt();
    if o.skip_without_ebpf() {
        return;
    }
    // A spell of the host's steal takes the target's core too, and then the target really was
    // slow to answer (this VM: pool_exhausted beside host_steal, 1,286 of 3,729 waits on
    // answers not yet come): not the starvation this row sets up. Once more after a quiet
    // second.
    let stolen = o.reasons().iter().any(|r| r["code"] == "host_steal");
    let target_named = o.reasons().iter().any(|r| r["side"] == "target");
    if stolen && target_named {
        let quiet = common::wait_for_a_quiet_host();
        println!(
            "MATRIX {scenario}: the host's steal and a target-side reason: run 2 of 2 (after a second with {quiet} ms of steal)"
        );
        (o, alive) = attempt();
    }
    let rq_ms = o.summary()["probes"]["runqueue_us"]["p99"].as_f64().unwrap_or(f64::MAX) / 1000.0;
    let mut check = Check::new(&o);
    check.set_up(alive, "a busy loop died during the run").no_target_blame(TARGET_BLAME);
    if loops == 1 && nice == 0 && rq_ms <= 1.0 && o.trusted() == Some(true) {
        check.note(format!("one loop at nice 0 never held the shard (run-queue p99 {rq_ms:.3} ms)")).trusted();
    } else {
        check.untrusted_on("loader", &[]);
    }
    check.finish();
}

macro_rules! starvation_rows {
    ($($name:ident: $loops:expr, $nice:expr, $rate:expr, $conns:expr, $stop:expr;)*) => {$(
        #[test]
        fn $name() {
            starved(stringify!($name), $loops, $nice, $rate, $conns, $stop);
        }
    )*};
}

starvation_rows! {
    starved_1_loop_nice_0_2000_rps_16_conns: 1, 0, 2000, 16, true;
    starved_1_loop_nice_0_2000_rps_64_conns_no_stop: 1, 0, 2000, 64, false;
    starved_1_loop_nice_0_8000_rps_16_conns_no_stop: 1, 0, 8000, 16, false;
    starved_1_loop_nice_0_8000_rps_64_conns: 1, 0, 8000, 64, true;
    starved_2_loops_nice_minus_5_2000_rps_16_conns: 2, -5, 2000, 16, true;
    starved_2_loops_nice_minus_5_2000_rps_16_conns_no_stop: 2, -5, 2000, 16, false;
    starved_2_loops_nice_minus_5_2000_rps_64_conns: 2, -5, 2000, 64, true;
    starved_2_loops_nice_minus_5_2000_rps_64_conns_no_stop: 2, -5, 2000, 64, false;
    starved_2_loops_nice_minus_5_8000_rps_16_conns: 2, -5, 8000, 16, true;
    starved_2_loops_nice_minus_5_8000_rps_16_conns_no_stop: 2, -5, 8000, 16, false;
    starved_2_loops_nice_minus_5_8000_rps_64_conns: 2, -5, 8000, 64, true;
    starved_2_loops_nice_minus_5_8000_rps_64_conns_no_stop: 2, -5, 8000, 64, false;
    starved_3_loops_nice_minus_10_2000_rps_16_conns: 3, -10, 2000, 16, true;
    starved_3_loops_nice_minus_10_2000_rps_16_conns_no_stop: 3, -10, 2000, 16, false;
    starved_3_loops_nice_minus_10_2000_rps_64_conns: 3, -10, 2000, 64, true;
    starved_3_loops_nice_minus_10_2000_rps_64_conns_no_stop: 3, -10, 2000, 64, false;
    starved_3_loops_nice_minus_10_8000_rps_16_conns: 3, -10, 8000, 16, true;
    starved_3_loops_nice_minus_10_8000_rps_16_conns_no_stop: 3, -10, 8000, 16, false;
    starved_3_loops_nice_minus_10_8000_rps_64_conns: 3, -10, 8000, 64, true;
    starved_3_loops_nice_minus_10_8000_rps_64_conns_no_stop: 3, -10, 8000, 64, false;
}

/// The loader stopped (SIGSTOP) for `pause` at 8 000 req/s through 32 connections, 3 s into
/// the hold: the pool fills with answers it cannot read. Untrusted on the loader's side, and
/// the exhausted pool is not the target's.
fn stopped_at_8000(scenario: &str, pause: Duration) {
    let Some(_serial) = setup(scenario) else { return };
    let target = target(&[]);
    let running =
        Run::new(scenario).args(&["--url", &target.url(), "--rate", "8000", "--connections", "32"]).args(SHAPE).spawn();
    let line = running.wait_line(Duration::from_secs(40), |l| second_of(l) == Some(5));
    if line.is_some() {
        let pid = running.pid;
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0, "SIGSTOP: {}", std::io::Error::last_os_error());
        let resume = Continue(pid);
        thread::sleep(pause);
        drop(resume);
    }
    let o = running.finish();
    if o.skip_without_ebpf() {
        return;
    }
    Check::new(&o)
        .set_up(line.is_some(), "no `[   5s]` line from --plain within 40 s: the stop was never sent")
        .untrusted_on("loader", &[])
        .no_target_blame(TARGET_BLAME)
        .finish();
}

#[test]
fn starved_by_a_1s_stop_at_8000_rps() {
    stopped_at_8000("starved_by_a_1s_stop_at_8000_rps", Duration::from_secs(1));
}

#[test]
fn starved_by_a_2s_stop_at_8000_rps() {
    stopped_at_8000("starved_by_a_2s_stop_at_8000_rps", Duration::from_secs(2));
}

/// The loader in a cgroup allowed 5 % of a CPU at 8 000 req/s (about twice that much work):
/// it is throttled every period. Untrusted on the loader's side, nothing laid at the target's
/// door. (At 10 %, CI's loader needed 9.6 %: throttled 68 ms in the run, one send late, sends
/// on time — trusted, rightly, and a row that no longer starved the loader.)
#[test]
fn starved_by_a_5_percent_quota_at_8000_rps() {
    let scenario = "starved_by_a_5_percent_quota_at_8000_rps";
    let Some(_serial) = setup(scenario) else { return };
    let target = target(&[]);
    let quota = CpuQuota::create("starved", 5);
    let o = Run::new(scenario)
        .in_cgroup(&quota)
        .args(&["--url", &target.url(), "--rate", "8000", "--connections", "32"])
        .args(SHAPE)
        .run();
    let (periods, throttled_ms) = quota.throttled();
    let described = quota.describe();
    drop(quota);
    if o.skip_without_ebpf() {
        return;
    }
    Check::new(&o)
        .set_up(periods > 0, format!("the cgroup ({described}) was never throttled"))
        .note(format!("{described}: throttled {periods} periods, {throttled_ms:.0} ms (cgroup cpu.stat)"))
        .untrusted_on("loader", &[])
        .no_target_blame(TARGET_BLAME)
        .finish();
}

/// Both at once: the target at its capacity (16 workers × 10 ms = 1 600/s) driven at
/// 2 000 req/s through 64 connections while three loops at nice −10 starve the loader. Both
/// are true: untrusted with the loader named, and the target's saturation reported beside
/// it (a target-side note), not instead of it.
#[test]
fn starved_loader_and_a_saturated_target_are_both_named() {
    let scenario = "starved_loader_and_a_saturated_target_are_both_named";
    let Some(_serial) = setup(scenario) else { return };
    let target = target(&["--workers", "16", "--delay", "10ms"]);
    let mut hogs = Hogs::pinned(LOADER_CPU, 3, -10);
    thread::sleep(Duration::from_millis(300));
    let o = Run::new(scenario)
        .args(&[
            "--url",
            &target.url(),
            "--rate",
            "2000",
            "--connections",
            "64",
            "--timeout",
            "2s",
            "--no-emergency-stop",
        ])
        .args(SHAPE)
        .run();
    let alive = hogs.alive();
    drop(hogs);
    if o.skip_without_ebpf() {
        return;
    }
    Check::new(&o)
        .set_up(alive, "a busy loop died during the run")
        .untrusted_on("loader", &[])
        .annotated_on("target", &[])
        .finish();
}
