//! The engine: one OS thread and one io_uring ring per shard, sending on schedule.
//!
//! Each shard owns its connections, its share of the schedule ([`ShardSchedule`]) and its
//! [`ShardRecord`]; shards share nothing on the hot path but a stop flag and a few
//! relaxed counters for the live progress line. The loop itself is in `shard/` (its TLS
//! side in `shard/tls.rs`), when it sleeps in `pace.rs`, pool-wait attribution in `pool.rs`,
//! kernel receive timestamps in `rxtime.rs`, the per-connection state in `conn.rs`, response
//! framing in [`http1`], TLS sessions (https targets) in [`tls`].
//!
//! Why the `io-uring` crate directly rather than tokio-uring: the schedule needs wake-ups
//! with sub-millisecond precision (tokio's timer wheel has 1 ms slots, which would add up
//! to 1 ms of false send lag and latency), and batching every send, receive and the wait
//! for the next due time into one `io_uring_enter` is where io_uring saves CPU. The
//! engine waits with `IORING_ENTER_EXT_ARG` timeouts (hrtimers) for exactly the next
//! intended send time.
//!
//! This module does not judge or print anything; it measures.

pub(crate) mod bufring;
mod conn;
pub mod http1;
pub mod http2;
mod inflight;
pub mod keys;
pub mod pace;
mod pool;
mod rxtime;
pub mod segments;
mod shard;
pub mod tls;
pub mod wakeup;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::record::ShardRecord;
use crate::schedule::{ShardSchedule, Window};

/// The run's time base: nanoseconds since the run's start instant, on `CLOCK_MONOTONIC`
/// (the clock of `Instant`, of io_uring's absolute timeouts and of the probes).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
    /// `start` as `CLOCK_MONOTONIC` nanoseconds.
    start_mono_ns: u64,
}

impl Clock {
    /// A clock whose zero is `start` (may lie in the future).
    pub fn new(start: Instant) -> Self {
        let (mono, now) = (monotonic_ns(), Instant::now());
        let start_mono_ns = if start >= now {
            mono + start.duration_since(now).as_nanos() as u64
        } else {
            mono.saturating_sub(now.duration_since(start).as_nanos() as u64)
        };
        Clock { start, start_mono_ns }
    }

    /// The zero instant.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// A `CLOCK_MONOTONIC` time (ns) on this clock; 0 before the start.
    pub fn of_monotonic(&self, mono_ns: u64) -> u64 {
        mono_ns.saturating_sub(self.start_mono_ns)
    }

    /// Nanoseconds since start; 0 before it.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        monotonic_ns().saturating_sub(self.start_mono_ns)
    }

    /// `at_ns` (since start) as an absolute `CLOCK_MONOTONIC` time.
    #[inline]
    pub fn absolute(&self, at_ns: u64) -> Duration {
        Duration::from_nanos(self.start_mono_ns.saturating_add(at_ns))
    }
}

/// `CLOCK_MONOTONIC` now, ns.
#[inline]
fn monotonic_ns() -> u64 {
    // CLOCK_MONOTONIC always exists (a vDSO call, no system call).
    let ts =
        nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap_or(nix::sys::time::TimeSpec::new(0, 0));
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// Counters a shard publishes for the live progress line (relaxed stores, once per loop).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Live {
    /// Requests sent so far.
    pub sent: AtomicU64,
    /// 2xx/3xx responses so far.
    pub ok: AtomicU64,
    /// Failed requests so far.
    pub errors: AtomicU64,
    /// Requests in flight now.
    pub in_flight: AtomicU64,
    /// Connections open now.
    pub open_connections: AtomicU64,
    /// Kernel thread id of the shard (for per-thread CPU accounting).
    pub tid: AtomicU64,
    /// Sends (and due requests given up) the loader itself made more than 10 ms late, so
    /// far: what the emergency stop asks before it calls a cliff.
    pub late_loader: AtomicU64,
}

impl Live {
    pub(crate) fn publish(&self, sent: u64, ok: u64, errors: u64, in_flight: u64, open: u64) {
        self.sent.store(sent, Ordering::Relaxed);
        self.ok.store(ok, Ordering::Relaxed);
        self.errors.store(errors, Ordering::Relaxed);
        self.in_flight.store(in_flight, Ordering::Relaxed);
        self.open_connections.store(open, Ordering::Relaxed);
    }

    pub(crate) fn publish_late(&self, late_loader: u64) {
        self.late_loader.store(late_loader, Ordering::Relaxed);
    }
}

/// Everything one shard needs.
#[derive(Debug)]
pub struct ShardConfig {
    /// Shard number (for thread names and errors).
    pub shard: usize,
    /// Where connections go.
    pub addr: SocketAddr,
    /// The requests, pre-encoded, and their mix.
    pub requests: Arc<RequestTable>,
    /// Reuse connections; `false` closes each after its response.
    pub keepalive: bool,
    /// Connections of this shard.
    pub connections: usize,
    /// Client timeout.
    pub timeout: Duration,
    /// This shard's share of the schedule.
    pub schedule: ShardSchedule,
    /// Phase windows (for the record).
    pub windows: Vec<Window>,
    /// Time base shared by all shards.
    pub clock: Clock,
    /// Set to stop sending at once (emergency stop, and the run's halt below each second).
    pub stop: Arc<AtomicBool>,
    /// The process-wide halt (SIGINT/SIGTERM, `loader stop`): seen at the shard's next turn
    /// (at most `pace::MAX_WAIT_NS` away), not at the main thread's next second.
    pub halt: Arc<AtomicBool>,
    /// Live counters of this shard.
    pub live: Arc<Live>,
    /// Where the shard hands copies of its record over for the live metrics endpoint
    /// (`None`: no endpoint, no copies).
    pub live_copies: Option<Arc<crate::record::LiveCopies>>,
    /// Where the shard hands its whole record over once a second for the run's checkpoint
    /// (`summary.partial.json`; `None`: no output directory, no checkpoint).
    pub checkpoint: Option<Arc<crate::record::CheckpointSlot>>,
    /// Expected run length in seconds (sizes the per-second series up front).
    pub seconds: usize,
    /// When the shard sleeps: see [`pace`].
    pub pace: pace::Pace,
    /// TLS client for an https target (`None`: plain HTTP).
    pub tls: Option<tls::TlsClient>,
    /// Size limits on responses.
    pub limits: http1::Limits,
    /// Send a non-idempotent request (POST, PATCH…) again after a stale keep-alive
    /// connection closed under it (`--retry-non-idempotent`); idempotent ones always are.
    pub retry_non_idempotent: bool,
    /// Speak HTTP/2 (`--http2`): the shard runs [`http2`] instead of the HTTP/1.1 ring.
    pub http2: Option<Arc<http2::Http2>>,
    /// The probes' record of each received segment (`None`: probes off), which lets an h2c
    /// shard stamp each answer exactly without waking for it ([`segments`]).
    pub segments: Option<Arc<segments::Segments>>,
}

/// The run's requests, encoded once, shared read-only by every shard.
///
/// Entries are the encoded requests; a request of the mix filled from a data file
/// (`--data`) has one entry per row, in row order, from `first[request]`.
#[derive(Debug)]
pub struct RequestTable {
    /// Encoded bytes of each entry.
    pub bytes: Vec<Arc<[u8]>>,
    /// Whether each entry is HEAD (its responses have no body).
    pub head: Vec<bool>,
    /// Whether each entry's method is idempotent (RFC 9110 §9.2.2: GET, HEAD, PUT,
    /// DELETE, OPTIONS, TRACE), so it may be sent again after a stale connection.
    pub idempotent: Vec<bool>,
    /// Request `n` of a phase (numbered over all machines) is `mix[n % mix.len()]` (an index
    /// into `first`).
    pub mix: Vec<u16>,
    /// Each request's first entry.
    pub first: Vec<u32>,
    /// Whether each request has one entry per data row.
    pub keyed: Vec<bool>,
    /// The row chooser, when there is a data file.
    pub keys: Option<keys::Keys>,
    /// Requests planned before each phase over all machines (a request's number in the run
    /// is this plus its index in the phase).
    pub phase_offsets: Vec<u64>,
    /// This machine's part of the run: its request `i` of a phase is the phase's request
    /// `share.global(i)`.
    pub share: crate::schedule::Share,
}

impl RequestTable {
    /// A table of one entry per request (no data file).
    pub fn plain(bytes: Vec<Arc<[u8]>>, head: Vec<bool>, idempotent: Vec<bool>, mix: Vec<u16>) -> RequestTable {
        let n = bytes.len();
        RequestTable {
            bytes,
            head,
            idempotent,
            mix,
            first: (0..n as u32).collect(),
            keyed: vec![false; n],
            keys: None,
            phase_offsets: Vec::new(),
            share: Default::default(),
        }
    }

    /// The entry to send as index `i` of phase `phase`.
    #[inline]
    pub fn pick(&self, phase: usize, i: u64) -> u32 {
        // The run's numbering, all machines included: the machines together send the mix
        // (and the rows) one machine would, as the shard threads of one machine do.
        let n = self.share.global(i);
        let request = self.mix[(n % self.mix.len() as u64) as usize] as usize;
        let first = self.first[request];
        match &self.keys {
            Some(keys) if self.keyed[request] => {
                first + keys.pick(self.phase_offsets.get(phase).copied().unwrap_or(0) + n)
            }
            _ => first,
        }
    }

    /// The data row an entry was filled from, if any.
    #[inline]
    pub fn row_of(&self, entry: u32) -> Option<u32> {
        self.keys.as_ref()?;
        let request = self.first.partition_point(|&f| f <= entry).checked_sub(1)?;
        self.keyed[request].then(|| entry - self.first[request])
    }
}

/// How a shard ended.
#[derive(Debug)]
pub struct ShardResult {
    /// What it measured — also when it failed part-way (`error`).
    pub record: ShardRecord,
    /// Why the shard stopped early, if it failed; what it measured until then is in
    /// `record`, every unfinished request accounted as `aborted` or `unsent`.
    pub error: Option<EngineError>,
    /// When it saw the stop flag (ns since start), if the flag stopped it before its
    /// schedule ended.
    pub stopped_at_ns: Option<u64>,
    /// When it sent its last request (ns since start).
    pub last_send_ns: Option<u64>,
}

/// Failures that end a shard (as opposed to failed requests, which are recorded).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The io_uring instance could not be created.
    #[error("cannot set up io_uring (is it disabled in /proc/sys/kernel/io_uring_disabled?): {0}")]
    Ring(std::io::Error),
    /// `io_uring_enter` failed.
    #[error("io_uring_enter failed: {0}")]
    Enter(std::io::Error),
    /// The HTTP/2 shard's runtime (or its timer) could not be set up.
    #[error("cannot set up the HTTP/2 shard's runtime: {0}")]
    Runtime(std::io::Error),
    /// The shard thread could not start or panicked.
    #[error("shard {0} thread failed")]
    Thread(usize),
}

/// Run a shard on the current thread until its schedule is done (or stop is raised).
/// Fails only when the shard cannot start (no io_uring); once running, a failure ends it
/// with what it measured in the result.
pub fn run_shard(cfg: ShardConfig) -> Result<ShardResult, EngineError> {
    Ok(shard::Shard::new(cfg)?.run())
}

/// The end of a stopped shard's schedule: what was due by `stopped_at` and never sent is
/// `aborted` at `now` (a lower bound of its latency), what was not yet due `unsent`. Returns
/// how many were aborted (the shard's error count grows by as many).
///
/// An aborted request is nobody's send: neither sent nor late (DESIGN.md, Verdict: "aborted by
/// the emergency stop or the run's end"), unless the loader itself had kept it back — a
/// connection was free for it in the kernel's view from `loader_since` on, and the stop came
/// more than [`crate::record::LATE_NS`] after the later of that and its due time. Only then is
/// it a late send of the loader's, with the lag it had reached (a backlog the loader left).
/// One that waited on the target — every connection opening or waiting for an answer — or that
/// fell due just before the stop is not in the send lag. (Issue 46: a listener that accepted
/// nothing; its 136 requests aborted by the emergency stop were the loader's send lag.)
fn account_stopped_schedule(
    record: &mut ShardRecord,
    schedule: &mut ShardSchedule,
    now: u64,
    stopped_at: u64,
    loader_since: Option<u64>,
) -> u64 {
    let mut aborted = 0;
    while let Some(due) = schedule.peek().filter(|d| d.intended_ns <= stopped_at) {
        let kept_back = loader_since
            .is_some_and(|since| stopped_at.saturating_sub(since.max(due.intended_ns)) > crate::record::LATE_NS);
        if kept_back {
            record.on_due_unsent(due.phase, due.intended_ns, stopped_at, true, false);
        }
        record.on_failure(
            due.phase,
            due.intended_ns,
            now,
            crate::record::ErrorClass::Aborted,
            std::borrow::Cow::Borrowed(
                "due but not yet sent when the run stopped (latency recorded then: a lower bound)",
            ),
        );
        aborted += 1;
        schedule.advance();
    }
    for (phase, n) in schedule.remaining() {
        record.on_unsent(phase, n);
    }
    aborted
}

/// Whether `method` is idempotent (RFC 9110 §9.2.2).
pub fn is_idempotent(method: &str) -> bool {
    matches!(method.to_ascii_uppercase().as_str(), "GET" | "HEAD" | "PUT" | "DELETE" | "OPTIONS" | "TRACE")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Share;

    fn table(mix: Vec<u16>, share: Share) -> RequestTable {
        let bytes: Vec<Arc<[u8]>> = vec![Arc::from(&b"A"[..]), Arc::from(&b"B"[..])];
        let mut t = RequestTable::plain(bytes, vec![false; 2], vec![true; 2], mix);
        t.share = share;
        t
    }

    #[test]
    fn machines_pick_what_the_one_machine_run_picks_for_the_same_request() {
        let whole = table(vec![0, 1, 1], Share::default());
        let picks: Vec<u32> = (0..12).map(|i| whole.pick(0, i)).collect();
        // Machine k of 2 sends the run's requests k, k + 2, …: the same entries, interleaved.
        for k in 0..2u64 {
            let part = table(vec![0, 1, 1], Share { index: k, count: 2 });
            let mine: Vec<u32> = (0..6).map(|j| part.pick(0, j)).collect();
            let want: Vec<u32> = (0..6).map(|j| picks[(k + 2 * j) as usize]).collect();
            assert_eq!(mine, want, "machine {k}");
        }
        assert_eq!(whole.row_of(1), None, "no data file, no rows");
    }

    #[test]
    fn machines_draw_the_rows_the_one_machine_run_draws() {
        // One request filled from 50 rows, drawn uniformly from seed 9, after a first phase
        // of 7 requests.
        let keyed = |share: Share| {
            let bytes: Vec<Arc<[u8]>> = (0..50u8).map(|r| Arc::from(&[r][..])).collect();
            let mut t = RequestTable::plain(bytes, vec![false; 50], vec![true; 50], vec![0]);
            (t.first, t.keyed) = (vec![0], vec![true]);
            t.keys = Some(keys::Keys::new(50, keys::KeyDist::Uniform, 9));
            (t.phase_offsets, t.share) = (vec![0, 7], share);
            t
        };
        let whole = keyed(Share::default());
        let rows: Vec<u32> = (0..30).map(|i| whole.pick(1, i)).collect();
        assert!(rows.iter().any(|&r| r != rows[0]), "drawn, not fixed: {rows:?}");
        for k in 0..3u64 {
            let part = keyed(Share { index: k, count: 3 });
            let mine: Vec<u32> = (0..10).map(|j| part.pick(1, j)).collect();
            let want: Vec<u32> = (0..10).map(|j| rows[(k + 3 * j) as usize]).collect();
            assert_eq!(mine, want, "machine {k}");
            assert_eq!(part.row_of(mine[0]), Some(mine[0]));
        }
    }
}
