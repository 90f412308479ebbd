//! The comparison as text: who A and B are, their knees, a row per phase with each figure's
//! change, what the noise lets one say, and the gate.

use std::fmt::Write as _;

use super::{Comparison, Figure, LATENCY_FLOOR_MS, RunLine};

/// The gate's rule, said under its result.
fn gate_rule(bound: f64) -> String {
    format!(
        "B fails when, on a step both runs trust at the same offered rate, its ok/s falls or its p95 or p99 rises by \
         more than {bound} % (a latency also by ≥ {LATENCY_FLOOR_MS} ms), or its knee falls by more"
    )
}

/// `loader compare`'s text.
pub fn render(c: &Comparison) -> String {
    let mut out = String::from("loader compare: B against A\n");
    for (tag, r) in [("A", &c.a), ("B", &c.b)] {
        let _ = writeln!(out, "  {tag}  {}", run_line(r));
    }
    if let Some(k) = &c.knee {
        let _ = writeln!(out, "  {}", change_sentence(k, c.noise_known));
    }
    if let Some(m) = &c.models {
        let _ = writeln!(out, "  {m}");
    }
    out.push('\n');
    out.push_str(&table(c));
    if !c.unmatched.is_empty() {
        let _ = writeln!(out, "not compared (in one run only): {}", c.unmatched.join(", "));
    }
    let _ = writeln!(
        out,
        "each cell: A → B and B's change, medians over each side's runs; * beyond the noise (B's runs all on one side of A's)"
    );
    let _ = writeln!(out, "{}", noise_line(c));
    if let Some(bound) = c.bound_pct {
        match c.regressions.is_empty() {
            true => {
                let _ = writeln!(out, "gate --max-regression {bound} %: passed ({})", gate_rule(bound));
            }
            false => {
                let _ = writeln!(out, "gate --max-regression {bound} %: FAILED ({})", gate_rule(bound));
                for r in &c.regressions {
                    let _ = writeln!(out, "  {r}");
                }
            }
        }
    }
    out
}

fn run_line(r: &RunLine) -> String {
    let runs = if r.runs == 1 { "1 run".to_string() } else { format!("{} runs", r.runs) };
    let trust = match (r.trusted, r.untrusted_steps.is_empty()) {
        (Some(false), false) => format!("UNTRUSTED steps: {}", r.untrusted_steps.join(", ")),
        (Some(false), true) => "UNTRUSTED".into(),
        (None, _) => "not judged".into(),
        (Some(true), _) => "TRUSTED".into(),
    };
    format!("{}: {} profile, {}, {runs}, {trust}", r.dir, r.profile, r.arrival)
}

/// What the noise lets one say.
fn noise_line(c: &Comparison) -> String {
    if c.noise_known {
        return format!(
            "noise: from the repeats ({} runs of A, {} of B); a change without * lies within it",
            c.a.runs, c.b.runs
        );
    }
    "noise: unknown — one run on a side, and one run's own spread says nothing of the next run's; \
     run both with --repeat 3 to tell a change from the noise"
        .into()
}

fn number(name: &str, v: f64) -> String {
    match name {
        "ok/s" => format!("{v:.1}"),
        "knee" => format!("{v:.0}"),
        "errors %" => format!("{v:.2}"),
        _ if v < 10.0 => format!("{v:.2}"),
        _ => format!("{v:.1}"),
    }
}

/// B's change as a signed share: `+15 %`, `−0.5 %`, `±0 %`; `new` for a figure that was 0
/// in A and is not in B.
fn pct(f: &Figure) -> String {
    match f.change_pct {
        Some(c) if c.abs() < 0.05 => "±0 %".into(),
        Some(c) if c.abs() < 1.0 => format!("{c:+.1} %").replace('-', "−"),
        Some(c) => format!("{c:+.0} %").replace('-', "−"),
        None if f.b.median == 0.0 => "±0 %".into(),
        None => "new".into(),
    }
}

/// One figure's cell: `10.4→12.0 +15 %*`.
fn cell(f: &Figure) -> String {
    let mark = if f.beyond_noise == Some(true) { "*" } else { "" };
    format!("{}→{} {}{mark}", number(f.name, f.a.median), number(f.name, f.b.median), pct(f))
}

/// `p99 20.0 → 30.0 ms (+50 %, noise unknown: …)`: one figure's change in words.
pub fn change_sentence(f: &Figure, noise_known: bool) -> String {
    let unit = match f.name {
        "ok/s" => " ok/s".to_string(),
        "knee" => " req/s".to_string(),
        "errors %" => " % errors".to_string(),
        _ => " ms".to_string(),
    };
    let name = if f.name == "ok/s" || f.name == "errors %" { "" } else { f.name };
    let noise = match f.beyond_noise {
        Some(true) => format!("beyond the noise of {} and {} runs", f.a.n, f.b.n),
        Some(false) => "within the noise".to_string(),
        None if noise_known => "one side without this figure's repeats".to_string(),
        None => "noise unknown: judged on the bound alone".to_string(),
    };
    format!(
        "{name}{}{} → {}{unit} ({}, {noise})",
        if name.is_empty() { "" } else { " " },
        number(f.name, f.a.median),
        number(f.name, f.b.median),
        pct(f)
    )
    .trim_start()
    .to_string()
}

fn table(c: &Comparison) -> String {
    let names = ["ok/s", "p50", "p95", "p99", "p99.9", "errors %"];
    let mut rows: Vec<Vec<String>> = vec![
        ["phase", "offered/s"]
            .into_iter()
            .map(String::from)
            .chain(names.iter().map(|n| if n.starts_with('p') { format!("{n} ms") } else { n.to_string() }))
            .collect(),
    ];
    let mut notes = Vec::new();
    for r in &c.steps {
        let offered = if r.offered_a == r.offered_b {
            format!("{:.0}", r.offered_a)
        } else {
            format!("{:.0}/{:.0}", r.offered_a, r.offered_b)
        };
        let mut row = vec![r.phase.clone(), offered];
        for n in names {
            row.push(r.figures.iter().find(|f| f.name == n).map(cell).unwrap_or_else(|| "-".into()));
        }
        if let Some(why) = &r.set_aside {
            notes.push(format!("{}: not compared — {why}", r.phase));
        }
        rows.push(row);
    }
    let widths: Vec<usize> =
        (0..rows[0].len()).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for (n, row) in rows.iter().enumerate() {
        for (i, cell) in row.iter().enumerate() {
            let pad = widths[i] - cell.chars().count();
            match i {
                0 => {
                    let _ = write!(out, "{cell}{}", " ".repeat(pad));
                }
                _ => {
                    let _ = write!(out, "  {}{cell}", " ".repeat(pad));
                }
            }
        }
        out.push('\n');
        if n == 0 {
            out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * (widths.len() - 1)));
            out.push('\n');
        }
    }
    for n in notes {
        let _ = writeln!(out, "{n}");
    }
    out
}
