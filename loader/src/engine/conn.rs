//! One keep-alive connection of a shard: its socket, its receive buffer, the request in
//! flight on it, and where it is in its life (connecting, idle, busy, closing).
//!
//! Only the shard loop touches a `Conn`; buffers stay put while the kernel may write into
//! them (a `Conn` is never moved or dropped with operations outstanding — see `ops`).

use super::http1::ResponseParser;

/// Initial receive buffer; it grows (up to [`MAX_BUF`]) only for response heads that do
/// not fit. Body bytes are consumed as they arrive, never kept.
pub const INITIAL_BUF: usize = 16 * 1024;
/// Largest receive buffer (a response head larger than this is a protocol error).
pub const MAX_BUF: usize = 1024 * 1024;

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// No socket.
    Closed,
    /// Connect submitted.
    Connecting,
    /// Connected, no request in flight.
    Idle,
    /// A request in flight.
    Busy,
    /// Shut down; waiting for outstanding operations before the socket is closed.
    Closing,
}

/// The request a connection carries.
#[derive(Debug, Clone, Copy)]
pub struct InFlight {
    /// Phase the request belongs to.
    pub phase: usize,
    /// When it should have been sent (ns since run start).
    pub intended_ns: u64,
    /// When it was handed to the kernel (ns since run start).
    pub sent_ns: u64,
    /// Bytes of the request already written.
    pub written: usize,
    /// It was already retried once after a stale keep-alive connection.
    pub retried: bool,
}

/// One connection.
#[derive(Debug)]
pub struct Conn {
    /// Socket, or -1.
    pub fd: i32,
    /// Bumped on every new socket, so completions of a previous socket are recognised.
    pub generation: u32,
    /// Life stage.
    pub state: State,
    /// io_uring operations submitted and not yet completed on this connection.
    pub ops: u32,
    /// Receive buffer; `filled` bytes at its front are unparsed response bytes.
    pub buf: Vec<u8>,
    /// Bytes at the front of `buf` not yet consumed by the parser.
    pub filled: usize,
    /// Response framing state.
    pub parser: ResponseParser,
    /// The request in flight, if any (also set while connecting for it).
    pub inflight: Option<InFlight>,
    /// Responses completed on the current socket (0 = fresh connection).
    pub served: u64,
    /// When the current connect was submitted (ns since run start).
    pub connect_started_ns: u64,
    /// A request to send again on a fresh socket once this one is closed.
    pub retry: Option<InFlight>,
}

impl Conn {
    /// A closed connection whose responses answer a HEAD request or not.
    pub fn new(head: bool) -> Self {
        Conn {
            fd: -1,
            generation: 0,
            state: State::Closed,
            ops: 0,
            buf: vec![0; INITIAL_BUF],
            filled: 0,
            parser: ResponseParser::new(head),
            inflight: None,
            served: 0,
            connect_started_ns: 0,
            retry: None,
        }
    }

    /// Drop the first `n` buffered bytes (consumed by the parser).
    pub fn consume(&mut self, n: usize) {
        if n >= self.filled {
            self.filled = 0;
        } else {
            self.buf.copy_within(n..self.filled, 0);
            self.filled -= n;
        }
    }

    /// Room to receive into; grows the buffer when it is full. `None` when a head would
    /// exceed [`MAX_BUF`].
    pub fn recv_space(&mut self) -> Option<(*mut u8, u32)> {
        if self.filled == self.buf.len() {
            if self.buf.len() >= MAX_BUF {
                return None;
            }
            self.buf.resize(self.buf.len() * 2, 0);
        }
        let free = self.buf.len() - self.filled;
        // SAFETY: `filled < buf.len()`, so the pointer stays inside the allocation.
        Some((unsafe { self.buf.as_mut_ptr().add(self.filled) }, free as u32))
    }
}
