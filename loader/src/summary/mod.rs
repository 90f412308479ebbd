//! `summary.json`, schema `loader.summary/v1` — the contract scripts depend on, and the types
//! every later stage reads: analysis judges steps on them, the verdict judges the loader on
//! them, report prints them, `loader verdict DIR` re-reads them.
//!
//! Every field DESIGN.md names is present; fields owned by work not done yet are `null`
//! rather than absent, so consumers can rely on the shape. Extra fields are additions, never
//! renames.
//!
//! This module depends only on the stages below it (scenario, record, health and probe
//! figures): nothing here judges or prints.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the whole [`Summary`], the run's facts, the verdict's shape |
//! | `phase.rs` | per-phase and per-second figures (latency, send lag, errors) |
//! | `analysis.rs` | knees, cliff, steps' judgement, capacity, spike and soak figures |
//! | `criteria.rs` | the break criteria the steps are judged against |
//! | `loader.rs` | the loader's own health: probes, CPU, memory, `/proc`, certificate |
//! | `build.rs` | [`build`]: the summary from the plan and the merged record |

mod analysis;
mod build;
mod criteria;
mod data;
mod loader;
mod phase;

pub use analysis::{AnalysisSummary, CapacitySummary, EmergencyStop, LittleSummary, Point, SoakSummary, SpikeSummary};
pub use build::{Inputs, build, offered_between};
pub use criteria::Criteria;
pub use data::DataSummary;
pub use loader::{
    CertificateRef, ConnectMs, HandshakeMs, HealthSummary, LoaderSummary, ProbeHandshakeMs, ProbeSummary, Resets,
    RunQueueUs, TimeWait, TlsSummary, WakeLateUs,
};
pub use phase::{ErrorMessage, LatencyMs, PhaseSummary, SecondLatencyMs, SecondSummary, SendLagMs};

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Schema name written in every summary.
pub const SCHEMA: &str = "loader.summary/v1";

/// The whole summary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// The run stopped before its plan ended (SIGINT/SIGTERM); numbers cover what ran.
    pub interrupted: bool,
    /// Why the run failed part-way (a shard's io_uring failed), if it did: the numbers cover
    /// what ran until then, every unfinished request accounted as `aborted` or `unsent`.
    #[serde(default)]
    pub failure: Option<String>,
    /// What was run.
    pub run: RunInfo,
    /// The load machine it ran on (the fingerprint a calibration certificate is matched by);
    /// null in summaries written before it was recorded.
    #[serde(default)]
    pub machine: Option<crate::health::machine::Fingerprint>,
    /// Trust verdict.
    pub verdict: Verdict,
    /// One entry per phase, in order.
    pub phases: Vec<PhaseSummary>,
    /// Last passing step (filled by analysis; null until then).
    pub knee: Option<Point>,
    /// First collapsing step (filled by analysis; null until then).
    pub cliff: Option<Point>,
    /// Everything else the analysis found: other knees, the criteria, warnings, Little's law,
    /// the emergency stop.
    #[serde(default)]
    pub analysis: AnalysisSummary,
    /// The pre-flight noise check (null: skipped).
    #[serde(default)]
    pub preflight: Option<crate::health::preflight::Preflight>,
    /// Repeats (`--repeat N`) and the capacity plan (`--peak`); null for a single run without
    /// a peak.
    #[serde(default)]
    pub capacity: Option<CapacitySummary>,
    /// What the kernel probes saw.
    pub probes: ProbeSummary,
    /// TLS handshakes as the engine counted them (null for an http target). The uprobe's
    /// own count is `probes.tls_handshakes`.
    #[serde(default)]
    pub tls: Option<TlsSummary>,
    /// The data file's rows as the run used them (`--data`; absent without one).
    #[serde(default)]
    pub data: Option<DataSummary>,
    /// Loader-side health.
    pub loader: LoaderSummary,
    /// The `/proc` and cgroup view of the load machine, per second and at its peaks.
    pub health: HealthSummary,
    /// Per-second series of the whole run.
    pub series: Vec<SecondSummary>,
    /// Why requests failed: per error class, its first distinct messages and their counts
    /// (`{"protocol": [{"message": "5000 header fields, more than 64", "count": 600}]}`).
    /// The counts of a class add up to its total over the phases.
    #[serde(default)]
    pub errors_detail: BTreeMap<String, Vec<ErrorMessage>>,
}

/// Run parameters and totals.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunInfo {
    /// Target URL.
    pub url: String,
    /// Run start, RFC 3339 (UTC).
    pub started_at: String,
    /// Wall-clock length of the run, seconds.
    pub elapsed_s: f64,
    /// Connections in the pool.
    pub connections: usize,
    /// Shard threads.
    pub threads: usize,
    /// Client timeout, seconds.
    pub timeout_s: f64,
    /// Load profile (`constant`, `step`, `ramp`, `spike`, `soak`, `breakpoint`).
    #[serde(default)]
    pub profile: String,
    /// Connections were reused (keep-alive).
    #[serde(default = "yes")]
    pub keepalive: bool,
    /// Connections opened during the run (pool and reconnects).
    pub connections_opened: u64,
    /// Connection attempts that failed.
    pub connect_failures: u64,
    /// Requests re-sent once after a stale keep-alive connection.
    pub retried_on_stale_connection: u64,
    /// Requests in flight or waiting when a stopped run stopped waiting for them (the same
    /// as the phases' `errors.aborted`, summed).
    #[serde(default)]
    pub abandoned: u64,
    /// Connects that failed for want of a local port (`EADDRNOTAVAIL`).
    #[serde(default)]
    pub connect_no_port: u64,
    /// Sends due within this window of each other left together (the wake-up strategy's
    /// batching window, or `--wake-window`), µs; 0: a wake-up per send.
    #[serde(default)]
    pub wake_window_us: f64,
    /// The window followed the shards' measured wake-up lateness (the default from 20,000
    /// req/s per shard), up to `wake_window_us`, rather than being the fixed `--wake-window`.
    #[serde(default)]
    pub wake_window_adaptive: bool,
    /// Loader version.
    pub loader_version: String,
    /// The command line that started the run, one argument per entry (empty in summaries
    /// written before it was recorded).
    #[serde(default)]
    pub command_line: Vec<String>,
}

/// The trust verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdict {
    /// Whether the numbers can be trusted; null while no verdict is computed.
    pub trusted: Option<bool>,
    /// Reasons found.
    pub reasons: Vec<Reason>,
}

/// One reason of the verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reason {
    /// Stable code.
    pub code: String,
    /// `loader`, `network` or `target`.
    pub side: String,
    /// Whether it invalidates the run.
    pub invalidates: bool,
    /// Measured value.
    pub value: Option<f64>,
    /// Limit it was held against.
    pub limit: Option<f64>,
    /// Human sentence.
    pub detail: String,
}

fn yes() -> bool {
    true
}
