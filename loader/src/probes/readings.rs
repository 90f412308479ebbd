//! What the probes measured, as plain values: [`ProbeReadings`] (cumulative since start,
//! shaped like the `probes` section of `summary.json`) and [`ProbeSample`] (one per
//! [`Probes::sample`](super::Probes::sample) call, per-interval).
//!
//! Owns: the shapes and the arithmetic from raw readings to them. Does not: read maps or
//! `/proc` (the readers do), or judge anything (the verdict does).
//!
//! A probe that is unavailable reads as zero here; [`ProbeReadings::availability`] says which
//! numbers to trust (`"ok"`) and why the others are missing.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{histogram::LatencyHistogram, tls_handshakes::TlsHandshakes};

/// Everything the probes counted since start.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProbeReadings {
    /// Connect latency (SYN_SENT → ESTABLISHED) of the loader's sockets, and failed connects.
    pub connect_ms: ConnectMs,
    /// SYNs the loader's sockets retransmitted.
    pub syn_retransmits: u64,
    /// All segments the loader's sockets retransmitted, SYNs included.
    pub retransmits: u64,
    /// TCP resets on the loader's sockets, by side.
    pub resets: Resets,
    /// Active closes into TIME_WAIT and the live TIME_WAIT count.
    pub time_wait: TimeWait,
    /// Highest ephemeral-port use by the loader itself seen — its open sockets and its own
    /// TIME_WAIT — as a fraction of `ip_local_port_range`; `None` if never measured.
    pub ephemeral_ports_max_ratio: Option<f64>,
    /// The same for the whole network namespace: the loader's sockets and every TIME_WAIT
    /// socket, whoever left it (see `time_wait.rs`).
    pub host_ephemeral_ports_max_ratio: Option<f64>,
    /// Run-queue delay of the loader's shard threads.
    pub runqueue_us: RunqueueUs,
    /// Run-queue delay of the loader's other threads (main thread, samplers).
    pub runqueue_other_us: RunqueueUs,
    /// Packets dropped on the loader's sockets, by kernel drop reason (`"SOCKET_RCVBUFF"`).
    pub drops: BTreeMap<String, u64>,
    /// The loader's TLS handshakes as the uprobes saw them (zero for an http target).
    pub tls_handshakes: TlsHandshakes,
    /// TCP state transitions of the loader's sockets, `"OLD->NEW" → count`.
    pub tcp_states: BTreeMap<String, u64>,
    /// Events seen but not counted, all reasons (see `lost_by_reason`).
    pub lost: u64,
    /// Events seen but not counted, by reason (map full, read failure, kernel recursion
    /// misses…).
    pub lost_by_reason: BTreeMap<String, u64>,
    /// Share of the events behind each rule that were lost.
    pub loss_share: LossShare,
    /// Each probe's state: `"ok"` or why it is not running. Probes: `tcp_states`,
    /// `connect_latency`, `time_wait`, `syn_retransmits`, `resets_received`, `resets_sent`,
    /// `drops`, `runqueue`, `tls_handshakes`.
    pub availability: BTreeMap<String, String>,
    /// The connect-latency histogram behind `connect_ms`.
    pub connect_histogram: LatencyHistogram,
    /// The run-queue histogram behind `runqueue_us` (shard threads).
    pub runqueue_histogram: LatencyHistogram,
    /// The run-queue histogram behind `runqueue_other_us` (every other loader thread).
    pub runqueue_other_histogram: LatencyHistogram,
}

/// `summary.json` `probes.connect_ms`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ConnectMs {
    /// Median, ms (bucket midpoint, ±12.5 %); `None` when no connect completed.
    pub p50: Option<f64>,
    /// 99th percentile, ms (±12.5 %).
    pub p99: Option<f64>,
    /// Slowest connect, ms (exact).
    pub max: Option<f64>,
    /// Connects that completed (SYN_SENT → ESTABLISHED).
    pub count: u64,
    /// Connects that failed (SYN_SENT → CLOSE: refused, timed out, reset, aborted).
    pub failed: u64,
}

/// `summary.json` `probes.loss_share`: the share of events lost, by what the loss could hide.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct LossShare {
    /// Scheduler events (the run-queue rule's evidence) lost, fraction.
    pub runqueue: f64,
    /// TCP state changes of the loader's sockets (TIME_WAIT, ports, connects) lost, fraction.
    pub sockets: f64,
}

/// `summary.json` `probes.runqueue_us`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunqueueUs {
    /// Median, µs (bucket midpoint, ±12.5 %); `None` when nothing was measured.
    pub p50: Option<f64>,
    /// 99th percentile, µs (±12.5 %).
    pub p99: Option<f64>,
    /// Longest wait, µs (exact).
    pub max: Option<f64>,
    /// Waits measured.
    pub count: u64,
    /// The histogram's non-empty buckets as `[low_us, high_us, count]` (the summary keeps
    /// them; the per-second series does not).
    #[serde(skip)]
    pub buckets: Vec<[f64; 3]>,
}

/// `summary.json` `probes.resets`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Resets {
    /// Resets the loader's sockets sent.
    pub sent: u64,
    /// Resets the loader's sockets received.
    pub received: u64,
}

/// `summary.json` `probes.time_wait`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TimeWait {
    /// Active closes of the loader's sockets that left a TIME_WAIT socket (FIN_WAIT2 → CLOSE
    /// and CLOSING → CLOSE), since start.
    pub entries: u64,
    /// Highest live TIME_WAIT count of the loader's own sockets: its entries of the last
    /// 60 s (the kernel's fixed TIME_WAIT length), at most the namespace's count; `None` if
    /// never sampled.
    pub max_live: Option<u64>,
    /// Highest live TIME_WAIT count of the whole network namespace (`/proc/net/sockstat`
    /// `tw`: the loader's and every neighbour's); `None` if never sampled.
    pub host_max_live: Option<u64>,
}

/// One interval of the per-second series (what changed since the previous sample).
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct ProbeSample {
    /// Seconds since the probes started, at this sample.
    pub elapsed_s: f64,
    /// The run's second this sample closes: it covers the second before it, as
    /// `health.series[].t` does (null in summaries from before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t: Option<u64>,
    /// Connects started in the interval.
    pub connects: u64,
    /// Connects that failed in the interval.
    pub failed_connects: u64,
    /// Entries into TIME_WAIT in the interval.
    pub time_wait_entries: u64,
    /// Live TIME_WAIT now (sockstat, namespace-wide); `None` if unreadable.
    pub time_wait_live: Option<u64>,
    /// The loader's own live TIME_WAIT now (its entries of the last 60 s, at most
    /// `time_wait_live`).
    #[serde(default)]
    pub time_wait_own: Option<u64>,
    /// Ephemeral ports held now by the loader's sockets and every TIME_WAIT socket (the
    /// namespace's view); `None` if unreadable.
    pub ephemeral_ports_in_use: Option<u64>,
    /// `ephemeral_ports_in_use / range`; `None` if unreadable.
    pub ephemeral_ports_ratio: Option<f64>,
    /// The loader's own share of the range now: its open sockets' ports and its own live
    /// TIME_WAIT, over the range.
    #[serde(default)]
    pub own_ports_ratio: Option<f64>,
    /// SYN retransmits in the interval.
    pub syn_retransmits: u64,
    /// Resets sent in the interval.
    pub resets_sent: u64,
    /// Resets received in the interval.
    pub resets_received: u64,
    /// Drops on loader sockets in the interval (all reasons).
    pub drops: u64,
    /// Run-queue waits measured in the interval.
    pub runqueue_count: u64,
    /// 99th percentile run-queue delay of the shard threads in the interval, µs.
    pub runqueue_p99_us: Option<f64>,
    /// Upper bound of the interval's longest run-queue delay, µs (top of the highest bucket
    /// that grew, capped by the cumulative max).
    pub runqueue_max_us: Option<f64>,
    /// The interval's shard run-queue waits as `[low_us, high_us, count]`, non-empty buckets
    /// ascending: what a step's own run-queue figures are added up from (`verdict::scope`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runqueue_buckets: Vec<[f64; 3]>,
    /// TLS handshakes completed in the interval (uprobes).
    #[serde(default)]
    pub tls_handshakes: u64,
    /// Events lost in the interval.
    pub lost: u64,
}

impl ConnectMs {
    /// From the histogram and the failed count.
    pub(crate) fn new(histogram: &LatencyHistogram, failed: u64) -> Self {
        ConnectMs {
            p50: histogram.p50_ms(),
            p99: histogram.p99_ms(),
            max: histogram.max_ms(),
            count: histogram.count,
            failed,
        }
    }
}

impl RunqueueUs {
    /// From the histogram.
    pub(crate) fn new(histogram: &LatencyHistogram) -> Self {
        RunqueueUs {
            p50: histogram.p50_us(),
            p99: histogram.p99_us(),
            max: histogram.max_us(),
            count: histogram.count,
            buckets: histogram
                .buckets
                .iter()
                .map(|&(low, high, n)| [low as f64 / 1e3, high as f64 / 1e3, n as f64])
                .collect(),
        }
    }
}
