//! Running other programs: echo, run, check — and the few facts about this host that the
//! tasks branch on (root or not, is a program on PATH, where cargo puts its output).
//!
//! Commands that *do* something (install, build, run) are printed before they run, as
//! `$ ENV=value program args`. Read-only probes (`rustc --print sysroot`, `bpf-linker
//! --version`) are not printed, so an idempotent `setup` prints only its "ok:" lines.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

use anyhow::{Context, Result, bail};

/// A command about to be run: the program, its arguments, extra environment.
pub struct Cmd {
    command: Command,
    shown: String,
}

impl Cmd {
    /// `program` with no arguments yet.
    pub fn new(program: impl AsRef<OsStr>) -> Cmd {
        let program = program.as_ref();
        Cmd { command: Command::new(program), shown: program.to_string_lossy().into_owned() }
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Cmd
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        for arg in args {
            let arg = arg.as_ref();
            self.shown.push(' ');
            self.shown.push_str(&shell_quote(&arg.to_string_lossy()));
            self.command.arg(arg);
        }
        self
    }

    /// Sets one environment variable for the child (shown in the echo).
    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Cmd {
        let value = value.as_ref();
        self.shown = format!("{key}={} {}", shell_quote(&value.to_string_lossy()), self.shown);
        self.command.env(key, value);
        self
    }

    /// Runs in `dir` instead of the current directory.
    pub fn current_dir(mut self, dir: &Path) -> Cmd {
        self.command.current_dir(dir);
        self
    }

    /// Prints the command, runs it with inherited stdio, and returns its exit status.
    pub fn status(mut self) -> Result<ExitStatus> {
        println!("$ {}", self.shown);
        self.command.stdin(Stdio::null()).status().with_context(|| format!("cannot start `{}`", self.shown))
    }

    /// Like [`Cmd::status`], but the child's stdout and stderr go to the file `log`.
    pub fn status_to(mut self, log: &Path) -> Result<ExitStatus> {
        println!("$ {} > {}", self.shown, log.display());
        let out = std::fs::File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
        let err = out.try_clone().with_context(|| format!("cannot reopen {}", log.display()))?;
        self.command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .status()
            .with_context(|| format!("cannot start `{}`", self.shown))
    }

    /// Like [`Cmd::status`], but a non-zero exit is an error naming the command.
    pub fn run(self) -> Result<()> {
        let shown = self.shown.clone();
        let status = self.status()?;
        if !status.success() {
            bail!("`{shown}` failed ({})", describe(status));
        }
        Ok(())
    }

    /// Like [`Cmd::status`], but each line the child writes to stdout is also handed to
    /// `line` after it is shown (stderr is inherited).
    pub fn status_lines(mut self, mut line: impl FnMut(&str)) -> Result<ExitStatus> {
        use std::io::{BufRead, BufReader, Write};
        println!("$ {}", self.shown);
        let mut child = self
            .command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start `{}`", self.shown))?;
        let out = child.stdout.take().context("the child's stdout")?;
        let mut shown = std::io::stdout().lock();
        for read in BufReader::new(out).split(b'\n') {
            let Ok(bytes) = read else { break };
            let text = String::from_utf8_lossy(&bytes);
            let _ = writeln!(shown, "{text}");
            let _ = shown.flush();
            line(&text);
        }
        drop(shown);
        child.wait().with_context(|| format!("waiting for `{}`", self.shown))
    }

    /// Like [`Cmd::run`], but returns the child's stdout instead of showing it (stderr is
    /// still shown).
    pub fn capture(mut self) -> Result<Vec<u8>> {
        println!("$ {}", self.shown);
        let output = self
            .command
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("cannot start `{}`", self.shown))?;
        if !output.status.success() {
            bail!("`{}` failed ({})", self.shown, describe(output.status));
        }
        Ok(output.stdout)
    }

    /// Runs silently (a read-only probe) and returns trimmed stdout if it exits 0.
    pub fn probe(mut self) -> Option<String> {
        let output = self.command.stdin(Stdio::null()).stderr(Stdio::null()).output().ok()?;
        output.status.success().then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }
}

/// "exit code 3" or "killed by signal 9".
pub fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "unknown status".to_owned(),
    }
}

/// The exit code to pass on for a child's status (signals map to 128 + n, like a shell).
pub fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
    }
}

fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c));
    if plain { word.to_owned() } else { format!("'{}'", word.replace('\'', r"'\''")) }
}

/// Whether this process runs with effective uid 0 (read from /proc, no libc needed).
pub fn is_root() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|uids| uids.split_whitespace().nth(1))
        .is_some_and(|effective| effective == "0")
}

/// The full path of `program` if it is on PATH (or in /usr/sbin, /sbin, where Debian puts
/// nginx and which a non-root PATH often lacks).
pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The cargo that runs us (`$CARGO`, set by `cargo run`), so nested builds use the same
/// toolchain; plain `cargo` otherwise.
///
/// Without the variables `cargo run` sets for xtask's own package: build scripts that watch
/// one of them (ring's watches `CARGO_MANIFEST_DIR` and `CARGO_PKG_*`) would otherwise run
/// again, and ring, rustls and the loader be rebuilt, each time a nested build follows a plain
/// `cargo build` or a test suite's (tests/harness/common.rs strips the same ones).
pub fn cargo() -> Cmd {
    let mut cargo = Cmd::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_PKG_") || RUN_ONLY_VARS.contains(&key.as_ref()) {
            cargo.command.env_remove(key.as_ref());
        }
    }
    cargo
}

/// What `cargo run` sets for the package it runs besides `CARGO_PKG_*`.
const RUN_ONLY_VARS: [&str; 6] = [
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
];

/// The workspace root: xtask lives in `<root>/xtask`.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask's manifest dir has a parent").to_path_buf()
}

/// Where cargo writes build output: `$CARGO_TARGET_DIR` if set, else `<root>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => workspace_root().join(dir),
        None => workspace_root().join("target"),
    }
}
