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
