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
//! - **Sends share a wake-up within the host's own jitter** from [`BATCH_FROM_RATE`] per
//!   shard, where a wake-up per send would cost more CPU than the gap between sends: the shard
//!   waits past a due send by the p99 of its own measured wake-up lateness (at least
//!   [`BATCH_MIN_NS`], the verdict's lowest floor, at most [`BATCH_WINDOW_NS`]), so batching
//!   never moves a send later than the host's noise floor already does. Slower shards wake
//!   for each send.
//! - **Sends due soon leave with the one that woke the shard** ([`SEND_AHEAD_NS`], or
//!   `--send-ahead`): a shard that wakes to send also sends what falls due within the next
//!   100 µs, up to that much before its time, so at 10,000 req/s per shard two sends share a
//!   wake-up with neither late. A request sent ahead is measured from when it left (never
//!   from its later intended time, which would shorten its latency); the rate over any span
//!   longer than the window is the schedule's. Measured on the Firecracker VM, one shard,
//!   nginx on the other core, 64 connections, interleaved, medians of 2 rounds, requests per
//!   CPU-second: 10,000 req/s 34,400 → 49,200 (wrk2 49,000), send lag p99 ≤ 0.02 ms;
//!   40,000 req/s 87,800 → 105,900 (wrk2 75,700). A wider window (`--send-ahead`, up to
//!   10 ms) sends in rounds, as h2load's `--rps` does: one wake-up sends the next 10 ms of
//!   the schedule. Its answers are still read within [`MAX_DEFER_NS`]: a read is what sends
//!   the ACK a delayed ACK holds back, and answers left unread for 10 ms made nginx send
//!   tail loss probes — retransmissions (`nstat` `TcpExtTCPLossProbes`: 342 in a 4 s h2c run
//!   of 400 rounds at 10,000 req/s; none reading within 2 ms, none with h2load, which reads
//!   at once).
//! - **Woken early, a send leaves at once** — ahead of its time, within the send-ahead
//!   window. A shard wakes `early` before a due send, `early` the p99 of the wake-up
//!   lateness it measures (so 99 % of wake-ups land before the due instant), at most the
//!   send-ahead window, and sends on waking: the send is early by what the wake-up did not
//!   use, measured from when it left, and late only past the p99. Measured against nginx on
//!   the development VM (interleaved, requests per CPU-second): 1,000 req/s 15,800 → 25,400
//!   (h2c) and 14,200 → 25,500 (HTTP/1.1), send lag p99 0.01 ms either way — the shard used to
//!   spin from the early wake-up to the due instant, which at 1,000 req/s was most of its CPU.
//!   - **It spins to the due instant** instead when nothing may leave early
//!     (`--send-ahead 0`), and when the shard is fast enough for the send-ahead window to
//!     pair its sends (one gap between sends at most the window: 10,000 req/s per shard by
//!     default): woken early it would send the first ahead and miss the next, so it spins to
//!     the first and both leave together. The spin costs at most [`SPIN_SHARE`] of a core at
//!     the shard's rate (small at these rates, and a wake-up later than `early` does not spin).
//!
//! Pure: the shard measures, this module decides.

/// Longest a shard defers reading completions while requests are in flight. Reading is
/// what sends the ACK the kernel's delayed ACK holds back: much later, and the server's tail
/// loss probe retransmits its answer (see the module doc).
pub const MAX_DEFER_NS: u64 = 2_000_000;
/// Longest single sleep, so a stop is seen promptly even when nothing is due.
pub const MAX_WAIT_NS: u64 = 50_000_000;
/// Longest a send waits to share a wake-up by default (see the module doc).
pub const BATCH_WINDOW_NS: u64 = 100_000;
/// Shortest batching window: the verdict's lowest noise floor
/// ([`FLOOR_MIN_MS`](crate::verdict::floor::FLOOR_MIN_MS), 50 µs: below it no loader that
/// sleeps resolves anything), so a send that waits this long for company is never later than
/// what the verdict already takes for the host's resolution. With idle CPUs polling the
/// measured lateness is 20–40 µs p99 on the development VM, and a window that followed it down
/// woke the shard more often for nothing: at 40,000 req/s on one shard, 91,500 requests per
/// CPU-second with a 25 µs least window, 93,300 with 50 µs (interleaved, 3 rounds, medians).
pub const BATCH_MIN_NS: u64 = 50_000;
/// Per-shard rate from which sends share wake-ups: the gap between sends is then at most
/// [`BATCH_WINDOW_NS`], and a wake-up per send would cost more CPU than the gap.
pub const BATCH_FROM_RATE: f64 = 20_000.0;
/// How long before its intended time a send may leave with a wake-up that sends another
/// one (see the module doc): the longest batching window, so a send moves by at most this
/// much either way.
pub const SEND_AHEAD_NS: u64 = BATCH_WINDOW_NS;
/// Send-ahead windows from this long send in rounds rather than in pairs: the early margin
/// (at most [`EARLY_MAX_NS`]) is a small part of such a window, so a shard woken early sends
/// at once (what falls due at the window's far end waits for the next round) rather than
/// spin to the due instant. At 1,000 req/s in 10 ms rounds the spin was a third of the
/// shard's CPU.
pub const ROUNDS_FROM_NS: u64 = 1_000_000;
/// Share of a core a shard may spend spinning to due instants (when it spins: see
/// [`Pace::spins`]).
pub const SPIN_SHARE: f64 = 0.15;
/// Longest a shard wakes before a single send (spinning or not).
pub const EARLY_MAX_NS: u64 = 200_000;

/// A shard's wake-up strategy, from its rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pace {
    /// Sends due within this window of the first due one leave together (0: each alone); the
    /// most the window may be when it follows the lateness (`adaptive`).
    pub batch_ns: u64,
    /// The window follows the measured wake-up lateness (the default), rather than being
    /// the fixed `--wake-window`.
    pub adaptive: bool,
    /// Most a shard may wake before a due send (0: never early).
    pub early_cap_ns: u64,
    /// Whether a shard that wakes early spins to the due instant (`--send-ahead 0`: nothing
    /// leaves before its time) rather than sending at once, ahead of it.
    pub spins: bool,
    /// A wake-up that sends also sends what falls due within this much after it, early
    /// (0: each send at or after its time).
    pub ahead_ns: u64,
}

impl Pace {
    /// The strategy for a shard sending `rate` requests per second at its busiest, with an
    /// explicit batching window if the user gave one (`--wake-window`) and an explicit
    /// send-ahead window (`--send-ahead`).
    pub fn for_rate(rate: f64, window: Option<u64>, ahead: Option<u64>) -> Pace {
        let adaptive = window.is_none() && rate >= BATCH_FROM_RATE;
        let batch_ns = window.unwrap_or(if adaptive { BATCH_WINDOW_NS } else { 0 });
        let ahead_ns = ahead.unwrap_or(SEND_AHEAD_NS);
        // Sends leave early only within the send-ahead window: a shard with none spins to
        // each due instant, and so does one fast enough for that window to pair its sends
        // (one gap between sends at most the window): woken early, it would send the first
        // ahead and miss the next, so it spins to the first and sends both — unless the
        // window is wide enough to send in rounds.
        let spins = ahead_ns == 0 || (rate * ahead_ns as f64 >= 1e9 && ahead_ns < ROUNDS_FROM_NS);
        let early_cap_ns = if batch_ns > 0 || rate <= 0.0 {
            0
        } else if spins {
            ((SPIN_SHARE * 1e9 / rate) as u64).min(EARLY_MAX_NS)
        } else {
            ahead_ns.min(EARLY_MAX_NS)
        };
        Pace { batch_ns, adaptive, early_cap_ns, spins, ahead_ns }
    }

    /// A shard awake at `now`, the schedule's next request intended at `next_due`, sends
    /// every request intended up to this instant: those within the send-ahead window when the
    /// wake-up is for a send (the next one is due, or within the early margin), else only
    /// those due — a wake-up to read answers sends nothing early, or a wide window would
    /// slide with every such wake-up rather than send in rounds.
    pub fn sends_until(&self, now: u64, next_due: Option<u64>) -> u64 {
        match next_due {
            Some(due) if due <= now.saturating_add(self.early_cap_ns) => now.saturating_add(self.ahead_ns),
            _ => now,
        }
    }

    /// The batching window now, given the measured p99 wake-up lateness.
    pub fn window(&self, late_p99_ns: u64) -> u64 {
        if self.adaptive { late_p99_ns.clamp(BATCH_MIN_NS, self.batch_ns) } else { self.batch_ns }
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

/// The sleep for `s`, given how early to wake for a send (`early`, within the pace's
/// `early_cap_ns`), whether to spin from there to the due instant (`spins`) and the batching
/// window now (`window`, see [`Pace::window`]).
pub fn plan(s: &Situation, early: u64, spins: bool, window: u64) -> Sleep {
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
        } else if window > 0 {
            // Sends due within the window after the first leave with it.
            until = until.min(due.saturating_add(window));
        } else {
            let wake = due.saturating_sub(early);
            if spins {
                until = until.min(wake);
                if wake < due {
                    spin_to = Some(due);
                }
            } else {
                // Woken early, the send leaves at once, ahead of its time; if it could not
                // (no idle connection yet), it waits for its time rather than loop to it.
                until = until.min(if wake > s.now { wake } else { due });
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

/// Wake-ups the lateness estimate remembers.
const LATENESS_WINDOW: usize = 512;
/// The estimate is recomputed every this many wake-ups.
const LATENESS_EVERY: u32 = 64;

/// Running p99 of how late timer wake-ups end, over the last [`LATENESS_WINDOW`] of them,
/// from which a shard decides how early to wake.
#[derive(Debug, Clone)]
pub struct Lateness {
    recent: Vec<u64>,
    next: usize,
    since_estimate: u32,
    p99_ns: u64,
}

impl Default for Lateness {
    fn default() -> Self {
        Lateness { recent: Vec::with_capacity(LATENESS_WINDOW), next: 0, since_estimate: 0, p99_ns: 0 }
    }
}

impl Lateness {
    /// One timer wake-up ended `late_ns` after its target.
    pub fn observe(&mut self, late_ns: u64) {
        // Outliers (a preemption, a stopped process) are not jitter a spin can absorb: capped,
        // they cannot teach the shard to spin for ever.
        let x = late_ns.min(2 * EARLY_MAX_NS);
        if self.recent.len() < LATENESS_WINDOW {
            self.recent.push(x);
        } else {
            self.recent[self.next] = x;
        }
        self.next = (self.next + 1) % LATENESS_WINDOW;
        self.since_estimate += 1;
        if self.since_estimate >= LATENESS_EVERY || self.recent.len() < LATENESS_EVERY as usize {
            self.since_estimate = 0;
            let mut sorted = self.recent.clone();
            let k = (sorted.len() * 99 / 100).min(sorted.len() - 1);
            self.p99_ns = *sorted.select_nth_unstable(k).1;
        }
    }

    /// How early to wake so that 99 % of wake-ups land before the due instant, capped.
    pub fn early(&self, cap_ns: u64) -> u64 {
        self.p99_ns.min(cap_ns)
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
    fn the_shortest_window_is_the_verdicts_lowest_floor() {
        assert_eq!(BATCH_MIN_NS as f64 / 1e6, crate::verdict::floor::FLOOR_MIN_MS);
    }

    #[test]
    fn the_strategy_follows_the_rate() {
        let slow = Pace::for_rate(500.0, None, None);
        assert_eq!(slow.batch_ns, 0);
        assert_eq!((slow.early_cap_ns, slow.spins), (SEND_AHEAD_NS, false), "early within the send-ahead window");
        let strict = Pace::for_rate(500.0, None, Some(0));
        assert_eq!(
            (strict.early_cap_ns, strict.spins),
            (EARLY_MAX_NS, true),
            "15 % of a core at 500/s is 300 µs, capped"
        );
        assert!(!Pace::for_rate(9_000.0, None, None).spins);
        let mid = Pace::for_rate(10_000.0, None, None);
        assert_eq!((mid.batch_ns, mid.early_cap_ns, mid.spins), (0, 15 * US, true), "pairs its sends: spins");
        let fast = Pace::for_rate(40_000.0, None, None);
        assert_eq!((fast.batch_ns, fast.early_cap_ns), (BATCH_WINDOW_NS, 0));
        // The default window follows the host's lateness, within its bounds.
        assert_eq!(fast.window(0), BATCH_MIN_NS);
        assert_eq!(fast.window(60 * US), 60 * US);
        assert_eq!(fast.window(5_000 * US), BATCH_WINDOW_NS);
        assert_eq!(Pace::for_rate(500.0, Some(0), None).batch_ns, 0);
        // 10 ms rounds: woken early, it sends at once (no spin), early by at most the cap.
        let rounds = Pace::for_rate(1_000.0, None, Some(10_000 * US));
        assert_eq!((rounds.batch_ns, rounds.early_cap_ns, rounds.spins), (0, EARLY_MAX_NS, false));
        assert!(Pace::for_rate(2_000.0, None, Some(ROUNDS_FROM_NS - 1)).spins, "below the rounds: pairs, spins");
        let fixed = Pace::for_rate(500.0, Some(200 * US), None);
        assert_eq!((fixed.batch_ns, fixed.window(0)), (200 * US, 200 * US), "--wake-window is taken as given");
    }

    #[test]
    fn a_wake_up_sends_what_falls_due_within_the_ahead_window() {
        let pace = Pace::for_rate(10_000.0, None, None);
        assert_eq!(pace.ahead_ns, SEND_AHEAD_NS);
        // Woken for a send due at 1 ms: the next, 100 µs later at 10,000 req/s, goes with it;
        // the one after waits for its own wake-up.
        let due = Some(1_000 * US);
        assert_eq!(pace.sends_until(1_000 * US, due), 1_100 * US);
        assert!(1_200 * US > pace.sends_until(1_000 * US, due));
        // Woken early for it, within the early margin: the same.
        assert_eq!(pace.sends_until(1_000 * US - pace.early_cap_ns, due), 1_100 * US - pace.early_cap_ns);
        let strict = Pace::for_rate(10_000.0, None, Some(0));
        assert_eq!(strict.sends_until(1_000 * US, due), 1_000 * US, "--send-ahead 0: nothing before its time");
        assert_eq!(Pace::for_rate(40_000.0, None, Some(30 * US)).sends_until(u64::MAX, due), u64::MAX);
    }

    #[test]
    fn a_wake_up_to_read_answers_sends_nothing_early() {
        // 10 ms rounds at 1,000 req/s: the round at 0 sent up to 10 ms; woken at 2 ms to read
        // its answers, the shard sends nothing (the next, at 10.5 ms, waits for its round).
        let rounds = Pace::for_rate(1_000.0, None, Some(10_000 * US));
        assert_eq!(rounds.sends_until(0, Some(0)), 10_000 * US);
        assert_eq!(rounds.sends_until(2_000 * US, Some(10_500 * US)), 2_000 * US);
        assert_eq!(
            rounds.sends_until(10_500 * US - rounds.early_cap_ns, Some(10_500 * US)),
            20_500 * US - rounds.early_cap_ns
        );
        assert_eq!(rounds.sends_until(2_000 * US, None), 2_000 * US, "nothing left to send");
    }

    #[test]
    fn a_shard_with_spare_connections_sleeps_to_its_next_send_through_responses() {
        let s = Situation { next_due: Some(1_000 * US), in_flight: 3, ..at(100 * US) };
        let sleep = plan(&s, 40 * US, true, 0);
        assert_eq!(sleep, Sleep { until: 960 * US, on_completion: false, spin_to: Some(1_000 * US) });
    }

    #[test]
    fn below_the_pairing_rate_a_shard_wakes_early_and_sends_at_once() {
        let s = Situation { next_due: Some(1_000 * US), in_flight: 3, ..at(100 * US) };
        assert_eq!(plan(&s, 40 * US, false, 0), Sleep { until: 960 * US, on_completion: false, spin_to: None });
        // Within the early margin already, and not sent (no idle connection for it): it
        // waits for its time rather than wake again at once.
        let s = Situation { next_due: Some(1_000 * US), ..at(980 * US) };
        assert_eq!(plan(&s, 40 * US, false, 0).until, 1_000 * US);
        assert_eq!(
            plan(&s, 40 * US, true, 0),
            Sleep { until: 980 * US, on_completion: false, spin_to: Some(1_000 * US) }
        );
    }

    #[test]
    fn responses_wake_the_shard_when_no_connection_is_free_or_one_is_streaming() {
        let pace = Pace::for_rate(1000.0, None, None);
        let s = Situation { next_due: Some(1_000 * US), in_flight: 8, free: 0, ..at(100 * US) };
        assert!(plan(&s, 0, false, pace.window(0)).on_completion);
        let s = Situation { next_due: Some(1_000 * US), in_flight: 1, streaming: true, ..at(100 * US) };
        assert!(plan(&s, 0, false, pace.window(0)).on_completion);
        let s = Situation { next_due: Some(0), due_waits: true, in_flight: 8, free: 0, ..at(100 * US) };
        assert!(plan(&s, 0, false, pace.window(0)).on_completion);
    }

    #[test]
    fn deferred_responses_are_read_within_the_bound_and_deadlines_are_kept() {
        let pace = Pace::for_rate(10.0, None, None);
        let s = Situation { next_due: Some(100_000 * US), in_flight: 1, ..at(0) };
        assert_eq!(plan(&s, 0, false, pace.window(0)).until, MAX_DEFER_NS);
        // That earlier wake-up does not spin all the way to the send.
        let s = Situation { next_due: Some(10_000 * US), in_flight: 1, ..at(0) };
        assert_eq!(plan(&s, 100 * US, true, 0).spin_to, None);
        let s = Situation { next_due: Some(100_000 * US), in_flight: 1, deadline: 700 * US, ..at(0) };
        assert_eq!(plan(&s, 0, false, pace.window(0)).until, 700 * US);
        // Nothing in flight, nothing due soon: one long sleep.
        let s = Situation { next_due: Some(900_000 * US), ..at(0) };
        assert_eq!(plan(&s, 0, false, pace.window(0)).until, MAX_WAIT_NS);
    }

    #[test]
    fn batching_moves_a_send_by_at_most_the_window() {
        let pace = Pace::for_rate(40_000.0, None, None);
        let s = Situation { next_due: Some(110 * US), ..at(100 * US) };
        let sleep = plan(&s, 0, false, pace.window(0));
        assert_eq!(sleep.until, 110 * US + BATCH_MIN_NS);
        assert_eq!(sleep.spin_to, None);
        // Already due: leave within the window from now.
        let s = Situation { next_due: Some(90 * US), ..at(100 * US) };
        assert!(plan(&s, 0, false, pace.window(0)).until <= 90 * US + BATCH_MIN_NS);
    }

    #[test]
    fn draining_wakes_on_every_completion_until_its_end() {
        let pace = Pace::for_rate(1000.0, None, None);
        let s = Situation { in_flight: 2, draining_until: Some(5_000 * US), ..at(0) };
        assert_eq!(plan(&s, 0, false, pace.window(0)), Sleep { until: 5_000 * US, on_completion: true, spin_to: None });
    }

    #[test]
    fn the_early_margin_is_the_p99_of_the_lateness_within_its_cap() {
        let mut l = Lateness::default();
        assert_eq!(l.early(100 * US), 0, "nothing measured yet");
        // 1000 wake-ups: 30–69 µs late, one in a hundred 150 µs late.
        for i in 0..1000u64 {
            l.observe(if i % 100 == 99 { 150 * US } else { (30 + i % 40) * US });
        }
        let early = l.early(EARLY_MAX_NS);
        assert!((69 * US..=150 * US).contains(&early), "{early}");
        assert_eq!(l.early(10 * US), 10 * US);
        assert_eq!(l.early(0), 0);
        // A 300 ms stop does not teach the shard to spin for ever.
        for _ in 0..600 {
            l.observe(300_000 * US);
        }
        assert_eq!(l.early(u64::MAX), 2 * EARLY_MAX_NS);
        assert_eq!(l.early(EARLY_MAX_NS), EARLY_MAX_NS);
    }
}
