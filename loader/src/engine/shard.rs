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
//! `shard_tls.rs` and hangs off `Conn::tls`, which is `None` on plain HTTP.

use std::borrow::Cow;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use io_uring::{IoUring, cqueue, opcode, squeue, types};

use super::bufring::BufRing;
use super::conn::{Chunk, Conn, InFlight, State};
use super::http1::Progress;
use super::pace::{self, Lateness, Pace, Situation, Sleep};
use super::pool::PoolWatch;
use super::rxtime::{self, Realtime};
use super::tls::TlsClient;
use super::{Clock, EngineError, Live, ShardConfig, ShardResult};
use crate::record::{ErrorClass, ShardRecord};
use crate::schedule::{Due, ShardSchedule};

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
    sockaddr: Box<libc::sockaddr_storage>,
    sockaddr_len: libc::socklen_t,
    family: i32,
    /// The `msghdr` every multishot receive names (layout of the provided buffers).
    rx_header: Box<libc::msghdr>,
    pub(super) requests: Arc<super::RequestTable>,
    /// TLS client of an https target; `None` for plain HTTP.
    pub(super) tls: Option<TlsClient>,
    pub(super) keepalive: bool,
    retry_non_idempotent: bool,
    timeout_ns: u64,
    schedule: ShardSchedule,
    pub(super) clock: Clock,
    stop: Arc<AtomicBool>,
    live: Arc<Live>,
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
}

fn new_ring(entries: u32) -> Result<IoUring, EngineError> {
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

fn sockaddr_of(addr: std::net::SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t, i32) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        std::net::SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is large enough and suitably aligned for sockaddr_in.
            unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in, sin) };
            (storage, size_of::<libc::sockaddr_in>() as libc::socklen_t, libc::AF_INET)
        }
        std::net::SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { std::ptr::write(&mut storage as *mut _ as *mut libc::sockaddr_in6, sin6) };
            (storage, size_of::<libc::sockaddr_in6>() as libc::socklen_t, libc::AF_INET6)
        }
    }
}

/// The class and message of a failed socket operation (`errno`, positive).
pub(super) fn class_of_errno(errno: i32) -> (ErrorClass, Cow<'static, str>) {
    let class = match errno {
        libc::ECONNREFUSED | libc::ENETUNREACH | libc::EHOSTUNREACH | libc::EADDRNOTAVAIL | libc::EADDRINUSE => {
            ErrorClass::Connect
        }
        libc::ETIMEDOUT => ErrorClass::Timeout,
        libc::ECONNRESET | libc::EPIPE | libc::ECONNABORTED | libc::ENOTCONN | libc::ESHUTDOWN => ErrorClass::Reset,
        _ => ErrorClass::IoError,
    };
    let message = match errno {
        libc::ECONNREFUSED => Cow::Borrowed("connection refused (ECONNREFUSED)"),
        libc::ECONNRESET => Cow::Borrowed("connection reset by peer (ECONNRESET)"),
        libc::EPIPE => Cow::Borrowed("broken pipe: the peer closed the connection (EPIPE)"),
        libc::EADDRNOTAVAIL => Cow::Borrowed("no free local port for a new connection (EADDRNOTAVAIL)"),
        libc::ETIMEDOUT => Cow::Borrowed("the kernel timed the connection out (ETIMEDOUT)"),
        libc::EHOSTUNREACH => Cow::Borrowed("no route to host (EHOSTUNREACH)"),
        libc::ENETUNREACH => Cow::Borrowed("network unreachable (ENETUNREACH)"),
        _ => Cow::Owned(format!("{} (errno {errno})", std::io::Error::from_raw_os_error(errno))),
    };
    (class, message)
}

impl Shard {
    /// Set up the ring and the (still closed) pool.
    pub fn new(cfg: ShardConfig) -> Result<Shard, EngineError> {
        let entries = (cfg.connections as u32 * 2 + 16).next_power_of_two().clamp(64, 32768);
        let ring = new_ring(entries)?;
        let buffers = (cfg.connections as u32).next_power_of_two().clamp(64, 1024) as u16;
        let bufs = BufRing::new(&ring.submitter(), buffers, RECV_BUF, RECV_GROUP).map_err(EngineError::Ring)?;
        let (storage, sockaddr_len, family) = sockaddr_of(cfg.addr);
        let conns: Vec<Conn> = (0..cfg.connections).map(|_| Conn::new(cfg.limits)).collect();
        let cq_entries = ring.params().cq_entries() as usize;
        let mut enter_flags = io_uring::EnterFlags::ABS_TIMER;
        if ring.params().is_feature_no_iowait() {
            enter_flags |= io_uring::EnterFlags::NO_IOWAIT;
        }
        Ok(Shard {
            ring,
            bufs,
            closed: (0..conns.len()).rev().collect(),
            idle: Vec::with_capacity(conns.len()),
            conns,
            sockaddr: Box::new(storage),
            sockaddr_len,
            family,
            rx_header: Box::new(rxtime::header()),
            requests: cfg.requests,
            tls: cfg.tls,
            keepalive: cfg.keepalive,
            retry_non_idempotent: cfg.retry_non_idempotent,
            timeout_ns: cfg.timeout.as_nanos() as u64,
            record: ShardRecord::new(cfg.windows, cfg.seconds),
            schedule: cfg.schedule,
            clock: cfg.clock,
            stop: cfg.stop,
            live: cfg.live,
            in_flight: 0,
            open: 0,
            sent: 0,
            ok: 0,
            errors: 0,
            last_send_ns: None,
            pool: PoolWatch::default(),
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
        })
    }

    /// Open the pool, wait for the start instant, then run the schedule to its end. Never
    /// fails: a failure part-way ends the shard with what it measured and the error.
    pub fn run(mut self) -> ShardResult {
        // Let hrtimer waits end when asked, not up to 50 µs later (the default slack).
        // SAFETY: prctl with PR_SET_TIMERSLACK only changes this thread's timer slack.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
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

    /// The loop proper, until the schedule is done (and answered) or the run stops and its
    /// drain ends.
    fn turns(&mut self, stopped_at: &mut Option<u64>, drain_ns: u64) -> Result<(), EngineError> {
        loop {
            let now = self.clock.now_ns();
            if stopped_at.is_none() && self.stop.load(Ordering::Relaxed) {
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
            let sleep = pace::plan(&situation, early, window);
            self.wait(&sleep)?;
            let mut woke = self.clock.now_ns();
            // The kernel reports the number submitted rather than the timeout when this enter
            // also submitted work, so a wake-up at or past the target counts as the timer's.
            let timed_out = woke >= sleep.until;
            if timed_out {
                let late = woke - sleep.until;
                self.record.on_wake(late);
                self.lateness.observe(late);
            }
            if timed_out
                && let Some(due) = sleep.spin_to
                && due.saturating_sub(woke) <= self.pace.early_cap_ns
            {
                woke = self.spin_until(due, woke);
            }
            self.woke_at = woke;
            self.wake_target = sleep.until;
            self.realtime.sync(woke);
            // Sends first: reading responses must not delay what is due — unless they hold the
            // connections the due sends need (read late on purpose), then read them first.
            if stopped_at.is_none() {
                self.dispatch(woke);
            }
            self.reap(woke);
            if stopped_at.is_none() && self.schedule.peek().is_some_and(|d| d.intended_ns <= woke) {
                self.dispatch(woke);
            }
            self.publish();
        }
    }

    /// What `pace::plan` needs to know now.
    fn situation(&self, now: u64, draining_until: Option<u64>) -> Situation {
        let head = self.schedule.peek();
        let due_waits = head.is_some_and(|d| d.intended_ns <= now);
        let mut deadline = self.next_deadline;
        if let Some(d) = head.filter(|_| due_waits) {
            deadline = deadline.min(d.intended_ns + self.timeout_ns);
        }
        let draining_until = draining_until.or_else(|| head.is_none().then_some(u64::MAX));
        Situation {
            now,
            next_due: head.map(|d| d.intended_ns),
            due_waits,
            deadline: if self.backlog.is_empty() { deadline } else { now },
            in_flight: self.in_flight,
            free: self.idle.len() + self.closed.len(),
            streaming: self.streaming,
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

    /// Connect every connection before the start instant; true if stopped meanwhile.
    fn open_pool(&mut self) -> Result<bool, EngineError> {
        while let Some(c) = self.closed.pop() {
            self.start_connect(c, None, 0);
        }
        let start = self.clock.start();
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= start {
                return Ok(false);
            }
            // The run's clock reads 0 until the start: wait on the absolute clock.
            let left = (start - now).min(Duration::from_nanos(pace::MAX_WAIT_NS));
            self.flush_backlog();
            self.enter_for(left, 1)?;
            let now = self.clock.now_ns();
            self.woke_at = now;
            self.wake_target = now;
            self.realtime.sync(now);
            self.reap(now);
            self.publish();
        }
    }

    /// Hand every due request to a connection, in schedule order.
    fn dispatch(&mut self, now: u64) {
        while let Some(due) = self.schedule.peek() {
            if due.intended_ns > now {
                break;
            }
            let deadline = due.intended_ns + self.timeout_ns;
            if now >= deadline {
                // Its deadline passed before any connection came free: never sent.
                self.record.on_failure(
                    due.phase,
                    due.intended_ns,
                    deadline,
                    ErrorClass::Dropped,
                    Cow::Borrowed("no connection came free before its deadline (intended time + timeout)"),
                );
                self.errors += 1;
            } else if let Some(c) = self.idle.pop() {
                self.in_flight += 1;
                let f = self.take(due, now, deadline);
                self.note_deadline(deadline);
                self.send_request(c, f, f.waited);
            } else if let Some(c) = self.closed.pop() {
                self.in_flight += 1;
                let f = self.take(due, now, deadline);
                self.start_connect(c, Some(f), now);
            } else {
                self.pool.exhausted(now);
                break;
            }
            self.schedule.advance();
        }
        if self.idle.is_empty() && self.closed.is_empty() {
            self.pool.exhausted(now);
        } else {
            self.pool.free();
        }
    }

    /// The request `due`, taken from the schedule at `now`.
    fn take(&self, due: Due, now: u64, deadline_ns: u64) -> InFlight {
        InFlight {
            phase: due.phase,
            request: self.requests.pick(due.index),
            intended_ns: due.intended_ns,
            sent_ns: now,
            deadline_ns,
            written: 0,
            retried: false,
            waited: self.pool.waited(due.intended_ns),
        }
    }

    fn note_deadline(&mut self, deadline: u64) {
        self.next_deadline = self.next_deadline.min(deadline);
    }

    /// Submit what is queued and sleep as `sleep` says.
    fn wait(&mut self, sleep: &Sleep) -> Result<(), EngineError> {
        self.flush_backlog();
        let now = self.clock.now_ns();
        if sleep.until <= now {
            let pending = self.ring.submission().len() as u32;
            // SAFETY: no argument pointer is passed; GETEVENTS runs deferred completion work
            // without waiting for any.
            let r = unsafe { self.ring.submitter().enter::<libc::sigset_t>(pending, 0, ENTER_GETEVENTS, None) };
            return self.entered(r.map(|_| ()));
        }
        // A wait for as many completions as the queue holds is a wait for the timer (the
        // kernel caps the count at the queue size, so a full queue still wakes the shard).
        let want = if sleep.on_completion { 1 } else { self.cq_entries };
        self.enter_until(sleep.until, now, want)
    }

    /// Wait up to `left` for `want` completions.
    fn enter_for(&mut self, left: Duration, want: usize) -> Result<(), EngineError> {
        let ts = types::Timespec::from(left);
        let args = types::SubmitArgs::new().timespec(&ts);
        let r = self.ring.submitter().submit_with_args(want, &args);
        self.entered(r.map(|_| ()))
    }

    /// Wait until `until` (run clock; `now` is the run clock now) for `want` completions: on
    /// the absolute clock when the kernel takes it (no drift between reading the clock and
    /// arming the timer), else relative.
    fn enter_until(&mut self, until: u64, now: u64, want: usize) -> Result<(), EngineError> {
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
    fn entered(&self, r: std::io::Result<()>) -> Result<(), EngineError> {
        match r {
            Err(e) if !matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN)) => {
                Err(EngineError::Enter(e))
            }
            _ => Ok(()),
        }
    }

    /// Queue an operation. A full submission queue is submitted first; if the kernel cannot
    /// take it yet, the entry waits in `backlog` for the next turn (never a panic).
    pub(super) fn push(&mut self, entry: squeue::Entry) {
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
    fn flush_backlog(&mut self) {
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

    fn start_connect(&mut self, c: usize, request: Option<InFlight>, now: u64) {
        // SAFETY: plain socket(2) call.
        let fd = unsafe { libc::socket(self.family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            // Out of descriptors or memory: fail the request, keep the slot for later.
            self.closed.push(c);
            if let Some(f) = request {
                let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
                let message =
                    Cow::Owned(format!("cannot create a socket: {}", std::io::Error::from_raw_os_error(errno)));
                self.finish_failed(f, now, ErrorClass::Connect, message);
            }
            return;
        }
        set_nodelay(fd);
        rxtime::enable(fd);
        let deadline = request.map_or(now + self.timeout_ns, |f| f.deadline_ns);
        self.note_deadline(deadline);
        let generation = {
            let conn = &mut self.conns[c];
            conn.fd = fd;
            conn.generation = conn.generation.wrapping_add(1);
            conn.state = State::Connecting;
            conn.connect_started_ns = now;
            conn.inflight = request;
            conn.ops += 1;
            conn.generation
        };
        let addr = &*self.sockaddr as *const libc::sockaddr_storage as *const libc::sockaddr;
        let entry = opcode::Connect::new(types::Fd(fd), addr, self.sockaddr_len)
            .build()
            .user_data(user_data(c, generation, OP_CONNECT));
        self.push(entry);
    }

    pub(super) fn send_request(&mut self, c: usize, mut f: InFlight, waited: bool) {
        let now = self.clock.now_ns();
        let own_lag = own_lag(f.intended_ns, now, self.woke_at, self.wake_target);
        f.sent_ns = now;
        let conn = &mut self.conns[c];
        conn.state = State::Busy;
        conn.inflight = Some(f);
        conn.parser.expect_head(self.requests.head[f.request as usize]);
        let (fd, generation) = (conn.fd, conn.generation);
        // A request sent again after a stale connection was sent once already: counted then.
        if !f.retried {
            self.record.on_send(f.phase, f.intended_ns, now, own_lag, waited, self.in_flight);
            self.sent += 1;
        }
        self.last_send_ns = Some(now);
        if self.conns[c].tls.is_some() {
            self.send_tls_request(c, f.request, now);
            return;
        }
        let bytes = &self.requests.bytes[f.request as usize];
        let entry = opcode::Send::new(types::Fd(fd), bytes.as_ptr(), bytes.len() as u32)
            .build()
            .user_data(user_data(c, generation, OP_SEND));
        self.conns[c].ops += 1;
        self.push(entry);
    }

    /// Arm the connection's multishot receive (once per socket, again only if the kernel
    /// ended it, e.g. when it ran out of provided buffers).
    pub(super) fn arm_recv(&mut self, c: usize) {
        let conn = &mut self.conns[c];
        if conn.recv_armed || !matches!(conn.state, State::Idle | State::Busy | State::Handshaking) {
            return;
        }
        conn.recv_armed = true;
        conn.ops += 1;
        let entry = opcode::RecvMsgMulti::new(types::Fd(conn.fd), &*self.rx_header, self.bufs.group)
            .build()
            .user_data(user_data(c, conn.generation, OP_RECV));
        self.push(entry);
    }

    /// Take every completion and act on it; `now` is when the shard woke.
    fn reap(&mut self, now: u64) {
        self.streaming = false;
        let mut cqes = std::mem::take(&mut self.cqes);
        cqes.extend(self.ring.completion().map(|e| (e.user_data(), e.result(), e.flags())));
        for &(ud, res, flags) in &cqes {
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
        match op {
            _ if closing => {}
            OP_CONNECT => self.on_connected(c, res, now),
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

    fn on_connected(&mut self, c: usize, res: i32, now: u64) {
        if res < 0 {
            self.record.connect_failures += 1;
            if -res == libc::EADDRNOTAVAIL {
                self.record.connect_no_port += 1;
            }
            let conn = &mut self.conns[c];
            let request = conn.inflight.take();
            conn.state = State::Closing; // ops == 0: settle closes the socket
            if let Some(f) = request {
                let (class, message) = class_of_errno(-res);
                self.finish_failed(f, now, class, message);
            }
            return;
        }
        self.record.connections_opened += 1;
        self.open += 1;
        if self.tls.is_some() {
            self.start_handshake(c, now);
            return;
        }
        self.conns[c].state = State::Idle;
        self.arm_recv(c);
        match self.conns[c].inflight.take() {
            Some(f) => self.send_request(c, f, waited_for_connection(&f)),
            None => self.idle.push(c),
        }
    }

    fn on_sent(&mut self, c: usize, res: i32, now: u64) {
        if self.conns[c].tls.is_some() {
            self.on_tls_sent(c, res, now);
            return;
        }
        let conn = &mut self.conns[c];
        let Some(f) = conn.inflight.as_mut() else { return };
        if res < 0 {
            self.on_socket_error(c, -res, now);
            return;
        }
        let request = &self.requests.bytes[f.request as usize];
        f.written += res as usize;
        if f.written < request.len() {
            // Short write: send the rest.
            let rest = &request[f.written..];
            let entry = opcode::Send::new(types::Fd(conn.fd), rest.as_ptr(), rest.len() as u32)
                .build()
                .user_data(user_data(c, conn.generation, OP_SEND));
            conn.ops += 1;
            self.push(entry);
        }
    }

    /// Where a completed receive's payload lies in its buffer, and the kernel's stamp.
    fn received(&self, bid: Option<u16>, res: i32) -> Option<(std::ops::Range<usize>, Option<u64>)> {
        let bid = bid?;
        let buffer = self.bufs.get(bid, res as usize);
        let chunk = rxtime::parse(buffer, &self.rx_header)?;
        let start = chunk.payload.as_ptr() as usize - buffer.as_ptr() as usize;
        Some((start..start + chunk.payload.len(), chunk.stamp_ns))
    }

    /// When the response on `c` completed: the kernel's stamp of the chunk that completed it
    /// (clamped into the request's life), or the moment the shard read it.
    pub(super) fn completion_time(&self, c: usize, stamp: Option<u64>, now: u64) -> u64 {
        let sent = self.conns[c].inflight.map_or(0, |f| f.sent_ns);
        stamp.map_or(now, |s| self.realtime.run_time(s, sent, now))
    }

    fn on_received(&mut self, c: usize, res: i32, bid: Option<u16>, now: u64) {
        if res == -libc::ENOBUFS {
            return; // re-armed by `complete`
        }
        let received = if res > 0 { self.received(bid, res) } else { None };
        if self.conns[c].tls.is_some() {
            self.on_tls_received(c, res, bid, received, now);
            return;
        }
        if self.conns[c].inflight.is_none() {
            // Nothing asked: the server closed an idle keep-alive connection (EOF), or sent
            // bytes nobody requested. Either way the socket is done.
            self.begin_close(c);
            return;
        }
        if res < 0 {
            self.on_socket_error(c, -res, now);
            return;
        }
        let Some((range, stamp)) = received.or_else(|| (res == 0).then_some((0..0, None))) else {
            self.fail_request(c, ErrorClass::Protocol, Cow::Borrowed("receive buffer without a readable layout"), now);
            return;
        };
        if range.is_empty() {
            self.on_eof(c, now);
            return;
        }
        // A non-empty payload came in a buffer (`received` found one).
        let Some(bid) = bid else { return };
        let chunk = {
            let data = &self.bufs.get(bid, res as usize)[range];
            self.conns[c].take_chunk(data)
        };
        match chunk {
            Err(e) => self.fail_request(c, ErrorClass::Protocol, e.0, now),
            Ok(Chunk::More) => self.streaming = true,
            Ok(Chunk::Done { status, close }) => {
                let done = self.completion_time(c, stamp, now);
                self.conns[c].parser.reset();
                self.finish_answered(c, status, done);
                if close || !self.keepalive {
                    self.begin_close(c);
                }
            }
        }
    }

    /// A receive or send on `c` failed with `errno` while a request was in flight.
    pub(super) fn on_socket_error(&mut self, c: usize, errno: i32, now: u64) {
        if matches!(errno, libc::ECONNRESET | libc::EPIPE) && self.is_stale(c) {
            // A reused connection the server had reset: as stale as one it had closed.
            self.on_closed_under_request(c, now, "reset");
            return;
        }
        let (class, message) = class_of_errno(errno);
        self.fail_request(c, class, message, now);
    }

    /// Nothing of the response arrived on a connection that had served before: the server
    /// closed it while idle, and the request never reached it.
    fn is_stale(&self, c: usize) -> bool {
        let conn = &self.conns[c];
        conn.parser.at_start() && conn.filled == 0 && conn.served > 0
    }

    /// The server closed the connection while a request was in flight on it.
    pub(super) fn on_eof(&mut self, c: usize, now: u64) {
        let conn = &mut self.conns[c];
        if let Some(Progress::Done { status, .. }) = conn.parser.on_eof() {
            self.finish_answered(c, status, now);
            self.begin_close(c);
            return;
        }
        if self.is_stale(c) {
            self.on_closed_under_request(c, now, "closed");
            return;
        }
        let conn = &mut self.conns[c];
        let message = if conn.parser.at_start() && conn.filled == 0 {
            "the server closed the connection before answering"
        } else {
            "the server closed the connection in the middle of the response"
        };
        self.fail_request(c, ErrorClass::Reset, Cow::Borrowed(message), now);
    }

    /// A reused keep-alive connection turned out closed (`how`: closed or reset) under the
    /// request in flight on it.
    fn on_closed_under_request(&mut self, c: usize, now: u64, how: &'static str) {
        let Some(mut f) = self.conns[c].inflight.take() else {
            self.begin_close(c);
            return;
        };
        // A reused keep-alive connection the server had closed: nothing of the response
        // arrived. An idempotent request is sent again on a fresh connection, once; any
        // other only when asked, because the server may have acted on it.
        let idempotent = self.requests.idempotent[f.request as usize];
        if f.retried || !(idempotent || self.retry_non_idempotent) {
            let message = match (f.retried, how) {
                (true, _) => "the server closed a fresh connection too, before answering",
                (false, "reset") => {
                    "the server reset the reused keep-alive connection before answering; not sent again \
                     because the method is not idempotent (--retry-non-idempotent to allow it)"
                }
                _ => {
                    "the server closed the reused keep-alive connection before answering; not sent again \
                     because the method is not idempotent (--retry-non-idempotent to allow it)"
                }
            };
            self.finish_failed(f, now, ErrorClass::Reset, Cow::Borrowed(message));
        } else {
            f.retried = true;
            f.written = 0;
            self.record.retried_on_stale_connection += 1;
            self.conns[c].retry = Some(f);
        }
        self.begin_close(c);
    }

    pub(super) fn finish_answered(&mut self, c: usize, status: u16, done: u64) {
        let conn = &mut self.conns[c];
        let Some(f) = conn.inflight.take() else { return };
        conn.served += 1;
        self.record.on_response(f.phase, f.intended_ns, f.sent_ns, done, status);
        if (200..400).contains(&status) {
            self.ok += 1;
        } else {
            self.errors += 1;
        }
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    pub(super) fn finish_failed(&mut self, f: InFlight, at_ns: u64, class: ErrorClass, message: Cow<'static, str>) {
        self.record.on_failure(f.phase, f.intended_ns, at_ns, class, message);
        self.errors += 1;
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// Fail the connection's request with `class` and close the connection.
    pub(super) fn fail_request(&mut self, c: usize, class: ErrorClass, message: Cow<'static, str>, now: u64) {
        if let Some(f) = self.conns[c].inflight.take() {
            self.finish_failed(f, now, class, message);
        }
        self.begin_close(c);
    }

    pub(super) fn begin_close(&mut self, c: usize) {
        let conn = &mut self.conns[c];
        match conn.state {
            State::Closed | State::Closing => return,
            State::Idle => {
                if let Some(i) = self.idle.iter().position(|&x| x == c) {
                    self.idle.swap_remove(i);
                }
                self.open = self.open.saturating_sub(1);
            }
            State::Busy | State::Handshaking => self.open = self.open.saturating_sub(1),
            State::Connecting => {}
        }
        conn.state = State::Closing;
        if conn.ops > 0 {
            // Make outstanding receives finish now; settle closes once they have.
            // SAFETY: shutdown(2) on a socket we own.
            unsafe { libc::shutdown(conn.fd, libc::SHUT_RDWR) };
        }
    }

    /// Move a connection on once its outstanding operations allow.
    fn settle(&mut self, c: usize) {
        let conn = &mut self.conns[c];
        match conn.state {
            State::Closing if conn.ops == 0 => {
                // SAFETY: no operation refers to this socket any more.
                unsafe { libc::close(conn.fd) };
                conn.fd = -1;
                conn.state = State::Closed;
                conn.filled = 0;
                conn.served = 0;
                conn.parser.reset();
                match conn.retry.take() {
                    Some(f) => {
                        let now = self.clock.now_ns();
                        self.start_connect(c, Some(f), now);
                    }
                    None => self.closed.push(c),
                }
            }
            State::Busy if conn.inflight.is_none() && conn.ops == u32::from(conn.recv_armed) => {
                conn.state = State::Idle;
                self.idle.push(c);
            }
            _ => {}
        }
    }

    /// Fail what has passed its deadline — requests, connects, handshakes — at exactly the
    /// deadline, and note the earliest deadline still ahead.
    fn expire(&mut self, now: u64) {
        let mut next = u64::MAX;
        for c in 0..self.conns.len() {
            let conn = &self.conns[c];
            let deadline = match conn.state {
                State::Busy => conn.inflight.map(|f| f.deadline_ns),
                State::Connecting | State::Handshaking => {
                    Some(conn.inflight.map_or(conn.connect_started_ns + self.timeout_ns, |f| f.deadline_ns))
                }
                State::Closing => conn.retry.map(|f| f.deadline_ns),
                State::Idle | State::Closed => None,
            };
            let Some(deadline) = deadline else { continue };
            if now < deadline {
                next = next.min(deadline);
                continue;
            }
            match conn.state {
                State::Busy => self.fail_request(
                    c,
                    ErrorClass::Timeout,
                    Cow::Borrowed("no complete response by its deadline (intended time + timeout)"),
                    deadline,
                ),
                State::Closing => {
                    if let Some(f) = self.conns[c].retry.take() {
                        self.finish_failed(
                            f,
                            deadline,
                            ErrorClass::Timeout,
                            Cow::Borrowed("its deadline passed while it was being sent again on a fresh connection"),
                        );
                    }
                }
                State::Handshaking => {
                    self.handshake_failed(c, || "the TLS handshake did not finish within the timeout".into());
                    self.fail_request(
                        c,
                        ErrorClass::Timeout,
                        Cow::Borrowed("the TLS handshake did not finish by the deadline"),
                        deadline,
                    );
                }
                _ => {
                    self.record.connect_failures += 1;
                    self.fail_request(
                        c,
                        ErrorClass::Timeout,
                        Cow::Borrowed("the connection did not open by the deadline"),
                        deadline,
                    );
                }
            }
        }
        self.next_deadline = next;
    }

    /// The run stopped (or the shard failed) at `stopped_at`; at `now` it stops waiting.
    /// Whatever is still in flight, or was due and waiting for a connection, is recorded as
    /// `aborted` at `now` (a lower bound of its latency); what was not yet due as `unsent`.
    fn account_unfinished(&mut self, now: u64, stopped_at: u64) {
        for c in 0..self.conns.len() {
            let conn = &mut self.conns[c];
            for f in [conn.inflight.take(), conn.retry.take()].into_iter().flatten() {
                self.finish_failed(
                    f,
                    now,
                    ErrorClass::Aborted,
                    Cow::Borrowed("in flight when the run stopped (latency recorded then: a lower bound)"),
                );
            }
        }
        while let Some(due) = self.schedule.peek().filter(|d| d.intended_ns <= stopped_at) {
            self.record.on_failure(
                due.phase,
                due.intended_ns,
                now,
                ErrorClass::Aborted,
                Cow::Borrowed("due but not yet sent when the run stopped (latency recorded then: a lower bound)"),
            );
            self.errors += 1;
            self.schedule.advance();
        }
        for (phase, n) in self.schedule.remaining() {
            self.record.on_unsent(phase, n);
        }
        self.in_flight = 0;
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
    }
}

/// The loader's own part of the lag of a send due at `intended`, sent at `sent`, by a shard
/// that woke at `woke` from a sleep planned to end at `target`. The host's part is how late the
/// timer fired past the later of the target and the due time; the rest — waiting on purpose
/// (a batching window), then the shard's work before the send — is the loader's.
fn own_lag(intended: u64, sent: u64, woke: u64, target: u64) -> u64 {
    let lag = sent.saturating_sub(intended);
    let host = woke.saturating_sub(target.max(intended));
    lag.saturating_sub(host)
}

/// Whether a request that opened its own connection counts as having waited for one — so
/// its lateness is not laid at the loader's door: it waited for the pool before it was taken,
/// or the loader took it on time and then waited for the connect (and handshake: the target's
/// and the network's time, which the probes measure). `sent_ns` still holds the time it was
/// taken here.
pub(super) fn waited_for_connection(f: &InFlight) -> bool {
    f.waited || f.sent_ns.saturating_sub(f.intended_ns) <= crate::record::LATE_NS
}

/// `IORING_ENTER_GETEVENTS`.
const ENTER_GETEVENTS: u32 = 1;

fn set_nodelay(fd: RawFd) {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt with a valid int option value.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            &one as *const _ as *const libc::c_void,
            size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn every_errno_has_a_class_and_a_message_that_names_it() {
        assert_eq!(class_of_errno(libc::ECONNREFUSED).0, ErrorClass::Connect);
        assert_eq!(class_of_errno(libc::EADDRNOTAVAIL).0, ErrorClass::Connect);
        assert_eq!(class_of_errno(libc::ECONNRESET).0, ErrorClass::Reset);
        assert_eq!(class_of_errno(libc::EPIPE).0, ErrorClass::Reset);
        let (class, message) = class_of_errno(libc::ENOMEM);
        assert_eq!(class, ErrorClass::IoError, "an unknown errno is not a reset");
        assert!(message.contains("errno 12"), "{message}");
    }
}
