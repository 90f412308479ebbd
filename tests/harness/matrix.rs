//! For `verdict_matrix.rs`: the serial lock, one bounded `loader run` with its summary and a
//! one-line matrix row, the checks a scenario makes on the verdict, and the faults the
//! scenarios cause — each one a guard that undoes it on drop (also on panic): busy loops, a
//! host full of a neighbour's TIME_WAIT, a CPU-quota cgroup, a pair of network namespaces
//! joined by a veth, firewall drops inside a namespace, a stripped copy of the binary.
//!
//! Every wait is bounded in count and time. Traffic goes to 127.0.0.0/8 or stays inside
//! network namespaces the scenario creates and deletes.

use std::ffi::CString;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;

/// The loader's CPU; the target (and the neighbours that are not the loader's problem) get
/// [`TARGET_CPU`].
pub const LOADER_CPU: usize = 0;
/// The target's CPU.
pub const TARGET_CPU: usize = 1;

/// `taskset -c 0`: the loader's pin.
pub fn on_loader_cpu() -> Vec<String> {
    vec!["taskset".into(), "-c".into(), LOADER_CPU.to_string()]
}

/// `taskset -c 1`: the target's pin.
pub fn on_target_cpu() -> Vec<String> {
    vec!["taskset".into(), "-c".into(), TARGET_CPU.to_string()]
}

static SERIAL: Mutex<()> = Mutex::new(());

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Root, the two CPUs the matrix pins to, and the serial lock (scenarios share the two
/// cores, so they never run side by side) — or a one-line skip when not root.
pub fn setup(test: &str) -> Option<MutexGuard<'static, ()>> {
    common::root_or_skip(test)?;
    let guard = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let cpus = allowed_cpus();
    assert!(
        cpus.contains(&LOADER_CPU) && cpus.contains(&TARGET_CPU),
        "{test}: the verdict matrix pins the loader to CPU {LOADER_CPU} and the target to CPU {TARGET_CPU}, \
         but this process may run only on {cpus:?}"
    );
    Some(guard)
}

/// CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    loader::health::affinity::allowed().unwrap_or_else(|e| panic!("sched_getaffinity: {e}"))
}

/// The tool on `PATH`, or a loud failure naming the Debian package that provides it.
pub fn require_tool(tool: &str, apt_package: &str, why: &str) -> PathBuf {
    find_tool(tool)
        .unwrap_or_else(|| panic!("`{tool}` is not installed (apt-get install {apt_package}); it is needed to {why}"))
}

/// The tool on `PATH` (plus the sbin directories, which a non-login root shell may lack).
pub fn find_tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .map(|dir| Path::new(dir).join(tool))
        .find(|p| p.is_file())
}

/// Run `program args…`, which must succeed; its stdout.
pub fn must(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {program} {args:?}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// ---------------------------------------------------------------------------------------
// One loader run

/// One `loader run`: which binary, through which wrapper, with which arguments.
pub struct Run {
    scenario: String,
    binary: PathBuf,
    prefix: Vec<String>,
    args: Vec<String>,
    cgroup_procs: Option<CString>,
    limit: Duration,
}

impl Run {
    /// `taskset -c 0 loader run` for `scenario` (its output in `runs/matrix-SCENARIO`),
    /// bounded by 90 s.
    pub fn new(scenario: &str) -> Run {
        Run {
            scenario: scenario.into(),
            binary: PathBuf::from(common::loader_bin()),
            prefix: on_loader_cpu(),
            args: Vec::new(),
            cgroup_procs: None,
            limit: Duration::from_secs(90),
        }
    }

    /// Replace the wrapper (e.g. `ip netns exec NS taskset -c 0`).
    pub fn via(mut self, prefix: Vec<String>) -> Run {
        self.prefix = prefix;
        self
    }

    /// Run another binary than the one cargo built (a stripped copy).
    pub fn binary(mut self, path: &Path) -> Run {
        self.binary = path.to_owned();
        self
    }

    /// The run's arguments (`--out`, `--plain` and `--preflight 0s` are added).
    pub fn args(mut self, args: &[&str]) -> Run {
        self.args.extend(args.iter().map(|a| (*a).to_owned()));
        self
    }

    /// Start the process inside this cgroup (it joins before exec).
    pub fn in_cgroup(mut self, cgroup: &CpuQuota) -> Run {
        self.cgroup_procs = Some(CString::new(cgroup.dir.join("cgroup.procs").as_os_str().as_bytes()).expect("path"));
        self
    }

    /// Wall-clock bound of the whole run (killed past it; the scenario then fails).
    pub fn limit(mut self, limit: Duration) -> Run {
        self.limit = limit;
        self
    }

    /// Run to the end.
    pub fn run(self) -> Outcome {
        self.spawn().finish()
    }

    /// Start it; [`Running::finish`] collects it.
    pub fn spawn(self) -> Running {
        let out = common::out_dir(&format!("matrix-{}", self.scenario));
        let mut command = Command::new(self.prefix.first().map_or(self.binary.as_os_str(), |p| p.as_ref()));
        if !self.prefix.is_empty() {
            command.args(&self.prefix[1..]).arg(&self.binary);
        }
        command.arg("run").args(&self.args);
        if !self.args.iter().any(|a| a == "--preflight") {
            command.args(["--preflight", "0s"]);
        }
        command
            .arg("--out")
            .arg(&out)
            .arg("--plain")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(procs) = self.cgroup_procs.clone() {
            // SAFETY: open, write, close and getpid are async-signal-safe; the pid is formatted
            // into a stack buffer, nothing is allocated between fork and exec.
            unsafe {
                command.pre_exec(move || {
                    let mut buf = [0u8; 16];
                    let mut n = libc::getpid() as u64;
                    let mut at = buf.len();
                    loop {
                        at -= 1;
                        buf[at] = b'0' + (n % 10) as u8;
                        n /= 10;
                        if n == 0 {
                            break;
                        }
                    }
                    let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                    if fd < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    let len = buf.len() - at;
                    let written = libc::write(fd, buf[at..].as_ptr().cast(), len);
                    let err = std::io::Error::last_os_error();
                    libc::close(fd);
                    if written != len as isize {
                        return Err(err);
                    }
                    Ok(())
                })
            };
        }
        let started = Instant::now();
        let mut child = command.spawn().unwrap_or_else(|e| panic!("starting {:?}: {e}", self.prefix));
        let pid = child.id() as libc::pid_t;
        let (line_tx, lines) = mpsc::channel::<String>();
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let reader = |stream: Box<dyn std::io::Read + Send>, tx: mpsc::Sender<String>| {
            let (done_tx, done) = mpsc::channel::<String>();
            thread::spawn(move || {
                let mut all = String::new();
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                // Bounded by the pipe: it ends when the child (killed at the latest at its
                // limit) closes it.
                while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                    let _ = tx.send(line.trim_end().to_owned());
                    all.push_str(&line);
                    line.clear();
                }
                let _ = done_tx.send(all);
            });
            done
        };
        let stdout_done = reader(Box::new(stdout), line_tx.clone());
        let stderr_done = reader(Box::new(stderr), line_tx);
        Running {
            child: Some(child),
            pid,
            lines,
            stdout_done,
            stderr_done,
            started,
            limit: self.limit,
            out,
            scenario: self.scenario,
        }
    }
}

/// A `loader run` under way, killed on drop if not finished.
pub struct Running {
    child: Option<Child>,
    /// Its pid (the wrappers exec, so this is the loader's own process).
    pub pid: libc::pid_t,
    lines: Receiver<String>,
    stdout_done: Receiver<String>,
    stderr_done: Receiver<String>,
    started: Instant,
    limit: Duration,
    out: PathBuf,
    scenario: String,
}

impl Running {
    /// Wait (at most `within`) for an output line that `wanted` accepts.
    pub fn wait_line(&self, within: Duration, wanted: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.lines.recv_timeout(left) {
                Ok(line) if wanted(&line) => return Some(line),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    /// Wait for the exit (killing it past the limit) and read the summary back.
    pub fn finish(mut self) -> Outcome {
        let mut child = self.child.take().expect("not finished yet");
        let deadline = self.started + self.limit;
        let mut killed = false;
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                killed = true;
                break child.wait().expect("wait after kill");
            }
            thread::sleep(Duration::from_millis(20));
        };
        let stdout = self.stdout_done.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
        let mut stderr = self.stderr_done.recv_timeout(Duration::from_secs(10)).unwrap_or_default();
        if killed {
            stderr.push_str(&format!("\n[matrix: killed after {:?}]", self.limit));
        }
        let summary = std::fs::read_to_string(self.out.join("summary.json"))
            .ok()
            .map(|t| serde_json::from_str(&t).expect("summary.json is JSON"));
        Outcome {
            scenario: std::mem::take(&mut self.scenario),
            code: status.code(),
            stdout,
            stderr,
            summary,
            out: self.out.clone(),
            load: load_average(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A finished run.
pub struct Outcome {
    pub scenario: String,
    /// Exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub summary: Option<Value>,
    pub out: PathBuf,
    /// `/proc/loadavg`'s 1-minute figure when the run ended: how busy the shared host was.
    pub load: f64,
}

impl Outcome {
    /// stdout and stderr, for failure messages.
    pub fn show(&self) -> String {
        format!("exit {:?}\nstdout:\n{}\nstderr:\n{}", self.code, self.stdout, self.stderr)
    }

    /// The summary, which must exist.
    pub fn summary(&self) -> &Value {
        self.summary.as_ref().unwrap_or_else(|| panic!("{}: no summary.json\n{}", self.scenario, self.show()))
    }

    /// `verdict.reasons`.
    pub fn reasons(&self) -> Vec<&Value> {
        self.summary()["verdict"]["reasons"].as_array().map(|a| a.iter().collect()).unwrap_or_default()
    }

    /// Reasons that invalidate the run.
    pub fn invalidating(&self) -> Vec<&Value> {
        self.reasons().into_iter().filter(|r| r["invalidates"] == true).collect()
    }

    /// `verdict.trusted`.
    pub fn trusted(&self) -> Option<bool> {
        self.summary()["verdict"]["trusted"].as_bool()
    }

    /// The measured phase (`main`), else the last one.
    pub fn main_phase(&self) -> &Value {
        let phases = self.summary()["phases"].as_array();
        phases.and_then(|p| p.iter().find(|p| p["name"] == "main").or_else(|| p.last())).unwrap_or(&Value::Null)
    }

    /// True (after a one-line skip) when the probes are missing only because this build has no
    /// eBPF objects, outside CI; any other missing probes are left to the checks.
    pub fn skip_without_ebpf(&self) -> bool {
        let Some(s) = &self.summary else { return false };
        let why = s["probes"]["unavailable_reason"].as_str().unwrap_or("");
        if s["probes"]["available"] != true && !ci() && why.contains("built without eBPF") {
            eprintln!("skipping {}: {why}", self.scenario);
            return true;
        }
        false
    }
}

impl Outcome {
    /// The busiest second of CPU `cpu` (`health.series[].core_busy_pct`), percent.
    pub fn core_busy_max(&self, cpu: usize) -> Option<f64> {
        self.summary.as_ref()?["health"]["series"]
            .as_array()?
            .iter()
            .filter_map(|s| s["core_busy_pct"][cpu].as_f64())
            .reduce(f64::max)
    }
}

/// The 1-minute load average.
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().and_then(|w| w.parse().ok()))
        .unwrap_or(f64::NAN)
}

fn ms(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |x| if x >= 10.0 { format!("{x:.0}") } else { format!("{x:.2}") })
}

fn code_side(r: &Value) -> String {
    format!("{}/{}", r["code"].as_str().unwrap_or("?"), r["side"].as_str().unwrap_or("?"))
}

/// The figures every row shows.
fn figures(o: &Outcome) -> String {
    let Some(s) = &o.summary else { return format!("no summary.json, host load {:.2}", o.load) };
    let main = o.main_phase();
    let p = &s["probes"];
    let rq = p["runqueue_us"]["p99"].as_f64().map(|us| Value::from(us / 1000.0)).unwrap_or(Value::Null);
    let errors: u64 = main["errors"].as_object().map_or(0, |e| e.values().filter_map(Value::as_u64).sum());
    let ports = p["ephemeral_ports_max_ratio"]
        .as_f64()
        .or_else(|| s["health"]["peaks"]["ephemeral_ports_max_ratio"].as_f64())
        .map_or("-".into(), |r| format!("{:.0}%", r * 100.0));
    format!(
        "lag p99 {} ms, read lag p99 {} ms, rq p99 {} ms over {} waits, sent {}/{}, lat p99 {} ms, cpu p95 {}%, TW host {} / probe live {}, ports {}, \
         cg thr {} ms, syn-rtx {}, rtx {}, ok {}/{} (err {errors}, late {}, by the loader {}, waited {}, of them the loader's {}), host load {:.2}",
        ms(&main["send_lag_ms"]["p99"]),
        ms(&main["read_lag_ms"]["p99"]),
        ms(&rq),
        p["runqueue_us"]["count"],
        main["sent"],
        main["requests"],
        ms(&main["latency_ms"]["p99"]),
        ms(&s["loader"]["cpu_p95"]),
        s["health"]["peaks"]["time_wait_max"],
        p["time_wait"]["max_live"],
        ports,
        ms(&s["health"]["peaks"]["cgroup_throttled_ms"]),
        p["syn_retransmits"],
        p["retransmits"],
        main["ok"],
        main["requests"],
        main["late"],
        main["late_unpooled"],
        main["waited_for_connection"],
        main["waited_on_loader"],
        o.load,
    )
}

/// What a scenario expects of a run, checked all at once: the verdict's mistakes and the
/// set-up's are kept apart, the matrix row is printed (and appended to
/// `CARGO_TARGET_TMPDIR/verdict-matrix.txt`) before anything fails.
pub struct Check<'a> {
    o: &'a Outcome,
    want: String,
    verdict: Vec<String>,
    set_up: Vec<String>,
    extra: Vec<String>,
}

impl<'a> Check<'a> {
    pub fn new(o: &'a Outcome) -> Check<'a> {
        let mut check = Check { o, want: String::new(), verdict: Vec::new(), set_up: Vec::new(), extra: Vec::new() };
        match o.code {
            Some(0 | 3 | 4) => {}
            other => check.set_up.push(format!("loader exited {other:?}, expected 0, 3 or 4")),
        }
        if let Some(s) = &o.summary {
            if s["probes"]["available"] != true {
                check.set_up.push(format!("probes unavailable as root: {}", s["probes"]["unavailable_reason"]));
            }
        } else {
            check.set_up.push("no summary.json".into());
        }
        check
    }

    fn has_summary(&self) -> bool {
        self.o.summary.is_some()
    }

    /// A figure for the row.
    pub fn note(&mut self, text: impl Into<String>) -> &mut Self {
        self.extra.push(text.into());
        self
    }

    /// The set-up did what the scenario needs (else the scenario proves nothing).
    pub fn set_up(&mut self, ok: bool, what: impl Into<String>) -> &mut Self {
        if !ok {
            self.set_up.push(what.into());
        }
        self
    }

    /// Something else the loader must have done (its report, not the set-up).
    pub fn expect(&mut self, ok: bool, what: impl Into<String>) -> &mut Self {
        if !ok {
            self.verdict.push(what.into());
        }
        self
    }

    /// Trusted, nothing invalidates, exit 0 or 4.
    pub fn trusted(&mut self) -> &mut Self {
        self.want.push_str("trusted");
        if !self.has_summary() {
            return self;
        }
        if self.o.trusted() != Some(true) {
            self.verdict.push("untrusted".into());
        }
        let bad: Vec<String> = self.o.invalidating().iter().map(|r| code_side(r)).collect();
        if !bad.is_empty() {
            self.verdict.push(format!("invalidated by {}", bad.join(", ")));
        }
        if self.o.code == Some(3) {
            self.verdict.push("exit 3".into());
        }
        self
    }

    /// Untrusted (exit 3) and every invalidating reason on `side` — at least one of them
    /// with a code from `codes` when it is not empty.
    pub fn untrusted_on(&mut self, side: &str, codes: &[&str]) -> &mut Self {
        self.want.push_str(&format!("UNTRUSTED/{side}"));
        if !codes.is_empty() {
            self.want.push_str(&format!(" ({})", codes.join("|")));
        }
        if !self.has_summary() {
            return self;
        }
        if self.o.trusted() != Some(false) {
            self.verdict.push("trusted".into());
        }
        let invalidating = self.o.invalidating();
        if invalidating.is_empty() && self.o.trusted() == Some(false) {
            self.verdict.push("untrusted without an invalidating reason".into());
        }
        let elsewhere: Vec<String> = invalidating.iter().filter(|r| r["side"] != side).map(|r| code_side(r)).collect();
        if !elsewhere.is_empty() {
            self.verdict.push(format!("invalidating reasons not on side {side}: {}", elsewhere.join(", ")));
        }
        if !codes.is_empty() && !invalidating.iter().any(|r| codes.iter().any(|c| r["code"] == *c)) {
            self.verdict.push(format!("no invalidating {}", codes.join(" or ")));
        }
        if self.o.code != Some(3) && self.o.code.is_some() {
            self.verdict.push(format!("exit {:?}, not 3", self.o.code));
        }
        self
    }

    /// A reason on `side` that does not invalidate — with a code from `codes` when not empty.
    pub fn annotated_on(&mut self, side: &str, codes: &[&str]) -> &mut Self {
        let what = if codes.is_empty() { "any".to_owned() } else { codes.join("|") };
        self.want.push_str(&format!(" + note {what}/{side}"));
        if !self.has_summary() {
            return self;
        }
        let found = self.o.reasons().into_iter().any(|r| {
            r["side"] == side
                && r["invalidates"] == false
                && (codes.is_empty() || codes.iter().any(|c| r["code"] == *c))
        });
        if !found {
            self.verdict.push(format!("no non-invalidating {what} reason on side {side}"));
        }
        self
    }

    /// No reason with one of `codes` lays anything at the target's door: the evidence on the
    /// loader's side must not be turned into a finding about the target.
    pub fn no_target_blame(&mut self, codes: &[&str]) -> &mut Self {
        self.want.push_str(&format!(", no [target] {}", codes.join("|")));
        if !self.has_summary() {
            return self;
        }
        let blamed: Vec<String> = self
            .o
            .reasons()
            .iter()
            .filter(|r| r["side"] == "target" && codes.iter().any(|c| r["code"] == *c))
            .map(|r| code_side(r))
            .collect();
        if !blamed.is_empty() {
            self.verdict.push(format!("blames the target: {}", blamed.join(", ")));
        }
        self
    }

    /// No reason whose code or detail mentions `word` invalidates the run.
    pub fn none_invalidating_mentions(&mut self, word: &str) -> &mut Self {
        self.want.push_str(&format!(", nothing about {word} invalidates"));
        if !self.has_summary() {
            return self;
        }
        let word = word.to_lowercase();
        let bad: Vec<String> = self
            .o
            .invalidating()
            .iter()
            .filter(|r| {
                r["code"].as_str().unwrap_or("").to_lowercase().contains(&word)
                    || r["detail"].as_str().unwrap_or("").to_lowercase().contains(&word)
            })
            .map(|r| code_side(r))
            .collect();
        if !bad.is_empty() {
            self.verdict.push(format!("invalidating reasons about {word}: {}", bad.join(", ")));
        }
        self
    }

    /// Print the row; fail when the verdict or the set-up did not do what was expected.
    pub fn finish(&mut self) {
        let o = self.o;
        let (trusted, invalidating, notes) = match &o.summary {
            Some(_) => {
                let reasons = o.reasons();
                let inval: Vec<String> =
                    reasons.iter().filter(|r| r["invalidates"] == true).map(|r| code_side(r)).collect();
                let notes: Vec<String> =
                    reasons.iter().filter(|r| r["invalidates"] != true).map(|r| code_side(r)).collect();
                let t = match o.trusted() {
                    Some(true) => "TRUSTED",
                    Some(false) => "UNTRUSTED",
                    None => "?",
                };
                (t, inval, notes)
            }
            None => ("-", Vec::new(), Vec::new()),
        };
        let list = |v: &[String]| if v.is_empty() { "-".to_owned() } else { v.join(",") };
        let result = if self.set_up.is_empty() && self.verdict.is_empty() {
            "ok".to_owned()
        } else {
            let mut parts = Vec::new();
            if !self.set_up.is_empty() {
                parts.push(format!("SET-UP PROBLEM: {}", self.set_up.join("; ")));
            }
            if !self.verdict.is_empty() {
                parts.push(format!("VERDICT MISMATCH: {}", self.verdict.join("; ")));
            }
            parts.join(" | ")
        };
        let row = format!(
            "MATRIX {:<44} want {:<40} got {:<9} exit {:<4} invalidating [{}] notes [{}] | {} | {} | {}",
            o.scenario,
            self.want,
            trusted,
            o.code.map_or("sig".into(), |c| c.to_string()),
            list(&invalidating),
            list(&notes),
            figures(o),
            if self.extra.is_empty() { "-".into() } else { self.extra.join("; ") },
            result,
        );
        eprintln!("{row}");
        let file = PathBuf::from(common::tmp_dir()).join("verdict-matrix.txt");
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&file) {
            let _ = writeln!(f, "{row}");
        }
        if !(self.set_up.is_empty() && self.verdict.is_empty()) {
            let verdict = o.summary.as_ref().map_or(Value::Null, |s| s["verdict"].clone());
            panic!("{}: {result}\nverdict: {verdict:#}\n{}", o.scenario, o.show());
        }
    }
}

// ---------------------------------------------------------------------------------------
// Faults, each undone on drop

/// Host-wide TCP sockets in TIME_WAIT (`/proc/net/sockstat`, `tw`), in this network namespace.
pub fn host_time_wait() -> u64 {
    let text = std::fs::read_to_string("/proc/net/sockstat").expect("/proc/net/sockstat");
    text.lines()
        .find_map(|l| l.strip_prefix("TCP: "))
        .and_then(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words.windows(2).find(|w| w[0] == "tw").and_then(|w| w[1].parse().ok())
        })
        .expect("a tw count in /proc/net/sockstat")
}

/// A neighbour's TIME_WAIT: short connections to a loopback listener of its own, the client
/// closing first, so each leaves its client side in TIME_WAIT (60 s). On drop they are
/// destroyed (`ss -K`, only those to this listener's port) so later runs see a quiet host.
pub struct NeighbourTimeWait {
    port: u16,
    /// Connections made.
    pub made: usize,
}

impl NeighbourTimeWait {
    /// Make `count` connections, bounded by 60 s.
    pub fn create(count: usize) -> NeighbourTimeWait {
        require_tool("ss", "iproute2", "clear the neighbour's TIME_WAIT sockets afterwards");
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback listener");
        let port = listener.local_addr().expect("local addr").port();
        let mut neighbour = NeighbourTimeWait { port, made: 0 };
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut buf = [0u8; 16];
        while neighbour.made < count {
            assert!(Instant::now() < deadline, "only {} of {count} connections in 60 s", neighbour.made);
            let client = TcpStream::connect(("127.0.0.1", port)).expect("connect to the neighbour's listener");
            let (mut server, _) = listener.accept().expect("accept");
            // The client closes first: its side goes through FIN_WAIT to TIME_WAIT.
            let _ = client.shutdown(Shutdown::Both);
            drop(client);
            server.set_read_timeout(Some(Duration::from_secs(1))).expect("read timeout");
            let _ = server.read(&mut buf); // EOF: the client's FIN arrived
            drop(server);
            neighbour.made += 1;
        }
        neighbour
    }
}

impl Drop for NeighbourTimeWait {
    fn drop(&mut self) {
        let filter = format!("( dport = :{} )", self.port);
        let _ = Command::new("ss")
            .args(["-K", "-t", "-n", "state", "time-wait", &filter])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Which cgroup hierarchy holds the `cpu` controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

/// A child cgroup with a CPU quota (cgroup v1 `cpu.cfs_quota_us`, or v2 `cpu.max`), removed on
/// drop after moving anything left in it back to its parent.
pub struct CpuQuota {
    pub dir: PathBuf,
    pub version: CgroupVersion,
}

impl CpuQuota {
    /// `percent` of one CPU per 100 ms period.
    pub fn create(tag: &str, percent: u32) -> CpuQuota {
        let name = format!("loader-matrix-{}-{tag}", std::process::id());
        let period = 100_000u64;
        let quota = period * u64::from(percent) / 100;
        let v1 = ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.join("cpu.cfs_quota_us").exists());
        let (dir, version) = if let Some(root) = v1 {
            (root.join(&name), CgroupVersion::V1)
        } else {
            let root = PathBuf::from("/sys/fs/cgroup");
            let controllers = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_else(|e| {
                panic!("no cgroup cpu controller: neither /sys/fs/cgroup/cpu (v1) nor /sys/fs/cgroup/cgroup.controllers (v2): {e}")
            });
            assert!(
                controllers.split_whitespace().any(|c| c == "cpu"),
                "cgroup v2 without the cpu controller: {controllers:?}"
            );
            let subtree = root.join("cgroup.subtree_control");
            let enabled = std::fs::read_to_string(&subtree).unwrap_or_default();
            if !enabled.split_whitespace().any(|c| c == "cpu") {
                std::fs::write(&subtree, "+cpu")
                    .unwrap_or_else(|e| panic!("enabling cpu in {}: {e}", subtree.display()));
            }
            (root.join(&name), CgroupVersion::V2)
        };
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        let cgroup = CpuQuota { dir, version };
        match version {
            CgroupVersion::V1 => {
                cgroup.write("cpu.cfs_period_us", &period.to_string());
                cgroup.write("cpu.cfs_quota_us", &quota.to_string());
            }
            CgroupVersion::V2 => cgroup.write("cpu.max", &format!("{quota} {period}")),
        }
        cgroup
    }

    fn write(&self, file: &str, value: &str) {
        let path = self.dir.join(file);
        std::fs::write(&path, value).unwrap_or_else(|e| panic!("writing {value:?} to {}: {e}", path.display()));
    }

    /// (periods throttled, time throttled in ms) from `cpu.stat`.
    pub fn throttled(&self) -> (u64, f64) {
        let text = std::fs::read_to_string(self.dir.join("cpu.stat")).unwrap_or_default();
        let get = |key: &str| {
            text.lines().find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse::<u64>().ok())).unwrap_or(0)
        };
        let ms = match self.version {
            CgroupVersion::V1 => get("throttled_time ") as f64 / 1e6,
            CgroupVersion::V2 => get("throttled_usec ") as f64 / 1e3,
        };
        (get("nr_throttled "), ms)
    }

    /// The quota as written, for the row.
    pub fn describe(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.dir.join(f)).unwrap_or_default().trim().to_owned();
        match self.version {
            CgroupVersion::V1 => {
                format!("v1 cfs_quota_us {} / period {}", read("cpu.cfs_quota_us"), read("cpu.cfs_period_us"))
            }
            CgroupVersion::V2 => format!("v2 cpu.max {}", read("cpu.max")),
        }
    }
}

impl Drop for CpuQuota {
    fn drop(&mut self) {
        let parent_procs = self.dir.parent().map(|p| p.join("cgroup.procs"));
        for _ in 0..50 {
            let left = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
            for pid in left.split_whitespace() {
                if let Some(parent) = &parent_procs {
                    let _ = std::fs::write(parent, pid);
                }
            }
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        eprintln!("warning: could not remove cgroup {}", self.dir.display());
    }
}

/// Two network namespaces — the loader's and the target's — joined by a veth pair
/// (`veth0` in each, 10.231.0.1/24 and 10.231.0.2/24). Nothing on the host's own network
/// changes; deleting the namespaces (on drop) deletes the pair.
pub struct NetPair {
    pub loader: common::Netns,
    pub target: common::Netns,
}

/// The loader namespace's address.
pub const LOADER_IP: &str = "10.231.0.1";
/// The target namespace's address.
pub const TARGET_IP: &str = "10.231.0.2";

impl NetPair {
    pub fn create(tag: &str) -> NetPair {
        require_tool("ip", "iproute2", "create network namespaces");
        let loader = common::Netns::create(&format!("{tag}-l"));
        let target = common::Netns::create(&format!("{tag}-t"));
        loader.ip(&["link", "add", "veth0", "type", "veth", "peer", "name", "veth0", "netns", &target.name]);
        loader.ip(&["addr", "add", &format!("{LOADER_IP}/24"), "dev", "veth0"]);
        target.ip(&["addr", "add", &format!("{TARGET_IP}/24"), "dev", "veth0"]);
        loader.ip(&["link", "set", "veth0", "up"]);
        target.ip(&["link", "set", "veth0", "up"]);
        NetPair { loader, target }
    }

    /// `ip netns exec LOADER-NS taskset -c 0`.
    pub fn loader_prefix(&self) -> Vec<String> {
        let mut p: Vec<String> = self.loader.exec().iter().map(|s| (*s).to_owned()).collect();
        p.extend(on_loader_cpu());
        p
    }

    /// `ip netns exec TARGET-NS taskset -c 1`.
    pub fn target_prefix(&self) -> Vec<String> {
        let mut p: Vec<String> = self.target.exec().iter().map(|s| (*s).to_owned()).collect();
        p.extend(on_target_cpu());
        p
    }
}

/// Which packet filter a namespace's drops are written with.
#[derive(Clone, Copy, Debug)]
pub enum Firewall {
    Nft,
    Iptables,
}

impl Firewall {
    /// nft if installed, else iptables; a loud failure without either.
    pub fn pick() -> Firewall {
        if find_tool("nft").is_some() {
            Firewall::Nft
        } else if find_tool("iptables").is_some() {
            Firewall::Iptables
        } else {
            panic!(
                "neither `nft` (apt-get install nftables) nor `iptables` (apt-get install iptables) is installed; \
                 one is needed to drop packets inside the test's network namespace"
            )
        }
    }

    /// In namespace `ns`, drop the incoming TCP segments that `what` selects, `percent` % of
    /// them at random, counting what was dropped.
    pub fn drop_incoming(self, ns: &common::Netns, what: Segments, percent: u32) {
        match self {
            Firewall::Nft => {
                let selector = match what {
                    Segments::Syn => "tcp flags & (syn | ack) == syn",
                    Segments::AnyTcp => "meta l4proto tcp",
                };
                let rules = format!(
                    "table inet loader_matrix {{\n  chain input {{\n    type filter hook input priority 0; policy accept;\n    \
                     {selector} numgen random mod 100 < {percent} counter drop\n  }}\n}}\n"
                );
                let mut child = Command::new("ip")
                    .args(["netns", "exec", &ns.name, "nft", "-f", "-"])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("ip netns exec … nft");
                child.stdin.take().expect("stdin").write_all(rules.as_bytes()).expect("writing the rules");
                let out = common::wait_bounded(child, Duration::from_secs(10));
                assert!(out.status.success(), "nft -f: {}\n{rules}", String::from_utf8_lossy(&out.stderr));
            }
            Firewall::Iptables => {
                let probability = format!("{:.4}", f64::from(percent) / 100.0);
                let mut args = vec!["netns", "exec", &ns.name, "iptables", "-A", "INPUT", "-p", "tcp"];
                if matches!(what, Segments::Syn) {
                    args.push("--syn");
                }
                args.extend(["-m", "statistic", "--mode", "random", "--probability", &probability, "-j", "DROP"]);
                must("ip", &args);
            }
        }
    }

    /// Packets dropped so far by the rules of [`Firewall::drop_incoming`] in `ns`.
    pub fn dropped(self, ns: &common::Netns) -> u64 {
        match self {
            Firewall::Nft => {
                let text = must("ip", &["netns", "exec", &ns.name, "nft", "list", "table", "inet", "loader_matrix"]);
                text.split("counter packets ")
                    .skip(1)
                    .filter_map(|rest| rest.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()))
                    .sum()
            }
            Firewall::Iptables => {
                let text = must("ip", &["netns", "exec", &ns.name, "iptables", "-L", "INPUT", "-v", "-x", "-n"]);
                text.lines()
                    .skip(2)
                    .filter(|l| l.contains("DROP"))
                    .filter_map(|l| l.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()))
                    .sum()
            }
        }
    }
}

/// What [`Firewall::drop_incoming`] drops.
#[derive(Clone, Copy, Debug)]
pub enum Segments {
    /// Connection-opening SYNs only.
    Syn,
    /// Every TCP segment.
    AnyTcp,
}

/// `tc qdisc add dev veth0 root netem ARGS…` in `ns`: `Ok` when it took, `Err(why)` when this
/// kernel has no netem (`CONFIG_NET_SCH_NETEM`); any other failure fails loudly.
pub fn try_netem(ns: &common::Netns, args: &[&str]) -> Result<(), String> {
    require_tool("tc", "iproute2", "shape the veth");
    let mut all = vec!["-n", ns.name.as_str(), "qdisc", "add", "dev", "veth0", "root", "netem"];
    all.extend_from_slice(args);
    let out = Command::new("tc").args(&all).stdin(Stdio::null()).output().expect("run tc");
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    let lower = err.to_lowercase();
    if lower.contains("unknown qdisc") || lower.contains("qdisc kind is unknown") || lower.contains("not found") {
        return Err(format!("netem unavailable in this kernel (tc: {err})"));
    }
    panic!("tc {all:?} failed: {err}");
}

/// A copy of `binary` stripped of its symbol table (`strip -o`), in the target tmp dir.
pub fn stripped_copy(binary: &Path) -> PathBuf {
    require_tool("strip", "binutils", "strip a copy of the loader");
    let dir = PathBuf::from(common::tmp_dir()).join("matrix");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let out = dir.join("loader-stripped");
    let _ = std::fs::remove_file(&out);
    must("strip", &["--strip-all", "-o", out.to_str().expect("utf-8 path"), binary.to_str().expect("utf-8 path")]);
    out
}

/// Whether `binary`'s symbol tables (static or dynamic) name `symbol` (`nm`, `nm -D`).
pub fn has_symbol(binary: &Path, symbol: &str) -> bool {
    require_tool("nm", "binutils", "check the stripped copy");
    let path = binary.to_str().expect("utf-8 path");
    [&["--defined-only", path][..], &["-D", "--defined-only", path][..]].iter().any(|args| {
        let out = Command::new("nm").args(*args).stdin(Stdio::null()).output().expect("run nm");
        String::from_utf8_lossy(&out.stdout).lines().any(|l| l.split_whitespace().last() == Some(symbol))
    })
}

/// `/proc/PID/stat` state letter (`T` = stopped).
pub fn process_state(pid: libc::pid_t) -> Option<char> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    text.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next())
}

/// Sends SIGCONT on drop, so a stopped loader never stays stopped past a failure.
pub struct Continue(pub libc::pid_t);

impl Drop for Continue {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// `sysctl -n KEY` inside `ns`.
pub fn sysctl_in(ns: &common::Netns, key: &str) -> String {
    must("ip", &["netns", "exec", &ns.name, "sysctl", "-n", key]).split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `sysctl -w KEY=VALUE` inside `ns`.
pub fn set_sysctl_in(ns: &common::Netns, key: &str, value: &str) {
    require_tool("sysctl", "procps", "set per-namespace sysctls");
    must("ip", &["netns", "exec", &ns.name, "sysctl", "-q", "-w", &format!("{key}={value}")]);
}

/// Wait at most `limit` for `check` to hold, polling every 20 ms.
pub fn wait_until(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}
