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
//! | `closed.rs` | a closed run's users and think time, each step's load and throughput law |
//! | `watch.rs` | the target's watched resources: each second, each step, the knee |

mod analysis;
mod build;
mod closed;
mod criteria;
mod data;
mod loader;
mod phase;
mod watch;

pub use analysis::{
    AnalysisSummary, CapacitySummary, EmergencyStop, LittleSummary, Point, SoakSummary, SpikeSummary, TrendSummary,
    UslPoint, UslSummary, WarmupSummary, WatchTrend,
};
pub(crate) use build::cpu_stats;
pub use build::{Inputs, build, latency, offered_between, offered_in, send_lag};
pub use closed::{ClosedRun, ClosedStep};
pub use criteria::Criteria;
pub use data::DataSummary;
pub use loader::{
    CertificateRef, ConnectMs, HandshakeMs, HealthSummary, LoaderSummary, ProbeHandshakeMs, ProbeSummary, Resets,
    RunQueueUs, TimeWait, TlsSummary, WakeLateUs,
};
pub use phase::{ErrorMessage, LatencyMs, PhaseSummary, SecondLatencyMs, SecondSummary, SendLagMs};
pub use watch::{WatchSecond, WatchShare, WatchSource, WatchStep, WatchSummary, WatchValues};

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Schema name written in every summary.
pub const SCHEMA: &str = "loader.summary/v1";

/// The whole summary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Summary {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// The run stopped before its plan ended (SIGINT, SIGTERM, SIGHUP, `loader stop`);
    /// numbers cover what ran.
    pub interrupted: bool,
    /// What stopped it: `"SIGINT"`, `"SIGTERM"`, `"SIGHUP"` or `"loader stop"` (null when
    /// it ran to the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<String>,
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
    /// The target's resources (`--watch`, `[[watch]]`); null when nothing was watched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<WatchSummary>,
    /// Why requests failed: per error class, its first distinct messages and their counts
    /// (`{"protocol": [{"message": "5000 header fields, more than 64", "count": 600}]}`).
    /// The counts of a class add up to its total over the phases.
    #[serde(default)]
    pub errors_detail: BTreeMap<String, Vec<ErrorMessage>>,
    /// The machines this summary was merged from (`loader merge`; absent for one machine's
    /// own run).
    #[serde(default)]
    pub merged: Option<MergedFrom>,
}

/// What `loader merge` joined.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct MergedFrom {
    /// One entry per machine, by index.
    pub shards: Vec<MergedShard>,
    /// How far apart the machines' run zeros were on their clocks, ms.
    pub start_spread_ms: f64,
}

/// One machine of a merged run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct MergedShard {
    /// Its `--shard` index.
    pub index: u64,
    /// Its output directory.
    pub dir: String,
    /// Its own verdict.
    pub trusted: Option<bool>,
    /// Its run zero on its clock, Unix seconds.
    pub zero_unix_s: Option<f64>,
    /// Its latency p99 per phase, ms.
    pub p99_ms: Vec<f64>,
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
    /// How requests arrived: `uniform` (evenly spaced) or `poisson` (`--arrival`); `closed`:
    /// no arrivals, a closed run's users sent as their answers came (`closed`).
    #[serde(default = "uniform")]
    pub arrival: String,
    /// The seed of the Poisson arrivals (`--seed`): the same seed, the same instants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival_seed: Option<u64>,
    /// A closed run's users and think time (`--vus`, `--think`); null: an open run, whose
    /// load is its arrival rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed: Option<ClosedRun>,
    /// Connections were reused (keep-alive).
    #[serde(default = "yes")]
    pub keepalive: bool,
    /// The protocol spoken: `http/1.1` or `h2` (`--http2`).
    #[serde(default = "http1")]
    pub protocol: String,
    /// HTTP/2: streams in flight per connection at most (`--max-streams`); 0 on HTTP/1.1.
    #[serde(default)]
    pub max_streams: u32,
    /// The CPU wake-up latency the loader held for the run (`/dev/cpu_dma_latency`, µs; 0:
    /// idle CPUs polled rather than halted). `null`: not held (`--cpu-dma-latency off`, or
    /// not root).
    #[serde(default)]
    pub cpu_dma_latency_us: Option<u32>,
    /// The machine's cpuidle driver (`/sys/devices/system/cpu/cpuidle/current_driver`), which
    /// is what honours `cpu_dma_latency_us`. `"none"`: the machine has none — idle CPUs halt
    /// whatever is held, so the loader holds nothing by default there. `null`: not recorded.
    #[serde(default)]
    pub cpuidle_driver: Option<String>,
    /// Whether the load machine is a virtual one (its CPU says it runs under a hypervisor):
    /// there the loader holds no `cpu_dma_latency_us` by default — polling vCPUs draw the
    /// host's steal. `null`: not recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine: Option<bool>,
    /// Connections opened during the run (pool and reconnects).
    pub connections_opened: u64,
    /// Connection attempts that failed.
    pub connect_failures: u64,
    /// Requests whose deadline passed while their connection was opening, before the connect
    /// had its whole timeout: already late when the connect began (not failed connects).
    #[serde(default)]
    pub deadline_while_connecting: u64,
    /// Requests re-sent once after a stale keep-alive connection.
    pub retried_on_stale_connection: u64,
    /// HTTP/2 answers stamped with the arrival of the TCP segment that carried their last
    /// byte (the probes follow each h2c connection's segments), so the shard need not wake
    /// for each answer on a connection with several streams. 0 without the probes.
    #[serde(default)]
    pub stamps_by_segment: u64,
    /// Connections no longer followed because their segment record disagreed with the
    /// kernel's receive stamps (their answers then wake the shard again).
    #[serde(default)]
    pub segment_follow_lost: u64,
    /// Requests in flight or waiting when a stopped run stopped waiting for them (the same
    /// as the phases' `errors.aborted`, summed).
    #[serde(default)]
    pub abandoned: u64,
    /// Connects that failed for want of a local port (`EADDRNOTAVAIL`).
    #[serde(default)]
    pub connect_no_port: u64,
    /// Connections the loader closed because their request timed out: the target did not
    /// answer within the timeout (its slowness, whatever TIME_WAIT they leave on the loader).
    #[serde(default)]
    pub closed_on_timeout: u64,
    /// Connections the target closed or reset (under a request, idle, or after answering).
    #[serde(default)]
    pub closed_by_target: u64,
    /// Sends due within this window of each other left together (the wake-up strategy's
    /// batching window, or `--wake-window`), µs; 0: a wake-up per send.
    #[serde(default)]
    pub wake_window_us: f64,
    /// The window followed the shards' measured wake-up lateness (the default from 20,000
    /// req/s per shard), up to `wake_window_us`, rather than being the fixed `--wake-window`.
    #[serde(default)]
    pub wake_window_adaptive: bool,
    /// A wake-up that sent also sent what fell due within this much after it, early
    /// (`--send-ahead`), µs; 0: nothing left before its time (or a summary from before).
    #[serde(default)]
    pub send_ahead_us: f64,
    /// Loader version.
    pub loader_version: String,
    /// The command line that started the run, one argument per entry (empty in summaries
    /// written before it was recorded).
    #[serde(default)]
    pub command_line: Vec<String>,
    /// This machine's part of a run spread over several (`--shard`; absent: the whole run).
    #[serde(default)]
    pub shard: Option<ShardInfo>,
    /// The run's zero instant on this machine's wall clock, seconds since the Unix epoch
    /// (µs precision): what `loader merge` aligns the machines' seconds on.
    #[serde(default)]
    pub zero_unix_s: Option<f64>,
    /// The kernel's view of this machine's clock discipline (NTP/PTP via `adjtimex`): how far
    /// its wall clock may be from true time, which bounds how well machines start together.
    #[serde(default)]
    pub clock: Option<ClockState>,
    /// When the last request left, seconds after the run's zero.
    #[serde(default)]
    pub last_send_s: Option<f64>,
    /// When a `loader stop` reached this run's control endpoint (`--control`), Unix seconds.
    #[serde(default)]
    pub stop_requested_unix_s: Option<f64>,
    /// The once-a-second checkpoint (`summary.partial.json`, removed when this summary was
    /// written) and what it cost; null without an output directory (calibration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<CheckpointInfo>,
}

/// What the run's checkpoint wrote and cost (`run.checkpoint`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CheckpointInfo {
    /// Checkpoints written.
    pub writes: u64,
    /// Size of the last one, bytes.
    pub bytes: u64,
    /// The main loop's time spent on them (merge, summary, JSON, write), ms in all.
    pub main_ms: f64,
    /// The shards' time spent copying their records for them, ms in all shards.
    pub shard_ms: f64,
    /// Bytes appended to `latency.hlog` while the run went (each checkpoint's new samples).
    #[serde(default)]
    pub hlog_bytes: u64,
    /// Bytes of the settled per-second series appended beside the checkpoint
    /// (`summary.partial.series`, removed with it).
    #[serde(default)]
    pub series_bytes: u64,
}

/// `--shard INDEX/COUNT` as the run used it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ShardInfo {
    /// This machine's index, 0-based.
    pub index: u64,
    /// Machines in the run.
    pub count: u64,
}

/// The clock's synchronisation as `adjtimex(2)` reports it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct ClockState {
    /// The kernel considers the clock synchronised (`TIME_ERROR` not returned).
    pub synchronized: bool,
    /// Estimated error, µs (`esterror`).
    pub estimated_error_us: f64,
    /// Maximum error, µs (`maxerror`).
    pub max_error_us: f64,
}

impl ClockState {
    /// This machine's clock, now.
    pub fn read() -> Option<ClockState> {
        // SAFETY: `timex` is plain integers, for which all-zero is a valid value.
        let mut tx: libc::timex = unsafe { std::mem::zeroed() };
        // SAFETY: with `modes` 0, adjtimex only reads the kernel's clock state into `tx`.
        let state = unsafe { libc::adjtimex(&mut tx) };
        (state >= 0).then_some(ClockState {
            synchronized: state != libc::TIME_ERROR,
            estimated_error_us: tx.esterror as f64,
            max_error_us: tx.maxerror as f64,
        })
    }
}

/// The trust verdict.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Verdict {
    /// Whether the numbers can be trusted — every measured step (phase) of them; null while
    /// no verdict is computed. A stepped run whose later steps are untrusted is `false` here
    /// while `steps` says which hold (and `analysis.knee_on_trusted_steps` whether its knee
    /// does).
    pub trusted: Option<bool>,
    /// Reasons found, over all steps: a reason about one phase names it first
    /// (`step 5: …`); one about the load machine found in several steps is given once, with
    /// the steps it held in (`in step 5, step 6: …`).
    pub reasons: Vec<Reason>,
    /// Each measured phase judged on the evidence of its own seconds (DESIGN.md, Verdict:
    /// per step, not per run), in order. Empty in summaries written before steps were judged
    /// apart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepTrust>,
}

impl Verdict {
    /// Its word on phase `name`: the step's own verdict when it has one, else the run's (a
    /// summary written before steps were judged apart); `None` while nothing was judged.
    pub fn on_phase(&self, name: &str) -> Option<bool> {
        self.steps.iter().find(|t| t.phase == name).map(|t| t.trusted).or(self.trusted)
    }
}

/// One measured phase's own verdict.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StepTrust {
    /// The phase's name (`main`, `step 3`).
    pub phase: String,
    /// Whether the evidence of its seconds lets the loader vouch for its numbers.
    pub trusted: bool,
    /// The codes of the reasons that invalidate it (empty when trusted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
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

fn uniform() -> String {
    "uniform".into()
}

fn http1() -> String {
    "http/1.1".to_string()
}
