//! The shard's ring: set-up, submissions (and the backlog when the queue is full), and the
//! timed waits that are the shard's only sleeps.

use std::time::Duration;

use io_uring::{IoUring, squeue, types};

use super::*;
use crate::engine::EngineError;
use crate::engine::pace::Sleep;

pub(super) fn new_ring(entries: u32) -> Result<IoUring, EngineError> {
    // Deferred task-run keeps completion work on this thread and batched into our own
    // io_uring_enter calls — and lets a wait for the timer sleep through completions, which
    // only wake the thread once as many have gathered as it asked for. Fall back for
    // kernels that lack it (< 6.1).
    let cq = entries * 2;
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_cqsize(cq)
        .build(entries)
        .or_else(|_| IoUring::builder().setup_coop_taskrun().setup_cqsize(cq).build(entries))
        .or_else(|_| IoUring::builder().setup_cqsize(cq).build(entries))
        .map_err(EngineError::Ring)
}

/// `IORING_ENTER_GETEVENTS`.
const ENTER_GETEVENTS: u32 = 1;

impl Shard {
    /// Submit what is queued and sleep as `sleep` says. Returns the instant the sleep's timer
    /// was set for: `sleep.until`, or a timer armed earlier that ends within a microsecond
    /// before it (see [`super::timers`]).
    pub(super) fn wait(&mut self, sleep: &Sleep) -> Result<u64, EngineError> {
        self.flush_backlog();
        let now = self.clock.now_ns();
        if sleep.until <= now {
            let pending = self.ring.submission().len() as u32;
            // SAFETY: no argument pointer is passed; GETEVENTS runs deferred completion work
            // without waiting for any.
            let r = unsafe { self.ring.submitter().enter::<libc::sigset_t>(pending, 0, ENTER_GETEVENTS, None) };
            return self.entered(r.map(|_| ())).map(|_| sleep.until);
        }
        // A wait for as many completions as the queue holds is a wait for the timer (the
        // kernel caps the count at the queue size, so a full queue still wakes the shard).
        let want = if sleep.on_completion { 1 } else { self.cq_entries };
        // Only a sleep that the timer alone ends goes on the armed timers: a completion ends
        // the others at any time, their ends move with `now` (a pool that waits for a free
        // connection sleeps at most `MAX_WAIT_NS` from each wake-up), and each would arm a
        // timer and remove the last — whose completions end a wait for one completion at
        // once, so the shard spun at 100 % CPU against a saturated target. They wait with
        // their own timeout, and the rhythm to guess from starts again after them.
        if sleep.on_completion {
            if let Some(timers) = self.timers.as_mut() {
                timers.off_rhythm();
            }
        } else if let Some(mut timers) = self.timers.take() {
            let clock = self.clock;
            let target =
                timers.sleep(sleep.until, now, |at| types::Timespec::from(clock.absolute(at)), |e| self.push(e));
            let latest = timers.latest_after(target);
            self.timers = Some(timers);
            // Every entry must reach the kernel with this enter, or the sleep has no timer.
            if self.backlog.is_empty() {
                // A timer that fires after the decision above but before the kernel starts
                // the wait only posts its completion (the wait ends early only for a timeout
                // that fires during it), and a wait for the whole completion queue would
                // never end. So the wait also has its own timeout as a back-stop
                // (`timers::backstop`: where it costs no reprogramming of the CPU's timer).
                let backstop = timers::backstop(target, now, latest, sleep.until);
                return self.enter_until(backstop, now, want).map(|_| target);
            }
        }
        self.enter_until(sleep.until, now, want).map(|_| sleep.until)
    }

    /// Hand the queued operations to the kernel now, without waiting for anything.
    pub(super) fn submit_queued(&mut self) {
        if !self.ring.submission().is_empty() {
            let r = self.ring.submit();
            // A failure here leaves the entries queued for the next enter, which reports it.
            let _ = self.entered(r.map(|_| ()));
        }
    }

    /// Wait up to `left` for `want` completions.
    pub(super) fn enter_for(&mut self, left: Duration, want: usize) -> Result<(), EngineError> {
        let ts = types::Timespec::from(left);
        let args = types::SubmitArgs::new().timespec(&ts);
        let r = self.ring.submitter().submit_with_args(want, &args);
        self.entered(r.map(|_| ()))
    }

    /// Wait until `until` (run clock; `now` is the run clock now) for `want` completions: on
    /// the absolute clock when the kernel takes it (no drift between reading the clock and
    /// arming the timer), else relative.
    pub(super) fn enter_until(&mut self, until: u64, now: u64, want: usize) -> Result<(), EngineError> {
        if self.abs_timer {
            let ts = types::Timespec::from(self.clock.absolute(until));
            let args = types::SubmitArgs::new().timespec(&ts);
            let r = self.ring.submitter().submit_with_args_and_flags(want, &args, self.enter_flags);
            match r {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.abs_timer = false,
                r => return self.entered(r.map(|_| ())),
            }
        }
        self.enter_for(Duration::from_nanos(until.saturating_sub(now)), want)
    }

    /// The outcome of an `io_uring_enter`: timeouts, signals and a busy ring are not errors.
    pub(super) fn entered(&self, r: std::io::Result<()>) -> Result<(), EngineError> {
        match r {
            Err(e) if !matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN)) => {
                Err(EngineError::Enter(e))
            }
            _ => Ok(()),
        }
    }

    /// Queue an operation. A full submission queue is submitted first; if the kernel cannot
    /// take it yet, the entry waits in `backlog` for the next turn (never a panic).
    pub(in crate::engine) fn push(&mut self, entry: squeue::Entry) {
        if !self.backlog.is_empty() {
            self.backlog.push(entry);
            return;
        }
        // SAFETY: every entry points into memory that outlives the operation: the shared
        // request bytes, a connection's buffer or its TLS `out` buffer (never freed, moved
        // or written while ops > 0 / a send of it is in flight), the boxed sockaddr or the
        // boxed receive header.
        unsafe {
            if self.ring.submission().push(&entry).is_ok() {
                return;
            }
            let _ = self.ring.submit();
            if self.ring.submission().push(&entry).is_err() {
                self.backlog.push(entry);
            }
        }
    }

    /// Move backlogged entries into the submission queue, as far as it has room.
    pub(super) fn flush_backlog(&mut self) {
        let mut taken = 0;
        while taken < self.backlog.len() {
            // SAFETY: as in `push`.
            let pushed = unsafe { self.ring.submission().push(&self.backlog[taken]).is_ok() };
            if !pushed {
                if self.ring.submit().is_err() {
                    break;
                }
                // SAFETY: as in `push`.
                if unsafe { self.ring.submission().push(&self.backlog[taken]).is_err() } {
                    break;
                }
            }
            taken += 1;
        }
        self.backlog.drain(..taken);
    }
}
