//! `loader run` against a real nginx (from apt) on 127.0.0.1: chunked bodies, and the
//! server closing keep-alive connections with `Connection: close` every N requests.

use loader_tests::{common, nginx};

use std::time::Duration;

use common::{loader_run, out_dir, phase};

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn chunked_gzip_bodies_and_server_closed_keepalive() {
    if !nginx::require() {
        return;
    }
    let dir = out_dir("nginx-chunked");
    let nginx = nginx::start(&dir.join("nginx"), 50, "", "");
    let url = format!("http://127.0.0.1:{}/big.txt", nginx.port);
    let (output, summary) = loader_run(
        &[
            "--url",
            &url,
            "--header",
            "Accept-Encoding: gzip",
            "--rate",
            "400",
            "--duration",
            "2s",
            "--connections",
            "4",
            "--threads",
            "1",
            "--no-probes",
        ],
        &dir,
        Duration::from_secs(30),
    );
    let s = common::complete_run("nginx-chunked", &output, &summary, &[0]);
    let main = phase(s, "main");
    assert_eq!(u(&main["ok"]), 800, "every chunked response framed: {main}");
    let errors: u64 = main["errors"].as_object().unwrap().values().map(u).sum();
    assert_eq!(errors, 0, "{main}");
    // nginx ends each connection after 50 requests with `Connection: close`; the loader
    // must honour it and reconnect, never reuse the closed connection.
    let opened = u(&s["run"]["connections_opened"]);
    assert!((16..=20).contains(&opened), "800 requests / 50 per connection ≈ 16 connections, opened {opened}");
    assert_eq!(u(&s["run"]["retried_on_stale_connection"]), 0);
}

#[test]
fn status_classes_from_a_real_server() {
    if !nginx::require() {
        return;
    }
    let dir = out_dir("nginx-404");
    let nginx = nginx::start(&dir.join("nginx"), 1000, "", "");
    let url = format!("http://127.0.0.1:{}/missing", nginx.port);
    let (output, summary) = loader_run(
        &["--url", &url, "--rate", "100", "--duration", "1s", "--connections", "2", "--no-probes"],
        &dir,
        Duration::from_secs(30),
    );
    assert_eq!(
        output.status.code(),
        Some(4),
        "every answer a 404: gates failed\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let main = phase(summary.as_ref().expect("summary.json written"), "main");
    assert_eq!(u(&main["errors"]["http_4xx"]), 100);
    assert_eq!(u(&main["ok"]), 0);
    assert_eq!(u(&main["latency_ms"]["count"]), 100, "HTTP errors still have a latency");
}

/// What a run that a signal ended at a random moment says it got, against what nginx served:
/// SIGHUP, SIGTERM and SIGINT (the run writes its summary) and SIGKILL (`loader verdict DIR`
/// rebuilds it from the last checkpoint), each 1.2–7.2 s into a 20 s run at 1,000 req/s
/// (0.2–6.2 s after its first checkpoint), with probes when root. nginx logs each answer with its time (`$msec`); the answers it had sent
/// by the end the summary covers (`run.zero_unix_s + run.elapsed_s`) must be the summary's ok
/// count, give or take what was on the wire then (50), and the summary never counts more
/// than nginx ever served. The moments come from the clock; the test prints them.
#[test]
fn a_run_ended_by_any_signal_keeps_what_nginx_served() {
    if !nginx::require() {
        return;
    }
    let _turn = common::one_run_at_a_time();
    let dir = out_dir("nginx-signals");
    let log = dir.join("access.log");
    // The harness's `access_log off` is at the http level; the server's own log overrides it.
    let server = format!("access_log {} at;", log.display());
    let nginx = nginx::start(&dir.join("nginx"), 100_000, "log_format at '$msec $status $arg_run';", &server);
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let signals =
        [("SIGHUP", libc::SIGHUP), ("SIGTERM", libc::SIGTERM), ("SIGINT", libc::SIGINT), ("SIGKILL", libc::SIGKILL)];
    for (k, (name, sig)) in signals.into_iter().enumerate() {
        let at_ms = 200 + u64::from(seed.wrapping_mul(2_654_435_761).rotate_left(8 * k as u32)) % 6_000;
        let out = dir.join(format!("run-{name}"));
        let url = format!("http://127.0.0.1:{}/fixed?run={name}", nginx.port);
        let mut cmd = std::process::Command::new(common::loader_bin());
        cmd.args(["run", "--url", &url, "--rate", "1000", "--duration", "20s", "--connections", "16", "--plain"])
            .arg("--out")
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        if !common::is_root() {
            cmd.arg("--no-probes");
        }
        let child = cmd.spawn().unwrap();
        // From the run's first checkpoint (its first second; start-up with probes takes a
        // few seconds and varies with the host).
        let started = std::time::Instant::now();
        while !out.join("summary.partial.json").exists() && started.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(at_ms));
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(child.id() as libc::pid_t, sig) };
        let ended = common::wait_bounded(child, Duration::from_secs(30));
        println!("{name} {at_ms} ms after the first checkpoint (seed {seed}): {:?}", ended.status);
        if sig == libc::SIGKILL {
            assert!(!out.join("summary.json").exists(), "a killed run wrote no summary");
            let verdict = std::process::Command::new(common::loader_bin()).arg("verdict").arg(&out).output().unwrap();
            assert_eq!(verdict.status.code(), Some(130), "{name}: {}", common::show(&verdict));
        } else {
            assert_eq!(ended.status.code(), Some(130), "{name}: {}", common::show(&ended));
        }
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
        assert_eq!(s["interrupted"], true, "{name}");
        let ok: u64 = s["phases"].as_array().unwrap().iter().map(|p| u(&p["ok"])).sum();
        let end = s["run"]["zero_unix_s"].as_f64().unwrap() + s["run"]["elapsed_s"].as_f64().unwrap();
        // nginx writes its log line when it has sent the answer; give it a moment to flush.
        std::thread::sleep(Duration::from_millis(300));
        let text = std::fs::read_to_string(&log).unwrap();
        let served: Vec<f64> = text
            .lines()
            .filter_map(|l| {
                let mut f = l.split(' ');
                let (at, status, run) = (f.next()?.parse::<f64>().ok()?, f.next()?, f.next()?);
                (run == name && status == "200").then_some(at)
            })
            .collect();
        let by_end = served.iter().filter(|&&at| at <= end).count() as u64;
        println!(
            "{name}: summary ok {ok} to {:.3} s ({}), nginx served {by_end} by then, {} in all",
            s["run"]["elapsed_s"].as_f64().unwrap(),
            s["interrupted_by"],
            served.len()
        );
        // A signal the loader handles keeps everything to the signal: more than its first
        // second. A killed run keeps what its last checkpoint held: the first covers its first
        // second (~900–1,000 answers at 1,000 req/s), and one more follows each second after it
        // (200 ms allowed for the checkpoint's own timing).
        let floor = if sig == libc::SIGKILL { 800 * (1 + at_ms.saturating_sub(200) / 1_000) } else { 1_000 };
        assert!(ok > floor, "{name}: {ok} ok {at_ms} ms after the first second at 1,000 req/s (floor {floor})");
        assert!(ok <= served.len() as u64, "{name}: the summary counts {ok} ok, nginx served {}", served.len());
        assert!(
            ok.abs_diff(by_end) <= 50,
            "{name}: the summary counts {ok} ok to {end:.3}, nginx served {by_end} by then"
        );
        if sig == libc::SIGKILL {
            let hlog = out.join("latency.hlog");
            assert!(hlog.exists(), "{name}: no latency.hlog beside the checkpoint");
        }
    }
}
