//! The HTTP/2 side of the shard (`--http2`): streams multiplexed over the shard's
//! connections, on the same ring, schedule, deadlines and record as HTTP/1.1 — h2c on an
//! `http://` target, and over TLS on an `https://` one, where the frames pass through the
//! connection's rustls session (`tls.rs`) both ways.
//!
//! The frames are `http2::wire`'s; this file is the loop's part: which connection a due
//! request goes on (the open one with the fewest streams and one free — so that at ordinary
//! rates each connection carries one stream at a time and a read's receive stamp is its
//! answer's), writing what a connection queued (once per turn, so the requests of one wake-up
//! on one connection leave in one `send`), reading frames as they land in the provided
//! buffers, and the requests a server did not process, sent again before their deadline.
//! While a connection carries two or more streams the shard wakes for answers rather than
//! sleeping through them — two answers in one read would both get the later one's stamp —
//! unless the probes follow its segments (`stamps.rs`): then each answer gets the arrival
//! of the segment that carried its last byte, and the shard sleeps through them.

use std::borrow::Cow;
use std::collections::VecDeque;

use super::*;
use crate::engine::conn::{H2Link, State};
use crate::engine::http2::wire::{Event, Wire};
use crate::engine::inflight::InFlight;
use crate::record::ErrorClass;

/// The shard's HTTP/2 state: the run's setting and the requests waiting to be sent again.
pub(super) struct H2Mode {
    pub(super) h2: Arc<crate::engine::http2::Http2>,
    /// Requests the server did not process (still in flight, counted once), sent first.
    pub(super) retries: VecDeque<InFlight>,
    events: Vec<Event>,
    expired: Vec<InFlight>,
    /// Connections with frames queued this turn.
    dirty: Vec<usize>,
    /// Connections that went away (GOAWAY) and are not replaced yet: each opens a new one
    /// as soon as a slot is closed, rather than when a request finds no stream.
    replace: u32,
    /// The probes' record of each segment received (`stamps.rs`), when they run.
    pub(super) segments: Option<Arc<crate::engine::segments::Segments>>,
    /// This read's answers' arrivals by that record, one per event (`None`: the read's stamp).
    arrivals: Vec<Option<u64>>,
}

impl H2Mode {
    pub(super) fn new(
        h2: Arc<crate::engine::http2::Http2>,
        segments: Option<Arc<crate::engine::segments::Segments>>,
    ) -> H2Mode {
        H2Mode {
            h2,
            retries: VecDeque::new(),
            events: Vec::new(),
            expired: Vec::new(),
            dirty: Vec::new(),
            replace: 0,
            segments,
            arrivals: Vec::new(),
        }
    }
}

impl Shard {
    /// The HTTP/2 shard's `dispatch`: every due request (a request to send again first) on the
    /// open connection with the fewest streams and one free, else on a connection it opens,
    /// else it waits at the head (the pool's time) — and those due within the send-ahead
    /// window, early, when a stream is free now.
    pub(super) fn dispatch_h2(&mut self, now: u64) {
        while let Some(mode) = self.h2.as_mut().filter(|m| m.replace > 0)
            && let Some(c) = self.closed.pop()
        {
            mode.replace -= 1;
            self.start_connect(c, None, now);
        }
        let until = self.pace.sends_until(now, self.schedule.peek().map(|d| d.intended_ns));
        loop {
            let Some(mode) = self.h2.as_mut() else { return };
            let (f, from_schedule) = match mode.retries.pop_front() {
                Some(f) => (f, false),
                None => match self.schedule.peek() {
                    Some(due) if due.intended_ns <= until => {
                        let deadline = due.intended_ns + self.timeout_ns;
                        let mut f = self.take(due, now, deadline);
                        // Streams are not modelled in the instant-reading pool: a wait for
                        // one counts as the target's, as it always has.
                        if f.waited {
                            f.free_ns = f.taken_ns;
                        }
                        (f, true)
                    }
                    _ => break,
                },
            };
            if now >= f.deadline_ns {
                if from_schedule {
                    self.schedule.advance();
                    // The loader's when a stream was free (or a connection could open).
                    let loader = self.h2_situation().0 > 0;
                    self.record.on_due_unsent(f.phase, f.intended_ns, f.deadline_ns, loader, true);
                    self.record.on_failure(
                        f.phase,
                        f.intended_ns,
                        f.deadline_ns,
                        ErrorClass::Dropped,
                        Cow::Borrowed("no stream came free before its deadline (intended time + timeout)"),
                    );
                    self.errors += 1;
                    self.schedule.finished(f.deadline_ns);
                } else {
                    self.finish_failed(
                        f,
                        f.deadline_ns,
                        ErrorClass::Timeout,
                        Cow::Borrowed(
                            "its deadline passed before it could be sent again (the server had not processed it)",
                        ),
                    );
                }
                continue;
            }
            if let Some(c) = self.pick_stream() {
                if from_schedule {
                    self.schedule.advance();
                    self.in_flight += 1;
                }
                self.note_deadline(f.deadline_ns);
                self.send_stream(c, f, f.waited);
                continue;
            }
            let early = f.intended_ns > now;
            let closed = if early { None } else { self.closed.pop() };
            match closed {
                Some(c) => {
                    if from_schedule {
                        self.schedule.advance();
                        self.in_flight += 1;
                    }
                    self.start_connect(c, Some(f), now);
                }
                None => {
                    if !from_schedule && let Some(mode) = self.h2.as_mut() {
                        mode.retries.push_front(f);
                    }
                    if !early {
                        self.pool.exhausted(now);
                    }
                    break;
                }
            }
        }
        if self.closed.is_empty() && self.pick_stream().is_none() {
            self.pool.exhausted(now);
        } else {
            self.pool.free();
        }
        self.flush_streams();
    }

    /// The connection this turn last queued a stream on, while it has a stream free and its
    /// answers keep their own stamps however they arrive (followed by segment): the requests
    /// of one wake-up then leave in one segment. Otherwise the open connection with the
    /// fewest streams of ours and one free.
    fn pick_stream(&self) -> Option<usize> {
        let mode = self.h2.as_ref()?;
        let max = mode.h2.max_streams;
        if let Some(&c) = mode.dirty.last() {
            let conn = &self.conns[c];
            if conn.state == State::Idle
                && conn.followed.is_some()
                && conn.h2.as_ref().is_some_and(|link| link.wire.free(max) > 0)
            {
                return Some(c);
            }
        }
        let mut best: Option<(usize, u32)> = None;
        for (c, conn) in self.conns.iter().enumerate() {
            let Some(link) = conn.h2.as_ref().filter(|_| conn.state == State::Idle) else { continue };
            let active = link.wire.active();
            if link.wire.free(max) > 0 && best.is_none_or(|(_, a)| active < a) {
                best = Some((c, active));
                if active == 0 {
                    break;
                }
            }
        }
        best.map(|(c, _)| c)
    }

    /// Open a stream for `f` on `c` (frames queued; written at the end of the turn's
    /// dispatch).
    pub(in crate::engine) fn send_stream(&mut self, c: usize, mut f: InFlight, waited: bool) {
        let now = self.clock.now_ns();
        // A request sent again after the server did not process it was counted then.
        if !f.retried {
            let own_lag = own_lag(f.intended_ns, now, self.woke_at, self.wake_target);
            let wait = requests::send_wait(&f, waited);
            self.record.on_send_split(f.phase, f.intended_ns, now, own_lag, wait, self.in_flight);
            if let Some(row) = self.requests.row_of(f.request) {
                self.record.on_row(row);
            }
            self.sent += 1;
        }
        f.sent_ns = now;
        self.last_send_ns = Some(now);
        let Some(mode) = self.h2.as_mut() else { return };
        let (block, body) = mode.h2.requests.wire(f.request);
        let Some(link) = self.conns[c].h2.as_mut() else { return };
        link.wire.open(f, block, body);
        mode.dirty.push(c);
    }

    /// Write what the connections queued this turn.
    pub(super) fn flush_streams(&mut self) {
        let Some(mode) = self.h2.as_mut() else { return };
        let mut dirty = std::mem::take(&mut mode.dirty);
        dirty.sort_unstable();
        dirty.dedup();
        for &c in &dirty {
            self.flush_stream(c);
        }
        dirty.clear();
        if let Some(mode) = self.h2.as_mut() {
            mode.dirty = dirty;
        }
    }

    /// Hand `c`'s queued frames to the kernel, unless a send of its is still under way (its
    /// completion sends them).
    fn flush_stream(&mut self, c: usize) {
        let conn = &mut self.conns[c];
        let fd = conn.raw_fd();
        let Some(link) = conn.h2.as_mut() else { return };
        if link.wire.out.is_empty() || conn.state != State::Idle {
            return;
        }
        if let Some(tls) = conn.tls.as_mut() {
            // Over TLS the frames are encrypted now (rustls' send buffer is unbounded) and
            // leave with the connection's next TLS send.
            let written = std::io::Write::write_all(&mut tls.session.writer(), &link.wire.out);
            link.wire.out.clear();
            match written {
                Ok(()) => self.flush_tls(c),
                Err(e) => {
                    let now = self.clock.now_ns();
                    self.break_h2(c, ErrorClass::Protocol, Cow::Owned(format!("TLS write: {e}")), now);
                }
            }
            return;
        }
        if link.sending {
            return;
        }
        std::mem::swap(&mut link.writing, &mut link.wire.out);
        link.wire.out.clear();
        link.written = 0;
        link.sending = true;
        let entry = send_op(fd, &link.writing, c, conn.generation);
        conn.ops += 1;
        self.push(entry);
    }

    /// A connection opened (over TLS: its handshake done, ALPN `h2` agreed): the preface,
    /// then the request it was opened for.
    pub(super) fn connected_h2(&mut self, c: usize, grpc: bool) {
        let conn = &mut self.conns[c];
        conn.h2 = Some(Box::new(H2Link {
            wire: Wire::new(self.limits, grpc),
            writing: Vec::new(),
            written: 0,
            sending: false,
        }));
        conn.state = State::Idle;
        self.arm_recv(c);
        if let Some(f) = self.conns[c].inflight.take() {
            self.send_stream(c, f, requests::waited_for_connection(&f));
        }
        self.flush_stream(c);
    }

    pub(super) fn sent_h2(&mut self, c: usize, res: i32, now: u64) {
        if res < 0 {
            let (class, message) = connections::class_of_errno(-res);
            self.break_h2(c, class, message, now);
            return;
        }
        let conn = &mut self.conns[c];
        let fd = conn.raw_fd();
        let Some(link) = conn.h2.as_mut() else { return };
        link.written += res as usize;
        if link.written < link.writing.len() {
            // Short write: send the rest.
            let rest = &link.writing[link.written..];
            let entry = send_op(fd, rest, c, conn.generation);
            conn.ops += 1;
            self.push(entry);
            return;
        }
        link.sending = false;
        self.flush_stream(c);
    }

    pub(super) fn received_h2(&mut self, c: usize, res: i32, bid: Option<u16>, now: u64) {
        if res == -libc::ENOBUFS {
            return; // re-armed by `complete`
        }
        if res < 0 {
            let (class, message) = connections::class_of_errno(-res);
            self.break_h2(c, class, message, now);
            return;
        }
        let received = if res > 0 { self.received(bid, res) } else { None };
        let (range, stamp) = match (res, received, bid) {
            (0, _, _) => (0..0, None),
            (_, Some(r), Some(_)) => r,
            _ => {
                let message = Cow::Borrowed("receive buffer without a readable layout");
                self.break_h2(c, ErrorClass::Protocol, message, now);
                return;
            }
        };
        if range.is_empty() {
            self.h2_ended(c, now);
            return;
        }
        let Some(mode) = self.h2.as_mut() else { return };
        let mut events = std::mem::take(&mut mode.events);
        let (fed, went_away) = match (self.conns[c].h2.as_mut(), bid) {
            (Some(link), Some(bid)) => {
                let before = link.wire.retiring();
                let fed = link.wire.feed(&self.bufs.get(bid, res as usize)[range], &mut events);
                (fed, !before && link.wire.retiring())
            }
            _ => (Ok(()), false),
        };
        self.h2_fed(c, events, fed, went_away, stamp, now);
        self.flush_stream(c);
    }

    /// The server closed `c` (or reset it): its streams fail, named by its GOAWAY if one came.
    pub(super) fn h2_ended(&mut self, c: usize, now: u64) {
        let goaway = self.conns[c].h2.as_ref().and_then(|l| l.wire.goaway_code()).filter(|&code| code != 0);
        let (class, message) = match goaway {
            Some(code) => (
                ErrorClass::ConnectionError,
                Cow::Owned(format!(
                    "the server ended the connection (GOAWAY {})",
                    crate::engine::http2::wire::code_name(code)
                )),
            ),
            None => (ErrorClass::Reset, Cow::Borrowed("the server closed the connection under the stream")),
        };
        self.break_h2(c, class, message, now);
    }

    /// Decrypted bytes arrived on an HTTP/2-over-TLS connection `c` (`stamp`: the kernel's
    /// stamp of the read that carried their records): feed them all to its frames. False once
    /// the connection is closing.
    pub(super) fn drain_plaintext_h2(&mut self, c: usize, stamp: Option<u64>, now: u64) -> bool {
        let conn = &mut self.conns[c];
        let (Some(mode), Some(tls), Some(link)) = (self.h2.as_mut(), conn.tls.as_mut(), conn.h2.as_mut()) else {
            return false;
        };
        let mut events = std::mem::take(&mut mode.events);
        let before = link.wire.retiring();
        let mut fed = Ok(());
        while fed.is_ok()
            && let Ok(plain) = tls.session.reader().into_first_chunk()
            && !plain.is_empty()
        {
            let n = plain.len();
            fed = link.wire.feed(plain, &mut events);
            std::io::BufRead::consume(&mut tls.session.reader(), n);
        }
        let went_away = !before && link.wire.retiring();
        self.h2_fed(c, events, fed, went_away, stamp, now);
        self.conns[c].state != State::Closing
    }

    /// After a read's bytes went to `c`'s frames: end the streams they ended (`events`), then
    /// act on a connection error (`fed`), a GOAWAY (`went_away`) and an answer still coming.
    fn h2_fed(
        &mut self,
        c: usize,
        mut events: Vec<Event>,
        fed: Result<(), crate::engine::http2::wire::ConnError>,
        went_away: bool,
        stamp: Option<u64>,
        now: u64,
    ) {
        let Some(mode) = self.h2.as_mut() else { return };
        if went_away {
            mode.replace += 1;
        }
        let mut arrivals = std::mem::take(&mut mode.arrivals);
        self.arrivals(c, stamp, now, events.len(), &mut arrivals);
        for (i, e) in events.drain(..).enumerate() {
            self.on_stream_end(e, stamp, arrivals.get(i).copied().flatten(), now);
        }
        if let Some(mode) = self.h2.as_mut() {
            mode.events = events;
            mode.arrivals = arrivals;
        }
        if let Err(e) = fed {
            self.break_h2(c, e.class, e.message, now);
            return;
        }
        let Some(link) = self.conns[c].h2.as_ref() else { return };
        if link.wire.busy_reading() {
            self.streaming = true;
        }
        if link.wire.retiring() && link.wire.active() == 0 {
            // Gone away and done: its slot opens a new connection when one is needed.
            self.begin_close(c);
        }
    }

    /// A stream ended: `arrived` is when the segment with its last byte arrived (run clock, by
    /// the segment record), else `stamp` the read's kernel stamp, else `now`.
    fn on_stream_end(&mut self, e: Event, stamp: Option<u64>, arrived: Option<u64>, now: u64) {
        match e {
            Event::Answered { f, status, grpc } => {
                let done = match arrived {
                    Some(at) => {
                        self.record.stamps_by_segment += 1;
                        at.clamp(f.sent_ns, now.max(f.sent_ns))
                    }
                    None => stamp.map_or(now, |s| self.realtime.run_time(s, f.sent_ns, now)),
                };
                if arrived.is_some() || stamp.is_some() {
                    self.record.on_read(f.phase, done, now);
                }
                let ok = match grpc {
                    // (A gRPC call answered with an HTTP error status is that HTTP error.)
                    Some((code, message)) if status == 200 => {
                        self.record.on_grpc(f.phase, f.intended_ns, f.sent_ns, done, code, &message);
                        code == 0
                    }
                    _ => {
                        self.record.on_response(f.phase, f.intended_ns, f.sent_ns, done, status);
                        (200..400).contains(&status)
                    }
                };
                if ok {
                    self.ok += 1;
                } else {
                    self.errors += 1;
                }
                self.in_flight = self.in_flight.saturating_sub(1);
                self.schedule.finished(done);
            }
            Event::Failed { f, class, message } => self.finish_failed(f, now, class, message),
            Event::Unprocessed { f } => {
                // Still in flight: sent again first thing, before its deadline, counted once.
                self.record.retried_on_stale_connection += 1;
                if let Some(mode) = self.h2.as_mut() {
                    mode.retries.push_back(InFlight { retried: true, ..f });
                }
            }
        }
    }

    /// The connection broke: every stream on it fails with `class`, and it closes.
    pub(super) fn break_h2(&mut self, c: usize, class: ErrorClass, message: Cow<'static, str>, now: u64) {
        if let Some(cause) = super::requests::close_cause(class) {
            self.record.on_close(cause, now);
        }
        let flights: Vec<InFlight> = match self.conns[c].h2.as_mut() {
            Some(link) => link.wire.take_all().collect(),
            None => Vec::new(),
        };
        for f in flights {
            self.finish_failed(f, now, class, message.clone());
        }
        // A request that waited for this connection's connect.
        if let Some(f) = self.conns[c].inflight.take() {
            self.finish_failed(f, now, class, message);
        }
        self.begin_close(c);
    }

    /// Time out the streams of `c` past their deadline (recorded at it, reset with CANCEL);
    /// the earliest deadline left on it.
    pub(super) fn expire_h2(&mut self, c: usize, now: u64) -> u64 {
        let Some(mode) = self.h2.as_mut() else { return u64::MAX };
        let mut expired = std::mem::take(&mut mode.expired);
        let next = match self.conns[c].h2.as_mut() {
            Some(link) => {
                link.wire.expire(now, &mut expired);
                link.wire.next_deadline()
            }
            None => u64::MAX,
        };
        let any = !expired.is_empty();
        for f in expired.drain(..) {
            self.record.on_timeout_service(f.phase, f.sent_ns, f.deadline_ns);
            self.finish_failed(
                f,
                f.deadline_ns,
                ErrorClass::Timeout,
                Cow::Borrowed("no complete response by its deadline (intended time + timeout)"),
            );
        }
        if let Some(mode) = self.h2.as_mut() {
            mode.expired = expired;
        }
        if any {
            self.flush_stream(c);
        }
        next
    }

    /// Every request still in flight on a stream or waiting to be sent again, taken for the
    /// stop's accounting.
    pub(super) fn unfinished_h2(&mut self) -> Vec<InFlight> {
        let mut all: Vec<InFlight> = match self.h2.as_mut() {
            Some(mode) => mode.retries.drain(..).collect(),
            None => return Vec::new(),
        };
        for conn in &mut self.conns {
            if let Some(link) = conn.h2.as_mut() {
                all.extend(link.wire.take_all());
            }
        }
        all
    }

    /// For the sleep: connections that can take a stream now (or be opened), and whether
    /// one carries two streams or more — then answers are read as they come, so each keeps
    /// its own receive stamp.
    pub(super) fn h2_situation(&self) -> (usize, bool) {
        let Some(mode) = self.h2.as_ref() else { return (0, false) };
        let max = mode.h2.max_streams;
        let mut free = self.closed.len();
        let mut crowded = false;
        for conn in &self.conns {
            let Some(link) = conn.h2.as_ref().filter(|_| conn.state == State::Idle) else { continue };
            free += usize::from(link.wire.free(max) > 0);
            // A followed connection's answers keep their own stamps however late they are read.
            crowded |= link.wire.active() >= 2 && conn.followed.is_none();
        }
        (free, crowded)
    }
}
