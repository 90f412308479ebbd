//! The host's resolution floor: how late this host wakes a sleeping thread on its own, with
//! nothing competing for the CPU. A loader that sleeps between sends cannot keep its
//! schedule more precisely than that, so send lag at the floor is a limit of the host to be
//! stated ("figures under X ms are within this host's wake-up jitter"), not loader
//! saturation to be held against the run.
//!
//! Evidence, both measured on the run's own thread count:
//!
//! - the pre-flight check (`health::preflight`): p99 lateness of its sleeps (4 ms each), before the run;
//! - the run's own timer wake-ups (`loader.wake_late_us`): p99 lateness of the shards' sleeps
//!   that ended on their timer — unless the probes show that run-queue delay explains it
//!   (the shards' run-queue p99 at least half of it): that is contention, which the
//!   run-queue rule judges. (Without probes the two cannot be told apart; the figure counts.)
//!
//! The floor is the larger of the two, at least [`FLOOR_MIN_MS`] (below that no sleeping
//! loader resolves anything) and at most [`FLOOR_MAX_MS`]: a thread woken later than that
//! was not waiting for a timer but stopped, throttled or paused, which is the loader's
//! trouble, not the host's resolution. With neither measurement (`--preflight 0s` and no
//! timer wake-up) it is [`FLOOR_UNMEASURED_MS`].

use crate::summary::{PhaseSummary, Summary, WakeLateUs};

/// Lowest floor: sub-50 µs lag is below what any loader that sleeps can promise.
pub const FLOOR_MIN_MS: f64 = 0.05;
/// Highest floor: no timer is this late on a working host (the noisiest host seen while
/// building this woke 2 ms late at p99).
pub const FLOOR_MAX_MS: f64 = 2.0;
/// The floor when nothing measured it: the delay below which the loader's own lateness was
/// always taken for noise before the floor was measured (clean runs here: send lag p99
/// 0.06–0.14 ms from 100 to 30 000 req/s).
pub const FLOOR_UNMEASURED_MS: f64 = 0.25;
/// Fewest timer wake-ups for the run's own p99 to count.
const MIN_WAKEUPS: u64 = 200;

/// The host's wake-up jitter, and where the figure came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Floor {
    /// p99 wake-up lateness, ms, within [`FLOOR_MIN_MS`, `FLOOR_MAX_MS`].
    pub ms: f64,
    /// The pre-flight's p99, ms, if it ran.
    pub preflight_ms: Option<f64>,
    /// The run's own timer wake-ups' p99, ms, if they count (enough of them, not explained
    /// by run-queue delay).
    pub run_ms: Option<f64>,
    /// The run's own wake-ups were measured but run-queue delay explained them (so they are
    /// contention, judged by the run-queue rule, not the host's timer).
    pub run_contended: bool,
    /// The phase's own timer wake-ups' p99, ms, when it raised the run's floor
    /// ([`Floor::for_phase`]).
    pub phase_ms: Option<f64>,
}

/// The p99 of timer wake-ups' lateness, ms, when there are enough of them for a p99.
fn counted_p99_ms(wake: Option<&WakeLateUs>) -> Option<f64> {
    wake.filter(|w| w.count >= MIN_WAKEUPS).map(|w| w.p99 / 1000.0)
}

/// Whether lateness of `wake_ms` is the timer's: the probes say whether the shards waited for
/// a CPU, and lateness their run-queue p99 explains (half of it or more) is contention.
fn timer_not_contention(s: &Summary, wake_ms: f64) -> bool {
    s.probes.runqueue_us.as_ref().is_none_or(|rq| rq.p99 / 1000.0 < wake_ms / 2.0)
}

impl Floor {
    /// A floor known only as a figure, `ms` (a calibration step's, already judged per phase).
    pub fn measured(ms: f64) -> Floor {
        Floor { ms, preflight_ms: None, run_ms: None, run_contended: false, phase_ms: None }
    }

    /// The floor of the run `s`.
    pub fn of(s: &Summary) -> Floor {
        let preflight_ms = s.preflight.as_ref().filter(|p| p.wakeups > 0).map(|p| p.late_p99_us / 1000.0);
        let wake_ms = counted_p99_ms(s.loader.wake_late_us.as_ref());
        let run_ms = wake_ms.filter(|&wake| timer_not_contention(s, wake));
        let run_contended = wake_ms.is_some() && run_ms.is_none();
        let ms = match preflight_ms.into_iter().chain(run_ms).reduce(f64::max) {
            Some(measured) => measured.clamp(FLOOR_MIN_MS, FLOOR_MAX_MS),
            None => FLOOR_UNMEASURED_MS,
        };
        Floor { ms, preflight_ms, run_ms, run_contended, phase_ms: None }
    }

    /// The floor where phase `p`'s sends were due: the run's, raised to the phase's own timer
    /// wake-ups' p99 when there are enough of them and run-queue delay does not explain them.
    /// A host's jitter comes in spells (CI: a calibration's coarse pass measured 0.40 ms at
    /// p99 over its whole run, yet one 2 s step at 1,953 req/s, shards 17 % busy, run-queue
    /// p99 27 µs, own lag p99 6 µs, lagged 0.68 ms at p99 and was called the loader's
    /// ceiling); the lateness of the shard's own sleeps in that window is the resolution its
    /// sends had there.
    pub fn for_phase(&self, s: &Summary, p: &PhaseSummary) -> Floor {
        let phase_ms = counted_p99_ms(p.wake_late_us.as_ref()).filter(|&wake| timer_not_contention(s, wake));
        match phase_ms {
            Some(ms) if ms.min(FLOOR_MAX_MS) > self.ms => Floor { ms: ms.min(FLOOR_MAX_MS), phase_ms, ..*self },
            _ => *self,
        }
    }

    /// How the floor was measured, for a reason's sentence.
    pub fn evidence(&self) -> String {
        if let Some(phase) = self.phase_ms {
            return format!(
                "this phase's own wake-ups p99 {:.0} µs; {}",
                phase * 1e3,
                Floor { phase_ms: None, ..*self }.evidence()
            );
        }
        match (self.preflight_ms, self.run_ms) {
            (Some(p), Some(r)) => {
                format!("pre-flight p99 {:.0} µs, the run's own wake-ups p99 {:.0} µs", p * 1e3, r * 1e3)
            }
            (Some(p), None) => format!("pre-flight p99 {:.0} µs", p * 1e3),
            (None, Some(r)) => format!("the run's own wake-ups p99 {:.0} µs", r * 1e3),
            (None, None) if self.run_contended => format!(
                "not measured (no pre-flight; the run's own wake-ups waited for a CPU, which is contention, not the timer); taken as {FLOOR_UNMEASURED_MS} ms"
            ),
            (None, None) => {
                format!("not measured (no pre-flight, no timer wake-up); taken as {FLOOR_UNMEASURED_MS} ms")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::preflight::Preflight;
    use crate::summary::RunQueueUs;

    fn summary(preflight_us: Option<f64>, wake_us: Option<f64>, runqueue_us: Option<f64>) -> Summary {
        let mut s = crate::verdict::tests::clean();
        s.preflight = preflight_us.map(|p| Preflight { wakeups: 2000, late_p99_us: p, ..Default::default() });
        s.loader.wake_late_us = wake_us.map(|w| WakeLateUs { p50: w / 3.0, p90: w / 2.0, p99: w, max: w, count: 5000 });
        s.probes.runqueue_us = runqueue_us.map(|r| RunQueueUs { p99: r, ..Default::default() });
        s
    }

    #[test]
    fn the_floor_is_the_larger_measurement_within_its_bounds() {
        assert_eq!(Floor::of(&summary(Some(100.0), None, Some(30.0))).ms, 0.1);
        assert_eq!(Floor::of(&summary(Some(100.0), Some(300.0), Some(30.0))).ms, 0.3);
        assert_eq!(Floor::of(&summary(Some(10.0), None, None)).ms, FLOOR_MIN_MS);
        assert_eq!(Floor::of(&summary(Some(9000.0), None, None)).ms, FLOOR_MAX_MS);
        assert_eq!(Floor::of(&summary(None, None, None)).ms, FLOOR_UNMEASURED_MS);
    }

    #[test]
    fn lateness_that_run_queue_delay_explains_is_not_the_hosts_floor() {
        // A hog on the loader's CPU: the shards woke 18 ms late because they waited 17 ms to run.
        let f = Floor::of(&summary(Some(100.0), Some(18_000.0), Some(17_000.0)));
        assert_eq!((f.ms, f.run_ms, f.run_contended), (0.1, None, true));
        assert!(f.evidence().contains("pre-flight p99 100 µs"), "{}", f.evidence());
        let f = Floor::of(&summary(None, Some(18_000.0), Some(17_000.0)));
        assert_eq!(f.ms, FLOOR_UNMEASURED_MS);
        assert!(f.evidence().contains("waited for a CPU"), "{}", f.evidence());
        // Without probes the run's figure counts (it cannot be told from contention, but the
        // cap still keeps a stopped or throttled loader out of the floor).
        let f = Floor::of(&summary(Some(100.0), Some(300.0), None));
        assert_eq!((f.ms, f.run_ms), (0.3, Some(0.3)));
        assert_eq!(Floor::of(&summary(None, Some(50_000.0), None)).ms, FLOOR_MAX_MS);
    }
}
