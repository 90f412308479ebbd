//! `loader run --grpc` (unary calls over HTTP/2): against a server not written here (Python
//! grpcio from PyPI, tests/grpc_server.py, installed by `cargo xtask setup` into
//! target/py-tools) and the built-in target's injected statuses — counts per grpc-status
//! exact —, the method's descriptors from grpcio's server reflection, plus the one-line
//! input errors.

use loader_tests::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Target, loader_run, out_dir, phase};

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

fn proto() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/echo.proto").display().to_string()
}

#[test]
fn builtin_target_statuses_are_counted_per_code() {
    let target = Target::start(&["--grpc", "--grpc-status", "UNAVAILABLE=0.25"]);
    let out = out_dir("grpc-builtin");
    std::fs::create_dir_all(&out).unwrap();
    let rows = out.join("names.csv");
    std::fs::write(&rows, "name\nada\nbob\ncy\n").unwrap();
    let (output, summary) = loader_run(
        &[
            "--url",
            &target.url(),
            "--grpc",
            "demo.v1.Echo/Say",
            "--proto",
            &proto(),
            "--body",
            r#"{"name": "{{name}}", "count": 2}"#,
            "--data",
            rows.to_str().unwrap(),
            "--deadline",
            "2s",
            "--rate",
            "500",
            "--duration",
            "2s",
            "--connections",
            "2",
            "--no-probes",
        ],
        &out,
        Duration::from_secs(30),
    );
    let s = summary.unwrap_or_else(|| panic!("no summary: {}", common::show(&output)));
    let main = phase(&s, "main");
    assert_eq!(main["grpc"], serde_json::json!({"OK": 750, "UNAVAILABLE": 250}), "{main}");
    assert_eq!(u(&main["ok"]), 750);
    assert_eq!(u(&main["errors"]["grpc"]), 250, "non-OK counts against the error budget: {main}");
    assert_eq!(s["run"]["protocol"], "h2");
    assert_eq!(u(&s["data"]["distinct_sent"]), 3, "{}", s["data"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("grpc-status main: OK 750, UNAVAILABLE 250"), "{text}");
}

/// The py-tools directory `cargo xtask setup` installs grpcio (with grpcio-reflection and
/// grpcio-tools) into, if it holds them.
fn grpcio() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/py-tools");
    if ["grpc", "grpc_reflection", "grpc_tools"].iter().all(|d| dir.join(d).is_dir()) {
        return Some(dir);
    }
    assert!(std::env::var("CI").as_deref() != Ok("true"), "CI must have grpcio (cargo xtask setup installs it)");
    eprintln!("skipped: grpcio is not installed in {} (cargo xtask setup)", dir.display());
    None
}

/// tests/grpc_server.py with `args`, serving on a port of its choosing.
struct PyServer {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    url: String,
}

impl PyServer {
    fn start(py: &Path, args: &[&str]) -> PyServer {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("grpc_server.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .args(args)
            .env("PYTHONPATH", py)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().expect("a line").expect("readable");
        let port = first.strip_prefix("listening on ").unwrap_or_else(|| panic!("unexpected: {first}"));
        let url = format!("http://127.0.0.1:{port}/");
        PyServer { child, lines, url }
    }

    /// Stop it; what it printed on the way out (its own counts).
    fn stop(mut self) -> Vec<String> {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let said = self.lines.by_ref().take(4).map_while(Result::ok).collect();
        let _ = self.child.wait();
        said
    }
}

impl Drop for PyServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn grpcio_server_codes_exact_and_latency_from_its_delay() {
    let Some(py) = grpcio() else { return };
    let server = PyServer::start(&py, &["--delay-ms", "5", "--fail-every", "5", "--code", "RESOURCE_EXHAUSTED"]);
    let out = out_dir("grpc-grpcio");
    let (output, summary) = loader_run(
        &["--url", &server.url, "--grpc", "demo.v1.Echo/Say", "--proto", &proto(), "--rate", "200", "--duration", "2s"],
        &out,
        Duration::from_secs(30),
    );
    let truth = server.stop();
    let s = summary.unwrap_or_else(|| panic!("no summary: {}", common::show(&output)));
    let main = phase(&s, "main");
    assert_eq!(truth.first().map(String::as_str), Some("sent OK=320 RESOURCE_EXHAUSTED=80"), "the server's own count");
    assert_eq!(main["grpc"], serde_json::json!({"OK": 320, "RESOURCE_EXHAUSTED": 80}), "{main}");
    let p50 = main["latency_ms"]["p50"].as_f64().unwrap();
    assert!(p50 >= 5.0, "p50 {p50} ms for a server that waits 5 ms");

    // The same calls to the same server without the wait: what the loader adds to the 5 ms is
    // grpcio's own time per call (0.9-1.4 ms on a quiet 2-vCPU VM, more on a busy one), which
    // cancels out; the difference is the sleep, give or take Python's oversleeping.
    let quick = PyServer::start(&py, &[]);
    let (output, summary) = loader_run(
        &["--url", &quick.url, "--grpc", "demo.v1.Echo/Say", "--proto", &proto(), "--rate", "200", "--duration", "2s"],
        &out_dir("grpc-grpcio-quick"),
        Duration::from_secs(30),
    );
    drop(quick);
    let s = summary.unwrap_or_else(|| panic!("no summary: {}", common::show(&output)));
    let base = phase(&s, "main")["latency_ms"]["p50"].as_f64().unwrap();
    let wait = p50 - base;
    assert!((4.5..6.5).contains(&wait), "p50 {p50} ms with a 5 ms wait, {base} ms without: {wait} ms apart");
}

/// No `--proto`: the descriptors come from the server's reflection (grpcio-reflection, which
/// serves v1alpha only: the v1 question is refused and the loader falls back), spanning the
/// service's file, an import of it and a well-known type. What the loader encoded from them
/// is what the server decodes with its own descriptors; without reflection the run is one
/// line naming the way out.
#[test]
fn grpcio_reflection_gives_the_method_without_a_proto_file() {
    let Some(py) = grpcio() else { return };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/reflected");
    let root = root.to_str().unwrap();
    let server = PyServer::start(
        &py,
        &["--reflect", "demo/v1/echo.proto", "--proto-root", root, "--fail-every", "4", "--code", "UNAVAILABLE"],
    );
    let body = r#"{"person": {"name": "ada", "tags": ["x", "y"]}, "count": 2, "at": "2026-12-02T10:00:00Z"}"#;
    let out = out_dir("grpc-reflection");
    let (output, summary) = loader_run(
        &["--url", &server.url, "--grpc", "demo.v1.Echo/Say", "--body", body, "--rate", "200", "--duration", "2s"],
        &out,
        Duration::from_secs(30),
    );
    let said = server.stop();
    let s = summary.unwrap_or_else(|| panic!("no summary: {}", common::show(&output)));
    let main = phase(&s, "main");
    assert_eq!(said.first().map(String::as_str), Some("sent OK=300 UNAVAILABLE=100"), "{said:?}");
    assert_eq!(main["grpc"], serde_json::json!({"OK": 300, "UNAVAILABLE": 100}), "{main}");
    let decoded = said.iter().find_map(|l| l.strip_prefix("first ")).unwrap_or_else(|| panic!("{said:?}"));
    let decoded: serde_json::Value = serde_json::from_str(decoded).unwrap();
    assert_eq!(decoded, serde_json::from_str::<serde_json::Value>(body).unwrap(), "what the server decoded");

    // The same method against a server without reflection: one line, exit 1, naming --proto.
    let bare = PyServer::start(&py, &[]);
    let (output, summary) = loader_run(
        &["--url", &bare.url, "--grpc", "demo.v1.Echo/Say", "--rate", "10", "--duration", "1s"],
        &out_dir("grpc-no-reflection"),
        Duration::from_secs(30),
    );
    drop(bare);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!((output.status.code(), stderr.lines().count()), (Some(1), 1), "{stderr}");
    assert!(
        stderr.starts_with("loader: error: --grpc: server reflection at ") && stderr.contains("UNIMPLEMENTED"),
        "{stderr}"
    );
    assert!(stderr.contains("--proto FILE") && summary.is_none(), "{stderr}");

    // Over TLS (grpcio's, ALPN h2; its certificate given with --cacert): reflection asks on
    // the run's TLS settings, and the run's connections are the only ones it counts.
    let cert_dir = out_dir("grpc-reflection-tls-cert");
    let tls = PyServer::start(
        &py,
        &["--tls", cert_dir.to_str().unwrap(), "--reflect", "demo/v1/echo.proto", "--proto-root", root],
    );
    let url = tls.url.replace("http://", "https://");
    let cert = cert_dir.join("cert.pem");
    let (output, summary) = loader_run(
        &[
            "--url",
            &url,
            "--cacert",
            cert.to_str().unwrap(),
            "--grpc",
            "demo.v1.Echo/Say",
            "--body",
            body,
            "--rate",
            "100",
            "--duration",
            "1s",
            "--connections",
            "2",
        ],
        &out_dir("grpc-reflection-tls"),
        Duration::from_secs(30),
    );
    let said = tls.stop();
    let s = summary.unwrap_or_else(|| panic!("no summary: {}", common::show(&output)));
    assert_eq!(said.first().map(String::as_str), Some("sent OK=100 UNAVAILABLE=0"), "{said:?}");
    assert_eq!(phase(&s, "main")["grpc"], serde_json::json!({"OK": 100}), "{}", phase(&s, "main"));
    assert_eq!(u(&s["tls"]["handshakes"]), 2, "{}", s["tls"]);
}

#[test]
fn grpc_input_errors_are_one_line() {
    let out = out_dir("grpc-errors");
    let url = "http://127.0.0.1:9/";
    let p = proto();
    common::assert_flag_error(
        &["--url", url, "--grpc", "demo.v1.Echo/Nope", "--proto", &p, "--rate", "1"],
        "--grpc",
        &out,
    );
    common::assert_flag_error(
        &["--url", url, "--grpc", "demo.v1.Echo/Stream", "--proto", &p, "--rate", "1"],
        "--grpc",
        &out,
    );
    common::assert_flag_error(&["--url", url, "--grpc", "Say", "--proto", &p, "--rate", "1"], "--grpc", &out);
    // No --proto: server reflection, which nothing at this address answers.
    common::assert_flag_error(&["--url", url, "--grpc", "demo.v1.Echo/Say", "--rate", "1"], "--grpc", &out);
    // The built-in target has no reflection to offer: refused before it starts.
    common::assert_flag_error(&["--grpc", "demo.v1.Echo/Say", "--rate", "1"], "--grpc", &out);
    common::assert_flag_error(&["--url", url, "--proto", &p, "--rate", "1"], "--proto", &out);
    common::assert_flag_error(
        &["--url", url, "--grpc", "demo.v1.Echo/Say", "--proto", "/nonexistent.proto", "--rate", "1"],
        "--proto",
        &out,
    );
    // A device never ends: refused before it is read.
    common::assert_flag_error(
        &["--url", url, "--grpc", "demo.v1.Echo/Say", "--proto", "/dev/zero", "--rate", "1"],
        "--proto",
        &out,
    );
    // The same from a scenario's [grpc], named by file, line and key.
    std::fs::create_dir_all(&out).unwrap();
    let scenario = out.join("nope.toml");
    std::fs::write(
        &scenario,
        format!("[grpc]\nmethod = \"demo.v1.Echo/Nope\"\nproto = [{p:?}]\n\n[target]\nurl = \"{url}\"\n\n[profile]\nrate = 1\n"),
    )
    .unwrap();
    let key = format!("{}:2:10: grpc.method", scenario.display());
    common::assert_flag_error(&[scenario.to_str().unwrap()], &key, &out);
    let (output, _) = loader_run(
        &["--url", url, "--grpc", "demo.v1.Echo/Say", "--proto", &p, "--body", r#"{"nmae": 1}"#, "--rate", "1"],
        &out,
        Duration::from_secs(10),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.lines().count() == 1 && stderr.contains("demo.v1.SayRequest"), "{stderr}");
}
