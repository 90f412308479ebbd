//! The terminal step table, read like seed 002's per-step tables: step rate, sent/s, ok/s,
//! p50/p95/p99, max in-flight, pass/fail with reasons, knees and cliff marked; then one line
//! per knee, the cliff, and the warnings.
//!
//! Owns the layout only; every number and word comes from the [`Analysis`] and the summary.
//! The run's own table (all phases, lag, errors) stays in `report::text`.

use std::fmt::Write as _;

use super::Analysis;
use super::knee::Knee;
use super::little::LittleFinding;
use super::step::fmt_ms;
use crate::summary::{PhaseSummary, SecondSummary};

/// How much the terminal report says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detail {
    /// What to act on or to doubt, in one screen: what `loader run` prints.
    Glance,
    /// Every reason whole and every line (`loader verdict DIR --all`).
    All,
}

/// A reason's sentence at a glance: up to its first clause break at or past this many
/// characters (the figure and what it is; the why and the remedy stay in the full text) …
const SHORT_FROM: usize = 30;
/// … and at most this many characters.
pub(crate) const SHORT_MAX: usize = 150;
/// A reason's opening `…: ` this short names where it was found (steps, a phase), not what.
const STEPS_PREFIX_MAX: usize = 60;

/// A sentence at a glance: whole when it fits [`SHORT_MAX`], else [`short`].
pub fn glance(sentence: &str) -> String {
    if sentence.chars().count() <= SHORT_MAX { sentence.to_string() } else { short(sentence) }
}

/// A reason's sentence up to its first clause break ([`SHORT_FROM`], [`SHORT_MAX`]), past the
/// steps it names (`in step 1, step 2 (noted in step 6): …`, `main: …`).
pub fn short(detail: &str) -> String {
    let from = detail.find(": ").filter(|&i| i <= STEPS_PREFIX_MAX).map_or(0, |i| i + 2);
    let cut = [": ", "; ", " — ", " ("]
        .iter()
        .filter_map(|sep| detail.match_indices(sep).map(|(i, _)| i).find(|&i| i >= SHORT_FROM.max(from + 10)))
        .min()
        .map(|i| before_open_parenthesis(detail, i));
    let head = cut.map_or(detail, |i| &detail[..i]);
    if head.chars().count() > SHORT_MAX {
        format!("{}…", head.chars().take(SHORT_MAX - 1).collect::<String>())
    } else {
        head.to_string()
    }
}

/// `i`, or — when `i` falls inside parentheses — where the outermost open one began: a break
/// inside them is not a clause's end ("answers sat 15.48 ms (p99; max …)" cut at its "; "
/// left "(p99" open).
fn before_open_parenthesis(detail: &str, i: usize) -> usize {
    let mut open: Vec<usize> = Vec::new();
    for (at, c) in detail[..i].char_indices() {
        match c {
            '(' => open.push(at),
            ')' => {
                open.pop();
            }
            _ => {}
        }
    }
    open.first().map_or(i, |&at| detail[..at].trim_end().len())
}

/// Phase names as a reader takes them in: consecutive `step N` as `steps 1–4`, the rest by
/// name (`main`, `step 5`).
pub fn phase_list(names: &[&str]) -> String {
    let number = |n: &str| n.strip_prefix("step ").and_then(|k| k.parse::<u64>().ok());
    let mut parts: Vec<String> = Vec::new();
    let mut run: Option<(u64, u64)> = None;
    let flush = |run: &mut Option<(u64, u64)>, parts: &mut Vec<String>| {
        if let Some((a, b)) = run.take() {
            parts.push(if a == b { format!("step {a}") } else { format!("steps {a}–{b}") });
        }
    };
    for name in names {
        match (number(name), run) {
            (Some(k), Some((a, b))) if k == b + 1 => run = Some((a, k)),
            (Some(k), _) => {
                flush(&mut run, &mut parts);
                run = Some((k, k));
            }
            (None, _) => {
                flush(&mut run, &mut parts);
                parts.push(name.to_string());
            }
        }
    }
    flush(&mut run, &mut parts);
    parts.join(", ")
}

fn knee_line(out: &mut String, label: &str, knee: &Option<Knee>, none: &str, detail: Detail) {
    let _ = match knee {
        Some(k) => writeln!(out, "{label:<19}{:.0} req/s at {} — {}", k.rps, k.step, at(&k.detail, detail)),
        None => writeln!(out, "{label:<19}none — {none}"),
    };
}

/// A sentence at a glance: whole when short, else up to its first clause (the step table
/// beside it says the rest).
fn at(sentence: &str, detail: Detail) -> String {
    match detail {
        Detail::Glance => glance(sentence),
        Detail::All => sentence.to_string(),
    }
}

/// A failed step's result at a glance: its first reason and the codes of the others.
fn fail_glance(reasons: &[&super::step::FailReason]) -> String {
    let Some((first, rest)) = reasons.split_first() else { return "pass".into() };
    let others: Vec<&str> = rest.iter().map(|r| r.code.as_str()).collect();
    if others.is_empty() {
        format!("FAIL {}", first.detail)
    } else {
        format!("FAIL {} (+ {})", first.detail, others.join(", "))
    }
}

/// Render the step table of a run's `phases` (with its per-second `series`, for the
/// in-flight column of unjudged phases) as judged in `analysis`, everything said.
pub fn render_steps(phases: &[PhaseSummary], series: &[SecondSummary], analysis: &Analysis) -> String {
    render_steps_at(phases, series, analysis, Detail::All)
}

/// [`render_steps`] at a depth: at a glance the knees, the cliff and what was set aside or
/// unstable, and of Little's law only what says the numbers or the loader are off — a step
/// whose requests waited in the loader, an accounting that disagrees, a pile-up in a step
/// that failed. A pile-up of a few requests in a passing step (a stall of a few ms that its
/// p99 does not show) and the steps with few tail samples are in `--all` and report.html.
pub fn render_steps_at(
    phases: &[PhaseSummary],
    series: &[SecondSummary],
    analysis: &Analysis,
    detail: Detail,
) -> String {
    // A closed run's load is its users (its offered rate is in summary.json and the notes).
    let closed = phases.iter().any(|p| p.closed.is_some());
    let load = if closed { "users" } else { "rate" };
    let header = ["step", load, "sent/s", "ok/s", "p50", "p95", "p99", "in-flight", "mark", "result"];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for (i, p) in phases.iter().enumerate() {
        let l = &p.latency_ms;
        let mut row = vec![
            p.name.clone(),
            p.closed.as_ref().map_or_else(|| format!("{:.0}", p.offered_rps), |c| c.users.to_string()),
            format!("{:.1}", p.sent_rps),
            format!("{:.1}", p.ok_rps),
            fmt_ms(l.p50),
            fmt_ms(l.p95),
            fmt_ms(l.p99),
        ];
        let Some(s) = analysis.steps.iter().find(|s| s.phase == i) else {
            if detail == Detail::Glance && p.kind == "warmup" {
                continue;
            }
            let flight = super::step::in_flight_max(p, series);
            row.push(flight.map_or("-".into(), |v| v.to_string()));
            row.push(String::new());
            row.push(format!("not judged ({})", p.kind));
            rows.push(row);
            continue;
        };
        row.push(s.numbers.in_flight_max.map_or("-".into(), |v| v.to_string()));
        let k = &analysis.knees;
        let marks: Vec<&str> = [
            (k.slo.as_ref().map(|k| k.phase), "knee"),
            (k.throughput.as_ref().map(|k| k.phase), "tput"),
            (k.adaptive.as_ref().map(|k| k.phase), "adapt"),
            (analysis.cliff.as_ref().map(|c| c.phase), "cliff"),
        ]
        .iter()
        .filter(|(at, _)| *at == Some(i))
        .map(|&(_, m)| m)
        .collect();
        row.push(marks.join(","));
        let failed = |all: Vec<&super::step::FailReason>| match detail {
            Detail::Glance => fail_glance(&all),
            Detail::All if all.is_empty() => "pass".to_string(),
            Detail::All => format!("FAIL {}", all.iter().map(|r| r.detail.as_str()).collect::<Vec<_>>().join("; ")),
        };
        let measured =
            || failed(s.fail_reasons.iter().filter(|r| r.code != super::step::FailCode::LoaderUntrusted).collect());
        row.push(match (s.passed, &s.set_aside) {
            (None, _) => "not run".into(),
            (Some(_), Some(codes)) if detail == Detail::Glance => {
                format!("SET ASIDE ({}): {}", codes.join(", "), measured())
            }
            (Some(_), Some(codes)) => {
                format!("SET ASIDE, loader untrusted here ({}); as measured: {}", codes.join(", "), measured())
            }
            (Some(true), None) => "pass".into(),
            (Some(false), None) => failed(s.fail_reasons.iter().collect()),
        });
        rows.push(row);
    }
    let last = header.len() - 1;
    let widths: Vec<usize> = (0..last).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for (n, row) in rows.iter().enumerate() {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let pad = widths.get(c).map_or(0, |w| w - cell.chars().count());
            match c {
                0 => line.push_str(&format!("{cell}{}", " ".repeat(pad))),
                8 => line.push_str(&format!("  {cell}{}", " ".repeat(pad))),
                c if c == last => line.push_str(&format!("  {cell}")),
                _ => line.push_str(&format!("  {}{cell}", " ".repeat(pad))),
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
        if n == 0 {
            out.push_str(&"-".repeat(line.chars().count()));
            out.push('\n');
        }
    }
    let from = if closed { "each send (closed model: a user has no intended time)" } else { "the intended send time" };
    let _ = writeln!(out, "latency ms from {from}; in-flight: highest per-second count (upper bound)");
    let k = &analysis.knees;
    knee_line(&mut out, "knee (SLO):", &k.slo, "the first step already failed", detail);
    knee_line(
        &mut out,
        "knee (throughput):",
        &k.throughput,
        "ok/s did not follow the offered rate from the first step",
        detail,
    );
    knee_line(&mut out, "knee (adaptive):", &k.adaptive, "ok/s never stalled while p99 jumped", detail);
    let _ = match &analysis.cliff {
        Some(c) => writeln!(out, "{:<19}{:.0} req/s at {} — {}", "cliff:", c.rps, c.step, c.detail),
        None => writeln!(out, "{:<19}none", "cliff:"),
    };
    if !k.set_aside.is_empty() {
        let _ = writeln!(
            out,
            "set aside: {} — the loader could not vouch for {} own numbers, so the knees and the cliff are found among the other steps{}",
            k.set_aside.join(", "),
            if k.set_aside.len() == 1 { "its" } else { "their" },
            match k.on_trusted_steps {
                Some(true) => "; the knee stands on trusted steps",
                _ => "; the knee may lie among them: run them again (--repeat)",
            }
        );
    }
    if !k.unstable.is_empty() {
        let _ = writeln!(
            out,
            "unstable: {} failed before a later step passed — stalls rather than a growing queue; repeat the run",
            k.unstable.join(", ")
        );
    }
    let tails: Vec<String> = analysis
        .steps
        .iter()
        .flat_map(|s| s.tail_warnings.iter().map(move |w| format!("{} {} on {}", s.name, w.percentile, w.tail)))
        .collect();
    if !tails.is_empty() && detail == Detail::All {
        let _ = writeln!(out, "few tail samples (< 100 requests beyond the percentile): {}", tails.join(", "));
    }
    // At a glance: an accounting that disagrees, always; requests held in the loader in a step
    // that passed (in a failed one the pool ran dry on the target's slowness, which the
    // verdict's pool notes say); never a pile-up, which the tail shows.
    let passed = |phase: usize| analysis.steps.iter().any(|s| s.phase == phase && s.passed == Some(true));
    let worth = |c: &&super::little::LittleCheck| match detail {
        Detail::All => !c.findings.is_empty(),
        Detail::Glance => c.findings.iter().any(|f| match f {
            LittleFinding::PeakBelowMean => true,
            LittleFinding::LoaderBacklog => passed(c.phase),
            LittleFinding::Bursty => false,
        }),
    };
    for c in analysis.little.iter().filter(worth) {
        let _ = writeln!(out, "Little's law, {}: {}", c.step, c.detail);
    }
    out
}

/// The notes on the whole run under the report: a warm-up that had not settled, the trends
/// of a constant or soak run, and the USL fit (at a glance only when fitted).
pub fn run_notes(s: &crate::summary::Summary, detail: Detail) -> String {
    let mut out = super::closed::notes(s, detail == Detail::All);
    if let Some(w) = s.analysis.warmup.as_ref().filter(|w| !w.settled) {
        let _ = writeln!(out, "{}", w.detail);
    }
    for note in s.analysis.trends.iter().flat_map(|t| &t.notes) {
        let _ = writeln!(out, "trend: {note}");
    }
    // At a glance only a fit one could plan with, in a few words; all of it with --all.
    match (s.analysis.usl.as_ref(), detail) {
        (Some(u), Detail::All) => {
            let _ = writeln!(out, "{}", u.detail);
        }
        (Some(u), Detail::Glance) if u.fitted && u.error_pct.is_some_and(|e| e <= super::usl::POOR_FIT * 100.0) => {
            let peak = match (u.peak_x, u.peak_n) {
                (Some(x), Some(n)) if s.run.closed.is_some() => format!("peak {x:.0} req/s at {n:.0} users"),
                (Some(x), Some(n)) => format!("peak {x:.0} req/s at {n:.0} in flight"),
                _ => "no peak within reach".to_string(),
            };
            let (sigma, kappa, error) = (u.sigma.unwrap_or(0.0), u.kappa.unwrap_or(0.0), u.error_pct.unwrap_or(0.0));
            let _ = writeln!(out, "USL: σ {sigma:.3}, κ {kappa:.5}, {peak} (fit error {error:.1} %)");
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{phase, php_r2, php_r2_series};
    use super::super::{Criteria, KneeRules, RunFacts, analyze_run};
    use super::*;

    fn phases() -> Vec<PhaseSummary> {
        let mut warm = phase("warmup", 60.0, 59.9, 5.0);
        warm.kind = "warmup".into();
        let mut phases = vec![warm];
        phases.extend(php_r2());
        phases
    }

    fn render(phases: &[PhaseSummary], c: &Criteria) -> String {
        let series = php_r2_series();
        let run = RunFacts::uniform(phases, &series, Some(true), 1);
        let a = analyze_run(&run, c, &KneeRules::default()).unwrap();
        render_steps(phases, &series, &a)
    }

    fn row<'a>(text: &'a str, step: &str) -> &'a str {
        text.lines().find(|l| l.split_whitespace().next() == Some(step)).unwrap()
    }

    #[test]
    fn the_seed_002_table_reads_like_the_article() {
        let text = render(&phases(), &Criteria { p95_ms: Some(200.0), ..Default::default() });
        let cells = |step| row(&text, step).split_whitespace().collect::<Vec<_>>();
        assert_eq!(cells("r0060"), ["r0060", "60", "60.0", "60.0", "9.70", "18.0", "27.9", "-", "knee", "pass"]);
        assert_eq!(
            cells("r0180"),
            [
                "r0180", "180", "179.9", "176.6", "37.4", "1113", "1260", "228", "tput", "FAIL", "p95", "1113", "ms",
                ">", "SLO", "200", "ms"
            ]
        );
        assert!(row(&text, "r0090").ends_with("FAIL p95 343 ms > SLO 200 ms"));
        assert!(
            row(&text, "r0210")
                .ends_with("FAIL p95 332 ms > SLO 200 ms; cut short: 3946 of 4200 planned requests never attempted")
        );
        assert!(row(&text, "warmup").ends_with("not judged (warmup)"));
        // The result column starts at the same offset on every row.
        let start = |step, word| row(&text, step).find(word).unwrap();
        assert_eq!(start("r0060", "pass"), start("warmup", "not judged"), "{text}");
        assert_eq!(start("r0060", "pass"), start("r0090", "FAIL"), "{text}");
        // Footer: the knees, the unstable steps, the tails and Little's law.
        assert!(
            text.contains(
                "knee (SLO):        60 req/s at r0060 — last step passing with every earlier step passing; \
                 r0090 failed: p95 343 ms > SLO 200 ms"
            ),
            "{text}"
        );
        assert!(text.contains("knee (throughput): 180 req/s at r0180 — ok/s followed the offered rate"));
        assert!(text.contains("knee (adaptive):   none — ok/s never stalled while p99 jumped"));
        assert!(text.contains("cliff:             none\n"));
        assert!(text.contains("unstable: r0090, r0120 failed before a later step passed"));
        assert!(
            text.contains("few tail samples (< 100 requests beyond the percentile): r0060 p95 on 59, r0060 p99 on 11,")
        );
        assert!(text.contains("Little's law, r0180: peak in flight 228 ≫ mean 39.8"));
        assert!(!text.contains("Little's law, r0150"));
    }

    #[test]
    fn a_cliff_is_marked_on_its_row() {
        let mut phases = phases();
        phases.truncate(3);
        phases[2].ok -= 100;
        *phases[2].errors.get_mut("http_5xx").unwrap() = 100;
        phases[2].ok_rps = 85.0;
        let text = render(&phases, &Criteria::default());
        let cells = |step| row(&text, step).split_whitespace().skip(8).take(4).collect::<Vec<_>>().join(" ");
        assert_eq!(cells("r0090"), "cliff FAIL errors 5.56", "{text}");
        assert_eq!(cells("r0060"), "knee,tput pass", "{text}");
        assert!(text.contains("cliff:             90 req/s at r0090 — error rate 5.56 % > budget 1.00 %"), "{text}");
    }
}
