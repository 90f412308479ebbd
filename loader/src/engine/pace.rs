//! When a shard sleeps and what wakes it: the rate-chosen wake strategy.
//!
//! A sleep/wake cycle is the engine's main cost at fixed rates. Measured on the development
//! VM (nested, 2 cores): one timer sleep and wake-up costs ~30 µs of CPU and ends 20–50 µs
//! late (p50); a loopback send that wakes an idle target costs the sender another ~15 µs.
//! The HTTP work itself is ~8 µs per request. So the engine wakes as few times as it can
//! without moving a send later than the host's own timer jitter:
//!
//! - **Responses never wake a shard that has a send coming and connections to spare.** The
//!   kernel stamps each received chunk (`SO_TIMESTAMPNS`), so a response's completion time
//!   is when its last bytes arrived, however late the shard reads it. The shard reads
//!   responses when it wakes to send — or within [`MAX_DEFER_NS`] — and wakes on the first
//!   completion only when no connection is free (a due request may be waiting for one),
//!   while a response is streaming in (a body larger than the socket buffer must be read as
//!   it comes, or the server stalls), or while the run drains.
//! - **Sends due within [`BATCH_WINDOW_NS`] of each other share a wake-up** once the gap
//!   between sends is shorter than that window (from [`BATCH_FROM_RATE`] per shard): every
//!   such send leaves at most one window late, which is below the host's wake-up jitter.
//!   Slower shards wake for each send.
//! - **A short spin to the due instant.** A shard wakes `early` before a due send and spins
//!   to it, so the send leaves on time instead of one wake-up latency late. `early` follows
//!   the wake-up lateness the shard measures, within a CPU budget: spinning may cost at most
//!   [`SPIN_SHARE`] of a core at the shard's rate, so it is generous at low rates (where it
//!   buys the most precision for the least CPU) and vanishes at high ones.
//!
//! Pure: the shard measures, this module decides.

/// Longest a shard defers reading completions while requests are in flight.
pub const MAX_DEFER_NS: u64 = 2_000_000;
/// Longest single sleep, so a stop is seen promptly even when nothing is due.
pub const MAX_WAIT_NS: u64 = 50_000_000;
/// Sends closer together than this may share a wake-up (see the module doc).
pub const BATCH_WINDOW_NS: u64 = 50_000;
/// Per-shard rate from which sends share wake-ups: the gap between sends is then at most
/// [`BATCH_WINDOW_NS`], and a wake-up per send would cost more CPU than the gap.
pub const BATCH_FROM_RATE: f64 = 20_000.0;
/// Share of a core a shard may spend spinning to due instants.
pub const SPIN_SHARE: f64 = 0.10;
/// Longest spin before a single send.
pub const EARLY_MAX_NS: u64 = 150_000;

/// A shard's wake-up strategy, from its rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pace {
    /// Sends due within this window of the first due one leave together (0: each alone).
    pub batch_ns: u64,
    /// Most a shard may wake before a due send to spin to it (0: never spins).
    pub early_cap_ns: u64,
}

impl Pace {
    /// The strategy for a shard sending `rate` requests per second at its busiest, with an
    /// explicit batching window if the user gave one (`--wake-window`).
    pub fn for_rate(rate: f64, window: Option<u64>) -> Pace {
        let batch_ns = window.unwrap_or(if rate >= BATCH_FROM_RATE { BATCH_WINDOW_NS } else { 0 });
        let early_cap_ns =
            if batch_ns > 0 || rate <= 0.0 { 0 } else { ((SPIN_SHARE * 1e9 / rate) as u64).min(EARLY_MAX_NS) };
        Pace { batch_ns, early_cap_ns }
    }
}

/// What a shard knows when it is about to sleep.
#[derive(Debug, Clone, Copy, Default)]
pub struct Situation {
    /// Now, ns since the run's start.
    pub now: u64,
    /// Intended time of the next request of the schedule, if any remain.
    pub next_due: Option<u64>,
    /// Whether that request is waiting for a connection (due already, none free).
    pub due_waits: bool,
    /// Earliest deadline of anything in flight (`u64::MAX`: none).
    pub deadline: u64,
    /// Requests in flight (including those waiting for their own connect).
    pub in_flight: u32,
    /// Connections free to take a request now (idle, or closed slots that can be opened).
    pub free: usize,
    /// A response is partly read and more of it is expected.
    pub streaming: bool,
    /// The run is stopping or its schedule is done: it waits for what is in flight, ending
    /// at this instant at the latest.
    pub draining_until: Option<u64>,
}

/// How long to sleep and what may end the sleep early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sleep {
    /// Wake at this instant (ns since start) at the latest.
    pub until: u64,
    /// Any completion ends the sleep; otherwise only the timer does.
    pub on_completion: bool,
    /// After waking, spin to this instant before sending (a due send), if not yet there.
    pub spin_to: Option<u64>,
}

/// The sleep for `s`, given the strategy `pace` and how early to wake for a send (`early`,
/// already within `pace.early_cap_ns`).
pub fn plan(s: &Situation, pace: &Pace, early: u64) -> Sleep {
    let mut until = s.now.saturating_add(MAX_WAIT_NS).min(s.deadline);
    let mut on_completion = s.streaming || s.free == 0;
    let mut spin_to = None;
    if let Some(end) = s.draining_until {
        // Nothing more is sent: finish what is in flight as soon as it completes.
        until = until.min(end);
        on_completion = true;
    } else if let Some(due) = s.next_due {
        if s.due_waits {
            // Due already and waiting for a connection: a completion frees one; at the
            // latest the request is dropped at its deadline (in `deadline`).
            on_completion = true;
        } else if pace.batch_ns > 0 {
            // Sends due within the window after the first leave with it.
            until = until.min(due.saturating_add(pace.batch_ns));
        } else {
            let wake = due.saturating_sub(early);
            until = until.min(wake);
            if wake < due {
                spin_to = Some(due);
            }
        }
    }
    if s.in_flight > 0 && !on_completion {
        until = until.min(s.now.saturating_add(MAX_DEFER_NS));
    }
    // Spin only after the wake-up for the send itself, never from an earlier one (a
    // deadline, the bound on deferred reads): that would spin for the whole gap.
    let spin_to = spin_to.filter(|&due| due.saturating_sub(until) <= early);
    Sleep { until: until.max(s.now), on_completion, spin_to }
}

/// Running estimate of how late timer wake-ups end (mean plus one mean deviation), from
/// which a shard decides how early to wake.
#[derive(Debug, Clone, Copy, Default)]
pub struct Lateness {
    mean: f64,
    deviation: f64,
    samples: u64,
}

impl Lateness {
    /// One timer wake-up ended `late_ns` after its target.
    pub fn observe(&mut self, late_ns: u64) {
        // Ignore outliers for the estimate (a preemption, a stopped process): they are not
        // the jitter a spin can absorb, and they would make every later wake spin longer.
        let x = (late_ns as f64).min(4.0 * EARLY_MAX_NS as f64);
        self.samples += 1;
        let k = if self.samples < 32 { 1.0 / self.samples as f64 } else { 1.0 / 32.0 };
        let err = x - self.mean;
        self.mean += k * err;
        self.deviation += k * (err.abs() - self.deviation);
    }

    /// How early to wake so that most wake-ups land before the due instant, capped.
    pub fn early(&self, cap_ns: u64) -> u64 {
        if cap_ns == 0 || self.samples == 0 {
            return 0;
        }
        ((self.mean + self.deviation).max(0.0) as u64).min(cap_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    fn at(now: u64) -> Situation {
        Situation { now, deadline: u64::MAX, free: 8, ..Default::default() }
    }

    #[test]
    fn the_strategy_follows_the_rate() {
        let slow = Pace::for_rate(500.0, None);
        assert_eq!(slow.batch_ns, 0);
        assert_eq!(slow.early_cap_ns, EARLY_MAX_NS, "10 % of a core at 500/s is 200 µs, capped");
        let mid = Pace::for_rate(10_000.0, None);
        assert_eq!((mid.batch_ns, mid.early_cap_ns), (0, 10 * US));
        let fast = Pace::for_rate(40_000.0, None);
        assert_eq!((fast.batch_ns, fast.early_cap_ns), (BATCH_WINDOW_NS, 0));
        assert_eq!(Pace::for_rate(500.0, Some(0)).batch_ns, 0);
        assert_eq!(Pace::for_rate(500.0, Some(200 * US)).batch_ns, 200 * US);
    }

    #[test]
    fn a_shard_with_spare_connections_sleeps_to_its_next_send_through_responses() {
        let pace = Pace::for_rate(1000.0, None);
        let s = Situation { next_due: Some(1_000 * US), in_flight: 3, ..at(100 * US) };
        let sleep = plan(&s, &pace, 40 * US);
        assert_eq!(sleep, Sleep { until: 960 * US, on_completion: false, spin_to: Some(1_000 * US) });
    }

    #[test]
    fn responses_wake_the_shard_when_no_connection_is_free_or_one_is_streaming() {
        let pace = Pace::for_rate(1000.0, None);
        let s = Situation { next_due: Some(1_000 * US), in_flight: 8, free: 0, ..at(100 * US) };
        assert!(plan(&s, &pace, 0).on_completion);
        let s = Situation { next_due: Some(1_000 * US), in_flight: 1, streaming: true, ..at(100 * US) };
        assert!(plan(&s, &pace, 0).on_completion);
        let s = Situation { next_due: Some(0), due_waits: true, in_flight: 8, free: 0, ..at(100 * US) };
        assert!(plan(&s, &pace, 0).on_completion);
    }

    #[test]
    fn deferred_responses_are_read_within_the_bound_and_deadlines_are_kept() {
        let pace = Pace::for_rate(10.0, None);
        let s = Situation { next_due: Some(100_000 * US), in_flight: 1, ..at(0) };
        assert_eq!(plan(&s, &pace, 0).until, MAX_DEFER_NS);
        // That earlier wake-up does not spin all the way to the send.
        let s = Situation { next_due: Some(10_000 * US), in_flight: 1, ..at(0) };
        assert_eq!(plan(&s, &Pace::for_rate(100.0, None), 100 * US).spin_to, None);
        let s = Situation { next_due: Some(100_000 * US), in_flight: 1, deadline: 700 * US, ..at(0) };
        assert_eq!(plan(&s, &pace, 0).until, 700 * US);
        // Nothing in flight, nothing due soon: one long sleep.
        let s = Situation { next_due: Some(900_000 * US), ..at(0) };
        assert_eq!(plan(&s, &pace, 0).until, MAX_WAIT_NS);
    }

    #[test]
    fn batching_moves_a_send_by_at_most_the_window() {
        let pace = Pace::for_rate(40_000.0, None);
        let s = Situation { next_due: Some(110 * US), ..at(100 * US) };
        let sleep = plan(&s, &pace, 0);
        assert_eq!(sleep.until, 110 * US + BATCH_WINDOW_NS);
        assert_eq!(sleep.spin_to, None);
        // Already due: leave within the window from now.
        let s = Situation { next_due: Some(90 * US), ..at(100 * US) };
        assert!(plan(&s, &pace, 0).until <= 90 * US + BATCH_WINDOW_NS);
    }

    #[test]
    fn draining_wakes_on_every_completion_until_its_end() {
        let pace = Pace::for_rate(1000.0, None);
        let s = Situation { in_flight: 2, draining_until: Some(5_000 * US), ..at(0) };
        assert_eq!(plan(&s, &pace, 0), Sleep { until: 5_000 * US, on_completion: true, spin_to: None });
    }

    #[test]
    fn the_early_margin_learns_the_lateness_and_keeps_its_cap() {
        let mut l = Lateness::default();
        assert_eq!(l.early(100 * US), 0, "nothing measured yet");
        for late in [30, 40, 50, 40, 30, 40, 50, 40] {
            l.observe(late * US);
        }
        let early = l.early(EARLY_MAX_NS);
        assert!((40 * US..=55 * US).contains(&early), "{early}");
        assert_eq!(l.early(10 * US), 10 * US);
        assert_eq!(l.early(0), 0);
        // One 300 ms stop does not teach the shard to spin for ever.
        l.observe(300_000 * US);
        assert!(l.early(EARLY_MAX_NS) <= EARLY_MAX_NS);
    }
}
