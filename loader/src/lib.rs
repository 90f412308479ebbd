//! loader — an open-loop HTTP load generator that proves whether its own numbers can be trusted.
//!
//! The pipeline, one module per stage (`docs/architecture.md` draws both flows):
//!
//! - [`scenario`]: what the user wrote (flags, TOML) → [`scenario::Spec`] (validated)
//!   → [`scenario::Plan`] (phases with absolute start times and rates); [`reflect`] asks a
//!   gRPC server for a method's descriptors when no `.proto` is given.
//! - [`schedule`]: pure; the intended send time of every request, split across shards.
//! - [`engine`]: one thread and one io_uring ring per shard; keep-alive connections,
//!   pre-encoded requests, HTTP/1.1 framing; sends on schedule and records.
//! - [`record`]: per-shard HdrHistograms per phase (corrected latency, service time, send lag)
//!   and per-second series, merged once after the run.
//! - [`measure`]: runs the shards and samples CPU, health and probes each second; the core
//!   `run` and `calibrate` share.
//! - [`summary`]: the `loader.summary/v1` types every later stage reads, and their build.
//! - [`analysis`]: steps against the SLO, knees, cliff, capacity.
//! - [`probes`]: eBPF programs on the loader's own process (tgid) and sockets.
//! - [`health`]: the `/proc` and cgroup half of loader health (the fallback without probes).
//! - [`verdict`]: whether the numbers can be trusted, and which side explains each anomaly.
//! - [`merge`]: the machines of a sharded run (`--shard i/N`) joined into one, exactly.
//! - [`report`]: terminal tables, `summary.json`, the HDR interval log, the live metrics
//!   endpoint (`--metrics`).
//! - [`commands`]: each command orders the stages; [`calibrate`] certifies the machine;
//!   [`target`] is the built-in endpoint used by demos, calibration and tests.
//!
//! `main.rs` only parses flags, calls [`run`] and maps the [`Outcome`] to an exit code;
//! the end-to-end suites in `tests/` drive the same binary.

#![deny(missing_docs)]

pub mod analysis;
pub mod calibrate;
pub mod cli;
pub mod commands;
pub mod compare;
pub mod engine;
pub mod error;
pub mod health;
pub mod measure;
pub mod merge;
pub mod privilege;
pub mod probes;
pub mod record;
pub mod reflect;
pub mod report;
pub mod scenario;
pub mod schedule;
pub mod summary;
pub mod target;
pub mod verdict;
pub mod watch;

pub use commands::run;

/// How a command ended; each maps to one exit code of DESIGN.md's contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Finished, data trusted, gates passed.
    Passed,
    /// Bad input or a runtime failure.
    Error,
    /// Loader-side evidence invalidates the numbers.
    Untrusted,
    /// Gates failed on trusted data.
    GatesFailed,
    /// Interrupted; partial results were written and marked.
    Interrupted,
}

impl Outcome {
    /// The process exit code for this outcome.
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::Passed => 0,
            Outcome::Error => 1,
            Outcome::Untrusted => 3,
            Outcome::GatesFailed => 4,
            Outcome::Interrupted => 130,
        }
    }
}
