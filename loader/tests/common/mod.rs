//! Shared by the end-to-end tests: a `loader target` child that is killed on drop, and
//! `loader run` invocations with their summary read back. Every wait is bounded.

#![allow(dead_code)] // each test binary uses its own subset

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// Upper bound on waiting for a child to start.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A running `loader target`, killed on drop.
pub struct Target {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Target {
    /// Start `loader target --listen 127.0.0.1:0 FLAGS` and wait for its listening line.
    pub fn start(flags: &[&str]) -> Target {
        let mut child = Command::new(env!("CARGO_BIN_EXE_loader"))
            .args(["target", "--listen", "127.0.0.1:0"])
            .args(flags)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting loader target");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut target = Target { child, addr: "0.0.0.0:0".parse().expect("static") };
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let _ = tx.send(line);
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        let line = rx.recv_timeout(PATIENCE).expect("no listening line within 10 s");
        let addr = line
            .trim_end()
            .strip_prefix("loader target listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"));
        target.addr = addr.parse().unwrap_or_else(|_| panic!("not an address: {addr:?}"));
        target
    }

    /// `http://ADDR/`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh output directory under the target dir, unique per test.
pub fn out_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("runs").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Run `loader run ARGS --out DIR --plain`, bounded by `limit`; returns the output and the
/// parsed summary (if one was written).
pub fn loader_run(args: &[&str], out: &PathBuf, limit: Duration) -> (Output, Option<serde_json::Value>) {
    let child = Command::new(env!("CARGO_BIN_EXE_loader"))
        .arg("run")
        .args(args)
        .arg("--out")
        .arg(out)
        .arg("--plain")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting loader run");
    let output = wait_bounded(child, limit);
    let summary = std::fs::read_to_string(out.join("summary.json"))
        .ok()
        .map(|t| serde_json::from_str(&t).expect("summary.json is JSON"));
    (output, summary)
}

/// Wait for `child` at most `limit`, killing it past that (the test then fails on its status).
pub fn wait_bounded(child: Child, limit: Duration) -> Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel::<()>();
    let watchdog = thread::spawn(move || {
        if rx.recv_timeout(limit).is_err() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
    });
    let output = child.wait_with_output().expect("waiting for loader");
    let _ = tx.send(());
    let _ = watchdog.join();
    output
}

/// The phase named `name` in a summary.
pub fn phase<'a>(summary: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    summary["phases"]
        .as_array()
        .expect("phases array")
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no phase {name} in {summary}"))
}

/// True when running as root (eBPF tests need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
