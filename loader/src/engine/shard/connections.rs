//! The shard's sockets: opening the pool, connecting, and what a socket error or a close
//! means for the request on it.

use std::borrow::Cow;
use std::os::fd::AsRawFd as _;
use std::time::Duration;

use io_uring::{opcode, types};

use socket2::{Socket, Type};

use super::*;
use crate::engine::EngineError;
use crate::engine::conn::State;
use crate::engine::http1::Progress;
use crate::engine::inflight::InFlight;
use crate::engine::pace::{self};
use crate::engine::rxtime;
use crate::record::{CloseCause, ErrorClass};

/// The class and message of a failed socket operation (`errno`, positive).
pub(in crate::engine) fn class_of_errno(errno: i32) -> (ErrorClass, Cow<'static, str>) {
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
    /// Connect every connection before the start instant; true if stopped meanwhile.
    pub(super) fn open_pool(&mut self) -> Result<bool, EngineError> {
        while let Some(c) = self.closed.pop() {
            self.start_connect(c, None, 0);
        }
        let start = self.clock.start();
        loop {
            if self.stopping() {
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

    pub(super) fn start_connect(&mut self, c: usize, request: Option<InFlight>, now: u64) {
        let socket = match Socket::new(self.domain, Type::STREAM.cloexec(), None) {
            Ok(socket) => socket,
            Err(e) => {
                // Out of descriptors or memory: fail the request, keep the slot for later.
                self.closed.push(c);
                if let Some(f) = request {
                    let message = Cow::Owned(format!("cannot create a socket: {e}"));
                    self.finish_failed(f, now, ErrorClass::Connect, message);
                }
                return;
            }
        };
        // Best effort, both: a request is one write, and without receive stamps responses
        // are stamped when the shard reads them.
        let _ = socket.set_tcp_nodelay(true);
        rxtime::enable(&socket);
        let fd = socket.as_raw_fd();
        let deadline = request.map_or(now + self.timeout_ns, |f| f.deadline_ns);
        self.note_deadline(deadline);
        let generation = {
            let conn = &mut self.conns[c];
            conn.socket = Some(socket);
            conn.generation = conn.generation.wrapping_add(1);
            conn.state = State::Connecting;
            conn.connect_started_ns = now;
            conn.inflight = request;
            conn.ops += 1;
            conn.generation
        };
        self.follow_segments(c);
        let addr = self.sockaddr.as_ptr().cast::<libc::sockaddr>();
        let entry = opcode::Connect::new(types::Fd(fd), addr, self.sockaddr.len())
            .build()
            .user_data(user_data(c, generation, OP_CONNECT));
        self.push(entry);
    }

    pub(super) fn on_connected(&mut self, c: usize, res: i32, now: u64) {
        if res < 0 {
            self.record.connect_failures += 1;
            if -res == libc::EADDRNOTAVAIL {
                self.record.on_connect_no_port(now);
            }
            let conn = &mut self.conns[c];
            let request = conn.inflight.take();
            conn.state = State::Closing; // ops == 0: settle closes the socket
            // A slot that was opening comes free when its connect fails, not before (a pool
            // connection that never opened was never free for a request).
            conn.free_since_ns = now;
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
        if let Some(grpc) = self.h2.as_ref().map(|m| m.h2.grpc) {
            self.connected_h2(c, grpc);
            return;
        }
        self.conns[c].state = State::Idle;
        self.arm_recv(c);
        match self.conns[c].inflight.take() {
            Some(f) => self.send_request(c, f, waited_for_connection(&f)),
            None => self.idle.push(c),
        }
    }

    /// A receive or send on `c` failed with `errno` while a request was in flight.
    pub(in crate::engine) fn on_socket_error(&mut self, c: usize, errno: i32, now: u64) {
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
    pub(super) fn is_stale(&self, c: usize) -> bool {
        let conn = &self.conns[c];
        conn.parser.at_start() && conn.filled == 0 && conn.served > 0
    }

    /// The server closed the connection while a request was in flight on it.
    pub(in crate::engine) fn on_eof(&mut self, c: usize, now: u64) {
        let conn = &mut self.conns[c];
        if let Some(Progress::Done { status, .. }) = conn.parser.on_eof() {
            self.finish_answered(c, status, now);
            self.record.on_close(CloseCause::Target, now);
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
    pub(super) fn on_closed_under_request(&mut self, c: usize, now: u64, how: &'static str) {
        self.record.on_close(CloseCause::Target, now);
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

    pub(in crate::engine) fn begin_close(&mut self, c: usize) {
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
            if let Some(socket) = &conn.socket {
                let _ = socket.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    /// Move a connection on once its outstanding operations allow.
    pub(super) fn settle(&mut self, c: usize) {
        if self.conns[c].state == State::Closing && self.conns[c].ops == 0 {
            self.unfollow_segments(c);
        }
        let conn = &mut self.conns[c];
        match conn.state {
            State::Closing if conn.ops == 0 => {
                // No operation refers to this socket any more: dropping it closes it.
                conn.socket = None;
                conn.state = State::Closed;
                conn.filled = 0;
                conn.served = 0;
                conn.parser.reset();
                conn.h2 = None;
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
