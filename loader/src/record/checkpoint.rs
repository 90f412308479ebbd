//! What a shard hands over once a second for the run's checkpoint (`summary.partial.json`,
//! `measure::checkpoint`): its whole record, so that a run killed outright (SIGKILL, the OOM
//! killer, a CI job's timeout) loses at most its last second.
//!
//! The shard copies at the end of a turn, never per request, into a snapshot it keeps: only
//! the phases that moved since the last copy (a stepped run's finished and future phases cost
//! nothing), plus the per-second series and the run-wide counts. The main thread takes a fresh
//! snapshot under the same lock; when it holds the lock the shard tries again next turn
//! (`try_lock`), so the shard never waits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, TryLockError};
use std::time::Instant;

use super::{PhaseRecord, ShardRecord};

/// How often a shard copies its record for the checkpoint.
pub const CHECKPOINT_PERIOD_NS: u64 = 1_000_000_000;
/// How long before each whole second of the run a shard copies it: the main loop writes the
/// checkpoint on the second, so it holds the run as it was this long before.
const AHEAD_OF_THE_SECOND_NS: u64 = 100_000_000;

/// When a shard that copied (or started) at `now_ns` copies next: `AHEAD_OF_THE_SECOND_NS`
/// before the next whole second of the run.
pub fn next_copy_ns(now_ns: u64) -> u64 {
    (now_ns + AHEAD_OF_THE_SECOND_NS) / CHECKPOINT_PERIOD_NS * CHECKPOINT_PERIOD_NS + CHECKPOINT_PERIOD_NS
        - AHEAD_OF_THE_SECOND_NS
}
/// Seconds of the per-second series before the last copy that are copied again: what a
/// shard records lands in the second of its instant (a send, a kernel receive stamp, a
/// deadline), which is this close to when it is recorded unless the shard was starved
/// longer. (A one-hour series is 3.5 MB a shard: copied whole each second, it would cost
/// the shard about half a millisecond a second.)
const SECONDS_BACK: usize = 5;

/// The hand-over point between one shard and the main thread.
#[derive(Debug, Default)]
pub struct CheckpointSlot {
    /// The last snapshot, whether the main thread has taken it yet, and when it was made
    /// (ns since the run's zero).
    snapshot: Mutex<Option<(ShardRecord, bool, u64)>>,
    /// The shard's time spent copying, ns in all (what the checkpoint costs the shard).
    copy_ns: AtomicU64,
}

impl CheckpointSlot {
    /// Shard side: bring the snapshot up to `record` as it is `now_ns` after the run's zero.
    /// Returns `false`, having done nothing, when the main thread holds the lock (try next
    /// turn).
    pub fn offer(&self, record: &ShardRecord, now_ns: u64) -> bool {
        let began = Instant::now();
        let mut slot = match self.snapshot.try_lock() {
            Ok(s) => s,
            Err(TryLockError::WouldBlock) => return false,
            // The main thread panicked while holding it: nobody reads the snapshot any more.
            Err(TryLockError::Poisoned(_)) => return true,
        };
        match slot.as_mut() {
            Some((snapshot, fresh, at)) => {
                snapshot.follow(record, *at);
                (*fresh, *at) = (true, now_ns);
            }
            None => *slot = Some((ShardRecord::snapshot_of(record), true, now_ns)),
        }
        self.copy_ns.fetch_add(began.elapsed().as_nanos() as u64, Ordering::Relaxed);
        true
    }

    /// The shard's time spent copying so far, ns.
    pub fn copy_ns(&self) -> u64 {
        self.copy_ns.load(Ordering::Relaxed)
    }

    /// Main-thread side: `take` the snapshot, with when it was made (ns since the run's
    /// zero), if it changed since the last call. A poisoned lock (a shard panicked) reads as
    /// no news.
    pub fn take_fresh(&self, take: impl FnOnce(&ShardRecord, u64)) {
        let Ok(mut slot) = self.snapshot.lock() else { return };
        if let Some((snapshot, fresh, at)) = slot.as_mut().filter(|(_, fresh, _)| *fresh) {
            take(snapshot, *at);
            *fresh = false;
        }
    }
}

impl PhaseRecord {
    /// Whether `other` (the same phase, later) moved since this copy: its sends and finished
    /// requests only grow, and so does what it gave up unsent.
    fn is_behind(&self, other: &PhaseRecord) -> bool {
        self.sent != other.sent || self.finished() != other.finished() || self.due_unsent != other.due_unsent
    }

    /// Become `src` without allocating: the histograms into the buffers this copy already
    /// has (`Histogram::set_to` of same-shaped histograms copies the counts; a clone would
    /// map six fresh ~190 KiB buffers and fault them in, half a millisecond of the shard's
    /// turn). Every field is named, so a new one cannot be forgotten here.
    fn copy_from(&mut self, src: &PhaseRecord) {
        let PhaseRecord {
            latency,
            service,
            send_lag,
            own_lag,
            wake_lateness,
            sent,
            ok,
            errors,
            late,
            late_unpooled,
            late_unpooled_max_us,
            waited_for_connection,
            sent_ahead,
            sent_in_window,
            waited_on_loader,
            late_after_end,
            due_unsent,
            due_unsent_loader,
            dropped_loader,
            read_lag,
            ok_in_window,
            grpc,
        } = src;
        for (mine, theirs) in [
            (&mut self.latency, latency),
            (&mut self.service, service),
            (&mut self.send_lag, send_lag),
            (&mut self.own_lag, own_lag),
            (&mut self.wake_lateness, wake_lateness),
            (&mut self.read_lag, read_lag),
        ] {
            mine.set_to(theirs).expect("same bounds");
        }
        (self.sent, self.ok, self.errors, self.late, self.late_unpooled) = (*sent, *ok, *errors, *late, *late_unpooled);
        (self.late_unpooled_max_us, self.waited_for_connection, self.sent_ahead, self.sent_in_window) =
            (*late_unpooled_max_us, *waited_for_connection, *sent_ahead, *sent_in_window);
        (self.waited_on_loader, self.late_after_end, self.due_unsent, self.due_unsent_loader) =
            (*waited_on_loader, *late_after_end, *due_unsent, *due_unsent_loader);
        (self.dropped_loader, self.ok_in_window, self.grpc) = (*dropped_loader, *ok_in_window, *grpc);
    }
}

impl ShardRecord {
    /// A first snapshot of `src`: fresh buffers (zeroed by the allocator, touched only where
    /// copied into), then the phases that moved — a clone would copy every phase, a stepped
    /// plan's tens of MB, at once.
    pub fn snapshot_of(src: &ShardRecord) -> ShardRecord {
        let mut snapshot = ShardRecord::new(src.windows.clone(), src.seconds.len());
        snapshot.copy_moved_from(src, 0);
        snapshot
    }

    /// Bring this snapshot, made `copied_at_ns` after the run's zero, up to `src` (the same
    /// shard's record, later): the phases that moved, the per-second series from
    /// [`SECONDS_BACK`] before that copy on.
    pub fn follow(&mut self, src: &ShardRecord, copied_at_ns: u64) {
        let from = ((copied_at_ns / 1_000_000_000) as usize).saturating_sub(SECONDS_BACK);
        self.copy_moved_from(src, from);
    }

    /// Become `src` (the same shard's record, later), copying only the phases that moved and
    /// the per-second series from second `from_second` on. Every field is named, so a new one
    /// cannot be forgotten here.
    fn copy_moved_from(&mut self, src: &ShardRecord, from_second: usize) {
        let ShardRecord {
            phases,
            windows: _,
            seconds,
            connections_opened,
            connect_failures,
            deadline_while_connecting,
            retried_on_stale_connection,
            stamps_by_segment,
            segment_follow_lost,
            abandoned,
            late_loader,
            from_send,
            connect_no_port,
            closes,
            wake_lateness,
            details,
            tls,
            rows,
        } = src;
        for (mine, theirs) in self.phases.iter_mut().zip(phases) {
            if mine.is_behind(theirs) {
                mine.copy_from(theirs);
            }
        }
        if self.seconds.len() == seconds.len() {
            let from = from_second.min(seconds.len());
            self.seconds[from..].copy_from_slice(&seconds[from..]);
        } else {
            self.seconds.clone_from(seconds);
        }
        self.connections_opened = *connections_opened;
        self.connect_failures = *connect_failures;
        self.deadline_while_connecting = *deadline_while_connecting;
        self.retried_on_stale_connection = *retried_on_stale_connection;
        self.stamps_by_segment = *stamps_by_segment;
        self.segment_follow_lost = *segment_follow_lost;
        self.abandoned = *abandoned;
        self.late_loader = *late_loader;
        self.from_send = *from_send;
        self.connect_no_port = *connect_no_port;
        self.closes = *closes;
        self.wake_lateness.set_to(wake_lateness).expect("same bounds");
        self.details.clone_from(details);
        self.tls.clone_from(tls);
        self.rows.clone_from(rows);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Window;

    #[test]
    fn a_snapshot_follows_the_record_and_is_taken_once_per_change() {
        let windows =
            vec![Window::constant(0, 1_000_000_000, 10.0), Window::constant(1_000_000_000, 2_000_000_000, 10.0)];
        let mut r = ShardRecord::new(windows, 2);
        let slot = CheckpointSlot::default();
        r.on_send(0, 100_000_000, 100_000_000, 0, false, 1);
        assert!(slot.offer(&r, 200_000_000));
        let mut seen = Vec::new();
        slot.take_fresh(|s, at| seen.push((s.phases[0].sent, s.phases[1].sent, at)));
        slot.take_fresh(|s, at| seen.push((s.phases[0].sent, s.phases[1].sent, at)));
        assert_eq!(seen, [(1, 0, 200_000_000)], "taken once");
        // The second phase moves, the first does not: the snapshot has both as they are.
        r.on_send(1, 1_100_000_000, 1_100_000_000, 0, false, 1);
        r.on_response(1, 1_100_000_000, 1_100_000_000, 1_102_000_000, 200);
        r.connections_opened = 4;
        assert!(slot.offer(&r, 1_200_000_000));
        slot.take_fresh(|s, _| {
            assert_eq!((s.phases[0].sent, s.phases[1].sent, s.phases[1].ok), (1, 1, 1));
            assert_eq!(s.phases[1].latency.len(), 1);
            assert_eq!(s.connections_opened, 4);
            assert_eq!(s.seconds[1].sent, 1, "the second that moved");
        });
        // The main thread reading: the shard does not wait.
        let held = slot.snapshot.lock().unwrap();
        assert!(!slot.offer(&r, 1_300_000_000));
        drop(held);
    }

    #[test]
    fn copies_fall_just_before_each_whole_second() {
        assert_eq!(next_copy_ns(0), 900_000_000);
        assert_eq!(next_copy_ns(900_000_000), 1_900_000_000);
        // A late turn (after the second it was for) still has the next one's copy due in time.
        assert_eq!(next_copy_ns(1_050_000_000), 1_900_000_000);
        assert_eq!(next_copy_ns(2_950_000_000), 3_900_000_000);
        assert_eq!(next_copy_ns(3_899_999_999), 3_900_000_000);
    }
}
