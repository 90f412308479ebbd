//! Shared by the end-to-end tests: a `loader target` child that is killed on drop, and
//! `loader run` invocations with their summary read back. Every wait is bounded.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{OnceLock, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// The `loader` binary under test, built (or found fresh) once per test process.
///
/// The suites are a crate of their own, so Cargo's `CARGO_BIN_EXE_loader` is not set for
/// them; instead this runs `cargo build -p loader --bin loader` with the profile the suite was
/// built with (a no-op when it is fresh) and returns `<target>/<profile>/loader`.
/// `LOADER_BIN` overrides it (an installed or stripped binary).
pub fn loader_bin() -> &'static str {
    static BIN: OnceLock<String> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Ok(bin) = std::env::var("LOADER_BIN") {
            return bin;
        }
        let profile_dir = profile_dir();
        let mut build = plain_cargo();
        build.args(["build", "--quiet", "-p", "loader", "--bin", "loader"]);
        match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => {}
            Some("release") => {
                build.arg("--release");
            }
            Some(other) => {
                build.args(["--profile", other]);
            }
            None => panic!("no profile directory above the test binary"),
        }
        let status = build
            .env("CARGO_TARGET_DIR", target_dir())
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the loader binary failed: {status}");
        let bin = profile_dir.join("loader");
        assert!(bin.is_file(), "{} is missing after the build", bin.display());
        bin.to_str().expect("a UTF-8 target path").to_owned()
    })
}

/// The cargo that runs the suite, with the environment of a plain `cargo build`: what Cargo
/// sets for a running test is not, and build scripts that watch one of these (ring's watches
/// CARGO_MANIFEST_DIR) would run again and rebuild the loader, minutes each time a suite
/// follows a plain build (xtask's nested builds strip the same ones).
pub fn plain_cargo() -> Command {
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_PKG_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
            ]
            .contains(&key.as_ref())
        {
            cargo.env_remove(key.as_ref());
        }
    }
    cargo
}

/// The target directory the suite was built into (`<target>`, above `<profile>`).
pub fn target_dir() -> PathBuf {
    profile_dir().parent().expect("a target directory above the profile's").to_path_buf()
}

/// Scratch space for the suites' output: `<target>/tmp` (what `CARGO_TARGET_TMPDIR` is for
/// a package's own integration tests).
pub fn tmp_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = profile_dir().parent().expect("a target directory").join("tmp");
        std::fs::create_dir_all(&dir).expect("create the target's tmp directory");
        dir
    })
}

/// `<target>/<profile>`: the test binary lives in its `deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("the test binary's directory");
    deps.parent().expect("a profile directory above deps/").to_path_buf()
}

/// Upper bound on waiting for a child to start.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A running `loader target`, killed on drop.
pub struct Target {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    /// When the process was spawned: the target's own start is at or after this.
    pub spawned: Instant,
    /// When its listening line arrived: the target's own start is at or before this.
    pub listening: Instant,
}

impl Target {
    /// Start `loader target --listen 127.0.0.1:0 FLAGS` and wait for its listening line.
    pub fn start(flags: &[&str]) -> Target {
        target_via(&[], "127.0.0.1:0", flags)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://ADDR/`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// Send `signal` to the target process.
    pub fn signal(&self, signal: libc::c_int) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("a pid");
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "kill failed");
    }

    /// Wait (bounded) for the process to exit.
    pub fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            thread::sleep(Duration::from_millis(10));
        }
        None
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
    let dir = PathBuf::from(tmp_dir()).join("runs").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Run `loader run ARGS --out DIR --plain`, bounded by `limit`; returns the output and the
/// parsed summary (if one was written).
pub fn loader_run(args: &[&str], out: &std::path::Path, limit: Duration) -> (Output, Option<serde_json::Value>) {
    loader_run_via(&[], &[], args, out, limit)
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

/// `PREFIX… loader target --listen LISTEN FLAGS` — the target run through a wrapper such as
/// `ip netns exec NS` or `taskset -c 1` (each execs it, so killing the child kills the
/// target); waits for its listening line like [`Target::start`].
pub fn target_via(prefix: &[&str], listen: &str, flags: &[&str]) -> Target {
    let spawned = Instant::now();
    let mut command = Command::new(prefix.first().copied().unwrap_or(loader_bin()));
    if !prefix.is_empty() {
        command.args(&prefix[1..]).arg(loader_bin());
    }
    let mut child = command
        .args(["target", "--listen", listen])
        .args(flags)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting loader target");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut target = Target { child, addr: "0.0.0.0:0".parse().expect("static"), spawned, listening: spawned };
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let _ = reader.read_line(&mut line);
        let _ = tx.send(line);
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
    });
    let line = rx.recv_timeout(PATIENCE).expect("no listening line within 10 s");
    target.listening = Instant::now();
    let addr = line
        .trim_end()
        .strip_prefix("loader target listening on http://")
        .or_else(|| line.trim_end().strip_prefix("loader target listening on https://"))
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"));
    target.addr = addr.parse().unwrap_or_else(|_| panic!("not an address: {addr:?}"));
    target
}

/// `loader run ARGS` refuses bad input: exit 1, exactly one stderr line
/// `loader: error: KEY: …`, and no summary.
pub fn assert_flag_error(args: &[&str], key: &str, out: &std::path::Path) {
    let (output, summary) = loader_run(args, out, Duration::from_secs(10));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with(&format!("loader: error: {key}:")), "{stderr}");
    assert!(summary.is_none());
}

/// [`loader_run`] through a wrapper (`PREFIX… loader run ARGS --out DIR --plain`) with extra
/// environment variables.
pub fn loader_run_via(
    prefix: &[&str],
    env: &[(&str, String)],
    args: &[&str],
    out: &std::path::Path,
    limit: Duration,
) -> (Output, Option<serde_json::Value>) {
    let mut command = Command::new(prefix.first().copied().unwrap_or(loader_bin()));
    if !prefix.is_empty() {
        command.args(&prefix[1..]).arg(loader_bin());
    }
    let _turn = one_run_at_a_time();
    // The pre-flight noise check (2 s by default) is skipped unless a test asks for it.
    let preflight: &[&str] = if args.contains(&"--preflight") { &[] } else { &["--preflight", "0s"] };
    let child = command
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .arg("run")
        .args(args)
        .args(preflight)
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

/// One load run at a time per test binary: on a 2-core machine two runs side by side would
/// make each other late, and the verdict would rightly say so. [`loader_run`] takes it; a
/// test that starts `loader run` itself holds it for as long as that run lasts (never around
/// a call to [`loader_run`]: the lock is not reentrant).
pub fn one_run_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE_RUN_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_RUN_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Root, or a skip (`None`, after saying why) — but never under CI (`CI=true` runs as root).
pub fn root_or_skip(test: &str) -> Option<()> {
    if is_root() {
        return Some(());
    }
    assert!(std::env::var("CI").map_or(true, |v| v != "true"), "CI=true but not root: {test} needs root");
    eprintln!("skipping {test}: needs root (eBPF probes, network namespaces)");
    None
}

/// A network namespace (`ip netns add`) with `lo` up, deleted on drop (also on failure).
pub struct Netns {
    /// Its name, for `ip netns exec`.
    pub name: String,
}

impl Netns {
    /// `ip netns add loader-t-<pid>-<tag>` and `ip -n … link set lo up`.
    pub fn create(tag: &str) -> Netns {
        let netns = Netns { name: format!("loader-t-{}-{tag}", std::process::id()) };
        run_ip(&["netns", "add", &netns.name]);
        netns.ip(&["link", "set", "lo", "up"]);
        netns
    }

    /// `ip -n NAME ARGS…`, which must succeed.
    pub fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        run_ip(&all);
    }

    /// The wrapper that runs a command inside: `ip netns exec NAME`.
    pub fn exec(&self) -> [&str; 4] {
        ["ip", "netns", "exec", self.name.as_str()]
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

fn run_ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// stdout and stderr of a finished child, for assertion messages.
pub fn show(output: &std::process::Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Let `command`'s process (and whatever it forks) run only on CPU `cpu`, as `taskset -c CPU`
/// would, without a wrapper process between the test and the child it kills.
pub fn pin_to_cpu(command: &mut Command, cpu: usize) {
    // SAFETY: sched_setaffinity is an async-signal-safe system call; nothing else runs between
    // fork and exec.
    unsafe {
        command.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
}

/// Busy-looping shells; killed on drop.
pub struct Hogs(Vec<Child>);

impl Hogs {
    /// `count` shells spinning on `cpu` at nice −10.
    pub fn spawn(cpu: usize, count: usize) -> Hogs {
        Hogs::start(Some(cpu), count, -10)
    }

    /// `count` shells at `nice` wherever the scheduler puts them (a busy neighbour).
    pub fn anywhere(count: usize, nice: i32) -> Hogs {
        Hogs::start(None, count, nice)
    }

    /// `count` shells spinning on `cpu` at `nice`.
    pub fn pinned(cpu: usize, count: usize, nice: i32) -> Hogs {
        Hogs::start(Some(cpu), count, nice)
    }

    /// All still running (none died on us).
    pub fn alive(&mut self) -> bool {
        self.0.iter_mut().all(|c| matches!(c.try_wait(), Ok(None)))
    }

    fn start(cpu: Option<usize>, count: usize, nice: i32) -> Hogs {
        let hogs = (0..count)
            .map(|_| {
                let mut command = Command::new("sh");
                command.args(["-c", "while :; do :; done"]).stdin(Stdio::null());
                // SAFETY: sched_setaffinity and setpriority are async-signal-safe system calls;
                // nothing else runs between fork and exec.
                unsafe {
                    command.pre_exec(move || {
                        if let Some(cpu) = cpu {
                            let mut set: libc::cpu_set_t = std::mem::zeroed();
                            libc::CPU_SET(cpu, &mut set);
                            if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
                                return Err(std::io::Error::last_os_error());
                            }
                        }
                        if libc::setpriority(libc::PRIO_PROCESS, 0, nice) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    })
                };
                command.spawn().expect("spawn a hog")
            })
            .collect();
        thread::sleep(Duration::from_millis(100));
        Hogs(hogs)
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The hypervisor's steal on all CPUs so far, ms (`/proc/stat`, the 8th figure of each
/// `cpuN` line, in USER_HZ = 100 ticks).
pub fn steal_so_far_ms() -> u64 {
    let text = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    text.lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .filter_map(|l| l.split_whitespace().nth(8)?.parse::<u64>().ok())
        .sum::<u64>()
        * 10
}

/// Before a run again after one spoiled by steal: wait for a second in which the VM's host
/// took at most [`QUIET_STEAL_MS`] of its CPUs while every one of them wanted to run, bounded
/// by 30 s (steal comes in spells of seconds to minutes; running again at once mostly lands in
/// the same spell). Returns the steal of the last second waited, ms.
///
/// Steal accrues only to a vCPU that wants to run, so an idle second says nothing of a spell:
/// on this VM, idle vCPUs showed 0 ms while busy loops on both took 122–142 ms a second each
/// (and 0 in a quiet spell). Each second of waiting keeps every CPU busy to read it.
pub fn wait_for_a_quiet_host() -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stolen = steal_with_every_cpu_busy(Duration::from_secs(1));
        if stolen <= QUIET_STEAL_MS || Instant::now() >= deadline {
            return stolen;
        }
    }
}

/// Steal over all CPUs, ms, in a quiet second of [`wait_for_a_quiet_host`]: two ticks.
const QUIET_STEAL_MS: u64 = 20;

/// The host's steal, ms over all CPUs, during `span` with one spinning thread pinned to each
/// CPU this process may use.
fn steal_with_every_cpu_busy(span: Duration) -> u64 {
    let cpus = crate::matrix::allowed_cpus();
    let until = Instant::now() + span;
    let before = steal_so_far_ms();
    let spinners: Vec<_> = cpus
        .into_iter()
        .map(|cpu| {
            thread::spawn(move || {
                // SAFETY: a zeroed cpu_set_t filled by CPU_SET, applied to this thread only.
                unsafe {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu, &mut set);
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                }
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    for s in spinners {
        let _ = s.join();
    }
    steal_so_far_ms().saturating_sub(before)
}

/// A complete run, judged by a test whose subject is not trust: its exit is one of
/// `trusted_exits` when the verdict trusted the run (or its knee, standing on the steps it
/// trusted) and 3 when it did not — an untrusted run
/// is printed with why (on this VM, mostly the host's steal), and the test goes on to judge
/// its own subject. Trust itself is judged by verdict.rs and verdict_matrix.rs on clean runs.
/// Returns the summary.
pub fn complete_run<'a>(
    name: &str,
    output: &Output,
    summary: &'a Option<serde_json::Value>,
    trusted_exits: &[i32],
) -> &'a serde_json::Value {
    let s = summary.as_ref().unwrap_or_else(|| panic!("{name}: no summary.json\n{}", show(output)));
    judge_complete(name, output, s, trusted_exits);
    s
}

/// [`complete_run`] on a summary already read.
pub fn judge_complete(name: &str, output: &Output, s: &serde_json::Value, trusted_exits: &[i32]) {
    let trusted = s["verdict"]["trusted"] == true;
    // Steps set aside past the one that broke the knee change nothing it concluded: such a
    // run exits by its gates (issue 46), as a trusted one does.
    let knee_stands = s["analysis"]["knee_on_trusted_steps"] == true;
    if !trusted {
        eprintln!("{name}: untrusted (not this test's subject):\n{}", invalidating_reasons(s));
    }
    let code = output.status.code();
    let want = if trusted || knee_stands { trusted_exits.to_vec() } else { vec![3] };
    assert!(
        code.is_some_and(|c| want.contains(&c)),
        "{name}: exit {code:?}, want one of {want:?} (verdict trusted: {trusted})\n{}",
        show(output)
    );
}

/// A summary's invalidating reasons, `code: detail`, one per line (empty when trusted).
pub fn invalidating_reasons(summary: &serde_json::Value) -> String {
    let reasons = summary["verdict"]["reasons"].as_array().into_iter().flatten();
    let said: Vec<String> =
        reasons.filter(|r| r["invalidates"] == true).map(|r| format!("{}: {}", r["code"], r["detail"])).collect();
    said.join("\n")
}

/// The hypervisor's steal during a run, ms, when there was any and every one of `reasons`
/// lays its finding at the steal's door (`host_steal`, or "(steal" in its sentence): a run
/// spoiled by the VM's host, not a clean one. `None` otherwise, and for no reasons at all.
pub fn spoiled_by_steal(summary: &serde_json::Value, reasons: &[&serde_json::Value]) -> Option<f64> {
    let steal = summary["health"]["peaks"]["steal_ms"].as_f64().filter(|&ms| ms > 0.0)?;
    (!reasons.is_empty() && reasons.iter().all(|r| names_steal(r))).then_some(steal)
}

/// Whether a verdict reason lays its finding at the hypervisor's steal (`host_steal`, or
/// "(steal" in its sentence).
pub fn names_steal(reason: &serde_json::Value) -> bool {
    reason["code"] == "host_steal" || reason["detail"].as_str().is_some_and(|d| d.contains("(steal"))
}
