//! The trust verdict end to end, one fault per test, with the real binary and its probes.
//!
//! Each test causes one thing on purpose — nothing, a CPU hog on the loader's core, SYNs
//! that vanish, refused connects, connection churn — and checks that the verdict names it,
//! on the right side, and blames the loader only when the loader is at fault.
//!
//! Needs root (eBPF probes, network namespaces, nice −10). Without root each test says why and
//! passes, except under CI (`CI=true`), which runs as root and must never skip. A build
//! without the eBPF object (no bpf-linker) is skipped outside CI the same way.
//!
//! Traffic goes to 127.0.0.0/8 or stays inside a network namespace the test creates and
//! deletes (also on failure). The tests run one at a time (`SERIAL`): a hog or a burst of
//! connections must not leak into another test's run. Every wait is bounded.
//!
//! The clean-run test assumes a quiet host: other work competing for the loader's CPUs *is*
//! run-queue delay, and the verdict is right to report it.

use loader_tests::common;

use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use common::{Hogs, Netns, Target, loader_run, loader_run_via, out_dir, phase, root_or_skip, show, target_via};
use serde_json::Value;

static SERIAL: Mutex<()> = Mutex::new(());

/// Root and the serial lock, or a skip.
fn setup(test: &str) -> Option<MutexGuard<'static, ()>> {
    root_or_skip(test)?;
    Some(SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
}

/// The probes ran; `false` (after saying why) only for a build without the eBPF object
/// outside CI.
fn probes_ran(test: &str, s: &Value) -> bool {
    let probes = &s["probes"];
    if probes["available"] == true {
        return true;
    }
    let why = probes["unavailable_reason"].as_str().unwrap_or("");
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    if !ci && why.contains("built without eBPF") {
        eprintln!("skipping {test}: {why}");
        return false;
    }
    panic!("as root the probes must run: {why}");
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn reasons(s: &Value) -> &Vec<Value> {
    s["verdict"]["reasons"].as_array().expect("verdict.reasons")
}

/// The reason with `code`, which must be there.
fn reason<'a>(s: &'a Value, code: &str) -> &'a Value {
    reasons(s).iter().find(|r| r["code"] == code).unwrap_or_else(|| panic!("no {code} reason in {}", s["verdict"]))
}

/// Codes of reasons that invalidate the run.
fn invalidating(s: &Value) -> Vec<String> {
    reasons(s).iter().filter(|r| r["invalidates"] == true).map(|r| r["code"].as_str().unwrap().to_owned()).collect()
}

/// 200 req/s for 3 s on a keep-alive pool of 8 against `loader target`: nothing is wrong, so
/// the verdict says nothing at all.
#[test]
fn clean_low_rate_run_is_trusted() {
    let Some(_serial) = setup("clean_low_rate_run_is_trusted") else { return };
    let target = Target::start(&[]);
    let run = |attempt: &str| {
        let (output, summary) = loader_run(
            &["--url", &target.url(), "--rate", "200", "--duration", "3s", "--connections", "8"],
            &out_dir(&format!("verdict-clean{attempt}")),
            Duration::from_secs(40),
        );
        let s = summary.unwrap_or_else(|| panic!("no summary.json\n{}", show(&output)));
        (output, s)
    };
    let (mut output, mut s) = run("");
    if !probes_ran("clean_low_rate_run_is_trusted", &s) {
        return;
    }
    // A run during which this virtual machine's host took its CPUs is not a clean run: when
    // everything the verdict says names the hypervisor's steal, say so and run again (CI:
    // 50 ms of steal in the 3 s run, two sends 10 ms late, noted as such), up to 4 runs in
    // all; the last is judged whatever it says.
    for attempt in 2..=4 {
        let Some(steal) = common::spoiled_by_steal(&s, &reasons(&s).iter().collect::<Vec<_>>()) else { break };
        let last_second = common::wait_for_a_quiet_host();
        eprintln!(
            "the VM's host took {steal:.0} ms of its CPUs (steal), which the verdict names: run {attempt} of 4 (after a second with {last_second} ms of steal)"
        );
        (output, s) = run(&format!("-{attempt}"));
    }
    eprintln!("verdict: {}\nprobes: {}", s["verdict"], s["probes"]["runqueue_us"]);
    assert_eq!(output.status.code(), Some(0), "{}", show(&output));
    assert_eq!(s["verdict"]["trusted"], true, "{}", s["verdict"]);
    // Nothing to report but, after every run was stolen from, the steal the verdict notes.
    assert!(
        reasons(&s).iter().all(|r| r["invalidates"] == false && common::names_steal(r)),
        "a clean run has nothing to report: {}",
        s["verdict"]
    );
    let main = phase(&s, "main");
    assert_eq!(u(&main["ok"]), 600);
    // What the probes saw is what happened: 8 connects, all completed, nothing retransmitted.
    let p = &s["probes"];
    assert_eq!(u(&p["connect_ms"]["count"]), 8, "{p}");
    assert_eq!(u(&p["connect_ms"]["failed"]), 0);
    assert_eq!(u(&p["syn_retransmits"]), 0);
    assert_eq!(u(&p["resets"]["received"]), 0);
    assert!(f(&p["runqueue_us"]["p99"]) <= 1000.0, "{}", p["runqueue_us"]);
}

/// The loader pinned to one CPU with one shard, two busy loops at nice −10 pinned to the same
/// CPU (the technique of `tests/probes.rs`, ten times the loader's CPU weight): its threads
/// wait in the run queue and fall behind. Untrusted, on the loader's side, exit 3.
#[test]
fn cpu_hog_on_the_loaders_cpu_is_blamed_on_the_loader() {
    let Some(_serial) = setup("cpu_hog_on_the_loaders_cpu_is_blamed_on_the_loader") else { return };
    let cpus = allowed_cpus();
    let cpu = *cpus.last().expect("a CPU");
    // The target on another CPU when there is one: the hog competes with the loader only.
    let other = cpus.iter().copied().find(|&c| c != cpu).unwrap_or(cpu).to_string();
    let target = target_via(&["taskset", "-c", &other], "127.0.0.1:0", &[]);
    let out = out_dir("verdict-cpu-hog");
    let hogs = Hogs::spawn(cpu, 2);
    let pin = cpu.to_string();
    let (output, summary) = loader_run_via(
        &["taskset", "-c", &pin],
        &[],
        &["--url", &target.url(), "--rate", "1000", "--duration", "3s", "--threads", "1", "--connections", "16"],
        &out,
        Duration::from_secs(60),
    );
    drop(hogs);
    let s = summary.unwrap_or_else(|| panic!("no summary.json\n{}", show(&output)));
    if !probes_ran("cpu_hog", &s) {
        return;
    }
    eprintln!("verdict: {}\nrunqueue_us: {}", s["verdict"], s["probes"]["runqueue_us"]);
    assert_eq!(output.status.code(), Some(3), "{}", show(&output));
    assert_eq!(s["verdict"]["trusted"], false);
    let rq = reason(&s, "runqueue_delay");
    assert_eq!(rq["side"], "loader");
    assert_eq!(rq["invalidates"], true);
    assert_eq!(f(&rq["limit"]), 1.0);
    let p99_ms = f(&s["probes"]["runqueue_us"]["p99"]) / 1000.0;
    assert!((f(&rq["value"]) - p99_ms).abs() < 1e-9, "the reason quotes the probe: {rq} vs {p99_ms} ms");
    // The waits were long: their p99 above 1 ms, or (CI: p99 0.85 ms of 2,948 waits, longest
    // 16.8 ms) the longest of them holding up the sends the send-lag p99 counts.
    let max_ms = f(&s["probes"]["runqueue_us"]["max"]) / 1000.0;
    assert!(p99_ms > 1.0 || rq["detail"].as_str().unwrap().contains("held up the sends"), "{rq}");
    assert!(max_ms > 1.0, "{max_ms} ms");
    // Whatever else invalidates the run (late sends, CPU) is the loader's too.
    for r in reasons(&s).iter().filter(|r| r["invalidates"] == true) {
        assert_eq!(r["side"], "loader", "{r}");
    }
}

/// A busy neighbour on every core: two busy loops per CPU at nice −5, nothing pinned. The
/// loader's threads wait behind them for whole time slices (run-queue p99 ~9 ms here) and
/// its sends leave late: untrusted, on the loader's side — `send_lag` and/or
/// `runqueue_delay`. (One loop per CPU at nice 0 is up to the scheduler: on a 6.x kernel
/// the loader's short wake-ups usually preempt it and the p99 stays clean, sometimes not;
/// when only the tail above p99 is touched the verdict says so with `tail_own_delay` —
/// see the verdict matrix's short-stop scenario.)
#[test]
fn a_busy_neighbour_on_every_core_is_blamed_on_the_loader() {
    let Some(_serial) = setup("a_busy_neighbour_on_every_core_is_blamed_on_the_loader") else { return };
    let target = Target::start(&[]);
    let out = out_dir("verdict-busy-neighbour");
    let hogs = Hogs::anywhere(2 * allowed_cpus().len(), -5);
    let (output, summary) =
        loader_run(&["--url", &target.url(), "--rate", "1000", "--duration", "4s"], &out, Duration::from_secs(60));
    drop(hogs);
    let s = summary.unwrap_or_else(|| panic!("no summary.json\n{}", show(&output)));
    if !probes_ran("busy_neighbour", &s) {
        return;
    }
    let main = phase(&s, "main");
    eprintln!(
        "verdict: {}\nlatency {} lag {} runqueue {}",
        s["verdict"], main["latency_ms"], main["send_lag_ms"], s["probes"]["runqueue_us"]
    );
    assert_eq!(output.status.code(), Some(3), "{}", show(&output));
    let invalidating: Vec<&Value> = reasons(&s).iter().filter(|r| r["invalidates"] == true).collect();
    assert!(!invalidating.is_empty());
    for r in &invalidating {
        assert_eq!(r["side"], "loader", "{r}");
    }
    assert!(invalidating.iter().any(|r| r["code"] == "send_lag" || r["code"] == "runqueue_delay"), "{invalidating:?}");
}

/// SYNs into a black hole: inside a network namespace of the test, 10.213.0.0/24 is routed
/// into `lo`, where no host owns the address, so every SYN vanishes and is retransmitted until
/// the request times out. The kernel saw it (SYN retransmits, failed connects) and the verdict
/// says so — on the network's and the target's side; the loader is not blamed and the data
/// stays trusted (the step fails its error budget: exit 4).
#[test]
fn syn_drops_are_the_networks_story_not_the_loaders() {
    let Some(_serial) = setup("syn_drops_are_the_networks_story_not_the_loaders") else { return };
    let netns = Netns::create("syn");
    netns.ip(&["route", "add", "10.213.0.0/24", "dev", "lo"]);
    let out = out_dir("verdict-syn-drops");
    let (output, summary) = loader_run_via(
        &netns.exec(),
        &[],
        &[
            "--url",
            "http://10.213.0.2:80/",
            "--rate",
            "50",
            "--duration",
            "3s",
            "--timeout",
            "2s",
            "--connections",
            "8",
            "--no-emergency-stop",
        ],
        &out,
        Duration::from_secs(60),
    );
    let s = summary.unwrap_or_else(|| panic!("no summary.json\n{}", show(&output)));
    if !probes_ran("syn_drops", &s) {
        return;
    }
    let p = &s["probes"];
    eprintln!("verdict: {}\nsyn_retransmits {} connect_ms {}", s["verdict"], p["syn_retransmits"], p["connect_ms"]);
    let syn = u(&p["syn_retransmits"]);
    assert!(syn > 0, "every SYN was dropped, the first retransmit comes after 1 s");
    let r = reason(&s, "syn_retransmits");
    assert_eq!((r["side"].as_str(), r["invalidates"].as_bool()), (Some("network"), Some(false)), "{r}");
    assert_eq!(f(&r["value"]), syn as f64);
    // No connect completed; the ones the timeouts abandoned are failed connects (target side).
    assert_eq!(u(&p["connect_ms"]["count"]), 0);
    let failed = u(&p["connect_ms"]["failed"]);
    assert!(failed > 0);
    let cf = reason(&s, "connect_failures");
    assert_eq!((cf["side"].as_str(), cf["invalidates"].as_bool()), (Some("target"), Some(false)), "{cf}");
    assert_eq!(f(&cf["value"]), failed as f64);
    // Nothing succeeded, every planned request is an error — and none of it is the loader's.
    let main = phase(&s, "main");
    assert_eq!(u(&main["ok"]), 0);
    let errors: u64 = main["errors"].as_object().unwrap().values().map(u).sum();
    assert_eq!(errors, u(&main["requests"]), "{main}");
    assert!(invalidating(&s).is_empty(), "the loader is not at fault: {}", s["verdict"]);
    assert_eq!(s["verdict"]["trusted"], true);
    assert_eq!(output.status.code(), Some(4), "trusted data, failed gates\n{}", show(&output));
}

/// Connects to a closed loopback port are refused (a RST answers each SYN): failed connects
/// and resets received, both on the target's side; every request is a `connect` error; the
/// data is trusted and the step fails its error budget (exit 4).
#[test]
fn refused_connects_are_the_targets_story() {
    let Some(_serial) = setup("refused_connects_are_the_targets_story") else { return };
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("bind").port();
    let url = format!("http://127.0.0.1:{port}/");
    let out = out_dir("verdict-refused");
    let (output, summary) = loader_run(
        &["--url", &url, "--rate", "50", "--duration", "2s", "--connections", "8", "--no-emergency-stop"],
        &out,
        Duration::from_secs(40),
    );
    let s = summary.unwrap_or_else(|| panic!("no summary.json\n{}", show(&output)));
    if !probes_ran("refused", &s) {
        return;
    }
    let p = &s["probes"];
    eprintln!("verdict: {}\nconnect_ms {} resets {}", s["verdict"], p["connect_ms"], p["resets"]);
    let failed = u(&p["connect_ms"]["failed"]);
    assert!(failed > 0);
    assert_eq!(u(&p["connect_ms"]["count"]), 0);
    assert_eq!(u(&p["resets"]["received"]), failed, "one RST per refused SYN");
    assert_eq!(u(&p["syn_retransmits"]), 0);
    let main = phase(&s, "main");
    assert_eq!(u(&main["ok"]), 0);
    assert_eq!(u(&main["errors"]["connect"]), u(&main["requests"]), "{main}");
    assert_eq!(u(&main["requests"]), 100);
    let cf = reason(&s, "connect_failures");
    assert_eq!((cf["side"].as_str(), cf["invalidates"].as_bool()), (Some("target"), Some(false)), "{cf}");
    assert_eq!(f(&cf["value"]), failed as f64);
    let rr = reason(&s, "resets_received");
    assert_eq!((rr["side"].as_str(), rr["invalidates"].as_bool()), (Some("target"), Some(false)), "{rr}");
    assert!(invalidating(&s).is_empty(), "{}", s["verdict"]);
    assert_eq!(s["verdict"]["trusted"], true);
    assert_eq!(output.status.code(), Some(4), "{}", show(&output));
}

/// Keep-alive off at 3000 req/s for 1.5 s, inside a network namespace of the test (so its
/// sockstat counts only this run's TIME_WAIT): 4500 connections, each closed by the loader
/// into TIME_WAIT — seen by the probes, below the 5000 limit, so nothing invalidates. Then
/// `loader verdict DIR --time-wait N` re-judges the same run: above N → untrusted with
/// `time_wait` (exit 3), at exactly the measured peak → trusted again (the limit is "above").
#[test]
fn time_wait_from_churn_is_judged_against_its_limit() {
    let Some(_serial) = setup("time_wait_from_churn_is_judged_against_its_limit") else { return };
    let netns = Netns::create("tw");
    let target = target_via(&netns.exec(), "127.0.0.1:0", &[]);
    let out = out_dir("verdict-time-wait");
    let run = || {
        let _ = std::fs::remove_dir_all(&out);
        let (output, summary) = loader_run_via(
            &netns.exec(),
            &[],
            &["--url", &target.url(), "--rate", "3000", "--duration", "1500ms", "--no-keepalive"],
            &out,
            Duration::from_secs(60),
        );
        let s = summary.unwrap_or_else(|| panic!("no summary.json\n{}", show(&output)));
        (output, s)
    };
    let (mut output, mut s) = run();
    if !probes_ran("time_wait", &s) {
        return;
    }
    // A run the host stole from is no clean run of the churn (CI: 120 ms/s per core of steal,
    // read lag p99 8.7 ms): again after a quiet second, up to 3 runs; the last is judged.
    for attempt in 2..=3 {
        let inval: Vec<&Value> = reasons(&s).iter().filter(|r| r["invalidates"] == true).collect();
        let Some(steal) = common::spoiled_by_steal(&s, &inval) else { break };
        let quiet = common::wait_for_a_quiet_host();
        eprintln!("the VM's host took {steal:.0} ms of its CPUs: run {attempt} of 3 (after a second with {quiet} ms)");
        (output, s) = run();
    }
    let p = &s["probes"];
    eprintln!("verdict: {}\ntime_wait {} lost {}", s["verdict"], p["time_wait"], p["lost"]);
    assert_eq!(output.status.code(), Some(0), "{}", show(&output));
    let opened = u(&s["run"]["connections_opened"]);
    assert_eq!(u(&phase(&s, "main")["ok"]), 4500);
    assert_eq!(opened, 4500, "one connection per request");
    // Exact unless the kernel skipped a probe run (recursion misses are reported as lost).
    let (entries, lost) = (u(&p["time_wait"]["entries"]), u(&p["lost"]));
    assert!(
        opened - lost.min(opened) <= entries && entries <= opened,
        "entries {entries}, opened {opened}, lost {lost}"
    );
    let max_live = u(&p["time_wait"]["max_live"]);
    assert!(0 < max_live && max_live <= entries, "live TIME_WAIT {max_live} of {entries} entries");
    assert!(max_live < 5000);
    assert!(reasons(&s).iter().all(|r| r["code"] != "time_wait"), "{}", s["verdict"]);
    assert!(invalidating(&s).is_empty(), "{}", s["verdict"]);
    assert_eq!(s["verdict"]["trusted"], true);

    let path = out.join("summary.json");
    let before = std::fs::read(&path).expect("summary.json");
    // Dry run with a tiny limit: untrusted, said plainly, the file left alone.
    let dry = rejudge(&out, &["--time-wait", "1000", "--dry-run"]);
    assert_eq!(dry.status.code(), Some(3), "{}", show(&dry));
    let text = String::from_utf8_lossy(&dry.stdout);
    assert!(text.contains("UNTRUSTED") && text.contains("[loader] time_wait"), "{text}");
    assert_eq!(std::fs::read(&path).expect("summary.json"), before, "--dry-run must not write");
    // For real: the saved verdict now names time_wait with the measured value and the limit.
    let wet = rejudge(&out, &["--time-wait", "1000"]);
    assert_eq!(wet.status.code(), Some(3), "{}", show(&wet));
    let s: Value = serde_json::from_slice(&std::fs::read(&path).expect("summary.json")).expect("JSON");
    assert_eq!(s["verdict"]["trusted"], false);
    let tw = reason(&s, "time_wait");
    assert_eq!((tw["side"].as_str(), tw["invalidates"].as_bool()), (Some("loader"), Some(true)), "{tw}");
    assert_eq!(f(&tw["value"]), max_live as f64);
    assert_eq!(f(&tw["limit"]), 1000.0);
    assert_eq!(invalidating(&s), ["time_wait"]);
    // At exactly the peak the limit is not crossed.
    let at_peak = rejudge(&out, &["--time-wait", &max_live.to_string()]);
    assert_eq!(at_peak.status.code(), Some(0), "{}", show(&at_peak));
    let s: Value = serde_json::from_slice(&std::fs::read(&path).expect("summary.json")).expect("JSON");
    assert_eq!(s["verdict"]["trusted"], true, "{}", s["verdict"]);
}

/// `loader verdict DIR ARGS…`, bounded.
fn rejudge(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let child = Command::new(common::loader_bin())
        .arg("verdict")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting loader verdict");
    common::wait_bounded(child, Duration::from_secs(20))
}

/// CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the call fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is this thread; the size matches the set.
    let rc = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    assert_eq!(rc, 0, "sched_getaffinity: {}", std::io::Error::last_os_error());
    // SAFETY: CPU_ISSET reads the set.
    (0..libc::CPU_SETSIZE as usize).filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) }).collect()
}
