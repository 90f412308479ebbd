//! Wake-ups at the intended send time, to the microsecond, inside a tokio runtime.
//!
//! tokio's timer wheel has 1 ms slots: a send due at 10.3 ms would leave at 11 ms, a false
//! 0.7 ms of send lag and latency. The HTTP/2 shard sleeps instead on a `timerfd` armed for
//! the absolute `CLOCK_MONOTONIC` instant (an hrtimer, with the thread's timer slack at its
//! minimum), registered with the runtime's epoll like any socket: the wait costs the runtime
//! nothing it does not already do, and the wake-up is as precise as the io_uring shards'.
//!
//! The quiet sleeps (`Timer::block_until`, outside the runtime) block on `timerfd`s armed a
//! wake-up ahead, as the io_uring shards' timers are (`engine::shard::timers`): a timer armed
//! as the thread goes to sleep is the CPU's earliest, and arming it reprograms the local
//! timer — on a VM an exit to the hypervisor, charged to the shard (13.0 µs of CPU per
//! wake-up against 8.2 µs with the next one armed ahead, `bench/prearm_cost.c`). At a fixed
//! rate the wake-ups are evenly spaced, so the next one is guessed from the last two.

use std::cell::RefCell;
use std::os::fd::{AsFd, AsRawFd, RawFd};

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::io::unix::AsyncFd;

use crate::engine::Clock;
use crate::engine::shard::timers::{SERVES_WITHIN_NS, next_guess, serves};

/// The timerfd, as the runtime's epoll needs it.
struct Fd(TimerFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// A one-shot precise timer on the run's clock.
pub(super) struct Timer {
    fd: AsyncFd<Fd>,
    clock: Clock,
    /// The instant the timer is armed for (run time; 0: not armed). Arming is a system call
    /// that costs as much as the wake-up on a VM: a sleep to the same instant after an
    /// interrupted one does not arm it again.
    armed: std::cell::Cell<u64>,
    /// The quiet sleeps' timers (`None`: they could not be made; those sleeps then arm as
    /// they go, with `clock_nanosleep`).
    ahead: RefCell<Option<Ahead>>,
}

impl Timer {
    /// A timer on `clock` (inside a runtime with I/O enabled).
    pub(super) fn new(clock: Clock) -> std::io::Result<Timer> {
        let fd = TimerFd::new(ClockId::CLOCK_MONOTONIC, TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC)?;
        // SAFETY: the AsyncFd owns the timerfd, so the descriptor stays open (and is the same
        // file) for as long as it is registered.
        let fd = unsafe { AsyncFd::register(Fd(fd)) }.map_err(|e| e.into_parts().1)?;
        Ok(Timer { fd, clock, armed: std::cell::Cell::new(0), ahead: RefCell::new(Ahead::new()) })
    }

    /// Sleep until `at_ns` (run time); returns at once if it has passed. Another branch of a
    /// `select!` may end the sleep earlier: the armed timer then wakes one later sleep early,
    /// which its caller sees from the clock and sleeps again.
    pub(super) async fn sleep_until(&self, at_ns: u64) {
        let now = self.clock.now_ns();
        if at_ns <= now {
            return;
        }
        if self.armed.get() != at_ns {
            let at = self.clock.absolute(at_ns);
            let spec = TimeSpec::new(at.as_secs() as i64, i64::from(at.subsec_nanos()));
            if self.fd.get_ref().0.set(Expiration::OneShot(spec), TimerSetTimeFlags::TFD_TIMER_ABSTIME).is_err() {
                // Cannot happen with a valid fd and time; a coarse sleep keeps the schedule going.
                tokio::time::sleep(std::time::Duration::from_nanos(at_ns - now)).await;
                return;
            }
            self.armed.set(at_ns);
        }
        while self.clock.now_ns() < at_ns {
            let Ok(mut ready) = self.fd.readable().await else { return };
            // Consume the expiration count; EAGAIN means a stale readiness.
            let mut buf = [0u8; 8];
            if nix::unistd::read(self.fd.get_ref().0.as_fd(), &mut buf).is_err() {
                ready.clear_ready();
                continue;
            }
            ready.clear_ready();
        }
        self.armed.set(0);
    }

    /// Sleep the thread until `at_ns` (run time), outside the runtime: nothing but the clock
    /// ends it — no socket, no task (the quiet waits, `Shard::wait_quiet`).
    pub(super) fn block_until(&self, at_ns: u64) {
        let now = self.clock.now_ns();
        if at_ns <= now {
            return;
        }
        if at_ns - now > SERVES_WITHIN_NS {
            let mut ahead = self.ahead.borrow_mut();
            if let Some(a) = ahead.as_mut()
                && a.sleep(at_ns, now, self.clock).is_err()
            {
                // Cannot happen with valid descriptors and times: arm as the thread sleeps.
                *ahead = None;
            }
        }
        // A timer armed ahead serves for a sleep that ends at most `SERVES_WITHIN_NS` later:
        // spin the rest. (Or, without one, sleep there.)
        let at = self.clock.absolute(at_ns);
        let ts = libc::timespec { tv_sec: at.as_secs() as libc::time_t, tv_nsec: at.subsec_nanos() as libc::c_long };
        loop {
            let now = self.clock.now_ns();
            if now >= at_ns {
                return;
            }
            if at_ns - now <= SERVES_WITHIN_NS {
                std::hint::spin_loop();
                continue;
            }
            // SAFETY: a valid absolute time; no remainder is written with TIMER_ABSTIME.
            let e =
                unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
            if e != 0 && e != libc::EINTR {
                return; // cannot happen with a valid time; the loop looks at the clock again
            }
        }
    }

    /// A sleep other than a quiet one came between: the next quiet sleep guesses nothing
    /// from the spacing across it.
    pub(super) fn off_rhythm(&self) {
        if let Some(a) = self.ahead.borrow_mut().as_mut() {
            a.last = None;
        }
    }

    /// How many times a quiet sleep armed its own timer as it went to sleep (it found none
    /// armed ahead for it).
    #[cfg(test)]
    fn armed_late(&self) -> u64 {
        self.ahead.borrow().as_ref().map_or(0, |a| a.armed_late)
    }
}

/// Blocking timerfds: the sleep's, the guess for the next, and one left armed by a guess that
/// turned out later than the sleep it was for.
const AHEAD: usize = 3;

/// The quiet sleeps' timers. A thread blocked in `read` on one timerfd is woken by that one
/// only, so a guess that turns out wrong is left to fire (an interrupt that wakes no one, as
/// cheap as removing it) or to serve a later sleep.
struct Ahead {
    fds: [TimerFd; AHEAD],
    /// The instant (run time) each is armed for; 0: never armed. One at or before now has
    /// fired or is about to, and is free.
    at: [u64; AHEAD],
    /// The target of the last quiet sleep, if the sleep before it was one too.
    last: Option<u64>,
    #[cfg(test)]
    armed_late: u64,
}

impl Ahead {
    fn new() -> Option<Ahead> {
        let fd = || TimerFd::new(ClockId::CLOCK_MONOTONIC, TimerFlags::TFD_CLOEXEC).ok();
        Some(Ahead {
            fds: [fd()?, fd()?, fd()?],
            at: [0; AHEAD],
            last: None,
            #[cfg(test)]
            armed_late: 0,
        })
    }

    /// Block until a timer at `until`, or at most [`SERVES_WITHIN_NS`] before it, has fired
    /// (`now` < `until` on the run clock); arm the guess for the next sleep first.
    fn sleep(&mut self, until: u64, now: u64, clock: Clock) -> nix::Result<()> {
        let serving = (0..AHEAD).filter(|&k| self.at[k] > now && serves(self.at[k], until)).max_by_key(|&k| self.at[k]);
        let (i, target) = match serving {
            Some(k) => (k, self.at[k]),
            None => {
                let k = self.free(now, None);
                self.arm(k, until, clock)?;
                #[cfg(test)]
                {
                    self.armed_late += 1;
                }
                (k, until)
            }
        };
        if let Some(next) = self.last.replace(target).and_then(|last| next_guess(last, target))
            && !(0..AHEAD).any(|k| self.at[k] > now && serves(self.at[k], next))
        {
            let k = self.free(now, Some(i));
            self.arm(k, next, clock)?;
        }
        let waited = self.fds[i].wait();
        self.at[i] = 0;
        waited
    }

    /// A timer to arm: one that has fired (or was never armed), else the one armed latest —
    /// never `except`.
    fn free(&self, now: u64, except: Option<usize>) -> usize {
        let candidates = (0..AHEAD).filter(|&k| Some(k) != except);
        candidates.clone().find(|&k| self.at[k] <= now).unwrap_or_else(|| {
            candidates.max_by_key(|&k| self.at[k]).unwrap_or(0) // AHEAD > 1: never empty
        })
    }

    fn arm(&mut self, k: usize, at_ns: u64, clock: Clock) -> nix::Result<()> {
        let at = clock.absolute(at_ns);
        let spec = TimeSpec::new(at.as_secs() as i64, i64::from(at.subsec_nanos()));
        // Re-arming clears an expiration not yet read.
        self.fds[k].set(Expiration::OneShot(spec), TimerSetTimeFlags::TFD_TIMER_ABSTIME)?;
        self.at[k] = at_ns;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Evenly spaced quiet sleeps find their timer armed ahead from the third on, and none
    /// ends before its time; a sleep off the rhythm arms its own.
    #[test]
    fn even_sleeps_find_their_timer_armed_ahead() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let _guard = rt.enter();
        let clock = Clock::new(std::time::Instant::now());
        let timer = Timer::new(clock).expect("timer");
        let start = clock.now_ns() + 1_000_000;
        for n in 0..20u64 {
            let until = start + n * 200_000;
            timer.block_until(until);
            assert!(clock.now_ns() >= until, "sleep {n} ended before its time");
        }
        // The first two arm as they go (nothing to guess from); the rest, at most a few that
        // a late wake-up (a busy machine) made miss their guess.
        let late = timer.armed_late();
        assert!((2..=6).contains(&late), "{late} of 20 even sleeps armed their own timer");
        let before = timer.armed_late();
        timer.block_until(clock.now_ns() + 3_300_000); // off the rhythm: nothing armed there
        assert_eq!(timer.armed_late(), before + 1);
    }
}
