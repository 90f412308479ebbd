//! Whether each phase met its criteria, in one line a reader of k6's `THRESHOLDS` block
//! expects under the phase table: `gates ✗ main: p99 1000 ms > SLO 100 ms (+ 3 more)` or
//! `gates ✓ main`. A stepped run says it per step in its table; this is for the others.
//!
//! Owns: that line. Does not: judge the phases (`analysis`).

use crate::analysis::render::Detail;
use crate::summary::Summary;

/// The line, `None` when no phase was judged.
pub fn line(s: &Summary, detail: Detail) -> Option<String> {
    let judged: Vec<_> = s.phases.iter().filter(|p| p.passed.is_some()).collect();
    if judged.is_empty() {
        return None;
    }
    let failed: Vec<_> = judged.iter().filter(|p| p.passed == Some(false)).collect();
    if failed.is_empty() {
        let names: Vec<&str> = judged.iter().map(|p| p.name.as_str()).collect();
        return Some(format!("gates ✓ {}", names.join(", ")));
    }
    let each: Vec<String> = failed
        .iter()
        .map(|p| {
            // "p99_slo: p99 1000 ms > SLO 100 ms": the criterion's code is the JUnit's; the
            // sentence says it.
            let said: Vec<&str> =
                p.fail_reasons.iter().map(|r| r.split_once(": ").map_or(r.as_str(), |(_, why)| why)).collect();
            match (detail, said.split_first()) {
                (_, None) => p.name.clone(),
                (Detail::Glance, Some((first, rest))) if !rest.is_empty() => {
                    format!("{}: {first} (+ {} more)", p.name, rest.len())
                }
                (_, Some(_)) => format!("{}: {}", p.name, said.join("; ")),
            }
        })
        .collect();
    Some(format!("gates ✗ {}", each.join(" | ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_phase_says_its_first_criterion_at_a_glance_and_all_of_them_whole() {
        let mut s = crate::verdict::tests::clean();
        s.phases.truncate(1);
        s.phases[0].name = "main".into();
        s.phases[0].passed = Some(false);
        s.phases[0].fail_reasons =
            vec!["p99_slo: p99 1000 ms > SLO 100 ms".into(), "error_budget: errors 55.3 % > budget 1.00 %".into()];
        assert_eq!(line(&s, Detail::Glance).unwrap(), "gates ✗ main: p99 1000 ms > SLO 100 ms (+ 1 more)");
        assert_eq!(
            line(&s, Detail::All).unwrap(),
            "gates ✗ main: p99 1000 ms > SLO 100 ms; errors 55.3 % > budget 1.00 %"
        );
        s.phases[0].passed = Some(true);
        s.phases[0].fail_reasons.clear();
        assert_eq!(line(&s, Detail::Glance).unwrap(), "gates ✓ main");
        s.phases[0].passed = None;
        assert_eq!(line(&s, Detail::Glance), None);
    }
}
