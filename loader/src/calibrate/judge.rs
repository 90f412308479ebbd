//! Pure: who failed first at each calibration step, and what that makes the certificate.
//!
//! A step's figures ([`StepFigures`]) come from the run's summary (see `steps.rs`); this file
//! only judges them. The loader fails a step when it stops keeping its own schedule (late
//! sends while a connection was free, CPU, run-queue delay) — and wherever the verdict's own
//! rules on send lag and run-queue delay (`verdict::delay`) would not trust the step, so that
//! a run well under the certified rate is never one the verdict calls saturated. The target
//! fails a step when
//! goodput falls behind the offered rate while the loader is on time (requests waiting for a
//! busy connection, errors). Loader evidence wins inside one step: a late loader reads
//! responses late too, which makes the target look slow, never the other way round.
//!
//! It does not read `/proc`, probes or files, and it does not decide the step rates.

use serde::{Deserialize, Serialize};

/// Shard CPU p95 above which the loader is out of headroom, percent of one core per shard:
/// the verdict's own edge (above its 70 % limit a run with every send on time is only noted).
pub const CPU_P95_LIMIT_PCT: f64 = crate::verdict::CPU_SATURATED_PCT;
/// Send-lag p99 above which late sends with free connections mean the loader fell behind, ms.
pub const SEND_LAG_LIMIT_MS: f64 = 5.0;
/// Share of a step's sends that may leave > 10 ms late with a connection free before the
/// loader counts as behind. Not zero: one scheduler hiccup in a 3 s hold must not move the
/// ceiling by a whole step (that would break repeatability for no loader-side reason).
pub const LATE_UNPOOLED_SHARE: f64 = 0.001;
/// Share of a step's sends under which late sends with a connection free are the tail of the
/// pool's queue when more late sends waited for a busy connection: the target's, not the
/// loader's. (CI, a target serving at most 1,000 req/s driven at 949/s: 1,709 sends waited
/// for a connection and 2 found one free while still > 10 ms late; the step was called the
/// loader's and certified a ceiling of 904 req/s for a loader at 5 % CPU.)
pub const QUEUE_TAIL_SHARE: f64 = 0.01;
/// Share of a step's sends that may wait > 10 ms for a busy connection before the target
/// counts as saturated.
pub const POOL_LATE_SHARE: f64 = 0.01;
/// Goodput (ok/s ÷ offered/s) below which the step fell behind.
pub const GOODPUT_MIN: f64 = 0.95;
/// Share of a step's requests that may fail before the target counts as failing.
pub const ERROR_SHARE: f64 = 0.001;
/// Most a step's sends may have waited for a busy connection for the step to count as
/// open-loop evidence ([`highest_on_time`]): above it the step ran mostly closed-loop — every
/// connection busy, each send leaving as a response frees one, many per wake-up — a cheaper
/// regime for the loader than the schedule it certifies (on the development VM it carried
/// the loader 10–15 % past its own open-loop ceiling).
pub const OPEN_LOOP_WAITED_MAX: f64 = 0.5;

/// What one step measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepFigures {
    /// Step name (`step 3`).
    pub step: String,
    /// Offered rate, req/s.
    pub offered_rps: f64,
    /// Achieved send rate, req/s.
    pub sent_rps: f64,
    /// Responses 2xx/3xx per second.
    pub ok_rps: f64,
    /// Requests sent in the step.
    pub sent: u64,
    /// Failed requests of the step, all classes.
    pub errors: u64,
    /// Sends more than 10 ms late while a connection was free (the loader's lateness).
    pub late_unpooled: u64,
    /// Sends more than 10 ms late because every connection was busy (the target's).
    pub late_pooled: u64,
    /// Send lag p99, ms.
    pub send_lag_p99_ms: f64,
    /// The loader's own part of the send lag, p99, ms (older certificates: the whole lag).
    #[serde(default)]
    pub own_lag_p99_ms: Option<f64>,
    /// Latency p99 of the step, ms (what the loader's own delays are held against).
    #[serde(default)]
    pub latency_p99_ms: Option<f64>,
    /// Sends of the step that waited for a connection.
    #[serde(default)]
    pub waited_for_connection: u64,
    /// Of those, the sends that waited for an answer already in the kernel, unread: the
    /// loader's waits (`phases[].waited_on_loader`).
    #[serde(default)]
    pub waited_on_loader: u64,
    /// Read lag p99 of the step's answers, ms (answer read − kernel receive stamp).
    #[serde(default)]
    pub read_lag_p99_ms: Option<f64>,
    /// The part of the step's hold that ran, s (less when the run stopped during it).
    #[serde(default)]
    pub measured_s: Option<f64>,
    /// The host's wake-up jitter during the run (the verdict's floor), ms.
    #[serde(default)]
    pub floor_ms: Option<f64>,
    /// The loader's batching window in the run (`run.wake_window_us`), ms.
    #[serde(default)]
    pub wake_window_ms: Option<f64>,
    /// The window followed the measured lateness (`run.wake_window_adaptive`).
    #[serde(default)]
    pub wake_window_adaptive: bool,
    /// Shard CPU p95 over the step's settled seconds, percent of one core per shard.
    pub cpu_p95: Option<f64>,
    /// Run-queue delay of loader threads over the settled seconds: the lower median of the
    /// per-second p99s, µs.
    pub runqueue_p99_us: Option<f64>,
    /// Highest live TIME_WAIT count (host-wide) during the step.
    pub time_wait_max: Option<u64>,
    /// Highest share of the ephemeral port range in use during the step.
    pub ephemeral_ports_max_ratio: Option<f64>,
    /// Requests the step's whole run sent (its warm-up too): what a probe's process CPU is
    /// divided by.
    #[serde(default)]
    pub run_requests: u64,
    /// The loader process's CPU time per request over a probe's run, µs (bisection probes).
    #[serde(default)]
    pub loader_process_us_per_request: Option<f64>,
    /// The load machine NIC's busiest second over a probe's run, Mb/s sent, and its device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_tx_mbps: Option<f64>,
    /// See `nic_tx_mbps`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_device: Option<String>,
    /// The target process's CPU time per request over a probe's run, µs, measured alike.
    #[serde(default)]
    pub target_process_us_per_request: Option<f64>,
    /// The most the VM's host took from one of the loader's cores in one second of the step
    /// (steal, ms; `/proc/stat` counts it in ticks of 10 ms). `None` where not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal_max_ms: Option<f64>,
}

impl StepFigures {
    /// The shards' CPU per request sent, µs: the settled seconds' mean CPU of `threads`
    /// shards over the rate they sent.
    pub fn shard_us_per_request(&self, threads: usize) -> Option<f64> {
        let cpu = self.cpu_p95?;
        (self.sent_rps > 0.0).then(|| (cpu / 100.0 * threads as f64 / self.sent_rps * 1e6 * 100.0).round() / 100.0)
    }
}

/// Which side a step's evidence points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// Nobody failed: the loader kept its schedule and the target kept up.
    Ok,
    /// The loader stopped keeping its schedule.
    Loader,
    /// The target saturated while the loader was on time.
    Target,
}

/// Steal in one second of a step, on one of the loader's cores, from which a step the loader
/// fell behind in is the host's doing rather than a ceiling: one tick of `/proc/stat` (10 ms),
/// as long as the lateness the judge counts (a send more than 10 ms late).
pub const STEAL_SPOILS_MS: f64 = 10.0;

/// The steal (ms, the most in one second on one loader core) that spoiled `call`: a step
/// that fell behind on the loader's side while the VM's host took a loader core for at least
/// [`STEAL_SPOILS_MS`] in one of its seconds. Such a probe says nothing of the loader's
/// ceiling; `None` for any other step.
pub fn spoiled_by_steal(call: &StepCall) -> Option<f64> {
    let ms = call.figures.steal_max_ms?;
    (call.side == Side::Loader && ms >= STEAL_SPOILS_MS).then_some(ms)
}

/// One judged step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepCall {
    /// The figures.
    #[serde(flatten)]
    pub figures: StepFigures,
    /// Who failed, if anyone.
    pub side: Side,
    /// Why, one sentence per piece of evidence.
    pub why: Vec<String>,
}

/// Judge one step against the limits above and `runqueue_limit_ms` (the verdict's).
pub fn judge_step(f: &StepFigures, runqueue_limit_ms: f64) -> StepCall {
    let mut loader = Vec::new();
    let sent = f.sent.max(1) as f64;
    // Behind the pool's queue: when most late sends waited for a busy connection, a few that
    // found one free are that queue's tail (the target's), unless they are many themselves.
    let queue_tail = f.late_unpooled < f.late_pooled && (f.late_unpooled as f64) < QUEUE_TAIL_SHARE * sent;
    if f.late_unpooled as f64 > (LATE_UNPOOLED_SHARE * sent).max(1.0) && !queue_tail {
        loader.push(format!("{} sends left > 10 ms late with a connection free", f.late_unpooled));
    }
    if f.send_lag_p99_ms > SEND_LAG_LIMIT_MS && f.late_unpooled > 0 && f.late_unpooled >= f.late_pooled {
        loader.push(format!(
            "send lag p99 {:.1} ms above {SEND_LAG_LIMIT_MS} ms with connections free",
            f.send_lag_p99_ms
        ));
    }
    // The verdict's read-lag limit: answers left unread keep the pool busy, which would
    // otherwise look like a slow target.
    let read_limit = crate::verdict::Limits::default().read_lag_p99_ms;
    if let Some(r) = f.read_lag_p99_ms
        && r > read_limit
    {
        loader.push(format!("read lag p99 {r:.2} ms above {read_limit} ms: answers sat unread"));
    }
    if f.waited_on_loader as f64 > POOL_LATE_SHARE * sent && f.waited_on_loader * 2 >= f.waited_for_connection {
        loader.push(format!(
            "{} of {} waits for a connection were for answers already received, unread (the loader's)",
            f.waited_on_loader, f.waited_for_connection
        ));
    }
    if let Some(cpu) = f.cpu_p95
        && cpu > CPU_P95_LIMIT_PCT
    {
        loader.push(format!("shard CPU p95 {cpu:.0}% above {CPU_P95_LIMIT_PCT:.0}%"));
    }
    if let Some(rq) = f.runqueue_p99_us
        && rq / 1000.0 > runqueue_limit_ms
    {
        loader.push(format!("run-queue delay p99 {:.2} ms above {runqueue_limit_ms} ms", rq / 1000.0));
    }
    // The verdict's relative rules, with the verdict's defaults.
    let share = crate::verdict::Limits::default().loader_delay_pct / 100.0;
    if let (Some(latency), Some(floor_ms)) = (f.latency_p99_ms, f.floor_ms) {
        let floor = crate::verdict::floor::Floor::measured(floor_ms);
        let own = f.own_lag_p99_ms.unwrap_or(f.send_lag_p99_ms);
        let lag = crate::verdict::judge_lag(
            f.send_lag_p99_ms,
            own,
            latency,
            f.sent,
            f.waited_for_connection,
            &floor,
            share,
            f.wake_window_ms.unwrap_or(0.0),
            f.wake_window_adaptive,
        );
        if matches!(lag, crate::verdict::Lag::OwnWork | crate::verdict::Lag::Late) {
            loader.push(format!(
                "send lag p99 {:.2} ms (own {own:.2} ms) is a material part of the latency p99 {latency:.2} ms beyond the host's jitter ({floor_ms:.2} ms), as the verdict judges it",
                f.send_lag_p99_ms
            ));
        }
        if let Some(rq) = f.runqueue_p99_us.map(|us| us / 1000.0)
            && rq >= crate::verdict::MATERIAL_DELAY_FLOOR_MS
            && rq >= share * latency
        {
            loader
                .push(format!("run-queue delay p99 {rq:.2} ms is a material part of the latency p99 {latency:.2} ms"));
        }
    }
    if !loader.is_empty() {
        return StepCall { figures: f.clone(), side: Side::Loader, why: loader };
    }
    let mut target = Vec::new();
    if f.offered_rps > 0.0 && f.ok_rps < GOODPUT_MIN * f.offered_rps {
        target.push(format!(
            "ok {:.0}/s below {:.0}% of the offered {:.0}/s",
            f.ok_rps,
            GOODPUT_MIN * 100.0,
            f.offered_rps
        ));
    }
    if f.late_pooled as f64 > POOL_LATE_SHARE * sent {
        target.push(format!("{} sends waited > 10 ms for a busy connection (pool exhausted)", f.late_pooled));
    }
    if f.errors > 0 && f.errors as f64 > ERROR_SHARE * sent {
        target.push(format!("{} requests failed", f.errors));
    }
    let side = if target.is_empty() { Side::Ok } else { Side::Target };
    StepCall { figures: f.clone(), side, why: target }
}

/// What limited the calibration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitedBy {
    /// The loader stopped keeping its schedule: the figure is its ceiling.
    Loader,
    /// The target saturated first: the figure is only a lower bound of the loader's ceiling.
    Target,
    /// Every step up to `--max-rate` passed: the figure is a lower bound.
    MaxRate,
}

/// The outcome of a calibration.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// What stopped the stepping.
    pub limited_by: LimitedBy,
    /// Index of the last step where the loader kept its schedule and the target kept up.
    pub last_good: Option<usize>,
    /// Index of the step that failed, if one did.
    pub failed: Option<usize>,
}

impl Finding {
    /// The certified ceiling: only when the loader itself was the limit.
    pub fn ceiling_rps(&self, calls: &[StepCall]) -> Option<f64> {
        match self.limited_by {
            LimitedBy::Loader => self.last_good.map(|i| calls[i].figures.sent_rps),
            _ => None,
        }
    }

    /// The figure the loader provably reached, when it is not a ceiling.
    pub fn lower_bound_rps(&self, calls: &[StepCall]) -> Option<f64> {
        match self.limited_by {
            LimitedBy::Loader => None,
            _ => self.last_good.map(|i| calls[i].figures.sent_rps),
        }
    }
}

/// The step with the highest rate the loader sent on its own schedule without being at fault
/// itself (passing steps and steps the target or network failed), in any pass, among the
/// steps that ran mostly open-loop (at most [`OPEN_LOOP_WAITED_MAX`] of their sends waited
/// for a connection): the evidence a target-limited certificate's lower bound stands on.
///
/// Why not the last passing step: near the target's limit whether a step passes is a coin
/// flip (a hiccup of the target exhausts the pool for 10 ms), so the last passing step moved
/// by whole refining steps from one calibration to the next. The rate the loader sent on its
/// own schedule while the target was failing moves only with what the pair can do.
pub fn highest_on_time(calls: &[StepCall]) -> Option<&StepCall> {
    calls.iter().filter(|c| open_loop_on_time(c)).max_by(|a, b| on_schedule(a).total_cmp(&on_schedule(b)))
}

/// The loader was not at fault in the step, and it ran mostly open loop (at most
/// [`OPEN_LOOP_WAITED_MAX`] of its sends waited for a connection).
pub fn open_loop_on_time(c: &StepCall) -> bool {
    let f = &c.figures;
    c.side != Side::Loader && f.sent > 0 && f.waited_for_connection as f64 <= OPEN_LOOP_WAITED_MAX * f.sent as f64
}

/// The rate a step kept on the loader's schedule, req/s: what it sent in its window, but
/// never more than it offered, nor more than its own requests sent per second it ran — after
/// a saturated step the pool's backlog leaves in the next one, and that is not a rate the
/// loader kept.
pub fn on_schedule(c: &StepCall) -> f64 {
    let f = &c.figures;
    let own = f.measured_s.filter(|&m| m > 0.0).map_or(f64::INFINITY, |m| f.sent as f64 / m);
    f.sent_rps.min(f.offered_rps).min(own)
}

/// The first *confirmed* failed step decides; the ceiling (or lower bound) is the step before
/// it. A failure is confirmed when no higher step passes: a limit is monotonic in the rate, so
/// steps that fail and are followed by a higher step that passes were a disturbance — a
/// neighbour's burst, a host pause, a target hiccup — not a limit, since the higher step
/// shows the loader kept its schedule. (CI: the host disturbed the first four steps of a
/// calibration, 20,000–39,063/s, and steps up to 95,367/s then passed.)
///
/// A loader failure is also overruled by a later step the *target* failed while the loader
/// kept its schedule in mostly open loop ([`open_loop_on_time`]): the loader showed at a
/// higher rate that it was not the limit. (CI: shard CPU 92 % at 88,320/s and 594 late sends
/// at 92,736/s, then 97,373–107,353/s sent on time while the target exhausted the pool —
/// certified as an 84,111/s loader ceiling between two 118,000/s lower bounds.)
pub fn find(calls: &[StepCall]) -> Finding {
    let confirmed = |i: usize| {
        calls[i + 1..].iter().all(|later| match calls[i].side {
            Side::Loader => later.side != Side::Ok && !open_loop_on_time(later),
            _ => later.side != Side::Ok,
        })
    };
    match (0..calls.len()).find(|&i| calls[i].side != Side::Ok && confirmed(i)) {
        Some(i) => Finding {
            limited_by: if calls[i].side == Side::Loader { LimitedBy::Loader } else { LimitedBy::Target },
            last_good: i.checked_sub(1),
            failed: Some(i),
        },
        None => Finding { limited_by: LimitedBy::MaxRate, last_good: calls.len().checked_sub(1), failed: None },
    }
}

/// Geometric step rates: `start`, `start × factor`, … up to `max` (rounded to whole req/s).
pub fn step_rates(start: f64, factor: f64, max: f64) -> Vec<f64> {
    let mut rates = Vec::new();
    let mut r = start;
    while r <= max * (1.0 + 1e-9) && rates.len() < 200 {
        rates.push(r.round());
        r *= factor;
    }
    rates
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on_time(rate: f64) -> StepFigures {
        StepFigures {
            step: format!("step {rate}"),
            offered_rps: rate,
            sent_rps: rate,
            ok_rps: rate,
            sent: (rate * 3.0) as u64,
            send_lag_p99_ms: 0.5,
            cpu_p95: Some(40.0),
            runqueue_p99_us: Some(50.0),
            ..Default::default()
        }
    }

    #[test]
    fn a_step_behind_while_the_host_stole_a_loader_core_is_spoiled_not_a_ceiling() {
        let behind = StepFigures { late_unpooled: 49, send_lag_p99_ms: 12.9, ..on_time(1900.0) };
        let call = |steal: Option<f64>| judge_step(&StepFigures { steal_max_ms: steal, ..behind.clone() }, 1.0);
        assert_eq!(call(Some(20.0)).side, Side::Loader);
        assert_eq!(spoiled_by_steal(&call(Some(20.0))), Some(20.0));
        assert_eq!(spoiled_by_steal(&call(Some(10.0))), Some(10.0));
        // No steal, or none read: the loader's own limit.
        assert_eq!(spoiled_by_steal(&call(Some(0.0))), None);
        assert_eq!(spoiled_by_steal(&call(None)), None);
        // A step that kept its schedule is nobody's spoil, whatever the host took.
        let on_time_call = judge_step(&StepFigures { steal_max_ms: Some(40.0), ..on_time(1900.0) }, 1.0);
        assert_eq!(spoiled_by_steal(&on_time_call), None);
    }

    #[test]
    fn an_on_time_step_passes() {
        assert_eq!(judge_step(&on_time(1000.0), 1.0).side, Side::Ok);
    }

    #[test]
    fn late_sends_with_free_connections_are_the_loaders() {
        let f = StepFigures { late_unpooled: 100, send_lag_p99_ms: 20.0, ..on_time(10_000.0) };
        let c = judge_step(&f, 1.0);
        assert_eq!(c.side, Side::Loader);
        assert_eq!(c.why.len(), 2, "{:?}", c.why);
    }

    #[test]
    fn a_few_late_sends_behind_the_pools_queue_are_the_targets() {
        // The CI step: 949/s offered, 911/s sent over 2 s to a target at its capacity.
        let queue = StepFigures {
            late_unpooled: 2,
            late_pooled: 1709,
            waited_for_connection: 1713,
            send_lag_p99_ms: 82.6,
            ..on_time(949.0)
        };
        let c = judge_step(&StepFigures { sent: 1822, sent_rps: 911.0, ok_rps: 911.0, ..queue.clone() }, 1.0);
        assert_eq!(c.side, Side::Target, "{:?}", c.why);
        // Many of them, or more than waited: the loader's.
        let many = StepFigures { late_unpooled: 40, sent: 1822, ..queue.clone() };
        assert_eq!(judge_step(&many, 1.0).side, Side::Loader);
        let most = StepFigures { late_unpooled: 10, late_pooled: 5, sent: 1822, ..queue };
        assert_eq!(judge_step(&most, 1.0).side, Side::Loader);
    }

    #[test]
    fn one_late_send_is_a_hiccup_not_a_ceiling() {
        let f = StepFigures { late_unpooled: 2, ..on_time(10_000.0) };
        assert_eq!(judge_step(&f, 1.0).side, Side::Ok);
    }

    #[test]
    fn answers_left_unread_are_the_loaders_and_a_slow_target_is_not() {
        let f = StepFigures { read_lag_p99_ms: Some(12.0), ..on_time(1.0e5) };
        assert_eq!(judge_step(&f, 1.0).side, Side::Loader);
        let f = StepFigures { read_lag_p99_ms: Some(1.2), ..on_time(1.0e5) };
        assert_eq!(judge_step(&f, 1.0).side, Side::Ok, "the deliberate read deferral");
        // Pool waits: for answers already there (the loader's) or not yet (the target's).
        let held = StepFigures {
            late_pooled: 20_000,
            waited_for_connection: 30_000,
            waited_on_loader: 25_000,
            ..on_time(1.0e5)
        };
        assert_eq!(judge_step(&held, 1.0).side, Side::Loader);
        let slow = StepFigures { waited_on_loader: 300, ..held };
        assert_eq!(judge_step(&slow, 1.0).side, Side::Target);
    }

    #[test]
    fn cpu_and_run_queue_are_the_loaders() {
        assert_eq!(judge_step(&StepFigures { cpu_p95: Some(95.0), ..on_time(1.0e4) }, 1.0).side, Side::Loader);
        assert_eq!(
            judge_step(&StepFigures { runqueue_p99_us: Some(2000.0), ..on_time(1.0e4) }, 1.0).side,
            Side::Loader
        );
    }

    #[test]
    fn pool_waits_and_lost_goodput_are_the_targets() {
        let f = StepFigures { late_pooled: 3000, send_lag_p99_ms: 30.0, ..on_time(10_000.0) };
        assert_eq!(judge_step(&f, 1.0).side, Side::Target);
        let f = StepFigures { ok_rps: 800.0, ..on_time(1000.0) };
        assert_eq!(judge_step(&f, 1.0).side, Side::Target);
    }

    #[test]
    fn loader_evidence_wins_inside_one_step() {
        let f = StepFigures { late_pooled: 3000, cpu_p95: Some(99.0), ok_rps: 5000.0, ..on_time(10_000.0) };
        assert_eq!(judge_step(&f, 1.0).side, Side::Loader);
    }

    #[test]
    fn a_target_limit_certifies_no_ceiling() {
        let calls: Vec<_> = [on_time(1000.0), on_time(1250.0), StepFigures { ok_rps: 900.0, ..on_time(1562.0) }]
            .iter()
            .map(|f| judge_step(f, 1.0))
            .collect();
        let f = find(&calls);
        assert_eq!(f.limited_by, LimitedBy::Target);
        assert_eq!(f.ceiling_rps(&calls), None);
        assert_eq!(f.lower_bound_rps(&calls), Some(1250.0));
    }

    #[test]
    fn a_loader_limit_is_the_ceiling() {
        let calls: Vec<_> = [on_time(1000.0), StepFigures { cpu_p95: Some(97.0), ..on_time(1250.0) }]
            .iter()
            .map(|f| judge_step(f, 1.0))
            .collect();
        let f = find(&calls);
        assert_eq!(f.limited_by, LimitedBy::Loader);
        assert_eq!(f.ceiling_rps(&calls), Some(1000.0));
        assert_eq!(f.lower_bound_rps(&calls), None);
    }

    #[test]
    fn a_failure_the_next_step_does_not_repeat_is_a_blip() {
        let calls: Vec<_> = [
            on_time(1000.0),
            StepFigures { late_pooled: 500, ..on_time(1250.0) },
            on_time(1563.0),
            StepFigures { runqueue_p99_us: Some(1500.0), ..on_time(1953.0) },
            StepFigures { cpu_p95: Some(99.0), ..on_time(2441.0) },
        ]
        .iter()
        .map(|f| judge_step(f, 1.0))
        .collect();
        assert_eq!(calls[1].side, Side::Target, "still shown as failed");
        let f = find(&calls);
        assert_eq!(f.limited_by, LimitedBy::Loader);
        assert_eq!(f.ceiling_rps(&calls), Some(1563.0));
    }

    #[test]
    fn a_failed_first_step_is_a_blip_when_the_next_one_passes() {
        // Issue 9: 16 late sends at the first step (5,000/s), then every step up to 58,208/s
        // passed — a hiccup, not a ceiling of 0.
        let calls: Vec<_> = [
            StepFigures { late_unpooled: 16, ..on_time(5000.0) },
            on_time(6250.0),
            on_time(7813.0),
            StepFigures { cpu_p95: Some(99.0), ..on_time(9766.0) },
            StepFigures { cpu_p95: Some(99.0), ..on_time(12207.0) },
        ]
        .iter()
        .map(|f| judge_step(f, 1.0))
        .collect();
        assert_eq!(calls[0].side, Side::Loader);
        let f = find(&calls);
        assert_eq!((f.limited_by, f.ceiling_rps(&calls)), (LimitedBy::Loader, Some(7813.0)));
    }

    #[test]
    fn failures_that_a_higher_passing_step_contradicts_are_a_disturbance() {
        // CI: sends late at the first two steps, the relative lag rule at the next two, then
        // passes up to 95,367/s and the loader's CPU limit above.
        let calls: Vec<_> = [
            StepFigures { late_unpooled: 226, send_lag_p99_ms: 7.3, ..on_time(20_000.0) },
            StepFigures { late_unpooled: 167, send_lag_p99_ms: 5.1, ..on_time(25_000.0) },
            StepFigures { runqueue_p99_us: Some(1500.0), ..on_time(31_250.0) },
            StepFigures { runqueue_p99_us: Some(1500.0), ..on_time(39_063.0) },
            on_time(48_828.0),
            on_time(95_367.0),
            StepFigures { cpu_p95: Some(95.0), ..on_time(119_209.0) },
            StepFigures { cpu_p95: Some(95.0), ..on_time(149_012.0) },
        ]
        .iter()
        .map(|f| judge_step(f, 1.0))
        .collect();
        assert!(calls[..4].iter().all(|c| c.side == Side::Loader), "still shown as failed");
        let f = find(&calls);
        assert_eq!((f.limited_by, f.ceiling_rps(&calls), f.failed), (LimitedBy::Loader, Some(95_367.0), Some(6)));
    }

    #[test]
    fn a_loader_failure_is_overruled_by_a_higher_step_it_kept_on_time_while_the_target_failed() {
        let target = |rate: f64, waited: u64| StepFigures {
            late_pooled: (rate * 0.1) as u64,
            waited_for_connection: waited,
            ..on_time(rate)
        };
        let hiccup = StepFigures { cpu_p95: Some(92.0), ..on_time(1250.0) };
        // Open loop at 1563/s (10 % of sends waited): the loader was not the limit at 1250.
        let calls: Vec<_> =
            [on_time(1000.0), hiccup.clone(), target(1563.0, 469)].iter().map(|f| judge_step(f, 1.0)).collect();
        assert_eq!(calls[2].side, Side::Target);
        let f = find(&calls);
        assert_eq!((f.limited_by, f.failed), (LimitedBy::Target, Some(2)));
        // Closed loop at 1563/s (every send waited): a cheaper regime, no evidence either way.
        let calls: Vec<_> =
            [on_time(1000.0), hiccup, target(1563.0, 4689)].iter().map(|f| judge_step(f, 1.0)).collect();
        let f = find(&calls);
        assert_eq!((f.limited_by, f.ceiling_rps(&calls)), (LimitedBy::Loader, Some(1000.0)));
    }

    #[test]
    fn a_step_the_verdict_would_not_trust_is_not_certified() {
        // The loader's own work is 0.4 ms of a 0.6 ms latency p99: the verdict would invalidate
        // a run at this rate, so calibration does not certify it either.
        let f = StepFigures {
            own_lag_p99_ms: Some(0.4),
            send_lag_p99_ms: 0.45,
            latency_p99_ms: Some(0.6),
            floor_ms: Some(0.1),
            ..on_time(20_000.0)
        };
        assert_eq!(judge_step(&f, 1.0).side, Side::Loader);
        // At the host's floor it is a resolution note, not a failure.
        let f = StepFigures {
            own_lag_p99_ms: Some(0.01),
            send_lag_p99_ms: 0.12,
            latency_p99_ms: Some(0.3),
            floor_ms: Some(0.1),
            ..on_time(20_000.0)
        };
        assert_eq!(judge_step(&f, 1.0).side, Side::Ok);
    }

    #[test]
    fn the_open_loop_evidence_is_the_highest_rate_sent_without_the_loaders_fault() {
        let target_failed = StepFigures { late_pooled: 3000, ok_rps: 1100.0, ..on_time(1500.0) };
        let loader_failed = StepFigures { cpu_p95: Some(97.0), ..on_time(1800.0) };
        let calls: Vec<_> = [on_time(1000.0), on_time(1250.0), target_failed, loader_failed]
            .iter()
            .map(|f| judge_step(f, 1.0))
            .collect();
        assert_eq!(calls.iter().map(|c| c.side).collect::<Vec<_>>(), [Side::Ok, Side::Ok, Side::Target, Side::Loader]);
        assert_eq!(highest_on_time(&calls).map(|c| c.figures.sent_rps), Some(1500.0));
        assert_eq!(highest_on_time(&calls[3..]), None);
        // The highest *sent* rate, whichever pass it came from: a refining step that passed
        // above a coarse step the target failed counts.
        let refined = judge_step(&on_time(1700.0), 1.0);
        let all = [calls.as_slice(), std::slice::from_ref(&refined)].concat();
        assert_eq!(highest_on_time(&all).map(|c| c.figures.sent_rps), Some(1700.0));
        // A backlog flushed above the schedule is not a rate the loader kept.
        let flush = judge_step(&StepFigures { sent_rps: 1900.0, late_pooled: 3000, ..on_time(1600.0) }, 1.0);
        let all = [calls.as_slice(), std::slice::from_ref(&flush)].concat();
        assert_eq!(highest_on_time(&all).map(on_schedule), Some(1600.0));
        // Nor is the backlog of a step cut short by the emergency stop: 300 of its own
        // requests in its 0.5 s, whatever left in its window.
        let cut = judge_step(
            &StepFigures { sent_rps: 1650.0, ok_rps: 900.0, sent: 300, measured_s: Some(0.5), ..on_time(5000.0) },
            1.0,
        );
        assert_eq!(on_schedule(&cut), 600.0);
        // A step where most sends waited for a busy connection ran closed-loop: not evidence.
        let closed = judge_step(
            &StepFigures { sent_rps: 1650.0, late_pooled: 4000, waited_for_connection: 4000, ..on_time(1650.0) },
            1.0,
        );
        assert_eq!(closed.side, Side::Target);
        let all = [calls.as_slice(), std::slice::from_ref(&closed)].concat();
        assert_eq!(highest_on_time(&all).map(on_schedule), Some(1500.0));
        let half = StepCall {
            figures: StepFigures { waited_for_connection: 2475, ..closed.figures.clone() },
            ..closed.clone()
        };
        let all = [calls.as_slice(), std::slice::from_ref(&half)].concat();
        assert_eq!(highest_on_time(&all).map(on_schedule), Some(1650.0), "half the sends free: still open loop");
    }

    #[test]
    fn every_step_passing_is_a_lower_bound() {
        let calls: Vec<_> = [on_time(1000.0), on_time(1250.0)].iter().map(|f| judge_step(f, 1.0)).collect();
        let f = find(&calls);
        assert_eq!(f.limited_by, LimitedBy::MaxRate);
        assert_eq!(f.lower_bound_rps(&calls), Some(1250.0));
    }

    #[test]
    fn rates_grow_geometrically_up_to_the_max() {
        assert_eq!(step_rates(1000.0, 1.25, 2000.0), vec![1000.0, 1250.0, 1563.0, 1953.0]);
        assert!(step_rates(3000.0, 1.25, 2000.0).is_empty());
    }
}
