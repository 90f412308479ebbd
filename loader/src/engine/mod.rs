//! The engine: one OS thread and one io_uring ring per shard, sending on schedule.
//!
//! Each shard owns its connections, its share of the schedule ([`ShardSchedule`]) and its
//! [`ShardRecord`]; shards share nothing on the hot path but a stop flag and a few
//! relaxed counters for the live progress line. The loop itself is in `shard.rs`, the
//! per-connection state in `conn.rs`, response framing in [`http1`], TLS (https targets) in
//! [`tls`].
//!
//! Why the `io-uring` crate directly rather than tokio-uring: the schedule needs wake-ups
//! with sub-millisecond precision (tokio's timer wheel has 1 ms slots, which would add up
//! to 1 ms of false send lag and latency), and batching every send, receive and the wait
//! for the next due time into one `io_uring_enter` is where io_uring saves CPU. The
//! engine waits with `IORING_ENTER_EXT_ARG` timeouts (hrtimers) for exactly the next
//! intended send time.
//!
//! This module does not judge or print anything; it measures.

mod bufring;
mod conn;
pub mod http1;
mod shard;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::record::ShardRecord;
use crate::schedule::{ShardSchedule, Window};

/// The run's time base: nanoseconds since the run's start instant.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
}

impl Clock {
    /// A clock whose zero is `start` (may lie in the future).
    pub fn new(start: Instant) -> Self {
        Clock { start }
    }

    /// The zero instant.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// Nanoseconds since start; 0 before it.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        Instant::now().saturating_duration_since(self.start).as_nanos() as u64
    }
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
}

impl Live {
    pub(crate) fn publish(&self, sent: u64, ok: u64, errors: u64, in_flight: u64, open: u64) {
        self.sent.store(sent, Ordering::Relaxed);
        self.ok.store(ok, Ordering::Relaxed);
        self.errors.store(errors, Ordering::Relaxed);
        self.in_flight.store(in_flight, Ordering::Relaxed);
        self.open_connections.store(open, Ordering::Relaxed);
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
    /// Set to stop sending at once (interrupt, emergency stop).
    pub stop: Arc<AtomicBool>,
    /// Live counters of this shard.
    pub live: Arc<Live>,
    /// Expected run length in seconds (sizes the per-second series up front).
    pub seconds: usize,
    /// Wake-up window: see [`wake_window`].
    pub wake_window: Duration,
    /// TLS client for an https target (`None`: plain HTTP).
    pub tls: Option<tls::TlsClient>,
}

/// Per-shard rate from which the shard batches its wake-ups.
const BATCH_FROM_RATE: f64 = 2000.0;
/// The wake-up window used then.
const BATCH_WINDOW: Duration = Duration::from_micros(50);

/// How long a shard may let completions and due sends gather before it wakes.
///
/// Every wake-up of a sleeping shard costs a timer and a context switch (a few µs in a
/// VM); at tens of thousands of requests per second per shard, waking once per send and
/// once per response costs more CPU than the HTTP work. Above [`BATCH_FROM_RATE`] per
/// shard the loop therefore sleeps at least 50 µs and lets the kernel hold completions up
/// to 50 µs (`min_wait`), so sends may leave up to 50 µs late (recorded as send lag, and
/// in the latency, which counts from the intended time) and completion times may read up
/// to 50 µs late. Below it — where wake-ups are cheap — timing is exact.
pub fn wake_window(rate_per_shard: f64) -> Duration {
    if rate_per_shard >= BATCH_FROM_RATE { BATCH_WINDOW } else { Duration::ZERO }
}

/// The run's requests, encoded once, shared read-only by every shard.
#[derive(Debug)]
pub struct RequestTable {
    /// Encoded bytes of each request.
    pub bytes: Vec<Box<[u8]>>,
    /// Whether each request is HEAD (its responses have no body).
    pub head: Vec<bool>,
    /// Request `i` of a phase is `mix[i % mix.len()]`.
    pub mix: Vec<u16>,
}

impl RequestTable {
    /// The request to send as index `i` of its phase.
    #[inline]
    pub fn pick(&self, i: u64) -> u16 {
        self.mix[(i % self.mix.len() as u64) as usize]
    }
}

/// How a shard ended.
#[derive(Debug)]
pub struct ShardResult {
    /// What it measured.
    pub record: ShardRecord,
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
    /// The shard thread could not start or panicked.
    #[error("shard {0} thread failed")]
    Thread(usize),
}

/// Run a shard on the current thread until its schedule is done (or stop is raised).
pub fn run_shard(cfg: ShardConfig) -> Result<ShardResult, EngineError> {
    shard::Shard::new(cfg)?.run()
}
