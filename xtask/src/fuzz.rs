//! `cargo xtask fuzz`: build the fuzz targets of `fuzz/` on stable and run each one for a
//! time budget on its committed corpus.
//!
//! The build is cargo-fuzz's without cargo-fuzz: libfuzzer-sys links libFuzzer (compiled
//! from its C++ sources, hence `c++`), and the coverage instrumentation libFuzzer steers by
//! comes from LLVM's SanitizerCoverage pass, switched on with `-C` flags that stable rustc
//! accepts (no sanitizer: `-Zsanitizer` is nightly-only; debug assertions stand in, so
//! overflows panic). `--target` keeps the flags off build scripts and proc macros. The eBPF
//! objects are not built (`LOADER_EBPF=skip`): no target touches the probes.
//!
//! Each target first runs its corpus once (`-runs=0`, a plain regression), then fuzzes.
//! New inputs go to `fuzz/scratch/<target>/` (ignored by git), crashes to
//! `fuzz/artifacts/<target>/`; libFuzzer's output to `fuzz/target/logs/<target>.log`.
//! A crash fails the task with the input's path and the command that reproduces it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::cmd::{self, Cmd};

/// The instrumentation, as cargo-fuzz passes it (minus its nightly-only sanitizer flags).
const RUSTFLAGS: &[&str] = &[
    "-Cpasses=sancov-module",
    "-Cllvm-args=-sanitizer-coverage-level=4",
    "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters",
    "-Cllvm-args=-sanitizer-coverage-pc-table",
    "-Cllvm-args=-sanitizer-coverage-trace-compares",
    "-Cllvm-args=-sanitizer-coverage-stack-depth",
    "-Cllvm-args=-simplifycfg-branch-fold-threshold=0",
    "--cfg fuzzing",
    "-Cdebug-assertions",
];

/// Longest a single input may take before libFuzzer calls it a hang, seconds.
const INPUT_TIMEOUT_S: u32 = 10;

/// The fuzz crate: its targets, where they are built, where their files go.
pub struct Fuzz {
    dir: PathBuf,
    triple: String,
}

/// One target's outcome.
pub struct Report {
    /// The target's name.
    pub target: String,
    /// A crash, hang or failed run: what to print.
    pub failure: Option<String>,
}

impl Fuzz {
    /// The project's `fuzz/` directory, for this host.
    pub fn new() -> Result<Fuzz> {
        let triple = crate::setup::rustc_field("host")?;
        Ok(Fuzz { dir: cmd::workspace_root().join("fuzz"), triple })
    }

    /// The targets, from `fuzz/fuzz_targets/*.rs`, sorted.
    pub fn targets(&self) -> Result<Vec<String>> {
        let dir = self.dir.join("fuzz_targets");
        let entries = std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?;
        let mut names: Vec<String> = entries
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter_map(|name| name.strip_suffix(".rs").map(str::to_owned))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Builds every target with coverage instrumentation (release, debug assertions on).
    pub fn build(&self) -> Result<()> {
        let mut rustflags = RUSTFLAGS.join(" ");
        if let Some(extra) = std::env::var_os("RUSTFLAGS").filter(|f| !f.is_empty()) {
            rustflags.push(' ');
            rustflags.push_str(&extra.to_string_lossy());
        }
        cmd::cargo()
            .env("LOADER_EBPF", "skip")
            .env("RUSTFLAGS", rustflags)
            .args(["build", "--release", "--bins", "--locked", "--target", &self.triple])
            .args(["--manifest-path".as_ref(), self.dir.join("Cargo.toml").as_os_str()])
            .args(["--target-dir".as_ref(), self.build_dir().as_os_str()])
            .current_dir(&self.dir)
            .run()
    }

    fn build_dir(&self) -> PathBuf {
        self.dir.join("target")
    }

    fn binary(&self, target: &str) -> PathBuf {
        self.build_dir().join(&self.triple).join("release").join(target)
    }

    /// Runs `target`'s corpus once, then fuzzes it for `seconds`.
    pub fn run(&self, target: &str, seconds: u64) -> Result<Report> {
        let corpus = self.dir.join("corpus").join(target);
        let scratch = self.dir.join("scratch").join(target);
        let artifacts = self.dir.join("artifacts").join(target);
        let logs = self.build_dir().join("logs");
        for dir in [&corpus, &scratch, &artifacts, &logs] {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let inputs = std::fs::read_dir(&corpus).map(|d| d.count()).unwrap_or(0);
        let log = logs.join(format!("{target}.log"));

        println!("fuzz: {target}: the corpus once ({inputs} inputs in {})", relative(&corpus));
        let regression = self.libfuzzer(target, &artifacts).args(["-runs=0".as_ref(), corpus.as_os_str()]);
        if let Some(failure) = self.outcome(target, regression, &log)? {
            return Ok(Report { target: target.to_owned(), failure: Some(failure) });
        }

        println!("fuzz: {target}: fuzzing for {seconds} s (new inputs go to {})", relative(&scratch));
        let before = std::fs::read_dir(&scratch).map(|d| d.count()).unwrap_or(0);
        let fuzzing = self
            .libfuzzer(target, &artifacts)
            .args([format!("-max_total_time={seconds}"), "-print_final_stats=1".to_owned()])
            .args([scratch.as_os_str(), corpus.as_os_str()]);
        let failure = self.outcome(target, fuzzing, &log)?;
        if failure.is_none() {
            let found = std::fs::read_dir(&scratch).map(|d| d.count()).unwrap_or(0).saturating_sub(before);
            println!("fuzz: {target}: ok: {}; {found} new inputs", summary(&log));
        }
        Ok(Report { target: target.to_owned(), failure })
    }

    /// The target's binary with the options every run shares.
    fn libfuzzer(&self, target: &str, artifacts: &Path) -> Cmd {
        let mut run = Cmd::new(self.binary(target))
            .args([format!("-artifact_prefix={}/", artifacts.display()), format!("-timeout={INPUT_TIMEOUT_S}")]);
        let dict = self.dir.join("dict").join(format!("{target}.dict"));
        if dict.is_file() {
            run = run.args([format!("-dict={}", dict.display())]);
        }
        run.current_dir(&self.dir)
    }

    /// Runs libFuzzer with its output in `log`; `Some(what to print)` when it failed.
    fn outcome(&self, target: &str, run: Cmd, log: &Path) -> Result<Option<String>> {
        let status = run.status_to(log)?;
        if status.success() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let input = text.lines().rev().find_map(|line| line.split_once("Test unit written to ").map(|(_, p)| p.trim()));
        let mut message = format!(
            "{target}: libFuzzer ended with {} — from {}:\n{}\n",
            cmd::describe(status),
            relative(log),
            excerpt(&text)
        );
        match input {
            Some(input) => {
                let input = self.dir.join(input);
                message.push_str(&format!(
                    "crashing input: {}\nreproduce:      {} {}\n(keep it: copy it into fuzz/corpus/{target}/ once fixed)",
                    input.display(),
                    self.binary(target).display(),
                    input.display()
                ));
            }
            None => message.push_str("no crashing input was written (see the log)"),
        }
        Ok(Some(message))
    }
}

/// Runs, speed and coverage at the end of a libFuzzer log (its last status line and the
/// `-print_final_stats` lines).
fn summary(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let stat = |key: &str| {
        text.lines().find_map(|line| line.strip_prefix(key)?.trim().parse::<u64>().ok()).unwrap_or_default()
    };
    let status = text.lines().rev().find(|line| line.starts_with('#') && line.contains(" cov: ")).unwrap_or("");
    let fields: Vec<&str> = status.split_whitespace().collect();
    let value =
        |key: &str| fields.iter().position(|f| *f == key).and_then(|i| fields.get(i + 1)).copied().unwrap_or("?");
    format!(
        "{} runs, {} exec/s, cov {}, ft {}, corpus {}",
        stat("stat::number_of_executed_units:"),
        stat("stat::average_exec_per_sec:"),
        value("cov:"),
        value("ft:"),
        value("corp:")
    )
}

/// What to show of a failed run's log: the panic message (not its backtrace) and
/// libFuzzer's report, without its dictionary suggestions.
fn excerpt(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut shown = Vec::new();
    if let Some(start) = lines.iter().position(|line| line.contains("panicked at")) {
        let end = lines[start..]
            .iter()
            .position(|line| line.starts_with("stack backtrace:"))
            .map_or(start + 12, |n| start + n);
        shown.extend_from_slice(&lines[start..end.min(start + 20).min(lines.len())]);
    }
    let report = lines
        .iter()
        .rposition(|line| line.contains("==") && line.contains("ERROR: libFuzzer"))
        .unwrap_or(lines.len().saturating_sub(12));
    shown.extend(lines[report..].iter().filter(|line| !line.starts_with('"') && !line.starts_with("######")).take(20));
    shown.join("\n")
}

fn relative(path: &Path) -> String {
    let root = cmd::workspace_root();
    path.strip_prefix(&root).unwrap_or(path).display().to_string()
}

/// `cargo xtask fuzz [TARGET] [--seconds N]`.
pub fn command(args: &[OsString], default_seconds: u64) -> Result<bool> {
    let mut target = None;
    let mut seconds = default_seconds;
    let mut args = args.iter().map(|a| a.to_string_lossy().into_owned());
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" => {
                let value = args.next().context("--seconds needs a number")?;
                seconds = value
                    .parse()
                    .ok()
                    .filter(|&s| s > 0)
                    .with_context(|| format!("--seconds {value:?}: expected a whole number of seconds above 0"))?;
            }
            other if other.starts_with('-') => {
                bail!("unknown option {other}; usage: cargo xtask fuzz [TARGET] [--seconds N]")
            }
            other if target.is_none() => target = Some(other.to_owned()),
            other => bail!("one target at most (got {other} too); usage: cargo xtask fuzz [TARGET] [--seconds N]"),
        }
    }
    crate::setup::fuzz_tools(cmd::is_root())?;
    run_all(target.as_deref(), seconds)
}

/// Builds, then runs `only` (or every target) for `seconds` each; false if any failed.
pub fn run_all(only: Option<&str>, seconds: u64) -> Result<bool> {
    let fuzz = Fuzz::new()?;
    let all = fuzz.targets()?;
    let targets: Vec<String> = match only {
        Some(name) if all.iter().any(|t| t == name) => vec![name.to_owned()],
        Some(name) => bail!("no fuzz target {name:?}; the targets are {}", all.join(", ")),
        None => all,
    };
    fuzz.build()?;
    let mut failed = Vec::new();
    for target in &targets {
        let report = fuzz.run(target, seconds)?;
        if let Some(failure) = report.failure {
            println!("fuzz: FAILED: {failure}");
            failed.push(report.target);
        }
    }
    if failed.is_empty() {
        println!("fuzz: passed ({} for {seconds} s each, after its corpus)", targets.join(", "));
        Ok(true)
    } else {
        println!("fuzz: FAILED: {}", failed.join(", "));
        Ok(false)
    }
}
