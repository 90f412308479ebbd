//! Whose fault is a late send: the pool's or the loader's? [`PoolWatch`] keeps the instant
//! since which the shard has had no connection to give, so a request can be told to have
//! waited for a connection exactly when the pool was already exhausted at its intended time.
//!
//! "Free" means a connection that can take a request now: an idle keep-alive connection, or
//! a closed slot that can be opened for it. The shard reports every change that matters:
//! taking the last free connection, finding none for a due request, and ending a dispatch
//! with one left over (the pool is not exhausted then, whatever it was before).
//!
//! A connection that comes back while requests wait is handed to the oldest of them in the
//! same turn, so an exhaustion interval only ends when a dispatch leaves a connection free.
//! Attribution needs no clock tick: the previous design compared a "last seen exhausted"
//! instant, refreshed every 10 ms, with the due time — right only because the tick equalled
//! the 10 ms lateness threshold.

/// Tracks one shard's pool exhaustion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolWatch {
    /// Since when (ns since run start) no connection has been free; `None` while one is.
    exhausted_since: Option<u64>,
}

impl PoolWatch {
    /// A dispatch at `now` found no free connection for a due request, or took the last one.
    #[inline]
    pub fn exhausted(&mut self, now: u64) {
        self.exhausted_since.get_or_insert(now);
    }

    /// A dispatch ended with a free connection left: the pool is not exhausted.
    #[inline]
    pub fn free(&mut self) {
        self.exhausted_since = None;
    }

    /// Whether a request due at `intended_ns`, given a connection at `now`, waited for one:
    /// the pool had none free from its intended time on, and it is past that time. One given
    /// its connection at or before its due time (sent ahead, or on time after the shard read
    /// the answers that freed one) waited for nothing, however long the pool had been short
    /// (CI, three loops at nice −10 on the loader's core: ~100 such sends a run, lag 0, were
    /// counted as waits the target's, and noted as `pool_exhausted` beside a starved loader).
    #[inline]
    pub fn waited(&self, intended_ns: u64, now: u64) -> bool {
        now > intended_ns && self.exhausted_since.is_some_and(|since| since <= intended_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_request_due_while_the_pool_was_exhausted_waited() {
        let mut pool = PoolWatch::default();
        pool.exhausted(10 * MS); // the last connection went to a request at 10 ms
        // Due at 12 ms, a connection came back at 40 ms: it waited for one.
        assert!(pool.waited(12 * MS, 40 * MS));
        // Still exhausted (the connection went to it): the next one due at 15 ms waited too.
        assert!(pool.waited(15 * MS, 40 * MS));
        pool.free(); // a dispatch left a connection over
        assert!(!pool.waited(50 * MS, 60 * MS));
    }

    #[test]
    fn a_request_due_before_the_pool_ran_out_was_late_by_the_loader() {
        // Due at 5 ms with a connection free; the loader only got to it at 30 ms, after the
        // pool ran out at 20 ms: the first 15 ms are the loader's, so it did not wait for the
        // pool (a 10 ms tick would have called it a pool wait).
        let mut pool = PoolWatch::default();
        pool.exhausted(20 * MS);
        assert!(!pool.waited(5 * MS, 30 * MS));
        assert!(pool.waited(20 * MS, 30 * MS));
    }

    #[test]
    fn a_request_given_a_connection_by_its_due_time_did_not_wait() {
        let mut pool = PoolWatch::default();
        pool.exhausted(10 * MS); // every connection busy since 10 ms, unread answers among them
        // The shard woke at 12 ms, read them, and sent the request due at 12.05 ms ahead.
        assert!(!pool.waited(12 * MS + MS / 20, 12 * MS), "sent ahead: no wait");
        assert!(!pool.waited(12 * MS, 12 * MS), "sent at its due time: no wait");
        assert!(pool.waited(12 * MS, 12 * MS + 1), "a nanosecond after it, still short: a wait");
    }

    #[test]
    fn the_first_exhaustion_instant_is_kept() {
        let mut pool = PoolWatch::default();
        pool.exhausted(3 * MS);
        pool.exhausted(9 * MS);
        assert!(pool.waited(4 * MS, 10 * MS), "exhausted since 3 ms, not since the latest report");
    }
}
