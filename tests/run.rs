//! `loader run` end to end: the real binary against the built-in target on 127.0.0.1.
//!
//! Assertions are about what the run must get *right* (counts, classes, where latency is
//! measured from), never about how fast this machine is.

use loader_tests::common;

use std::time::Duration;

use common::{Target, assert_flag_error, loader_run, out_dir, phase};

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn constant_rate_sends_exactly_the_schedule_on_a_warm_pool() {
    let target = Target::start(&[]);
    let out = out_dir("constant");
    let lines_file = out.with_extension("ndjson");
    let (output, summary) = loader_run(
        &[
            "--json-lines",
            lines_file.to_str().expect("a UTF-8 path"),
            "--url",
            &target.url(),
            "--rate",
            "2000",
            "--duration",
            "3s",
            "--warmup",
            "1s",
            "--connections",
            "16",
            "--no-probes",
            "--preflight",
            "300ms",
        ],
        &out,
        Duration::from_secs(30),
    );
    let s = common::complete_run("constant-rate", &output, &summary, &[0]);
    assert_eq!(s["schema"], "loader.summary/v1");
    assert_eq!(s["interrupted"], false);
    assert_checkpoint_spent(&out, s);
    // The pre-flight check ran on the run's threads before it.
    assert!(u(&s["preflight"]["wakeups"]) > 50, "{}", s["preflight"]);
    let warm = phase(s, "warmup");
    assert_eq!(warm["kind"], "warmup");
    let main = phase(s, "main");
    assert_eq!(main["kind"], "hold");
    assert_eq!(u(&main["requests"]), 6000, "2000/s for 3 s");
    assert_eq!(u(&main["sent"]), 6000, "every planned request is sent");
    assert_eq!(u(&main["ok"]), 6000);
    let errors: u64 = main["errors"].as_object().unwrap().values().map(u).sum();
    assert_eq!(errors, 0, "{main}");
    let sent_rps = f(&main["sent_rps"]);
    assert!((sent_rps - 2000.0).abs() <= 20.0, "sent/s {sent_rps} not within 1% of 2000");
    // Keep-alive: the pool was opened once and reused.
    assert_eq!(u(&s["run"]["connections_opened"]), 16);
    // Latency counts from the intended time, so it can never be below the service time.
    let (lat, svc) = (&main["latency_ms"], &main["service_ms"]);
    for q in ["p50", "p99", "max"] {
        assert!(f(&lat[q]) >= f(&svc[q]), "{q}: corrected {} < uncorrected {}", lat[q], svc[q]);
    }
    assert_eq!(u(&lat["count"]), 6000);
    // The shard's timer wake-ups, run-wide and within each phase's window (a sleep or so per
    // send at 2,000/s; the drain's are in no window).
    let wakes = |v: &serde_json::Value| u(&v["wake_late_us"]["count"]);
    assert!(wakes(main) >= 1000, "{}", main["wake_late_us"]);
    assert!(
        wakes(warm) + wakes(main) <= wakes(&s["loader"]),
        "{} {} {}",
        warm["wake_late_us"],
        main["wake_late_us"],
        s["loader"]["wake_late_us"]
    );
    // The .hgrm export of the same phase: HdrHistogram's text format, the same total.
    let hgrm = std::fs::read_to_string(out.join("hgrm/main.latency.hgrm")).expect("main.latency.hgrm written");
    assert!(hgrm.starts_with("       Value     Percentile TotalCount 1/(1-Percentile)\n\n"), "{hgrm}");
    assert!(hgrm.contains("Total count    =         6000]"), "{hgrm}");
    let rows: Vec<&str> = hgrm.lines().skip(2).take_while(|l| !l.starts_with('#')).collect();
    let last: Vec<&str> = rows.last().expect("percentile rows").split_whitespace().collect();
    assert_eq!((last[1], last[2]), ("1.000000000000", "6000"), "{hgrm}");
    assert!(out.join("hgrm/main.service.hgrm").is_file() && out.join("hgrm/warmup.latency.hgrm").is_file());
    // The per-second NDJSON stream adds up to the summary's totals, line by line parseable.
    let text = std::fs::read_to_string(&lines_file).expect("--json-lines file written");
    let lines: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    assert!(lines.len() >= 4, "one line a second and a final one: {text}");
    assert_eq!(lines.iter().filter(|l| l["final"] == true).count(), 1, "{text}");
    assert_eq!(lines.last().unwrap()["final"], true, "{text}");
    let sum = |k: &str| lines.iter().map(|l| u(&l[k])).sum::<u64>();
    let phases = s["phases"].as_array().unwrap();
    let total = |k: &str| phases.iter().map(|p| u(&p[k])).sum::<u64>();
    assert_eq!((sum("sent"), sum("ok"), sum("offered")), (total("sent"), total("ok"), total("requests")), "{text}");
    assert_eq!(
        sum("errors"),
        phases.iter().map(|p| p["errors"].as_object().unwrap().values().map(u).sum::<u64>()).sum::<u64>()
    );
    // The per-second series covers the run and adds up.
    let series = s["series"].as_array().unwrap();
    let sent_total: u64 = series.iter().map(|x| u(&x["sent"])).sum();
    assert_eq!(sent_total, 8000, "warm-up 2000 + main 6000");
    let offered_total: u64 = series.iter().map(|x| u(&x["offered"])).sum();
    assert_eq!(offered_total, 8000);
}

/// `loader run` on one shard for 2 s after a 500 ms warm-up, without probes: its text
/// report and summary, the run checked complete.
fn one_shard_run(url: &str, name: &str, rate: &str, connections: &str, extra: &[&str]) -> (String, serde_json::Value) {
    let out = out_dir(name);
    let mut args = vec![
        "--url",
        url,
        "--rate",
        rate,
        "--duration",
        "2s",
        "--warmup",
        "500ms",
        "--connections",
        connections,
        "--threads",
        "1",
        "--no-probes",
        "--preflight",
        "0s",
    ];
    args.extend_from_slice(extra);
    let (output, summary) = loader_run(&args, &out, Duration::from_secs(30));
    common::complete_run(name, &output, &summary, &[0]);
    (String::from_utf8_lossy(&output.stdout).into_owned(), summary.expect("summary"))
}

/// At 10,000 req/s on one shard the next send is 100 µs after the one a wake-up is for: it
/// leaves with it, early (the default send-ahead window), so the shard wakes once per two
/// sends, and the early one's latency runs from when it left. `--send-ahead 0` wakes per send.
#[test]
fn sends_due_within_the_ahead_window_share_a_wake_up() {
    let target = Target::start(&[]);
    let url = target.url();
    let run = |name: &str, extra: &[&str]| one_shard_run(&url, name, "10000", "32", extra);
    let wakes = |s: &serde_json::Value| u(&phase(s, "main")["wake_late_us"]["count"]);
    // The pairing is timing: a spell of the host's (wake-ups late by more than the 100 µs
    // between sends) breaks pairs for a second or two. Such a pair of runs is run again, up to
    // ATTEMPTS times, after a quiet second; the contract checks hold on every run.
    const ATTEMPTS: u32 = 3;
    for attempt in 1..=ATTEMPTS {
        let (text, ahead) = run("send-ahead", &[]);
        assert_eq!(f(&ahead["run"]["send_ahead_us"]), 100.0);
        let main = phase(&ahead, "main");
        let (sent, early) = (u(&main["sent"]), u(&main["sent_ahead"]));
        assert_eq!(sent, 20_000);
        let (lat, svc) = (&main["latency_ms"], &main["service_ms"]);
        for q in ["p50", "p99", "max"] {
            assert!(f(&lat[q]) >= f(&svc[q]), "{q}: latency {} below the service time {}", lat[q], svc[q]);
        }
        assert!(text.contains("sent ahead: ") && text.contains("(--send-ahead)"), "{text}");
        // Every other send at most (the one a wake-up is for leaves on time).
        assert!(early <= sent / 2, "{early} of {sent} sent ahead: more than every other one");

        let (text, strict) = run("send-ahead-0", &["--send-ahead", "0"]);
        assert_eq!(f(&strict["run"]["send_ahead_us"]), 0.0);
        assert_eq!(u(&phase(&strict, "main")["sent_ahead"]), 0);
        assert!(!text.contains("sent ahead: "), "{text}");

        let mut timing = Vec::new();
        if early < sent * 2 / 5 {
            timing.push(format!("only {early} of {sent} sent ahead: most pairs did not form"));
        }
        if wakes(&ahead) > sent * 3 / 5 {
            timing.push(format!("{} wake-ups for {sent} sends", wakes(&ahead)));
        }
        if wakes(&strict) < wakes(&ahead) * 3 / 2 {
            timing.push(format!(
                "without the window {} wake-ups, not a wake-up per send against {}",
                wakes(&strict),
                wakes(&ahead)
            ));
        }
        let late = |s: &serde_json::Value| f(&phase(s, "main")["wake_late_us"]["p99"]);
        println!(
            "attempt {attempt}: {early} of {sent} sent ahead, wake-ups {} (window) vs {} (none), wake-up lateness p99 {} / {} µs",
            wakes(&ahead),
            wakes(&strict),
            late(&ahead),
            late(&strict)
        );
        if timing.is_empty() {
            return;
        }
        assert!(attempt < ATTEMPTS, "{} ({ATTEMPTS} attempts)", timing.join("; "));
        let steal = common::wait_for_a_quiet_host();
        println!("  {}: again after a quiet second (steal in the last one {steal} ms)", timing.join("; "));
    }
}

/// `--send-ahead 10ms` — h2load's `--rps` rounds — sends in rounds: a wake-up sends the next
/// 10 ms of the schedule, and the answers are read at the next round's wake-up (the deferral
/// follows the window), so at 1,000 req/s the shard wakes about once per ten requests instead
/// of once per request, every early send measured from when it left, none of them late.
#[test]
fn a_ten_millisecond_send_ahead_sends_in_rounds() {
    let target = Target::start(&[]);
    let url = target.url();
    let run = |name: &str, extra: &[&str]| one_shard_run(&url, name, "1000", "32", extra).1;
    let wakes = |s: &serde_json::Value| u(&phase(s, "main")["wake_late_us"]["count"]);
    let exact = run("send-ahead-default-1k", &[]);
    let rounds = run("send-ahead-10ms", &["--send-ahead", "10ms"]);
    assert_eq!(f(&rounds["run"]["send_ahead_us"]), 10_000.0);
    let main = phase(&rounds, "main");
    let (sent, ahead) = (u(&main["sent"]), u(&main["sent_ahead"]));
    assert_eq!(sent, 2_000);
    assert_eq!(u(&main["ok"]), sent);
    assert!(ahead >= sent * 4 / 5, "{ahead} of {sent} sent ahead in 10 ms rounds");
    // About one wake-up per round (200) and a few for reads; a quarter of the sends leaves the
    // host's jitter room (CI: 402) and still sits far below the default's one per send.
    assert!(wakes(&rounds) <= sent / 4, "{} wake-ups for {sent} sends in 10 ms rounds", wakes(&rounds));
    assert!(wakes(&exact) >= sent * 4 / 5, "{} wake-ups for {sent} sends by default", wakes(&exact));
    let (lat, svc) = (&main["latency_ms"], &main["service_ms"]);
    for q in ["p50", "p99", "max"] {
        assert!(f(&lat[q]) >= f(&svc[q]), "{q}: latency {} below the service time {}", lat[q], svc[q]);
    }
    assert!(f(&main["send_lag_ms"]["p99"]) < 1.0, "sends late: {}", main["send_lag_ms"]);
}

/// Below the rate at which the send-ahead window pairs sends, a shard wakes a little before
/// each send (the p99 of its wake-up lateness) and sends at once rather than spinning to the
/// due instant: most sends leave ahead, none of them is measured from its later intended
/// time. `--send-ahead 0` spins instead: nothing early.
#[test]
fn a_slower_shard_sends_on_its_early_wake_up() {
    let target = Target::start(&[]);
    let url = target.url();
    let run = |name: &str, extra: &[&str]| one_shard_run(&url, name, "2000", "8", extra).1;
    let early = run("early-wake", &[]);
    let main = phase(&early, "main");
    let (sent, ahead) = (u(&main["sent"]), u(&main["sent_ahead"]));
    assert_eq!(sent, 4_000);
    assert!(ahead >= sent * 2 / 5, "{ahead} of {sent} sent on an early wake-up");
    let (lat, svc) = (&main["latency_ms"], &main["service_ms"]);
    for q in ["p50", "p99", "max"] {
        assert!(f(&lat[q]) >= f(&svc[q]), "{q}: latency {} below the service time {}", lat[q], svc[q]);
    }
    let strict = run("early-wake-spin", &["--send-ahead", "0"]);
    assert_eq!(u(&phase(&strict, "main")["sent_ahead"]), 0);
}

/// The target answers nothing for 1 s out of every 4 s. Over two whole periods a quarter of
/// the requests are due inside a stall and wait between 0 and 1 s, so the true corrected
/// p99 is the 96th percentile of that wait: 0.96 s; a closed-loop view (service time from
/// the actual send) hides most of it.
#[test]
fn stalls_show_in_corrected_latency_not_only_in_service_time() {
    let target = Target::start(&["--stall", "4s:1s"]);
    let out = out_dir("stall");
    let (output, summary) = loader_run(
        &["--url", &target.url(), "--rate", "500", "--duration", "8s", "--connections", "16", "--no-probes"],
        &out,
        Duration::from_secs(40),
    );
    // The step fails its gates (late sends), on trusted data: exit 4.
    assert_eq!(output.status.code(), Some(4), "{}", String::from_utf8_lossy(&output.stderr));
    let s = summary.expect("summary.json written");
    let main = phase(&s, "main");
    let p99 = f(&main["latency_ms"]["p99"]);
    assert!((p99 - 960.0).abs() <= 0.05 * 960.0, "corrected p99 {p99} ms, expected 960 ± 5%");
    let svc_p99 = f(&main["service_ms"]["p99"]);
    assert!(svc_p99 < 0.5 * p99, "service-time p99 {svc_p99} should understate the corrected {p99}");
    assert_eq!(u(&main["ok"]), 4000, "stalled requests still complete");
    assert!(u(&main["waited_for_connection"]) > 0, "16 connections cannot cover a 1 s stall at 500/s");
    assert!(u(&main["late"]) > 0);
    assert_eq!(main["passed"], false);
    // The verdict blames the target's stall (the pool ran dry), not the loader.
    assert_eq!(s["verdict"]["trusted"], true, "{}", s["verdict"]);
    let reasons = s["verdict"]["reasons"].as_array().unwrap();
    let pool = reasons.iter().find(|r| r["code"] == "pool_exhausted").expect("pool_exhausted reason");
    assert_eq!(pool["side"], "target");
    assert!(!reasons.iter().any(|r| r["side"] == "loader" && r["invalidates"] == true), "{reasons:?}");
}

#[test]
fn timeouts_are_counted_and_recorded_at_the_deadline() {
    let target = Target::start(&["--delay", "3s"]);
    let out = out_dir("timeout");
    let (output, summary) = loader_run(
        &[
            "--url",
            &target.url(),
            "--rate",
            "20",
            "--duration",
            "1s",
            "--timeout",
            "300ms",
            "--connections",
            "40",
            "--no-probes",
        ],
        &out,
        Duration::from_secs(30),
    );
    assert_eq!(
        output.status.code(),
        Some(4),
        "all timed out: gates failed\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let s = summary.expect("summary.json written");
    let main = phase(&s, "main");
    assert_eq!(u(&main["errors"]["timeout"]), 20);
    assert_eq!(u(&main["ok"]), 0);
    let lat = &main["latency_ms"];
    assert_eq!(u(&lat["count"]), 20, "timeouts enter the latency record");
    assert!(f(&lat["p50"]) >= 300.0 && f(&lat["max"]) < 400.0, "recorded at the 300 ms deadline: {lat}");
}

#[test]
fn refused_connections_are_connect_errors() {
    // Bind then drop a listener: the port is (almost certainly) closed now.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}/");
    let out = out_dir("refused");
    let (output, summary) = loader_run(
        &["--url", &url, "--rate", "50", "--duration", "1s", "--connections", "4", "--no-probes"],
        &out,
        Duration::from_secs(30),
    );
    assert_eq!(output.status.code(), Some(4), "all refused: gates failed\n{}", String::from_utf8_lossy(&output.stderr));
    let s = summary.expect("summary.json written");
    let main = phase(&s, "main");
    assert_eq!(u(&main["errors"]["connect"]), 50);
    // Nothing is skipped: planned = sent + dropped + never connected.
    assert_eq!(u(&main["requests"]), u(&main["sent"]) + u(&main["errors"]["dropped"]) + 50);
    assert_eq!(u(&main["latency_ms"]["count"]), 0, "connect errors have no latency to record");
    let reasons = main["fail_reasons"].as_array().unwrap();
    assert!(reasons.iter().any(|r| r.as_str().unwrap().starts_with("error_budget")), "{main}");
}

#[test]
fn bad_input_is_one_line_and_exit_1() {
    let out = out_dir("bad");
    for (args, key) in [
        (vec!["--url", "http://127.0.0.1:1/", "--rate", "-5"], "--rate"),
        (vec!["--url", "http://127.0.0.1:1/", "--rate", "5", "--duration", "soon"], "--duration"),
        (vec!["--url", "localhost:80", "--rate", "5"], "--url"),
        (vec!["--url", "http://127.0.0.1:1/", "--rate", "5", "--header", "nocolon"], "--header"),
    ] {
        assert_flag_error(&args, key, &out);
    }
}

/// `loader run` at 200 req/s for 20 s against `url` into `out`, to be stopped part-way;
/// stderr piped, stdout as given.
fn long_run(url: &str, out: &std::path::Path, stdout: std::process::Stdio) -> std::process::Child {
    std::process::Command::new(common::loader_bin())
        .args(["run", "--url", url, "--rate", "200", "--duration", "20s", "--no-probes", "--plain"])
        .args(["--preflight", "0s", "--out"])
        .arg(out)
        .stdout(stdout)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Send `sig` to `child` after `delay`.
fn signal_after(child: &std::process::Child, delay: Duration, sig: libc::c_int) {
    std::thread::sleep(delay);
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, sig) };
}

/// SIGINT, SIGTERM and SIGHUP each end the run with what was measured written, marked with
/// the signal, exit 130. The hang-up also closes the terminal: here the run's standard output
/// is a pipe whose reader goes away just after the signal (as a closed SSH session's does),
/// and the loader still writes its results instead of dying on a failed print.
#[test]
fn every_stopping_signal_writes_partial_results_and_exits_130() {
    let _turn = common::one_run_at_a_time();
    let target = Target::start(&[]);
    for (name, sig) in [("SIGINT", libc::SIGINT), ("SIGTERM", libc::SIGTERM), ("SIGHUP", libc::SIGHUP)] {
        let out = out_dir(&format!("interrupt-{name}"));
        let mut child = long_run(&target.url(), &out, std::process::Stdio::piped());
        signal_after(&child, Duration::from_millis(1500), sig);
        if sig == libc::SIGHUP {
            // The terminal is gone: nobody reads what the loader prints from now on.
            std::thread::sleep(Duration::from_millis(50));
            drop(child.stdout.take());
        }
        let output = common::wait_bounded(child, Duration::from_secs(10));
        assert_eq!(output.status.code(), Some(130), "{name}: {}", String::from_utf8_lossy(&output.stderr));
        let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
            .unwrap_or_else(|e| panic!("{name}: summary.json: {e}"));
        assert_eq!(s["interrupted"], true, "{name}");
        assert_eq!(s["interrupted_by"], name);
        let main = phase(&s, "main");
        let sent = u(&main["sent"]);
        assert!(sent > 0 && sent < 4000, "{name}: partial: {sent} of 4000 planned");
        // Every planned request is accounted for: what the stop left is `unsent` (and what was
        // in flight `aborted`), and the rates are per second of what ran, not of the plan.
        assert_accounted(&s);
        assert!(u(&main["errors"]["unsent"]) > 2000, "{name}: {main}");
        let measured = f(&main["measured_s"]);
        assert!(measured > 0.5 && measured < 5.0, "{name}: measured_s {measured}");
        let sent_rps = f(&main["sent_rps"]);
        assert!((sent_rps - 200.0).abs() < 30.0, "{name}: sent/s over the part that ran: {sent_rps}");
        assert!(s["errors_detail"]["unsent"].is_array(), "{}", s["errors_detail"]);
        assert!(out.join("report.html").exists() && out.join("latency.hlog").exists(), "{name}: outputs");
        if sig != libc::SIGHUP {
            let text = String::from_utf8_lossy(&output.stdout);
            assert!(text.contains(&format!("INTERRUPTED ({name})")), "{name}: {text}");
        }
    }
}

/// A run killed outright (SIGKILL: the OOM killer, a CI job's timeout, an eviction) loses at
/// most its last second: `summary.partial.json`, rewritten once a second, is what `loader
/// verdict DIR` rebuilds `summary.json` from — marked as recovered, every planned request
/// accounted (unfinished ones `aborted` or `unsent`) — and `loader report DIR` renders.
#[test]
fn a_killed_run_is_recovered_from_its_last_checkpoint() {
    let _turn = common::one_run_at_a_time();
    let target = Target::start(&[]);
    let out = out_dir("killed");
    let child = long_run(&target.url(), &out, std::process::Stdio::null());
    signal_after(&child, Duration::from_millis(4500), libc::SIGKILL);
    let killed = common::wait_bounded(child, Duration::from_secs(10));
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&killed.status), Some(libc::SIGKILL));
    assert!(!out.join("summary.json").exists(), "a killed run wrote no summary");
    assert!(out.join("summary.partial.json").exists(), "no checkpoint in {}", out.display());

    let verdict = std::process::Command::new(common::loader_bin()).arg("verdict").arg(&out).output().unwrap();
    let stderr = String::from_utf8_lossy(&verdict.stderr);
    assert_eq!(verdict.status.code(), Some(130), "recovered, it is an interrupted run: {}", common::show(&verdict));
    assert!(stderr.contains("recovered from its checkpoint"), "{stderr}");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["interrupted"], true);
    assert!(s["interrupted_by"].as_str().is_some_and(|b| b.starts_with("killed")), "{}", s["interrupted_by"]);
    let sent: u64 = s["phases"].as_array().unwrap().iter().map(|p| u(&p["sent"])).sum();
    let covered = f(&s["run"]["elapsed_s"]);
    // Killed 4.5 s after it was started, about 4.2 s into the run (its zero is 0.25 s after
    // start-up): the last checkpoint, written on the 4th second, holds the run to 3.9 s. A
    // loss of more than about a second (with room for a slow start-up) is a lost checkpoint.
    assert!((2.5..=4.5).contains(&covered), "checkpoint at {covered} s");
    assert!(
        sent as f64 >= 200.0 * (covered - 0.5) && sent as f64 <= 200.0 * (covered + 0.5),
        "{sent} sent by {covered} s"
    );
    assert_accounted(&s);
    assert!(u(&phase(&s, "main")["errors"]["unsent"]) > 2000, "{}", phase(&s, "main"));
    assert_eq!(s["probes"]["available"], false);
    // The per-second series: the settled seconds appended beside the checkpoint, joined to
    // its own last ones — every second once, in order, up to the checkpoint.
    for key in ["series", "health"] {
        let series = if key == "series" { &s["series"] } else { &s["health"]["series"] };
        let ts: Vec<u64> = series.as_array().unwrap().iter().map(|x| u(&x["t"])).collect();
        assert!(ts.windows(2).all(|w| w[1] == w[0] + 1), "{key}: seconds {ts:?}");
        assert!(ts.len() as f64 >= covered.floor() - 1.0, "{key}: {} seconds of {covered}", ts.len());
    }
    assert!(out.join("summary.partial.series").exists(), "the settled seconds are appended beside the checkpoint");
    // The interval log was appended with the same checkpoints: its histograms hold the
    // recovered phases' latencies, a second at a time.
    // (Unless the kill fell between the checkpoint's two writes: then the log ends a second
    // earlier, and holds fewer.)
    let hlog = loader::report::hdr::read(&out.join("latency.hlog")).expect("latency.hlog of a killed run");
    let text = std::fs::read_to_string(out.join("latency.hlog")).unwrap();
    let ends: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("Tag=main,"))
        .map(|l| l.split(',').skip(1).take(2).map(|x| x.parse::<f64>().unwrap()).sum())
        .collect();
    let last = ends.iter().copied().fold(0.0, f64::max);
    assert!(!ends.is_empty() && ends.len() as f64 <= covered + 1.0, "{} intervals of main in {covered} s", ends.len());
    for p in s["phases"].as_array().unwrap() {
        let tag = p["name"].as_str().unwrap().replace(' ', "_");
        let (logged, summarised) = (hlog.get(&tag).map_or(0, |h| h.len()), u(&p["latency_ms"]["count"]));
        if (last - covered).abs() < 0.01 {
            assert_eq!(logged, summarised, "{tag}: {logged} latencies in latency.hlog, {summarised} in the summary");
        } else {
            assert!(
                logged <= summarised,
                "{tag}: the log ends at {last} s, the checkpoint at {covered} s: {logged} > {summarised}"
            );
        }
    }

    let report = std::process::Command::new(common::loader_bin()).arg("report").arg(&out).output().unwrap();
    assert_eq!(report.status.code(), Some(0), "{}", common::show(&report));
    assert!(out.join("report.html").exists());
}

/// A finished run leaves no checkpoint behind, and says what the checkpoints cost.
fn assert_checkpoint_spent(out: &std::path::Path, s: &serde_json::Value) {
    assert!(!out.join("summary.partial.json").exists(), "the checkpoint outlived the run");
    assert!(!out.join("summary.partial.series").exists(), "the checkpoint's series outlived the run");
    let c = &s["run"]["checkpoint"];
    assert!(u(&c["writes"]) >= 1 && u(&c["bytes"]) > 1000 && u(&c["hlog_bytes"]) > 1000, "{c}");
    assert!(f(&c["main_ms"]) > 0.0 && f(&c["shard_ms"]) > 0.0, "{c}");
}

/// A tmpfs mounted on `dir` (root), unmounted on drop.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &std::path::Path, options: &str) -> Tmpfs {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success(), "mount -t tmpfs -o {options} on {}", dir.display());
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// `--out` on a read-only filesystem: one line naming `--out` and why, exit 1, before the run
/// starts. On a filesystem with room for the check but not for the results (a disk that fills
/// while the run goes): the run measures to its end, says what it could not write, and the
/// summary comes on standard error instead of being lost; exit 1.
#[test]
fn an_output_directory_that_cannot_take_the_results_loses_no_measurement() {
    let test = "an_output_directory_that_cannot_take_the_results_loses_no_measurement";
    if common::root_or_skip(test).is_none() {
        return;
    }
    let target = Target::start(&[]);
    let args = ["--url", &target.url(), "--rate", "200", "--duration", "2s", "--no-probes"];

    let read_only = out_dir("disk-read-only");
    let _ro = Tmpfs::mount(&read_only, "ro,size=1m");
    let (output, summary) = loader_run(&args, &read_only, Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{}", common::show(&output));
    assert!(summary.is_none());
    let line = stderr.lines().find(|l| l.contains("--out")).unwrap_or_else(|| panic!("no --out line: {stderr}"));
    assert!(line.contains("Read-only file system"), "{line}");
    assert!(
        !String::from_utf8_lossy(&output.stdout).contains("profile,"),
        "the run started: {}",
        common::show(&output)
    );

    let full = out_dir("disk-full");
    let _full = Tmpfs::mount(&full, "size=64k");
    // Leave about 12 KiB: the 4 KiB check passes, the summary (tens of KiB) does not fit.
    std::fs::write(full.join("filler"), vec![0u8; 52 * 1024]).unwrap();
    let (output, _) = loader_run(&args, &full, Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{}", common::show(&output));
    assert!(stderr.contains("No space left on device"), "{stderr}");
    let json = &stderr[stderr.find("{\n").unwrap_or_else(|| panic!("no summary on stderr: {stderr}"))..];
    let json = &json[..json.rfind("\n}").expect("the summary's end") + 2];
    let s: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(u(&phase(&s, "main")["sent"]), 400, "the whole run measured");
    assert_accounted(&s);
    assert!(!full.join("summary.json").exists(), "no half-written summary left behind");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// `requests == ok + Σ errors` in every phase.
fn assert_accounted(s: &serde_json::Value) {
    for p in s["phases"].as_array().unwrap() {
        let errors: u64 = p["errors"].as_object().unwrap().values().map(u).sum();
        assert_eq!(u(&p["requests"]), u(&p["ok"]) + errors, "phase {}: {p}", p["name"]);
    }
}

/// Requests in flight when the run is interrupted are recorded, not lost: `aborted`, with
/// their latency at the moment the run gave up on them — a lower bound, in the tail.
#[test]
fn requests_in_flight_at_an_interrupt_are_aborted_and_recorded() {
    let _turn = common::one_run_at_a_time();
    let target = Target::start(&["--delay", "5s"]);
    let out = out_dir("interrupt-in-flight");
    let child = std::process::Command::new(common::loader_bin())
        .args(["run", "--url", &target.url(), "--rate", "50", "--duration", "10s", "--no-probes", "--plain"])
        .args(["--connections", "200", "--timeout", "30s", "--preflight", "0s", "--no-emergency-stop", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2000));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let output = common::wait_bounded(child, Duration::from_secs(15));
    assert_eq!(output.status.code(), Some(130), "{}", String::from_utf8_lossy(&output.stderr));
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_accounted(&s);
    let main = phase(&s, "main");
    let aborted = u(&main["errors"]["aborted"]);
    // About 1.75 s of sends at 50/s were in flight (nothing answers within 5 s).
    assert!((60..=110).contains(&aborted), "aborted {aborted}: {main}");
    assert_eq!(u(&main["ok"]), 0);
    assert_eq!(u(&main["latency_ms"]["count"]), aborted, "aborted requests are in the latency record");
    assert!(f(&main["latency_ms"]["max"]) >= 1000.0, "their latency reaches the stop: {}", main["latency_ms"]);
    assert_eq!(u(&s["run"]["abandoned"]), aborted);
}

/// As root, `loader run` loads the TCP state probe at start: the kernel's count of the
/// loader's established connects equals the connections the engine opened, and every one
/// of them is seen closing.
#[test]
fn run_loads_the_state_probe_and_it_agrees_with_the_engine() {
    if !common::is_root() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI runs as root: the probe test must not skip");
        eprintln!("skipped: loading eBPF probes needs root");
        return;
    }
    let target = Target::start(&[]);
    let out = out_dir("probes");
    let (output, summary) = loader_run(
        &["--url", &target.url(), "--rate", "300", "--duration", "1s", "--connections", "12"],
        &out,
        Duration::from_secs(30),
    );
    let s = common::complete_run("state-probe", &output, &summary, &[0]);
    let probes = &s["probes"];
    assert_eq!(probes["available"], true, "probes did not load: {probes}");
    let states = &probes["tcp_states"];
    let opened = u(&s["run"]["connections_opened"]);
    assert_eq!(opened, 12);
    assert_eq!(u(&states["CLOSE->SYN_SENT"]), opened, "{states}");
    assert_eq!(u(&states["SYN_SENT->ESTABLISHED"]), opened, "{states}");
    // The loader closes first (active close), so each socket passes FIN_WAIT1.
    assert_eq!(u(&states["ESTABLISHED->FIN_WAIT1"]), opened, "{states}");
    assert!(states.get("LISTEN->SYN_RECV").is_none(), "the target's sockets are not the loader's");
    assert_eq!(u(&probes["lost"]), 0);
}

#[test]
fn ipv6_loopback_targets_work() {
    let port = std::net::TcpListener::bind("[::1]:0").map(|l| l.local_addr().unwrap().port());
    let Ok(port) = port else {
        eprintln!("skipped: this host has no ::1");
        return;
    };
    let mut child = std::process::Command::new(common::loader_bin())
        .args(["target", "--listen", &format!("[::1]:{port}")])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + common::PATIENCE;
    while std::net::TcpStream::connect(("::1", port)).is_err() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = out_dir("ipv6");
    let (output, summary) = loader_run(
        &["--url", &format!("http://[::1]:{port}/"), "--rate", "100", "--duration", "1s", "--no-probes"],
        &out,
        Duration::from_secs(20),
    );
    let _ = child.kill();
    let _ = child.wait();
    let s = common::complete_run("ipv6", &output, &summary, &[0]);
    assert_eq!(u(&phase(s, "main")["ok"]), 100);
}

#[test]
fn no_keepalive_opens_one_connection_per_request_and_closes_from_our_side() {
    let target = Target::start(&[]);
    let out = out_dir("no-keepalive");
    let probes: &[&str] = if common::is_root() { &[] } else { &["--no-probes"] };
    let url = target.url();
    let mut args = vec!["--url", &url, "--rate", "200", "--duration", "1s", "--connections", "8", "--no-keepalive"];
    args.extend_from_slice(probes);
    let (output, summary) = loader_run(&args, &out, Duration::from_secs(20));
    let s = common::complete_run("no-keepalive", &output, &summary, &[0]);
    assert_eq!(u(&phase(s, "main")["ok"]), 200);
    let opened = u(&s["run"]["connections_opened"]);
    // One per request, plus the initial pool that the first requests use.
    assert!((200..=208).contains(&opened), "opened {opened}");
    if common::is_root() {
        // Active close by the loader: its sockets go FIN_WAIT1 → FIN_WAIT2 → (TIME_WAIT) CLOSE.
        let states = &s["probes"]["tcp_states"];
        let active_closes = u(&states["FIN_WAIT2->CLOSE"]) + states.get("CLOSING->CLOSE").map_or(0, u);
        assert!(active_closes >= 195, "{states}");
    }
}

#[test]
fn head_responses_have_no_body() {
    // HEAD responses carry Content-Length but no body: they must be framed right end to end.
    let target = Target::start(&[]);
    let out = out_dir("head");
    let (output, summary) = loader_run(
        &["--url", &target.url(), "--method", "HEAD", "--rate", "100", "--duration", "1s", "--no-probes"],
        &out,
        Duration::from_secs(20),
    );
    let main = phase(common::complete_run("head", &output, &summary, &[0]), "main");
    assert_eq!(u(&main["ok"]), 100, "{main}");
    assert_eq!(u(&main["errors"]["timeout"]), 0, "a HEAD response must not wait for a body");
}

/// A target of capacity 10 req/s (1 worker × 100 ms) driven at 200 req/s with a 300 ms
/// timeout collapses at once; the emergency stop must halt sending within 200 ms of deciding,
/// long before the planned 20 s.
#[test]
fn emergency_stop_halts_a_collapsing_run() {
    let target = Target::start(&["--workers", "1", "--delay", "100ms"]);
    let out = out_dir("emergency");
    let (output, summary) = loader_run(
        &["--url", &target.url(), "--rate", "200", "--duration", "20s", "--timeout", "300ms", "--no-probes"],
        &out,
        Duration::from_secs(40),
    );
    assert_eq!(output.status.code(), Some(4), "{}", String::from_utf8_lossy(&output.stderr));
    let s = summary.expect("summary.json written");
    let stop = &s["analysis"]["emergency_stop"];
    assert!(stop.is_object(), "no emergency stop: {}", s["analysis"]);
    let halted = f(&stop["halted_within_ms"]);
    assert!(halted <= 200.0, "sending went on {halted} ms after the stop");
    let at = u(&stop["at_s"]);
    assert!((2..=6).contains(&at), "stopped at {at} s");
    assert!(f(&s["run"]["elapsed_s"]) < 10.0, "the run went on: {}", s["run"]["elapsed_s"]);
    assert_eq!(s["interrupted"], false);
    // The series shows nothing sent in the seconds after the stop.
    let series = s["series"].as_array().unwrap();
    let after: u64 = series.iter().filter(|x| u(&x["t"]) > at).map(|x| u(&x["sent"])).sum();
    assert_eq!(after, 0, "sends after the stop");
    // Accounted, and the rates are those of the seconds that ran (issue 9: a stop at 3 s of
    // 10 s reported sent/s divided by the planned 10 s).
    assert_accounted(&s);
    let main = phase(&s, "main");
    assert!(u(&main["errors"]["unsent"]) > 0, "{main}");
    let sent_rps = f(&main["sent_rps"]);
    assert!(sent_rps > 150.0, "sent/s {sent_rps} over the {} s that ran", main["measured_s"]);
}

/// A shard whose sends wait for a busy pool sleeps until a connection frees: a 1-worker ×
/// 20 ms target answers 50/s, offered 400/s on 4 connections. The shard has about 50
/// completions a second to handle, so it idles — it must not spin. (The wake-up timers armed
/// ahead once went round arming a timer and removing the last on every such sleep, whose
/// completions ended the wait at once: shard CPU p95 100 %, and calibration and knee runs
/// against saturated targets blamed the loader.)
#[test]
fn waiting_for_a_busy_pool_does_not_spin_the_shard() {
    let target = Target::start(&["--workers", "1", "--delay", "20ms"]);
    let out = out_dir("busy-pool-idle");
    let (output, summary) = loader_run(
        &[
            "--url",
            &target.url(),
            "--rate",
            "400",
            "--duration",
            "3s",
            "--warmup",
            "0s",
            "--connections",
            "4",
            "--threads",
            "1",
            "--no-probes",
            "--preflight",
            "0s",
            "--no-emergency-stop",
        ],
        &out,
        Duration::from_secs(40),
    );
    let s = summary.unwrap_or_else(|| panic!("no summary.json: {}", String::from_utf8_lossy(&output.stderr)));
    let main = phase(&s, "main");
    assert!(u(&main["waited_for_connection"]) > 100, "the pool was not exhausted: {main}");
    let cpu = f(&s["loader"]["cpu_p95"]);
    assert!(cpu < 50.0, "shard CPU p95 {cpu} % while its sends waited for a connection");
}

/// The live display, on a real pseudo-terminal (`script` from util-linux gives the run one):
/// a progress bar with the phase, the position in the run and the live signals — `BEHIND`
/// when a second sent less than it offered (here a 1-worker × 10 ms target, 100/s at most,
/// offered 300/s) — and none of it when stdout is a pipe: plain lines, no escape codes.
#[test]
fn the_live_display_is_a_bar_on_a_terminal_and_plain_lines_in_a_pipe() {
    let turn = common::one_run_at_a_time();
    let target = Target::start(&["--workers", "1", "--delay", "10ms"]);
    let out = out_dir("live-display-tty");
    let command = format!(
        "{} run --url {} --rate 300 --duration 2s --connections 4 --timeout 2s --no-probes --preflight 0s --out {}",
        common::loader_bin(),
        target.url(),
        out.display()
    );
    let child = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("TERM", "xterm")
        .env("COLUMNS", "160")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("`script` (util-linux) runs");
    let output = common::wait_bounded(child, Duration::from_secs(40));
    let tty = String::from_utf8_lossy(&output.stdout);
    assert!(out.join("summary.json").is_file(), "the run finished: {tty}");
    assert!(tty.contains("\x1b["), "a terminal gets a redrawn bar: {tty}");
    assert!(tty.contains("main @ 300/s"), "the phase is shown: {tty}");
    assert!(tty.contains("/2s"), "the position in the run is shown: {tty}");
    assert!(tty.contains("BEHIND: sent"), "a second that sent less than it offered is flagged: {tty}");
    assert!(!tty.contains("[   1s]"), "no plain lines on a terminal: {tty}");
    drop(turn);

    // The same run into a pipe: one plain line a second, the signal at its end, no escapes.
    let (output, summary) = loader_run(
        &[
            "--url",
            &target.url(),
            "--rate",
            "300",
            "--duration",
            "2s",
            "--connections",
            "4",
            "--timeout",
            "2s",
            "--no-probes",
        ],
        &out_dir("live-display-pipe"),
        Duration::from_secs(40),
    );
    assert!(summary.is_some(), "{}", String::from_utf8_lossy(&output.stderr));
    let plain = String::from_utf8_lossy(&output.stdout);
    let first = plain.lines().find(|l| l.starts_with("[   1s]")).unwrap_or_else(|| panic!("a plain line: {plain}"));
    assert!(first.contains("main @ 300/s") && first.contains("BEHIND: sent"), "{first}");
    assert!(!plain.contains('\x1b'), "no escape codes in a pipe: {plain}");
}

/// `tests/arrival_server.py FILE`: a target that writes down when each request arrived;
/// killed on drop.
struct ArrivalServer {
    child: std::process::Child,
    addr: String,
}

impl ArrivalServer {
    fn start(file: &std::path::Path) -> ArrivalServer {
        use std::io::BufRead as _;
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("arrival_server.py");
        let mut child = std::process::Command::new("python3")
            .arg(script)
            .arg(file)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 tests/arrival_server.py");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("its stdout");
        std::io::BufReader::new(stdout).read_line(&mut line).expect("its listening line");
        let addr = line.trim().strip_prefix("listening ").unwrap_or_else(|| panic!("no listening line: {line:?}"));
        ArrivalServer { addr: addr.to_string(), child }
    }
}

impl Drop for ArrivalServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Kolmogorov–Smirnov p-value of the gaps between `times` (ns) against the exponential.
fn ks_exponential_gaps(times: &mut [u64]) -> f64 {
    times.sort_unstable();
    let gaps: Vec<f64> = times.windows(2).map(|p| (p[1] - p[0]) as f64).collect();
    loader::schedule::ks_exponential_p(&gaps)
}

/// `--arrival poisson` as the target sees it: the gaps between arrivals at a Python server
/// pass a Kolmogorov–Smirnov test against the exponential, and the seed is in the summary;
/// the default (evenly spaced) fails the same test outright — so the test can tell them
/// apart on this wire, host jitter and all.
#[test]
fn poisson_arrivals_reach_the_target_with_exponential_gaps_and_even_ones_do_not() {
    for (arrival, duration) in [("poisson", "15s"), ("uniform", "4s")] {
        let out = out_dir(&format!("arrival-{arrival}"));
        let file = out.with_extension("times");
        let _ = std::fs::remove_file(&file);
        let server = ArrivalServer::start(&file);
        let url = format!("http://{}/", server.addr);
        let args = [
            "--url",
            &url,
            "--rate",
            "150",
            "--duration",
            duration,
            "--warmup",
            "0s",
            "--connections",
            "16",
            "--arrival",
            arrival,
            "--no-probes",
        ];
        let seed = ["--seed", "7"];
        let args = if arrival == "poisson" { [&args[..], &seed[..]].concat() } else { args.to_vec() };
        let (output, summary) = loader_run(&args, &out, Duration::from_secs(60));
        let s = summary.unwrap_or_else(|| panic!("no summary.json\n{}", common::show(&output)));
        drop(server);
        assert_eq!(s["run"]["arrival"], arrival);
        assert_eq!(
            s["run"]["arrival_seed"],
            if arrival == "poisson" { serde_json::json!(7) } else { serde_json::Value::Null }
        );
        let text = std::fs::read_to_string(&file).expect("the arrivals written down");
        let mut times: Vec<u64> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        let ok = u(&phase(&s, "main")["ok"]);
        assert_eq!(times.len() as u64, ok, "one arrival written per answer");
        let p = ks_exponential_gaps(&mut times);
        eprintln!("{arrival}: {} arrivals, KS p = {p:.4}", times.len());
        match arrival {
            "poisson" => {
                assert!((2_000..=2_500).contains(&times.len()), "Poisson(2,250): {}", times.len());
                assert!(p > 0.001, "Poisson arrivals failed the KS test against the exponential: p = {p}");
            }
            _ => assert!(p < 1e-6, "evenly spaced arrivals passed for exponential: p = {p}"),
        }
    }
}

/// Six steps below the capacity of a pool of 4 workers of 10 ms: throughput follows the
/// measured concurrency (N = ok/s × 10 ms) in a straight line, and the USL fit says so —
/// fitted, σ and κ at or near zero, no invented peak below the rates run, a small error.
#[test]
fn six_clean_steps_fit_the_usl_without_inventing_a_peak() {
    let target = Target::start(&["--workers", "8", "--delay", "10ms"]);
    let out = out_dir("usl-linear");
    let args = [
        "--url",
        &target.url(),
        "--steps",
        "50,100,150,200,250,300",
        "--hold",
        "1500ms",
        "--warmup",
        "1s",
        "--connections",
        "32",
        "--no-probes",
        "--slo-p99",
        "200ms",
    ];
    let (output, summary) = loader_run(&args, &out, Duration::from_secs(60));
    let s = summary.unwrap_or_else(|| panic!("no summary.json\n{}", common::show(&output)));
    let usl = &s["analysis"]["usl"];
    assert_eq!(usl["fitted"], true, "{usl}");
    assert_eq!(usl["points"].as_array().map(Vec::len), Some(6), "{usl}");
    assert!(f(&usl["error_pct"]) < 10.0, "{usl}");
    // A straight line: whatever crosstalk the fit finds puts any peak far above 300 req/s.
    if let Some(peak) = usl["peak_x"].as_f64() {
        assert!(peak > 600.0, "a peak invented where throughput was still linear: {usl}");
    }
    assert!(f(&usl["sigma"]) < 0.2, "{usl}");
    assert!(!usl["detail"].as_str().unwrap_or_default().contains("inf"), "{usl}");
}
