//! Pure: cut a finished calibration run's summary into per-step figures for `judge.rs`.
//!
//! The run is one step plan, so the run-wide figures (CPU p95, run-queue p99) would mix every
//! step; the per-second series are cut by each step's window instead. The first second of a
//! step is left out of the per-second figures: it still carries the previous step's tail.
//! Run-queue delay counts when it is sustained over the step (median of the per-second p99s).
//! Index `t` of every per-second series covers `[t, t + 1)` seconds of the run; a health
//! sample's `t` names the end of the second it covers.

use super::judge::StepFigures;
use crate::summary::Summary;

/// Figures of every hold phase, in order.
pub fn figures(s: &Summary) -> Vec<StepFigures> {
    let floor = crate::verdict::floor::Floor::of(s);
    s.phases
        .iter()
        // Steps after an emergency stop never ran: nothing to judge.
        .filter(|p| p.kind == "hold" && p.measured_s.is_none_or(|m| m > 0.0))
        .map(|p| {
            let from = p.start_s.floor() as usize;
            let to = (p.start_s + p.duration_s).ceil() as usize;
            let cpu = settled(&s.series, from, to, |x| x.cpu);
            // Sustained, not the worst second: the lower median of the per-second p99s, so one
            // second of a neighbour's burst does not set the machine's ceiling.
            let rq = lower_median(&settled(&s.probes.series, from, to, |x| x.runqueue_p99_us));
            let health = s.health.series.iter().filter(|h| (h.t as usize) > from && (h.t as usize) <= to);
            let steal_max_ms = steal_max(s, health.clone());
            let probe_seconds = window(&s.probes.series, from..to);
            let tw = health
                .clone()
                .filter_map(|h| h.sockstat.as_ref().map(|x| x.tw))
                .chain(probe_seconds.iter().filter_map(|x| x.time_wait_live))
                .max();
            let ports = probe_seconds
                .iter()
                .filter_map(|x| x.ephemeral_ports_ratio)
                .chain(health.filter_map(|h| Some(h.ephemeral_ports? as f64 / h.ephemeral_range?.max(1) as f64)))
                .fold(None, max_f);
            StepFigures {
                step: p.name.clone(),
                offered_rps: p.offered_rps,
                sent_rps: p.sent_rps,
                ok_rps: p.ok_rps,
                sent: p.sent,
                // Failures of attempted requests (not what a stop left aborted or unsent).
                errors: crate::record::ErrorClass::ALL
                    .iter()
                    .filter(|c| c.is_failure())
                    .map(|c| p.errors.get(c.as_str()).copied().unwrap_or(0))
                    .sum(),
                late_unpooled: p.late_unpooled,
                late_pooled: p.late.saturating_sub(p.late_unpooled),
                send_lag_p99_ms: p.send_lag_ms.p99,
                own_lag_p99_ms: p.own_lag_ms.as_ref().map(|o| o.p99),
                latency_p99_ms: Some(p.latency_ms.p99),
                waited_for_connection: p.waited_for_connection,
                waited_on_loader: p.waited_on_loader,
                read_lag_p99_ms: p.read_lag_ms.as_ref().filter(|r| r.count >= 1000).map(|r| r.p99),
                measured_s: p.measured_s,
                // The host's jitter where this step's sends were due, as the verdict takes it.
                floor_ms: Some(floor.for_phase(s, p).ms),
                wake_window_ms: Some(s.run.wake_window_us / 1000.0),
                wake_window_adaptive: s.run.wake_window_adaptive,
                // Sustained too: the mean of the settled seconds. A step holds 2–3 of them, so
                // their p95 would be the worst one, and one noisy second of the host moved the
                // certified ceiling by 20 % (CI: 92 % in one second at 95,367/s, then ceilings of
                // 115,923 and 119,204 req/s on either side). Real saturation stays high in every
                // second, and shows in the step's send lag besides.
                cpu_p95: mean(&cpu),
                runqueue_p99_us: rq,
                time_wait_max: tw,
                ephemeral_ports_max_ratio: ports.map(|r| (r * 10_000.0).round() / 10_000.0),
                // Set by the caller, who knows the run and the processes.
                run_requests: 0,
                loader_process_us_per_request: None,
                target_process_us_per_request: None,
                nic_tx_mbps: None,
                nic_device: None,
                steal_max_ms,
            }
        })
        .collect()
}

/// The most the host took from one of the loader's cores (all of them when its affinity was
/// not read) in one of `seconds`, ms; `None` when no second read the steal.
fn steal_max<'a>(s: &Summary, seconds: impl Iterator<Item = &'a crate::health::HealthSample>) -> Option<f64> {
    let own = &s.health.peaks.loader_cpus;
    seconds
        .flat_map(|h| {
            h.core_steal_ms.iter().enumerate().filter(|(c, _)| own.is_empty() || own.contains(c)).map(|(_, &ms)| ms)
        })
        .fold(None, max_f)
}

/// The part of a per-second series inside `r` (clamped to what was sampled).
fn window<T>(v: &[T], r: std::ops::Range<usize>) -> &[T] {
    &v[r.start.min(v.len())..r.end.min(v.len())]
}

/// A figure over the step's seconds after its first; over all of them when that leaves none
/// (a one-second hold, or the run's last second, which may end before its sample is taken).
fn settled<T>(v: &[T], from: usize, to: usize, figure: impl Fn(&T) -> Option<f64>) -> Vec<f64> {
    let rest: Vec<f64> = window(v, from + 1..to).iter().filter_map(&figure).collect();
    if rest.is_empty() { window(v, from..to).iter().filter_map(&figure).collect() } else { rest }
}

fn max_f(m: Option<f64>, x: f64) -> Option<f64> {
    Some(m.map_or(x, |m| m.max(x)))
}

/// The lower median (of two values, the smaller).
fn lower_median(xs: &[f64]) -> Option<f64> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len().saturating_sub(1) / 2).copied()
}

/// The mean, `None` for no values.
fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_median_ignores_one_bad_second() {
        assert_eq!(lower_median(&[]), None);
        assert_eq!(lower_median(&[100.0, 3000.0]), Some(100.0));
        assert_eq!(lower_median(&[100.0, 3000.0, 200.0]), Some(200.0));
    }

    #[test]
    fn a_steps_cpu_is_the_mean_of_its_seconds() {
        assert_eq!(mean(&[]), None);
        assert_eq!(mean(&[92.0, 86.0]), Some(89.0));
    }
}
