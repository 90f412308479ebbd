//! Knee and cliff over the judged steps of one run.
//!
//! Three knees, each a different question (seed 004's curve: linear region → knee →
//! saturation plateau → cliff):
//!
//! - [`KneeRule::Slo`] — the last step that passes every criterion with every earlier step
//!   passing (seed 002 §0.1/§0.9: "the reported number is the last step still passing, not
//!   the moment the test aborted"). This is `summary.knee`.
//! - [`KneeRule::Throughput`] — the last step of the leading run of steps whose ok/s still
//!   *follows* the offered rate: ok/s ≥ goodput ratio × offered, and (after the first step)
//!   ok/s gained at least [`KneeRules::follow_min`] of the rate added.
//! - [`KneeRule::Adaptive`] — seed 004's rule: the rate stepped up but ok/s gained less than
//!   5 % while p99 jumped more than 25 %; the knee is the step *before*.
//!
//! Cliff: the first step whose error rate exceeds the budget, or whose goodput collapses
//! (ok/s falls more than 10 % below the previous step's while the rate did not fall, or below
//! half the offered rate).
//!
//! Owns the rules and their thresholds. Does not: judge steps ([`super::step`]), stop a run
//! ([`super::live`]), or combine runs ([`super::capacity`]). The rules assume the steps'
//! rates rise; comparisons between steps whose rate did not rise are skipped.

use super::step::{StepJudgement, fmt_ms};
use crate::summary::Criteria;

/// Thresholds of the knee and cliff rules (not user SLOs: they define the shapes).
#[derive(Debug, Clone, PartialEq)]
pub struct KneeRules {
    /// Throughput knee: a step follows only if ok/s gained at least this fraction of the rate
    /// it added. Default 0.5.
    ///
    /// Source: seed 004 — in the linear region ok/s grows 1:1 with load, at the knee "the
    /// slope drops". Half is a drop no noise explains: with the +10–20 % steps seed 002 §0.7
    /// recommends near the knee and ±2 % noise on ok/s, the measured slope of a following
    /// step stays above ~0.8.
    pub follow_min: f64,
    /// Adaptive knee: ok/s gain below this relative gain. Default 0.05 (seed 004: "TPS 增幅
    /// < 5 %"). Applied as `min(0.05, rate gain / 2)`, so that with seed 004's +10 % steps it
    /// is exactly 5 %, and a small step (+4 %) cannot fire it just by being small.
    pub adaptive_ok_gain_max: f64,
    /// Adaptive knee: p99 jump above this relative jump. Default 0.25 (seed 004's code; its
    /// diagram says 30 %).
    pub adaptive_p99_jump_min: f64,
    /// Cliff: ok/s falling more than this fraction below the previous step's. Default 0.10.
    ///
    /// Source: seed 004 separates the saturation plateau (ok/s stops growing) from the cliff
    /// (ok/s crashes down). Seed 002 §0.9: saturated goodput at one step varies 207–229 ok/s
    /// across repeats (about ±5 %), so a fall of more than 10 % is not plateau noise.
    pub collapse_drop: f64,
    /// Cliff: ok/s below this fraction of the offered rate. Default 0.5.
    ///
    /// Source: seed 002 §5.1.4 — congestion collapse: 26.4 of 60 req/s (0.44), then 0.0 of
    /// 90, the workers busy on requests the proxy had already given up. Plateau steps past
    /// the knee stayed far above half: 207–229 of 240, 296 of 300, 429 of 550 (§5.2.3).
    pub collapse_ratio: f64,
}

impl Default for KneeRules {
    fn default() -> Self {
        KneeRules {
            follow_min: 0.5,
            adaptive_ok_gain_max: 0.05,
            adaptive_p99_jump_min: 0.25,
            collapse_drop: 0.10,
            collapse_ratio: 0.5,
        }
    }
}

/// Which rule found a knee.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KneeRule {
    /// Last step passing with all earlier steps passing.
    Slo,
    /// Last step whose ok/s follows the offered rate.
    Throughput,
    /// Seed 004: ok/s gain < 5 % while p99 jumps > 25 % on the next step.
    Adaptive,
}

impl KneeRule {
    /// Stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            KneeRule::Slo => "slo",
            KneeRule::Throughput => "throughput",
            KneeRule::Adaptive => "adaptive",
        }
    }
}

/// A knee: a step, its rate and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Knee {
    /// Offered rate of the step, req/s.
    pub rps: f64,
    /// Step name.
    pub step: String,
    /// Index in `summary.phases`.
    pub phase: usize,
    /// Position among the hold steps (0 = first), for comparing runs of the same ladder.
    pub position: usize,
    /// The rule that found it.
    pub rule: KneeRule,
    /// The step after it that broke the rule; `None` when the run never broke it (the knee
    /// is then only a lower bound: the true one is above the highest step run).
    pub next: Option<String>,
    /// One sentence.
    pub detail: String,
}

/// Which rule found a cliff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CliffRule {
    /// Error rate above the budget.
    ErrorBudget,
    /// ok/s fell below the previous step's by more than [`KneeRules::collapse_drop`].
    GoodputFall,
    /// ok/s below [`KneeRules::collapse_ratio`] of the offered rate.
    GoodputCollapse,
    /// The emergency stop's own rule (errors or goodput bad for seconds on end), the target's,
    /// in a step cut short before its own figures could say so.
    EmergencyStop,
}

impl CliffRule {
    /// Stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            CliffRule::ErrorBudget => "error_budget",
            CliffRule::GoodputFall => "goodput_fall",
            CliffRule::GoodputCollapse => "goodput_collapse",
            CliffRule::EmergencyStop => "emergency_stop",
        }
    }
}

/// The cliff: the first collapsing step.
#[derive(Debug, Clone, PartialEq)]
pub struct Cliff {
    /// Offered rate of the step, req/s.
    pub rps: f64,
    /// Step name.
    pub step: String,
    /// Index in `summary.phases`.
    pub phase: usize,
    /// The first rule that fired (in the order error budget, fall, collapse).
    pub rule: CliffRule,
    /// One sentence.
    pub detail: String,
}

/// Every knee of a run, plus the steps that make the SLO knee unstable.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Knees {
    /// Last step passing with every earlier step passing (`summary.knee`).
    pub slo: Option<Knee>,
    /// Last step whose ok/s follows the offered rate.
    pub throughput: Option<Knee>,
    /// Seed 004's adaptive rule.
    pub adaptive: Option<Knee>,
    /// Failed steps followed by a passing step. Seed 002 §0.8: steps 90 and 120 failed, 150
    /// passed — host stalls, not a growing queue; the knee of such a run must be repeated.
    pub unstable: Vec<String>,
    /// Steps set aside because the verdict could not vouch for them (the knees and the cliff
    /// are found among the others).
    pub set_aside: Vec<String>,
    /// Whether the SLO knee stands on trusted steps alone: `None` when no step was set aside;
    /// `Some(true)` when the step that broke it was trusted and no set-aside step lies
    /// between the two (set-aside steps past the break change nothing); `Some(false)` when a
    /// set-aside step may hold the knee (it lies between the last trusted pass and the first
    /// trusted failure, or no trusted step failed).
    pub on_trusted_steps: Option<bool>,
}

/// The steps that ran and that the verdict vouched for, in order: what every knee and the
/// cliff are found among.
fn ran(steps: &[StepJudgement]) -> impl Iterator<Item = &StepJudgement> {
    steps.iter().take_while(|s| s.passed.is_some()).filter(|s| s.set_aside.is_none())
}

/// The set-aside steps that ran, by name.
fn set_aside(steps: &[StepJudgement]) -> Vec<String> {
    steps.iter().take_while(|s| s.passed.is_some()).filter(|s| s.set_aside.is_some()).map(|s| s.name.clone()).collect()
}

/// Whether the SLO knee stands on trusted steps alone (see [`Knees::on_trusted_steps`]).
fn knee_on_trusted_steps(steps: &[StepJudgement], slo: Option<&Knee>) -> Option<bool> {
    let ran: Vec<&StepJudgement> = steps.iter().take_while(|s| s.passed.is_some()).collect();
    if !ran.iter().any(|s| s.set_aside.is_some()) {
        return None;
    }
    let broke = ran.iter().position(|s| s.set_aside.is_none() && s.passed == Some(false));
    let Some(broke) = broke else { return Some(false) };
    let knee_at = slo.and_then(|k| ran.iter().position(|s| s.phase == k.phase));
    let between = match knee_at {
        Some(k) => &ran[k + 1..broke],
        None => &ran[..broke],
    };
    Some(between.iter().all(|s| s.set_aside.is_none()))
}

/// The sentence on set-aside steps a knee's detail ends with (empty when none was).
fn set_aside_clause(steps: &[StepJudgement]) -> String {
    let names = set_aside(steps);
    if names.is_empty() {
        return String::new();
    }
    let each: Vec<String> = steps
        .iter()
        .take_while(|s| s.passed.is_some())
        .filter_map(|s| s.set_aside.as_ref().map(|why| format!("{} ({})", s.name, why.join(", "))))
        .collect();
    format!("; set aside (the loader could not vouch for them): {}", each.join(", "))
}

fn knee(s: &StepJudgement, rule: KneeRule, next: Option<&StepJudgement>, detail: String) -> Knee {
    Knee {
        rps: s.numbers.offered_rps,
        step: s.name.clone(),
        phase: s.phase,
        position: s.position,
        rule,
        next: next.map(|n| n.name.clone()),
        detail,
    }
}

/// The last step that passes with every earlier step passing; `None` if the first step failed.
pub fn slo_knee(steps: &[StepJudgement]) -> Option<Knee> {
    let run: Vec<&StepJudgement> = ran(steps).collect();
    let broke = run.iter().position(|s| s.passed == Some(false));
    let last = match broke {
        Some(0) => return None,
        Some(i) => i - 1,
        None => run.len().checked_sub(1)?,
    };
    let next = broke.map(|i| run[i]);
    let detail = match next {
        Some(n) => {
            let why: Vec<&str> = n.fail_reasons.iter().map(|r| r.detail.as_str()).collect();
            format!("last step passing with every earlier step passing; {} failed: {}", n.name, why.join("; "))
        }
        None => "every step passed: the knee is above the highest step run (a lower bound)".to_string(),
    };
    Some(knee(run[last], KneeRule::Slo, next, detail))
}

/// Failed steps that a later step passed after (see [`Knees::unstable`]).
pub fn unstable_steps(steps: &[StepJudgement]) -> Vec<String> {
    let run: Vec<&StepJudgement> = ran(steps).collect();
    let last_pass = run.iter().rposition(|s| s.passed == Some(true));
    match last_pass {
        Some(lp) => run[..lp].iter().filter(|s| s.passed == Some(false)).map(|s| s.name.clone()).collect(),
        None => Vec::new(),
    }
}

/// Why `cur` does not follow the offered rate (given the previous step), or `None` if it does.
fn not_following(
    prev: Option<&StepJudgement>,
    cur: &StepJudgement,
    goodput_min: f64,
    rules: &KneeRules,
) -> Option<String> {
    let c = &cur.numbers;
    let ratio = c.ok_rps / c.offered_rps;
    if ratio < goodput_min {
        return Some(format!(
            "{}: ok/s {:.1} is {:.1} % of offered {:.0} (< {:.0} %)",
            cur.name,
            c.ok_rps,
            ratio * 100.0,
            c.offered_rps,
            goodput_min * 100.0
        ));
    }
    let p = &prev?.numbers;
    let added = c.offered_rps - p.offered_rps;
    let gained = c.ok_rps - p.ok_rps;
    (added > 0.0 && gained < rules.follow_min * added).then(|| {
        format!(
            "{}: ok/s gained {gained:.1} for +{added:.0} offered ({:.0} % < {:.0} %)",
            cur.name,
            gained / added * 100.0,
            rules.follow_min * 100.0
        )
    })
}

/// The last step of the leading run of steps whose ok/s follows the offered rate; `None` if
/// the first step already does not. Steps cut short end the walk (their ok/s is not a rate).
pub fn throughput_knee(steps: &[StepJudgement], goodput_min: f64, rules: &KneeRules) -> Option<Knee> {
    let run: Vec<&StepJudgement> = ran(steps).take_while(|s| s.numbers.unsent == 0).collect();
    let mut last = None;
    for (i, cur) in run.iter().enumerate() {
        let prev = i.checked_sub(1).map(|j| run[j]);
        if let Some(why) = not_following(prev, cur, goodput_min, rules) {
            return last.map(|l: &StepJudgement| {
                knee(
                    l,
                    KneeRule::Throughput,
                    Some(cur),
                    format!("last step whose ok/s follows the offered rate; {why}"),
                )
            });
        }
        last = Some(*cur);
    }
    last.map(|l| {
        knee(
            l,
            KneeRule::Throughput,
            None,
            "ok/s followed the offered rate through the last step (a lower bound)".into(),
        )
    })
}

/// Seconds a step cut short must have run for the adaptive rule to read it.
const MIN_CUT_STEP_S: f64 = 2.0;

/// Seed 004's rule on consecutive steps: rate up, ok/s gain < min(5 %, rate gain / 2), p99
/// jump > 25 %. The knee is the step before the first firing; `None` if it never fires.
pub fn adaptive_knee(steps: &[StepJudgement], rules: &KneeRules) -> Option<Knee> {
    // A step cut short by a stop still has its p99 (a lower bound: its unfinished requests
    // are recorded at the stop) and its ok/s over the time its answers came: enough to see
    // the rate's gain stall while the p99 jumps, if it ran a few seconds. The walk ends there.
    let mut cut = false;
    let run: Vec<&StepJudgement> = ran(steps)
        .take_while(|s| {
            let take = !cut && (s.numbers.unsent == 0 || s.numbers.measured_s >= MIN_CUT_STEP_S);
            cut |= s.numbers.unsent > 0;
            take
        })
        .collect();
    run.windows(2).find_map(|w| {
        let (p, c) = (&w[0].numbers, &w[1].numbers);
        if c.offered_rps <= p.offered_rps || p.ok_rps <= 0.0 || p.p99_ms <= 0.0 {
            return None;
        }
        let rate_gain = (c.offered_rps - p.offered_rps) / p.offered_rps;
        let ok_gain = (c.ok_rps - p.ok_rps) / p.ok_rps;
        let p99_jump = (c.p99_ms - p.p99_ms) / p.p99_ms;
        let ok_limit = rules.adaptive_ok_gain_max.min(rate_gain / 2.0);
        (ok_gain < ok_limit && p99_jump > rules.adaptive_p99_jump_min).then(|| {
            let detail = format!(
                "{}: rate +{:.0} % but ok/s {:+.1} % (< {:.1} %) while p99 {} → {} ms ({:+.0} % > {:.0} %)",
                w[1].name,
                rate_gain * 100.0,
                ok_gain * 100.0,
                ok_limit * 100.0,
                fmt_ms(p.p99_ms),
                fmt_ms(c.p99_ms),
                p99_jump * 100.0,
                rules.adaptive_p99_jump_min * 100.0
            );
            knee(w[0], KneeRule::Adaptive, Some(w[1]), detail)
        })
    })
}

/// The first step where the error rate exceeds `error_budget` or goodput collapses.
pub fn cliff(steps: &[StepJudgement], error_budget: f64, rules: &KneeRules) -> Option<Cliff> {
    let mut prev: Option<&StepJudgement> = None;
    for cur in ran(steps) {
        let c = &cur.numbers;
        // Among the steps the verdict vouched for, a collapse is the target's: say so.
        let side = if cur.trusted == Some(true) { "; the target's: the loader vouched for this step" } else { "" };
        let found = |rule, detail: String| Cliff {
            rps: c.offered_rps,
            step: cur.name.clone(),
            phase: cur.phase,
            rule,
            detail: format!("{detail}{side}"),
        };
        if c.error_rate > error_budget {
            let detail = format!("error rate {:.2} % > budget {:.2} %", c.error_rate * 100.0, error_budget * 100.0);
            return Some(found(CliffRule::ErrorBudget, detail));
        }
        // A step cut short has no goodput to speak of (see step.rs); only its errors count.
        if c.unsent > 0 {
            continue;
        }
        if let Some(p) = prev.map(|p| &p.numbers)
            && c.offered_rps >= p.offered_rps
            && c.ok_rps < (1.0 - rules.collapse_drop) * p.ok_rps
        {
            let detail = format!(
                "ok/s fell from {:.1} to {:.1} ({:.0} %) while the rate rose {:.0} → {:.0}",
                p.ok_rps,
                c.ok_rps,
                (c.ok_rps / p.ok_rps - 1.0) * 100.0,
                p.offered_rps,
                c.offered_rps
            );
            return Some(found(CliffRule::GoodputFall, detail));
        }
        if c.ok_rps < rules.collapse_ratio * c.offered_rps {
            let detail = format!(
                "ok/s {:.1} is {:.0} % of offered {:.0} (< {:.0} %)",
                c.ok_rps,
                c.ok_rps / c.offered_rps * 100.0,
                c.offered_rps,
                rules.collapse_ratio * 100.0
            );
            return Some(found(CliffRule::GoodputCollapse, detail));
        }
        prev = Some(cur);
    }
    None
}

/// The cliff an emergency stop of the target's called, when the steps' own figures call none:
/// the step (not set aside) where its streak of bad seconds began,
/// `phase` by index, `detail` the stop's. A step cut short by a stop has no goodput to judge,
/// and its errors are mostly requests the stop aborted, which are no one's failures — so the
/// stop's per-second evidence is the cliff's.
pub fn stop_cliff(steps: &[StepJudgement], phase: usize, detail: &str) -> Option<Cliff> {
    // The step may have sent none of its own requests (every connection still held by the
    // last step's backlog): it is where the collapse reached all the same.
    let s = steps.iter().filter(|s| s.set_aside.is_none()).find(|s| s.phase == phase)?;
    Some(Cliff {
        rps: s.numbers.offered_rps,
        step: s.name.clone(),
        phase: s.phase,
        rule: CliffRule::EmergencyStop,
        detail: format!("the emergency stop's streak began here: {detail}; the target's, the loader kept its schedule"),
    })
}

/// All knees of a run, found among the steps the verdict vouched for; the SLO knee's detail
/// names the steps set aside.
pub fn knees(steps: &[StepJudgement], criteria: &Criteria, rules: &KneeRules) -> Knees {
    let mut slo = slo_knee(steps);
    let on_trusted_steps = knee_on_trusted_steps(steps, slo.as_ref());
    if let Some(k) = slo.as_mut() {
        k.detail.push_str(&set_aside_clause(steps));
    }
    Knees {
        slo,
        throughput: throughput_knee(steps, criteria.goodput_min, rules),
        adaptive: adaptive_knee(steps, rules),
        unstable: unstable_steps(steps),
        set_aside: set_aside(steps),
        on_trusted_steps,
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{judged, node_1c, node_2a, php_r2, pool_n5, steps_from};
    use super::*;

    #[test]
    fn seed_002_php_r2_strict_knee_is_60_as_the_article_concludes() {
        // §0.8: "the last step passing with every earlier step passing is 60 req/s".
        let steps = judged(&php_r2(), 200.0);
        let k = slo_knee(&steps).unwrap();
        assert_eq!((k.rps, k.step.as_str(), k.next.as_deref()), (60.0, "r0060", Some("r0090")));
        assert!(k.detail.contains("r0090 failed: p95 343 ms > SLO 200 ms"), "{}", k.detail);
        // 90 and 120 failed but 150 passed: the stalls the article names.
        assert_eq!(unstable_steps(&steps), ["r0090", "r0120"]);
        // Goodput kept following through 180 (176.6 of 180); 210 was cut short by the abort.
        let t = throughput_knee(&steps, 0.97, &KneeRules::default()).unwrap();
        assert_eq!((t.rps, t.next.as_deref()), (180.0, None));
        assert_eq!(cliff(&steps, 0.01, &KneeRules::default()), None, "no errors, no collapse: no cliff");
    }

    /// Steps judged against a p99 SLO of 100 ms, the verdict setting aside `spoiled` (indices).
    fn with_set_aside(rows: &[(f64, f64, f64)], spoiled: &[usize]) -> Vec<StepJudgement> {
        use super::super::step::{PhaseTrust, judge_steps_trusting};
        let phases: Vec<_> = rows
            .iter()
            .enumerate()
            .map(|(i, &(offered, ok, p99))| {
                let mut p = super::super::fixtures::phase(&format!("step {}", i + 1), offered, ok, 8.0);
                p.start_s = 8.0 * i as f64;
                p.latency_ms.p99 = p99;
                p
            })
            .collect();
        let trust: Vec<PhaseTrust> = (0..rows.len())
            .map(|i| match spoiled.contains(&i) {
                true => PhaseTrust { trusted: Some(false), why: vec!["runqueue_delay".into()] },
                false => PhaseTrust { trusted: Some(true), why: Vec::new() },
            })
            .collect();
        let c = Criteria { p99_ms: Some(100.0), ..Default::default() };
        judge_steps_trusting(&phases, &[], &c, &trust)
    }

    const LADDER: &[(f64, f64, f64)] = &[
        (100.0, 100.0, 10.0),
        (150.0, 150.0, 10.0),
        (200.0, 199.0, 55.0),
        (300.0, 200.0, 4000.0),
        (600.0, 130.0, 5000.0),
    ];

    #[test]
    fn untrusted_steps_past_the_break_leave_the_knee_standing() {
        // Issue 46, finding 5: the collapse spoiled the last step; the knee is the target's.
        let steps = with_set_aside(LADDER, &[4]);
        let k = knees(&steps, &Criteria::default(), &KneeRules::default());
        let slo = k.slo.as_ref().unwrap();
        assert_eq!((slo.rps, slo.next.as_deref()), (200.0, Some("step 4")));
        assert!(slo.detail.ends_with("set aside (the loader could not vouch for them): step 5 (runqueue_delay)"));
        assert_eq!((k.set_aside.clone(), k.on_trusted_steps), (vec!["step 5".to_string()], Some(true)));
        // The cliff is found among trusted steps only: step 5 was the collapse, set aside.
        assert_eq!(cliff(&steps, 0.01, &KneeRules::default()), None);
        assert!(
            steps[4]
                .fail_reasons
                .iter()
                .any(|r| r.detail.starts_with("loader untrusted in this step (runqueue_delay)"))
        );
    }

    #[test]
    fn an_untrusted_step_where_the_knee_may_lie_leaves_it_unsettled() {
        // Step 3 spoiled between the last trusted pass (2) and the first trusted failure (4).
        let k = knees(&with_set_aside(LADDER, &[2]), &Criteria::default(), &KneeRules::default());
        assert_eq!((k.slo.as_ref().map(|k| k.rps), k.on_trusted_steps), (Some(150.0), Some(false)));
        // A spell in step 1 only: the knee stands on steps 2–3 and the break at 4.
        let k = knees(&with_set_aside(LADDER, &[0]), &Criteria::default(), &KneeRules::default());
        assert_eq!((k.slo.as_ref().map(|k| k.rps), k.on_trusted_steps), (Some(200.0), Some(true)));
        // No trusted step failed: where the knee is, the spoiled steps may say.
        let k = knees(&with_set_aside(&LADDER[..4], &[3]), &Criteria::default(), &KneeRules::default());
        assert_eq!(k.on_trusted_steps, Some(false));
        // Nothing set aside: the question does not arise.
        let k = knees(&with_set_aside(LADDER, &[]), &Criteria::default(), &KneeRules::default());
        assert_eq!(k.on_trusted_steps, None);
        let c = cliff(&with_set_aside(LADDER, &[]), 0.01, &KneeRules::default()).unwrap();
        assert!(c.detail.ends_with("the target's: the loader vouched for this step"), "{}", c.detail);
    }

    #[test]
    fn seed_002_node_2a_knee_is_150() {
        // §0.8 example 2: "the last step still passing is 150".
        let steps = judged(&node_2a(), 100.0);
        let k = slo_knee(&steps).unwrap();
        assert_eq!((k.rps, k.step.as_str(), k.next.as_deref()), (150.0, "04_rps150", Some("05_rps175")));
        assert!(unstable_steps(&steps).is_empty());
        // Tighter SLO: 01_rps50's p95 of 73.6 ms fails first, so there is no knee at all.
        assert_eq!(slo_knee(&judged(&node_2a(), 70.0)), None);
    }

    #[test]
    fn every_step_passing_gives_a_lower_bound_knee() {
        let steps = judged(&node_2a()[..4], 100.0);
        let k = slo_knee(&steps).unwrap();
        assert_eq!((k.rps, k.next.clone()), (150.0, None));
        assert!(k.detail.contains("lower bound"));
    }

    #[test]
    fn throughput_knee_by_ratio_on_the_seed_pool_of_five() {
        // §5.1.4: 5 workers × 112 ms → 44.6 req/s capacity; 43.5 ok/s at 45 (96.7 %).
        let steps = judged(&pool_n5(), 200.0);
        let t = throughput_knee(&steps, 0.97, &KneeRules::default()).unwrap();
        assert_eq!((t.rps, t.next.as_deref()), (40.0, Some("r0045")));
        assert!(t.detail.contains("96.7 % of offered 45"), "{}", t.detail);
    }

    #[test]
    fn throughput_knee_by_slope_when_ratio_still_holds() {
        // ok/s stays ≥ 97 % of offered but the last step gains 6 of +50.
        let steps = steps_from(&[(100.0, 100.0, 5.0), (200.0, 199.0, 6.0), (250.0, 205.0, 7.0)]);
        assert_eq!(throughput_knee(&steps, 0.8, &KneeRules::default()).unwrap().rps, 200.0);
        // With a slope of exactly one half it still follows.
        let steps = steps_from(&[(100.0, 100.0, 5.0), (200.0, 150.0, 6.0)]);
        assert_eq!(throughput_knee(&steps, 0.7, &KneeRules::default()).unwrap().next, None);
        // The first step not following means no throughput knee.
        let steps = steps_from(&[(100.0, 90.0, 5.0)]);
        assert_eq!(throughput_knee(&steps, 0.97, &KneeRules::default()), None);
    }

    #[test]
    fn adaptive_rule_of_seed_004() {
        // A target of capacity ~200: ok/s flattens at 250 while p99 explodes.
        let steps =
            steps_from(&[(100.0, 100.0, 5.0), (150.0, 150.0, 6.0), (200.0, 196.0, 40.0), (250.0, 201.0, 900.0)]);
        let a = adaptive_knee(&steps, &KneeRules::default()).unwrap();
        assert_eq!((a.rps, a.next.as_deref(), a.rule), (200.0, Some("s4"), KneeRule::Adaptive));
        // p99 +25 % exactly does not fire; +26 % does.
        let at = |p99: f64| steps_from(&[(100.0, 100.0, 100.0), (120.0, 102.0, p99)]);
        assert_eq!(adaptive_knee(&at(125.0), &KneeRules::default()), None);
        assert!(adaptive_knee(&at(126.0), &KneeRules::default()).is_some());
        // ok/s +6 % on a +20 % step is growth, not a knee.
        let steps = steps_from(&[(100.0, 100.0, 100.0), (120.0, 106.0, 300.0)]);
        assert_eq!(adaptive_knee(&steps, &KneeRules::default()), None);
        // A +4 % step: the ok limit is 2 %, so +3 % ok/s does not fire on its own smallness.
        let steps = steps_from(&[(100.0, 100.0, 100.0), (104.0, 103.0, 200.0)]);
        assert_eq!(adaptive_knee(&steps, &KneeRules::default()), None);
        // The seed 002 PHP run never fires it: ok/s kept rising.
        assert_eq!(adaptive_knee(&judged(&php_r2(), 200.0), &KneeRules::default()), None);
    }

    #[test]
    fn cliff_by_error_budget_on_seed_002_run_1c() {
        // §5.2.3: 550 req/s: 0.90 % errors (under budget), goodput 78 %; 600: 18.86 %.
        let steps = judged(&node_1c(), 2000.0);
        let c = cliff(&steps, 0.01, &KneeRules::default()).unwrap();
        assert_eq!((c.rps, c.step.as_str(), c.rule), (600.0, "03_rps600", CliffRule::ErrorBudget));
        assert_eq!(c.detail, "error rate 18.86 % > budget 1.00 %");
    }

    #[test]
    fn cliff_by_fall_and_by_collapse() {
        let rules = KneeRules::default();
        // Plateau wobble (−5 %) is not a cliff; −11 % is.
        let plateau = steps_from(&[(200.0, 200.0, 5.0), (250.0, 230.0, 50.0), (300.0, 219.0, 90.0)]);
        assert_eq!(cliff(&plateau, 0.01, &rules), None);
        let fall = steps_from(&[(200.0, 200.0, 5.0), (250.0, 230.0, 50.0), (300.0, 204.0, 90.0)]);
        let c = cliff(&fall, 0.01, &rules).unwrap();
        assert_eq!((c.rps, c.rule), (300.0, CliffRule::GoodputFall));
        // Below half the offered rate on the first step (nothing to fall from).
        let low = steps_from(&[(100.0, 49.0, 5.0)]);
        assert_eq!(cliff(&low, 0.01, &rules).unwrap().rule, CliffRule::GoodputCollapse);
        // Seed 002 §5.1.4 pool of five: 60 req/s → 26.4 ok/s with 670 504s: errors fire first.
        let c = cliff(&judged(&pool_n5(), 200.0), 0.01, &rules).unwrap();
        assert_eq!((c.rps, c.rule), (60.0, CliffRule::ErrorBudget));
    }

    #[test]
    fn knees_bundle_uses_the_criteria() {
        let c = Criteria { p95_ms: Some(100.0), ..Default::default() };
        let k = knees(&judged(&node_2a(), 100.0), &c, &KneeRules::default());
        assert_eq!(k.slo.unwrap().rule, KneeRule::Slo);
        assert_eq!(k.throughput.unwrap().rule, KneeRule::Throughput);
    }
}
