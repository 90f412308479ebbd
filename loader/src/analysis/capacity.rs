//! Repeats and the capacity plan: from the knees of N runs of the same plan to a number of
//! nodes.
//!
//! Seed 002 §0.9 (the formula this module implements, the article's own synthesis):
//!
//! ```text
//! max_sustainable = min over runs (last step passing every criterion, all earlier passing)
//! usable per node = max_sustainable × margin          (margin 0.6–0.8)
//! nodes           = ceil(peak / usable) + 1           (N+1: losing a node pushes no one past the knee)
//! ```
//!
//! Owns the arithmetic and its validation. Does not run the repeats (the run loop) or find
//! each run's knee ([`super::knee`]).

use super::knee::Knee;
use crate::error::InputError;

/// What N runs of the same plan say together.
#[derive(Debug, Clone, PartialEq)]
pub struct Repeats {
    /// The knee of each run, in run order (`None`: even the first step failed).
    pub knees: Vec<Option<f64>>,
    /// The minimum of the knees (seed 002 §0.9: the minimum over runs, never the best run);
    /// `None` when any run has no knee — nothing was shown sustainable in that run.
    pub max_sustainable: Option<f64>,
    /// Lowest and highest knee among the runs that have one.
    pub range: Option<(f64, f64)>,
    /// `(max − min) / max` of the knees.
    pub relative_spread: Option<f64>,
    /// How many steps apart the lowest and highest knees are (same ladder in every run).
    pub steps_apart: Option<usize>,
    /// Runs without a knee.
    pub runs_without_knee: usize,
    /// At least 3 runs whose knees are at most one step apart (seed 002 §0, step 9 of the flow: "repeat
    /// 3 times, knees differ by at most one step", else go back and isolate the host).
    pub settled: bool,
}

/// Combine the knees of the runs of one plan. Errors when there are no runs.
pub fn repeats(knees: &[Option<Knee>]) -> Result<Repeats, InputError> {
    repeats_of_vouched(knees, &vec![true; knees.len()])
}

/// Combine the knees of the runs of one plan, only those of the runs whose knee stands on
/// steps the verdict vouched for (`vouched`, in run order): a run whose knee may lie among
/// its set-aside steps is left out, as a spoiled run is repeated rather than believed (seed
/// 002 repeats its runs; a step the loader could not vouch for is run again in the next).
/// `knees` of the runs left out read `null`. Errors when there are no runs.
pub fn repeats_of_vouched(knees: &[Option<Knee>], vouched: &[bool]) -> Result<Repeats, InputError> {
    if knees.is_empty() {
        return Err(InputError::new("--repeat", "no runs to combine"));
    }
    let kept: Vec<Option<Knee>> = knees
        .iter()
        .zip(vouched.iter().chain(std::iter::repeat(&true)))
        .filter(|(_, v)| **v)
        .map(|(k, _)| k.clone())
        .collect();
    if kept.is_empty() {
        return Ok(Repeats {
            knees: knees.iter().map(|_| None).collect(),
            max_sustainable: None,
            range: None,
            relative_spread: None,
            steps_apart: None,
            runs_without_knee: knees.len(),
            settled: false,
        });
    }
    let mut r = repeats_of(&kept);
    let mut it = r.knees.clone().into_iter();
    r.knees = knees
        .iter()
        .zip(vouched.iter().chain(std::iter::repeat(&true)))
        .map(|(_, v)| if *v { it.next().flatten() } else { None })
        .collect();
    Ok(r)
}

fn repeats_of(knees: &[Option<Knee>]) -> Repeats {
    let found: Vec<&Knee> = knees.iter().flatten().collect();
    let runs_without_knee = knees.len() - found.len();
    let min = found.iter().map(|k| k.rps).fold(f64::INFINITY, f64::min);
    let max = found.iter().map(|k| k.rps).fold(f64::NEG_INFINITY, f64::max);
    let range = (!found.is_empty()).then_some((min, max));
    let steps_apart = (!found.is_empty()).then(|| {
        let lo = found.iter().map(|k| k.position).min().unwrap_or(0);
        let hi = found.iter().map(|k| k.position).max().unwrap_or(0);
        hi - lo
    });
    Repeats {
        knees: knees.iter().map(|k| k.as_ref().map(|k| k.rps)).collect(),
        max_sustainable: (runs_without_knee == 0).then_some(min),
        range,
        relative_spread: range.filter(|&(_, hi)| hi > 0.0).map(|(lo, hi)| (hi - lo) / hi),
        steps_apart,
        runs_without_knee,
        settled: knees.len() >= 3 && runs_without_knee == 0 && steps_apart.is_some_and(|d| d <= 1),
    }
}

/// The capacity plan for a peak load.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityPlan {
    /// Max sustainable rate of one node, req/s.
    pub max_sustainable: f64,
    /// Safety margin applied.
    pub margin: f64,
    /// `max_sustainable × margin`, req/s per node.
    pub usable_per_node: f64,
    /// Expected peak, req/s.
    pub peak_rps: f64,
    /// `ceil(peak / usable) + 1`.
    pub nodes: u64,
}

/// Lowest and highest margin accepted (seed 002 §0.9: "margin commonly 0.6–0.8", for
/// latency's non-linear growth near saturation, knees moving ±1 step between runs,
/// production traffic differing from the lab, and N+1 headroom).
pub const MARGIN_RANGE: (f64, f64) = (0.6, 0.8);

/// Plan nodes for `peak_rps` from `max_sustainable` per node with `margin`.
pub fn capacity_plan(max_sustainable: f64, margin: f64, peak_rps: f64) -> Result<CapacityPlan, InputError> {
    let (lo, hi) = MARGIN_RANGE;
    if !(lo..=hi).contains(&margin) {
        return Err(InputError::new(
            "--margin",
            format!("{margin} is outside {lo}–{hi} (the share of the knee a node is planned to carry)"),
        ));
    }
    if !(peak_rps.is_finite() && peak_rps > 0.0) {
        return Err(InputError::new("--peak", format!("{peak_rps} is not a positive rate in req/s")));
    }
    if !(max_sustainable.is_finite() && max_sustainable > 0.0) {
        return Err(InputError::new("--repeat", "no sustainable rate was found: no step passed in some run"));
    }
    let usable = max_sustainable * margin;
    // 0.7 × 100 is 70.00000000000001 in binary; don't let that add a node.
    let nodes = (peak_rps / usable - 1e-9).ceil().max(0.0) as u64 + 1;
    Ok(CapacityPlan { max_sustainable, margin, usable_per_node: usable, peak_rps, nodes })
}

#[cfg(test)]
mod tests {
    use super::super::knee::KneeRule;
    use super::*;

    fn k(rps: f64, position: usize) -> Option<Knee> {
        Some(Knee {
            rps,
            step: format!("step {}", position + 1),
            phase: position + 1,
            position,
            rule: KneeRule::Slo,
            next: None,
            detail: String::new(),
        })
    }

    #[test]
    fn seed_002_worked_example_min_of_knees_and_nine_processes() {
        // §0.9: Node /cpu knees 150 (run 2a) and 100 (run 3b); margin 0.7; peak 500 →
        // ceil(500 / 70) + 1 = 9. The best run alone would have said 6.
        let r = repeats(&[k(150.0, 3), k(100.0, 1)]).unwrap();
        assert_eq!(r.max_sustainable, Some(100.0));
        assert_eq!(r.range, Some((100.0, 150.0)));
        assert!((r.relative_spread.unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!((r.steps_apart, r.settled), (Some(2), false));
        let plan = capacity_plan(r.max_sustainable.unwrap(), 0.7, 500.0).unwrap();
        assert_eq!(plan.nodes, 9);
        assert!((plan.usable_per_node - 70.0).abs() < 1e-9);
        assert_eq!(capacity_plan(150.0, 0.7, 500.0).unwrap().nodes, 6);
    }

    #[test]
    fn exact_multiples_do_not_gain_a_node() {
        // 700 / (100 × 0.7) is exactly 10 nodes of work: 10 + 1.
        assert_eq!(capacity_plan(100.0, 0.7, 700.0).unwrap().nodes, 11);
        assert_eq!(capacity_plan(100.0, 0.7, 700.1).unwrap().nodes, 12);
        // A peak below one node's share still plans N+1 = 2.
        assert_eq!(capacity_plan(1000.0, 0.8, 1.0).unwrap().nodes, 2);
    }

    #[test]
    fn three_runs_within_one_step_are_settled() {
        let r = repeats(&[k(180.0, 4), k(150.0, 3), k(180.0, 4)]).unwrap();
        assert_eq!((r.max_sustainable, r.steps_apart, r.settled), (Some(150.0), Some(1), true));
        // Two runs are not enough, however close.
        assert!(!repeats(&[k(180.0, 4), k(180.0, 4)]).unwrap().settled);
    }

    #[test]
    fn a_run_without_knee_leaves_nothing_sustainable() {
        let r = repeats(&[k(150.0, 3), None, k(180.0, 4)]).unwrap();
        assert_eq!((r.max_sustainable, r.runs_without_knee, r.settled), (None, 1, false));
        assert_eq!(r.knees, vec![Some(150.0), None, Some(180.0)]);
        assert_eq!(repeats(&[None]).unwrap().range, None);
        assert_eq!(repeats(&[]).unwrap_err().key, "--repeat");
    }

    #[test]
    fn a_run_whose_knee_may_lie_among_set_aside_steps_is_left_out() {
        let r = repeats_of_vouched(&[k(200.0, 3), k(150.0, 2), k(200.0, 3)], &[true, false, true]).unwrap();
        assert_eq!(r.knees, [Some(200.0), None, Some(200.0)]);
        assert_eq!((r.max_sustainable, r.runs_without_knee), (Some(200.0), 0));
        let none = repeats_of_vouched(&[k(200.0, 3)], &[false]).unwrap();
        assert_eq!((none.max_sustainable, none.knees), (None, vec![None]));
    }

    #[test]
    fn margin_and_peak_are_validated() {
        for m in [0.59, 0.81, 1.0, 0.0, f64::NAN] {
            assert_eq!(capacity_plan(100.0, m, 500.0).unwrap_err().key, "--margin", "{m}");
        }
        assert!(capacity_plan(100.0, 0.6, 500.0).is_ok() && capacity_plan(100.0, 0.8, 500.0).is_ok());
        assert_eq!(capacity_plan(100.0, 0.7, 0.0).unwrap_err().key, "--peak");
        assert_eq!(capacity_plan(0.0, 0.7, 10.0).unwrap_err().key, "--repeat");
    }
}
