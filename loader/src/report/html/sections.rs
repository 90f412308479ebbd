//! The report's judged sections as HTML: the verdict (trusted or not, reasons by side, the
//! noise floor) and the step table with the knee and the cliff marked. Every string from the
//! summary goes through [`esc`]; the charts are `charts.rs`, the loader's health and the run's
//! facts `facts.rs`.

use std::fmt::Write as _;

use super::escape::{esc, num, opt};
use crate::summary::{Reason, Summary};
use crate::verdict::{self, entries, floor::Floor};

/// The verdict box: the page's first thing, so it must stay short enough to be seen whole
/// without scrolling.
pub fn verdict(s: &Summary) -> String {
    let held: Vec<&str> = s.verdict.steps.iter().filter(|t| t.trusted).map(|t| t.phase.as_str()).collect();
    let spoiled: Vec<&str> = s.verdict.steps.iter().filter(|t| !t.trusted).map(|t| t.phase.as_str()).collect();
    let partly = format!(
        "TRUSTED for {}; NOT TRUSTED for {} — loader-side evidence invalidates {}",
        crate::report::text::phase_list(&held),
        crate::report::text::phase_list(&spoiled),
        if spoiled.len() == 1 { "its numbers" } else { "their numbers" }
    );
    let (class, headline) = match s.verdict.trusted {
        Some(true) => ("trusted", "TRUSTED — no loader-side evidence against these numbers"),
        Some(false) if !held.is_empty() => ("untrusted", partly.as_str()),
        Some(false) => ("untrusted", "NOT TRUSTED — loader-side evidence invalidates these numbers"),
        None => ("unjudged", "NOT JUDGED — no verdict was computed for this run"),
    };
    let mut out = format!(r#"<section id="verdict" class="verdict {class}"><h2>Verdict: {}</h2>"#, esc(headline));
    if let Some(failure) = &s.failure {
        let _ = write!(out, r#"<p class="alert">The run failed part-way: {}</p>"#, esc(failure));
    }
    if s.interrupted {
        let by = s.interrupted_by.as_deref().map_or(String::new(), |b| format!(" ({b})"));
        out.push_str(&format!(r#"<p class="alert">Interrupted{by}: the numbers cover only what ran.</p>"#));
    }
    let gates = match (s.phases.iter().any(|p| p.passed == Some(false)), s.phases.iter().any(|p| p.passed.is_some())) {
        (true, _) => "some steps failed their criteria",
        (false, true) => "every judged step passed its criteria",
        (false, false) => "steps not judged",
    };
    let knee = s.knee.as_ref().map_or("no knee".to_string(), |k| format!("knee {} req/s ({})", num(k.rps), k.step));
    let cliff = s.cliff.as_ref().map_or("no cliff".to_string(), |c| format!("cliff {} req/s ({})", num(c.rps), c.step));
    let _ = write!(out, r#"<p class="gist">{}; {}; {}.</p>"#, esc(gates), esc(&knee), esc(&cliff));
    out.push_str(r#"<div class="sides">"#);
    for side in [verdict::LOADER, verdict::NETWORK, verdict::TARGET] {
        let reasons: Vec<&Reason> = s.verdict.reasons.iter().filter(|r| r.side == side).collect();
        let _ = write!(out, r#"<div class="side" data-side="{side}"><h3>{side}</h3>"#);
        if reasons.is_empty() {
            out.push_str(r#"<p class="quiet">nothing found</p>"#);
        } else {
            out.push_str("<ul>");
            for r in reasons {
                out.push_str(&reason(r));
            }
            out.push_str("</ul>");
        }
        out.push_str("</div>");
    }
    // Reasons on a side the page does not know still show (a newer summary, a hand edit).
    let other: Vec<&Reason> = s
        .verdict
        .reasons
        .iter()
        .filter(|r| ![verdict::LOADER, verdict::NETWORK, verdict::TARGET].contains(&r.side.as_str()))
        .collect();
    if !other.is_empty() {
        out.push_str(r#"<div class="side" data-side="other"><h3>other</h3><ul>"#);
        for r in other {
            out.push_str(&reason(r));
        }
        out.push_str("</ul></div>");
    }
    out.push_str("</div>");
    let floor = Floor::of(s);
    let _ = write!(
        out,
        r#"<p class="floor">Noise floor: {} ms — send lag and latency below it are within this host's wake-up jitter ({}).</p></section>"#,
        num(floor.ms),
        esc(&floor.evidence())
    );
    out
}

fn reason(r: &Reason) -> String {
    let figures = match (r.value, r.limit) {
        (Some(v), Some(l)) => format!(" ({} against {})", num(v), num(l)),
        (Some(v), None) => format!(" ({})", num(v)),
        _ => String::new(),
    };
    let (class, tag) = if r.invalidates { ("invalidates", "invalidates") } else { ("annotates", "note") };
    // The reason's entry in docs/verdict.md, folded under it: when it invalidates, its
    // limit, its evidence, what to do.
    let entry = entries::entry(&r.code).map_or(String::new(), |e| {
        format!(
            r#"<details class="entry"><summary>what it means — {}</summary><dl><dt>invalidates</dt><dd>{}</dd><dt>default limit</dt><dd>{}</dd><dt>evidence</dt><dd>{}</dd><dt>what to do</dt><dd>{}</dd></dl></details>"#,
            esc(&e.link()),
            markdown(e.invalidates),
            markdown(e.limit),
            markdown(e.evidence),
            markdown(e.action)
        )
    });
    format!(
        r#"<li class="{class}"><span class="tag">{tag}</span> <code>{}</code>{} — {}{entry}</li>"#,
        esc(&r.code),
        esc(&figures),
        esc(&r.detail)
    )
}

/// A table cell's Markdown as HTML: `code` kept as code, bold marks and links' targets
/// dropped, the rest escaped.
fn markdown(cell: &str) -> String {
    entries::unlinked(cell)
        .replace("**", "")
        .split('`')
        .enumerate()
        .map(|(i, part)| if i % 2 == 1 { format!("<code>{}</code>", esc(part)) } else { esc(part) })
        .collect()
}

/// The step table: one row per phase; the knee's and the cliff's rows marked.
pub fn steps(s: &Summary) -> String {
    let mut out = String::from(
        r#"<table id="steps" class="steps"><thead><tr><th>phase</th><th>kind</th><th>offered/s</th><th>sent/s</th><th>ok/s</th><th>goodput</th><th>p50 ms</th><th>p95 ms</th><th>p99 ms</th><th>max ms</th><th>service p99 ms</th><th>send lag p99 ms</th><th>read lag p99 ms</th><th>errors</th><th>late</th><th>result</th></tr></thead><tbody>"#,
    );
    let is = |point: &Option<crate::summary::Point>, name: &str| point.as_ref().is_some_and(|p| p.step == name);
    for p in &s.phases {
        let mut marks = Vec::new();
        if is(&s.knee, &p.name) {
            marks.push(r#"<span class="badge knee">knee</span>"#);
        }
        if is(&s.cliff, &p.name) {
            marks.push(r#"<span class="badge cliff">cliff</span>"#);
        }
        if is(&s.analysis.throughput_knee, &p.name) {
            marks.push(r#"<span class="badge minor">throughput knee</span>"#);
        }
        if is(&s.analysis.adaptive_knee, &p.name) {
            marks.push(r#"<span class="badge minor">adaptive knee</span>"#);
        }
        let class = match (is(&s.knee, &p.name), is(&s.cliff, &p.name)) {
            (_, true) => r#" class="cliff-row""#,
            (true, false) => r#" class="knee-row""#,
            _ => "",
        };
        let goodput =
            if p.offered_rps > 0.0 { format!("{}%", num(100.0 * p.ok_rps / p.offered_rps)) } else { "-".into() };
        let errors: u64 = p.errors.iter().filter(|(class, _)| class.as_str() != "unsent").map(|(_, n)| n).sum();
        let result = match p.passed {
            Some(true) => r#"<span class="pass">pass</span>"#.to_string(),
            Some(false) => format!(r#"<span class="fail">fail</span> {}"#, esc(&p.fail_reasons.join("; "))),
            None => "not judged".to_string(),
        };
        let l = &p.latency_ms;
        let _ = write!(
            out,
            "<tr{class}><td>{} {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{goodput}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{errors}</td><td>{}</td><td>{result}</td></tr>",
            esc(&p.closed.as_ref().map_or_else(|| p.name.clone(), |c| format!("{} ({} users)", p.name, c.users))),
            marks.join(" "),
            esc(&p.kind),
            num(p.offered_rps),
            num(p.sent_rps),
            num(p.ok_rps),
            num(l.p50),
            num(l.p95),
            num(l.p99),
            num(l.max),
            num(p.service_ms.p99),
            num(p.send_lag_ms.p99),
            p.read_lag_ms.as_ref().map_or("-".to_string(), |r| num(r.p99)),
            p.late,
        );
    }
    out.push_str("</tbody></table>");
    out + &findings(s)
}

/// What the analysis says besides the table: how the knee and cliff were found, unstable
/// steps, thin tails, Little's law, the emergency stop, the capacity plan.
fn findings(s: &Summary) -> String {
    let a = &s.analysis;
    // A closed run: the target set the pace, and each step against N ÷ (R + Z).
    let mut items: Vec<String> = crate::analysis::closed::notes(s, true).lines().map(|l| esc(l.trim())).collect();
    if let Some(d) = &a.knee_detail {
        items.push(format!("Knee: {}", esc(d)));
    }
    if let Some(d) = &a.cliff_detail {
        items.push(format!("Cliff: {}", esc(d)));
    }
    if let Some(c) = &a.criteria {
        items.push(format!(
            "Criteria: p95 ≤ {}, p99 ≤ {}, errors ≤ {}%, goodput ≥ {}%, late ≤ {}%, dropped ≤ {}",
            c.p95_ms.map_or("not set".to_string(), |v| format!("{} ms", num(v))),
            c.p99_ms.map_or("not set".to_string(), |v| format!("{} ms", num(v))),
            num(c.error_budget * 100.0),
            num(c.goodput_min * 100.0),
            num(c.late_max * 100.0),
            c.dropped_max
        ));
    }
    if !a.set_aside_steps.is_empty() {
        let stands = match a.knee_on_trusted_steps {
            Some(true) => "the knee stands on trusted steps",
            _ => "the knee may lie among them: run them again (--repeat)",
        };
        items.push(format!(
            "Set aside (the loader could not vouch for them): {}; the knees and the cliff are found among the other steps, and {}",
            esc(&a.set_aside_steps.join(", ")),
            stands
        ));
    }
    if !a.unstable_steps.is_empty() {
        items.push(format!("Unstable steps (failed, then a later step passed): {}", esc(&a.unstable_steps.join(", "))));
    }
    for w in &a.tail_warnings {
        items.push(format!("Thin tail: {}", esc(w)));
    }
    for l in a.little.iter().filter(|l| !l.findings.is_empty()) {
        items.push(format!("Little's law, {}: {}", esc(&l.step), esc(&l.findings.join(", "))));
    }
    if let Some(e) = &a.emergency_stop {
        items.push(format!("Emergency stop at {} s ({}): {}", e.at_s, esc(&e.cause), esc(&e.detail)));
    }
    if let Some(c) = &s.capacity {
        let knees: Vec<String> = c.knees.iter().map(|k| k.map_or("none".into(), num)).collect();
        items.push(format!(
            "Repeats: knees {}; max sustainable {}; nodes for peak: {}",
            esc(&knees.join(", ")),
            opt(c.max_sustainable, " req/s"),
            c.nodes.map_or("-".to_string(), |n| n.to_string())
        ));
    }
    if items.is_empty() {
        return String::new();
    }
    format!("<ul class=\"findings\"><li>{}</li></ul>", items.join("</li><li>"))
}

/// The watched target resources (`--watch`): per step each source's means and maxima, CPU per
/// ok answer and the ceiling it implies, what reached its ceiling; the knee explained. Empty
/// when nothing was watched.
pub fn watch(s: &Summary) -> String {
    let Some(w) = &s.watch else { return String::new() };
    let mut out = String::from(r#"<table id="watch" class="steps"><thead><tr><th>step</th><th>ok/s</th>"#);
    for src in &w.sources {
        // An idle counter read as busy cores is a CPU source like the others.
        let _ = match src.kind.as_str() {
            "prometheus" if !src.idle => write!(out, "<th>{} mean/max</th>", esc(&src.name)),
            _ => write!(
                out,
                "<th>{0} cores mean/max</th><th>{0} PSI some</th><th>{0} ms CPU per ok</th><th>{0} ceiling req/s</th>",
                esc(&src.name)
            ),
        };
    }
    out.push_str("</tr></thead><tbody>");
    let pair = |mean: Option<f64>, max: Option<f64>| match (mean, max) {
        (Some(a), Some(b)) => format!("{}/{}", num(a), num(b)),
        _ => "-".into(),
    };
    for p in s.phases.iter().filter(|p| !p.watch.is_empty()) {
        let _ = write!(out, "<tr><td>{}</td><td>{}</td>", esc(&p.name), num(p.ok_rps));
        for src in &w.sources {
            let st = p.watch.get(&src.name);
            let hit = st.and_then(|st| st.saturated.as_ref());
            let class = if hit.is_some() { r#" class="fail""# } else { "" };
            let title = hit.map_or(String::new(), |h| format!(r#" title="{}""#, esc(h)));
            let mean = st.map(|st| st.mean).unwrap_or_default();
            let max = st.map(|st| st.max).unwrap_or_default();
            let _ = match src.kind.as_str() {
                "prometheus" if !src.idle => write!(out, "<td{class}{title}>{}</td>", pair(mean.value, max.value)),
                _ => write!(
                    out,
                    "<td{class}{title}>{}</td><td>{}</td><td>{}</td><td>{}</td>",
                    pair(mean.cpu_cores, max.cpu_cores),
                    opt(mean.cpu_some_pct, " %"),
                    opt(st.and_then(|st| st.cpu_ms_per_ok), ""),
                    opt(st.and_then(|st| st.ceiling_rps), "")
                ),
            };
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    if let Some(knee) = &w.knee {
        let _ = write!(out, r#"<p class="gist" id="watch-knee">{}</p>"#, esc(knee));
    }
    for src in w.sources.iter().filter(|src| src.missing_s > 0) {
        let _ = write!(
            out,
            r#"<p class="alert">{} could not be read for {} s: {}</p>"#,
            esc(&src.name),
            src.missing_s,
            esc(src.last_error.as_deref().unwrap_or("?"))
        );
    }
    out
}
