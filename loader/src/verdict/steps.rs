//! The run's verdict gathered from its steps' own ([`super::scope`]): which steps hold, and
//! every reason once.
//!
//! A reason about one phase already names it (`step 6: send lag …`) and is kept as it is. A
//! reason about the load machine (its CPU, TIME_WAIT, steal …) found in several steps is
//! given once — the worst instance, an invalidating one first — with the steps it held in
//! (`in step 5, step 6: …`). Reasons judged on the whole run only ([`super::scope::RUN_WIDE`])
//! come from the whole run's judgement; one of them that invalidates spoils every step.
//!
//! Owns: the gathering. Does not: judge (the rules), or decide what an untrusted step means
//! for the knee (analysis).

use super::scope::RUN_WIDE;
use crate::summary::{Reason, StepTrust, Verdict};

/// The trust of the phase named `phase` whose evidence gave `reasons`.
pub fn trust_of(phase: &str, reasons: &[Reason]) -> StepTrust {
    let invalidating: Vec<String> = reasons.iter().filter(|r| r.invalidates).map(|r| r.code.clone()).collect();
    StepTrust { phase: phase.to_string(), trusted: invalidating.is_empty(), reasons: dedup(invalidating) }
}

fn dedup(mut codes: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    codes.retain(|c| seen.insert(c.clone()));
    codes
}

/// One entry of the gathered list: a reason as it is, or the instances of a machine reason.
enum Entry {
    Named(Reason),
    Machine { code: String, found: Vec<(String, Reason)> },
}

/// The run's verdict from the whole run's judgement (`whole`, for [`RUN_WIDE`] reasons) and
/// each step's (`each`: its name and verdict, in order).
pub fn gather(whole: &Verdict, each: &[(String, Verdict)]) -> Verdict {
    let names: Vec<&str> = each.iter().map(|(n, _)| n.as_str()).collect();
    let names_a_phase = |r: &Reason| names.iter().chain(&["warmup"]).any(|n| r.detail.starts_with(&format!("{n}: ")));
    let mut entries: Vec<Entry> = Vec::new();
    for (step, v) in each {
        for r in v.reasons.iter().filter(|r| !RUN_WIDE.contains(&r.code.as_str())) {
            if names_a_phase(r) {
                let seen =
                    entries.iter().any(|e| matches!(e, Entry::Named(x) if x.code == r.code && x.detail == r.detail));
                if !seen {
                    entries.push(Entry::Named(r.clone()));
                }
                continue;
            }
            match entries.iter_mut().find_map(|e| match e {
                Entry::Machine { code, found } if *code == r.code => Some(found),
                _ => None,
            }) {
                Some(found) => found.push((step.clone(), r.clone())),
                None => entries.push(Entry::Machine { code: r.code.clone(), found: vec![(step.clone(), r.clone())] }),
            }
        }
    }
    let run_wide: Vec<Reason> = whole.reasons.iter().filter(|r| RUN_WIDE.contains(&r.code.as_str())).cloned().collect();
    let spoiled_by_run: Vec<String> = run_wide.iter().filter(|r| r.invalidates).map(|r| r.code.clone()).collect();
    let mut reasons: Vec<Reason> = entries.into_iter().map(finish).collect();
    reasons.extend(run_wide);
    let steps: Vec<StepTrust> = each
        .iter()
        .map(|(name, v)| {
            let mut t = trust_of(name, &v.reasons);
            if !spoiled_by_run.is_empty() {
                t.trusted = false;
                t.reasons = dedup([t.reasons, spoiled_by_run.clone()].concat());
            }
            t
        })
        .collect();
    let trusted = steps.iter().all(|t| t.trusted);
    Verdict { trusted: Some(trusted), reasons, steps }
}

/// A machine reason's instances as one: the worst (an invalidating one first, then the
/// largest value), saying which steps it held in — invalidating there, or noted.
fn finish(entry: Entry) -> Reason {
    let (code, found) = match entry {
        Entry::Named(r) => return r,
        Entry::Machine { code, found } => (code, found),
    };
    let worst = found
        .iter()
        .max_by(|a, b| {
            (a.1.invalidates, a.1.value.unwrap_or(0.0))
                .partial_cmp(&(b.1.invalidates, b.1.value.unwrap_or(0.0)))
                .unwrap_or(std::cmp::Ordering::Equal)
        })
        .map(|(_, r)| r.clone())
        .unwrap_or_else(|| Reason {
            code,
            side: super::LOADER.into(),
            invalidates: false,
            value: None,
            limit: None,
            detail: String::new(),
        });
    let list = |invalidating: bool| -> Vec<&str> {
        found.iter().filter(|(_, r)| r.invalidates == invalidating).map(|(s, _)| s.as_str()).collect()
    };
    let (spoiled, noted) = (list(true), list(false));
    let place = match (spoiled.is_empty(), noted.is_empty()) {
        (false, false) => format!("in {} (noted in {})", spoiled.join(", "), noted.join(", ")),
        (false, true) => format!("in {}", spoiled.join(", ")),
        _ => format!("in {}", noted.join(", ")),
    };
    Reason { detail: format!("{place}: {}", worst.detail), ..worst }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(code: &str, invalidates: bool, value: f64, detail: &str) -> Reason {
        Reason {
            code: code.into(),
            side: "loader".into(),
            invalidates,
            value: Some(value),
            limit: None,
            detail: detail.into(),
        }
    }

    fn v(reasons: Vec<Reason>) -> Verdict {
        let trusted = !reasons.iter().any(|r| r.invalidates);
        Verdict { trusted: Some(trusted), reasons, steps: Vec::new() }
    }

    #[test]
    fn a_fault_of_step_3_spoils_step_3_alone() {
        let each = vec![
            ("step 1".to_string(), v(vec![])),
            ("step 2".to_string(), v(vec![r("host_steal", false, 12.0, "steal 12")])),
            (
                "step 3".to_string(),
                v(vec![r("host_steal", true, 80.0, "steal 80"), r("send_lag", true, 9.0, "step 3: lag")]),
            ),
        ];
        let g = gather(&v(vec![r("connection_churn", false, 3.0, "churn")]), &each);
        assert_eq!(g.trusted, Some(false));
        let trusted: Vec<bool> = g.steps.iter().map(|t| t.trusted).collect();
        assert_eq!(trusted, [true, true, false]);
        assert_eq!(g.steps[2].reasons, ["host_steal", "send_lag"]);
        let codes: Vec<&str> = g.reasons.iter().map(|r| r.code.as_str()).collect();
        assert_eq!(codes, ["host_steal", "send_lag", "connection_churn"]);
        let steal = &g.reasons[0];
        assert!(steal.invalidates && steal.value == Some(80.0));
        assert_eq!(steal.detail, "in step 3 (noted in step 2): steal 80");
        assert_eq!(g.reasons[1].detail, "step 3: lag", "a reason naming its phase is kept as it is");
    }

    #[test]
    fn a_run_wide_reason_that_invalidates_spoils_every_step() {
        let each = vec![("step 1".to_string(), v(vec![])), ("step 2".to_string(), v(vec![]))];
        let whole = v(vec![r("nic_saturated", true, 120.0, "nic"), r("host_steal", true, 90.0, "ignored: per step")]);
        let g = gather(&whole, &each);
        assert_eq!(g.trusted, Some(false));
        assert!(g.steps.iter().all(|t| !t.trusted && t.reasons == ["nic_saturated"]));
        let codes: Vec<&str> = g.reasons.iter().map(|r| r.code.as_str()).collect();
        assert_eq!(codes, ["nic_saturated"], "the whole run's per-step rules are the steps' to say");
    }
}
