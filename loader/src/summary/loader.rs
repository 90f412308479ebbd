//! The loader's own health as the summary records it: probe figures (kernel-exact, null when a
//! probe did not run), TLS as the engine counted it, CPU and memory, the host's wake-up
//! lateness, `/proc` and cgroup health, and the certificate it was compared against.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::health::{HealthPeaks, HealthSample};
use crate::probes::ProbeSample;

/// Connect-latency figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnectMs {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
    /// Connects measured.
    pub count: u64,
    /// Connects that failed.
    pub failed: u64,
}

/// TLS handshakes as the uprobes saw them: the clock runs from the start marker (TCP
/// connected, ClientHello about to be written) to the end marker (handshake complete).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProbeHandshakeMs {
    /// Median of completed handshakes (bucket midpoint, ±12.5 %).
    pub p50: f64,
    /// 99th percentile (±12.5 %).
    pub p99: f64,
    /// Longest (exact).
    pub max: f64,
    /// Handshakes completed (full and resumed).
    pub count: u64,
    /// Of those, resumed.
    pub resumed: u64,
    /// Handshakes that failed.
    pub failed: u64,
    /// Handshakes begun (begun − completed − failed: still under way or abandoned at the end).
    pub started: u64,
}

/// TLS handshakes of an https run, counted by the engine itself.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TlsSummary {
    /// Handshakes completed (one per connection opened, when none failed).
    pub handshakes: u64,
    /// Of those, resumed from an earlier session (ticket or session id).
    pub resumed: u64,
    /// Handshakes that failed (certificate rejected, alert, closed, timed out); their
    /// requests are counted in `errors.connect` (or `timeout`).
    pub failures: u64,
    /// Why the first failed handshake failed.
    pub first_error: Option<String>,
    /// TCP connect done → handshake done.
    pub handshake_ms: HandshakeMs,
}

/// Handshake durations.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HandshakeMs {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

/// Resets by side.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Resets {
    /// Sent by the loader.
    pub sent: u64,
    /// Received by the loader.
    pub received: u64,
}

/// TIME_WAIT figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimeWait {
    /// The loader's sockets' entries into TIME_WAIT.
    pub entries: u64,
    /// Highest live count of the loader's own TIME_WAIT sockets (its entries of the last
    /// 60 s, at most the namespace's count).
    pub max_live: u64,
    /// Highest live count of the whole network namespace (neighbours and a local target
    /// included); null when it could not be read.
    #[serde(default)]
    pub host_max_live: Option<u64>,
    /// Highest live count of the loader's own TIME_WAIT that its own closes left: its live
    /// count less the connections it closed on timeouts in the 60 s before (the target's
    /// slowness, not the loader's reuse). Set in one step's view of the run; null in the
    /// summary, where the verdict adds it up from the per-second series.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_choice_max: Option<u64>,
}

/// Run-queue delay of loader threads, microseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunQueueUs {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
    /// Waits measured.
    #[serde(default)]
    pub count: u64,
    /// The waits' non-empty buckets as `[low_us, high_us, count]`, ascending (four to a
    /// power of two): what the verdict reads to tell how many sends long waits held up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<[f64; 3]>,
}

impl RunQueueUs {
    /// Time spent waiting beyond `lag_ms` in all, ms: the sends due at a steady rate during
    /// waits are late by more than `lag_ms` for `Σ max(0, wait − lag_ms)` of the run (a wait
    /// counts at its bucket's midpoint, the longest at most `max`). Without buckets (a summary
    /// from before they were kept) only the longest wait is known.
    pub fn held_beyond_ms(&self, lag_ms: f64) -> f64 {
        let beyond = |wait_us: f64| (wait_us / 1000.0 - lag_ms).max(0.0);
        if self.buckets.is_empty() {
            return beyond(self.max);
        }
        self.buckets.iter().map(|&[low, high, n]| n * beyond(((low + high) / 2.0).min(self.max).max(low))).sum()
    }
}

/// What the kernel probes saw (null where a probe is not built yet or did not load).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct ProbeSummary {
    /// The probes loaded and attached.
    pub available: bool,
    /// Why not, when they did not.
    pub unavailable_reason: Option<String>,
    /// Connect latency.
    pub connect_ms: Option<ConnectMs>,
    /// SYN retransmits of loader sockets.
    pub syn_retransmits: Option<u64>,
    /// Resets.
    pub resets: Option<Resets>,
    /// TIME_WAIT.
    pub time_wait: Option<TimeWait>,
    /// Highest ephemeral-port use by the loader itself (its open sockets and its own
    /// TIME_WAIT), fraction of `ip_local_port_range`.
    pub ephemeral_ports_max_ratio: Option<f64>,
    /// The same for the whole network namespace (every TIME_WAIT socket counted).
    #[serde(default)]
    pub host_ephemeral_ports_max_ratio: Option<f64>,
    /// TLS handshakes the loader completed, counted by the uprobes on its handshake path
    /// (0 on an http run; null when the probe is not attached). The engine's own count is
    /// `tls.handshakes`; the two agree unless events were lost.
    pub tls_handshakes: Option<u64>,
    /// The uprobes' detail: durations of completed handshakes and counts by outcome.
    #[serde(default)]
    pub tls_handshake_ms: Option<ProbeHandshakeMs>,
    /// Run-queue delay of the shard threads (the ones that send).
    pub runqueue_us: Option<RunQueueUs>,
    /// Run-queue delay of the loader's other threads (main thread, samplers).
    #[serde(default)]
    pub runqueue_other_us: Option<RunQueueUs>,
    /// TCP state transitions of loader sockets, `"OLD->NEW": n`.
    pub tcp_states: Option<BTreeMap<String, u64>>,
    /// Events or map updates the probes could not record.
    pub lost: Option<u64>,
    /// All retransmitted segments of loader sockets (SYNs included).
    #[serde(default)]
    pub retransmits: Option<u64>,
    /// Packets of loader sockets dropped by the kernel, by drop reason.
    #[serde(default)]
    pub drops: Option<BTreeMap<String, u64>>,
    /// Lost events by cause.
    #[serde(default)]
    pub lost_by_reason: Option<BTreeMap<String, u64>>,
    /// Share of the events behind each rule that were lost (run-queue: scheduler events;
    /// sockets: the loader's TCP state changes).
    #[serde(default)]
    pub loss_share: Option<crate::probes::LossShare>,
    /// Each probe: `ok` or why it is not attached.
    #[serde(default)]
    pub availability: Option<BTreeMap<String, String>>,
    /// What the probes saw each second.
    #[serde(default)]
    pub series: Vec<ProbeSample>,
}

/// Certificate comparison.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CertificateRef {
    /// Certified ceiling, req/s — or, when `lower_bound`, the certified lower bound of it.
    pub ceiling_rps: f64,
    /// Achieved / ceiling.
    pub ratio: f64,
    /// The certificate holds a lower bound only (its calibration was limited by the target
    /// or `--max-rate`): the true ratio is at most `ratio`.
    #[serde(default)]
    pub lower_bound: bool,
}

/// Loader health.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoaderSummary {
    /// 95th percentile of the busiest shard's per-second CPU, percent of one core (each
    /// shard's p95, the highest of them: one saturated shard is saturation).
    pub cpu_p95: Option<f64>,
    /// Highest per-second CPU of any shard, same unit.
    pub cpu_max: Option<f64>,
    /// Each shard's p95, in shard order.
    #[serde(default)]
    pub cpu_p95_by_shard: Vec<f64>,
    /// How late the shards woke from sleeps that ended on their timer, µs: the host's
    /// wake-up jitter during the run (null: no timer wake-up measured).
    #[serde(default)]
    pub wake_late_us: Option<WakeLateUs>,
    /// Certificate comparison (null: no certificate).
    pub certificate: Option<CertificateRef>,
    /// Resident memory of the loader process at the first second of the run, MiB.
    pub rss_mib_start: Option<f64>,
    /// Resident memory at the end of the run, MiB.
    pub rss_mib_end: Option<f64>,
    /// Peak resident memory (VmHWM), MiB.
    pub rss_mib_peak: Option<f64>,
}

/// Wake-up lateness of the shards, µs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WakeLateUs {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
    /// Wake-ups measured.
    pub count: u64,
}

/// `/proc` and cgroup figures of the run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HealthSummary {
    /// Peaks over the run.
    pub peaks: HealthPeaks,
    /// One sample per second.
    pub series: Vec<HealthSample>,
    /// The NIC the loader's traffic left by (null: not found).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic: Option<crate::health::nic::NicSummary>,
}
