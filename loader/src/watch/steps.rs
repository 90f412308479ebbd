//! Each step's view of the watched sources (`phases[].watch`): means and maxima over its
//! settled seconds, CPU per ok answer and the ceiling it implies, what reached its ceiling —
//! and the knee explained by the resource that reached its ceiling at or before it (the
//! breakpoint seed's fourth reading of a step, "which server resource hit its ceiling").
//!
//! Owns: the arithmetic over `summary.watch.seconds` and the sentences. Does not: sample
//! (`mod.rs`), find the knee (`analysis`), or judge the loader (`verdict`).

use crate::summary::{PhaseSummary, Summary, WatchSource, WatchStep, WatchSummary, WatchValues};

/// CPU within this share of its ceiling (a cgroup's quota, or the cores) is saturated.
pub const CPU_SATURATED: f64 = 0.9;
/// Pressure (PSI some) above this, %, is saturation: tasks waited that share of the time.
pub const PSI_SATURATED_PCT: f64 = 25.0;
/// A cgroup throttled this many ms a second by its quota reached it (the verdict's limit
/// for the loader's own cgroup, `Limits::throttled_ms_per_s`).
pub const THROTTLED_MS_PER_S: f64 = 10.0;
/// A gauge whose mean is within this share of its limit (and whose max reached it) is at it.
pub const GAUGE_AT_LIMIT: f64 = 0.9;
/// A gauge's max within this share of its limit reached it: an exporter that reports a mean
/// over its own window (the last 200 ms of busy workers) peaks at 3.98 of 4, not 4.
pub const GAUGE_MAX_AT_LIMIT: f64 = 0.98;

/// Fill `phases[].watch` and `watch.knee` from the seconds the sampler kept.
pub fn annotate(s: &mut Summary) {
    let Some(watch) = s.watch.take() else { return };
    for p in &mut s.phases {
        p.watch =
            watch.sources.iter().filter_map(|src| step_of(&watch, src, p).map(|st| (src.name.clone(), st))).collect();
    }
    let (knee, resource) = explain_knee(s, &watch);
    s.watch = Some(WatchSummary { knee, knee_resource: resource, ..watch });
}

/// The seconds of phase `p` that count: whole seconds inside it, without its first when it
/// has three or more (the rate changed during it).
fn settled(p: &PhaseSummary) -> std::ops::Range<u64> {
    let start = p.start_s.ceil() as u64;
    let end = (p.start_s + p.measured_s.unwrap_or(p.duration_s)).floor() as u64;
    let start = if end.saturating_sub(start) >= 3 { start + 1 } else { start };
    start..end.max(start)
}

/// Source `src` over phase `p`, `None` when the step has no settled second.
fn step_of(w: &WatchSummary, src: &WatchSource, p: &PhaseSummary) -> Option<WatchStep> {
    let range = settled(p);
    if range.is_empty() {
        return None;
    }
    let mut read = Vec::new();
    let mut missing = 0;
    for second in w.seconds.iter().filter(|sec| range.contains(&sec.t)) {
        match second.values.get(&src.name).copied().flatten() {
            Some(v) => read.push(v),
            None => missing += 1,
        }
    }
    let mean = fold(&read, |xs| xs.iter().sum::<f64>() / xs.len() as f64);
    let max = fold(&read, |xs| xs.iter().copied().fold(f64::MIN, f64::max));
    let cpu_ms_per_ok = mean.cpu_cores.filter(|_| p.ok_rps > 0.0).map(|c| c * 1000.0 / p.ok_rps);
    let ceiling_rps = cpu_ms_per_ok.zip(src.limit).filter(|&(ms, _)| ms > 0.0).map(|(ms, cores)| cores * 1000.0 / ms);
    let mut step = WatchStep {
        mean,
        max,
        seconds: read.len() as u64,
        missing,
        cpu_ms_per_ok: cpu_ms_per_ok.map(round3),
        ceiling_rps: ceiling_rps.map(round1),
        saturated: None,
    };
    step.saturated = saturation(src, &step);
    Some(step)
}

/// Each field of `values` folded by `f` over the seconds that have it.
fn fold(values: &[WatchValues], f: impl Fn(&[f64]) -> f64) -> WatchValues {
    let field = |get: fn(&WatchValues) -> Option<f64>| {
        let xs: Vec<f64> = values.iter().filter_map(get).collect();
        (!xs.is_empty()).then(|| round3(f(&xs)))
    };
    WatchValues {
        cpu_cores: field(|v| v.cpu_cores),
        cpu_some_pct: field(|v| v.cpu_some_pct),
        cpu_full_pct: field(|v| v.cpu_full_pct),
        throttled_ms: field(|v| v.throttled_ms),
        memory_mib: field(|v| v.memory_mib),
        memory_some_pct: field(|v| v.memory_some_pct),
        fds: field(|v| v.fds),
        value: field(|v| v.value),
    }
}

/// What of `src` reached its ceiling in `step`, as a phrase; `None` if nothing did.
fn saturation(src: &WatchSource, step: &WatchStep) -> Option<String> {
    let mut found = Vec::new();
    if let (Some(cores), Some(limit)) = (step.mean.cpu_cores, src.limit)
        && cores >= CPU_SATURATED * limit
    {
        let throttled = step
            .mean
            .throttled_ms
            .filter(|&ms| ms > 0.0)
            .map_or(String::new(), |ms| format!(", throttled {ms:.0} ms/s"));
        found.push(format!("CPU {cores:.2} of {limit:.2} cores{throttled}"));
    }
    // A quota that throttled the cgroup for a hundredth of the time bound it already, whatever
    // its mean CPU shows (its periods ran out even where the second's mean did not).
    if found.is_empty()
        && let Some(ms) = step.mean.throttled_ms.filter(|&ms| ms >= THROTTLED_MS_PER_S)
    {
        found.push(format!("throttled {ms:.0} ms/s by its CPU quota"));
    }
    if let Some(pct) = step.mean.cpu_some_pct.filter(|&p| p > PSI_SATURATED_PCT) {
        found.push(format!("tasks waited for a CPU {pct:.0} % of the time (PSI some)"));
    }
    if let Some(pct) = step.mean.memory_some_pct.filter(|&p| p > PSI_SATURATED_PCT) {
        found.push(format!("tasks stalled on memory {pct:.0} % of the time (PSI some)"));
    }
    if src.kind == "prometheus"
        && let (Some(mean), Some(max), Some(limit)) = (step.mean.value, step.max.value, src.limit)
        && max >= GAUGE_MAX_AT_LIMIT * limit
        && mean >= GAUGE_AT_LIMIT * limit
    {
        found.push(format!(
            "{} at its limit {limit} (mean {mean:.1}, max {max:.0})",
            src.metric.as_deref().unwrap_or("value")
        ));
    }
    (!found.is_empty()).then(|| found.join("; "))
}

/// The knee explained, and the source that explains it. `None` without a knee or sources.
fn explain_knee(s: &Summary, w: &WatchSummary) -> (Option<String>, Option<String>) {
    let Some(knee) = &s.knee else { return (None, None) };
    // A knee is a place among steps: a run of one measured phase has none to explain.
    if s.phases.iter().filter(|p| p.kind != "warmup").count() < 2 {
        return (None, None);
    }
    let Some(k) = s.phases.iter().position(|p| p.name == knee.step) else { return (None, None) };
    if w.sources.is_empty() {
        return (None, None);
    }
    let knee_phase = &s.phases[k];
    // The CPU ceiling nearest the knee: the lowest a CPU source implies at the knee step.
    let ceiling = w
        .sources
        .iter()
        .filter_map(|src| knee_phase.watch.get(&src.name).and_then(|st| st.ceiling_rps).map(|c| (src, c)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    let ceiling_text = ceiling.map_or(String::new(), |(src, c)| {
        let ms = knee_phase.watch[&src.name].cpu_ms_per_ok.unwrap_or_default();
        format!(
            "; the knee is {:.0} % of {}'s CPU ceiling, {c:.0} req/s ({} cores ÷ {ms:.3} ms of CPU per ok answer)",
            knee.rps / c * 100.0,
            src.name,
            src.limit.map_or("?".into(), |l| format!("{l:.2}"))
        )
    });
    // What reached its ceiling at the knee or the step after it (the first that failed),
    // earliest first.
    let hit = s.phases[..(k + 2).min(s.phases.len())].iter().find_map(|p| {
        w.sources
            .iter()
            .find_map(|src| p.watch.get(&src.name).and_then(|st| st.saturated.as_ref()).map(|what| (p, src, what)))
    });
    let failed_after = s.phases[k + 1..].iter().any(|p| p.passed == Some(false));
    let head = if failed_after {
        format!("knee {:.0} req/s ({})", knee.rps, knee.step)
    } else {
        format!("knee at least {:.0} req/s ({}, no step failed)", knee.rps, knee.step)
    };
    match hit {
        None if !failed_after => (Some(format!("{head}: no watched resource reached its ceiling{ceiling_text}")), None),
        Some((p, src, what)) => (
            Some(format!("{head}: {} reached its ceiling at {} — {what}{ceiling_text}", src.name, p.name)),
            Some(src.name.clone()),
        ),
        None => (
            Some(format!(
                "{head}: no watched resource saturated ({}): look elsewhere — locks, a downstream, the network{ceiling_text}",
                w.sources.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
            )),
            None,
        ),
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::analysis::fixtures::phase;
    use crate::summary::{Point, WatchSecond};

    /// Four 4 s steps at 100–400 req/s: step 3 the knee (step 4 failed); `app` is a CPU
    /// source of `limit` cores using `cores[i]` in step i, `pool` a gauge of limit 4 at
    /// `busy[i]`.
    fn stepped(cores: [f64; 4], busy: [f64; 4]) -> Summary {
        let mut s = crate::verdict::tests::clean();
        s.phases = (0..4)
            .map(|i| {
                let mut p = phase(&format!("step {}", i + 1), 100.0 * (i + 1) as f64, 100.0 * (i + 1) as f64, 4.0);
                p.start_s = 4.0 * i as f64;
                p.passed = Some(i < 3);
                p
            })
            .collect();
        s.phases[3].ok_rps = 320.0;
        s.knee = Some(Point { rps: 300.0, step: "step 3".into() });
        let seconds = (0..16u64)
            .map(|t| {
                let i = (t / 4) as usize;
                let app = WatchValues {
                    cpu_cores: Some(cores[i]),
                    cpu_some_pct: Some(cores[i] * 20.0),
                    ..Default::default()
                };
                let pool = WatchValues { value: Some(busy[i]), ..Default::default() };
                WatchSecond { t, values: BTreeMap::from([("app".into(), Some(app)), ("pool".into(), Some(pool))]) }
            })
            .collect();
        let source = |name: &str, kind: &str, limit: f64| WatchSource {
            name: name.into(),
            source: format!("{kind}:x"),
            kind: kind.into(),
            limit: Some(limit),
            ..Default::default()
        };
        s.watch = Some(WatchSummary {
            sources: vec![source("app", "cgroup", 1.0), source("pool", "prometheus", 4.0)],
            seconds,
            ..Default::default()
        });
        s
    }

    #[test]
    fn the_cpu_at_its_ceiling_explains_the_knee_with_its_cost_per_answer() {
        let mut s = stepped([0.25, 0.5, 0.75, 0.98], [1.0, 1.5, 2.0, 2.5]);
        annotate(&mut s);
        let w = s.watch.as_ref().unwrap();
        assert_eq!(w.knee_resource.as_deref(), Some("app"));
        let knee = w.knee.as_deref().unwrap();
        assert!(
            knee.starts_with("knee 300 req/s (step 3): app reached its ceiling at step 4 — CPU 0.98 of 1.00 cores"),
            "{knee}"
        );
        // 0.75 cores for 300 answers a second: 2.5 ms each, a ceiling of 400 req/s.
        let at_knee = &s.phases[2].watch["app"];
        assert_eq!((at_knee.cpu_ms_per_ok, at_knee.ceiling_rps), (Some(2.5), Some(400.0)));
        assert!(knee.contains("the knee is 75 % of app's CPU ceiling, 400 req/s"), "{knee}");
        // Settled seconds: the step's first second left out.
        assert_eq!((at_knee.seconds, at_knee.missing), (3, 0));
        assert!(s.phases[2].watch["app"].saturated.is_none() && s.phases[3].watch["pool"].saturated.is_none());
    }

    #[test]
    fn a_gauge_at_its_limit_is_named_and_a_target_limited_elsewhere_blames_nothing_watched() {
        let mut s = stepped([0.2, 0.3, 0.4, 0.45], [1.0, 2.0, 3.0, 4.0]);
        annotate(&mut s);
        let w = s.watch.as_ref().unwrap();
        assert_eq!(w.knee_resource.as_deref(), Some("pool"), "{:?}", w.knee);
        // A gauge its exporter averages over a window peaks just under the limit: still at it
        // (CI: mean 3.96, max 3.99 of 4); one held at 3.8 of 4 is not.
        for (busy, at) in [(3.99, true), (3.8, false)] {
            let mut s = stepped([0.2, 0.3, 0.4, 0.45], [1.0, 2.0, 3.0, busy]);
            annotate(&mut s);
            assert_eq!(s.watch.unwrap().knee_resource.is_some(), at, "pool at {busy} of 4");
        }
        // Nothing at its ceiling: not the CPU (45 %), not the pool (3 of 4).
        let mut s = stepped([0.2, 0.3, 0.4, 0.45], [1.0, 2.0, 3.0, 3.0]);
        annotate(&mut s);
        let w = s.watch.as_ref().unwrap();
        assert_eq!(w.knee_resource, None);
        assert!(w.knee.as_deref().unwrap().contains("no watched resource saturated (app, pool): look elsewhere"));
        // No step failed: the knee is not found, nothing is blamed.
        let mut s = stepped([0.2, 0.3, 0.4, 0.45], [1.0, 2.0, 3.0, 3.0]);
        s.phases[3].passed = Some(true);
        s.knee = Some(Point { rps: 400.0, step: "step 4".into() });
        annotate(&mut s);
        let knee = s.watch.unwrap().knee.unwrap();
        assert!(knee.starts_with("knee at least 400 req/s (step 4, no step failed): no watched resource"), "{knee}");
    }

    #[test]
    fn missing_seconds_are_left_out_never_read_as_zero() {
        let mut s = stepped([0.5; 4], [1.0; 4]);
        let w = s.watch.as_mut().unwrap();
        for sec in w.seconds.iter_mut().filter(|sec| (5..7).contains(&sec.t)) {
            sec.values.insert("app".into(), None);
        }
        annotate(&mut s);
        let st = &s.phases[1].watch["app"];
        assert_eq!((st.seconds, st.missing, st.mean.cpu_cores), (1, 2, Some(0.5)));
    }
}
