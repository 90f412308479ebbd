//! Per-step judgement: each hold window against the [`Criteria`], on its own numbers only.
//!
//! A step's numbers are the requests *due* in its hold window (the recorder attributes every
//! request to the phase of its intended time) — never cumulative numbers, never the ramp or
//! the warm-up, which are tagged apart and not judged (DESIGN "Analysis"; seed 002 §0.5 shows
//! a cumulative p95 of 277 ms while the broken step's own p95 was 800 ms).
//!
//! Owns: [`StepJudgement`], its [`FailReason`]s (stable codes + a sentence) and the
//! tail-sample [`TailWarning`]. Does not: find the knee or cliff ([`super::knee`]), print the
//! table ([`super::render`]), or decide whether the loader is trusted (the verdict; its answer
//! is passed in).

use std::fmt;

use crate::summary::Criteria;
use crate::summary::{PhaseSummary, SecondSummary};

/// Why a step failed: a stable short code (for scripts) plus the numbers and a sentence.
#[derive(Debug, Clone, PartialEq)]
pub struct FailReason {
    /// Which criterion.
    pub code: FailCode,
    /// The step's value (ms, fraction or count, per the code).
    pub value: f64,
    /// The limit it was held against.
    pub limit: f64,
    /// One human sentence, e.g. `p99 412 ms > SLO 300 ms`.
    pub detail: String,
}

impl fmt::Display for FailReason {
    /// `code: sentence`, the form written to `summary.json`'s `fail_reasons`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.detail)
    }
}

/// The criterion a step failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailCode {
    /// p95 above its SLO.
    P95Slo,
    /// p99 above its SLO.
    P99Slo,
    /// Error rate above the budget.
    ErrorBudget,
    /// ok/s below the goodput ratio of the offered rate.
    Goodput,
    /// Requests dropped (never sent).
    Dropped,
    /// Too many sends left late.
    Late,
    /// The verdict says the loader's numbers cannot be trusted.
    LoaderUntrusted,
    /// The step was cut short (stop or interrupt): some of its requests were never attempted.
    Incomplete,
}

impl FailCode {
    /// The stable code.
    pub fn as_str(self) -> &'static str {
        match self {
            FailCode::P95Slo => "p95_slo",
            FailCode::P99Slo => "p99_slo",
            FailCode::ErrorBudget => "error_budget",
            FailCode::Goodput => "goodput",
            FailCode::Dropped => "dropped",
            FailCode::Late => "late",
            FailCode::LoaderUntrusted => "loader_untrusted",
            FailCode::Incomplete => "incomplete",
        }
    }
}

/// A quoted percentile that rests on too few requests beyond it to be stable.
#[derive(Debug, Clone, PartialEq)]
pub struct TailWarning {
    /// `p95` or `p99`.
    pub percentile: &'static str,
    /// Latency samples in the step.
    pub count: u64,
    /// Samples beyond the percentile, `count × (1 − q)`.
    pub tail: u64,
    /// Samples the step would need for [`Criteria::tail_samples_min`] beyond it.
    pub needed: u64,
    /// One sentence.
    pub detail: String,
}

/// A step's own numbers, copied out of its phase (and the per-second series).
#[derive(Debug, Clone, PartialEq)]
pub struct StepNumbers {
    /// Planned rate, req/s (a closed step's: its users at the lightest step's pace).
    pub offered_rps: f64,
    /// The rate requests entered the system: the planned rate, or a closed step's sends (its
    /// users sent as the target let them) — Little's `λ`.
    pub arrival_rps: f64,
    /// Sends per second inside the window.
    pub sent_rps: f64,
    /// 2xx/3xx completions per second inside the window (goodput).
    pub ok_rps: f64,
    /// Requests due in the step.
    pub requests: u64,
    /// Of those, sent.
    pub sent: u64,
    /// Of those, answered 2xx/3xx.
    pub ok: u64,
    /// Of those, failed in any class except `dropped`, `aborted` and `unsent`.
    pub failed: u64,
    /// Of those, dropped (never sent: no connection within the timeout).
    pub dropped: u64,
    /// Of those, never attempted (the run stopped first).
    pub unsent: u64,
    /// Of those sent, sent more than 10 ms late.
    pub late: u64,
    /// `failed / (ok + failed)`; 0 when nothing finished.
    pub error_rate: f64,
    /// Corrected latency (from the intended time), ms.
    pub p50_ms: f64,
    /// Same, p95.
    pub p95_ms: f64,
    /// Same, p99.
    pub p99_ms: f64,
    /// Same, mean.
    pub mean_ms: f64,
    /// Samples in the latency record.
    pub latency_count: u64,
    /// Mean service time (from the actual send), ms.
    pub service_mean_ms: f64,
    /// Timeouts among the failures.
    pub timeouts: u64,
    /// Hold length, seconds.
    pub duration_s: f64,
    /// The part of the hold that ran, seconds (less than `duration_s` in a step cut short).
    pub measured_s: f64,
    /// Highest in-flight count of the step's seconds (an upper bound); `None` without series.
    pub in_flight_max: Option<u64>,
}

impl StepNumbers {
    /// Copy the numbers of `phase`, taking in-flight from the seconds of `series` inside it.
    pub fn of(phase: &PhaseSummary, series: &[SecondSummary]) -> StepNumbers {
        let class = |c: &str| phase.errors.get(c).copied().unwrap_or(0);
        let all_errors: u64 = phase.errors.values().sum();
        let dropped = class("dropped");
        // Failures of attempted requests: every class but those judged apart (dropped) or
        // left by a stop (aborted, unsent).
        let failed = all_errors - dropped - class("aborted") - class("unsent");
        // Summaries count what a stop left unsent; older ones left it to be inferred:
        // planned = sent + dropped + never connected + never attempted (docs/methodology.md).
        let unsent = match phase.errors.get("unsent") {
            Some(&n) => n,
            None => phase.requests.saturating_sub(phase.sent + dropped + class("connect")),
        };
        let finished = phase.ok + failed;
        StepNumbers {
            offered_rps: phase.offered_rps,
            arrival_rps: if phase.closed.is_some() { phase.sent_rps } else { phase.offered_rps },
            sent_rps: phase.sent_rps,
            ok_rps: phase.ok_rps,
            requests: phase.requests,
            sent: phase.sent,
            ok: phase.ok,
            failed,
            dropped,
            unsent,
            late: phase.late,
            error_rate: if finished == 0 { 0.0 } else { failed as f64 / finished as f64 },
            p50_ms: phase.latency_ms.p50,
            p95_ms: phase.latency_ms.p95,
            p99_ms: phase.latency_ms.p99,
            mean_ms: phase.latency_ms.mean,
            latency_count: phase.latency_ms.count,
            service_mean_ms: phase.service_ms.mean,
            timeouts: class("timeout"),
            duration_s: phase.duration_s,
            measured_s: phase.measured_s.unwrap_or(phase.duration_s),
            in_flight_max: in_flight_max(phase, series),
        }
    }

    /// Nothing of the step ran (a run stopped before it).
    pub fn not_run(&self) -> bool {
        self.offered_rps <= 0.0 || (self.sent == 0 && self.ok + self.failed + self.dropped == 0)
    }
}

/// The highest `in_flight_max` among the seconds lying inside the phase window (or, for a
/// window shorter than a second, the seconds it touches); `None` when the series is empty.
pub fn in_flight_max(phase: &PhaseSummary, series: &[SecondSummary]) -> Option<u64> {
    let (start, end) = (phase.start_s, phase.start_s + phase.duration_s);
    let eps = 1e-9;
    let inside = series.iter().filter(|s| s.t as f64 >= start - eps && (s.t + 1) as f64 <= end + eps);
    let touching = series.iter().filter(|s| ((s.t + 1) as f64) > start && (s.t as f64) < end);
    inside.map(|s| s.in_flight_max).max().or_else(|| touching.map(|s| s.in_flight_max).max())
}

/// The judgement of one hold step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepJudgement {
    /// Index of the phase in `summary.phases`.
    pub phase: usize,
    /// Position among the hold steps (0 = first step).
    pub position: usize,
    /// Step name.
    pub name: String,
    /// Its numbers.
    pub numbers: StepNumbers,
    /// `Some(true)` passed, `Some(false)` failed, `None` not judged (the step never ran).
    pub passed: Option<bool>,
    /// Every criterion it failed, in a fixed order.
    pub fail_reasons: Vec<FailReason>,
    /// Percentiles resting on too few tail samples.
    pub tail_warnings: Vec<TailWarning>,
    /// Set aside: the verdict could not vouch for this step's own numbers — the codes of
    /// the reasons that invalidate it (`None`: trusted, or no verdict). A set-aside step is
    /// failed (`loader_untrusted`) but neither passes nor breaks a knee or a cliff.
    pub set_aside: Option<Vec<String>>,
    /// The verdict's answer for this step (`None`: no verdict).
    pub trusted: Option<bool>,
}

/// Latency in ms as the tables print it: 3 significant figures, no more than needed.
pub fn fmt_ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn pct(f: f64) -> String {
    let p = f * 100.0;
    if p >= 10.0 { format!("{p:.1} %") } else { format!("{p:.2} %") }
}

/// Judge one step. `trusted` is the verdict's answer (`None`: no verdict, not judged).
pub fn judge_step(
    phase_index: usize,
    position: usize,
    name: &str,
    n: StepNumbers,
    criteria: &Criteria,
    trusted: Option<bool>,
) -> StepJudgement {
    let mut reasons = Vec::new();
    let mut fail =
        |code, value: f64, limit: f64, detail: String| reasons.push(FailReason { code, value, limit, detail });
    let not_run = n.not_run();
    if !not_run {
        let has_latency = n.latency_count > 0;
        if let Some(slo) = criteria.p95_ms
            && has_latency
            && n.p95_ms > slo
        {
            fail(FailCode::P95Slo, n.p95_ms, slo, format!("p95 {} ms > SLO {} ms", fmt_ms(n.p95_ms), fmt_ms(slo)));
        }
        if let Some(slo) = criteria.p99_ms
            && has_latency
            && n.p99_ms > slo
        {
            fail(FailCode::P99Slo, n.p99_ms, slo, format!("p99 {} ms > SLO {} ms", fmt_ms(n.p99_ms), fmt_ms(slo)));
        }
        if n.error_rate > criteria.error_budget {
            let detail = format!(
                "errors {} ({} of {}) > budget {}",
                pct(n.error_rate),
                n.failed,
                n.ok + n.failed,
                pct(criteria.error_budget)
            );
            fail(FailCode::ErrorBudget, n.error_rate, criteria.error_budget, detail);
        }
        // A step cut short has its ok/s divided by the whole hold: low by construction, not
        // a throughput figure (seed 002 §5.2.1, "58.3 done/s is falsely low"). It fails as
        // incomplete instead.
        let goodput = n.ok_rps / n.offered_rps;
        if n.unsent == 0 && goodput < criteria.goodput_min {
            let detail = format!(
                "ok/s {:.1} = {} of offered {:.0} < {}",
                n.ok_rps,
                pct(goodput),
                n.offered_rps,
                pct(criteria.goodput_min)
            );
            fail(FailCode::Goodput, goodput, criteria.goodput_min, detail);
        }
        if n.dropped > criteria.dropped_max {
            let detail = format!("{} dropped (never sent) > {} allowed", n.dropped, criteria.dropped_max);
            fail(FailCode::Dropped, n.dropped as f64, criteria.dropped_max as f64, detail);
        }
        let late = if n.sent == 0 { 0.0 } else { n.late as f64 / n.sent as f64 };
        if late > criteria.late_max {
            let detail = format!(
                "{} of sends late ({} of {}, > 10 ms behind) > {}",
                pct(late),
                n.late,
                n.sent,
                pct(criteria.late_max)
            );
            fail(FailCode::Late, late, criteria.late_max, detail);
        }
        if trusted == Some(false) {
            fail(FailCode::LoaderUntrusted, 0.0, 1.0, "loader untrusted: the verdict invalidates these numbers".into());
        }
        if n.unsent > 0 {
            let detail = format!("cut short: {} of {} planned requests never attempted", n.unsent, n.requests);
            fail(FailCode::Incomplete, n.unsent as f64, 0.0, detail);
        }
    }
    let mut quoted = vec![("p99", 10u64)];
    if criteria.p95_ms.is_some() {
        quoted.insert(0, ("p95", 50));
    }
    let tail_warnings =
        if not_run { Vec::new() } else { tail_warnings(n.latency_count, &quoted, criteria.tail_samples_min) };
    StepJudgement {
        phase: phase_index,
        position,
        name: name.to_string(),
        passed: if not_run { None } else { Some(reasons.is_empty()) },
        numbers: n,
        fail_reasons: reasons,
        tail_warnings,
        set_aside: None,
        trusted,
    }
}

/// Warnings for each `(name, per-mille beyond it)` percentile (p99 = 10 ‰ beyond) whose tail
/// `count × ‰ / 1000` is below `min`. Integer arithmetic, so 10 000 samples give p99 exactly
/// 100 tail samples and no warning.
pub fn tail_warnings(count: u64, quoted: &[(&'static str, u64)], min: u64) -> Vec<TailWarning> {
    quoted
        .iter()
        .filter_map(|&(percentile, per_mille)| {
            let tail = count * per_mille / 1000;
            (tail < min).then(|| {
                let needed = (min * 1000).div_ceil(per_mille);
                TailWarning {
                    percentile,
                    count,
                    tail,
                    needed,
                    detail: format!(
                        "{percentile} rests on {tail} requests beyond it ({count} in the step); \
                         {min} need ≥ {needed} requests (hold longer)"
                    ),
                }
            })
        })
        .collect()
}

/// Judge every hold phase of `phases`, in order, the verdict's answer being `trusted` for
/// all of them; warm-up and ramp phases are skipped.
pub fn judge_steps(
    phases: &[PhaseSummary],
    series: &[SecondSummary],
    criteria: &Criteria,
    trusted: Option<bool>,
) -> Vec<StepJudgement> {
    let trust: Vec<PhaseTrust> = phases.iter().map(|_| PhaseTrust { trusted, why: Vec::new() }).collect();
    judge_steps_trusting(phases, series, criteria, &trust)
}

/// What the verdict says of one phase: trusted or not (`None`: no verdict), and the codes of
/// the reasons that invalidate it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PhaseTrust {
    /// The verdict's answer for the phase.
    pub trusted: Option<bool>,
    /// The codes of its invalidating reasons.
    pub why: Vec<String>,
}

/// Judge every hold phase of `phases`, in order, each with the verdict's answer for it
/// (`trust`, by phase index); warm-up and ramp phases are skipped. A step the verdict could
/// not vouch for is set aside ([`StepJudgement::set_aside`]).
pub fn judge_steps_trusting(
    phases: &[PhaseSummary],
    series: &[SecondSummary],
    criteria: &Criteria,
    trust: &[PhaseTrust],
) -> Vec<StepJudgement> {
    phases
        .iter()
        .enumerate()
        .filter(|(_, p)| p.kind == "hold")
        .enumerate()
        .map(|(position, (i, p))| {
            let t = trust.get(i).cloned().unwrap_or_default();
            let mut j = judge_step(i, position, &p.name, StepNumbers::of(p, series), criteria, t.trusted);
            if t.trusted == Some(false) && j.passed.is_some() {
                let why = if t.why.is_empty() { "the verdict".to_string() } else { t.why.join(", ") };
                for r in j.fail_reasons.iter_mut().filter(|r| r.code == FailCode::LoaderUntrusted) {
                    r.detail = format!(
                        "loader untrusted in this step ({why}): set aside — its numbers are not the target's alone"
                    );
                }
                j.set_aside = Some(t.why);
            }
            j
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{phase, php_r2, second};
    use super::*;

    fn codes(j: &StepJudgement) -> Vec<&'static str> {
        j.fail_reasons.iter().map(|r| r.code.as_str()).collect()
    }

    #[test]
    fn seed_002_php_r2_steps_pass_and_fail_as_the_article_reads_them() {
        let c = Criteria { p95_ms: Some(200.0), ..Default::default() };
        let steps = judge_steps(&php_r2(), &[], &c, None);
        let verdicts: Vec<_> = steps.iter().map(|s| (s.name.as_str(), s.passed, codes(s))).collect();
        assert_eq!(
            verdicts,
            vec![
                ("r0060", Some(true), vec![]),
                ("r0090", Some(false), vec!["p95_slo"]),
                ("r0120", Some(false), vec!["p95_slo"]),
                ("r0150", Some(true), vec![]),
                ("r0180", Some(false), vec!["p95_slo"]),
                ("r0210", Some(false), vec!["p95_slo", "incomplete"]),
            ]
        );
        assert_eq!(steps[4].fail_reasons[0].detail, "p95 1113 ms > SLO 200 ms");
        assert_eq!(steps[4].fail_reasons[0].to_string(), "p95_slo: p95 1113 ms > SLO 200 ms");
    }

    #[test]
    fn only_hold_phases_are_judged_on_their_own_numbers() {
        let mut warm = phase("warmup", 100.0, 100.0, 9_000.0);
        warm.kind = "warmup".into();
        let mut ramp = phase("ramp 2", 150.0, 40.0, 9_000.0);
        ramp.kind = "ramp".into();
        let steps = judge_steps(&[warm, phase("step 1", 100.0, 100.0, 20.0), ramp], &[], &Criteria::default(), None);
        assert_eq!(steps.len(), 1);
        assert_eq!((steps[0].phase, steps[0].position, steps[0].passed), (1, 0, Some(true)));
    }

    #[test]
    fn errors_goodput_drops_and_late_each_fail_with_their_code() {
        let c = Criteria::default();
        let mut p = phase("s", 100.0, 100.0, 20.0);
        p.ok -= 30;
        p.errors.insert("http_5xx".into(), 25);
        p.errors.insert("timeout".into(), 5);
        let j = judge_step(0, 0, "s", StepNumbers::of(&p, &[]), &c, None);
        assert_eq!(codes(&j), ["error_budget"]);
        assert_eq!(j.fail_reasons[0].detail, "errors 1.50 % (30 of 2000) > budget 1.00 %");

        // 1 % exactly is within budget (the budget is a limit, not a target).
        let mut p = phase("s", 100.0, 100.0, 20.0);
        p.ok -= 20;
        p.errors.insert("http_429".into(), 20);
        assert_eq!(judge_step(0, 0, "s", StepNumbers::of(&p, &[]), &c, None).passed, Some(true));

        // Seed 002 diag-tcp-2 at 240: 239.9 sent, 211.3 ok/s.
        let mut p = phase("r0240", 240.0, 211.3, 20.0);
        p.sent_rps = 239.9;
        let j = judge_step(0, 0, "r0240", StepNumbers::of(&p, &[]), &c, None);
        assert_eq!(codes(&j), ["goodput"]);
        assert_eq!(j.fail_reasons[0].detail, "ok/s 211.3 = 88.0 % of offered 240 < 97.0 %");

        let mut p = phase("s", 100.0, 100.0, 20.0);
        p.sent -= 1;
        p.ok -= 1;
        p.errors.insert("dropped".into(), 1);
        let j = judge_step(0, 0, "s", StepNumbers::of(&p, &[]), &c, None);
        assert_eq!(codes(&j), ["dropped"], "one drop fails; drops are not in the error rate");
        assert_eq!(j.numbers.error_rate, 0.0);

        let mut p = phase("s", 100.0, 100.0, 20.0);
        p.late = 20;
        assert_eq!(judge_step(0, 0, "s", StepNumbers::of(&p, &[]), &c, None).passed, Some(true), "1 % late is allowed");
        p.late = 21;
        assert_eq!(codes(&judge_step(0, 0, "s", StepNumbers::of(&p, &[]), &c, None)), ["late"]);
    }

    #[test]
    fn untrusted_loader_fails_every_step_and_no_verdict_fails_none() {
        let p = phase("s", 100.0, 100.0, 20.0);
        let j = judge_step(0, 0, "s", StepNumbers::of(&p, &[]), &Criteria::default(), Some(false));
        assert_eq!(codes(&j), ["loader_untrusted"]);
        assert!(j.fail_reasons[0].detail.starts_with("loader untrusted"));
        for trusted in [None, Some(true)] {
            assert_eq!(
                judge_step(0, 0, "s", StepNumbers::of(&p, &[]), &Criteria::default(), trusted).passed,
                Some(true)
            );
        }
    }

    #[test]
    fn a_step_that_never_ran_is_not_judged() {
        let mut p = phase("s", 100.0, 0.0, 20.0);
        p.sent = 0;
        p.ok = 0;
        p.sent_rps = 0.0;
        p.latency_ms.count = 0;
        let j = judge_step(0, 0, "s", StepNumbers::of(&p, &[]), &Criteria::default(), Some(false));
        assert_eq!((j.passed, j.fail_reasons.len(), j.tail_warnings.len()), (None, 0, 0));
    }

    #[test]
    fn tail_warning_counts_requests_beyond_the_percentile() {
        // Seed 002 §0.7: 150 req/s × 22 s = 3300 requests → p99 on 33.
        let w = tail_warnings(3300, &[("p99", 10)], 100);
        assert_eq!((w[0].tail, w[0].needed), (33, 10_000));
        assert!(tail_warnings(10_000, &[("p99", 10)], 100).is_empty(), "exactly 100 beyond is enough");
        assert_eq!(tail_warnings(9_999, &[("p99", 10)], 100).len(), 1);
        // 150 req/s × 120 s = 18 000 → 180 beyond p99: no warning; p95 needs 2000.
        assert!(tail_warnings(18_000, &[("p95", 50), ("p99", 10)], 100).is_empty());
        assert_eq!(tail_warnings(1_999, &[("p95", 50), ("p99", 10)], 100).len(), 2);
    }

    #[test]
    fn p95_is_quoted_only_when_it_has_an_slo() {
        let p = phase("s", 60.0, 60.0, 20.0); // 1200 requests
        let plain = judge_step(0, 0, "s", StepNumbers::of(&p, &[]), &Criteria::default(), None);
        assert_eq!(plain.tail_warnings.iter().map(|w| w.percentile).collect::<Vec<_>>(), ["p99"]);
        let c = Criteria { p95_ms: Some(200.0), ..Default::default() };
        let slo = judge_step(0, 0, "s", StepNumbers::of(&p, &[]), &c, None);
        assert_eq!(slo.tail_warnings.iter().map(|w| w.percentile).collect::<Vec<_>>(), ["p95", "p99"]);
    }

    #[test]
    fn in_flight_comes_from_the_seconds_inside_the_window() {
        let mut p = phase("s", 100.0, 100.0, 3.0);
        p.start_s = 2.0;
        let series: Vec<_> = (0..7).map(|t| second(t, 100, 100, 0, [1, 2, 50, 4, 6, 9, 900][t as usize])).collect();
        assert_eq!(in_flight_max(&p, &series), Some(50));
        p.start_s = 2.5;
        p.duration_s = 0.2;
        assert_eq!(in_flight_max(&p, &series), Some(50), "a sub-second window uses the second it touches");
        assert_eq!(in_flight_max(&p, &[]), None);
    }
}
