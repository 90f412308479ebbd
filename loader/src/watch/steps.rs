//! Each step's view of the watched sources (`phases[].watch`): means and maxima over its
//! settled seconds, CPU per ok answer and the ceiling it implies, and what reached its
//! ceiling (the breakpoint seed's fourth reading of a step, "which server resource hit its
//! ceiling"); then `knee.rs` explains the knee from them.
//!
//! Owns: the arithmetic over `summary.watch.seconds` and each step's phrase. Does not: sample
//! (`sampler.rs`), find the knee (`analysis`), explain it (`knee.rs`), or judge the loader
//! (`verdict`).

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
    let explained = super::knee::explain(s, &watch);
    s.watch = Some(WatchSummary {
        knee: explained.sentence,
        knee_resource: explained.resource,
        knee_shares: explained.shares,
        ..watch
    });
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
        cpu_steal_cores: field(|v| v.cpu_steal_cores),
        memory_mib: field(|v| v.memory_mib),
        memory_some_pct: field(|v| v.memory_some_pct),
        fds: field(|v| v.fds),
        value: field(|v| v.value),
    }
}

/// What of `src` reached its ceiling in `step`, as a phrase; `None` if nothing did.
fn saturation(src: &WatchSource, step: &WatchStep) -> Option<String> {
    let mut found = Vec::new();
    // Cores the hypervisor took were not there to use: a core 85 % busy and 10 % stolen is full.
    let stolen = step.mean.cpu_steal_cores.unwrap_or(0.0);
    if let (Some(cores), Some(limit)) = (step.mean.cpu_cores, src.limit)
        && cores + stolen >= CPU_SATURATED * limit
    {
        let throttled = step
            .mean
            .throttled_ms
            .filter(|&ms| ms > 0.0)
            .map_or(String::new(), |ms| format!(", throttled {ms:.0} ms/s"));
        let stolen = if stolen >= 0.01 { format!(", {stolen:.2} stolen by the hypervisor") } else { String::new() };
        found.push(format!("CPU {cores:.2} of {limit:.2} cores{throttled}{stolen}"));
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

pub(super) fn round3(x: f64) -> f64 {
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

    /// [`stepped`]'s steps watched by CPU sources `(name, kind, ceiling, cpus, cores in each
    /// step)` instead.
    fn cpu_sources(sources: &[(&str, &str, f64, &str, [f64; 4])]) -> Summary {
        let mut s = stepped([0.0; 4], [0.0; 4]);
        let seconds = (0..16u64)
            .map(|t| {
                let i = (t / 4) as usize;
                let values = sources
                    .iter()
                    .map(|(name, ..)| {
                        let cores = sources.iter().find(|x| x.0 == *name).unwrap().4[i];
                        (name.to_string(), Some(WatchValues { cpu_cores: Some(cores), ..Default::default() }))
                    })
                    .collect();
                WatchSecond { t, values }
            })
            .collect();
        let sources = sources
            .iter()
            .map(|(name, kind, limit, cpus, _)| WatchSource {
                name: name.to_string(),
                source: format!("{kind}:x"),
                kind: kind.to_string(),
                limit: Some(*limit),
                cpus: Some(cpus.to_string()),
                ..Default::default()
            })
            .collect();
        s.watch = Some(WatchSummary { sources, seconds, ..Default::default() });
        s
    }

    /// The real stack of issue 46: php-fpm, postgres and nginx on CPU 1, each far from its
    /// own ceiling while the core was full.
    #[test]
    fn a_full_core_shared_by_watched_processes_names_the_core_and_each_share() {
        let stack = [
            ("cpu1", "cpu", 1.0, "1", [0.3, 0.6, 0.85, 0.98]),
            ("pg", "process", 1.0, "1", [0.15, 0.3, 0.45, 0.51]),
            ("fpm", "process", 1.0, "1", [0.1, 0.2, 0.3, 0.33]),
            ("web", "process", 2.0, "0-1", [0.03, 0.06, 0.1, 0.11]),
        ];
        let mut s = cpu_sources(&stack);
        annotate(&mut s);
        let w = s.watch.as_ref().unwrap();
        let knee = w.knee.as_deref().unwrap();
        assert!(
            knee.starts_with(
                "knee 300 req/s (step 3): CPU 1 full at step 4 (cpu1: CPU 0.98 of 1.00 cores) — pg 0.51, fpm 0.33, web 0.11 (also allowed elsewhere) cores; the knee is"
            ),
            "{knee}"
        );
        assert_eq!(w.knee_resource.as_deref(), Some("cpu1"));
        assert_eq!(w.knee_shares.iter().map(|sh| sh.name.as_str()).collect::<Vec<_>>(), ["pg", "fpm", "web"]);
        // With nginx unwatched, what the others leave is named as the rest.
        let mut s = cpu_sources(&stack[..3]);
        annotate(&mut s);
        let knee = s.watch.unwrap().knee.unwrap();
        assert!(knee.contains("— pg 0.51, fpm 0.33, the rest 0.14 (not watched) cores;"), "{knee}");
        // Against the core's ceiling, not pg's: 0.85 cores for 300 answers a second.
        assert!(knee.contains("the knee is 85 % of cpu1's CPU ceiling"), "{knee}");
        // Without the core watched: nothing saturated, and the shared core is pointed at.
        let mut s = cpu_sources(&stack[1..]);
        annotate(&mut s);
        let knee = s.watch.unwrap().knee.unwrap();
        assert!(knee.contains("no watched resource saturated (pg, fpm, web)"), "{knee}");
        assert!(knee.contains("; pg and fpm share CPU 1 (0.84 cores between them at step 4): watch cpu:1"), "{knee}");
    }

    #[test]
    fn a_pool_at_its_limit_beside_idle_cpus_was_waiting_and_beside_a_full_cpu_the_cpu_is_named() {
        let mut s = stepped([0.05, 0.08, 0.1, 0.1], [1.0, 2.0, 3.0, 4.0]);
        annotate(&mut s);
        let knee = s.watch.unwrap().knee.unwrap();
        assert!(knee.contains("pool reached its ceiling at step 4 — value at its limit 4"), "{knee}");
        assert!(
            knee.contains("while app used 0.10 of its 1.00 cores: the workers were waiting (a lock, a downstream, I/O), not working"),
            "{knee}"
        );
        // The CPU at its ceiling in the same step: the workers were working, the CPU is named.
        let mut s = stepped([0.25, 0.5, 0.75, 0.98], [1.0, 2.0, 3.0, 4.0]);
        annotate(&mut s);
        let w = s.watch.unwrap();
        assert_eq!(w.knee_resource.as_deref(), Some("app"));
        let knee = w.knee.unwrap();
        assert!(
            knee.contains(
                "app reached its ceiling at step 4 — CPU 0.98 of 1.00 cores (also at its ceiling there: pool)"
            ),
            "{knee}"
        );
        assert!(!knee.contains("waiting"), "{knee}");
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
