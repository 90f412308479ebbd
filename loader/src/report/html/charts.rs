//! The report's charts, each a function from the summary (or the spectra) to one inline
//! `<svg>` with its legend: rates per second with the phases shaded, latency over time, the
//! percentile spectrum, and the loader's CPU and run-queue delay per second. Long series are
//! downsampled here ([`MAX_POINTS`]); the drawing itself is `svg.rs`.

use std::fmt::Write as _;

use super::escape::{esc, num};
use super::spectrum::PhaseSpectrum;
use super::svg::{Chart, Keep, Scale, downsample, linear_ticks};
use crate::summary::{SecondLatencyMs, SecondSummary, Summary};

/// Points per line at most: a one-hour run's 3,600 seconds become 600 six-second buckets
/// (the mean for rates, the largest for latency and delay, so a tail spike survives).
pub const MAX_POINTS: usize = 600;
/// Lines of the spectrum chart beyond which phases are thinned (knee and cliff always kept).
const MAX_SPECTRA: usize = 8;
/// Colour classes of the per-phase lines (`c0`…), reused in turn.
const PALETTE: usize = 8;

/// A legend under a chart: (CSS class, label) pairs, and an optional note.
fn legend(keys: &[(&str, String)], note: &str) -> String {
    let mut out = String::from(r#"<p class="legend">"#);
    for (class, label) in keys {
        let _ = write!(out, r#"<span class="key {class}">&#9473;&#9473;</span> {} &nbsp; "#, esc(label));
    }
    if !note.is_empty() {
        let _ = write!(out, r#"<span class="note">{}</span>"#, esc(note));
    }
    out.push_str("</p>");
    out
}

/// Where the run's time axis ends, seconds: the last phase, the series, or the elapsed time.
fn run_end(s: &Summary) -> f64 {
    let phases = s.phases.iter().map(|p| p.start_s + p.duration_s).fold(0.0, f64::max);
    phases.max(s.series.len() as f64).max(s.run.elapsed_s).max(1.0)
}

/// A line's points, (x, y) in data units.
type Line = Vec<(f64, f64)>;
/// One figure of a second's latency.
type Pick = fn(&SecondLatencyMs) -> f64;

/// Where second `t` of a per-second series is drawn: the middle of the second it counts.
fn mid(t: u64) -> f64 {
    t as f64 + 0.5
}

fn time_ticks(end: f64) -> Vec<(f64, String)> {
    linear_ticks(0.0, end, 10).into_iter().map(|t| (t, format!("{}s", num(t)))).collect()
}

fn value_ticks(lo: f64, hi: f64, unit: &str) -> Vec<(f64, String)> {
    linear_ticks(lo, hi, 5).into_iter().map(|v| (v, format!("{}{unit}", num(v)))).collect()
}

/// Each phase as a shaded band of the time axis.
fn shade_phases(c: &mut Chart, s: &Summary) {
    for p in &s.phases {
        let class = match p.kind.as_str() {
            "hold" => "band-hold",
            "ramp" => "band-ramp",
            _ => "band-warmup",
        };
        c.band(p.start_s, p.start_s + p.duration_s, class, &p.name);
    }
}

/// The knee's and the cliff's phases marked on a time axis, at the end of their phase.
fn mark_knee_and_cliff(c: &mut Chart, s: &Summary) {
    for (point, class, word) in [(&s.knee, "mark-knee", "knee"), (&s.cliff, "mark-cliff", "cliff")] {
        if let Some(p) = point
            && let Some(phase) = s.phases.iter().find(|ph| ph.name == p.step)
        {
            c.vline(phase.start_s + phase.duration_s, class, &format!("{word}: {} ({} req/s)", p.step, num(p.rps)));
        }
    }
}

/// Offered, sent and ok per second over the run, the phases shaded.
pub fn rates(s: &Summary) -> String {
    let end = run_end(s);
    let series = |f: fn(&SecondSummary) -> u64| {
        let points: Vec<(f64, f64)> = s.series.iter().map(|x| (mid(x.t), f(x) as f64)).collect();
        downsample(&points, MAX_POINTS, Keep::Mean)
    };
    let (offered, sent, ok) = (series(|x| x.offered), series(|x| x.sent), series(|x| x.ok));
    let top = offered.iter().chain(&sent).chain(&ok).map(|p| p.1).filter(|v| v.is_finite()).fold(1.0, f64::max);
    let mut c = Chart::new(240.0, (0.0, end, Scale::Linear), (0.0, top * 1.08, Scale::Linear));
    shade_phases(&mut c, s);
    c.line(&offered, "s-offered", "offered req/s");
    c.line(&sent, "s-sent", "sent req/s");
    c.line(&ok, "s-ok", "ok req/s");
    mark_knee_and_cliff(&mut c, s);
    let note = if s.series.is_empty() { "no per-second series in summary.json" } else { "" };
    c.finish(
        "offered, sent and ok requests per second",
        &time_ticks(end),
        &value_ticks(0.0, top * 1.08, ""),
        ("seconds since start", "req/s"),
    ) + &legend(&[("s-offered", "offered/s".into()), ("s-sent", "sent/s".into()), ("s-ok", "ok/s".into())], note)
}

/// p50, p99 and max latency per second on a log axis (the largest of a bucket when the
/// series is downsampled); for a summary without per-second latency, each phase's figures
/// over its window.
pub fn latency_over_time(s: &Summary) -> String {
    let end = run_end(s);
    let mut lines: [Vec<(f64, f64)>; 3] = Default::default();
    let per_second = s.series.iter().any(|x| x.latency_ms.is_some());
    if per_second {
        // A bucket of seconds keeps its mean median but its largest p99 and max.
        let picks: [(Pick, Keep); 3] = [(|l| l.p50, Keep::Mean), (|l| l.p99, Keep::Max), (|l| l.max, Keep::Max)];
        for (line, (pick, keep)) in lines.iter_mut().zip(picks) {
            let points: Vec<(f64, f64)> =
                s.series.iter().map(|x| (mid(x.t), x.latency_ms.as_ref().map_or(f64::NAN, pick))).collect();
            *line = downsample(&points, MAX_POINTS, keep);
        }
    } else {
        for p in s.phases.iter().filter(|p| p.latency_ms.count > 0) {
            let l = &p.latency_ms;
            for (line, v) in lines.iter_mut().zip([l.p50, l.p99, l.max]) {
                line.extend([(p.start_s, v), (p.start_s + p.duration_s, v), (p.start_s + p.duration_s, f64::NAN)]);
            }
        }
    }
    let values = || lines.iter().flatten().map(|p| p.1).filter(|v| v.is_finite() && *v > 0.0);
    let lo = values().fold(f64::INFINITY, f64::min);
    let hi = values().fold(0.0, f64::max);
    let (lo, hi) = if lo.is_finite() { (lo / 2.0, hi * 2.0) } else { (0.1, 10.0) };
    let mut c = Chart::new(240.0, (0.0, end, Scale::Linear), (lo, hi, Scale::Log10));
    shade_phases(&mut c, s);
    for (line, (class, name)) in lines.iter().zip([("s-p50", "p50"), ("s-p99", "p99"), ("s-max", "max")]) {
        c.line(line, class, &format!("{name} latency, ms"));
    }
    mark_knee_and_cliff(&mut c, s);
    let y_ticks: Vec<(f64, String)> = c.y.ticks(6).into_iter().map(|v| (v, format!("{} ms", num(v)))).collect();
    let note = if per_second {
        "corrected latency (from the intended send time) of the requests that completed each second"
    } else {
        "corrected latency per phase: this summary has no per-second latency"
    };
    c.finish("latency over time", &time_ticks(end), &y_ticks, ("seconds since start", "latency (log)"))
        + &legend(&[("s-p50", "p50".into()), ("s-p99", "p99".into()), ("s-max", "max".into())], note)
}

/// The spectra to draw: all when few, else evenly thinned with the knee's and cliff's kept.
fn chosen<'a>(spectra: &'a [PhaseSpectrum], s: &Summary) -> Vec<&'a PhaseSpectrum> {
    if spectra.len() <= MAX_SPECTRA {
        return spectra.iter().collect();
    }
    let marked = |p: &PhaseSpectrum| [&s.knee, &s.cliff].iter().any(|m| m.as_ref().is_some_and(|m| m.step == p.phase));
    let stride = spectra.len().div_ceil(MAX_SPECTRA - 2);
    spectra
        .iter()
        .enumerate()
        .filter(|&(i, p)| i % stride == 0 || i + 1 == spectra.len() || marked(p))
        .map(|(_, p)| p)
        .collect()
}

/// The percentile spectrum as HdrHistogram's plotter draws it: x = 1/(1−percentile) on a
/// log axis, y = value; corrected latency solid, service time dashed, one colour per phase.
pub fn spectrum(spectra: &[PhaseSpectrum], s: &Summary) -> String {
    if spectra.is_empty() {
        return r#"<p class="missing">No percentile spectrum: the run's hgrm/ files are not next to summary.json (not measured).</p>"#.to_string();
    }
    let shown = chosen(spectra, s);
    let to_x = |pts: &[(f64, f64)]| -> Vec<(f64, f64)> {
        let xy: Vec<(f64, f64)> = pts.iter().map(|&(q, v)| (1.0 / (1.0 - q), v)).collect();
        downsample(&xy, MAX_POINTS / 2, Keep::Max)
    };
    let lines: Vec<(Line, Line)> = shown.iter().map(|p| (to_x(&p.latency), to_x(&p.service))).collect();
    let all = || lines.iter().flat_map(|(a, b)| a.iter().chain(b));
    let x_hi = all().map(|p| p.0).fold(100.0, f64::max);
    let x_hi = 10f64.powf(x_hi.log10().ceil()).min(1e9);
    let y_hi = all().map(|p| p.1).filter(|v| v.is_finite()).fold(0.001, f64::max) * 1.05;
    let mut c = Chart::new(300.0, (1.0, x_hi, Scale::Log10), (0.0, y_hi, Scale::Linear));
    let mut keys = Vec::new();
    for (k, (p, (latency, service))) in shown.iter().zip(&lines).enumerate() {
        let colour = format!("c{}", k % PALETTE);
        c.line(latency, &format!("{colour} spec"), &format!("{}: latency (corrected)", p.phase));
        c.line(service, &format!("{colour} spec dash"), &format!("{}: service time", p.phase));
        keys.push((colour, p.phase.clone()));
    }
    let x_ticks: Vec<(f64, String)> = c.x.ticks(10).into_iter().map(|x| (x, percentile_label(x))).collect();
    let keys: Vec<(&str, String)> = keys.iter().map(|(c, l)| (c.as_str(), l.clone())).collect();
    let note = if shown.len() < spectra.len() {
        "solid: corrected latency; dashed: service time; some steps left out"
    } else {
        "solid: corrected latency; dashed: service time"
    };
    c.finish(
        "latency percentile spectrum",
        &x_ticks,
        &value_ticks(0.0, y_hi, " ms"),
        ("percentile (log of 1/(1−p))", "latency"),
    ) + &legend(&keys, note)
}

/// Two runs' latency spectra of one step, over each other (`loader compare --html`): A solid
/// in the first colour, B in the second, on the same axes.
pub fn spectra_against(step: &str, a: &[(f64, f64)], b: &[(f64, f64)]) -> String {
    let to_x = |pts: &[(f64, f64)]| -> Vec<(f64, f64)> {
        let xy: Vec<(f64, f64)> = pts.iter().map(|&(q, v)| (1.0 / (1.0 - q), v)).collect();
        downsample(&xy, MAX_POINTS / 2, Keep::Max)
    };
    let (a, b) = (to_x(a), to_x(b));
    let x_hi = a.iter().chain(&b).map(|p| p.0).fold(100.0, f64::max);
    let x_hi = 10f64.powf(x_hi.log10().ceil()).min(1e9);
    let y_hi = a.iter().chain(&b).map(|p| p.1).filter(|v| v.is_finite()).fold(0.001, f64::max) * 1.05;
    let mut c = Chart::new(220.0, (1.0, x_hi, Scale::Log10), (0.0, y_hi, Scale::Linear));
    c.line(&a, "c0 spec", &format!("A {step}: latency (corrected)"));
    c.line(&b, "c1 spec", &format!("B {step}: latency (corrected)"));
    let x_ticks: Vec<(f64, String)> = c.x.ticks(10).into_iter().map(|x| (x, percentile_label(x))).collect();
    let keys = [("c0", format!("A {step}")), ("c1", format!("B {step}"))];
    c.finish(
        &format!("{step}: latency percentile spectrum, A and B"),
        &x_ticks,
        &value_ticks(0.0, y_hi, " ms"),
        ("percentile (log of 1/(1−p))", "latency"),
    ) + &legend(&keys, "corrected latency, from each request's intended send time")
}

/// The percentile whose 1/(1−p) is `x`: 1 → 0%, 10 → 90%, 1000 → 99.9%.
pub fn percentile_label(x: f64) -> String {
    let p = 100.0 * (1.0 - 1.0 / x.max(1.0));
    let digits = (x.log10().round() as usize).saturating_sub(2).min(9);
    format!("{p:.digits$}%")
}

/// The busiest shard's CPU per second (against the verdict's 70 % limit) and, with the
/// probes, the shards' run-queue delay p99 per second.
pub fn health(s: &Summary, cpu_limit: f64) -> String {
    let end = run_end(s);
    let mut out = String::new();
    let cpu: Vec<(f64, f64)> = s.series.iter().map(|x| (mid(x.t), x.cpu.unwrap_or(f64::NAN))).collect();
    if cpu.iter().any(|p| p.1.is_finite()) {
        let cpu = downsample(&cpu, MAX_POINTS, Keep::Max);
        let top = cpu.iter().map(|p| p.1).filter(|v| v.is_finite()).fold(100.0, f64::max);
        let mut c = Chart::new(180.0, (0.0, end, Scale::Linear), (0.0, top, Scale::Linear));
        shade_phases(&mut c, s);
        c.hline(cpu_limit, "mark-limit", &format!("limit {}%", num(cpu_limit)));
        c.line(&cpu, "s-cpu", "busiest shard CPU, % of a core");
        out += &c.finish(
            "loader CPU per second",
            &time_ticks(end),
            &value_ticks(0.0, top, "%"),
            ("seconds since start", "CPU"),
        );
        out += &legend(&[("s-cpu", "busiest shard's CPU, % of one core".into())], "");
    } else {
        out += r#"<p class="missing">Loader CPU per second: not measured.</p>"#;
    }
    let rq: Vec<(f64, f64)> =
        s.probes.series.iter().map(|x| (x.elapsed_s, x.runqueue_p99_us.unwrap_or(f64::NAN))).collect();
    if rq.iter().any(|p| p.1.is_finite()) {
        let rq = downsample(&rq, MAX_POINTS, Keep::Max);
        let top = rq.iter().map(|p| p.1).filter(|v| v.is_finite()).fold(1.0, f64::max) * 1.1;
        let mut c = Chart::new(180.0, (0.0, end, Scale::Linear), (0.0, top, Scale::Linear));
        shade_phases(&mut c, s);
        c.line(&rq, "s-rq", "run-queue delay p99, µs");
        out += &c.finish(
            "shard run-queue delay per second",
            &time_ticks(end),
            &value_ticks(0.0, top, " µs"),
            ("seconds since start", "p99 delay"),
        );
        out += &legend(&[("s-rq", "shards' run-queue delay p99 (eBPF)".into())], "");
    } else {
        out += r#"<p class="missing">Run-queue delay per second: not measured (probes did not run).</p>"#;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_labels_follow_the_plotters_axis() {
        assert_eq!(percentile_label(1.0), "0%");
        assert_eq!(percentile_label(10.0), "90%");
        assert_eq!(percentile_label(100.0), "99%");
        assert_eq!(percentile_label(1000.0), "99.9%");
        assert_eq!(percentile_label(100_000.0), "99.999%");
    }

    #[test]
    fn many_spectra_are_thinned_but_keep_the_knee() {
        let spectra: Vec<PhaseSpectrum> =
            (0..30).map(|k| PhaseSpectrum { phase: format!("step {k}"), ..Default::default() }).collect();
        let mut s = crate::report::html::tests::summary();
        s.knee = Some(crate::summary::Point { rps: 1.0, step: "step 13".into() });
        let shown = chosen(&spectra, &s);
        assert!(shown.len() <= MAX_SPECTRA + 2, "{}", shown.len());
        assert!(shown.iter().any(|p| p.phase == "step 13"));
        assert!(shown.iter().any(|p| p.phase == "step 29"), "the last step is kept");
        assert_eq!(chosen(&spectra[..5], &s).len(), 5);
    }
}
