//! The pre-flight noise check: before the run, how late does this host wake a sleeping
//! thread? A loader can only keep a schedule as well as the host wakes it; if 1 ms sleeps
//! end hundreds of microseconds late, sub-millisecond latencies from this host mean little.
//!
//! One thread per shard (the run's own thread count) sleeps [`SLEEP`] at a time, with timer slack
//! 1 ns as the shards use, and records how late each wake-up was. The result goes into
//! `summary.json` (`preflight`) and a warning is printed when the host is too noisy for the
//! SLO asked (p99 lateness above a tenth of the tightest latency SLO, or above 1 ms).

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// What the check measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Preflight {
    /// How long it ran, seconds.
    pub duration_s: f64,
    /// Threads that slept (one per shard).
    pub threads: usize,
    /// Wake-ups measured.
    pub wakeups: u64,
    /// Median lateness of a sleep, µs.
    pub late_p50_us: f64,
    /// 99th percentile lateness, µs.
    pub late_p99_us: f64,
    /// Worst lateness, µs.
    pub late_max_us: f64,
    /// Why this host is too noisy for the SLO, if it is.
    pub warning: Option<String>,
}

/// How long each sleep lasts. A wake-up costs the same CPU whatever the sleep before it (on
/// this project's VM 7–8 µs, mostly the timer's exits): 1 ms sleeps spent 15 ms of CPU in a
/// default 2 s check — 1.5 µs a request of a 10 s run at 1,000 req/s — where 4 ms sleeps spend
/// a quarter of that and still give ~500 wake-ups a thread for the p99. The run's own
/// wake-ups (`loader.wake_late_us`) are the other half of the noise floor.
pub const SLEEP: Duration = Duration::from_millis(4);

/// Sleep [`SLEEP`] at a time on `threads` threads for `duration`; `slo_ms` is the tightest latency
/// SLO asked (p95 or p99), if any.
pub fn measure(duration: Duration, threads: usize, slo_ms: Option<f64>) -> Preflight {
    let threads = threads.max(1);
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                // Woken as the shards are, so this measures the jitter they will see.
                crate::engine::wakeup::on_time();
                let mut h = Histogram::<u64>::new_with_bounds(1, 10_000_000, 3).expect("static bounds");
                let end = Instant::now() + duration;
                while Instant::now() < end {
                    let deadline = Instant::now() + SLEEP;
                    std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
                    let late = Instant::now().saturating_duration_since(deadline);
                    h.saturating_record(late.as_micros() as u64);
                }
                h
            })
        })
        .collect();
    let mut all = Histogram::<u64>::new_with_bounds(1, 10_000_000, 3).expect("static bounds");
    for h in handles {
        if let Ok(h) = h.join() {
            let _ = all.add(&h);
        }
    }
    let q = |q: f64| if all.is_empty() { 0.0 } else { all.value_at_quantile(q) as f64 };
    let mut p = Preflight {
        duration_s: duration.as_secs_f64(),
        threads,
        wakeups: all.len(),
        late_p50_us: q(0.5),
        late_p99_us: q(0.99),
        late_max_us: if all.is_empty() { 0.0 } else { all.max() as f64 },
        warning: None,
    };
    p.warning = warning(p.late_p99_us, slo_ms);
    p
}

/// The warning for a p99 wake-up lateness against an SLO, if one is due.
pub fn warning(late_p99_us: f64, slo_ms: Option<f64>) -> Option<String> {
    let late_ms = late_p99_us / 1000.0;
    if let Some(slo) = slo_ms
        && late_ms > slo / 10.0
    {
        return Some(format!(
            "this host wakes sleeping threads up to {late_ms:.2} ms late (p99), more than a tenth of the {slo} ms SLO: quiet the host or expect the loader's own delay in the tail"
        ));
    }
    (late_ms > 1.0).then(|| {
        format!("this host wakes sleeping threads up to {late_ms:.2} ms late (p99): sub-millisecond figures from it are noise")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_real_wakeups() {
        let p = measure(Duration::from_millis(200), 1, None);
        assert!(p.wakeups >= 20, "{p:?}");
        assert!(p.late_p50_us <= p.late_p99_us && p.late_p99_us <= p.late_max_us);
    }

    #[test]
    fn warns_against_the_slo_or_an_absolute_millisecond() {
        assert!(warning(300.0, Some(2.0)).is_some(), "0.3 ms > 2 ms / 10");
        assert!(warning(300.0, Some(10.0)).is_none());
        assert!(warning(1500.0, None).is_some());
        assert!(warning(200.0, None).is_none());
    }
}
