//! `loader run --metrics ADDR` end to end: a real Prometheus (the Debian package's binary)
//! scrapes the endpoint every second through a 60 s constant run, and the last values it
//! stored must equal summary.json's totals exactly; the endpoint's text must pass
//! `promtool check metrics`; a busy address must be one error line and exit code 1.
//!
//! Needs `prometheus` and `promtool` (`cargo xtask setup` installs them): missing, the
//! suite fails as root or under CI=true, and skips with the reason otherwise.

use loader_tests::common;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::{Target, assert_flag_error, is_root, loader_run, out_dir, tmp_dir};

/// A Prometheus server on loopback, killed on drop.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Start `prometheus` scraping `target` every second, its config and data in `dir`;
    /// wait (bounded) until it is ready.
    fn start(binary: &Path, dir: &Path, target: SocketAddr) -> Prometheus {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).expect("create the Prometheus directory");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n\
                 scrape_configs:\n  - job_name: loader\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .expect("write prometheus.yml");
        let addr = free_addr();
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("create the Prometheus log");
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let prometheus = Prometheus { child, addr };
        let give_up = Instant::now() + Duration::from_secs(30);
        while http_get(addr, "/-/ready", "*/*").is_none_or(|(status, ..)| status != 200) {
            assert!(
                Instant::now() < give_up,
                "prometheus not ready in 30 s; see {}",
                dir.join("prometheus.log").display()
            );
            thread::sleep(Duration::from_millis(200));
        }
        prometheus
    }

    /// The instant vector of `promql` now: `(labels, value)` per series.
    fn query(&self, promql: &str) -> Vec<(serde_json::Value, f64)> {
        let path = format!("/api/v1/query?query={}", url_encode(promql));
        let (status, _, body) = http_get(self.addr, &path, "application/json").expect("the Prometheus API answers");
        let json: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert_eq!((status, &json["status"]), (200, &serde_json::json!("success")), "{promql}: {body}");
        json["data"]["result"]
            .as_array()
            .expect("a vector result")
            .iter()
            .map(|r| {
                let value = r["value"][1].as_str().and_then(|v| v.parse().ok()).expect("a sample value");
                (r["metric"].clone(), value)
            })
            .collect()
    }

    /// The single value of `promql`.
    fn value(&self, promql: &str) -> f64 {
        let result = self.query(promql);
        assert_eq!(result.len(), 1, "{promql}: {result:?}");
        result[0].1
    }
}

/// `prometheus` on PATH; missing, a failure as root or under CI, else a skip (`None`).
fn prometheus_or_skip(test: &str) -> Option<PathBuf> {
    let found = which("prometheus");
    if found.is_none() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        assert!(
            !is_root() && !ci,
            "{test}: prometheus is not installed (cargo xtask setup, or apt-get install prometheus)"
        );
        eprintln!("skipping {test}: prometheus is not installed and this is not root (cargo xtask setup installs it)");
    }
    found
}

fn which(binary: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(binary)).find(|p| p.is_file())
}

/// A loopback address with a port free right now.
fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free loopback port")
}

/// `GET path` (HTTP/1.0: no chunking, the server closes) → status, headers, body; `None`
/// if nothing answers within 5 s.
fn http_get(addr: SocketAddr, path: &str, accept: &str) -> Option<(u16, String, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: {accept}\r\n\r\n").ok()?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, head.to_string(), body.to_string()))
}

fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Summary totals over the phases: field `key` summed.
fn total(summary: &serde_json::Value, key: &str) -> u64 {
    summary["phases"].as_array().expect("phases").iter().map(|p| u(&p[key])).sum()
}

/// Summary errors of `class` over the phases.
fn errors_of(summary: &serde_json::Value, class: &str) -> u64 {
    summary["phases"].as_array().expect("phases").iter().map(|p| p["errors"].get(class).map_or(0, u)).sum()
}

/// Mid-run, the endpoint's two formats: Prometheus text by default, OpenMetrics on request.
fn check_exposition(addr: SocketAddr) -> Result<(), String> {
    let (status, head, text) = http_get(addr, "/metrics", "*/*").ok_or("no answer from /metrics")?;
    if status != 200 || !head.to_ascii_lowercase().contains("content-type: text/plain; version=0.0.4") {
        return Err(format!("default format: {head}"));
    }
    if !text.lines().any(|l| l == "# TYPE loader_requests_sent_total counter") || text.contains("# EOF") {
        return Err(format!("not Prometheus text:\n{text}"));
    }
    let om_accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
    let (_, head, om) = http_get(addr, "/metrics", om_accept).ok_or("no OpenMetrics answer")?;
    if !head.to_ascii_lowercase().contains("content-type: application/openmetrics-text; version=1.0.0")
        || !om.ends_with("# EOF\n")
    {
        return Err(format!("not OpenMetrics: {head}\n{om}"));
    }
    let (status, ..) = http_get(addr, "/other", "*/*").ok_or("no answer elsewhere")?;
    if status != 404 {
        return Err(format!("/other answered {status}"));
    }
    // promtool comes with the prometheus package: the text must parse and pass its lint.
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("promtool: {e}"))?;
    promtool.stdin.take().expect("piped").write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    let checked = common::wait_bounded(promtool, Duration::from_secs(10));
    if !checked.status.success() {
        return Err(format!(
            "promtool check metrics: {}{}\n{text}",
            String::from_utf8_lossy(&checked.stdout),
            String::from_utf8_lossy(&checked.stderr)
        ));
    }
    Ok(())
}

#[test]
fn prometheus_scrapes_a_constant_run_and_ends_on_the_summary_totals_exactly() {
    let test = "prometheus_scrapes_a_constant_run_and_ends_on_the_summary_totals_exactly";
    let Some(binary) = prometheus_or_skip(test) else { return };
    let target = Target::start(&[]);
    let metrics = free_addr();
    let prometheus = Prometheus::start(&binary, &tmp_dir().join("prometheus"), metrics);
    // Mid-run, while the counters move: both formats and promtool's check.
    let checker = thread::spawn(move || {
        thread::sleep(Duration::from_secs(15));
        check_exposition(metrics)
    });
    let out = out_dir("metrics");
    let metrics_arg = metrics.to_string();
    let (output, summary) = loader_run(
        &[
            "--url",
            &target.url(),
            "--rate",
            "500",
            "--duration",
            "60s",
            "--connections",
            "8",
            "--metrics",
            &metrics_arg,
            "--metrics-linger",
            "5s",
        ],
        &out,
        Duration::from_secs(150),
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.code().is_some_and(|c| c == 0 || c == 3),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains(&format!("metrics at http://{metrics}/metrics")), "{stdout}");
    checker.join().expect("the checker thread").unwrap_or_else(|e| panic!("mid-run exposition: {e}"));
    let s = summary.expect("summary.json written");

    // The endpoint is gone: Prometheus marked its series stale, so read the last sample
    // stored in the window (stale markers are not samples).
    let last = |metric: &str| prometheus.value(&format!("last_over_time({metric}[10m])"));
    assert_eq!(last("loader_run_finished"), 1.0, "Prometheus scraped the final values during the linger");
    let (sent, ok) = (total(&s, "sent"), total(&s, "ok"));
    assert_eq!(sent, 30_000, "500/s for 60 s");
    println!(
        "sent: counter {} summary {sent}; ok: counter {} summary {ok}",
        last("loader_requests_sent_total"),
        last("loader_requests_ok_total")
    );
    assert_eq!(last("loader_requests_sent_total"), sent as f64, "sent");
    assert_eq!(last("loader_requests_ok_total"), ok as f64, "ok");
    assert_eq!(last("loader_requests_offered_total"), total(&s, "requests") as f64, "offered");
    assert_eq!(last("loader_sends_ahead_total"), total(&s, "sent_ahead") as f64, "sent ahead");
    let by_class = prometheus.query("last_over_time(loader_request_errors_total[10m])");
    let classes = s["phases"][0]["errors"].as_object().expect("a phase's errors").len();
    assert_eq!(by_class.len(), classes, "every class of the summary is a series: {by_class:?}");
    let mut errors = 0;
    for (labels, value) in &by_class {
        let class = labels["class"].as_str().expect("a class label");
        assert_eq!(*value, errors_of(&s, class) as f64, "errors of class {class}");
        errors += *value as u64;
    }
    let summary_errors: u64 = s["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .flat_map(|p| p["errors"].as_object().expect("errors").values().map(u))
        .sum();
    println!("errors: counter {errors} summary {summary_errors}");
    assert_eq!(errors, summary_errors, "errors");
    assert_eq!(errors + ok, total(&s, "requests"), "every planned request is ok or an error class");
    let latencies: u64 = s["phases"].as_array().expect("phases").iter().map(|p| u(&p["latency_ms"]["count"])).sum();
    assert_eq!(last("loader_latency_seconds_count"), latencies as f64, "latency histogram count");
    // And it was live: scraped all along, the counter rising while the run went.
    let scrapes = prometheus.value("count_over_time(loader_requests_sent_total[10m])");
    assert!(scrapes >= 50.0, "{scrapes} scrapes of a 60 s run at 1 s");
    let first = prometheus.value("min_over_time(loader_requests_sent_total[10m])");
    assert!(first < sent as f64 / 2.0, "the first scrapes saw a run in progress: {first}");

    // Live, not a second or two behind: in each scrape the sends trail what the schedule
    // offered by the refresh's age (100 ms copies, 100 ms refreshes: 50 sends at 500/s at
    // most, a few at best). Copies once a second trailed by up to 2 s (1,000 sends).
    let behind = "(loader_requests_offered_total - loader_requests_sent_total)[10m:1s]";
    let typical = prometheus.value(&format!("quantile_over_time(0.5, {behind})"));
    let worst = prometheus.value(&format!("max_over_time({behind})"));
    // And so no end-of-run jump: the peak 5 s rate of sends within 5 % of the 500/s offered
    // (once a second: 1,869/s against 1,500 offered at the end of every run, +25 %).
    let peak = prometheus.value("max_over_time(rate(loader_requests_sent_total[5s])[10m:1s])");
    println!("sends behind the schedule per scrape: median {typical}, max {worst}; peak rate(5s) {peak:.1}/s");
    assert!(typical <= 125.0, "sends trailed the schedule by {typical} (median over scrapes): more than 250 ms of it");
    assert!(worst <= 500.0, "sends trailed the schedule by {worst} in one scrape: a second of it");
    assert!(peak <= 525.0, "rate(5s) of sends peaked at {peak:.1}/s against 500/s offered: a jump in the counts");
}

#[test]
fn a_busy_metrics_address_is_one_error_line_before_the_run() {
    let busy = TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
    let addr = busy.local_addr().expect("its address").to_string();
    let out = out_dir("metrics-busy");
    assert_flag_error(
        &["--url", "http://127.0.0.1:9/", "--rate", "10", "--duration", "1s", "--metrics", &addr],
        "--metrics",
        &out,
    );
    assert_flag_error(
        &["--url", "http://127.0.0.1:9/", "--rate", "10", "--duration", "1s", "--metrics", "nowhere"],
        "--metrics",
        &out,
    );
}
