//! One keep-alive connection of a shard: its socket, its receive buffer, the request in
//! flight on it, and where it is in its life (connecting, handshaking, idle, busy, closing).
//!
//! Only the shard loop touches a `Conn`. Received bytes arrive in the shard's provided
//! buffers (`bufring.rs`) and are parsed where they land; a connection keeps bytes of its own
//! only when a response head is split across chunks.

use super::http1::{Progress, ProtocolError, ResponseParser};
use super::tls::Tls;

/// Largest unparsed tail a connection keeps (a response head larger than this is a
/// protocol error).
pub const MAX_BUF: usize = 1024 * 1024;

/// What one received chunk did to the response in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chunk {
    /// The response is not complete yet.
    More,
    /// The response is complete.
    Done {
        /// HTTP status.
        status: u16,
        /// The server asked to close, or sent bytes beyond the response: do not reuse.
        close: bool,
    },
}

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// No socket.
    Closed,
    /// Connect submitted.
    Connecting,
    /// Connected, TLS handshake under way (https only); a request waiting for the
    /// connection stays in `inflight` until the handshake is done.
    Handshaking,
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
    /// Which request of the table it is.
    pub request: u16,
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
    /// Unparsed response bytes carried over from earlier chunks (`filled` of them).
    pub buf: Vec<u8>,
    /// Bytes at the front of `buf` not yet consumed by the parser.
    pub filled: usize,
    /// Response framing state.
    pub parser: ResponseParser,
    /// The request in flight, if any (also set while connecting for it).
    pub inflight: Option<InFlight>,
    /// A multishot receive is armed on the socket.
    pub recv_armed: bool,
    /// Responses completed on the current socket (0 = fresh connection).
    pub served: u64,
    /// When the current connect was submitted (ns since run start).
    pub connect_started_ns: u64,
    /// A request to send again on a fresh socket once this one is closed.
    pub retry: Option<InFlight>,
    /// TLS state (https targets only; `None` keeps the plain path free of it).
    pub tls: Option<Box<Tls>>,
}

impl Conn {
    /// A closed connection.
    pub fn new() -> Self {
        Conn {
            fd: -1,
            generation: 0,
            state: State::Closed,
            ops: 0,
            buf: Vec::new(),
            filled: 0,
            recv_armed: false,
            parser: ResponseParser::new(false),
            inflight: None,
            served: 0,
            connect_started_ns: 0,
            retry: None,
            tls: None,
        }
    }

    /// Feed one received chunk to the response parser, keeping what it cannot consume yet.
    pub fn take_chunk(&mut self, data: &[u8]) -> Result<Chunk, ProtocolError> {
        if self.filled == 0 {
            // The common case: parse in place, copy nothing unless a head is cut short.
            let (n, progress) = self.parser.feed(data)?;
            return match progress {
                Progress::Done { status, close } => Ok(Chunk::Done { status, close: close || n < data.len() }),
                Progress::More => {
                    self.keep(&data[n..])?;
                    Ok(Chunk::More)
                }
            };
        }
        self.keep(data)?;
        let (n, progress) = self.parser.feed(&self.buf[..self.filled])?;
        self.buf.copy_within(n..self.filled, 0);
        self.filled -= n;
        match progress {
            Progress::Done { status, close } => Ok(Chunk::Done { status, close: close || self.filled > 0 }),
            Progress::More => Ok(Chunk::More),
        }
    }

    /// Append `data` to the carried-over bytes.
    fn keep(&mut self, data: &[u8]) -> Result<(), ProtocolError> {
        let need = self.filled + data.len();
        if need > MAX_BUF {
            return Err(ProtocolError(format!("response head larger than {MAX_BUF} bytes")));
        }
        if need > self.buf.len() {
            self.buf.resize(need.next_power_of_two(), 0);
        }
        self.buf[self.filled..need].copy_from_slice(data);
        self.filled = need;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_of_any_size_frame_one_response_and_keep_only_split_heads() {
        let wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n";
        for step in 1..=wire.len() {
            let mut conn = Conn::new();
            let mut last = Chunk::More;
            for piece in wire.chunks(step) {
                last = conn.take_chunk(piece).unwrap();
            }
            assert_eq!(last, Chunk::Done { status: 200, close: false }, "step {step}");
            assert_eq!(conn.filled, 0, "step {step}");
        }
        // Whole response in one chunk: nothing is copied.
        let mut conn = Conn::new();
        assert_eq!(conn.take_chunk(wire).unwrap(), Chunk::Done { status: 200, close: false });
        assert!(conn.buf.is_empty());
    }

    #[test]
    fn bytes_beyond_the_response_mean_close() {
        let mut conn = Conn::new();
        let got = conn.take_chunk(b"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200").unwrap();
        assert_eq!(got, Chunk::Done { status: 204, close: true });
    }
}
