//! One keep-alive connection of a shard: its socket, its receive buffer, the request in
//! flight on it, and where it is in its life (connecting, handshaking, idle, busy, closing).
//!
//! Only the shard loop touches a `Conn`. Received bytes arrive in the shard's provided
//! buffers (`bufring.rs`) and are parsed where they land; a connection keeps bytes of its own
//! only when a response head is split across chunks.

use super::http1::{Limits, Progress, ProtocolError, ResponseParser};
use super::http2::wire::Wire;
use super::inflight::InFlight;
use super::tls::Tls;

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

/// One connection.
#[derive(Debug)]
pub struct Conn {
    /// The socket while the connection has one (dropping it closes it).
    pub socket: Option<socket2::Socket>,
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
    /// When this connection's slot comes free in the instant-reading pool the shard models
    /// beside the real one (ns since run start): that pool sends each request as soon as it
    /// is due and a slot is free, and a slot carries a request as long as the real one took
    /// from its take to its answer's kernel stamp. A real wait beyond the modelled one is the
    /// loader's — answers it had not read, or it was not running.
    pub free_since_ns: u64,
    /// The request's deadline passed while bytes of its answer sat unread in the socket:
    /// its expiry waits one turn for them to be read (their stamp decides).
    pub expiry_deferred: bool,
    /// A request to send again on a fresh socket once this one is closed.
    pub retry: Option<InFlight>,
    /// TLS state (https targets only; `None` keeps the plain path free of it).
    pub tls: Option<Box<Tls>>,
    /// HTTP/2 state (`--http2` runs only), while the socket is open.
    pub(in crate::engine) h2: Option<Box<H2Link>>,
    /// The socket's segments followed by the probes (HTTP/2 runs with probes), and how many
    /// reads in a row the record disagreed with ([`super::segments`]).
    pub(in crate::engine) followed: Option<super::segments::Followed>,
    pub(in crate::engine) followed_misses: u8,
    /// Largest response head kept while it arrives.
    max_head: usize,
}

impl Conn {
    /// The socket's descriptor for io_uring operations, or -1 without one.
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.socket.as_ref().map_or(-1, std::os::fd::AsRawFd::as_raw_fd)
    }

    /// A closed connection whose responses must fit `limits`.
    pub fn new(limits: Limits) -> Self {
        Conn {
            socket: None,
            generation: 0,
            state: State::Closed,
            ops: 0,
            buf: Vec::new(),
            filled: 0,
            recv_armed: false,
            parser: ResponseParser::with_limits(false, limits),
            inflight: None,
            served: 0,
            connect_started_ns: 0,
            free_since_ns: 0,
            expiry_deferred: false,
            retry: None,
            tls: None,
            h2: None,
            followed: None,
            followed_misses: 0,
            max_head: limits.max_head,
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
        if need > self.max_head {
            return Err(ProtocolError(
                format!("response head larger than the {} byte limit (--max-header)", self.max_head).into(),
            ));
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
            let mut conn = Conn::new(Limits::default());
            let mut last = Chunk::More;
            for piece in wire.chunks(step) {
                last = conn.take_chunk(piece).unwrap();
            }
            assert_eq!(last, Chunk::Done { status: 200, close: false }, "step {step}");
            assert_eq!(conn.filled, 0, "step {step}");
        }
        // Whole response in one chunk: nothing is copied.
        let mut conn = Conn::new(Limits::default());
        assert_eq!(conn.take_chunk(wire).unwrap(), Chunk::Done { status: 200, close: false });
        assert!(conn.buf.is_empty());
    }

    #[test]
    fn bytes_beyond_the_response_mean_close() {
        let mut conn = Conn::new(Limits::default());
        let got = conn.take_chunk(b"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200").unwrap();
        assert_eq!(got, Chunk::Done { status: 204, close: true });
    }
}

#[cfg(test)]
mod limit_tests {
    use super::*;

    #[test]
    fn a_huge_head_fails_as_soon_as_it_passes_the_limit() {
        let mut conn = Conn::new(Limits { max_head: 1024, max_body: 1 << 20 });
        let mut head = b"HTTP/1.1 200 OK\r\nX-Big: ".to_vec();
        head.extend(std::iter::repeat_n(b'a', 600));
        assert_eq!(conn.take_chunk(&head).unwrap(), Chunk::More);
        let err = conn.take_chunk(&[b'a'; 600]).unwrap_err();
        assert_eq!(err.to_string(), "response head larger than the 1024 byte limit (--max-header)");
    }

    #[test]
    fn a_head_over_the_limit_fails_whole_or_cut() {
        let limits = Limits { max_head: 1024, max_body: 1 << 20 };
        let mut wire = b"HTTP/1.1 200 OK\r\nX-Pad: ".to_vec();
        wire.extend(std::iter::repeat_n(b'a', 2000));
        wire.extend_from_slice(b"\r\nContent-Length: 0\r\n\r\n");
        // In one receive (parsed in place) and cut in two (carried over): the same error.
        let whole = Conn::new(limits).take_chunk(&wire).unwrap_err();
        let mut cut = Conn::new(limits);
        assert_eq!(cut.take_chunk(&wire[..600]).unwrap(), Chunk::More);
        let split = cut.take_chunk(&wire[600..]).unwrap_err();
        assert!(whole.0.contains("--max-header"), "{}", whole.0);
        assert!(split.0.contains("--max-header"), "{}", split.0);
        // Under the limit it passes.
        let small = b"HTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(Conn::new(limits).take_chunk(small).unwrap(), Chunk::Done { status: 204, close: false });
    }
}

/// One connection's HTTP/2 side: its frames, and the bytes the kernel is writing (the shard's
/// `h2.rs` drives it).
pub(in crate::engine) struct H2Link {
    pub(in crate::engine) wire: Wire,
    /// Handed to a `send` (the kernel reads it until the send completes).
    pub(in crate::engine) writing: Vec<u8>,
    pub(in crate::engine) written: usize,
    pub(in crate::engine) sending: bool,
}

impl std::fmt::Debug for H2Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Link").field("streams", &self.wire.active()).field("sending", &self.sending).finish()
    }
}
