//! The eBPF programs' own log (aya-log), end to end through the real binary: a rare condition
//! the programs report reaches the loader's stderr at `--log-level debug` (or `RUST_LOG`),
//! and nothing of it at the default level.
//!
//! The condition is a full `LOADER_SOCKS` map, caused honestly: the test hook
//! `LOADER_TEST_SOCKS_CAPACITY` sizes the map to a few sockets, and the run's pool connects
//! more than that before its first send. Every connect that finds no room is counted in
//! `lost_by_reason.sock_map_full` — in every run — and logged by `tcp_states` with the
//! socket's address only when asked. The other conditions the programs log (a failed field
//! read, a state or drop reason out of range, a kernel error on an LRU insert) cannot be
//! caused from user space on a sound kernel.
//!
//! Needs root and a loader built with its eBPF object; skips (saying why) only when not root,
//! and never under CI; a loader built without the object fails here under
//! `LOADER_EBPF=require` or CI.

use std::time::Duration;

use loader_tests::common::{Target, loader_run_via, out_dir, root_or_skip, show};
use serde_json::Value;

/// `LOADER_SOCKS` entries in these runs (the test hook).
const SOCKS_CAPACITY: u64 = 4;
/// Connections the pool opens before the first send: all but `SOCKS_CAPACITY` find the map full.
const CONNECTIONS: u64 = 16;
/// The start of `tcp_states`' message for a socket the map had no room for.
const MESSAGE: &str = "lost sock_map_full: socket ";

#[test]
fn a_full_socket_map_is_logged_at_debug_only() {
    if root_or_skip("a_full_socket_map_is_logged_at_debug_only").is_none() {
        return;
    }
    let target = Target::start(&[]);

    let Some(off) = run_filling_the_socket_map(&target, "probe_log_off", &[], &[]) else { return };
    assert_eq!(off.messages(), 0, "the default level (warn) logs nothing of the programs:\n{}", off.stderr);
    assert!(!off.stderr.contains("probes::"), "no record of the programs at all:\n{}", off.stderr);
    // The condition happened all the same: the counter, not the log, is the record.
    assert!(off.sock_map_full() >= CONNECTIONS - SOCKS_CAPACITY, "{}", off.summary["probes"]);

    let Some(debug) = run_filling_the_socket_map(&target, "probe_log_debug", &["--log-level", "debug"], &[]) else {
        return;
    };
    eprintln!("--log-level debug, stderr:\n{}", debug.stderr);
    assert!(debug.sock_map_full() >= CONNECTIONS - SOCKS_CAPACITY, "{}", debug.summary["probes"]);
    assert_eq!(debug.messages(), debug.sock_map_full(), "one message per socket counted as lost:\n{}", debug.stderr);
    let line = debug.stderr.lines().find(|l| l.contains(MESSAGE)).expect("a message");
    assert!(line.contains("DEBUG") && line.contains("probes::tcp_states"), "level and program module: {line}");
    // With the logging code live, the verifier still accepted every program.
    let availability = debug.summary["probes"]["availability"].as_object().expect("probes.availability");
    for (probe, state) in availability {
        if !probe.contains('.') {
            assert_eq!(state, "ok", "{probe} at --log-level debug: {availability:?}");
        }
    }

    // RUST_LOG alone turns it on as well, here for the programs' records only.
    let Some(env) = run_filling_the_socket_map(&target, "probe_log_env", &[], &[("RUST_LOG", "probes=debug".into())])
    else {
        return;
    };
    assert_eq!(env.messages(), env.sock_map_full(), "RUST_LOG=probes=debug:\n{}", env.stderr);
}

/// One run's stderr and summary.
struct Run {
    stderr: String,
    summary: Value,
}

impl Run {
    /// Lines of the full-map message.
    fn messages(&self) -> u64 {
        self.stderr.lines().filter(|line| line.contains(MESSAGE)).count() as u64
    }

    /// `probes.lost_by_reason.sock_map_full`.
    fn sock_map_full(&self) -> u64 {
        self.summary["probes"]["lost_by_reason"]["sock_map_full"].as_u64().expect("lost_by_reason.sock_map_full")
    }
}

/// A short keep-alive run of `CONNECTIONS` connections with `LOADER_SOCKS` sized to
/// `SOCKS_CAPACITY`; `None` (after saying why) when this loader was built without its eBPF
/// object and neither CI nor `LOADER_EBPF=require` asks for it.
fn run_filling_the_socket_map(target: &Target, name: &str, flags: &[&str], env: &[(&str, String)]) -> Option<Run> {
    let out = out_dir(name);
    let (url, connections) = (target.url(), CONNECTIONS.to_string());
    let mut args = vec!["--url", &url, "--rate", "200", "--duration", "2s", "--connections", &connections];
    args.extend_from_slice(&["--warmup", "0s", "--threads", "1"]);
    args.extend_from_slice(flags);
    let mut env = env.to_vec();
    env.push(("LOADER_TEST_SOCKS_CAPACITY", SOCKS_CAPACITY.to_string()));
    let (output, summary) = loader_run_via(&[], &env, &args, &out, Duration::from_secs(60));
    let summary = summary.unwrap_or_else(|| panic!("{name}: no summary.json\n{}", show(&output)));
    let probes = &summary["probes"];
    if probes["available"] != true {
        let reason = probes["unavailable_reason"].as_str().unwrap_or("?");
        if reason.contains("built without eBPF") && !required() {
            eprintln!("skipping {name}: {reason}");
            return None;
        }
        panic!("{name}: as root the probes must load: {reason}\n{}", show(&output));
    }
    Some(Run { stderr: String::from_utf8_lossy(&output.stderr).into_owned(), summary })
}

/// Whether the probes must load here: CI (`CI=true`, as root) or a build that required the
/// eBPF object (`LOADER_EBPF=require`, as `cargo xtask test` sets it as root).
fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true") || std::env::var("LOADER_EBPF").is_ok_and(|v| v == "require")
}
