//! `cargo xtask`: the project's chores, so a fresh Linux machine needs two commands.
//!
//! - `setup [--bench]`  install what is missing (see [`setup`]); safe to repeat.
//! - `demo [ARGS…]`     setup, build the release loader, install it when root, run its
//!   built-in demo into out/demo.
//! - `install [--prefix DIR]`  build the release loader, install it with its completions and
//!   man pages under DIR (default /usr/local, as root; see [`install`]).
//! - `test [ARGS…]`     setup, then the whole test suite (privileged tests too when root).
//! - `ci`               what CI runs: the same as `test`.
//! - `dist-demo [N]`   N shard processes the Indexed Job's way, then `loader merge`.
//! - `bench [ARGS…]`    setup --bench, build the release loader, run bench/run.sh.
//! - `fuzz [TARGET] [--seconds N]`  build the fuzz targets (stable), run each on its corpus
//!   for N seconds (see [`fuzz`]); `test` does this too, after the cargo test suite.
//!
//! The eBPF objects are not built here: loader/build.rs does that with aya-build; xtask only
//! makes sure the pieces that build needs (rust-src, bpf-linker) are installed.

mod apt_lock;
mod cmd;
mod digest;
mod dist;
mod fuzz;
mod install;
mod setup;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Result, bail};

use crate::cmd::Cmd;
use crate::setup::Extras;

const USAGE: &str = "\
usage: cargo xtask <command> [args]

commands:
  setup [--bench]   install missing pieces: rust-src, bpf-linker, tracefs, nginx, wrk,
                    iproute2, nftables, binutils, python3, g++, php8.2-fpm, postgresql-15,
                    postgres_exporter and the rest the suites need (--bench: also oha, and says
                    whether wrk2, vegeta and k6 are there); one ok:/installing: line each
  demo [ARGS...]    setup, build the release loader, install it as `install` does when root,
                    run `loader run --out out/demo ARGS`
  install [--prefix DIR]
                    build the release loader and install it under DIR (default /usr/local,
                    which needs root): DIR/bin/loader, its bash, zsh and fish completions,
                    its man pages (DIR/share/man/man1/loader.1, loader-run.1 …)
  test [ARGS...]    setup, then `cargo test --workspace --release ARGS` (LOADER_EBPF=require
                    when root), then every fuzz target: its corpus once, then 60 s of fuzzing
  ci                the same as `test`
  dist-demo [N] [ARGS...]
                    a sharded run on this host, the Kubernetes Indexed Job's way: N (default
                    4) `loader run` processes with JOB_COMPLETION_INDEX/JOB_COMPLETIONS, one
                    --start-at, then `loader merge` into out/dist-demo/merged
  bench [ARGS...]   setup --bench, build the release loader, run `bench/run.sh ARGS`
  fuzz [TARGET] [--seconds N]
                    build the fuzz targets (fuzz/, stable toolchain), run TARGET (default:
                    all) on its corpus once, then fuzz it for N s (default 30); new inputs
                    go to fuzz/scratch/, a crash fails with its input and the reproducer";

/// Fuzzing budget per target of `cargo xtask fuzz` without `--seconds`.
const FUZZ_SECONDS: u64 = 30;
/// Fuzzing budget per target in `cargo xtask test` (CI): two targets add about two minutes
/// and the instrumented build about four, well inside CI's 90.
const TEST_FUZZ_SECONDS: u64 = 60;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let command = args.next().map(|c| c.to_string_lossy().into_owned());
    let mut rest: Vec<OsString> = args.collect();
    if rest.first().is_some_and(|a| a == "--") {
        rest.remove(0);
    }
    let result = match command.as_deref() {
        Some("setup") => setup_command(&rest),
        Some("demo") => demo(&rest),
        Some("install") => install_command(&rest),
        Some("test" | "ci") => test(&rest),
        Some("bench") => bench(&rest),
        Some("dist-demo") => dist_demo(&rest),
        Some("fuzz") => {
            fuzz::command(&rest, FUZZ_SECONDS).map(|passed| if passed { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        Some("help" | "-h" | "--help") => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        Some(other) => {
            eprintln!("xtask: unknown command `{other}`\n\n{USAGE}");
            Ok(ExitCode::from(2))
        }
        None => {
            eprintln!("{USAGE}");
            Ok(ExitCode::from(2))
        }
    };
    result.unwrap_or_else(|err| {
        eprintln!("xtask: error: {err:#}");
        ExitCode::FAILURE
    })
}

fn setup_command(args: &[OsString]) -> Result<ExitCode> {
    let extras = match args {
        [] => Extras::None,
        [flag] if flag == "--bench" => Extras::Bench,
        _ => bail!("usage: cargo xtask setup [--bench]"),
    };
    setup::run(extras)?;
    Ok(ExitCode::SUCCESS)
}

/// Builds `target/release/loader` and returns its path.
fn build_release_loader() -> Result<PathBuf> {
    cmd::cargo().args(["build", "--release", "-p", "loader"]).current_dir(&cmd::workspace_root()).run()?;
    Ok(cmd::target_dir().join("release/loader"))
}

fn dist_demo(args: &[OsString]) -> Result<ExitCode> {
    setup::run(Extras::None)?;
    dist::run(&build_release_loader()?, args)
}

/// `loader run`'s exit code when a step failed its criteria (docs/usage.md).
const GATES_FAILED: i32 = 4;

fn install_command(args: &[OsString]) -> Result<ExitCode> {
    let prefix = install::prefix_from(args)?;
    install::install(&build_release_loader()?, &prefix)?;
    Ok(ExitCode::SUCCESS)
}

fn demo(args: &[OsString]) -> Result<ExitCode> {
    setup::run(Extras::None)?;
    let loader = build_release_loader()?;
    if cmd::is_root() {
        // So that after this first command `sudo loader run …` works from any directory.
        match install::install(&loader, Path::new(install::DEFAULT_PREFIX)) {
            Ok(()) => println!(
                "loader is installed under {}: `loader …` from any directory, `man loader`, completions in bash, zsh and fish",
                install::DEFAULT_PREFIX
            ),
            Err(err) => println!("install: FAILED ({err:#}); the demo runs from {} anyway", loader.display()),
        }
    } else {
        println!(
            "note: not root, so loader is not installed on the PATH: `cargo xtask install` as root does it (or `cargo xtask install --prefix ~/.local` into a prefix of yours)"
        );
    }
    let mut run = Cmd::new(&loader).args(["run", "--out", "out/demo"]);
    if !cmd::is_root() {
        println!("note: not root, so the eBPF probes cannot load: running with --no-probes");
        run = run.args(["--no-probes"]);
    }
    let status = run.args(args).current_dir(&cmd::workspace_root()).status()?;
    // The demo steps its target past its capacity: the steps above the knee fail their SLO,
    // and loader says so with the gates' exit code (4). That is the demo working.
    if status.code() == Some(GATES_FAILED) && args.is_empty() {
        println!("demo: done — the steps past the knee failed their SLO, as they should (loader's exit code 4)");
        return Ok(ExitCode::SUCCESS);
    }
    if !status.success() {
        println!("demo: loader ended with {}", cmd::describe(status));
    }
    Ok(ExitCode::from(cmd::exit_code(status)))
}

fn test(args: &[OsString]) -> Result<ExitCode> {
    setup::run(Extras::None)?;
    let root = cmd::is_root();
    let mut cargo_test = cmd::cargo();
    if root {
        // The privileged tests fail instead of skipping when the probes cannot load.
        cargo_test = cargo_test.env("LOADER_EBPF", "require");
    } else {
        println!("note: not root: the tests that need root (eBPF probes) skip and say why");
    }
    // The release build: the end-to-end tests judge the real binary's verdict at tens of
    // thousands of requests per second and calibrate it; an unoptimised engine would saturate
    // itself and turn clean runs untrusted.
    // Every test binary runs even after one fails, so one CI run shows every failure.
    let mut digest = digest::Digest::default();
    let status = cargo_test
        .args(["test", "--workspace", "--release", "--no-fail-fast"])
        .args(args)
        .current_dir(&cmd::workspace_root())
        .status_lines(|line| digest.line(line))?;
    // The fuzz targets run even after a failed suite, for the same reason. Without a C++
    // compiler (only possible when not root: setup installs g++ as root) they are skipped.
    let fuzzed = if cmd::which("c++").is_none() && !root {
        println!("skip: the fuzz targets — no c++ to build libFuzzer with; `cargo xtask setup` as root installs g++");
        Ok(true)
    } else {
        fuzz::run_all(None, TEST_FUZZ_SECONDS)
    };
    let mode = if root { "as root, LOADER_EBPF=require" } else { "not root, privileged tests skipped" };
    digest.print();
    let fuzz_failure = match &fuzzed {
        Ok(true) => None,
        Ok(false) => Some("a fuzz target failed (see `fuzz: FAILED` above)".to_owned()),
        Err(err) => Some(format!("the fuzz targets did not run: {err:#}")),
    };
    match (status.success(), fuzz_failure) {
        (true, None) => {
            println!("xtask test: passed ({mode}; fuzz targets {TEST_FUZZ_SECONDS} s each)");
            Ok(ExitCode::SUCCESS)
        }
        (true, Some(why)) => {
            println!("xtask test: FAILED ({mode}): {why}");
            Ok(ExitCode::FAILURE)
        }
        (false, why) => {
            let also = why.map(|why| format!("; {why}")).unwrap_or_default();
            println!("xtask test: FAILED ({mode}): cargo test ended with {}{also}", cmd::describe(status));
            Ok(ExitCode::from(cmd::exit_code(status).max(1)))
        }
    }
}

fn bench(args: &[OsString]) -> Result<ExitCode> {
    setup::run(Extras::Bench)?;
    let loader = build_release_loader()?;
    let root = cmd::workspace_root();
    let status = Cmd::new("bash")
        .env("LOADER", &loader)
        .args([root.join("bench/run.sh").into_os_string()])
        .args(args)
        .current_dir(&root)
        .status()?;
    Ok(ExitCode::from(cmd::exit_code(status)))
}
