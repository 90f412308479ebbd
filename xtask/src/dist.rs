//! `cargo xtask dist-demo [N] [-- ARGS…]`: a sharded run on this machine, as a Kubernetes
//! Indexed Job would run it (docs/distributed.md): the built-in target, then N `loader run`
//! processes told their index the Job's way (`JOB_COMPLETION_INDEX`, `JOB_COMPLETIONS`), all
//! starting at one `--start-at`, each with a kill switch (`--control`), then `loader merge`.
//! Outputs in `out/dist-demo/shard-<i>` and `out/dist-demo/merged`.

use std::ffi::OsString;
use std::io::BufRead as _;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result, bail};

use crate::cmd::{self, Cmd};

/// Machines when not given.
const DEFAULT_SHARDS: usize = 4;
/// Most machines the demo starts on one host.
const MAX_SHARDS: usize = 16;
/// Time given to every process to start before the shared zero.
const START_IN: Duration = Duration::from_secs(4);

pub fn run(loader: &std::path::Path, args: &[OsString]) -> Result<ExitCode> {
    let (shards, extra): (usize, &[OsString]) = match args.first().and_then(|a| a.to_str()).map(str::parse::<usize>) {
        Some(Ok(n)) => (n, &args[1..]),
        _ => (DEFAULT_SHARDS, args),
    };
    if shards == 0 || shards > MAX_SHARDS {
        bail!("usage: cargo xtask dist-demo [N (1..={MAX_SHARDS})] [-- loader run flags]");
    }
    let root = cmd::workspace_root();
    let out = root.join("out/dist-demo");
    let _ = std::fs::remove_dir_all(&out);
    let mut target = Command::new(loader)
        .args(["target", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .context("starting the built-in target")?;
    let mut line = String::new();
    std::io::BufReader::new(target.stdout.take().context("target stdout")?).read_line(&mut line)?;
    let url = line.trim().rsplit(' ').next().unwrap_or_default().to_string();
    println!("dist-demo: built-in target at {url}; {shards} shard processes");
    let token = format!("dist-demo-{:x}", SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos());
    let zero = SystemTime::now().duration_since(UNIX_EPOCH)? + START_IN;
    let at = format!("@{:.3}", zero.as_secs_f64());
    let mut children = Vec::new();
    for i in 0..shards {
        let dir = out.join(format!("shard-{i}"));
        let mut c = Command::new(loader);
        c.env("JOB_COMPLETION_INDEX", i.to_string())
            .env("JOB_COMPLETIONS", shards.to_string())
            .env("LOADER_CONTROL_TOKEN", &token)
            .args(["run", "--url", &url, "--profile", "step", "--steps", "400,800,1200", "--hold", "3s"])
            .args(["--connections", "8", "--threads", "1", "--preflight", "0s", "--plain", "--start-at", &at])
            .args(["--control", "127.0.0.1:0"])
            .arg("--out")
            .arg(&dir)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        if !cmd::is_root() {
            c.arg("--no-probes");
        }
        children.push((i, c.spawn().with_context(|| format!("starting shard {i}"))?));
    }
    for (i, mut child) in children {
        let status = child.wait()?;
        println!("dist-demo: shard {i}/{shards} ended with {}", cmd::describe(status));
    }
    let _ = target.kill();
    let _ = target.wait();
    let dirs: Vec<_> = (0..shards).map(|i| out.join(format!("shard-{i}"))).collect();
    let status = Cmd::new(loader)
        .args(["merge"])
        .args(&dirs)
        .args([std::ffi::OsStr::new("--out")])
        .args([out.join("merged")])
        .status()?;
    Ok(ExitCode::from(cmd::exit_code(status)))
}
