//! Analysis: step judgement, knee, cliff, the emergency-stop detector, repeats and the
//! capacity plan — pure functions over the `loader.summary/v1` types, so `loader verdict DIR`
//! can re-judge a saved `summary.json` with other limits.
//!
//! The flow: [`Criteria`] (written before the run) → [`step::judge_steps`] (each hold step on
//! its own requests) → [`knee::knees`] and [`knee::cliff`] → [`little::check_steps`]; all
//! bundled by [`analyze`] (or [`analyze_run`]) into an [`Analysis`], written back by [`annotate`], printed by
//! [`render::render_steps`]. During the run, [`live::CliffDetector`] decides the emergency
//! stop; after N runs, [`capacity`] turns knees into nodes.
//!
//! | file | owns |
//! |---|---|
//! | `step.rs` | per-step pass/fail with reasons; tail-sample warnings |
//! | `knee.rs` | SLO, throughput and adaptive knees; the cliff |
//! | `live.rs` | the per-second cliff detector behind the emergency stop |
//! | `capacity.rs` | repeats (min of knees, spread) and the capacity plan |
//! | `closed.rs` | a closed run's notes: the target set the pace; each step against `X = N ÷ (R + Z)` |
//! | `little.rs` | Little's law cross-check per step |
//! | `render.rs` | the terminal step table |
//! | `trends.rs` | constant and soak runs: the p99, errors and watched memory over the run |
//! | `usl.rs` | the Universal Scalability Law fitted to the trusted steps (σ, κ, the peak), or why not |
//! | `warmup.rs` | whether the warm-up had settled by its end, and how long would have been enough |
//!
//! Does not: measure anything (record), decide whether the loader is trusted (the verdict;
//! its answer comes in through `summary.verdict.trusted`), stop the engine (the run loop
//! raises the flag), or write files (report).

pub mod capacity;
pub mod closed;
pub mod knee;
pub mod little;
pub mod live;
pub mod profiles;
pub mod render;
pub mod step;
pub mod trends;
pub mod usl;
pub mod warmup;

#[cfg(test)]
pub(crate) mod fixtures;

pub use crate::summary::Criteria;
pub use knee::{Cliff, Knee, KneeRules, Knees};
pub use live::{CliffDetector, LiveSecond, StopRule};
pub use render::render_steps;
pub use step::{PhaseTrust, StepJudgement};

use crate::error::InputError;
use crate::summary::{AnalysisSummary, LittleSummary, PhaseSummary, Point, SecondSummary, Summary};

/// The parts of a run that analysis reads (a saved `summary.json` has all of them).
#[derive(Debug, Clone)]
pub struct RunFacts<'a> {
    /// Phases in order (warm-up, ramps and holds).
    pub phases: &'a [PhaseSummary],
    /// The per-second series of the whole run.
    pub series: &'a [SecondSummary],
    /// The verdict's answer for each phase, by index: a step it cannot vouch for is set aside.
    pub trust: Vec<PhaseTrust>,
    /// Shards whose in-flight peaks were summed per second.
    pub shards: usize,
    /// An emergency stop that was the target's (not the loader's): the phase (by index) where
    /// its streak of bad seconds began, and its sentence.
    pub stop: Option<(usize, String)>,
}

impl<'a> RunFacts<'a> {
    /// The facts of a summary: each phase's trust from `verdict.steps`, or the run's answer
    /// for every phase (a summary from before steps were judged apart).
    pub fn of(summary: &'a Summary) -> Self {
        let v = &summary.verdict;
        let trust = summary
            .phases
            .iter()
            .map(|p| match v.steps.iter().find(|t| t.phase == p.name) {
                Some(t) => PhaseTrust { trusted: Some(t.trusted), why: t.reasons.clone() },
                None if v.steps.is_empty() => PhaseTrust { trusted: v.trusted, why: Vec::new() },
                None => PhaseTrust::default(),
            })
            .collect();
        let stop = summary.analysis.emergency_stop.as_ref().filter(|e| !e.loader_behind).and_then(|e| {
            let second = e.since_s as f64 + 0.5;
            let phase = summary.phases.iter().position(|p| p.start_s <= second && second < p.start_s + p.duration_s)?;
            Some((phase, e.detail.clone()))
        });
        RunFacts { phases: &summary.phases, series: &summary.series, trust, shards: summary.run.threads, stop }
    }

    /// The facts of phases and series all judged `trusted` (`None`: no verdict).
    pub fn uniform(
        phases: &'a [PhaseSummary],
        series: &'a [SecondSummary],
        trusted: Option<bool>,
        shards: usize,
    ) -> Self {
        let trust = phases.iter().map(|_| PhaseTrust { trusted, why: Vec::new() }).collect();
        RunFacts { phases, series, trust, shards, stop: None }
    }
}

/// Everything analysis says about one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Analysis {
    /// One judgement per hold step, in order.
    pub steps: Vec<StepJudgement>,
    /// The knees.
    pub knees: Knees,
    /// The first collapsing step.
    pub cliff: Option<Cliff>,
    /// Little's law per step that ran to its end.
    pub little: Vec<little::LittleCheck>,
}

impl Analysis {
    /// `summary.knee`: the SLO knee as `{rps, step}`.
    pub fn knee_point(&self) -> Option<Point> {
        self.knees.slo.as_ref().map(|k| Point { rps: k.rps, step: k.step.clone() })
    }

    /// `summary.cliff` as `{rps, step}`.
    pub fn cliff_point(&self) -> Option<Point> {
        self.cliff.as_ref().map(|c| Point { rps: c.rps, step: c.step.clone() })
    }

    /// Write each hold phase's `passed` and `fail_reasons` (`code: sentence`) into `phases`;
    /// other phases are left untouched.
    pub fn annotate_phases(&self, phases: &mut [PhaseSummary]) {
        for s in &self.steps {
            if let Some(p) = phases.get_mut(s.phase) {
                p.passed = s.passed;
                p.fail_reasons = s.fail_reasons.iter().map(ToString::to_string).collect();
            }
        }
    }
}

/// Judge a saved or fresh summary (see [`analyze_run`]).
pub fn analyze(summary: &Summary, criteria: &Criteria, rules: &KneeRules) -> Result<Analysis, InputError> {
    analyze_run(&RunFacts::of(summary), criteria, rules)
}

/// Judge a run: `criteria` are validated first, then every hold step is judged, the knees,
/// cliff and Little's law checks follow from the judgements.
pub fn analyze_run(run: &RunFacts<'_>, criteria: &Criteria, rules: &KneeRules) -> Result<Analysis, InputError> {
    criteria.validate()?;
    let steps = step::judge_steps_trusting(run.phases, run.series, criteria, &run.trust);
    Ok(Analysis {
        knees: knee::knees(&steps, criteria, rules),
        cliff: knee::cliff(&steps, criteria.error_budget, rules)
            .or_else(|| run.stop.as_ref().and_then(|(phase, detail)| knee::stop_cliff(&steps, *phase, detail))),
        little: little::check_steps(&steps, run.shards),
        steps,
    })
}

/// Write the judgement into the summary: phases' `passed`/`fail_reasons`, `knee`, `cliff`.
pub fn annotate(summary: &mut Summary, analysis: &Analysis) {
    analysis.annotate_phases(&mut summary.phases);
    summary.knee = analysis.knee_point();
    summary.cliff = analysis.cliff_point();
    let stop = summary.analysis.emergency_stop.take();
    summary.analysis = analysis.summarize();
    summary.analysis.emergency_stop = stop;
    summary.analysis.warmup = warmup::check(summary);
    summary.analysis.trends = trends::trends(summary);
    summary.analysis.usl = usl::fit(summary);
}

impl Analysis {
    /// The `analysis` section of `summary.json` (criteria are added by the caller).
    pub fn summarize(&self) -> AnalysisSummary {
        let point = |k: &Option<Knee>| k.as_ref().map(|k| Point { rps: k.rps, step: k.step.clone() });
        AnalysisSummary {
            warmup: None,
            trends: None,
            usl: None,
            criteria: None,
            knee_detail: self.knees.slo.as_ref().map(|k| k.detail.clone()),
            throughput_knee: point(&self.knees.throughput),
            adaptive_knee: point(&self.knees.adaptive),
            unstable_steps: self.knees.unstable.clone(),
            set_aside_steps: self.knees.set_aside.clone(),
            knee_on_trusted_steps: self.knees.on_trusted_steps,
            cliff_detail: self.cliff.as_ref().map(|c| format!("{}: {}", c.rule.as_str(), c.detail)),
            tail_warnings: self
                .steps
                .iter()
                .flat_map(|s| s.tail_warnings.iter().map(move |w| format!("{}: {}", s.name, w.detail)))
                .collect(),
            little: self
                .little
                .iter()
                .map(|l| LittleSummary {
                    step: l.step.clone(),
                    on_wire: l.on_wire,
                    in_system: l.in_system,
                    observed_peak: l.observed_peak,
                    ratio: l.ratio,
                    findings: l.findings.iter().map(|f| f.as_str().to_string()).collect(),
                })
                .collect(),
            emergency_stop: None,
            spike: None,
            soak: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{node_2a, php_r2, php_r2_series};
    use super::*;

    fn facts<'a>(phases: &'a [PhaseSummary], series: &'a [SecondSummary], trusted: Option<bool>) -> RunFacts<'a> {
        RunFacts::uniform(phases, series, trusted, 1)
    }

    #[test]
    fn analyze_and_annotate_a_saved_run() {
        let (mut phases, series) = (php_r2(), php_r2_series());
        let c = Criteria { p95_ms: Some(200.0), ..Default::default() };
        let a = analyze_run(&facts(&phases, &series, Some(true)), &c, &KneeRules::default()).unwrap();
        let knee = a.knee_point().unwrap();
        assert_eq!((knee.rps, knee.step.as_str()), (60.0, "r0060"));
        assert!(a.cliff_point().is_none());
        a.annotate_phases(&mut phases);
        assert_eq!(phases[1].passed, Some(false));
        assert_eq!(phases[1].fail_reasons, ["p95_slo: p95 343 ms > SLO 200 ms"]);
        assert_eq!(phases[3].passed, Some(true));
        assert_eq!(a.little.len(), 5, "r0210 was cut short");
        // Re-judged with a looser SLO (what `loader verdict DIR` is for): 150 becomes the knee.
        let loose = Criteria { p95_ms: Some(400.0), ..Default::default() };
        let a = analyze_run(&facts(&phases, &series, Some(true)), &loose, &KneeRules::default()).unwrap();
        assert_eq!(a.knees.slo.unwrap().step, "r0150");
    }

    #[test]
    fn untrusted_loader_leaves_no_knee() {
        let phases = node_2a();
        let c = Criteria { p95_ms: Some(100.0), ..Default::default() };
        let a = analyze_run(&facts(&phases, &[], Some(false)), &c, &KneeRules::default()).unwrap();
        assert!(a.steps.iter().all(|j| j.passed == Some(false)));
        assert_eq!(a.knees.slo, None);
    }

    #[test]
    fn an_emergency_stop_of_the_targets_is_the_cliff_its_cut_step_cannot_call() {
        // Issue 46: with the stop on, the step it cut short had no goodput to judge and its
        // errors were mostly aborted requests, so no cliff was called although the stop said
        // "cliff held 3 consecutive seconds".
        use super::fixtures::phase;
        let mut phases: Vec<PhaseSummary> = [(100.0, 100.0), (200.0, 198.0), (400.0, 190.0)]
            .iter()
            .enumerate()
            .map(|(i, &(rate, ok))| {
                let mut p = phase(&format!("step {}", i + 1), rate, ok, 8.0);
                p.start_s = 8.0 * i as f64;
                p
            })
            .collect();
        // Step 3 cut at 3 s: its own requests mostly aborted, none failed.
        let p = &mut phases[2];
        *p.errors.get_mut("aborted").unwrap() = 1500;
        *p.errors.get_mut("unsent").unwrap() = 1700;
        p.ok = p.requests - 3200;
        p.measured_s = Some(3.0);
        let mut run = facts(&phases, &[], Some(true));
        let c = Criteria::default();
        assert_eq!(analyze_run(&run, &c, &KneeRules::default()).unwrap().cliff, None);
        run.stop = Some((2, "cliff held 3 consecutive seconds (since t=16 s)".into()));
        let cliff = analyze_run(&run, &c, &KneeRules::default()).unwrap().cliff.unwrap();
        assert_eq!((cliff.step.as_str(), cliff.rule), ("step 3", knee::CliffRule::EmergencyStop));
        assert!(cliff.detail.contains("since t=16 s"), "{}", cliff.detail);
        // Step 3 sent none of its own requests (the pool held by step 2's backlog): the stop's
        // streak began in it all the same (the real-stack database endpoint with the stop on).
        let p = &mut phases[2];
        (p.sent, p.ok) = (0, 0);
        *p.errors.get_mut("aborted").unwrap() = 1500;
        let mut run = facts(&phases, &[], Some(true));
        run.stop = Some((2, "cliff held 3 consecutive seconds (since t=16 s)".into()));
        let a = analyze_run(&run, &c, &KneeRules::default()).unwrap();
        assert_eq!(a.steps[2].passed, None, "no request of its own finished: not judged");
        assert_eq!(a.cliff.map(|c| c.step), Some("step 3".to_string()));
    }

    #[test]
    fn bad_criteria_are_refused() {
        let phases = node_2a();
        let bad = Criteria { error_budget: 2.0, ..Default::default() };
        assert_eq!(
            analyze_run(&facts(&phases, &[], None), &bad, &KneeRules::default()).unwrap_err().key,
            "--error-budget"
        );
    }
}
