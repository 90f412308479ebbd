//! Sleeps with microsecond precision for the target's `--delay` and `--stall`.
//!
//! tokio's timer wheel has 1 ms slots: `sleep(10ms)` ends up to a millisecond late, so a
//! target meant to serve N/D per second (`--workers N --delay D`) would really serve
//! N/(D + ~1 ms) — 11 % short at D = 10 ms. One timer thread (hrtimer waits, timer slack
//! 1 ns) keeps every deadline in a heap and wakes each waiting task when its deadline passes.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::OnceLock;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::time::Instant;

use tokio::sync::oneshot;

type Request = (Instant, oneshot::Sender<()>);

/// A deadline in the heap: earliest first, then in arrival order.
struct Due(Instant, u64, oneshot::Sender<()>);

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.0, self.1) == (other.0, other.1)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.0, self.1).cmp(&(other.0, other.1))
    }
}

fn timer() -> &'static Sender<Request> {
    static TIMER: OnceLock<Sender<Request>> = OnceLock::new();
    TIMER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("loader-target-timer".into())
            .spawn(move || {
                // Timer waits end when asked, and a wake-up preempts what runs on the core.
                crate::engine::wakeup::on_time();
                let mut heap: BinaryHeap<Reverse<Due>> = BinaryHeap::new();
                let mut seq = 0u64;
                loop {
                    let next = heap.peek().map(|Reverse(d)| d.0);
                    let got = match next {
                        None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                        Some(at) => rx.recv_timeout(at.saturating_duration_since(Instant::now())),
                    };
                    match got {
                        Ok((at, wake)) => {
                            seq += 1;
                            heap.push(Reverse(Due(at, seq, wake)));
                        }
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                    let now = Instant::now();
                    while heap.peek().is_some_and(|Reverse(d)| d.0 <= now) {
                        let Reverse(Due(_, _, wake)) = heap.pop().expect("peeked");
                        let _ = wake.send(());
                    }
                }
            })
            .expect("cannot start the target's timer thread");
        tx
    })
}

/// Wait until `deadline` (returns at once if it has passed).
pub async fn sleep_until(deadline: Instant) {
    if deadline <= Instant::now() {
        return;
    }
    let (tx, rx) = oneshot::channel();
    if timer().send((deadline, tx)).is_ok() {
        let _ = rx.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn sleeps_end_after_the_deadline_and_well_within_a_millisecond() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let mut late = Vec::new();
            for _ in 0..20 {
                let deadline = Instant::now() + Duration::from_micros(2500);
                sleep_until(deadline).await;
                let now = Instant::now();
                assert!(now >= deadline, "woke early");
                late.push(now - deadline);
            }
            late.sort();
            // Median lateness: tokio's wheel would give ~0.5–1 ms here.
            assert!(late[10] < Duration::from_micros(400), "median lateness {:?}", late[10]);
        });
    }
}
