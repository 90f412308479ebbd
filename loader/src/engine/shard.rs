//! The shard loop: dispatch what is due, reap completions, sleep exactly until the next
//! intended send time — one `io_uring_enter` per turn for all of it.
//!
//! A request is due at its intended time. If a connection is idle it is sent at once;
//! if one is closed, it is opened for the request; if the pool is exhausted the request
//! waits at the head of the schedule (its latency keeps counting from the intended time)
//! and is dropped — recorded at its deadline — once it has waited a full timeout.
//! Requests are never skipped silently.
//!
//! On an https target a connection handshakes after connect (state `Handshaking`; a request
//! that opened it waits in it), and its sends and receives go through rustls (`tls.rs`):
//! the TLS branches hang off `Conn::tls`, which is `None` on plain HTTP.

use std::io::{BufRead as _, Write as _};
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use io_uring::{IoUring, cqueue, opcode, squeue, types};
use probes_ebpf::tls_outcome;
use rustls::HandshakeKind;

use super::bufring::BufRing;
use super::conn::{Chunk, Conn, InFlight, State};
use super::http1::Progress;
use super::tls::{self, Tls, TlsClient};
use super::{Clock, EngineError, Live, ShardConfig, ShardResult};
use crate::record::{ErrorClass, ShardRecord};
use crate::schedule::{Due, ShardSchedule};

const OP_CONNECT: u64 = 1;
const OP_SEND: u64 = 2;
const OP_RECV: u64 = 3;
/// Longest single wait, so the stop flag is seen promptly even when nothing is due.
const MAX_WAIT_NS: u64 = 50_000_000;
/// Longest wait for in-flight answers after a stop.
const MAX_DRAIN_NS: u64 = 1_000_000_000;
/// How often in-flight requests are checked against the client timeout.
const EXPIRE_EVERY_NS: u64 = 10_000_000;
/// Size of each provided receive buffer.
const RECV_BUF: usize = 16 * 1024;
/// Buffer group id of the shard's provided buffers.
const RECV_GROUP: u16 = 0;

#[inline]
fn user_data(conn: usize, generation: u32, op: u64) -> u64 {
    ((conn as u64) << 32) | (u64::from(generation & 0x00ff_ffff) << 8) | op
}

/// A shard: its ring, connections, schedule share and record.
///
/// Field order matters: `ring` is dropped first, so no operation can outlive the
/// buffers it points into (`bufs`, the request, the sockaddr).
pub struct Shard {
    ring: IoUring,
    bufs: BufRing,
    conns: Vec<Conn>,
    /// Connected connections with nothing in flight.
    idle: Vec<usize>,
    /// Connections without a socket, ready to be opened.
    closed: Vec<usize>,
    sockaddr: Box<libc::sockaddr_storage>,
    sockaddr_len: libc::socklen_t,
    family: i32,
    requests: Arc<super::RequestTable>,
    /// TLS client of an https target; `None` for plain HTTP.
    tls: Option<TlsClient>,
    keepalive: bool,
    timeout_ns: u64,
    schedule: ShardSchedule,
    clock: Clock,
    stop: Arc<AtomicBool>,
    live: Arc<Live>,
    record: ShardRecord,
    /// Requests handed to a connection and not yet finished.
    in_flight: u32,
    /// Sockets connected now.
    open: u32,
    sent: u64,
    ok: u64,
    errors: u64,
    /// When the last request was handed to the kernel (ns since start).
    last_send_ns: Option<u64>,
    /// Last time the head of the schedule found no connection (ns since start).
    last_exhausted_ns: Option<u64>,
    cqes: Vec<(u64, i32, u32)>,
    /// Batching window (0 = exact wake-ups); see `engine::wake_window`.
    wake_window_ns: u64,
    /// The kernel can hold completions for a minimum wait (`IORING_FEAT_MIN_TIMEOUT`).
    min_timeout: bool,
}

fn new_ring(entries: u32) -> Result<IoUring, EngineError> {
    // Deferred task-run keeps completion work on this thread and batched into our own
    // io_uring_enter calls; fall back for kernels that lack it (< 6.1).
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

/// Map a negative io_uring result (an errno) to a failure class.
fn class_of_errno(errno: i32) -> ErrorClass {
    match errno {
        libc::ECONNREFUSED | libc::ENETUNREACH | libc::EHOSTUNREACH | libc::EADDRNOTAVAIL => ErrorClass::Connect,
        libc::ETIMEDOUT => ErrorClass::Timeout,
        _ => ErrorClass::Reset,
    }
}

impl Shard {
    /// Set up the ring and the (still closed) pool.
    pub fn new(cfg: ShardConfig) -> Result<Shard, EngineError> {
        let entries = (cfg.connections as u32 * 2 + 16).next_power_of_two().clamp(64, 32768);
        let ring = new_ring(entries)?;
        let buffers = (cfg.connections as u32).next_power_of_two().clamp(64, 1024) as u16;
        let bufs = BufRing::new(&ring.submitter(), buffers, RECV_BUF, RECV_GROUP).map_err(EngineError::Ring)?;
        let (storage, sockaddr_len, family) = sockaddr_of(cfg.addr);
        let conns: Vec<Conn> = (0..cfg.connections).map(|_| Conn::new()).collect();
        Ok(Shard {
            ring,
            bufs,
            closed: (0..conns.len()).rev().collect(),
            idle: Vec::with_capacity(conns.len()),
            conns,
            sockaddr: Box::new(storage),
            sockaddr_len,
            family,
            requests: cfg.requests,
            tls: cfg.tls,
            keepalive: cfg.keepalive,
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
            last_exhausted_ns: None,
            last_send_ns: None,
            cqes: Vec::with_capacity(entries as usize * 2),
            wake_window_ns: cfg.wake_window.as_nanos() as u64,
            min_timeout: false,
        }
        .with_features())
    }

    fn with_features(mut self) -> Self {
        self.min_timeout = self.ring.params().is_feature_min_timeout();
        self
    }

    /// Open the pool, wait for the start instant, then run the schedule to its end.
    pub fn run(mut self) -> Result<ShardResult, EngineError> {
        // Let hrtimer waits end when asked, not up to 50 µs later (the default slack).
        // SAFETY: prctl with PR_SET_TIMERSLACK only changes this thread's timer slack.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
        // When the stop flag rises (interrupt, emergency stop) nothing more is sent; answers
        // already on their way are still awaited, for at most `drain_ns`.
        let drain_ns = self.timeout_ns.min(MAX_DRAIN_NS);
        let mut stopped_at = self.open_pool()?.then_some(0);
        let mut next_expire = 0;
        loop {
            let now = self.clock.now_ns();
            if stopped_at.is_none() && self.stop.load(Ordering::Relaxed) {
                stopped_at = Some(now);
            }
            match stopped_at {
                Some(at) if self.in_flight == 0 || now >= at + drain_ns => break,
                Some(_) => {}
                None => self.dispatch(now),
            }
            if now >= next_expire {
                self.expire(now);
                next_expire = now + EXPIRE_EVERY_NS;
            }
            if stopped_at.is_none() && self.schedule.peek().is_none() && self.in_flight == 0 {
                break;
            }
            let wake = match stopped_at {
                Some(at) => (at + drain_ns).min(next_expire).min(now + MAX_WAIT_NS),
                None => self.next_wake(now, next_expire).max(now + self.wake_window_ns),
            };
            self.wait(wake.saturating_sub(self.clock.now_ns()))?;
            self.reap();
            self.publish();
        }
        self.record.abandoned += u64::from(self.in_flight);
        self.shut_down()?;
        self.publish();
        let last_send_ns = self.last_send_ns;
        let Shard { ring, bufs, conns, record, .. } = self;
        drop(ring);
        drop(conns);
        drop(bufs);
        Ok(ShardResult { record, stopped_at_ns: stopped_at, last_send_ns })
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
            let left = start - now;
            self.wait(left.min(Duration::from_nanos(MAX_WAIT_NS)).as_nanos() as u64)?;
            self.reap();
            self.publish();
        }
    }

    /// Hand every due request to a connection, in schedule order.
    fn dispatch(&mut self, now: u64) {
        while let Some(due) = self.schedule.peek() {
            if due.intended_ns > now {
                break;
            }
            if let Some(c) = self.idle.pop() {
                let waited = self.last_exhausted_ns.is_some_and(|t| t >= due.intended_ns);
                self.in_flight += 1;
                let f = InFlight::new(due, self.requests.pick(due.index), now);
                self.send_request(c, f, waited);
            } else if let Some(c) = self.closed.pop() {
                self.in_flight += 1;
                let f = InFlight::new(due, self.requests.pick(due.index), now);
                self.start_connect(c, Some(f), now);
            } else if now >= due.intended_ns + self.timeout_ns {
                self.last_exhausted_ns = Some(now);
                let deadline = due.intended_ns + self.timeout_ns;
                self.record.on_failure(due.phase, due.intended_ns, deadline, ErrorClass::Dropped);
                self.errors += 1;
            } else {
                self.last_exhausted_ns = Some(now);
                break;
            }
            self.schedule.advance();
        }
    }

    fn next_wake(&self, now: u64, next_expire: u64) -> u64 {
        let mut wake = now + MAX_WAIT_NS;
        if let Some(due) = self.schedule.peek() {
            // Due later: wake exactly then. Due already (pool exhausted): a completion
            // will wake us; at the latest, its drop deadline.
            let at = if due.intended_ns > now { due.intended_ns } else { due.intended_ns + self.timeout_ns };
            wake = wake.min(at);
        }
        if self.in_flight > 0 {
            wake = wake.min(next_expire);
        }
        wake
    }

    /// Submit what is queued and wait up to `ns` for at least one completion.
    fn wait(&mut self, ns: u64) -> Result<(), EngineError> {
        let result = if ns == 0 {
            let pending = self.ring.submission().len() as u32;
            // SAFETY: no argument pointer is passed; GETEVENTS runs deferred completion work
            // without waiting for any.
            unsafe { self.ring.submitter().enter::<libc::sigset_t>(pending, 0, ENTER_GETEVENTS, None) }.map(|_| ())
        } else {
            let ts = types::Timespec::from(Duration::from_nanos(ns));
            let mut args = types::SubmitArgs::new().timespec(&ts);
            let mut want = 1;
            if self.wake_window_ns > 0 && self.min_timeout {
                // Sleep until every request in flight has completed, or the window has
                // passed with at least one completion, or the next send is due.
                want = (self.in_flight as usize).max(1);
                args = args.min_wait_usec((self.wake_window_ns / 1000) as u32);
            }
            self.ring.submitter().submit_with_args(want, &args).map(|_| ())
        };
        match result {
            Ok(()) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY | libc::EAGAIN)) => {
                Ok(())
            }
            Err(e) => Err(EngineError::Enter(e)),
        }
    }

    fn push(&mut self, entry: squeue::Entry) {
        // SAFETY: every entry points into memory that outlives the operation: the shared
        // request bytes, a connection's buffer or its TLS `out` buffer (never freed, moved
        // or written while ops > 0 / a send of it is in flight), or the boxed sockaddr.
        unsafe {
            if self.ring.submission().push(&entry).is_err() {
                let _ = self.ring.submit();
                self.ring.submission().push(&entry).expect("submission queue has room after submit");
            }
        }
    }

    fn start_connect(&mut self, c: usize, request: Option<InFlight>, now: u64) {
        // SAFETY: plain socket(2) call.
        let fd = unsafe { libc::socket(self.family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            // Out of descriptors or memory: fail the request, keep the slot for later.
            self.closed.push(c);
            if let Some(f) = request {
                self.finish_failed(f, now, ErrorClass::Connect);
            }
            return;
        }
        set_nodelay(fd);
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

    fn send_request(&mut self, c: usize, mut f: InFlight, waited: bool) {
        let now = self.clock.now_ns();
        f.sent_ns = now;
        let conn = &mut self.conns[c];
        conn.state = State::Busy;
        conn.inflight = Some(f);
        conn.parser.expect_head(self.requests.head[f.request as usize]);
        let (fd, generation) = (conn.fd, conn.generation);
        self.record.on_send(f.phase, f.intended_ns, now, waited, self.in_flight);
        self.last_send_ns = Some(now);
        self.sent += 1;
        let bytes = &self.requests.bytes[f.request as usize];
        if let Some(tls) = conn.tls.as_mut() {
            // rustls' send buffer is unbounded (`TlsClient::connect`): the whole request is
            // encrypted now and leaves with the next TLS send.
            if tls.session.writer().write_all(bytes).is_err() {
                self.fail_request(c, ErrorClass::Protocol, now);
                return;
            }
            self.flush_tls(c);
            return;
        }
        conn.ops += 1;
        let entry = opcode::Send::new(types::Fd(fd), bytes.as_ptr(), bytes.len() as u32)
            .build()
            .user_data(user_data(c, generation, OP_SEND));
        self.push(entry);
    }

    /// Arm the connection's multishot receive (once per socket, again only if the kernel
    /// ended it, e.g. when it ran out of provided buffers).
    fn arm_recv(&mut self, c: usize) {
        let conn = &mut self.conns[c];
        if conn.recv_armed || !matches!(conn.state, State::Idle | State::Busy | State::Handshaking) {
            return;
        }
        conn.recv_armed = true;
        conn.ops += 1;
        let entry = opcode::RecvMulti::new(types::Fd(conn.fd), self.bufs.group).build().user_data(user_data(
            c,
            conn.generation,
            OP_RECV,
        ));
        self.push(entry);
    }

    /// Take every completion and act on it.
    fn reap(&mut self) {
        let mut cqes = std::mem::take(&mut self.cqes);
        cqes.extend(self.ring.completion().map(|e| (e.user_data(), e.result(), e.flags())));
        for &(ud, res, flags) in &cqes {
            self.complete(ud, res, flags);
        }
        cqes.clear();
        self.cqes = cqes;
    }

    fn complete(&mut self, ud: u64, res: i32, flags: u32) {
        let c = (ud >> 32) as usize;
        let op = ud & 0xff;
        let conn = &mut self.conns[c];
        debug_assert_eq!(((ud >> 8) & 0x00ff_ffff) as u32, conn.generation & 0x00ff_ffff);
        let ended = op != OP_RECV || !cqueue::more(flags);
        if ended {
            conn.ops -= 1;
            if op == OP_RECV {
                conn.recv_armed = false;
            }
        }
        let closing = conn.state == State::Closing;
        match op {
            _ if closing => {}
            OP_CONNECT => self.on_connected(c, res),
            OP_SEND => self.on_sent(c, res),
            _ => self.on_received(c, res, cqueue::buffer_select(flags)),
        }
        if let Some(bid) = cqueue::buffer_select(flags) {
            self.bufs.recycle(bid);
        }
        if op == OP_RECV && ended {
            // The kernel ended the multishot receive (out of buffers): arm it again.
            self.arm_recv(c);
        }
        self.settle(c);
    }

    fn on_connected(&mut self, c: usize, res: i32) {
        let now = self.clock.now_ns();
        if res < 0 {
            self.record.connect_failures += 1;
            let conn = &mut self.conns[c];
            let request = conn.inflight.take();
            conn.state = State::Closing; // ops == 0: settle closes the socket
            if let Some(f) = request {
                self.finish_failed(f, now, class_of_errno(-res));
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
            Some(f) => self.send_request(c, f, opened_on_time(&f)),
            None => {
                self.conns[c].state = State::Idle;
                self.idle.push(c);
            }
        }
    }

    fn on_sent(&mut self, c: usize, res: i32) {
        if self.conns[c].tls.is_some() {
            self.on_tls_sent(c, res);
            return;
        }
        let now = self.clock.now_ns();
        let conn = &mut self.conns[c];
        let Some(f) = conn.inflight.as_mut() else { return };
        let request = &self.requests.bytes[f.request as usize];
        let len = request.len();
        if res < 0 {
            self.fail_request(c, class_of_errno(-res), now);
            return;
        }
        f.written += res as usize;
        if f.written < len {
            // Short write: send the rest.
            let rest = &request[f.written..];
            let entry = opcode::Send::new(types::Fd(conn.fd), rest.as_ptr(), rest.len() as u32)
                .build()
                .user_data(user_data(c, conn.generation, OP_SEND));
            conn.ops += 1;
            self.push(entry);
        }
    }

    fn on_received(&mut self, c: usize, res: i32, bid: Option<u16>) {
        let now = self.clock.now_ns();
        if res == -libc::ENOBUFS {
            return; // re-armed by `complete`
        }
        if self.conns[c].tls.is_some() {
            self.on_tls_received(c, res, bid, now);
            return;
        }
        if self.conns[c].inflight.is_none() {
            // Nothing asked: the server closed an idle keep-alive connection (EOF), or sent
            // bytes nobody requested. Either way the socket is done.
            self.begin_close(c);
            return;
        }
        if res < 0 {
            self.fail_request(c, class_of_errno(-res), now);
            return;
        }
        if res == 0 {
            self.on_eof(c, now);
            return;
        }
        let Some(bid) = bid else {
            self.fail_request(c, ErrorClass::Protocol, now);
            return;
        };
        let chunk = {
            let data = self.bufs.get(bid, res as usize);
            self.conns[c].take_chunk(data)
        };
        match chunk {
            Err(_) => self.fail_request(c, ErrorClass::Protocol, now),
            Ok(Chunk::More) => {}
            Ok(Chunk::Done { status, close }) => {
                self.conns[c].parser.reset();
                self.finish_answered(c, status, now);
                if close || !self.keepalive {
                    self.begin_close(c);
                }
            }
        }
    }

    /// The server closed the connection while a request was in flight on it.
    fn on_eof(&mut self, c: usize, now: u64) {
        let conn = &mut self.conns[c];
        if let Some(Progress::Done { status, .. }) = conn.parser.on_eof() {
            self.finish_answered(c, status, now);
            self.begin_close(c);
        } else if conn.parser.at_start() && conn.filled == 0 && conn.served > 0 {
            // A reused keep-alive connection the server had closed: nothing of the response
            // arrived, so send the request again on a fresh connection, once.
            let mut f = conn.inflight.take().expect("caller checked");
            if f.retried {
                self.finish_failed(f, now, ErrorClass::Reset);
            } else {
                f.retried = true;
                f.written = 0;
                self.record.retried_on_stale_connection += 1;
                self.conns[c].retry = Some(f);
            }
            self.begin_close(c);
        } else {
            self.fail_request(c, ErrorClass::Reset, now);
        }
    }

    fn finish_answered(&mut self, c: usize, status: u16, now: u64) {
        let conn = &mut self.conns[c];
        let Some(f) = conn.inflight.take() else { return };
        conn.served += 1;
        self.record.on_response(f.phase, f.intended_ns, f.sent_ns, now, status);
        if (200..400).contains(&status) {
            self.ok += 1;
        } else {
            self.errors += 1;
        }
        self.in_flight -= 1;
    }

    fn finish_failed(&mut self, f: InFlight, at_ns: u64, class: ErrorClass) {
        self.record.on_failure(f.phase, f.intended_ns, at_ns, class);
        self.errors += 1;
        self.in_flight -= 1;
    }

    /// Fail the connection's request with `class` and close the connection.
    fn fail_request(&mut self, c: usize, class: ErrorClass, now: u64) {
        if let Some(f) = self.conns[c].inflight.take() {
            self.finish_failed(f, now, class);
        }
        self.begin_close(c);
    }

    fn begin_close(&mut self, c: usize) {
        let conn = &mut self.conns[c];
        match conn.state {
            State::Closed | State::Closing => return,
            State::Idle => {
                if let Some(i) = self.idle.iter().position(|&x| x == c) {
                    self.idle.swap_remove(i);
                }
                self.open -= 1;
            }
            State::Busy | State::Handshaking => self.open -= 1,
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

    /// Fail requests (and connects) that have outlived the client timeout.
    fn expire(&mut self, now: u64) {
        for c in 0..self.conns.len() {
            let conn = &self.conns[c];
            match conn.state {
                State::Busy => {
                    if let Some(f) = conn.inflight
                        && now >= f.sent_ns + self.timeout_ns
                    {
                        self.fail_request(c, ErrorClass::Timeout, f.sent_ns + self.timeout_ns);
                    }
                }
                State::Connecting | State::Handshaking if now >= conn.connect_started_ns + self.timeout_ns => {
                    let deadline = conn.connect_started_ns + self.timeout_ns;
                    if conn.state == State::Handshaking {
                        self.handshake_failed(c, || "the TLS handshake did not finish within the timeout".into());
                    }
                    self.fail_request(c, ErrorClass::Timeout, deadline);
                }
                _ => {}
            }
        }
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
            self.wait(10_000_000)?;
            self.reap();
        }
        Ok(())
    }

    /// TCP is up on an https connection: start its TLS session and send the ClientHello.
    fn start_handshake(&mut self, c: usize, now: u64) {
        self.conns[c].state = State::Handshaking;
        let client = self.tls.as_ref().expect("https shard");
        let session = match client.connect() {
            Ok(session) => session,
            Err(e) => {
                self.tls_failed(c, now, &e);
                return;
            }
        };
        let conn = &mut self.conns[c];
        let tls = match conn.tls.as_mut() {
            Some(tls) => {
                tls.restart(session);
                tls
            }
            None => conn.tls.insert(Tls::new(session)),
        };
        tls::mark_handshake_start(tls);
        self.arm_recv(c);
        self.flush_tls(c);
    }

    /// Send what rustls has queued, unless a send of this connection is still in flight
    /// (its completion calls this again).
    fn flush_tls(&mut self, c: usize) {
        let conn = &mut self.conns[c];
        if conn.state == State::Closing {
            return;
        }
        let Some(tls) = conn.tls.as_mut() else { return };
        if !tls.fill_out() {
            return;
        }
        // `tls.out` stays untouched until this send completes (`Tls::sending`), and the
        // boxed `Tls` lives as long as the connection has operations outstanding.
        let entry = opcode::Send::new(types::Fd(conn.fd), tls.out.as_ptr(), tls.out.len() as u32)
            .build()
            .user_data(user_data(c, conn.generation, OP_SEND));
        conn.ops += 1;
        self.push(entry);
    }

    fn on_tls_sent(&mut self, c: usize, res: i32) {
        let conn = &mut self.conns[c];
        let tls = conn.tls.as_mut().expect("caller checked");
        if res < 0 {
            tls.sending = false;
            let now = self.clock.now_ns();
            self.fail_request(c, class_of_errno(-res), now);
            return;
        }
        tls.out_sent += res as usize;
        if tls.out_sent < tls.out.len() {
            // Short write: send the rest of the same buffer.
            let rest = &tls.out[tls.out_sent..];
            let entry = opcode::Send::new(types::Fd(conn.fd), rest.as_ptr(), rest.len() as u32)
                .build()
                .user_data(user_data(c, conn.generation, OP_SEND));
            conn.ops += 1;
            self.push(entry);
            return;
        }
        tls.sending = false;
        self.flush_tls(c);
    }

    /// Ciphertext arrived (or the socket ended) on an https connection.
    fn on_tls_received(&mut self, c: usize, res: i32, bid: Option<u16>, now: u64) {
        if res <= 0 {
            let conn = &self.conns[c];
            if conn.state == State::Handshaking {
                // The server reset or closed during the handshake: it refused the connection.
                self.handshake_failed(c, || "the server closed the connection during the TLS handshake".into());
                self.fail_request(c, ErrorClass::Connect, now);
            } else if conn.inflight.is_none() {
                self.begin_close(c);
            } else if res < 0 {
                self.fail_request(c, class_of_errno(-res), now);
            } else {
                self.on_eof(c, now);
            }
            return;
        }
        let Some(bid) = bid else {
            self.fail_request(c, ErrorClass::Protocol, now);
            return;
        };
        let len = res as usize;
        let mut off = 0;
        while off < len {
            let tls = self.conns[c].tls.as_mut().expect("caller checked");
            let mut wire = &self.bufs.get(bid, len)[off..];
            match tls.session.read_tls(&mut wire) {
                Ok(n) if n > 0 => off += n,
                _ => {
                    self.fail_request(c, ErrorClass::Protocol, now);
                    return;
                }
            }
            if let Err(e) = tls.session.process_new_packets() {
                self.tls_failed(c, now, &e);
                return;
            }
            if tls.handshaking && !tls.session.is_handshaking() {
                self.on_handshake_done(c);
            }
            if !self.drain_plaintext(c, now) {
                return;
            }
        }
        self.flush_tls(c);
    }

    fn on_handshake_done(&mut self, c: usize) {
        let conn = &mut self.conns[c];
        let tls = conn.tls.as_mut().expect("caller checked");
        tls.handshaking = false;
        let resumed = tls.session.handshake_kind() == Some(HandshakeKind::Resumed);
        tls::mark_handshake_end(tls, if resumed { tls_outcome::RESUMED } else { tls_outcome::FULL });
        self.record.tls.on_handshake(tls.handshake_started.elapsed().as_nanos() as u64, resumed);
        conn.state = State::Idle;
        match conn.inflight.take() {
            // Waited for connect and handshake: both are in its send lag.
            Some(f) => self.send_request(c, f, opened_on_time(&f)),
            None => self.idle.push(c),
        }
    }

    /// Feed decrypted bytes to the response parser; false once the connection is closing.
    fn drain_plaintext(&mut self, c: usize, now: u64) -> bool {
        loop {
            let conn = &mut self.conns[c];
            if conn.state == State::Closing {
                return false;
            }
            // Out of the connection for a moment, so the parser (also the connection's) can
            // read rustls' buffer in place.
            let Some(mut tls) = conn.tls.take() else { return false };
            let chunk = match tls.session.reader().into_first_chunk() {
                Ok(plain) if !plain.is_empty() => {
                    let n = plain.len();
                    let chunk = conn.inflight.is_some().then(|| conn.take_chunk(plain));
                    tls.session.reader().consume(n);
                    Some(chunk)
                }
                _ => None,
            };
            conn.tls = Some(tls);
            match chunk {
                None => return true,
                // Bytes nobody asked for: the connection is done (as on the plain path).
                Some(None) => {
                    self.begin_close(c);
                    return false;
                }
                Some(Some(Err(_))) => {
                    self.fail_request(c, ErrorClass::Protocol, now);
                    return false;
                }
                Some(Some(Ok(Chunk::More))) => {}
                Some(Some(Ok(Chunk::Done { status, close }))) => {
                    self.conns[c].parser.reset();
                    self.finish_answered(c, status, now);
                    if close || !self.keepalive {
                        self.begin_close(c);
                        return false;
                    }
                }
            }
        }
    }

    /// rustls rejected the session. During the handshake (certificate refused, alert,
    /// no common parameters) the connection could not be opened: class `connect`, counted
    /// as a TLS failure. After it (bad record, unexpected message): class `protocol`.
    fn tls_failed(&mut self, c: usize, now: u64, e: &rustls::Error) {
        let class = if self.conns[c].state == State::Handshaking {
            self.handshake_failed(c, || e.to_string());
            ErrorClass::Connect
        } else {
            ErrorClass::Protocol
        };
        self.fail_request(c, class, now);
    }

    /// The handshake of connection `c` failed: count it, keep the first reason, and tell the
    /// kernel probe.
    fn handshake_failed(&mut self, c: usize, reason: impl FnOnce() -> String) {
        self.record.tls.failures += 1;
        self.record.tls.note_error(reason);
        if let Some(tls) = self.conns[c].tls.as_deref() {
            tls::mark_handshake_end(tls, tls_outcome::FAILED);
        }
    }

    fn publish(&self) {
        self.live.publish(self.sent, self.ok, self.errors, u64::from(self.in_flight), u64::from(self.open));
    }
}

/// A request that opened its own connection waited for the connect (and handshake): the
/// target's and the network's time, which the probes measure. It counts as having waited for
/// a connection — so its lateness is not laid at the loader's door — only if the loader itself
/// dispatched it on time (`sent_ns` still holds the dispatch time here).
fn opened_on_time(f: &InFlight) -> bool {
    f.sent_ns.saturating_sub(f.intended_ns) <= crate::record::LATE_NS
}

impl InFlight {
    fn new(due: Due, request: u16, now: u64) -> Self {
        InFlight { phase: due.phase, request, intended_ns: due.intended_ns, sent_ns: now, written: 0, retried: false }
    }
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
