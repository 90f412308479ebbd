//! Little's law cross-check per step: in-flight ≈ rate × time in the system (L = λ·W).
//!
//! What the summary lets us check honestly. Per step we know rates, mean latency (from the
//! intended time), mean service time (from the actual send), and per second the highest
//! in-flight count (summed over shards, so an upper bound of the true peak). Little's law
//! gives *mean* concurrency; the series gives *peaks*. So:
//!
//! - `on_wire` = sent/s × mean service time (a timed-out request's service time is its time
//!   on the wire, from its send to its deadline): the mean number of requests the loader had
//!   sent and not yet seen answered. This is what the in-flight counter counts.
//! - `in_system` = offered/s × mean latency: the mean number of requests due and not yet
//!   answered, including those still waiting in the loader to be sent.
//!
//! Findings (none = consistent):
//!
//! - [`LittleFinding::PeakBelowMean`] — the highest in-flight count seen is below the mean
//!   L: impossible if the counts are right (a peak is never below the mean). The in-flight
//!   counter, the latency record or the rates disagree: an accounting error in the loader.
//! - [`LittleFinding::LoaderBacklog`] — `in_system − on_wire` is the mean number of requests
//!   that were due but not yet sent: client-side queueing (the pool was smaller than
//!   rate × latency, or the loader's loop fell behind). Latency counts that wait; the target
//!   never saw it. Seed 002 §4.3: k6's drops at 400 VUs are the same story.
//! - [`LittleFinding::Bursty`] — the peak is far above what arrival randomness gives around
//!   the mean (in an open arrival stream, the number in service is roughly Poisson(L); we flag
//!   a peak above `L + 6·√(shards·L) + 6`): requests piled up within the step — a stall, or a
//!   queue that formed and drained — which the step's means hide. Seed 002 §0.8 reads the
//!   same numbers the other way round: 228 in flight at 180 req/s ⇒ W ≈ 1.27 s.
//!
//! The peak and burst comparisons need a step in a steady state: one whose requests timed
//! out or were dropped (a collapsing target) has its sends, its timeouts and its queue spread
//! over other steps' seconds, so its λ·W is not the mean of its own seconds — they are left
//! out there, and the detail says why, rather than call the accounting wrong.
//!
//! Owns the check only; it never changes a step's pass/fail.

use super::step::{StepJudgement, StepNumbers};

/// What a mismatch means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LittleFinding {
    /// Peak in flight below the mean in flight: an accounting error.
    PeakBelowMean,
    /// Requests waited in the loader before being sent.
    LoaderBacklog,
    /// Concurrency came in bursts the means hide.
    Bursty,
}

impl LittleFinding {
    /// Stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            LittleFinding::PeakBelowMean => "peak_below_mean",
            LittleFinding::LoaderBacklog => "loader_backlog",
            LittleFinding::Bursty => "bursty",
        }
    }
}

/// The check for one step.
#[derive(Debug, Clone, PartialEq)]
pub struct LittleCheck {
    /// Step name.
    pub step: String,
    /// Index in `summary.phases`.
    pub phase: usize,
    /// Mean requests on the wire, sent/s × mean service (+ timeouts' share).
    pub on_wire: f64,
    /// Mean requests due and unanswered, offered/s × mean latency.
    pub in_system: f64,
    /// Highest in-flight count of the step's seconds (upper bound); `None` without series.
    pub observed_peak: Option<u64>,
    /// `observed_peak / on_wire`.
    pub ratio: Option<f64>,
    /// Empty: consistent.
    pub findings: Vec<LittleFinding>,
    /// One sentence per finding (or the figures when consistent).
    pub detail: String,
}

/// Check one step; `shards` is how many shard peaks were summed into each second's in-flight.
pub fn check(step: &StepJudgement, shards: usize) -> Option<LittleCheck> {
    let n: &StepNumbers = &step.numbers;
    // A step cut short has its rates divided by the whole hold (see step.rs): no λ to use.
    if step.passed.is_none() || n.sent == 0 || n.unsent > 0 || n.duration_s <= 0.0 {
        return None;
    }
    let on_wire = n.sent_rps * n.service_mean_ms / 1000.0;
    // Timed out or dropped: the step's own requests spill over its window, λ·W is no mean of it.
    let steady = n.timeouts == 0 && n.dropped == 0;
    let in_system = n.arrival_rps * n.mean_ms / 1000.0;
    let backlog = in_system - on_wire;
    let mut findings = Vec::new();
    let mut sentences = Vec::new();
    if let Some(peak) = n.in_flight_max.filter(|_| steady) {
        let p = peak as f64;
        if p + 1.0 < 0.9 * on_wire {
            findings.push(LittleFinding::PeakBelowMean);
            sentences.push(format!(
                "peak in flight {peak} < mean {on_wire:.1} (= {:.1}/s × {:.1} ms): in-flight, latency or rate \
                 accounting disagree",
                n.sent_rps, n.service_mean_ms
            ));
        }
        let bound = on_wire + 6.0 * (shards.max(1) as f64 * on_wire).sqrt() + 6.0;
        if p > bound {
            findings.push(LittleFinding::Bursty);
            sentences.push(format!(
                "peak in flight {peak} ≫ mean {on_wire:.1} (random arrivals stay below {bound:.0}): requests piled up \
                 within the step (a stall or a queue that formed and drained)"
            ));
        }
    }
    if backlog >= 1.0 && backlog >= 0.1 * in_system {
        findings.push(LittleFinding::LoaderBacklog);
        sentences.push(format!(
            "{backlog:.1} requests on average were due but not yet sent ({in_system:.1} in system vs {on_wire:.1} on \
             the wire): client-side queueing — the pool or the loader held them"
        ));
    }
    let detail = if sentences.is_empty() {
        match n.in_flight_max {
            Some(peak) if !steady => format!(
                "mean {on_wire:.1} in flight (λ·W), peak {peak}; not compared: {} requests timed out and {} were dropped, so the step was no steady state",
                n.timeouts, n.dropped
            ),
            Some(peak) => format!("consistent: mean {on_wire:.1} in flight (λ·W), peak {peak}"),
            None => format!("mean {on_wire:.1} in flight (λ·W); no per-second series to compare"),
        }
    } else {
        sentences.join("; ")
    };
    Some(LittleCheck {
        step: step.name.clone(),
        phase: step.phase,
        on_wire,
        in_system,
        observed_peak: n.in_flight_max,
        ratio: n.in_flight_max.filter(|_| on_wire > 0.0).map(|p| p as f64 / on_wire),
        findings,
        detail,
    })
}

/// Check every step that ran to its end.
pub fn check_steps(steps: &[StepJudgement], shards: usize) -> Vec<LittleCheck> {
    steps.iter().filter_map(|s| check(s, shards)).collect()
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{node_1c, phase, php_r2, php_r2_series, second};
    use super::super::step::judge_steps;
    use super::*;
    use crate::summary::Criteria;

    fn findings(c: &LittleCheck) -> Vec<&'static str> {
        c.findings.iter().map(|f| f.as_str()).collect()
    }

    #[test]
    fn seed_002_php_r2_stalls_show_as_bursts_and_150_is_consistent() {
        let steps = judge_steps(&php_r2(), &php_r2_series(), &Criteria::default(), None);
        let checks = check_steps(&steps, 1);
        let by_name = |n: &str| checks.iter().find(|c| c.step == n).unwrap();
        // 150 req/s × 32.5 ms ≈ 4.9 in flight on average; 20 at the peak is arrival noise.
        let c150 = by_name("r0150");
        assert!((c150.on_wire - 4.87).abs() < 0.01, "{}", c150.on_wire);
        assert!(c150.findings.is_empty(), "{}", c150.detail);
        // 180: mean ≈ 39.8 but 228 in flight: the queue of §0.8 that formed and drained.
        let c180 = by_name("r0180");
        assert!((c180.on_wire - 39.76).abs() < 0.01);
        assert_eq!(findings(c180), ["bursty"]);
        assert!((c180.ratio.unwrap() - 5.73).abs() < 0.01);
        // 90 and 120: the host stalls the article names (27 and 39 vs means of 5.7 and 7.0).
        assert_eq!(findings(by_name("r0090")), ["bursty"]);
        assert_eq!(findings(by_name("r0120")), ["bursty"]);
        // 60: no series → only the figures. 210 was cut short: no rates to check.
        assert!(by_name("r0060").detail.contains("no per-second series"));
        assert!(checks.iter().all(|c| c.step != "r0210"));
    }

    #[test]
    fn seed_002_run_1c_matches_the_cap_and_shows_the_client_side_queue() {
        // §5.2.3: L ≈ 400 in flight (k6's cap), λ ≈ 430/s ⇒ W ≈ 0.93 s; p50 measured 892 ms.
        let series: Vec<_> = (38..60).map(|t| second(t, 550, 429, 4, 400)).collect();
        let steps = judge_steps(&node_1c(), &series, &Criteria::default(), None);
        let c = check(&steps[1], 1).unwrap();
        assert!((c.on_wire - 366.5).abs() < 0.1, "{}", c.on_wire);
        assert!(!c.findings.contains(&LittleFinding::PeakBelowMean) && !c.findings.contains(&LittleFinding::Bursty));
        // 550 were due per second but only ~430 got sent: the rest queued in (or were dropped by) the client.
        assert_eq!(findings(&c), ["loader_backlog"]);
    }

    #[test]
    fn peak_below_mean_is_an_accounting_error() {
        let mut p = phase("s", 1000.0, 1000.0, 10.0);
        p.service_ms.mean = 50.0;
        p.latency_ms.mean = 50.0;
        let series: Vec<_> = (0..10).map(|t| second(t, 1000, 1000, 0, 10)).collect();
        let steps = judge_steps(&[p.clone()], &series, &Criteria::default(), None);
        let c = check(&steps[0], 1).unwrap();
        assert_eq!(findings(&c), ["peak_below_mean"]);
        // At the mean (50 ± rounding) it is fine.
        let series: Vec<_> = (0..10).map(|t| second(t, 1000, 1000, 0, 46)).collect();
        let steps = judge_steps(&[p], &series, &Criteria::default(), None);
        assert!(check(&steps[0], 1).unwrap().findings.is_empty());
    }

    #[test]
    fn loader_backlog_and_timeouts() {
        // Due 1000/s, latency 80 ms from the intended time but only 30 ms on the wire.
        let mut p = phase("s", 1000.0, 1000.0, 10.0);
        p.latency_ms.mean = 80.0;
        p.service_ms.mean = 30.0;
        let steps = judge_steps(&[p.clone()], &[], &Criteria::default(), None);
        let c = check(&steps[0], 1).unwrap();
        assert_eq!(findings(&c), ["loader_backlog"]);
        assert!(c.detail.starts_with("50.0 requests on average were due but not yet sent"), "{}", c.detail);
        // Timed-out requests are in the service record at their time on the wire.
        p.latency_ms.mean = 40.0;
        p.service_ms.mean = 40.0;
        p.ok -= 20;
        *p.errors.get_mut("timeout").unwrap() = 20;
        let steps = judge_steps(&[p], &[], &Criteria::default(), None);
        let c = check(&steps[0], 1).unwrap();
        assert!((c.on_wire - 40.0).abs() < 1e-9 && c.findings.is_empty(), "{c:?}");
    }

    #[test]
    fn a_step_whose_requests_all_timed_out_is_no_accounting_error() {
        // Finding 1 of issue 46: 1,200 req/s offered to a target of 200/s through 256
        // connections, every request timed out at 5 s; 825 sends a second left (most of them
        // queued, so on the wire for less than the timeout), the peak capped at the pool.
        let mut p = phase("step 6", 1200.0, 0.0, 8.0);
        p.ok = 0;
        p.sent_rps = 825.0;
        *p.errors.get_mut("timeout").unwrap() = 9600;
        p.latency_ms.mean = 5001.0;
        p.service_ms.mean = 2500.0;
        let series: Vec<_> = (0..8).map(|t| second(t, 1200, 825, 0, 256)).collect();
        let steps = judge_steps(&[p], &series, &Criteria::default(), None);
        let c = check(&steps[0], 1).unwrap();
        assert!(!c.findings.contains(&LittleFinding::PeakBelowMean), "{}", c.detail);
        assert!(!c.detail.contains("accounting disagree"), "{}", c.detail);
        // What the numbers do say: requests queued in the loader for the pool.
        assert_eq!(findings(&c), ["loader_backlog"]);
        // Without the queue (every request due was sent at once), the figures alone, and why
        // the peak is not compared.
        let mut p = phase("step 6", 1200.0, 0.0, 8.0);
        *p.errors.get_mut("timeout").unwrap() = 9600;
        (p.ok, p.latency_ms.mean, p.service_ms.mean) = (0, 5000.0, 5000.0);
        let series: Vec<_> = (0..8).map(|t| second(t, 1200, 1200, 0, 256)).collect();
        let steps = judge_steps(&[p], &series, &Criteria::default(), None);
        let c = check(&steps[0], 1).unwrap();
        assert!(c.findings.is_empty() && c.detail.contains("9600 requests timed out"), "{}", c.detail);
    }

    #[test]
    fn the_bursty_bound_grows_with_shards() {
        let mut p = phase("s", 1000.0, 1000.0, 10.0);
        p.service_ms.mean = 10.0;
        p.latency_ms.mean = 10.0;
        // mean 10: one shard → bound 10 + 6·√10 + 6 ≈ 35; four shards → 10 + 6·√40 + 6 ≈ 54.
        let series: Vec<_> = (0..10).map(|t| second(t, 1000, 1000, 0, 40)).collect();
        let steps = judge_steps(&[p], &series, &Criteria::default(), None);
        assert_eq!(findings(&check(&steps[0], 1).unwrap()), ["bursty"]);
        assert!(check(&steps[0], 4).unwrap().findings.is_empty());
    }
}
