//! Wake-ups at the intended send time, to the microsecond, inside a tokio runtime.
//!
//! tokio's timer wheel has 1 ms slots: a send due at 10.3 ms would leave at 11 ms, a false
//! 0.7 ms of send lag and latency. The HTTP/2 shard sleeps instead on a `timerfd` armed for
//! the absolute `CLOCK_MONOTONIC` instant (an hrtimer, with the thread's timer slack at its
//! minimum), registered with the runtime's epoll like any socket: the wait costs the runtime
//! nothing it does not already do, and the wake-up is as precise as the io_uring shards'.

use std::os::fd::{AsFd, AsRawFd, RawFd};

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::io::unix::AsyncFd;

use crate::engine::Clock;

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
}

impl Timer {
    /// A timer on `clock` (inside a runtime with I/O enabled).
    pub(super) fn new(clock: Clock) -> std::io::Result<Timer> {
        let fd = TimerFd::new(ClockId::CLOCK_MONOTONIC, TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC)?;
        // SAFETY: the AsyncFd owns the timerfd, so the descriptor stays open (and is the same
        // file) for as long as it is registered.
        let fd = unsafe { AsyncFd::register(Fd(fd)) }.map_err(|e| e.into_parts().1)?;
        Ok(Timer { fd, clock, armed: std::cell::Cell::new(0) })
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
        let at = self.clock.absolute(at_ns);
        let ts = libc::timespec { tv_sec: at.as_secs() as libc::time_t, tv_nsec: at.subsec_nanos() as libc::c_long };
        while self.clock.now_ns() < at_ns {
            // SAFETY: a valid absolute time; no remainder is written with TIMER_ABSTIME.
            let e =
                unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
            if e != 0 && e != libc::EINTR {
                return; // cannot happen with a valid time; the loop looks at the clock again
            }
        }
    }
}
