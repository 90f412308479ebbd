//! Each HTTP/2 answer's arrival from the probes' segment record (`engine::segments`), so the
//! shard can sleep through answers on a connection that carries several streams.
//!
//! Over TLS the record counts ciphertext: the shard feeds rustls one TLS record at a time
//! (`tls::Records`), and every answer a record ends arrived with the record's last byte — its
//! plaintext did not exist before. The agreement below is checked once per read there.
//!
//! A socket is followed from its creation (before it connects, so the record counts every
//! byte the connection receives, as the frame reader does) until it closes. After each read
//! the record's arrival for the read's last byte is compared with the read's own kernel stamp:
//! the same segment seen twice. If they differ by more than `segments::AGREE_NS` the read's
//! answers keep the read's stamp; two such reads in a row and the connection is no longer
//! followed (`run.segment_follow_lost`), so the shard wakes for its answers again.

use super::*;
use crate::engine::segments::AGREE_NS;

/// Reads in a row whose record disagrees with the kernel's stamp before a connection is
/// no longer followed.
const MISSES: u8 = 2;

impl Shard {
    /// Follow the new socket of `c` (HTTP/2 with the probes loaded); best effort.
    pub(super) fn follow_segments(&mut self, c: usize) {
        let Some(segments) = self.h2.as_ref().and_then(|m| m.segments.as_ref()) else { return };
        let conn = &mut self.conns[c];
        conn.followed = segments.follow(conn.raw_fd());
        conn.followed_misses = 0;
    }

    /// `c`'s socket is closing: stop following it.
    pub(super) fn unfollow_segments(&mut self, c: usize) {
        if let Some(followed) = self.conns[c].followed.take()
            && let Some(segments) = self.h2.as_ref().and_then(|m| m.segments.as_ref())
        {
            segments.release(followed);
        }
    }

    /// The arrivals (run clock) of the `ended` answers the last read on `c` ended (h2c: one
    /// per event in `wire.ends`), into `out`; left empty when `c` is not followed or the
    /// record does not agree with `stamp`, the read's kernel stamp.
    pub(super) fn arrivals(
        &mut self,
        c: usize,
        stamp: Option<u64>,
        now: u64,
        ended: usize,
        out: &mut Vec<Option<u64>>,
    ) {
        out.clear();
        let conn = &self.conns[c];
        let (Some(_), Some(link)) = (conn.followed, conn.h2.as_ref()) else { return };
        if let Some(tls) = conn.tls.as_ref() {
            // Checked against the read's stamp as it came in (`read_agrees`).
            if let Some(end) = tls.record_end {
                out.resize(ended, self.arrival_of(c, end));
            }
            return;
        }
        let fed = link.wire.fed();
        if self.read_agrees(c, fed, stamp, now)
            && let Some(link) = self.conns[c].h2.as_ref()
        {
            out.extend(link.wire.ends.iter().map(|&end| self.arrival_of(c, end)));
        }
    }

    /// When the segment carrying byte `byte` of `c` arrived (run clock), by the record.
    fn arrival_of(&self, c: usize, byte: u64) -> Option<u64> {
        let segments = self.h2.as_ref()?.segments.as_deref()?;
        segments.arrival(self.conns[c].followed?, byte).map(|at| self.clock.of_monotonic(at))
    }

    /// Whether the record's arrival for byte `end` of `c` (a read's last) agrees with
    /// `stamp`, the read's kernel stamp; two reads in a row that do not, and `c` is no longer
    /// followed.
    pub(super) fn read_agrees(&mut self, c: usize, end: u64, stamp: Option<u64>, now: u64) -> bool {
        let last = self.arrival_of(c, end);
        let Some(segments) = self.h2.as_ref().and_then(|m| m.segments.as_deref()) else { return false };
        let conn = &mut self.conns[c];
        let Some(followed) = conn.followed else { return false };
        let read = stamp.map(|s| self.realtime.run_time(s, 0, now));
        if !matches!((last, read), (Some(a), Some(b)) if a.abs_diff(b) <= AGREE_NS) {
            conn.followed_misses += 1;
            if conn.followed_misses >= MISSES {
                self.record.segment_follow_lost += 1;
                conn.followed = None;
                segments.release(followed);
            }
            return false;
        }
        conn.followed_misses = 0;
        true
    }
}
