//! `loader run` against a real nginx (from apt) on 127.0.0.1: chunked bodies, and the
//! server closing keep-alive connections with `Connection: close` every N requests.

use loader_tests::common;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{loader_run, out_dir, phase};

/// An nginx master process with its own prefix and config, killed on drop.
struct Nginx {
    child: Child,
    port: u16,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child; TERM makes nginx stop its worker too.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nginx_binary() -> Option<&'static str> {
    ["/usr/sbin/nginx", "/usr/bin/nginx"].into_iter().find(|p| Path::new(p).exists())
}

fn start_nginx(dir: &Path, keepalive_requests: u32) -> Nginx {
    let bin = nginx_binary().expect("checked by the caller");
    std::fs::create_dir_all(dir.join("html")).unwrap();
    // A body large enough for gzip to stream it in several chunks.
    let body: String = (0..4000).map(|i| format!("line {i} of a body that nginx will gzip and chunk\n")).collect();
    std::fs::write(dir.join("html/big.txt"), body).unwrap();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let conf = format!(
        "daemon off;\nmaster_process on;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n  access_log off;\n  keepalive_requests {keepalive_requests};\n\
           client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp;\n\
           uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;\n\
           gzip on; gzip_min_length 0; gzip_types text/plain;\n\
           server {{\n    listen 127.0.0.1:{port};\n    root {d}/html;\n\
             location = /fixed {{ default_type application/json; return 200 '{{\"ok\":true}}'; }}\n\
             location = /missing {{ return 404; }}\n  }}\n}}\n",
        d = dir.display()
    );
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let child = Command::new(bin)
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .arg("-e")
        .arg(dir.join("error.log"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting nginx");
    let nginx = Nginx { child, port };
    let deadline = Instant::now() + common::PATIENCE;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nginx did not listen on {port} within 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    nginx
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

fn require_nginx() -> bool {
    if nginx_binary().is_some() {
        return true;
    }
    assert!(std::env::var("CI").as_deref() != Ok("true"), "CI must have nginx (cargo xtask setup installs it)");
    eprintln!("skipped: nginx is not installed (cargo xtask setup installs it)");
    false
}

#[test]
fn chunked_gzip_bodies_and_server_closed_keepalive() {
    if !require_nginx() {
        return;
    }
    let dir = out_dir("nginx-chunked");
    let nginx = start_nginx(&dir.join("nginx"), 50);
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
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let s = summary.expect("summary.json written");
    let main = phase(&s, "main");
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
    if !require_nginx() {
        return;
    }
    let dir = out_dir("nginx-404");
    let nginx = start_nginx(&dir.join("nginx"), 1000);
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
