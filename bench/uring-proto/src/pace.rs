//! How the dispatcher waits for the next intended send: the three ways tokio-uring offers.
//!
//! - `sleep`: `tokio::time::sleep_until`, tokio's timer. Its wheel has 1 ms slots and rounds
//!   a deadline up to the next slot, so a send leaves up to ~1 ms (plus the wake-up) late;
//!   in exchange every send due within a slot shares one wake-up.
//! - `uring-timeout`: an `IORING_OP_TIMEOUT` with an absolute `CLOCK_MONOTONIC` deadline (an
//!   hrtimer), submitted through tokio-uring's own ring with its public
//!   `UnsubmittedOneshot` extension point; tokio-uring 0.5 has no timeout op of its own. The
//!   completion wakes the runtime through its epoll on the ring's fd.
//! - `spin`: `tokio::task::yield_now` until the due instant. Costs a whole core; it is here
//!   to show what it does to tokio-uring, whose submissions are flushed only when the
//!   runtime parks (its `on_thread_park` hook) — a spinning task keeps it from parking.
//!
//! Neither timer variant wakes early and spins, as the engine does (`loader/src/engine/pace.rs`).

use io_uring::{opcode, types};
use tokio_uring::{OneshotOutputTransform, UnsubmittedOneshot};

use crate::now_ns;

/// The pacing chosen with `--pace`.
#[derive(Clone, Copy, Debug)]
pub enum Pace {
    Sleep,
    UringTimeout,
    Spin,
}

impl Pace {
    pub fn parse(s: &str) -> Option<Pace> {
        match s {
            "sleep" => Some(Pace::Sleep),
            "uring-timeout" => Some(Pace::UringTimeout),
            "spin" => Some(Pace::Spin),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Pace::Sleep => "sleep",
            Pace::UringTimeout => "uring-timeout",
            Pace::Spin => "spin",
        }
    }

    pub fn pacer(self) -> Pacer {
        Pacer { pace: self, timespec: Box::new(types::Timespec::new()) }
    }
}

/// Waits until instants of `CLOCK_MONOTONIC`.
pub struct Pacer {
    pace: Pace,
    /// Reused for each timeout op; boxed so its address stays put while the kernel reads it.
    timespec: Box<types::Timespec>,
}

impl Pacer {
    /// Wait until `at` (monotonic ns); how late the wake-up was, for timer waits.
    pub async fn wait_until(&mut self, at: u64) -> Option<u64> {
        match self.pace {
            Pace::Sleep => {
                let now = now_ns();
                let deadline = tokio::time::Instant::now() + std::time::Duration::from_nanos(at.saturating_sub(now));
                tokio::time::sleep_until(deadline).await;
            }
            Pace::UringTimeout => {
                *self.timespec = types::Timespec::new().sec(at / 1_000_000_000).nsec((at % 1_000_000_000) as u32);
                let sqe = opcode::Timeout::new(&*self.timespec).flags(types::TimeoutFlags::ABS).build();
                // The op's stable data is a pointer-sized marker: the timespec lives in `self`,
                // which outlives the awaited op.
                let _expired = UnsubmittedOneshot::new((), TimeoutDone, sqe).submit().await;
            }
            Pace::Spin => {
                while now_ns() < at {
                    tokio::task::yield_now().await;
                }
                return None;
            }
        }
        Some(now_ns().saturating_sub(at))
    }
}

/// The timeout op's result: `-ETIME` when the deadline passed (what it is for).
struct TimeoutDone;

impl OneshotOutputTransform for TimeoutDone {
    type Output = i32;
    type StoredData = ();

    fn transform_oneshot_output(self, _: (), cqe: io_uring::cqueue::Entry) -> i32 {
        cqe.result()
    }
}
