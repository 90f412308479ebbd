//! `summary.json`, schema `loader.summary/v1` — the contract scripts depend on.
//!
//! Every field DESIGN.md names is present; fields owned by work not done yet (knee, cliff,
//! most probes, the certificate, the verdict's judgement) are `null` rather than absent,
//! so consumers can rely on the shape. Extra fields are additions, never renames.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::health::{HealthPeaks, HealthSample};
use crate::probes::ProbeSample;
use crate::record::{ErrorClass, PhaseRecord, ShardRecord, TlsRecord};
use crate::scenario::Plan;

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

/// One distinct failure message and how often it occurred.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ErrorMessage {
    /// What went wrong (an errno, a protocol problem, a status code).
    pub message: String,
    /// How many requests failed with it.
    pub count: u64,
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
    /// Loader version.
    pub loader_version: String,
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
    /// Planned arrival rate, req/s.
    pub offered_rps: f64,
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
    /// Sends more than 10 ms behind schedule.
    pub late: u64,
    /// Of the late sends, those that did not wait for a connection (the loader was late).
    #[serde(default)]
    pub late_unpooled: u64,
    /// Sends that found the pool exhausted and waited for a connection.
    pub waited_for_connection: u64,
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
    /// Judged against the SLO (null: no criteria given).
    pub passed: Option<bool>,
    /// Why it failed.
    pub fail_reasons: Vec<String>,
}

/// The analysis beyond `knee` and `cliff`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AnalysisSummary {
    /// The break criteria the steps were judged against.
    pub criteria: Option<crate::analysis::Criteria>,
    /// How the knee was found and what it means (e.g. a lower bound when every step passed).
    pub knee_detail: Option<String>,
    /// Last step whose goodput still followed the offered rate.
    pub throughput_knee: Option<Point>,
    /// Step before the first where the rate rose but goodput gained < 5 % while p99 rose > 25 %.
    pub adaptive_knee: Option<Point>,
    /// Failed steps that a later step passed after (instability, not capacity).
    pub unstable_steps: Vec<String>,
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
    pub spike: Option<crate::analysis::profiles::SpikeSummary>,
    /// Soak profile: the loader's own drift from start to end.
    #[serde(default)]
    pub soak: Option<crate::analysis::profiles::SoakSummary>,
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
}

/// A step of the analysis.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    /// Rate of the step.
    pub rps: f64,
    /// Step name.
    pub step: String,
}

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
}

/// One second of the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// CPU of the busiest shard this second, percent of one core.
    pub cpu: Option<f64>,
}

/// Microseconds (histogram unit) to milliseconds; exact to the microsecond.
fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

fn latency(h: &Histogram<u64>) -> LatencyMs {
    let q = |q: f64| if h.is_empty() { 0.0 } else { ms(h.value_at_quantile(q)) };
    LatencyMs {
        p50: q(0.50),
        p90: q(0.90),
        p95: q(0.95),
        p99: q(0.99),
        p999: q(0.999),
        max: if h.is_empty() { 0.0 } else { ms(h.max()) },
        mean: (h.mean() / 1000.0 * 1000.0).round() / 1000.0,
        count: h.len(),
    }
}

fn send_lag(h: &Histogram<u64>) -> SendLagMs {
    let q = |q: f64| if h.is_empty() { 0.0 } else { ms(h.value_at_quantile(q)) };
    SendLagMs { p50: q(0.5), p99: q(0.99), p999: q(0.999), max: if h.is_empty() { 0.0 } else { ms(h.max()) } }
}

fn tls(t: &TlsRecord) -> TlsSummary {
    let lag = send_lag(&t.handshake);
    TlsSummary {
        handshakes: t.handshakes,
        resumed: t.resumed,
        failures: t.failures,
        first_error: t.first_error.clone(),
        handshake_ms: HandshakeMs { p50: lag.p50, p99: lag.p99, max: lag.max },
    }
}

fn errors(p: &PhaseRecord) -> BTreeMap<String, u64> {
    ErrorClass::ALL.iter().map(|&c| (c.as_str().to_string(), p.error(c))).collect()
}

/// Requests planned in `[from_ns, to_ns)` across the plan.
pub fn offered_between(plan: &Plan, from_ns: u64, to_ns: u64) -> u64 {
    plan.phases.iter().map(|ph| ph.window().planned_between(from_ns, to_ns)).sum()
}

/// Everything the summary is built from.
#[derive(Debug)]
pub struct Inputs<'a> {
    /// The plan that ran.
    pub plan: &'a Plan,
    /// Merged record of all shards.
    pub record: &'a ShardRecord,
    /// The run was interrupted.
    pub interrupted: bool,
    /// Seconds the plan actually covered (less than planned if interrupted).
    pub elapsed_s: f64,
    /// Run start, RFC 3339.
    pub started_at: String,
    /// Probe figures.
    pub probes: ProbeSummary,
    /// Per second, each shard's CPU (percent of one core).
    pub cpu: &'a [Vec<f64>],
    /// Resident memory: at the first second, at the end, peak (MiB).
    pub rss_mib: (Option<f64>, Option<f64>, Option<f64>),
    /// `/proc` and cgroup health.
    pub health: HealthSummary,
    /// When the run stopped (seconds since start), if it stopped before its plan ended.
    pub stopped_at_s: Option<f64>,
}

/// Build the summary.
pub fn build(inp: &Inputs<'_>) -> Summary {
    let plan = inp.plan;
    let rec = inp.record;
    let phases = plan
        .phases
        .iter()
        .zip(&rec.phases)
        .map(|(ph, r)| {
            let (start, secs) = (ph.start.as_secs_f64(), ph.duration.as_secs_f64());
            // A stopped run covers its phases only up to the stop: rates per second that ran.
            let measured = inp.stopped_at_s.map_or(secs, |at| (at - start).clamp(0.0, secs));
            let per_s = |n: u64| if measured > 0.0 { round2(n as f64 / measured) } else { 0.0 };
            PhaseSummary {
                name: ph.name.clone(),
                kind: ph.kind.as_str().to_string(),
                start_s: start,
                duration_s: secs,
                measured_s: Some(round2(measured)),
                offered_rps: ph.rate,
                sent_rps: per_s(r.sent_in_window),
                ok_rps: per_s(r.ok_in_window),
                requests: ph.window().planned(),
                sent: r.sent,
                ok: r.ok,
                errors: errors(r),
                late: r.late,
                late_unpooled: r.late_unpooled,
                waited_for_connection: r.waited_for_connection,
                latency_ms: latency(&r.latency),
                service_ms: latency(&r.service),
                send_lag_ms: send_lag(&r.send_lag),
                own_lag_ms: Some(send_lag(&r.own_lag)),
                passed: None,
                fail_reasons: Vec::new(),
            }
        })
        .collect();
    let series = rec
        .seconds
        .iter()
        .enumerate()
        .map(|(t, s)| SecondSummary {
            t: t as u64,
            offered: offered_between(plan, t as u64 * 1_000_000_000, (t as u64 + 1) * 1_000_000_000),
            sent: u64::from(s.sent),
            ok: u64::from(s.ok),
            errors: ErrorClass::ALL
                .iter()
                .filter(|&&c| s.errors[c as usize] > 0)
                .map(|&c| (c.as_str().to_string(), u64::from(s.errors[c as usize])))
                .collect(),
            in_flight_max: u64::from(s.in_flight_max),
            cpu: inp.cpu.get(t).map(|shards| round2(shards.iter().copied().fold(0.0, f64::max))),
        })
        .collect();
    let shards = inp.cpu.iter().map(Vec::len).max().unwrap_or(0);
    let cpu_p95_by_shard: Vec<f64> = (0..shards)
        .filter_map(|k| cpu_stats(&inp.cpu.iter().filter_map(|s| s.get(k).copied()).collect::<Vec<_>>()).0)
        .collect();
    let cpu_p95 = cpu_p95_by_shard.iter().copied().reduce(f64::max);
    let cpu_max = inp.cpu.iter().flatten().copied().reduce(f64::max).map(round2);
    Summary {
        schema: SCHEMA.to_string(),
        interrupted: inp.interrupted,
        failure: None,
        run: RunInfo {
            url: plan.target.url.clone(),
            started_at: inp.started_at.clone(),
            elapsed_s: round2(inp.elapsed_s),
            connections: plan.connections,
            threads: plan.threads,
            timeout_s: plan.timeout.as_secs_f64(),
            keepalive: plan.keepalive,
            profile: plan.profile_kind().as_str().to_string(),
            connections_opened: rec.connections_opened,
            connect_failures: rec.connect_failures,
            retried_on_stale_connection: rec.retried_on_stale_connection,
            abandoned: rec.abandoned,
            connect_no_port: rec.connect_no_port,
            wake_window_us: plan.pace().batch_ns as f64 / 1000.0,
            loader_version: env!("CARGO_PKG_VERSION").to_string(),
        },
        verdict: Verdict { trusted: None, reasons: Vec::new() },
        phases,
        knee: None,
        cliff: None,
        analysis: AnalysisSummary::default(),
        capacity: None,
        preflight: None,
        probes: inp.probes.clone(),
        tls: plan.target.tls.is_some().then(|| tls(&rec.tls)),
        loader: LoaderSummary {
            cpu_p95,
            cpu_max,
            cpu_p95_by_shard,
            wake_late_us: wake_late(&rec.wake_lateness),
            certificate: None,
            rss_mib_start: inp.rss_mib.0,
            rss_mib_end: inp.rss_mib.1,
            rss_mib_peak: inp.rss_mib.2,
        },
        series,
        health: inp.health.clone(),
        errors_detail: errors_detail(&rec.details),
    }
}

fn wake_late(h: &Histogram<u64>) -> Option<WakeLateUs> {
    (!h.is_empty()).then(|| WakeLateUs {
        p50: h.value_at_quantile(0.5) as f64,
        p90: h.value_at_quantile(0.9) as f64,
        p99: h.value_at_quantile(0.99) as f64,
        max: h.max() as f64,
        count: h.len(),
    })
}

fn errors_detail(d: &crate::record::ErrorDetail) -> BTreeMap<String, Vec<ErrorMessage>> {
    ErrorClass::ALL
        .iter()
        .zip(&d.by_class)
        .filter(|(_, list)| !list.is_empty())
        .map(|(class, list)| {
            let messages = list.iter().map(|(m, n)| ErrorMessage { message: m.to_string(), count: *n }).collect();
            (class.as_str().to_string(), messages)
        })
        .collect()
}

fn yes() -> bool {
    true
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn cpu_stats(samples: &[f64]) -> (Option<f64>, Option<f64>) {
    if samples.is_empty() {
        return (None, None);
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let idx = ((sorted.len() as f64 * 0.95).ceil() as usize).clamp(1, sorted.len()) - 1;
    (Some(round2(sorted[idx])), Some(round2(*sorted.last().expect("non-empty"))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::RunArgs;
    use crate::scenario::Spec;

    fn plan() -> Plan {
        let a = RunArgs {
            url: Some("http://127.0.0.1:9/".into()),
            rate: Some(10.0),
            duration: Some("2s".into()),
            warmup: Some("1s".into()),
            ..Default::default()
        };
        Plan::resolve(&Spec::from_run_args(&a).unwrap(), "http://127.0.0.1:9/").unwrap()
    }

    #[test]
    fn offered_per_second_follows_the_plan() {
        let p = plan();
        assert_eq!(offered_between(&p, 0, 1_000_000_000), 10);
        assert_eq!(offered_between(&p, 1_000_000_000, 3_000_000_000), 20);
        assert_eq!(offered_between(&p, 500_000_000, 1_500_000_000), 10);
        assert_eq!(offered_between(&p, 3_000_000_000, 4_000_000_000), 0);
    }

    #[test]
    fn summary_has_the_contract_fields() {
        let p = plan();
        let windows = p.phases.iter().map(|ph| ph.window()).collect();
        let mut rec = ShardRecord::new(windows, 3);
        rec.on_send(1, 1_000_000_000, 1_000_100_000, 0, false, 1);
        rec.on_response(1, 1_000_000_000, 1_000_100_000, 1_002_000_000, 200);
        let s = build(&Inputs {
            plan: &p,
            record: &rec,
            interrupted: false,
            elapsed_s: 3.0,
            started_at: "2026-11-30T00:00:00Z".into(),
            probes: ProbeSummary::default(),
            cpu: &[vec![10.0, 5.0], vec![20.0, 5.0], vec![30.0, 90.0]],
            rss_mib: (Some(3.0), Some(3.5), Some(4.0)),
            health: HealthSummary::default(),
            stopped_at_s: None,
        });
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["schema"], "loader.summary/v1");
        assert!(v["verdict"]["trusted"].is_null() && v["verdict"]["reasons"].is_array());
        let main = &v["phases"][1];
        for key in [
            "name",
            "kind",
            "offered_rps",
            "sent_rps",
            "ok_rps",
            "requests",
            "errors",
            "latency_ms",
            "send_lag_ms",
            "passed",
            "fail_reasons",
        ] {
            assert!(main.get(key).is_some(), "phase field {key}");
        }
        assert_eq!(main["kind"], "hold");
        assert_eq!(main["latency_ms"]["p50"], 2.0);
        assert_eq!(main["errors"]["timeout"], 0);
        assert!(v["knee"].is_null() && v["cliff"].is_null());
        for key in [
            "available",
            "connect_ms",
            "syn_retransmits",
            "resets",
            "time_wait",
            "ephemeral_ports_max_ratio",
            "tls_handshakes",
            "runqueue_us",
            "tcp_states",
        ] {
            assert!(v["probes"].get(key).is_some(), "probes field {key}");
        }
        assert!(v["tls"].is_null(), "http run: no tls section");
        assert_eq!(v["loader"]["cpu_max"], 90.0, "the busiest shard's");
        assert_eq!(v["loader"]["cpu_p95"], 90.0, "one saturated shard of two is saturation");
        assert_eq!(v["series"][2]["cpu"], 90.0);
        assert!(v["loader"].get("certificate").is_some());
    }
}
