//! The built-in target as a child process (`loader target`), so that it has its own tgid.
//!
//! Why not a thread of this process: the probes and the health sampler
//! watch this process's tgid, so an in-process target's threads would count as the loader's.
//! Measured on the 2-core development VM: run-queue delay p99 of 1.2–3.9 ms from 15 000 req/s
//! with the target inside, 40–150 µs up to 80 000 req/s with it outside — the in-process
//! target alone would have certified a ceiling 5× too low.

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::process::{Child, ChildStdout, Command, Stdio};

use anyhow::Context as _;

/// A running `loader target`; stopped (SIGTERM, then waited for) on [`Target::stop`] or drop.
pub struct Target {
    /// Where it listens.
    pub addr: SocketAddr,
    child: Option<Child>,
    /// Held open: a closed pipe would turn a later line of the target into SIGPIPE.
    _stdout: BufReader<ChildStdout>,
}

/// Start `loader target --listen 127.0.0.1:0 FLAGS`; it inherits the calling thread's CPU
/// mask. Returns once it prints its listening line.
pub fn spawn(flags: &[String]) -> anyhow::Result<Target> {
    let exe = std::env::current_exe().context("cannot find the loader executable")?;
    let mut cmd = Command::new(exe);
    cmd.args(["target", "--listen", "127.0.0.1:0"]).args(flags);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    // SAFETY: prctl is async-signal-safe; the target must not outlive a killed calibration.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::SIGTERM)?;
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("cannot start `loader target`")?;
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    let mut stdout = BufReader::new(stdout);
    stdout.read_line(&mut line).context("reading the target's listening line")?;
    let addr = line
        .trim()
        .strip_prefix("loader target listening on http://")
        .and_then(|a| a.parse().ok())
        .with_context(|| format!("unexpected first line from `loader target`: {:?}", line.trim()));
    let mut target = Target { addr: "0.0.0.0:0".parse().expect("static"), child: Some(child), _stdout: stdout };
    target.addr = addr?;
    Ok(target)
}

impl Target {
    /// Its process id (`None` once stopped).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stop it and wait for it.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), nix::sys::signal::SIGTERM);
            let _ = c.wait();
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.shut_down();
    }
}
