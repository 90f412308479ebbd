//! The shard loop: send what is due, read what arrived, sleep until the next send — one
//! `io_uring_enter` per turn for all of it.
//!
//! A request is due at its intended time. If a connection is idle it is sent at once; if one
//! is closed, it is opened for the request; if the pool is exhausted the request waits at
//! the head of the schedule (its latency keeps counting from the intended time). Every
//! request has one deadline, its intended time plus the client timeout: not sent by then it
//! is `dropped`, sent and not answered by then it is a `timeout`, both recorded at exactly
//! the deadline. When the run stops (interrupt, emergency stop) or the shard fails, what is
//! in flight or waiting is recorded as `aborted` and what was not yet due as `unsent`, so
//! every planned request is accounted for. Requests are never skipped silently.
//!
//! When the shard sleeps and what wakes it is `pace.rs`; response times come from the
//! kernel's receive stamps (`rxtime.rs`), so reading a response later does not move its
//! latency. Each send records how late it left and how much of that was the shard's own
//! doing (see `record::PhaseRecord::own_lag`).
//!
//! On an https target a connection handshakes after connect; that side of the loop is in
//! `tls.rs` and hangs off `Conn::tls`, which is `None` on plain HTTP. On an HTTP/2 run
//! (`--http2`: h2c on `http://`, ALPN `h2` over TLS on `https://`) each connection carries
//! streams instead of one request at a time; that side is `h2.rs` and hangs off `Conn::h2`
//! (over TLS its frames pass through `Conn::tls` both ways).
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the shard's state, its turn (send, reap, sleep), the end of the run |
//! | `ring.rs` | the ring: set-up, submissions (and the backlog when full), timed waits |
//! | `connections.rs` | sockets: opening the pool, connect, errors and closes |
//! | `requests.rs` | requests: dispatch on schedule, send, receive and parse, deadlines |
//! | `tls.rs` | the https side: handshakes, sends and receives through rustls |
//! | `h2.rs` | the HTTP/2 side: streams on the connections, frames in and out, retries |

mod connections;
mod h2;
mod requests;
mod ring;
mod stamps;
pub(in crate::engine) mod timers;
mod tls;

use requests::{own_lag, waited_for_connection};
use ring::new_ring;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use io_uring::{IoUring, cqueue, squeue};

use super::bufring::BufRing;
use super::conn::{Conn, State};
use super::pace::{self, Lateness, Pace, Situation, Sleep};
use super::pool::PoolWatch;
use super::rxtime::{self, Realtime};
use super::tls::TlsClient;
use super::{Clock, EngineError, Live, ShardConfig, ShardResult};
use crate::record::ShardRecord;
use crate::schedule::ShardSchedule;

pub(super) const OP_CONNECT: u64 = 1;
pub(super) const OP_SEND: u64 = 2;
pub(super) const OP_RECV: u64 = 3;
/// Longest wait for in-flight answers after a stop.
const MAX_DRAIN_NS: u64 = 1_000_000_000;
/// Size of each provided receive buffer (header, timestamp and payload).
const RECV_BUF: usize = 16 * 1024;
/// Buffer group id of the shard's provided buffers.
const RECV_GROUP: u16 = 0;

#[inline]
pub(super) fn user_data(conn: usize, generation: u32, op: u64) -> u64 {
    ((conn as u64) << 32) | (u64::from(generation & 0x00ff_ffff) << 8) | op
}

/// A send of `bytes` on connection `c`'s socket `fd` (of `generation`). The bytes must not
/// move or change until it completes.
pub(super) fn send_op(fd: std::os::fd::RawFd, bytes: &[u8], c: usize, generation: u32) -> squeue::Entry {
    io_uring::opcode::Send::new(io_uring::types::Fd(fd), bytes.as_ptr(), bytes.len() as u32)
        .build()
        .user_data(user_data(c, generation, OP_SEND))
}

/// A shard: its ring, connections, schedule share and record.
///
/// Field order matters: `ring` is dropped first, so no operation can outlive the
/// buffers it points into (`bufs`, the request, the sockaddr, the receive header).
pub struct Shard {
    pub(super) ring: IoUring,
    pub(super) bufs: BufRing,
    pub(super) conns: Vec<Conn>,
    /// Connected connections with nothing in flight.
    pub(super) idle: Vec<usize>,
    /// Connections without a socket, ready to be opened.
    pub(super) closed: Vec<usize>,
    /// The target's address; connects point into it (boxed: it must not move).
    sockaddr: Box<socket2::SockAddr>,
    domain: socket2::Domain,
    /// The `msghdr` every multishot receive names (layout of the provided buffers).
    rx_header: Box<libc::msghdr>,
    pub(super) requests: Arc<super::RequestTable>,
    /// TLS client of an https target; `None` for plain HTTP.
    pub(super) tls: Option<TlsClient>,
    pub(super) keepalive: bool,
    /// HTTP/2 (`--http2`): streams over the connections (`h2.rs`).
    h2: Option<h2::H2Mode>,
    /// Size limits on responses.
    limits: super::http1::Limits,
    retry_non_idempotent: bool,
    timeout_ns: u64,
    schedule: ShardSchedule,
    pub(super) clock: Clock,
    stop: Arc<AtomicBool>,
    halt: Arc<AtomicBool>,
    live: Arc<Live>,
    /// Copies for the live metrics endpoint, and when the next one is due (ns since start).
    live_copies: Option<(Arc<crate::record::LiveCopies>, u64)>,
    /// The record for the run's checkpoint, and when the next copy is due.
    checkpoint: Option<(Arc<crate::record::CheckpointSlot>, u64)>,
    pub(super) record: ShardRecord,
    /// Requests handed to a connection and not yet finished.
    pub(super) in_flight: u32,
    /// Sockets connected now.
    pub(super) open: u32,
    sent: u64,
    ok: u64,
    pub(super) errors: u64,
    /// When the last request was handed to the kernel (ns since start).
    last_send_ns: Option<u64>,
    /// Since when no connection has been free (pool-wait attribution).
    pool: PoolWatch,
    /// A closed run whose every user has a connection (or a stream) of its own: its pool is
    /// full by design, and a user's next request never waits for a connection — the answer
    /// that makes it due is the one that frees its connection.
    pub(super) own_connections: bool,
    /// The wake-up strategy for this shard's rate.
    pace: Pace,
    /// How late timer wake-ups end, for waking early.
    lateness: Lateness,
    /// When the shard last woke up (ns since start).
    woke_at: u64,
    /// When that wake-up was planned for: past a send's due time when the shard chose to
    /// wait (a batching window), so that wait is counted as the loader's own lag.
    wake_target: u64,
    /// Earliest deadline of anything in flight (`u64::MAX`: none).
    next_deadline: u64,
    /// The last turn read part of a response and more of it is on its way.
    pub(super) streaming: bool,
    /// Wall clock to run clock, for the kernel's receive stamps.
    realtime: Realtime,
    cqes: Vec<(u64, i32, u32)>,
    /// Entries that found the submission queue full; submitted first thing next turn.
    backlog: Vec<squeue::Entry>,
    /// Completion queue size: a wait for this many completions is a wait for the timer.
    cq_entries: usize,
    /// The kernel takes absolute timeouts (`IORING_ENTER_ABS_TIMER`, Linux 6.12+).
    abs_timer: bool,
    /// Flags of a timed wait: the absolute timer, and not accounting the sleep as I/O wait
    /// when the kernel knows how (`IORING_ENTER_NO_IOWAIT`): the shard waits for its
    /// schedule, not for a disk, and an iowait sleep tells the idle and frequency governors
    /// to keep the CPU in shallow, costlier states.
    enter_flags: io_uring::EnterFlags,
    /// The wake-up timers armed ahead on the ring (rings with deferred task-run, Linux 6.1+;
    /// else each wait arms its own).
    timers: Option<timers::WakeTimers>,
}

impl Shard {
    /// Set up the ring and the (still closed) pool.
    pub fn new(cfg: ShardConfig) -> Result<Shard, EngineError> {
        let entries = (cfg.connections as u32 * 2 + 16).next_power_of_two().clamp(64, 32768);
        let ring = new_ring(entries)?;
        let buffers = (cfg.connections as u32).next_power_of_two().clamp(64, 1024) as u16;
        let bufs = BufRing::new(&ring.submitter(), buffers, RECV_BUF, RECV_GROUP).map_err(EngineError::Ring)?;
        let conns: Vec<Conn> = (0..cfg.connections).map(|_| Conn::new(cfg.limits)).collect();
        let cq_entries = ring.params().cq_entries() as usize;
        let mut enter_flags = io_uring::EnterFlags::ABS_TIMER;
        if ring.params().is_feature_no_iowait() {
            enter_flags |= io_uring::EnterFlags::NO_IOWAIT;
        }
        let timers = ring.params().is_setup_single_issuer().then(timers::WakeTimers::new);
        let rows = cfg.requests.keys.as_ref().map_or(0, |k| k.rows());
        let slots = cfg.connections as u64 * cfg.http2.as_ref().map_or(1, |h| u64::from(h.max_streams.max(1)));
        let own_connections = cfg.schedule.users_most().is_some_and(|n| u64::from(n) <= slots);
        Ok(Shard {
            ring,
            bufs,
            closed: (0..conns.len()).rev().collect(),
            idle: Vec::with_capacity(conns.len()),
            conns,
            sockaddr: Box::new(socket2::SockAddr::from(cfg.addr)),
            domain: socket2::Domain::for_address(cfg.addr),
            rx_header: Box::new(rxtime::header()),
            requests: cfg.requests,
            tls: cfg.tls,
            keepalive: cfg.keepalive,
            h2: cfg.http2.map(|h| h2::H2Mode::new(h, cfg.segments.clone())),
            limits: cfg.limits,
            retry_non_idempotent: cfg.retry_non_idempotent,
            timeout_ns: cfg.timeout.as_nanos() as u64,
            record: ShardRecord::new(cfg.windows, cfg.seconds).with_rows(rows).from_send(cfg.schedule.is_closed()),
            schedule: cfg.schedule,
            clock: cfg.clock,
            stop: cfg.stop,
            halt: cfg.halt,
            live: cfg.live,
            live_copies: cfg.live_copies.map(|c| (c, 0)),
            checkpoint: cfg.checkpoint.map(|c| (c, crate::record::next_copy_ns(0))),
            in_flight: 0,
            open: 0,
            sent: 0,
            ok: 0,
            errors: 0,
            last_send_ns: None,
            pool: PoolWatch::default(),
            own_connections,
            pace: cfg.pace,
            lateness: Lateness::default(),
            woke_at: 0,
            wake_target: 0,
            next_deadline: u64::MAX,
            streaming: false,
            realtime: Realtime::default(),
            cqes: Vec::with_capacity(cq_entries),
            backlog: Vec::new(),
            cq_entries,
            abs_timer: true,
            enter_flags,
            timers,
        })
    }

    /// Open the pool, wait for the start instant, then run the schedule to its end. Never
    /// fails: a failure part-way ends the shard with what it measured and the error.
    pub fn run(mut self) -> ShardResult {
        // Timer waits end when asked, and a wake-up preempts what runs on the core.
        crate::engine::wakeup::on_time();
        // When the stop flag rises (interrupt, emergency stop) nothing more is sent; answers
        // already on their way are still awaited, for at most `drain_ns`.
        let drain_ns = self.timeout_ns.min(MAX_DRAIN_NS);
        let mut stopped_at = None;
        let result = self.open_pool().and_then(|stopped| {
            if stopped {
                stopped_at = Some(0);
                return Ok(());
            }
            self.turns(&mut stopped_at, drain_ns)
        });
        let error = result.err();
        if stopped_at.is_some() || error.is_some() {
            let now = self.clock.now_ns();
            self.account_unfinished(now, stopped_at.unwrap_or(now));
        }
        // Sockets are closed whatever happened; a failure to wait for that is not news.
        let _ = self.shut_down();
        self.publish();
        let last_send_ns = self.last_send_ns;
        let Shard { ring, bufs, conns, record, .. } = self;
        drop(ring);
        drop(conns);
        drop(bufs);
        ShardResult { record, error, stopped_at_ns: stopped_at, last_send_ns }
    }

    /// The run is to stop sending: an emergency stop, an interrupt or `loader stop`.
    #[inline]
    pub(super) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.halt.load(Ordering::Relaxed)
    }

    /// The loop proper, until the schedule is done (and answered) or the run stops and its
    /// drain ends.
    fn turns(&mut self, stopped_at: &mut Option<u64>, drain_ns: u64) -> Result<(), EngineError> {
        loop {
            let now = self.clock.now_ns();
            if stopped_at.is_none() && self.stopping() {
                *stopped_at = Some(now);
            }
            match *stopped_at {
                Some(at) if self.in_flight == 0 || now >= at + drain_ns => return Ok(()),
                Some(_) => {}
                None => self.dispatch(now),
            }
            if now >= self.next_deadline {
                self.expire(now);
            }
            if stopped_at.is_none() && self.schedule.peek().is_none() && self.in_flight == 0 {
                return Ok(());
            }
            let situation = self.situation(now, stopped_at.map(|at| at + drain_ns));
            let (early, window) =
                (self.lateness.early(self.pace.early_cap_ns), self.pace.window(self.lateness.early(u64::MAX)));
            let sleep = pace::plan(&situation, early, self.pace.spins, window);
            let target = self.wait(&sleep)?;
            let mut woke = self.clock.now_ns();
            // The kernel reports the number submitted rather than the timeout when this enter
            // also submitted work, so a wake-up at or past the target counts as the timer's.
            let timed_out = woke >= target;
            if timed_out {
                let late = woke - target;
                self.record.on_wake(late, woke);
                self.lateness.observe(late);
            }
            if timed_out
                && let Some(due) = sleep.spin_to
                && due.saturating_sub(woke) <= self.pace.early_cap_ns
            {
                woke = self.spin_until(due, woke);
            }
            self.woke_at = woke;
            self.wake_target = target;
            self.realtime.sync(woke);
            // Sends first: reading responses must not delay what is due — unless they hold the
            // connections the due sends need (read late on purpose), then read them first.
            // When sends share wake-ups they leave at once, not with the sleep's enter after
            // the reading: the target works while the shard reads. Measured on one shard, nginx
            // on the other core, interleaved pairs, requests per CPU-second: 40,000 req/s
            // 66,600 → 77,400, 100,000 req/s 112,900 → 129,400, the same send lag and latency.
            // With a wake-up per send it is an enter more per request for nothing: 10,000 req/s
            // no difference, 1,000 req/s 25,700 → 22,100.
            if stopped_at.is_none() {
                // A due request whose deadline passed while the shard was not running: read
                // what arrived first, so the connections its answers freed are known, and with
                // them whose the drop was (`dispatch`).
                if self.schedule.peek().is_some_and(|d| d.intended_ns + self.timeout_ns <= woke) {
                    self.reap(woke);
                }
                self.dispatch(woke);
                if self.pace.batch_ns > 0 {
                    self.submit_queued();
                }
            }
            self.reap(woke);
            let retries = self.h2.as_ref().is_some_and(|m| !m.retries.is_empty());
            if stopped_at.is_none() && (retries || self.schedule.peek().is_some_and(|d| d.intended_ns <= woke)) {
                self.dispatch(woke);
            }
            self.publish();
            self.copy_for_metrics(woke);
            self.copy_for_checkpoint(woke);
        }
    }

    /// Every [`crate::record::LIVE_COPY_PERIOD_NS`] at most, at the end of a turn: hand
    /// copies of the phases that moved to the live metrics endpoint (see `record::LiveCopies`;
    /// a turn that finds the main thread reading them tries again next turn). Nothing when no
    /// endpoint runs.
    fn copy_for_metrics(&mut self, now: u64) {
        if let Some((copies, due)) = self.live_copies.as_mut()
            && now >= *due
            && copies.copy_from(&self.record)
        {
            *due = now + crate::record::LIVE_COPY_PERIOD_NS;
        }
    }

    /// Once a second, at the end of the first turn after 100 ms before the second: hand the
    /// record to the run's checkpoint (see `record::CheckpointSlot`: only the phases that
    /// moved are copied).
    fn copy_for_checkpoint(&mut self, now: u64) {
        if let Some((slot, due)) = self.checkpoint.as_mut()
            && now >= *due
            && slot.offer(&self.record, now)
        {
            *due = crate::record::next_copy_ns(now);
        }
    }

    /// What `pace::plan` needs to know now.
    fn situation(&self, now: u64, draining_until: Option<u64>) -> Situation {
        let head = self.schedule.peek();
        let mut next_due = head.map(|d| d.intended_ns);
        let mut due_waits = head.is_some_and(|d| d.intended_ns <= now);
        let mut deadline = self.next_deadline;
        if let Some(d) = head.filter(|_| due_waits) {
            deadline = deadline.min(d.intended_ns + self.timeout_ns);
        }
        let (mut free, mut streaming) = (self.idle.len() + self.closed.len(), self.streaming);
        if self.h2.is_some() {
            let (h2_free, crowded) = self.h2_situation();
            free = h2_free;
            streaming |= crowded;
            // A request the server did not process waits for a stream, due already.
            if let Some(f) = self.h2.as_ref().and_then(|m| m.retries.front()) {
                next_due = Some(next_due.map_or(f.intended_ns, |d| d.min(f.intended_ns)));
                due_waits = true;
                deadline = deadline.min(f.deadline_ns);
            }
        }
        // A closed run's answers make its next requests due: each is read as it comes.
        streaming |= self.schedule.is_closed() && self.in_flight > 0;
        let draining_until = draining_until.or_else(|| head.is_none().then_some(u64::MAX));
        Situation {
            now,
            next_due,
            due_waits,
            deadline: if self.backlog.is_empty() { deadline } else { now },
            in_flight: self.in_flight,
            free,
            streaming,
            draining_until,
        }
    }

    /// Busy-wait from `now` to `due` (bounded by the pace's early cap), returning the time.
    fn spin_until(&self, due: u64, mut now: u64) -> u64 {
        while now < due {
            std::hint::spin_loop();
            now = self.clock.now_ns();
        }
        now
    }

    /// Take every completion and act on it; `now` is when the shard woke.
    fn reap(&mut self, now: u64) {
        self.streaming = false;
        let mut cqes = std::mem::take(&mut self.cqes);
        cqes.extend(self.ring.completion().map(|e| (e.user_data(), e.result(), e.flags())));
        for &(ud, res, flags) in &cqes {
            if self.timers.as_mut().is_some_and(|t| t.completed(ud)) {
                continue;
            }
            self.complete(ud, res, flags, now);
        }
        cqes.clear();
        self.cqes = cqes;
    }

    fn complete(&mut self, ud: u64, res: i32, flags: u32, now: u64) {
        let c = (ud >> 32) as usize;
        let op = ud & 0xff;
        let Some(conn) = self.conns.get_mut(c) else { return };
        let ended = op != OP_RECV || !cqueue::more(flags);
        if ended {
            conn.ops = conn.ops.saturating_sub(1);
            if op == OP_RECV {
                conn.recv_armed = false;
            }
        }
        let closing = conn.state == State::Closing;
        let bid = cqueue::buffer_select(flags);
        // An HTTP/2 connection over TLS sends and receives through rustls (`tls.rs`), which
        // hands the plaintext to its frames.
        let h2 = conn.h2.is_some() && conn.tls.is_none();
        match op {
            _ if closing => {}
            OP_CONNECT => self.on_connected(c, res, now),
            OP_SEND if h2 => self.sent_h2(c, res, now),
            OP_RECV if h2 => self.received_h2(c, res, bid, now),
            OP_SEND => self.on_sent(c, res, now),
            _ => self.on_received(c, res, bid, now),
        }
        if let Some(bid) = bid {
            self.bufs.recycle(bid);
        }
        if op == OP_RECV && ended {
            // The kernel ended the multishot receive (out of buffers): arm it again.
            self.arm_recv(c);
        }
        self.settle(c);
    }

    /// Close every socket and wait (boundedly) for outstanding operations to finish.
    fn shut_down(&mut self) -> Result<(), EngineError> {
        for c in 0..self.conns.len() {
            self.conns[c].retry = None;
            self.begin_close(c);
            self.settle(c);
        }
        let give_up = Instant::now() + Duration::from_millis(500);
        while self.conns.iter().any(|c| c.ops > 0) && Instant::now() < give_up {
            let until = self.clock.now_ns() + 10_000_000;
            self.wait(&Sleep { until, on_completion: true, spin_to: None })?;
            let now = self.clock.now_ns();
            self.reap(now);
        }
        Ok(())
    }

    fn publish(&self) {
        self.live.publish(self.sent, self.ok, self.errors, u64::from(self.in_flight), u64::from(self.open));
        self.live.publish_late(self.record.late_loader);
    }
}

#[cfg(test)]
mod tests {
    use super::requests::own_lag;

    #[test]
    fn own_lag_is_what_the_timer_does_not_explain() {
        const US: u64 = 1_000;
        // Woke 40 µs late for a send due at 1000: the host's 40, the loader's 5 (its work).
        assert_eq!(own_lag(1000 * US, 1045 * US, 1040 * US, 1000 * US), 5 * US);
        // A batching window: slept until due + 50 on purpose, woke 30 late: 55 of 85 are its own.
        assert_eq!(own_lag(1000 * US, 1085 * US, 1080 * US, 1050 * US), 55 * US);
        // Woke early (a completion) before the target, past the due time: all its own.
        assert_eq!(own_lag(1000 * US, 1030 * US, 1020 * US, 1050 * US), 30 * US);
        // Dispatched a turn later than the wake: the extra turn is its own too.
        assert_eq!(own_lag(1000 * US, 1200 * US, 1040 * US, 1000 * US), 160 * US);
    }
}
