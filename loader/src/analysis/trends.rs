//! Trends over a constant or soak run (seed 003's failure signals: "p99 keeps rising, errors
//! creep up" for a constant run; "RSS rises monotonically, fds grow" for a soak): the p99 and
//! the error rate per bucket of the measured seconds with their slopes, and each watched
//! source's memory (and a process tree's descriptors) as a slope per hour — with a note when
//! the p99 keeps rising, the errors creep up, or a watched memory rises monotonically.
//!
//! Owns: the buckets, least-squares slopes and the notes. Does not: judge steps (a stepped
//! run changes its rate on purpose; trends are read at one rate only), or the loader's own
//! drift (`profiles::soak`).

use std::collections::BTreeMap;

use crate::summary::{Summary, TrendSummary, WatchTrend};

/// Buckets of a minute — or of 10 s for a run shorter than [`MINUTE_BUCKETS_FROM_S`].
const MINUTE_BUCKETS_FROM_S: u64 = 300;
/// Fewest buckets for a slope.
const MIN_BUCKETS: usize = 4;
/// The p99 "keeps rising" when it rose between at least this share of consecutive buckets
/// and its last bucket is at least [`RISE_FACTOR`] its first.
const RISING_SHARE: f64 = 0.7;
/// See [`RISING_SHARE`].
const RISE_FACTOR: f64 = 1.5;
/// Errors "creep up" when the last bucket's error rate is this many points above the first's
/// and the slope is positive.
const ERROR_CREEP_POINTS: f64 = 0.5;
/// A memory "rises monotonically" when it rose between at least this share of consecutive
/// buckets and by at least [`MEMORY_RISE_SHARE`] of its start in all.
const MONOTONIC_SHARE: f64 = 0.9;
/// See [`MONOTONIC_SHARE`].
const MEMORY_RISE_SHARE: f64 = 0.05;

/// The trends of a constant or soak run; `None` for other profiles or too short a run.
pub fn trends(s: &Summary) -> Option<TrendSummary> {
    if !matches!(s.run.profile.as_str(), "constant" | "soak") {
        return None;
    }
    let measured: Vec<_> = s.phases.iter().filter(|p| p.kind != "warmup").collect();
    let from = measured.first()?.start_s.ceil() as u64;
    let to =
        measured.iter().map(|p| p.start_s + p.measured_s.unwrap_or(p.duration_s)).fold(0.0, f64::max).floor() as u64;
    let length = to.saturating_sub(from);
    let bucket_s = if length >= MINUTE_BUCKETS_FROM_S { 60 } else { 10 };
    let buckets = (length / bucket_s) as usize;
    if buckets < MIN_BUCKETS {
        return None;
    }
    let bucket_of =
        |t: u64| (t >= from && t < from + bucket_s * buckets as u64).then(|| ((t - from) / bucket_s) as usize);
    let mut p99 = vec![Vec::new(); buckets];
    let mut done = vec![(0u64, 0u64); buckets];
    for sec in &s.series {
        let Some(b) = bucket_of(sec.t) else { continue };
        if let Some(l) = &sec.latency_ms {
            p99[b].push(l.p99);
        }
        let errors: u64 = sec.errors.iter().filter(|(c, _)| c.as_str() != "unsent").map(|(_, n)| n).sum();
        done[b].0 += sec.ok;
        done[b].1 += errors;
    }
    // A bucket's p99: the median of its seconds' p99s (one slow second does not make a trend).
    let p99_ms: Vec<Option<f64>> = p99.into_iter().map(median).collect();
    let error_pct: Vec<f64> =
        done.iter().map(|&(ok, err)| if ok + err > 0 { 100.0 * err as f64 / (ok + err) as f64 } else { 0.0 }).collect();
    let per_min = 60.0 / bucket_s as f64;
    let p99_slope = slope(&p99_ms).map(|x| round3(x * per_min));
    let error_slope = slope(&error_pct.iter().copied().map(Some).collect::<Vec<_>>()).map(|x| round3(x * per_min));
    let mut notes = Vec::new();
    let known: Vec<f64> = p99_ms.iter().flatten().copied().collect();
    if let (Some(first), Some(last)) = (known.first(), known.last())
        && rising_share(&known) >= RISING_SHARE
        && *last >= RISE_FACTOR * first
    {
        notes.push(format!(
            "p99 keeps rising: {first:.2} → {last:.2} ms over the run ({:+.3} ms a minute): a queue or a leak in the target, not a steady state",
            p99_slope.unwrap_or_default()
        ));
    }
    if let (Some(first), Some(last)) = (error_pct.first(), error_pct.last())
        && last - first >= ERROR_CREEP_POINTS
        && error_slope.is_some_and(|x| x > 0.0)
    {
        notes.push(format!("errors creep up: {first:.2} % → {last:.2} % of answers"));
    }
    let mut watched = BTreeMap::new();
    if let Some(w) = &s.watch {
        for src in &w.sources {
            let series = |get: fn(&crate::summary::WatchValues) -> Option<f64>| -> Vec<(f64, f64)> {
                w.seconds
                    .iter()
                    .filter(|x| bucket_of(x.t).is_some())
                    .filter_map(|x| {
                        x.values.get(&src.name).copied().flatten().and_then(|v| get(&v)).map(|v| (x.t as f64, v))
                    })
                    .collect()
            };
            let memory = series(|v| v.memory_mib);
            let fds = series(|v| v.fds);
            if memory.len() < MIN_BUCKETS && fds.len() < MIN_BUCKETS {
                continue;
            }
            let per_hour = |xy: &[(f64, f64)]| regression(xy).map(|x| round3(x * 3600.0));
            let by_bucket = |xy: &[(f64, f64)]| -> Vec<f64> {
                let mut b = vec![Vec::new(); buckets];
                for &(t, v) in xy {
                    if let Some(i) = bucket_of(t as u64) {
                        b[i].push(v);
                    }
                }
                b.into_iter().filter_map(median).collect()
            };
            let mem_buckets = by_bucket(&memory);
            let monotonic = mem_buckets.len() >= MIN_BUCKETS
                && rising_share(&mem_buckets) >= MONOTONIC_SHARE
                && mem_buckets.last().unwrap_or(&0.0) - mem_buckets[0] >= MEMORY_RISE_SHARE * mem_buckets[0];
            let trend = WatchTrend {
                memory_mib_per_h: per_hour(&memory),
                memory_rises_monotonically: monotonic,
                fds_per_h: per_hour(&fds),
            };
            if monotonic {
                notes.push(format!(
                    "{}'s memory rises monotonically: {:.1} → {:.1} MiB ({:+.1} MiB an hour): a leak, or a cache still filling",
                    src.name,
                    mem_buckets[0],
                    mem_buckets.last().unwrap_or(&0.0),
                    trend.memory_mib_per_h.unwrap_or_default()
                ));
            }
            watched.insert(src.name.clone(), trend);
        }
    }
    Some(TrendSummary {
        bucket_s,
        p99_ms,
        p99_slope_ms_per_min: p99_slope,
        error_pct: error_pct.into_iter().map(round3).collect(),
        error_slope_pct_per_min: error_slope,
        watched,
        notes,
    })
}

fn median(mut xs: Vec<f64>) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    Some(xs[xs.len() / 2])
}

/// Least-squares slope per bucket of the known values (by bucket index).
fn slope(ys: &[Option<f64>]) -> Option<f64> {
    let xy: Vec<(f64, f64)> = ys.iter().enumerate().filter_map(|(i, y)| y.map(|y| (i as f64, y))).collect();
    regression(&xy)
}

/// Least-squares slope of `(x, y)` points; `None` with fewer than two distinct x.
fn regression(xy: &[(f64, f64)]) -> Option<f64> {
    let n = xy.len() as f64;
    if xy.len() < 2 {
        return None;
    }
    let (mx, my) = (xy.iter().map(|p| p.0).sum::<f64>() / n, xy.iter().map(|p| p.1).sum::<f64>() / n);
    let sxx: f64 = xy.iter().map(|p| (p.0 - mx).powi(2)).sum();
    (sxx > 0.0).then(|| xy.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>() / sxx)
}

/// Share of consecutive pairs where the value rose.
fn rising_share(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    xs.windows(2).filter(|w| w[1] > w[0]).count() as f64 / (xs.len() - 1) as f64
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::fixtures::phase;
    use crate::summary::{SecondLatencyMs, SecondSummary, WatchSecond, WatchSource, WatchSummary, WatchValues};

    /// A constant run of 60 s with these per-second p99s, error counts and a watched memory.
    fn constant(p99: impl Fn(u64) -> f64, errors: impl Fn(u64) -> u64, memory: impl Fn(u64) -> f64) -> Summary {
        let mut s = crate::verdict::tests::clean();
        s.run.profile = "constant".into();
        s.phases = vec![phase("main", 100.0, 100.0, 60.0)];
        s.series = (0..60u64)
            .map(|t| SecondSummary {
                t,
                offered: 100,
                sent: 100,
                ok: 100 - errors(t),
                errors: BTreeMap::from([("http_5xx".to_string(), errors(t))]),
                in_flight_max: 4,
                late_loader: 0,
                cpu: None,
                latency_ms: Some(SecondLatencyMs { p50: 1.0, p99: p99(t), max: p99(t) }),
                ..Default::default()
            })
            .collect();
        let seconds = (0..60u64)
            .map(|t| WatchSecond {
                t,
                values: BTreeMap::from([(
                    "app".to_string(),
                    Some(WatchValues { memory_mib: Some(memory(t)), ..Default::default() }),
                )]),
            })
            .collect();
        s.watch = Some(WatchSummary {
            sources: vec![WatchSource { name: "app".into(), kind: "process".into(), ..Default::default() }],
            seconds,
            ..Default::default()
        });
        s
    }

    #[test]
    fn a_rising_p99_creeping_errors_and_a_leak_are_named_and_a_steady_run_is_not() {
        let t = trends(&constant(|t| 2.0 + t as f64 * 0.1, |t| t / 10, |t| 100.0 + t as f64)).unwrap();
        assert_eq!((t.bucket_s, t.p99_ms.len()), (10, 6));
        assert_eq!(t.p99_slope_ms_per_min, Some(6.0), "0.1 ms a second");
        assert!(t.notes.iter().any(|n| n.starts_with("p99 keeps rising")), "{:?}", t.notes);
        assert!(t.notes.iter().any(|n| n.starts_with("errors creep up")), "{:?}", t.notes);
        assert!(t.notes.iter().any(|n| n.starts_with("app's memory rises monotonically")), "{:?}", t.notes);
        assert_eq!(t.watched["app"].memory_mib_per_h, Some(3600.0));
        // Steady: noise around a level, a memory that goes up and down.
        let t = trends(&constant(|t| 2.0 + (t % 3) as f64 * 0.1, |_| 0, |t| 100.0 + (t % 7) as f64)).unwrap();
        assert!(t.notes.is_empty(), "{:?}", t.notes);
        assert!(!t.watched["app"].memory_rises_monotonically);
        // A stepped run is not read for trends.
        let mut s = constant(|_| 2.0, |_| 0, |_| 100.0);
        s.run.profile = "step".into();
        assert!(trends(&s).is_none());
    }
}
