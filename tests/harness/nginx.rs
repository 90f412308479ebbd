//! nginx from apt on 127.0.0.1, with its own prefix and config: a real server not written
//! here, for the suites that need one (tests/nginx.rs, tests/data.rs).

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;

/// An nginx master process with its own prefix and config, killed on drop.
pub struct Nginx {
    child: Child,
    /// Where it listens on 127.0.0.1.
    pub port: u16,
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

/// The nginx binary, if installed.
pub fn binary() -> Option<&'static str> {
    ["/usr/sbin/nginx", "/usr/bin/nginx"].into_iter().find(|p| Path::new(p).exists())
}

/// Start nginx under `dir`: `/big.txt` (gzip-chunked), `/fixed` (JSON), `/missing` (404),
/// and `http` (directives for its `http` block: an access log, locations of a `server`
/// added through `server_extra`). Connections end after `keepalive_requests` requests.
pub fn start(dir: &Path, keepalive_requests: u32, http: &str, server_extra: &str) -> Nginx {
    start_listening(dir, keepalive_requests, http, server_extra, "")
}

/// [`start`] with nginx (master and worker, which inherits it) allowed only on CPU `cpu`:
/// a target sharing one core with the rest of its stack (tests/harness/stack.rs).
pub fn start_on_cpu(dir: &Path, cpu: usize, keepalive_requests: u32, http: &str, server_extra: &str) -> Nginx {
    launch(dir, keepalive_requests, http, server_extra, "", Some(cpu))
}

/// [`start`] speaking HTTP/2 with prior knowledge (h2c) on its plain port — nginx's
/// `listen … http2` — and HTTP/1.1 to no one. `keepalive_requests` also ends HTTP/2
/// connections: after that many streams nginx sends GOAWAY (nginx ≥ 1.19.7).
pub fn start_h2(dir: &Path, keepalive_requests: u32, http: &str, server_extra: &str) -> Nginx {
    start_listening(dir, keepalive_requests, http, server_extra, " http2")
}

/// [`start_h2`] over TLS: `listen … ssl http2` with a fresh self-signed certificate for
/// 127.0.0.1 (made with the `openssl` command under `dir`), ALPN `h2` and `http/1.1`.
pub fn start_h2_tls(dir: &Path, keepalive_requests: u32, http: &str, server_extra: &str) -> Nginx {
    std::fs::create_dir_all(dir).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl runs");
    assert!(made.success(), "openssl made no certificate");
    let tls = format!("ssl_certificate {}; ssl_certificate_key {};", cert.display(), key.display());
    start_listening(dir, keepalive_requests, &format!("{http} {tls}"), server_extra, " ssl http2")
}

fn start_listening(dir: &Path, keepalive_requests: u32, http: &str, server_extra: &str, listen: &str) -> Nginx {
    launch(dir, keepalive_requests, http, server_extra, listen, None)
}

fn launch(
    dir: &Path,
    keepalive_requests: u32,
    http: &str,
    server_extra: &str,
    listen: &str,
    cpu: Option<usize>,
) -> Nginx {
    let bin = binary().expect("checked by the caller");
    std::fs::create_dir_all(dir.join("html")).unwrap();
    // A body large enough for gzip to stream it in several chunks.
    let body: String = (0..4000).map(|i| format!("line {i} of a body that nginx will gzip and chunk\n")).collect();
    std::fs::write(dir.join("html/big.txt"), body).unwrap();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let conf = format!(
        "daemon off;\nmaster_process on;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n  access_log off;\n  keepalive_requests {keepalive_requests};\n  {http}\n\
           client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp;\n\
           uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;\n\
           gzip on; gzip_min_length 0; gzip_types text/plain;\n\
           server {{\n    listen 127.0.0.1:{port}{listen};\n    root {d}/html;\n\
             location = /fixed {{ default_type application/json; return 200 '{{\"ok\":true}}'; }}\n\
             location = /missing {{ return 404; }}\n    {server_extra}\n  }}\n}}\n",
        d = dir.display()
    );
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let mut command = Command::new(bin);
    if let Some(cpu) = cpu {
        common::pin_to_cpu(&mut command, cpu);
    }
    let child = command
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

/// nginx is installed; in CI it must be (the test fails), elsewhere the test skips.
pub fn require() -> bool {
    if binary().is_some() {
        return true;
    }
    assert!(std::env::var("CI").as_deref() != Ok("true"), "CI must have nginx (cargo xtask setup installs it)");
    eprintln!("skipped: nginx is not installed (cargo xtask setup installs it)");
    false
}
