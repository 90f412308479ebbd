//! `cargo xtask`: the project's chores, so a fresh Linux machine needs two commands.
//!
//! - `setup [--bench]`  install what is missing (see [`setup`]); safe to repeat.
//! - `demo [ARGS…]`     setup, build the release loader, run its built-in demo into out/demo.
//! - `test [ARGS…]`     setup, then the whole test suite (privileged tests too when root).
//! - `ci`               what CI runs: the same as `test`.
//! - `bench [ARGS…]`    setup --bench, build the release loader, run bench/run.sh.
//!
//! The eBPF objects are not built here: loader/build.rs does that with aya-build; xtask only
//! makes sure the pieces that build needs (rust-src, bpf-linker) are installed.

mod cmd;
mod setup;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};

use crate::cmd::Cmd;
use crate::setup::Extras;

const USAGE: &str = "\
usage: cargo xtask <command> [args]

commands:
  setup [--bench]   install missing pieces: rust-src, bpf-linker, tracefs, nginx, wrk,
                    iproute2, nftables, binutils, python3 (--bench: also oha, and says
                    whether wrk2, vegeta and k6 are there); one ok:/installing: line each
  demo [ARGS...]    setup, build the release loader, run `loader run --out out/demo ARGS`
  test [ARGS...]    setup, then `cargo test --workspace --release ARGS` (LOADER_EBPF=require
                    when root)
  ci                the same as `test`
  bench [ARGS...]   setup --bench, build the release loader, run `bench/run.sh ARGS`";

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
        Some("test" | "ci") => test(&rest),
        Some("bench") => bench(&rest),
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

fn demo(args: &[OsString]) -> Result<ExitCode> {
    setup::run(Extras::None)?;
    let loader = build_release_loader()?;
    let mut run = Cmd::new(&loader).args(["run", "--out", "out/demo"]);
    if !cmd::is_root() {
        println!("note: not root, so the eBPF probes cannot load: running with --no-probes");
        run = run.args(["--no-probes"]);
    }
    let status = run.args(args).current_dir(&cmd::workspace_root()).status()?;
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
    let status = cargo_test
        .args(["test", "--workspace", "--release", "--no-fail-fast"])
        .args(args)
        .current_dir(&cmd::workspace_root())
        .status()?;
    let mode = if root { "as root, LOADER_EBPF=require" } else { "not root, privileged tests skipped" };
    if status.success() {
        println!("xtask test: passed ({mode})");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("xtask test: FAILED ({mode}): cargo test ended with {}", cmd::describe(status));
        Ok(ExitCode::from(cmd::exit_code(status).max(1)))
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
