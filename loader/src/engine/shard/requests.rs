//! The shard's requests: dispatch on schedule, send, receive and parse, finish, and the one
//! deadline every request has.

use std::borrow::Cow;

use io_uring::{opcode, types};

use super::*;
use crate::engine::conn::{Chunk, State};
use crate::engine::inflight::InFlight;
use crate::engine::rxtime;
use crate::record::{CloseCause, ErrorClass};
use crate::schedule::Due;

impl Shard {
    /// Hand every due request to a connection, in schedule order — and those due within the
    /// pace's send-ahead window, early, rather than wake again for them (`engine::pace`), as
    /// long as an open connection is idle for them (one that must connect first, or a wait
    /// for one, is left to their time).
    pub(super) fn dispatch(&mut self, now: u64) {
        if self.h2.is_some() {
            self.dispatch_h2(now);
            return;
        }
        let until = self.pace.sends_until(now, self.schedule.peek().map(|d| d.intended_ns));
        // Whether an answer sits unread on a busy connection: asked once, at the first drop.
        let mut unread_answer: Option<bool> = None;
        while let Some(due) = self.schedule.peek() {
            if due.intended_ns > now && (due.intended_ns > until || self.idle.is_empty()) {
                break;
            }
            let deadline = due.intended_ns + self.timeout_ns;
            if now >= deadline {
                // Its deadline passed before any connection came free: never sent. The
                // loader's when a connection was free in the kernel's view before then.
                let loader = self.kept_back(deadline, &mut unread_answer);
                self.record.on_due_unsent(due.phase, due.intended_ns, deadline, loader, true);
                self.record.on_failure(
                    due.phase,
                    due.intended_ns,
                    deadline,
                    ErrorClass::Dropped,
                    Cow::Borrowed("no connection came free before its deadline (intended time + timeout)"),
                );
                self.errors += 1;
                // A closed run's user gave up on it then, and thinks from there.
                self.schedule.advance();
                self.schedule.finished(deadline);
                continue;
            } else if let Some(c) = self.idle.pop() {
                self.in_flight += 1;
                let mut f = self.take(due, now, deadline);
                self.claim_slot(c, &mut f);
                self.note_deadline(deadline);
                self.send_request(c, f, f.waited);
            } else if let Some(c) = self.closed.pop() {
                self.in_flight += 1;
                let mut f = self.take(due, now, deadline);
                self.claim_slot(c, &mut f);
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

    /// The request `due`, taken from the schedule at `now`; its slot in the instant-reading
    /// pool is claimed when it gets a connection ([`Shard::claim_slot`]).
    pub(super) fn take(&self, due: Due, now: u64, deadline_ns: u64) -> InFlight {
        InFlight {
            phase: due.phase,
            request: self.requests.pick(due.phase, due.index),
            intended_ns: due.intended_ns,
            sent_ns: now,
            deadline_ns,
            written: 0,
            retried: false,
            waited: !self.own_connections && self.pool.waited(due.intended_ns, now),
            free_ns: due.intended_ns,
            taken_ns: now,
        }
    }

    /// `f` goes to connection `c` (just taken from the free ones): in the instant-reading
    /// pool it takes the earliest free slot, so it would have left at the later of its
    /// intended time and that slot's free time. Only a request that waited looks for it: one
    /// that found a connection free left at its time in both pools.
    pub(super) fn claim_slot(&mut self, c: usize, f: &mut InFlight) {
        if !f.waited {
            return;
        }
        let mut earliest = c;
        for &k in self.idle.iter().chain(&self.closed) {
            if self.conns[k].free_since_ns < self.conns[earliest].free_since_ns {
                earliest = k;
            }
        }
        f.free_ns = self.conns[earliest].free_since_ns.max(f.intended_ns).min(f.taken_ns.max(f.intended_ns));
        // The slots are interchangeable: `c` now holds the one it left free.
        let rest = self.conns[c].free_since_ns;
        self.conns[earliest].free_since_ns = rest;
    }

    /// Whether a request due and still unsent at `by` (its deadline, or the stop) was kept
    /// back by the loader: a slot of the instant-reading pool was free before then, or an
    /// answer sits unread on a busy connection (`unread` caches that answer across calls).
    fn kept_back(&self, by: u64, unread: &mut Option<bool>) -> bool {
        self.kernel_free_since().is_some_and(|free| free < by) || *unread.get_or_insert_with(|| self.answer_unread())
    }

    /// Whether a busy connection has bytes of its answer in its socket, unread: the kernel
    /// has it, the loader has not taken it (not running, or not yet in this turn).
    fn answer_unread(&self) -> bool {
        self.conns.iter().any(|c| c.state == State::Busy && unread(c))
    }

    /// The earliest instant a slot of the instant-reading pool is free among the connections
    /// free now (idle, or closed and ready to open); `None` when none is.
    pub(in crate::engine) fn kernel_free_since(&self) -> Option<u64> {
        self.idle.iter().chain(&self.closed).map(|&c| self.conns[c].free_since_ns).min()
    }

    pub(super) fn note_deadline(&mut self, deadline: u64) {
        self.next_deadline = self.next_deadline.min(deadline);
    }

    pub(in crate::engine) fn send_request(&mut self, c: usize, mut f: InFlight, waited: bool) {
        let now = self.clock.now_ns();
        let own_lag = own_lag(f.intended_ns, now, self.woke_at, self.wake_target);
        let wait = send_wait(&f, waited);
        f.sent_ns = now;
        let conn = &mut self.conns[c];
        conn.state = State::Busy;
        conn.inflight = Some(f);
        conn.expiry_deferred = false;
        conn.parser.expect_head(self.requests.head[f.request as usize]);
        let (fd, generation) = (conn.raw_fd(), conn.generation);
        // A request sent again after a stale connection was sent once already: counted then.
        if !f.retried {
            self.record.on_send_split(f.phase, f.intended_ns, now, own_lag, wait, self.in_flight);
            if let Some(row) = self.requests.row_of(f.request) {
                self.record.on_row(row);
            }
            self.sent += 1;
        }
        self.last_send_ns = Some(now);
        if self.conns[c].tls.is_some() {
            self.send_tls_request(c, f.request, now);
            return;
        }
        let bytes = &self.requests.bytes[f.request as usize];
        let entry = send_op(fd, bytes, c, generation);
        self.conns[c].ops += 1;
        self.push(entry);
    }

    /// Arm the connection's multishot receive (once per socket, again only if the kernel
    /// ended it, e.g. when it ran out of provided buffers).
    pub(in crate::engine) fn arm_recv(&mut self, c: usize) {
        let conn = &mut self.conns[c];
        if conn.recv_armed || !matches!(conn.state, State::Idle | State::Busy | State::Handshaking) {
            return;
        }
        conn.recv_armed = true;
        conn.ops += 1;
        let entry = opcode::RecvMsgMulti::new(types::Fd(conn.raw_fd()), &*self.rx_header, self.bufs.group)
            .build()
            .user_data(user_data(c, conn.generation, OP_RECV));
        self.push(entry);
    }

    pub(super) fn on_sent(&mut self, c: usize, res: i32, now: u64) {
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
            let entry = send_op(conn.raw_fd(), rest, c, conn.generation);
            conn.ops += 1;
            self.push(entry);
        }
    }

    /// Where a completed receive's payload lies in its buffer, and the kernel's stamp.
    pub(super) fn received(&self, bid: Option<u16>, res: i32) -> Option<(std::ops::Range<usize>, Option<u64>)> {
        let bid = bid?;
        let buffer = self.bufs.get(bid, res as usize);
        let chunk = rxtime::parse(buffer, &self.rx_header)?;
        let start = chunk.payload.as_ptr() as usize - buffer.as_ptr() as usize;
        Some((start..start + chunk.payload.len(), chunk.stamp_ns))
    }

    /// When the response on `c` completed: the kernel's stamp of the chunk that completed it
    /// (clamped into the request's life), or the moment the shard read it.
    pub(in crate::engine) fn completion_time(&self, c: usize, stamp: Option<u64>, now: u64) -> u64 {
        let sent = self.conns[c].inflight.map_or(0, |f| f.sent_ns);
        stamp.map_or(now, |s| self.realtime.run_time(s, sent, now))
    }

    pub(super) fn on_received(&mut self, c: usize, res: i32, bid: Option<u16>, now: u64) {
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
            self.record.on_close(CloseCause::Target, now);
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
                self.note_read(c, stamp.map(|_| done), now);
                self.conns[c].parser.reset();
                self.finish_answered(c, status, done);
                if close || !self.keepalive {
                    if close {
                        self.record.on_close(CloseCause::Target, now);
                    }
                    self.begin_close(c);
                }
            }
        }
    }

    /// The answer on `c`, whose last byte the kernel stamped at `stamped` (run time; `None`:
    /// not stamped), was read at `now`: its read lag.
    pub(in crate::engine) fn note_read(&mut self, c: usize, stamped: Option<u64>, now: u64) {
        if let (Some(at), Some(f)) = (stamped, self.conns[c].inflight) {
            self.record.on_read(f.phase, at, now);
        }
    }

    pub(in crate::engine) fn finish_answered(&mut self, c: usize, status: u16, done: u64) {
        let conn = &mut self.conns[c];
        if conn.expiry_deferred && conn.inflight.is_some_and(|f| done > f.deadline_ns) {
            // Its deadline had passed with bytes unread, and the answer ended after it.
            let deadline = conn.inflight.map_or(done, |f| f.deadline_ns);
            self.time_out(c, deadline);
            return;
        }
        let Some(f) = conn.inflight.take() else { return };
        conn.served += 1;
        conn.free_since_ns = slot_free(&f, done);
        self.record.on_response(f.phase, f.intended_ns, f.sent_ns, done, status);
        if (200..400).contains(&status) {
            self.ok += 1;
        } else {
            self.errors += 1;
        }
        self.in_flight = self.in_flight.saturating_sub(1);
        self.schedule.finished(done);
    }

    pub(in crate::engine) fn finish_failed(
        &mut self,
        f: InFlight,
        at_ns: u64,
        class: ErrorClass,
        message: Cow<'static, str>,
    ) {
        self.record.on_failure(f.phase, f.intended_ns, at_ns, class, message);
        self.errors += 1;
        self.in_flight = self.in_flight.saturating_sub(1);
        self.schedule.finished(at_ns);
    }

    /// Fail the connection's request with `class` and close the connection.
    pub(in crate::engine) fn fail_request(
        &mut self,
        c: usize,
        class: ErrorClass,
        message: Cow<'static, str>,
        now: u64,
    ) {
        if self.conns[c].h2.is_some() {
            // Every stream on an HTTP/2 connection fails with it.
            self.break_h2(c, class, message, now);
            return;
        }
        if let Some(cause) = close_cause(class) {
            self.record.on_close(cause, now);
        }
        let opening = matches!(self.conns[c].state, State::Connecting | State::Handshaking);
        if let Some(f) = self.conns[c].inflight.take() {
            self.conns[c].free_since_ns = slot_free(&f, now);
            self.finish_failed(f, now, class, message);
        } else if opening {
            // A pool connection that never opened: its slot was never free before now.
            self.conns[c].free_since_ns = now;
        }
        self.begin_close(c);
    }

    /// The request sent on `c` got no complete answer by its `deadline`: a timeout, recorded
    /// at the deadline with its time on the wire, and the connection closed.
    fn time_out(&mut self, c: usize, deadline: u64) {
        if let Some(f) = self.conns[c].inflight {
            self.record.on_timeout_service(f.phase, f.sent_ns, deadline);
        }
        self.fail_request(
            c,
            ErrorClass::Timeout,
            Cow::Borrowed("no complete response by its deadline (intended time + timeout)"),
            deadline,
        );
    }

    /// Fail what has passed its deadline — requests, connects, handshakes — at exactly the
    /// deadline, and note the earliest deadline still ahead.
    pub(super) fn expire(&mut self, now: u64) {
        // Answers already completed are read before anything is called late.
        if !self.ring.completion().is_empty() {
            self.reap(now);
        }
        let mut next = u64::MAX;
        for c in 0..self.conns.len() {
            if self.conns[c].h2.is_some() {
                next = next.min(self.expire_h2(c, now));
                continue;
            }
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
            if conn.state == State::Busy && !conn.expiry_deferred && unread(conn) {
                // Bytes of the answer arrived and were not read yet (the shard was late): read
                // them first; their kernel stamp says whether it beat the deadline.
                self.conns[c].expiry_deferred = true;
                next = next.min(now + DEFERRED_EXPIRY_NS);
                continue;
            }
            match conn.state {
                State::Busy => self.time_out(c, deadline),
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
                    // The connect failed only if it had the whole timeout; a request that was
                    // already late when its connect began ran out of its own time instead.
                    if now.saturating_sub(self.conns[c].connect_started_ns) >= self.timeout_ns {
                        self.record.connect_failures += 1;
                    } else {
                        self.record.deadline_while_connecting += 1;
                    }
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
    pub(super) fn account_unfinished(&mut self, now: u64, stopped_at: u64) {
        // A closed run's users whose requests are aborted here are not due again.
        self.schedule.stop_users();
        for f in self.unfinished_h2() {
            self.finish_failed(
                f,
                now,
                ErrorClass::Aborted,
                Cow::Borrowed("in flight when the run stopped (latency recorded then: a lower bound)"),
            );
        }
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
        // Due and not sent by the stop: the loader's only when a connection was free (in the
        // kernel's view) for it well before the stop; nobody's otherwise — every connection
        // still waited for the target (opening, or an answer not yet arrived), or an answer
        // had just come in (a collapsing target's answers arrive all the time; one unread at
        // the stop's instant says nothing of how long it sat).
        let loader_since = self.kernel_free_since();
        self.errors += crate::engine::account_stopped_schedule(
            &mut self.record,
            &mut self.schedule,
            now,
            stopped_at,
            loader_since,
        );
        self.in_flight = 0;
    }
}

/// The loader's own part of the lag of a send due at `intended`, sent at `sent`, by a shard
/// that woke at `woke` from a sleep planned to end at `target`. The host's part is how late the
/// timer fired past the later of the target and the due time; the rest — waiting on purpose
/// (a batching window), then the shard's work before the send — is the loader's.
pub(in crate::engine) fn own_lag(intended: u64, sent: u64, woke: u64, target: u64) -> u64 {
    let lag = sent.saturating_sub(intended);
    let host = woke.saturating_sub(target.max(intended));
    lag.saturating_sub(host)
}

/// Who a connection closed because of `class` (its request's failure) was closed by: the
/// loader on a timeout (the target did not answer in time), the target on a reset or a close
/// under the request; `None` for the loader's own reasons (a protocol or I/O error).
pub(in crate::engine) fn close_cause(class: ErrorClass) -> Option<CloseCause> {
    match class {
        ErrorClass::Timeout => Some(CloseCause::Timeout),
        ErrorClass::Reset | ErrorClass::ConnectionError => Some(CloseCause::Target),
        _ => None,
    }
}

/// How long an expiry waits for unread bytes of the answer to be read.
const DEFERRED_EXPIRY_NS: u64 = 1_000_000;

/// Whether bytes sit unread in the connection's socket (`SIOCINQ`): an answer, or part of
/// one, that reached the kernel and that the shard has not taken yet.
fn unread(conn: &crate::engine::conn::Conn) -> bool {
    use std::os::fd::AsRawFd;
    let Some(socket) = conn.socket.as_ref() else { return false };
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD (= SIOCINQ on TCP) writes one c_int through the pointer.
    let rc = unsafe { libc::ioctl(socket.as_raw_fd(), libc::FIONREAD, &mut n) };
    rc == 0 && n > 0
}

/// When the slot `f` held in the instant-reading pool comes free, its request having ended
/// at `done` (the answer's kernel stamp, or its deadline): `done`, less the lead that pool had
/// over the real one when `f` left — the loader's part of `f`'s wait — minus what a target's
/// queue could have absorbed of it. Anchored at the real end, not at the modelled send plus
/// the real busy time: a saturated target's answers take longer the earlier they are sent
/// (its queue), so the model's lead must not grow with every cycle of a connection by the few
/// hundred microseconds each read takes (CI: a target of 40/s driven at 100/s through 4
/// connections for 8 s drifted 10 ms ahead and laid 265 of its waits at the loader's door).
///
/// A queue absorbs at most the time the request spent in it, so no more than its whole time
/// at the target (`done` − its send), and no more than [`SLOT_LEAD_ALLOWANCE_NS`]. Conceding
/// the full allowance to a fast target would lengthen every modelled cycle by it: 16
/// connections answering in 0.1 ms would cycle every 2.1 ms, a pool of 7,600/s that a
/// starved loader's backlog at 8,000 req/s never drains in the model, so its waits were laid
/// at the target's door (CI, three loops at nice −10: 12,005 of 35,235 waits).
fn slot_free(f: &InFlight, done: u64) -> u64 {
    let lead = f.taken_ns.saturating_sub(f.free_ns.max(f.intended_ns));
    let absorbed = SLOT_LEAD_ALLOWANCE_NS.min(done.saturating_sub(f.sent_ns));
    done.saturating_sub(lead.saturating_sub(absorbed))
}

/// What each cycle of a connection may take the loader without the instant-reading pool
/// pulling ahead: the shard's deliberate read deferral (`engine::pace::MAX_DEFER_NS`). A
/// loader that was not running leaves its answers unread far longer.
const SLOT_LEAD_ALLOWANCE_NS: u64 = crate::engine::pace::MAX_DEFER_NS;

/// How the lag of `f` divides: whether it waited for a connection (`waited`), and the
/// loader's part — from when a connection was free for it in the kernel's view to when the
/// shard took it from the schedule (`f.sent_ns` until it is sent). What follows the take is
/// the send itself on an idle connection (microseconds), or the connect and handshake of the
/// connection it opened: the target's and the network's, which the probes measure.
pub(in crate::engine) fn send_wait(f: &InFlight, waited: bool) -> crate::record::SendWait {
    let loader_ns = f.taken_ns.saturating_sub(f.free_ns.max(f.intended_ns));
    crate::record::SendWait { for_connection: waited, loader_ns }
}

/// Whether a request that opened its own connection counts as having waited for one — so
/// its lateness is not laid at the loader's door: it waited for the pool before it was taken,
/// or the loader took it on time and then waited for the connect (and handshake: the target's
/// and the network's time, which the probes measure). `sent_ns` still holds the time it was
/// taken here.
pub(in crate::engine) fn waited_for_connection(f: &InFlight) -> bool {
    f.waited || f.sent_ns.saturating_sub(f.intended_ns) <= crate::record::LATE_NS
}

#[cfg(test)]
#[path = "requests_tests.rs"]
mod tests;
