//! The analysis' figures: knees, cliff, steps, Little's law, the emergency stop, the capacity
//! plan over repeats, and what a spike or a soak run is for. The rules that fill them are in
//! the analysis module.

use serde::{Deserialize, Serialize};

use super::Criteria;

/// The analysis beyond `knee` and `cliff`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AnalysisSummary {
    /// The break criteria the steps were judged against.
    pub criteria: Option<Criteria>,
    /// How the knee was found and what it means (e.g. a lower bound when every step passed).
    pub knee_detail: Option<String>,
    /// Last step whose goodput still followed the offered rate.
    pub throughput_knee: Option<Point>,
    /// Step before the first where the rate rose but goodput gained < 5 % while p99 rose > 25 %.
    pub adaptive_knee: Option<Point>,
    /// Failed steps that a later step passed after (instability, not capacity).
    pub unstable_steps: Vec<String>,
    /// Steps set aside because the verdict could not vouch for their own numbers
    /// (`verdict.steps`); the knees and the cliff are found among the other steps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub set_aside_steps: Vec<String>,
    /// Whether the SLO knee stands on trusted steps alone: null when no step was set aside;
    /// true when the step that broke it was trusted and no set-aside step lies between the
    /// two (so the run's conclusion holds, and it exits by its gates); false when a set-aside
    /// step may hold the knee.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knee_on_trusted_steps: Option<bool>,
    /// Which rule found the cliff, and the numbers.
    pub cliff_detail: Option<String>,
    /// Percentiles that rest on too few tail samples, per step.
    pub tail_warnings: Vec<String>,
    /// Little's law cross-check per step.
    pub little: Vec<LittleSummary>,
    /// The emergency stop, if it fired.
    pub emergency_stop: Option<EmergencyStop>,
    /// Spike profile: time to recover after the peak.
    #[serde(default)]
    pub spike: Option<SpikeSummary>,
    /// Soak profile: the loader's own drift from start to end.
    #[serde(default)]
    pub soak: Option<SoakSummary>,
    /// Whether the warm-up had settled by its end (null without a warm-up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<WarmupSummary>,
    /// Constant and soak runs: the p99, errors and watched memory over the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trends: Option<TrendSummary>,
    /// The Universal Scalability Law fitted to the trusted steps (`analysis/usl.rs`); null
    /// for a run without measured steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usl: Option<UslSummary>,
}

/// The first measured seconds against the warm-up's last: still warming, or warm.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct WarmupSummary {
    /// Every signal had settled by the warm-up's end.
    pub settled: bool,
    /// What had not: `connections still opening`, `p99 still falling (12.1 → 4.2 ms)`, ….
    pub unsettled: Vec<String>,
    /// About how long a warm-up would have been enough, s: when the last of those settled
    /// in the run's later seconds (null when settled, or when it never did within the run).
    pub enough_s: Option<u64>,
    /// The sentence the report prints.
    pub detail: String,
}

/// Repeats and the capacity plan.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CapacitySummary {
    /// Each run's knee, req/s (null: that run had none), in run order.
    pub knees: Vec<Option<f64>>,
    /// Each run's output directory.
    pub runs: Vec<String>,
    /// The minimum of the knees: what was shown sustainable in every run.
    pub max_sustainable: Option<f64>,
    /// Lowest and highest knee.
    pub range: Option<(f64, f64)>,
    /// (max − min) / max of the knees.
    pub relative_spread: Option<f64>,
    /// Steps between the lowest and highest knee.
    pub steps_apart: Option<usize>,
    /// At least 3 runs with knees at most one step apart.
    pub settled: bool,
    /// Runs (1-based) left out of the max sustainable rate: their knee may lie among steps the
    /// verdict could not vouch for (`analysis.knee_on_trusted_steps` false in that run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spoiled_runs: Vec<usize>,
    /// Usable share of the max sustainable rate per node.
    pub margin: f64,
    /// Peak demand to plan for, req/s.
    pub peak_rps: Option<f64>,
    /// Max sustainable × margin.
    pub usable_per_node: Option<f64>,
    /// ceil(peak / usable) + 1.
    pub nodes: Option<u64>,
}

/// Little's law for one step.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LittleSummary {
    /// Step name.
    pub step: String,
    /// Expected mean requests on the wire (sent/s × mean service time).
    pub on_wire: f64,
    /// Expected mean requests in the system, waiting included (offered/s × mean latency).
    pub in_system: f64,
    /// Highest in-flight count seen.
    pub observed_peak: Option<u64>,
    /// Observed peak ÷ expected mean.
    pub ratio: Option<f64>,
    /// Findings (`peak_below_mean`, `loader_backlog`, `bursty`).
    pub findings: Vec<String>,
}

/// The emergency stop.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EmergencyStop {
    /// Second of the run at which it fired.
    pub at_s: u64,
    /// Since which second the condition held.
    pub since_s: u64,
    /// `errors` or `goodput`.
    pub cause: String,
    /// What was seen.
    pub detail: String,
    /// From the flag being raised to the last request sent, ms (0: nothing sent after).
    pub halted_within_ms: Option<f64>,
    /// The loader itself was behind its schedule while the condition held: the stop is the
    /// loader's, not a cliff of the target's. Always what the verdict's `emergency_stop`
    /// reason says (set from it once the run is judged).
    #[serde(default)]
    pub loader_behind: bool,
    /// The condition was met after the plan's last request was due: the run had already
    /// ended, and the stop cut nothing.
    #[serde(default)]
    pub after_last_send: bool,
}

/// A step of the analysis.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    /// Rate of the step.
    pub rps: f64,
    /// Step name.
    pub step: String,
}

/// The spike's aftermath.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SpikeSummary {
    /// Seconds from the start of `recovery` until clean service resumed (null: never did).
    pub time_to_recover_s: Option<u64>,
    /// p99 of the `base` phase, ms.
    pub base_p99_ms: Option<f64>,
    /// p99 at the peak, ms.
    pub peak_p99_ms: Option<f64>,
    /// p99 over the whole `recovery` phase, ms.
    pub recovery_p99_ms: Option<f64>,
}

/// The loader's drift over a soak.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SoakSummary {
    /// Loader RSS at the first second, MiB.
    pub rss_mib_start: Option<f64>,
    /// Loader RSS at the end, MiB.
    pub rss_mib_end: Option<f64>,
    /// Open descriptors in the first sampled second.
    pub fds_start: Option<u64>,
    /// Open descriptors in the last sampled second.
    pub fds_end: Option<u64>,
    /// Connections opened over the run (a keep-alive pool should open each once).
    pub connections_opened: u64,
}

/// Trends over a constant or soak run (`analysis.trends`): per bucket of the measured seconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TrendSummary {
    /// Bucket length, s: 60, or 10 for a run shorter than five minutes.
    pub bucket_s: u64,
    /// Each bucket's p99, ms: the median of its seconds' p99s (null: no answer in it).
    pub p99_ms: Vec<Option<f64>>,
    /// Least-squares slope of those, ms per minute.
    pub p99_slope_ms_per_min: Option<f64>,
    /// Each bucket's failed share of answers, %.
    pub error_pct: Vec<f64>,
    /// Its slope, percentage points per minute.
    pub error_slope_pct_per_min: Option<f64>,
    /// Each watched source's memory and descriptors, by name.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub watched: std::collections::BTreeMap<String, WatchTrend>,
    /// What the trends say: `p99 keeps rising …`, `errors creep up …`, `app's memory rises
    /// monotonically …` (empty: steady).
    pub notes: Vec<String>,
}

/// One watched source's drift over the run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct WatchTrend {
    /// Memory slope, MiB per hour.
    pub memory_mib_per_h: Option<f64>,
    /// The memory rose between almost every pair of buckets, by 5 % or more in all.
    pub memory_rises_monotonically: bool,
    /// Open descriptors' slope per hour (process trees).
    pub fds_per_h: Option<f64>,
}

/// The USL fit (`X(N) = λN ÷ (1 + σ(N − 1) + κN(N − 1))`) over a run's trusted steps.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct UslSummary {
    /// Fitted (at least 6 trusted steps with answers, and a fit with σ, κ ≥ 0).
    pub fitted: bool,
    /// One sentence: the coefficients, the peak and the error, or why it was not fitted.
    pub detail: String,
    /// The points: each trusted step's concurrency (ok/s × mean latency) and ok/s.
    pub points: Vec<UslPoint>,
    /// Contention: the serialised share.
    pub sigma: Option<f64>,
    /// Crosstalk: the coherency cost.
    pub kappa: Option<f64>,
    /// Throughput of one unit of concurrency, req/s.
    pub lambda: Option<f64>,
    /// The concurrency of the peak, `√((1 − σ) ÷ κ)` (null when κ = 0).
    pub peak_n: Option<f64>,
    /// Throughput at the peak, req/s.
    pub peak_x: Option<f64>,
    /// Mean |predicted − measured| ÷ measured over the points, percent.
    pub error_pct: Option<f64>,
}

/// One point of the USL fit.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct UslPoint {
    /// The step.
    pub step: String,
    /// Its concurrency.
    pub n: f64,
    /// Its ok/s.
    pub x: f64,
}
