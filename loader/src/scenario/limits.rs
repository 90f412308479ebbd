//! The criteria and limits written before the run, as plain validated data:
//! [`SloSpec`] (`[slo]`: what a step must meet), [`VerdictLimits`] (`[verdict]`: when the
//! loader's own evidence invalidates or annotates a run) and [`CapacitySpec`] (`--repeat`,
//! `[capacity]`).
//!
//! Judging steps, building the verdict and the capacity plan are the analysis module's job;
//! these types only carry what the user wrote, checked value by value.

use std::time::Duration;

use super::options::{RawSlo, RawVerdict};
use super::raw::Raw;
use super::values::{count, duration_at_most, fraction, number_in};
use crate::error::InputError;

/// Longest latency SLO accepted.
const MAX_SLO: Duration = Duration::from_secs(3600);

/// `[slo]`: the break criteria of a step. Every field is optional; `None` leaves the
/// analysis module's default in force.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SloSpec {
    /// Latency SLO on a step's p95 (`p95 = "200ms"`, `--slo-p95`).
    pub p95: Option<Duration>,
    /// Latency SLO on a step's p99 (`p99 = "500ms"`, `--slo-p99`).
    pub p99: Option<Duration>,
    /// Highest acceptable error fraction of a step, in `[0, 1)` (`0.01` or `"1%"`,
    /// `--error-budget`).
    pub error_budget: Option<f64>,
    /// Lowest acceptable goodput ratio ok/s ÷ offered/s of a step, in `(0, 1]`.
    pub goodput_min: Option<f64>,
    /// Highest acceptable fraction of a step's sends that left late, in `[0, 1]`.
    pub late_max: Option<f64>,
    /// Highest acceptable number of dropped requests (never sent) in a step.
    pub dropped_max: Option<u64>,
}

/// `[verdict]`: the limits of DESIGN.md's verdict. The defaults are DESIGN.md's.
#[derive(Debug, Clone, PartialEq)]
pub struct VerdictLimits {
    /// Loader CPU p95 above this percentage of its cores invalidates the run (70).
    pub cpu_p95_pct: f64,
    /// Loader-thread run-queue delay p99 above this many ms (1).
    pub runqueue_p99_ms: f64,
    /// Send lag p99 above this many ms (50).
    pub send_lag_p99_ms: f64,
    /// Read lag p99 (answers' read time − their kernel receive stamp) above this many ms,
    /// and above the read floor (the shard's deliberate read deferral plus the host's
    /// wake-up jitter), invalidates (5).
    pub read_lag_p99_ms: f64,
    /// Live TIME_WAIT sockets above this count (5000).
    pub time_wait: u64,
    /// Ephemeral ports in use above this percentage of the range (60).
    pub ephemeral_ports_pct: f64,
    /// Open file descriptors above this percentage of the limit (80).
    pub fds_pct: f64,
    /// Achieved rate above this percentage of the certified ceiling (70).
    pub cert_ceiling_pct: f64,
    /// A quoted percentile needs at least this many samples beyond it (100).
    pub min_tail_samples: u64,
    /// Connections opened on a keep-alive run above this multiple of the pool are noted (2).
    pub churn_ratio: f64,
    /// cgroup CPU throttling above this many ms per second of run invalidates it (10).
    pub throttled_ms_per_s: f64,
    /// Sends more than 10 ms late with a connection free, above this percentage of a step's
    /// sends (and more than two of them), invalidate the run (0.1); fewer are noted.
    pub late_sends_pct: f64,
    /// The loader's own delay p99 (send lag of a phase; run-queue delay) above this
    /// percentage of a phase's latency p99 invalidates the run when it is also above
    /// `verdict::MATERIAL_DELAY_FLOOR_MS` (25): the loader is then a material part of the
    /// tail it reports. 100 turns the rule off.
    pub loader_delay_pct: f64,
    /// The load machine NIC's capacity, Mb/s, for the `nic_saturated` rule where the link's
    /// own speed is unknown or not the limit (default: the speed sysfs reports).
    pub nic_capacity_mbps: Option<f64>,
}

impl Default for VerdictLimits {
    fn default() -> Self {
        VerdictLimits {
            cpu_p95_pct: 70.0,
            runqueue_p99_ms: 1.0,
            send_lag_p99_ms: 50.0,
            read_lag_p99_ms: 5.0,
            time_wait: 5000,
            ephemeral_ports_pct: 60.0,
            fds_pct: 80.0,
            cert_ceiling_pct: 70.0,
            min_tail_samples: 100,
            churn_ratio: 2.0,
            throttled_ms_per_s: 10.0,
            late_sends_pct: 0.1,
            loader_delay_pct: 25.0,
            nic_capacity_mbps: None,
        }
    }
}

/// Repeats and the capacity plan (`--repeat`, `--margin`, `--peak`).
#[derive(Debug, Clone, PartialEq)]
pub struct CapacitySpec {
    /// Run the plan this many times (≥ 1); max sustainable = the minimum of the knees.
    pub repeat: u32,
    /// Usable share of the max sustainable rate per node, in `[0.6, 0.8]` (default 0.7; the
    /// range DESIGN.md gives, and the only one accepted).
    pub margin: f64,
    /// Peak demand to plan for, req/s (nodes = ceil(peak / usable) + 1); `None`: no plan.
    pub peak: Option<f64>,
}

/// Default capacity margin.
pub const DEFAULT_MARGIN: f64 = 0.7;
/// Most repeats of one plan.
const MAX_REPEAT: i64 = 100;

impl SloSpec {
    pub(crate) fn from_raw(r: &RawSlo) -> Result<SloSpec, InputError> {
        let slo = |g: &Option<_>| g.as_ref().map(positive_slo).transpose();
        Ok(SloSpec {
            p95: slo(&r.p95)?,
            p99: slo(&r.p99)?,
            error_budget: r.error_budget.as_ref().map(|g| fraction(g, 0.0, 1.0, false)).transpose()?,
            goodput_min: r
                .goodput_min
                .as_ref()
                .map(|g| {
                    let v = fraction(g, 0.0, 1.0, true)?;
                    if v == 0.0 { Err(g.err("must be above 0 (a share of the offered rate)")) } else { Ok(v) }
                })
                .transpose()?,
            late_max: r.late_max.as_ref().map(|g| fraction(g, 0.0, 1.0, true)).transpose()?,
            dropped_max: r.dropped_max.as_ref().map(|g| count(g, 0, i64::MAX)).transpose()?,
        })
    }
}

fn positive_slo(g: &super::input::Given<String>) -> Result<Duration, InputError> {
    let d = duration_at_most(g, MAX_SLO, "1 hour")?;
    if d.is_zero() {
        return Err(g.err("must be longer than zero"));
    }
    Ok(d)
}

impl VerdictLimits {
    pub(crate) fn from_raw(r: &RawVerdict) -> Result<VerdictLimits, InputError> {
        let d = VerdictLimits::default();
        let pct = |g: &Option<_>, default| g.as_ref().map_or(Ok(default), |g| number_in(g, 0.0, false, 100.0));
        let ms = |g: &Option<_>, default| g.as_ref().map_or(Ok(default), |g| number_in(g, 0.0, false, 3_600_000.0));
        let n = |g: &Option<_>, default| g.as_ref().map_or(Ok(default), |g| count(g, 1, i64::MAX));
        Ok(VerdictLimits {
            cpu_p95_pct: pct(&r.cpu_p95_pct, d.cpu_p95_pct)?,
            runqueue_p99_ms: ms(&r.runqueue_p99_ms, d.runqueue_p99_ms)?,
            send_lag_p99_ms: ms(&r.send_lag_p99_ms, d.send_lag_p99_ms)?,
            read_lag_p99_ms: ms(&r.read_lag_p99_ms, d.read_lag_p99_ms)?,
            time_wait: n(&r.time_wait, d.time_wait)?,
            ephemeral_ports_pct: pct(&r.ephemeral_ports_pct, d.ephemeral_ports_pct)?,
            fds_pct: pct(&r.fds_pct, d.fds_pct)?,
            cert_ceiling_pct: pct(&r.cert_ceiling_pct, d.cert_ceiling_pct)?,
            min_tail_samples: n(&r.min_tail_samples, d.min_tail_samples)?,
            loader_delay_pct: pct(&r.loader_delay_pct, d.loader_delay_pct)?,
            nic_capacity_mbps: r.nic_capacity_mbps.as_ref().map(|g| number_in(g, 0.0, false, 1e9)).transpose()?,
            ..d
        })
    }
}

impl CapacitySpec {
    pub(crate) fn from_raw(raw: &Raw) -> Result<CapacitySpec, InputError> {
        Ok(CapacitySpec {
            repeat: raw.profile.repeat.as_ref().map_or(Ok(1), |g| count(g, 1, MAX_REPEAT))? as u32,
            margin: raw.capacity.margin.as_ref().map_or(Ok(DEFAULT_MARGIN), |g| number_in(g, 0.6, true, 0.8))?,
            peak: raw.capacity.peak.as_ref().map(|g| number_in(g, 0.0, false, 1e12)).transpose()?,
        })
    }
}
