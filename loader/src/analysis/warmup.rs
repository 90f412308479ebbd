//! Was the warm-up long enough? The field note's test (seed 000, "cold start"): a warm-up is
//! enough only when the loader's connections and TLS sessions are all open, its TIME_WAIT has
//! stopped climbing, the latency p99 has converged and the target's CPU has reached its
//! plateau. Each is read over the first measured seconds against the warm-up's last ones;
//! what had not settled is named, with about how long a warm-up would have taken (when the
//! same signal settled later in the run).
//!
//! Owns: that comparison over `series`, `probes.series`, `health.series` and the watched
//! sources' seconds. Does not: judge the measured phases, or invalidate anything — the
//! warm-up is excluded from the figures, so an unsettled one is a note about how
//! representative the first measured seconds are.

use crate::summary::{Summary, WarmupSummary};

/// Seconds compared at each end: the warm-up's last this many against the same before.
const WINDOW_S: usize = 3;
/// Seconds of each window when looking for where a signal settled after the warm-up: two
/// windows of 2 s place it within a second or two.
const LATER_S: u64 = 2;
/// A move smaller than this many times the seconds' scatter about their trend line (the
/// median distance from it) is noise: a warm target's p99 per second here ran 0.25, 2.94,
/// 1.09, 5.89, 0.25, 0.40 ms, a line through which falls by 1.3 ms.
const ABOVE_SCATTER: f64 = 3.0;
/// A p99 still this much higher before than at the end (and by at least
/// [`P99_FALL_MIN_MS`]) was still falling.
const P99_FALL: f64 = 1.25;
/// Below this, ms, a falling p99 is the host's noise: a warm built-in target's p99 per
/// second here ran 0.86, 3.20, 0.54, 1.22, 0.43, 0.43, 0.34 ms, its trend line falling by
/// 0.9 ms across the warm-up's end.
const P99_FALL_MIN_MS: f64 = 1.0;
/// A watched CPU this much higher at the end than before (and by at least
/// [`CPU_RISE_MIN_CORES`]) was still rising.
const CPU_RISE: f64 = 1.15;
/// Below this, cores, a rising CPU is noise.
const CPU_RISE_MIN_CORES: f64 = 0.02;
/// TIME_WAIT this much higher at the end (and by at least 20 sockets) was still climbing.
const TW_RISE: f64 = 1.1;

/// The warm-up's check, `None` without a warm-up of at least two seconds.
pub fn check(s: &Summary) -> Option<WarmupSummary> {
    let warm = s.phases.iter().find(|p| p.kind == "warmup")?;
    let start = warm.start_s.ceil() as u64;
    let end = (warm.start_s + warm.measured_s.unwrap_or(warm.duration_s)).floor() as u64;
    let n = end.saturating_sub(start) as usize;
    if n < 2 {
        return None;
    }
    let last_end = end;
    // Judged where it matters: the first measured seconds against the warm-up's last, as
    // many (up to 3). A signal that reached its level within the warm-up is settled, however
    // it fell before (the demo's 2 s warm-up: p99 1.60 → 0.14 ms from its first second to
    // its second, then flat); one still moving into the measured seconds is not. Without
    // measured seconds after it, the warm-up's own two halves are compared.
    let (w, judged_at) = match WINDOW_S.min(n) as u64 {
        w if last_end + w <= series_end(s) => (w, last_end + w),
        _ => ((WINDOW_S.min(n / 2)) as u64, last_end),
    };
    let mut unsettled = Vec::new();
    let mut settled_at: Vec<Option<u64>> = Vec::new();
    for signal in signals(s) {
        if let Some(what) = signal.unsettled(judged_at, w) {
            unsettled.push(what);
            // When it settled later: the first end of two windows of [`LATER_S`] after that
            // at which the comparison no longer finds it moving, within the run.
            let later = (last_end + 1..=series_end(s)).find(|&e| signal.unsettled(e, LATER_S).is_none());
            settled_at.push(later);
        }
    }
    // Windows that no longer move end `LATER_S` seconds after the signal reached its level;
    // a warm-up judged short was short, whatever the finer windows place (at least a second
    // more).
    let enough_s = match settled_at.iter().copied().collect::<Option<Vec<u64>>>() {
        Some(ends) => ends.into_iter().max().map(|e| e.saturating_sub(start + LATER_S).max(n as u64 + 1)),
        None => None,
    };
    let detail = if unsettled.is_empty() {
        format!("warm-up ({} s): settled by its end", n)
    } else {
        let enough = match (enough_s, settled_at.iter().any(Option::is_none)) {
            (Some(e), _) => format!("; a warm-up of about {e} s would have been enough"),
            (None, true) => "; it had not settled by the run's end either".to_string(),
            (None, false) => String::new(),
        };
        format!(
            "warm-up ({n} s) had not settled by its end: {}{enough} — the first measured seconds are still warming up",
            unsettled.join(", ")
        )
    };
    Some(WarmupSummary { settled: unsettled.is_empty(), unsettled, enough_s, detail })
}

/// The last second the run's series covers, + 1.
fn series_end(s: &Summary) -> u64 {
    s.series.last().map_or(0, |x| x.t + 1)
}

/// One per-second signal: its values by second, and how it is judged.
struct Signal {
    name: String,
    kind: Kind,
    /// `(second, value)`, ascending.
    values: Vec<(u64, f64)>,
}

#[derive(Clone, Copy)]
enum Kind {
    /// New connections or handshakes in a keep-alive run: any is still opening.
    Opening,
    /// A count that should stop climbing (TIME_WAIT).
    Climbing,
    /// A latency that should stop falling.
    Falling,
    /// A CPU that should reach its plateau.
    Rising,
}

impl Signal {
    /// Mean over seconds `[from, to)`, `None` with none there.
    fn mean(&self, from: u64, to: u64) -> Option<f64> {
        let xs: Vec<f64> = self.values.iter().filter(|(t, _)| (from..to).contains(t)).map(|&(_, v)| v).collect();
        (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
    }

    /// The two windows' levels — the `w` seconds before `end` and the `w` before them — read
    /// off a Theil–Sen line through their seconds (the median of the pairwise slopes), and
    /// whether the move between them stands out of the seconds' scatter about that line
    /// ([`ABOVE_SCATTER`]): one slow second cannot make a level run look as if it were
    /// falling or climbing. With fewer than 3 seconds, the windows' means (always standing
    /// out).
    fn levels(&self, end: u64, w: u64) -> Option<(f64, f64, bool)> {
        let from = end.saturating_sub(2 * w);
        let points: Vec<(f64, f64)> =
            self.values.iter().filter(|(t, _)| (from..end).contains(t)).map(|&(t, v)| (t as f64, v)).collect();
        if points.len() < 3 {
            let last = self.mean(end.saturating_sub(w), end)?;
            return Some((self.mean(from, end.saturating_sub(w))?, last, true));
        }
        let mut slopes = Vec::new();
        for (i, a) in points.iter().enumerate() {
            for b in &points[i + 1..] {
                slopes.push((b.1 - a.1) / (b.0 - a.0));
            }
        }
        let slope = median(&mut slopes);
        let intercept = median(&mut points.iter().map(|(t, v)| v - slope * t).collect::<Vec<_>>());
        let at = |t: f64| intercept + slope * t;
        let scatter = median(&mut points.iter().map(|&(t, v)| (v - at(t)).abs()).collect::<Vec<_>>());
        let stands_out = (slope * w as f64).abs() >= ABOVE_SCATTER * scatter;
        // The middles of the two windows, `w` seconds apart.
        let before_mid = from as f64 + (w as f64 - 1.0) / 2.0;
        Some((at(before_mid).max(0.0), at(before_mid + w as f64).max(0.0), stands_out))
    }

    /// What is still moving in the `w` seconds before `end` against the `w` before them.
    fn unsettled(&self, end: u64, w: u64) -> Option<String> {
        // The two levels, when their move stands out of the seconds' scatter.
        let moved = || self.levels(end, w).filter(|&(_, _, stands_out)| stands_out).map(|(b, last, _)| (b, last));
        match self.kind {
            Kind::Opening => {
                let last = self.mean(end.saturating_sub(w), end)?;
                (last > 0.0).then(|| format!("{} ({:.0} in {w} s)", self.name, last * w as f64))
            }
            Kind::Climbing => {
                let (b, last) = moved()?;
                (last > b * TW_RISE && last - b >= 20.0).then(|| format!("{} ({b:.0} → {last:.0})", self.name))
            }
            Kind::Falling => {
                let (b, last) = moved()?;
                (b > last * P99_FALL && b - last >= P99_FALL_MIN_MS)
                    .then(|| format!("{} ({b:.2} → {last:.2} ms)", self.name))
            }
            Kind::Rising => {
                let (b, last) = moved()?;
                (last > b * CPU_RISE && last - b >= CPU_RISE_MIN_CORES)
                    .then(|| format!("{} ({b:.2} → {last:.2} cores)", self.name))
            }
        }
    }
}

/// The median of `xs` (reordered), 0 when empty.
fn median(xs: &mut [f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 { xs[n / 2] } else { (xs[n / 2 - 1] + xs[n / 2]) / 2.0 }
}

/// The signals this run has.
fn signals(s: &Summary) -> Vec<Signal> {
    let mut out = Vec::new();
    out.push(Signal {
        name: "latency p99 still falling".into(),
        kind: Kind::Falling,
        values: s.series.iter().filter_map(|x| x.latency_ms.as_ref().map(|l| (x.t, l.p99))).collect(),
    });
    // The probes sample in the same once-a-second tick as the health sampler: the same index
    // is the same second, the one that tick ended (health's `t` counts ticks from 1).
    let seconds: Vec<u64> = s.health.series.iter().map(|h| h.t.saturating_sub(1)).collect();
    let probe = |get: fn(&crate::probes::ProbeSample) -> f64| -> Vec<(u64, f64)> {
        s.probes.series.iter().zip(&seconds).map(|(p, &t)| (t, get(p))).collect()
    };
    if s.run.keepalive {
        out.push(Signal {
            name: "connections still opening".into(),
            kind: Kind::Opening,
            values: probe(|p| p.connects as f64),
        });
        if s.tls.is_some() {
            out.push(Signal {
                name: "TLS handshakes still happening".into(),
                kind: Kind::Opening,
                values: probe(|p| p.tls_handshakes as f64),
            });
        }
    }
    out.push(Signal {
        name: "the loader's TIME_WAIT still climbing".into(),
        kind: Kind::Climbing,
        values: s
            .probes
            .series
            .iter()
            .zip(&seconds)
            .filter_map(|(p, &t)| p.time_wait_own.or(p.time_wait_live).map(|n| (t, n as f64)))
            .collect(),
    });
    if let Some(w) = &s.watch {
        for src in w.sources.iter().filter(|src| src.kind != "prometheus") {
            out.push(Signal {
                name: format!("{}'s CPU still rising", src.name),
                kind: Kind::Rising,
                values: w
                    .seconds
                    .iter()
                    .filter_map(|x| {
                        x.values.get(&src.name).copied().flatten().and_then(|v| v.cpu_cores).map(|c| (x.t, c))
                    })
                    .collect(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::fixtures::phase;
    use crate::summary::{SecondLatencyMs, SecondSummary};

    /// A 4 s warm-up then 8 s measured, with these p99s per second.
    fn run(p99: [f64; 12]) -> Summary {
        let mut s = crate::verdict::tests::clean();
        let mut warm = phase("warmup", 100.0, 100.0, 4.0);
        warm.kind = "warmup".into();
        let mut main = phase("main", 100.0, 100.0, 8.0);
        main.start_s = 4.0;
        s.phases = vec![warm, main];
        s.series = (0..12u64)
            .map(|t| SecondSummary {
                t,
                offered: 100,
                sent: 100,
                ok: 100,
                errors: Default::default(),
                in_flight_max: 4,
                late_loader: 0,
                cpu: None,
                latency_ms: Some(SecondLatencyMs {
                    p50: p99[t as usize] / 2.0,
                    p99: p99[t as usize],
                    max: p99[t as usize],
                }),
                ..Default::default()
            })
            .collect();
        s
    }

    #[test]
    fn a_p99_still_falling_is_unsettled_with_the_time_it_took_and_a_flat_one_is_not() {
        let cold = run([40.0, 35.0, 30.0, 25.0, 20.0, 15.0, 10.0, 5.0, 2.0, 2.0, 2.0, 2.0]);
        let w = check(&cold).unwrap();
        assert!(!w.settled && w.unsettled[0].starts_with("latency p99 still falling (30.00 → 15.00 ms)"), "{w:?}");
        // The warm-up's last 3 s against the first 3 measured ones; level from second 8.
        assert_eq!(w.enough_s, Some(9), "{w:?}");
        // Falling by 1.2× between the warm-up's own windows (under the 1.25 that says
        // "falling"), still falling into the measured seconds: unsettled all the same.
        let slow = run([40.0, 36.0, 33.0, 30.0, 26.0, 22.0, 18.0, 14.0, 10.0, 6.0, 2.0, 2.0]);
        assert!(!check(&slow).unwrap().settled, "{:?}", check(&slow));
        let warm = run([2.1, 2.0, 2.2, 2.0, 2.1, 2.0, 2.0, 2.1, 2.0, 2.0, 2.0, 2.0]);
        assert!(check(&warm).unwrap().settled);
        // One slow second at the warm-up's end is not a falling p99 (a warm target, CI).
        let blip = run([0.45, 0.45, 0.45, 1.9, 0.45, 0.45, 0.45, 0.45, 0.45, 0.45, 0.45, 0.45]);
        assert!(check(&blip).unwrap().settled, "{:?}", check(&blip));
        let drift = run([0.86, 3.20, 0.54, 1.22, 0.43, 0.43, 0.34, 0.5, 0.4, 0.4, 0.4, 0.4]);
        assert!(check(&drift).unwrap().settled, "{:?}", check(&drift));
        // Sub-millisecond jitter is not a falling p99: 0.4 → 0.1 ms.
        let fast = run([0.4, 0.4, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]);
        assert!(check(&fast).unwrap().settled);
        // Still falling at the run's end: no estimate, said so.
        let never = run(std::array::from_fn(|t| 40.0 * 0.85f64.powi(t as i32)));
        let w = check(&never).unwrap();
        assert_eq!(w.enough_s, None);
        assert!(w.detail.contains("had not settled by the run's end either"), "{}", w.detail);
    }

    #[test]
    fn a_p99_that_reached_its_level_inside_the_warm_up_had_settled() {
        // 40 ms for the first two seconds, then 5 ms: level from second 2 of a 4 s warm-up.
        let early = run([40.0, 40.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0]);
        let w = check(&early).unwrap();
        assert!(w.settled && w.unsettled.is_empty(), "{w:?}");
        assert!(w.detail.contains("settled by its end"), "{}", w.detail);
        // Level from the first measured second (or from the warm-up's last, one second at it
        // being no level yet): the warm-up was short by a second, said with the estimate.
        for late in [[40.0, 40.0, 40.0, 40.0], [40.0, 40.0, 40.0, 5.0]] {
            let mut p99 = [5.0; 12];
            p99[..4].copy_from_slice(&late);
            let w = check(&run(p99)).unwrap();
            assert!(!w.settled && w.enough_s == Some(5), "{late:?}: {w:?}");
        }
    }
}
