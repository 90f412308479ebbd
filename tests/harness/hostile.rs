//! For `hostile.rs`: the hostile server (`hostile_server.py`) as a child process killed on
//! drop, and one bounded `loader run` against it with everything the checks need. Every
//! wait is bounded; all traffic goes to 127.0.0.1.

use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;

/// The server script, next to this test.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/hostile_server.py");

/// A running `hostile_server.py`, killed on drop. Its stderr (tracebacks, if any) goes to a
/// file, quoted in failure messages.
pub struct HostileServer {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    stderr_path: PathBuf,
}

impl HostileServer {
    /// Start the server and wait (at most [`common::PATIENCE`]) for `listening 127.0.0.1:PORT`.
    pub fn start(dir: &Path) -> HostileServer {
        std::fs::create_dir_all(dir).expect("creating the run directory");
        let stderr_path = dir.join("hostile_server.stderr");
        let stderr = std::fs::File::create(&stderr_path).expect("creating the server's stderr file");
        let mut child = Command::new("python3")
            .arg("-u")
            .arg(SCRIPT)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("starting python3 {SCRIPT}: {e} (python3 ≥ 3.11 is needed)"));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let _ = tx.send(line);
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        let mut server = HostileServer { child, addr: "0.0.0.0:0".parse().expect("static"), stderr_path };
        let line = rx
            .recv_timeout(common::PATIENCE)
            .unwrap_or_else(|_| panic!("no listening line from the hostile server within 10 s\n{}", server.stderr()));
        let addr = line
            .trim_end()
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}\n{}", server.stderr()));
        server.addr = addr.parse().unwrap_or_else(|_| panic!("not an address: {addr:?}"));
        assert!(server.addr.ip().is_loopback(), "the hostile server must listen on loopback only");
        server
    }

    /// `http://127.0.0.1:PORT/PATH` (`path` starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// What the server wrote on stderr so far (a Python traceback means the server broke,
    /// not the loader).
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// The server's own counts (`GET /__stats`): requests per path, statuses sent by
    /// `/status-mix`, connections accepted. Bounded by 5 s.
    pub fn stats(&self) -> Value {
        let mut stream =
            TcpStream::connect_timeout(&self.addr, Duration::from_secs(5)).expect("connecting for /__stats");
        stream.set_read_timeout(Some(Duration::from_secs(5))).expect("read timeout");
        stream.set_write_timeout(Some(Duration::from_secs(5))).expect("write timeout");
        stream.write_all(b"GET /__stats HTTP/1.1\r\nHost: hostile\r\n\r\n").expect("asking for /__stats");
        let mut response = Vec::new();
        stream.read_to_end(&mut response).expect("reading /__stats (the server closes after it)");
        let text = String::from_utf8_lossy(&response);
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        serde_json::from_str(body).unwrap_or_else(|e| panic!("/__stats is not JSON ({e}): {text}"))
    }
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One finished (or killed) `loader run`.
pub struct Run {
    /// Exit status, stdout and stderr.
    pub output: Output,
    /// `summary.json`, if it was written.
    pub summary: Option<Value>,
    /// Wall-clock time from spawn to exit.
    pub elapsed: Duration,
    /// The wall-clock bound the run was held to (killed with SIGKILL past it).
    pub limit: Duration,
}

impl Run {
    /// `loader run ARGS` (plus `--out DIR --plain --preflight 0s`, added by
    /// [`common::loader_run`]), killed past `limit`.
    pub fn start(args: &[&str], out: &Path, limit: Duration) -> Run {
        let started = Instant::now();
        let (output, summary) = common::loader_run(args, out, limit);
        Run { output, summary, elapsed: started.elapsed(), limit }
    }

    /// Exit code, or how it ended otherwise — a hang (killed by the watchdog) is told apart
    /// from a crash (any other signal).
    pub fn ending(&self) -> String {
        match (self.output.status.code(), self.output.status.signal()) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(libc::SIGKILL)) if self.elapsed >= self.limit => {
                format!("HUNG: killed by the watchdog after {:?}", self.limit)
            }
            (None, Some(sig)) => {
                format!("CRASHED: signal {sig}{}", if self.output.status.core_dumped() { " (core dumped)" } else { "" })
            }
            (None, None) => "ended without code or signal".into(),
        }
    }

    /// The loader's stderr.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    /// The summary's phases (empty without a summary).
    pub fn phases(&self) -> Vec<&Value> {
        self.summary.as_ref().and_then(|s| s["phases"].as_array()).map(|a| a.iter().collect()).unwrap_or_default()
    }

    /// Sum of a phase count over all phases.
    pub fn total(&self, field: &str) -> u64 {
        self.phases().iter().map(|p| p[field].as_u64().unwrap_or(0)).sum()
    }

    /// Count of error class `class` over all phases (0 if the class is absent).
    pub fn errors(&self, class: &str) -> u64 {
        self.phases().iter().map(|p| p["errors"][class].as_u64().unwrap_or(0)).sum()
    }

    /// Every error class with a non-zero count over all phases, with its count, sorted.
    pub fn classes_seen(&self) -> Vec<(String, u64)> {
        let mut seen = std::collections::BTreeMap::<String, u64>::new();
        for p in self.phases() {
            for (class, n) in p["errors"].as_object().into_iter().flatten() {
                *seen.entry(class.clone()).or_default() += n.as_u64().unwrap_or(0);
            }
        }
        seen.into_iter().filter(|&(_, n)| n > 0).collect()
    }

    /// `requests − (ok + Σ errors)` per phase, as `name: diff` (0 = exact accounting).
    pub fn accounting(&self) -> Vec<(String, i64)> {
        self.phases()
            .iter()
            .map(|p| {
                let requests = p["requests"].as_u64().unwrap_or(0) as i64;
                let ok = p["ok"].as_u64().unwrap_or(0) as i64;
                let errors: i64 =
                    p["errors"].as_object().into_iter().flatten().map(|(_, n)| n.as_u64().unwrap_or(0) as i64).sum();
                (p["name"].as_str().unwrap_or("?").to_string(), requests - ok - errors)
            })
            .collect()
    }

    /// A one-paragraph description of the run, for failure messages and the log.
    pub fn describe(&self) -> String {
        let mut s = format!("{}, wall {:.1?} (limit {:?})", self.ending(), self.elapsed, self.limit);
        match &self.summary {
            None => s.push_str(", NO summary.json"),
            Some(summary) => {
                s.push_str(&format!(
                    "; requests {} sent {} ok {}; classes {:?}; requests−(ok+errors) {:?}",
                    self.total("requests"),
                    self.total("sent"),
                    self.total("ok"),
                    self.classes_seen(),
                    self.accounting()
                ));
                for p in self.phases() {
                    s.push_str(&format!(
                        "; {} send_lag_ms {} latency_ms.max {}",
                        p["name"], p["send_lag_ms"], p["latency_ms"]["max"]
                    ));
                }
                let run = &summary["run"];
                s.push_str(&format!(
                    "; run.elapsed_s {} connections_opened {} retried_on_stale_connection {} abandoned {}",
                    run["elapsed_s"], run["connections_opened"], run["retried_on_stale_connection"], run["abandoned"]
                ));
                s.push_str(&format!("; errors_detail {}", summary.get("errors_detail").unwrap_or(&Value::Null)));
            }
        }
        let stderr = self.stderr();
        let tail: Vec<&str> = stderr.lines().rev().take(12).collect::<Vec<_>>().into_iter().rev().collect();
        s.push_str(&format!("\n  loader stderr (last lines):\n    {}", tail.join("\n    ")));
        s
    }
}
