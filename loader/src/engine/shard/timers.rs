//! The shard's wake-up timers, armed one wake-up ahead.
//!
//! A timed `io_uring_enter` arms its timer when the shard goes to sleep, and that timer is
//! always the CPU's earliest, so arming it reprograms the local timer — on a VM, an exit to
//! the hypervisor (a write of the TSC deadline) charged to the shard. Measured on the
//! development VM (nested, 2 cores): arming and cancelling a timer 50 µs ahead costs 10.4 µs,
//! one 500 ms ahead 0.7 µs; a thread sleeping to deadlines 100 µs apart spends 13.0 µs of CPU
//! per wake-up when it arms each one as it goes to sleep, 8.2 µs when the next one is already
//! armed (`timerfd`s, one wake-up ahead). The difference is the reprogramming: when the
//! armed timer fires, the kernel programs the next one from the interrupt, and arming one
//! later than that costs no reprogramming at all.
//!
//! So the shard sleeps on `IORING_OP_TIMEOUT` requests at absolute times (a firing timeout
//! ends a wait for completions, whatever the count asked for), and when it goes to sleep
//! until `t` after a sleep until `t - d`, it also arms `t + d`: at a fixed rate the schedule's
//! wake-ups are evenly spaced, and the next sleep finds its timer armed. A guess that turns
//! out wrong costs what the timed wait cost anyway: a timer armed earlier than the next
//! sleep's is removed (it would wake the shard before its time), one later is left to fire or
//! to serve a later sleep. Nothing here decides when the shard wakes — `pace::plan` does.

use io_uring::{opcode, squeue, types};

/// Connection field of a timer's `user_data`: no connection has it.
pub(super) const TIMER_CONN: u64 = u32::MAX as u64;
/// A timer's `user_data` low byte; its id is in bits 8..32.
const OP_TIMER: u64 = 0xf0;
/// The `user_data` of a timer removal (its completion is ignored).
const OP_TIMER_REMOVE: u64 = 0xf1;
/// A timer this much before a sleep's target serves for it (the schedule's instants are
/// whole nanoseconds of a real-valued rate, so evenly spaced sleeps differ by a few).
pub(in crate::engine) const SERVES_WITHIN_NS: u64 = 1_000;
/// Longest gap between two sleeps from which the next one is guessed.
const GUESS_UP_TO_NS: u64 = 10_000_000;

/// Whether a timer armed for `armed` serves a sleep until `until` ([`SERVES_WITHIN_NS`]).
pub(in crate::engine) fn serves(armed: u64, until: u64) -> bool {
    armed <= until && until - armed <= SERVES_WITHIN_NS
}

/// The next sleep's target guessed from the last two, `last` then `target`: at a fixed rate
/// wake-ups are evenly spaced. `None` when they are not in order or too far apart.
pub(in crate::engine) fn next_guess(last: u64, target: u64) -> Option<u64> {
    (target > last && target - last <= GUESS_UP_TO_NS).then(|| target + (target - last))
}

/// A sleep whose target is nearer than this keeps its back-stop within [`BACKSTOP_CAP_NS`]
/// of the target (see [`backstop`]).
const BACKSTOP_NEAR_NS: u64 = 100_000;
/// The latest a near sleep's back-stop ends after its target: the most a race makes it late.
const BACKSTOP_CAP_NS: u64 = 200_000;
/// A back-stop just after the next armed timer only when that timer is at most this far after
/// the target (sleeps evenly spaced at 500 req/s per shard and faster): the most a race can
/// make such a sleep late.
const BACKSTOP_FAR_NS: u64 = 2_000_000;

/// The back-stop of a sleep on the armed timers: the end of the wait's own timeout, for a
/// sleep until `until` whose timer is armed at `target`, `now` (run clock) when the shard
/// decided to sleep, `latest` the latest timer armed after the target.
///
/// A timer that fires before the kernel starts the wait (after the sends it submits and the
/// answers it reads first) does not end it; the back-stop does. Just after the latest timer
/// armed, it is never the CPU's next timer when the sleep's fires, and the kernel cancels it
/// at the wake-up without reprogramming the CPU's timer. A back-stop that is the next timer
/// costs a reprogramming at every wake-up (a write of the TSC deadline: on a VM an exit to
/// the hypervisor): at 1,000 req/s on one shard on the development VM, 6,000 in 6 s, and
/// without them the loader did 24,400 h2c requests per CPU-second against 20,200 (6
/// interleaved pairs, each pair in its favour). The race needs the shard to stall between
/// its decision and the wait for the whole gap to the target; so a sleep whose target is
/// near ([`BACKSTOP_NEAR_NS`]), or whose next timer is far ([`BACKSTOP_FAR_NS`]), keeps its
/// back-stop at most [`BACKSTOP_CAP_NS`] after the target — a race costs at most that much
/// lateness, which the wake-up record shows — and any other is late by at most
/// `BACKSTOP_FAR_NS` after a stall of at least `BACKSTOP_NEAR_NS`. Without a timer armed
/// after the target, the back-stop is the sleep's end.
pub(in crate::engine) fn backstop(target: u64, now: u64, latest: Option<u64>, until: u64) -> u64 {
    match latest {
        None => until,
        Some(d) if target >= now + BACKSTOP_NEAR_NS && d <= target + BACKSTOP_FAR_NS => d + 1_000,
        Some(d) => (d + 1_000).min(target + BACKSTOP_CAP_NS),
    }
}

/// Timespecs kept for the kernel to read at submission: more than can be pushed between two
/// submissions (at most three per sleep, and every sleep submits).
const SLOTS: usize = 8;

/// Timers armed on the ring and the guess for the next sleep.
pub(super) struct WakeTimers {
    /// (deadline on the run clock, id) of each timer armed and not yet seen to complete.
    armed: Vec<(u64, u32)>,
    /// Where each pushed timer's deadline lives until the kernel copies it.
    specs: Box<[types::Timespec; SLOTS]>,
    next_id: u32,
    /// The target of the last sleep on the timer, if the one before it was one too.
    last_until: Option<u64>,
}

impl WakeTimers {
    pub(super) fn new() -> WakeTimers {
        WakeTimers {
            armed: Vec::with_capacity(4),
            specs: Box::new([types::Timespec::new(); SLOTS]),
            next_id: 0,
            last_until: None,
        }
    }

    /// A sleep until `until` that only the timer ends (run clock; `now` is the run clock
    /// now): queue what it needs through `push`, with `absolute` turning run-clock instants
    /// into the ring's clock. Returns the instant the shard will wake at: `until`, or a timer
    /// already armed at most [`SERVES_WITHIN_NS`] before it.
    ///
    /// Not for a sleep that a completion may end: what it pushes completes at once when it
    /// removes a timer, which would end such a wait at once (see `Shard::wait`).
    pub(super) fn sleep(
        &mut self,
        until: u64,
        now: u64,
        absolute: impl Fn(u64) -> types::Timespec,
        mut push: impl FnMut(squeue::Entry),
    ) -> u64 {
        let serving = self.armed.iter().map(|&(d, _)| d).filter(|&d| serves(d, until)).max();
        let target = match serving {
            Some(d) if d > now => d,
            _ => {
                push(self.arm(until, &absolute));
                until
            }
        };
        // A timer between now and the target would wake the shard for nothing.
        let mut k = 0;
        while k < self.armed.len() {
            let (d, id) = self.armed[k];
            if d > now && d < target {
                push(
                    opcode::TimeoutRemove::new(user_data(OP_TIMER, id))
                        .build()
                        .user_data(user_data(OP_TIMER_REMOVE, id)),
                );
                self.armed.swap_remove(k);
            } else {
                k += 1;
            }
        }
        // The next sleep, guessed from the spacing of the last two.
        if let Some(next) = self.last_until.replace(target).and_then(|last| next_guess(last, target))
            && !self.armed.iter().any(|&(d, _)| serves(d, next))
        {
            push(self.arm(next, &absolute));
        }
        target
    }

    /// A sleep off the armed timers came between: the next one on them starts the rhythm
    /// again (nothing is guessed from the spacing across it).
    pub(super) fn off_rhythm(&mut self) {
        self.last_until = None;
    }

    /// The latest timer armed after `at`.
    pub(super) fn latest_after(&self, at: u64) -> Option<u64> {
        self.armed.iter().map(|&(d, _)| d).filter(|&d| d > at).max()
    }

    /// Whether `user_data` is one of these timers' (or their removals'); a timer's own
    /// completion (fired, or removed) forgets it.
    pub(super) fn completed(&mut self, ud: u64) -> bool {
        if ud >> 32 != TIMER_CONN {
            return false;
        }
        if ud & 0xff == OP_TIMER {
            let id = ((ud >> 8) & 0xff_ffff) as u32;
            self.armed.retain(|&(_, i)| i != id);
        }
        true
    }

    fn arm(&mut self, at: u64, absolute: &impl Fn(u64) -> types::Timespec) -> squeue::Entry {
        let id = self.next_id;
        self.next_id = (self.next_id + 1) & 0xff_ffff;
        let slot = &mut self.specs[id as usize % SLOTS];
        *slot = absolute(at);
        self.armed.push((at, id));
        // The kernel copies the timespec when it takes the entry, which the sleep's own enter
        // does (a sleep whose entries do not all fit the queue does not use these timers).
        opcode::Timeout::new(slot as *const types::Timespec)
            .flags(types::TimeoutFlags::ABS)
            .build()
            .user_data(user_data(OP_TIMER, id))
    }
}

fn user_data(op: u64, id: u32) -> u64 {
    (TIMER_CONN << 32) | (u64::from(id) << 8) | op
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    fn sleep(t: &mut WakeTimers, until: u64, now: u64) -> (u64, usize) {
        let mut pushed = 0;
        let target = t.sleep(until, now, |_| types::Timespec::new(), |_| pushed += 1);
        (target, pushed)
    }

    #[test]
    fn evenly_spaced_sleeps_find_their_timer_armed() {
        let mut t = WakeTimers::new();
        // First sleep: its own timer, no guess yet.
        assert_eq!(sleep(&mut t, 100 * US, 0), (100 * US, 1));
        // Second: its own timer and the guess for the third (300).
        assert_eq!(sleep(&mut t, 200 * US, 100 * US), (200 * US, 2));
        // Third: armed already (a nanosecond early serves); the fourth is guessed.
        assert_eq!(sleep(&mut t, 300 * US + 1, 200 * US), (300 * US, 1));
        assert_eq!(t.armed.iter().filter(|&&(d, _)| d == 400 * US - 1 || d == 400 * US).count(), 1);
    }

    #[test]
    fn a_wrong_guess_is_removed_when_it_would_wake_the_shard_early() {
        let mut t = WakeTimers::new();
        sleep(&mut t, 100 * US, 0);
        sleep(&mut t, 200 * US, 100 * US); // guesses 300
        // The next sleep is to 350: its own timer, the 300 one removed, 500 guessed.
        assert_eq!(sleep(&mut t, 350 * US, 200 * US), (350 * US, 3));
        assert!(!t.armed.iter().any(|&(d, _)| d == 300 * US));
        // A sleep that a completion may end (off the timers) breaks the rhythm: nothing is
        // guessed across it.
        t.off_rhythm();
        let before = t.armed.len();
        let (target, pushed) = sleep(&mut t, 500 * US, 400 * US);
        assert_eq!((target, pushed), (500 * US, 0), "the 500 guessed earlier serves, and nothing more is guessed");
        assert_eq!(t.armed.len(), before);
    }

    #[test]
    fn the_back_stop_is_never_the_next_timer_unless_a_race_is_near() {
        // 1,000 req/s: the target 900 µs away, the next timer 1 ms after it: just after that.
        assert_eq!(backstop(1_000 * US, 100 * US, Some(2_000 * US), 1_000 * US), 2_001 * US);
        // 40,000 req/s: the next timer 25 µs after the target, the back-stop just after it.
        assert_eq!(backstop(1_000 * US, 800 * US, Some(1_025 * US), 1_000 * US), 1_026 * US);
        // The target 50 µs away: a stall could lose it, so at most 200 µs after it.
        assert_eq!(backstop(1_000 * US, 950 * US, Some(2_000 * US), 1_000 * US), 1_200 * US);
        // The next timer far (a guess 5 ms on): the same bound.
        assert_eq!(backstop(1_000 * US, 100 * US, Some(6_000 * US), 1_000 * US), 1_200 * US);
        // No timer after the target: the sleep's end.
        assert_eq!(backstop(1_000 * US, 100 * US, None, 1_000 * US), 1_000 * US);
    }

    #[test]
    fn completions_forget_their_timer_and_only_timers_are_claimed() {
        let mut t = WakeTimers::new();
        sleep(&mut t, 100 * US, 0);
        let id = t.armed[0].1;
        assert!(!t.completed((5 << 32) | 2), "a connection's send is not a timer's");
        assert!(t.completed(user_data(OP_TIMER_REMOVE, id)));
        assert_eq!(t.armed.len(), 1, "a removal's completion is not the timer's");
        assert!(t.completed(user_data(OP_TIMER, id)));
        assert!(t.armed.is_empty());
        // With its timer gone, the same sleep arms a new one.
        assert_eq!(sleep(&mut t, 100 * US, 50 * US).1, 1);
    }
}
