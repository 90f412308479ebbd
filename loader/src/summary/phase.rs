//! Per-phase and per-second figures: what each phase sent and got back, and how late.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Percentiles in milliseconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LatencyMs {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest value.
    pub max: f64,
    /// Mean.
    pub mean: f64,
    /// Number of values.
    pub count: u64,
}

/// Send-lag percentiles in milliseconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SendLagMs {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile (0 in summaries written before it was kept).
    #[serde(default)]
    pub p999: f64,
    /// Largest value.
    pub max: f64,
}

/// One distinct failure message and how often it occurred.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ErrorMessage {
    /// What went wrong (an errno, a protocol problem, a status code).
    pub message: String,
    /// How many requests failed with it.
    pub count: u64,
}

/// One phase.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseSummary {
    /// Name (`warmup`, `main`, `step 2`).
    pub name: String,
    /// `warmup`, `ramp` or `hold`.
    pub kind: String,
    /// Start offset in the run, seconds.
    pub start_s: f64,
    /// Length, seconds.
    pub duration_s: f64,
    /// The part of the phase that ran, seconds: its length, or less when the run stopped
    /// during it (the rates are per second of this).
    #[serde(default)]
    pub measured_s: Option<f64>,
    /// Planned arrival rate, req/s; in a closed run, what its users would send at the
    /// lightest step's pace, `N × X₀ ÷ N₀` (see `closed`).
    pub offered_rps: f64,
    /// A closed run's phase: its virtual users and its throughput law (null: open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed: Option<super::ClosedStep>,
    /// Sends inside the phase window per second.
    pub sent_rps: f64,
    /// 2xx/3xx completions inside the phase window per second (goodput).
    pub ok_rps: f64,
    /// Requests intended in this phase.
    pub requests: u64,
    /// Of those, sent.
    pub sent: u64,
    /// Of those, answered 2xx/3xx.
    pub ok: u64,
    /// Failures by class.
    pub errors: BTreeMap<String, u64>,
    /// gRPC runs: answers by `grpc-status` name (`OK`, `UNAVAILABLE`, …), codes seen only;
    /// every non-OK one is also in `errors.grpc`. Absent on HTTP runs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub grpc: BTreeMap<String, u64>,
    /// Sends more than 10 ms behind schedule.
    pub late: u64,
    /// Of the late sends, those that did not wait for a connection (the loader was late).
    #[serde(default)]
    pub late_unpooled: u64,
    /// The most any of those was late, ms (null: none late, or a summary from before it was
    /// kept): how far the loader itself fell behind at worst.
    #[serde(default)]
    pub late_unpooled_max_ms: Option<f64>,
    /// Sends that found the pool exhausted and waited for a connection.
    pub waited_for_connection: u64,
    /// Of those, the waits that were mostly the loader's: had it read each answer when the
    /// kernel stamped it, the send would have left in less than half the time.
    #[serde(default)]
    pub waited_on_loader: u64,
    /// Late sends of the loader's made after the phase ended: its backlog spilled over.
    #[serde(default)]
    pub late_after_end: u64,
    /// Requests due in this phase and never sent (dropped at their deadline, or waiting when
    /// the run stopped); each is in `send_lag_ms` with the lag it had reached then.
    #[serde(default)]
    pub due_unsent: u64,
    /// Of those, the loader's: a connection was free in the kernel's view before the
    /// deadline or the stop (also counted in `late` and `late_unpooled` when over 10 ms).
    #[serde(default)]
    pub due_unsent_loader: u64,
    /// Of those, the ones dropped at their deadline (not counted in the target's
    /// `dropped_sends`).
    #[serde(default)]
    pub dropped_loader: u64,
    /// How long answers sat in the loader's socket before it read them (read time − the
    /// kernel's receive stamp of the last byte), ms; null when no answer was stamped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_lag_ms: Option<LatencyMs>,
    /// Sends that left up to `run.send_ahead_us` before their intended time, with a
    /// wake-up that sent another; their latency is measured from when they left.
    #[serde(default)]
    pub sent_ahead: u64,
    /// Latency from the intended send time (coordinated omission corrected).
    pub latency_ms: LatencyMs,
    /// Latency from the actual send time (uncorrected, as closed-loop tools report it).
    pub service_ms: LatencyMs,
    /// Actual send − intended send.
    pub send_lag_ms: SendLagMs,
    /// The loader's own part of the send lag: actual send − the later of the intended time
    /// and the moment the shard woke (or got a connection) for it. The rest of the lag is the
    /// host's wake-up lateness or the wait for a connection.
    #[serde(default)]
    pub own_lag_ms: Option<SendLagMs>,
    /// How late the shards woke from sleeps that ended on their timer inside the phase's
    /// window, µs: the host's wake-up jitter while this phase's sends were due (null: none
    /// measured, or a summary from before it was recorded).
    #[serde(default)]
    pub wake_late_us: Option<super::WakeLateUs>,
    /// Judged against the SLO (null: no criteria given).
    pub passed: Option<bool>,
    /// Why it failed.
    pub fail_reasons: Vec<String>,
    /// Each watched source over the step's settled seconds, by name (`--watch`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub watch: BTreeMap<String, super::WatchStep>,
}

/// One second of the run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SecondSummary {
    /// Seconds since the run's start.
    pub t: u64,
    /// Requests planned in this second.
    pub offered: u64,
    /// Sent.
    pub sent: u64,
    /// 2xx/3xx responses.
    pub ok: u64,
    /// Failures by class (only non-zero classes).
    pub errors: BTreeMap<String, u64>,
    /// Upper bound of requests in flight (sum of the shards' peaks).
    pub in_flight_max: u64,
    /// Sends (and due requests given up unsent) the loader itself made > 10 ms late.
    #[serde(default)]
    pub late_loader: u64,
    /// CPU of the busiest shard this second, percent of one core.
    pub cpu: Option<f64>,
    /// Connections the loader closed this second because their request timed out.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub closed_on_timeout: u64,
    /// Connections the target closed or reset this second.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub closed_by_target: u64,
    /// Connects that failed this second for want of a local port (`EADDRNOTAVAIL`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub connect_no_port: u64,
    /// Corrected latency of the requests that completed this second (null: none did, or a
    /// summary written before it was kept). Percentiles within ±6.25 %, max exact.
    #[serde(default)]
    pub latency_ms: Option<SecondLatencyMs>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One second's latency, milliseconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SecondLatencyMs {
    /// Median (bucket midpoint).
    pub p50: f64,
    /// 99th percentile (bucket midpoint).
    pub p99: f64,
    /// Largest (exact).
    pub max: f64,
}
