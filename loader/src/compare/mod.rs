//! `loader compare A B`: two saved runs side by side, step by step — release against
//! release, open against closed, Poisson against even arrivals — and whether each difference
//! stands out of the runs' own noise.
//!
//! What a difference is measured against: the spread of each run's repeats (`--repeat N`
//! keeps every run's summary; `capacity.runs` names them). A change is *beyond the noise*
//! when B's repeats all lie on one side of A's (their ranges do not overlap). With one run on
//! either side the run-to-run noise is unknown, and the comparison says so instead of
//! guessing: the latency inside one run says nothing of how the next run would differ.
//!
//! The gate (`--max-regression PCT`): B is worse than A by more than PCT on a step both runs
//! trust — ok/s lower, p95 or p99 higher by at least [`LATENCY_FLOOR_MS`] — or its knee is
//! lower; beyond the noise when both sides have repeats, on the bound alone when they do not
//! (and the output says which).
//!
//! Owns: matching the phases, the figures and their change, the judgement. Does not: read
//! files (`commands/compare.rs`) or print (`text.rs`).

pub mod text;

use serde::Serialize;

use crate::summary::{PhaseSummary, Summary};

/// A latency change smaller than this is never a regression, whatever its share: a p99 of
/// 0.10 ms becoming 0.13 ms is +30 % and no one's problem (the warm-up check's floor, the
/// host's wake-up jitter here).
pub const LATENCY_FLOOR_MS: f64 = 1.0;

/// Offered rates closer than this (relative) are the same step; further apart, the step's
/// figures are shown but neither compared nor gated.
const SAME_RATE: f64 = 0.01;

/// One side: the run as saved, and each of its repeats (the run alone without them).
pub struct Side {
    /// Where it was read from, as the user gave it.
    pub label: String,
    /// Its summary (with repeats, the combined one).
    pub top: Summary,
    /// The runs whose figures make each value: the repeats, or `top` alone.
    pub runs: Vec<Summary>,
}

/// The comparison, as `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Run A (the baseline).
    pub a: RunLine,
    /// Run B.
    pub b: RunLine,
    /// The knees (req/s): each run's SLO knee, over its repeats.
    pub knee: Option<Figure>,
    /// The phases both runs have, in A's order.
    pub steps: Vec<StepRow>,
    /// Measured phases only one run has.
    pub unmatched: Vec<String>,
    /// Both sides had repeats: "beyond the noise" can be told.
    pub noise_known: bool,
    /// `--max-regression`, percent.
    pub bound_pct: Option<f64>,
    /// What broke the bound, one sentence each (empty: the gate passed, or none was set).
    pub regressions: Vec<String>,
    /// One run is open and the other closed: how to read their differences (seed 002).
    pub models: Option<String>,
}

/// One run's identity and trust.
#[derive(Debug, Clone, Serialize)]
pub struct RunLine {
    /// As the user named it.
    pub dir: String,
    /// Its profile (`step`, `constant`, …).
    pub profile: String,
    /// Its load model: `uniform arrivals`, `poisson arrivals`, or a closed run's users and
    /// think time (`up to 60 users, think 190 ms (constant)`).
    pub arrival: String,
    /// Runs behind each figure (its repeats).
    pub runs: usize,
    /// Its verdict.
    pub trusted: Option<bool>,
    /// The measured phases its verdict set aside.
    pub untrusted_steps: Vec<String>,
}

/// One phase of both runs.
#[derive(Debug, Clone, Serialize)]
pub struct StepRow {
    /// Its name (`step 3`, `main`).
    pub phase: String,
    /// Offered rate in A, req/s.
    pub offered_a: f64,
    /// Offered rate in B, req/s.
    pub offered_b: f64,
    /// The same offered rate and both trusted: its changes mean something.
    pub comparable: bool,
    /// Why not, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_aside: Option<String>,
    /// ok/s, p50, p95, p99, p99.9 (ms) and errors (% of the sent).
    pub figures: Vec<Figure>,
}

/// One figure of both runs.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// `ok/s`, `p50`, `p95`, `p99`, `p99.9`, `errors %`, `knee`.
    pub name: &'static str,
    /// A's, over its runs.
    pub a: Spread,
    /// B's, over its runs.
    pub b: Spread,
    /// B's median against A's, percent (none when A's is 0).
    pub change_pct: Option<f64>,
    /// Higher is better (ok/s, the knee); else lower is.
    pub higher_is_better: bool,
    /// B's runs all on one side of A's: `Some(true)`; overlapping: `Some(false)`; one run on
    /// a side: `None` (cannot tell).
    pub beyond_noise: Option<bool>,
}

/// A figure over a side's runs.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Spread {
    /// The median of the runs' values.
    pub median: f64,
    /// The lowest.
    pub min: f64,
    /// The highest.
    pub max: f64,
    /// Runs it comes from.
    pub n: usize,
}

impl Spread {
    fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Some(Spread { median, min: v[0], max: v[n - 1], n })
    }
}

impl Figure {
    fn new(name: &'static str, higher_is_better: bool, a: &[f64], b: &[f64]) -> Option<Figure> {
        let (a, b) = (Spread::of(a)?, Spread::of(b)?);
        let change_pct = (a.median != 0.0).then(|| (b.median - a.median) / a.median.abs() * 100.0);
        let beyond_noise = (a.n >= 2 && b.n >= 2).then_some(b.min > a.max || b.max < a.min);
        Some(Figure { name, a, b, change_pct, higher_is_better, beyond_noise })
    }

    /// B is worse than A by more than `bound_pct` (and, for a latency, by the floor).
    fn worse_by_more_than(&self, bound_pct: f64) -> bool {
        let Some(change) = self.change_pct else { return false };
        let worse = if self.higher_is_better { -change } else { change };
        let latency = self.name.starts_with('p');
        worse > bound_pct && (!latency || (self.b.median - self.a.median).abs() >= LATENCY_FLOOR_MS)
    }
}

/// The measured phases of a summary: not the warm-up, and something was planned.
fn measured(s: &Summary) -> impl Iterator<Item = &PhaseSummary> {
    s.phases.iter().filter(|p| p.kind != "warmup" && p.requests > 0)
}

/// Whether `s`'s verdict does not set phase `name` aside.
fn trusts(s: &Summary, name: &str) -> bool {
    s.verdict.on_phase(name) != Some(false)
}

fn run_line(side: &Side) -> RunLine {
    let s = &side.top;
    let untrusted_steps = measured(s).filter(|p| !trusts(s, &p.name)).map(|p| p.name.clone()).collect();
    RunLine {
        dir: side.label.clone(),
        profile: s.run.profile.clone(),
        arrival: match &s.run.closed {
            Some(c) => format!("up to {} users, think {} ms ({})", c.users_max, c.think_ms, c.think),
            None => format!("{} arrivals", s.run.arrival),
        },
        runs: side.runs.len(),
        trusted: s.verdict.trusted,
        untrusted_steps,
    }
}

/// Compare `a` (the baseline) with `b`; `bound_pct` is `--max-regression`.
pub fn compare(a: &Side, b: &Side, bound_pct: Option<f64>) -> Comparison {
    let noise_known = a.runs.len() >= 2 && b.runs.len() >= 2;
    let mut steps = Vec::new();
    let mut unmatched = Vec::new();
    for pa in measured(&a.top) {
        let Some(pb) = measured(&b.top).find(|p| p.name == pa.name) else {
            unmatched.push(format!("{} (A only)", pa.name));
            continue;
        };
        steps.push(step_row(a, b, pa, pb));
    }
    unmatched.extend(
        measured(&b.top)
            .filter(|p| !measured(&a.top).any(|q| q.name == p.name))
            .map(|p| format!("{} (B only)", p.name)),
    );
    let knees = |side: &Side| -> Vec<f64> { side.runs.iter().filter_map(|s| s.knee.as_ref().map(|k| k.rps)).collect() };
    let knee = Figure::new("knee", true, &knees(a), &knees(b));
    let mut c = Comparison {
        a: run_line(a),
        b: run_line(b),
        knee,
        steps,
        unmatched,
        noise_known,
        bound_pct,
        regressions: Vec::new(),
        models: models(&a.top, &b.top),
    };
    if let Some(bound) = bound_pct {
        c.regressions = regressions(&c, bound);
    }
    c
}

/// When one run is open and the other closed, how their differences read.
fn models(a: &Summary, b: &Summary) -> Option<String> {
    let (open, closed) = match (a.run.closed.is_some(), b.run.closed.is_some()) {
        (false, true) => ("A", "B"),
        (true, false) => ("B", "A"),
        _ => return None,
    };
    Some(format!(
        "{open} is an open run, {closed} a closed one: where the target could not keep up, {open}'s requests queued \
         and timed out while {closed}'s users slowed down to its pace — {closed}'s lower latency and errors there are \
         the model's, not a faster target's (a closed model never says broken, only a little slower; seed 002)"
    ))
}

/// How a figure is read from a phase.
type Read = dyn Fn(&PhaseSummary) -> f64;

fn step_row(a: &Side, b: &Side, pa: &PhaseSummary, pb: &PhaseSummary) -> StepRow {
    let name = pa.name.as_str();
    let of = |side: &Side, f: &dyn Fn(&PhaseSummary) -> f64| -> Vec<f64> {
        side.runs.iter().filter_map(|s| s.phases.iter().find(|p| p.name == name)).map(f).collect()
    };
    let error_pct = |p: &PhaseSummary| p.errors.values().sum::<u64>() as f64 * 100.0 / p.sent.max(1) as f64;
    let pairs: [(&'static str, bool, &Read); 6] = [
        ("ok/s", true, &|p| p.ok_rps),
        ("p50", false, &|p| p.latency_ms.p50),
        ("p95", false, &|p| p.latency_ms.p95),
        ("p99", false, &|p| p.latency_ms.p99),
        ("p99.9", false, &|p| p.latency_ms.p999),
        ("errors %", false, &error_pct),
    ];
    let figures = pairs.iter().filter_map(|(n, up, f)| Figure::new(n, *up, &of(a, f), &of(b, f))).collect();
    let same_rate = (pa.offered_rps - pb.offered_rps).abs() <= SAME_RATE * pa.offered_rps.abs().max(1e-9);
    let set_aside = if !same_rate {
        Some(format!("offered {:.0} against {:.0} req/s: not the same step", pa.offered_rps, pb.offered_rps))
    } else {
        match (trusts(&a.top, name), trusts(&b.top, name)) {
            (true, true) => None,
            (false, true) => Some("A's verdict set it aside".into()),
            (true, false) => Some("B's verdict set it aside".into()),
            (false, false) => Some("both verdicts set it aside".into()),
        }
    };
    StepRow {
        phase: pa.name.clone(),
        offered_a: pa.offered_rps,
        offered_b: pb.offered_rps,
        comparable: set_aside.is_none(),
        set_aside,
        figures,
    }
}

/// What broke `bound` percent: ok/s, p95 and p99 on the comparable steps, and the knee.
fn regressions(c: &Comparison, bound: f64) -> Vec<String> {
    let mut out = Vec::new();
    let counts = |f: &Figure| f.beyond_noise.unwrap_or(true) && f.worse_by_more_than(bound);
    for row in c.steps.iter().filter(|r| r.comparable) {
        for f in row.figures.iter().filter(|f| matches!(f.name, "ok/s" | "p95" | "p99")) {
            if counts(f) {
                out.push(format!("{}: {}", row.phase, text::change_sentence(f, c.noise_known)));
            }
        }
    }
    if let Some(k) = c.knee.as_ref().filter(|k| counts(k)) {
        out.push(text::change_sentence(k, c.noise_known));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summary::StepTrust;

    fn phase(name: &str, rate: f64, p99: f64) -> PhaseSummary {
        let mut p = crate::analysis::fixtures::phase(name, rate, rate, 10.0);
        p.latency_ms.p50 = p99 / 4.0;
        p.latency_ms.p95 = p99 / 2.0;
        p.latency_ms.p99 = p99;
        p.latency_ms.p999 = p99 * 1.5;
        p
    }

    fn run(p99s: &[f64], knee: Option<f64>) -> Summary {
        let mut s = crate::verdict::tests::clean();
        s.phases = p99s
            .iter()
            .enumerate()
            .map(|(k, &p)| phase(&format!("step {}", k + 1), 100.0 * (k + 1) as f64, p))
            .collect();
        s.knee = knee.map(|rps| crate::summary::Point { rps, step: "step 1".into() });
        s.verdict.trusted = Some(true);
        s.verdict.steps.clear();
        s
    }

    fn side(runs: Vec<Summary>) -> Side {
        Side { label: "x".into(), top: runs.last().expect("a run").clone(), runs }
    }

    #[test]
    fn one_run_a_side_cannot_tell_the_noise_and_the_bound_alone_gates() {
        let a = side(vec![run(&[10.0, 20.0], Some(200.0))]);
        let b = side(vec![run(&[10.5, 30.0], Some(200.0))]);
        let c = compare(&a, &b, Some(10.0));
        assert!(!c.noise_known);
        let p99 = c.steps[1].figures.iter().find(|f| f.name == "p99").unwrap();
        assert_eq!((p99.change_pct.map(|x| x.round()), p99.beyond_noise), (Some(50.0), None));
        // step 1: +5 % is under the bound; step 2: p95 +50 % (10 → 15 ms) and p99 +50 %.
        assert_eq!(c.regressions.len(), 2, "{:?}", c.regressions);
        assert!(c.regressions[1].starts_with("step 2: p99 20.0 → 30.0 ms (+50 %"), "{:?}", c.regressions);
        assert!(compare(&a, &b, Some(60.0)).regressions.is_empty());
        assert!(compare(&a, &b, None).regressions.is_empty(), "no bound, no gate");
    }

    #[test]
    fn repeats_tell_a_change_beyond_the_noise_from_one_within_it() {
        let a = side(vec![run(&[10.0], Some(200.0)), run(&[14.0], Some(180.0)), run(&[12.0], Some(200.0))]);
        // Within A's spread (10–14): not beyond the noise, though +20 % at the median.
        let b = side(vec![run(&[13.0], Some(200.0)), run(&[15.0], Some(200.0)), run(&[14.4], Some(200.0))]);
        let c = compare(&a, &b, Some(10.0));
        let p99 = c.steps[0].figures.iter().find(|f| f.name == "p99").unwrap();
        assert_eq!(p99.beyond_noise, Some(false));
        assert!(c.regressions.is_empty(), "{:?}", c.regressions);
        // All of B's runs above A's: beyond the noise, and over the bound.
        let b = side(vec![run(&[16.0], Some(150.0)), run(&[17.0], Some(140.0)), run(&[18.0], Some(150.0))]);
        let c = compare(&a, &b, Some(10.0));
        assert!(c.noise_known);
        assert_eq!(c.steps[0].figures.iter().find(|f| f.name == "p99").unwrap().beyond_noise, Some(true));
        assert!(c.regressions.iter().any(|r| r.starts_with("step 1: p99")), "{:?}", c.regressions);
        assert!(c.regressions.iter().any(|r| r.starts_with("knee 200 → 150 req/s")), "{:?}", c.regressions);
    }

    #[test]
    fn a_step_set_aside_or_at_another_rate_is_shown_not_gated_and_tiny_latencies_never_gate() {
        let a = side(vec![run(&[0.10, 20.0, 30.0], None)]);
        let mut b = run(&[0.13, 40.0, 90.0], None);
        b.verdict.steps = vec![
            StepTrust { phase: "step 1".into(), trusted: true, reasons: vec![] },
            StepTrust { phase: "step 2".into(), trusted: false, reasons: vec!["late_sends".into()] },
            StepTrust { phase: "step 3".into(), trusted: true, reasons: vec![] },
        ];
        b.phases[2].offered_rps = 350.0;
        b.phases.push(phase("step 4", 400.0, 5.0));
        let c = compare(&a, &side(vec![b]), Some(10.0));
        assert!(c.regressions.is_empty(), "{:?}", c.regressions);
        assert_eq!(c.steps[1].set_aside.as_deref(), Some("B's verdict set it aside"));
        assert!(c.steps[2].set_aside.as_deref().unwrap().starts_with("offered 300 against 350"));
        assert_eq!(c.unmatched, ["step 4 (B only)"]);
        assert_eq!(c.b.untrusted_steps, ["step 2"]);
    }
}
