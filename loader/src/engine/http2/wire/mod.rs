//! HTTP/2 on the io_uring shards, without I/O: the frames of one client connection in and
//! out (RFC 9113). Bytes the socket received go in ([`Wire::feed`]), what the connection
//! must write comes out in [`Wire::out`], and each stream's end comes out as an [`Event`].
//! The shard (`engine::shard::h2`) owns the socket, the clock and the record.
//!
//! What it keeps small on purpose:
//!
//! - **Request header blocks are encoded once**, at start-up ([`super::hpack::encode_block`]), with HPACK
//!   literals that never enter the server's dynamic table: a stream's HEADERS is its 9-byte
//!   frame header and those bytes, whatever the connection sent before.
//! - **Response header blocks are decoded** by [`super::hpack`] (the dynamic table must stay in
//!   step with the server's for every block, even a cancelled stream's), and only `:status`,
//!   `grpc-status` and `grpc-message` are kept.
//! - **Flow control**: the loader offers a 4 MiB stream window and a 64 MiB connection window
//!   and returns credit once half of one is used; request bodies go out as the server's
//!   windows allow (what does not fit waits for its WINDOW_UPDATE or SETTINGS).
//! - **Streams the server did not process** — above a graceful GOAWAY's last stream id, or
//!   reset with REFUSED_STREAM (RFC 9113 §8.7) — come out as [`Event::Unprocessed`], to be
//!   sent again elsewhere; other resets and GOAWAYs are named errors.

use std::borrow::Cow;

use bytes::Bytes;

use crate::engine::http1::Limits;
use crate::engine::inflight::InFlight;
use crate::record::ErrorClass;

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;
/// Error codes (RFC 9113 §7) the loader sends or acts on.
const NO_ERROR: u32 = 0x0;
const PROTOCOL_ERROR: u32 = 0x1;
const FLOW_CONTROL_ERROR: u32 = 0x3;
const FRAME_SIZE_ERROR: u32 = 0x6;
const REFUSED_STREAM: u32 = 0x7;
const CANCEL: u32 = 0x8;
const COMPRESSION_ERROR: u32 = 0x9;
/// The stream window the loader offers (SETTINGS_INITIAL_WINDOW_SIZE), as the `h2` path does.
const STREAM_WINDOW: u32 = 4 << 20;
/// The connection window the loader offers.
const CONN_WINDOW: u32 = 64 << 20;
/// The largest frame the loader accepts: the default SETTINGS_MAX_FRAME_SIZE, never raised.
const MAX_FRAME: usize = 16_384;
/// The highest stream id (31 bits).
const MAX_STREAM_ID: u32 = 0x7fff_ffff;
/// A window may not pass this (RFC 9113 §6.9.1).
const MAX_WINDOW: i64 = 0x7fff_ffff;

/// The name of an HTTP/2 error code, as the reports print it.
pub fn code_name(code: u32) -> Cow<'static, str> {
    const NAMES: [&str; 14] = [
        "NO_ERROR",
        "PROTOCOL_ERROR",
        "INTERNAL_ERROR",
        "FLOW_CONTROL_ERROR",
        "SETTINGS_TIMEOUT",
        "STREAM_CLOSED",
        "FRAME_SIZE_ERROR",
        "REFUSED_STREAM",
        "CANCEL",
        "COMPRESSION_ERROR",
        "CONNECT_ERROR",
        "ENHANCE_YOUR_CALM",
        "INADEQUATE_SECURITY",
        "HTTP_1_1_REQUIRED",
    ];
    match NAMES.get(code as usize) {
        Some(name) => Cow::Borrowed(name),
        None => Cow::Owned(format!("0x{code:x}")),
    }
}

/// How a stream ended.
#[derive(Debug)]
pub enum Event {
    /// Answered: the HTTP status and, on a gRPC run, `grpc-status` and `grpc-message` (from
    /// the trailers, or the headers of a trailers-only answer; none at all is UNKNOWN, 2).
    Answered { f: InFlight, status: u16, grpc: Option<(u32, String)> },
    /// Failed with this class and detail.
    Failed { f: InFlight, class: ErrorClass, message: Cow<'static, str> },
    /// The server says it did not process it: it may be sent again.
    Unprocessed { f: InFlight },
}

/// The connection broke the protocol (or the server said it did): every stream on it fails
/// with this, and the connection closes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnError {
    pub class: ErrorClass,
    pub message: Cow<'static, str>,
}

fn conn_error(code: u32, what: &str) -> ConnError {
    ConnError {
        class: ErrorClass::ConnectionError,
        message: Cow::Owned(format!("HTTP/2 connection error: {what} ({})", code_name(code))),
    }
}

/// One stream of ours.
#[derive(Debug)]
struct Stream {
    id: u32,
    f: InFlight,
    /// The response's status once its head came (0: not yet).
    status: u16,
    /// gRPC status and message, once seen.
    grpc: Option<(u32, String)>,
    /// Response body bytes so far.
    body: u64,
    /// Body bytes received and not yet returned as stream credit.
    unacked: u32,
    /// What the server lets this stream send.
    send_window: i64,
    /// Request body still to send (and from where), when the windows did not allow all of it.
    pending: Option<(Bytes, usize)>,
}

/// One HTTP/2 client connection's state.
pub struct Wire {
    decoder: super::hpack::Decoder,
    streams: Vec<Stream>,
    next_id: u32,
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS (unlimited until it says).
    peer_max_streams: u32,
    /// The server's SETTINGS_INITIAL_WINDOW_SIZE and SETTINGS_MAX_FRAME_SIZE.
    peer_window: i64,
    peer_max_frame: usize,
    /// What the server lets the connection send.
    conn_send_window: i64,
    /// A GOAWAY came: its last stream id and error code. No new stream goes on it.
    goaway: Option<(u32, u32)>,
    /// Bytes to write, in order.
    pub out: Vec<u8>,
    /// The start of a frame cut off at the end of the last chunk.
    carry: Vec<u8>,
    /// A header block being gathered over CONTINUATION frames: its stream, END_STREAM, bytes.
    block: Option<(u32, bool)>,
    block_bytes: Vec<u8>,
    /// Connection-level body bytes received and not yet returned as credit.
    conn_unacked: u32,
    limits: Limits,
    grpc: bool,
    /// Bytes fed so far (every byte the connection received).
    fed: u64,
    /// For each event the last [`Wire::feed`] pushed, in order: the byte count received on the
    /// connection at the end of the frame that caused it (which segment carried it).
    pub ends: Vec<u64>,
}

impl Wire {
    /// A fresh connection: the preface, SETTINGS (no push, the loader's stream window) and
    /// the connection window are queued in [`Wire::out`].
    pub fn new(limits: Limits, grpc: bool) -> Wire {
        let mut w = Wire {
            decoder: super::hpack::Decoder::default(),
            streams: Vec::new(),
            next_id: 1,
            peer_max_streams: u32::MAX,
            peer_window: 65_535,
            peer_max_frame: MAX_FRAME,
            conn_send_window: 65_535,
            goaway: None,
            out: Vec::with_capacity(512),
            carry: Vec::new(),
            block: None,
            block_bytes: Vec::new(),
            conn_unacked: 0,
            limits,
            grpc,
            fed: 0,
            ends: Vec::new(),
        };
        w.out.extend_from_slice(PREFACE);
        let mut settings = Vec::with_capacity(12);
        settings.extend(2u16.to_be_bytes()); // SETTINGS_ENABLE_PUSH
        settings.extend(0u32.to_be_bytes());
        settings.extend(4u16.to_be_bytes()); // SETTINGS_INITIAL_WINDOW_SIZE
        settings.extend(STREAM_WINDOW.to_be_bytes());
        w.frame(SETTINGS, 0, 0, &settings);
        w.frame(WINDOW_UPDATE, 0, 0, &(CONN_WINDOW - 65_535).to_be_bytes());
        w
    }

    /// Streams of ours open on the connection.
    pub fn active(&self) -> u32 {
        self.streams.len() as u32
    }

    /// How many more streams it takes now, with the loader's limit `max_streams`: none once
    /// it is going away or out of stream ids.
    pub fn free(&self, max_streams: u32) -> u32 {
        if self.retiring() {
            return 0;
        }
        max_streams.min(self.peer_max_streams).saturating_sub(self.active())
    }

    /// No new stream goes on it: the server sent GOAWAY, or the stream ids ran out.
    pub fn retiring(&self) -> bool {
        self.goaway.is_some() || self.next_id > MAX_STREAM_ID
    }

    /// The GOAWAY's error code, if one came.
    pub fn goaway_code(&self) -> Option<u32> {
        self.goaway.map(|(_, code)| code)
    }

    /// Something is under way that the connection must read as it comes: a frame cut in
    /// two, a header block not complete, an answer whose head came and whose body has not,
    /// or a request body waiting for window. (Measured: sleeping through a small answer's
    /// body saved no wake-up at 10k req/s on nginx — HEADERS and DATA arrive in one read.)
    pub fn busy_reading(&self) -> bool {
        !self.carry.is_empty()
            || self.block.is_some()
            || self.streams.iter().any(|s| s.status != 0 || s.pending.is_some())
    }

    /// The earliest deadline of its streams (`u64::MAX`: none).
    pub fn next_deadline(&self) -> u64 {
        self.streams.iter().map(|s| s.f.deadline_ns).min().unwrap_or(u64::MAX)
    }

    /// Open a stream for `f`: its header block (encoded once, [`super::hpack::encode_block`]) and its body.
    /// The caller checked [`Wire::free`].
    pub fn open(&mut self, f: InFlight, block: &[u8], body: &Bytes) {
        let id = self.next_id;
        self.next_id += 2;
        let end_stream = if body.is_empty() { END_STREAM } else { 0 };
        let mut chunks = block.chunks(self.peer_max_frame.max(1));
        let first = chunks.next().unwrap_or(&[]);
        let rest = block.len() > first.len();
        self.frame(HEADERS, end_stream | if rest { 0 } else { END_HEADERS }, id, first);
        let mut chunks = chunks.peekable();
        while let Some(chunk) = chunks.next() {
            let last = chunks.peek().is_none();
            self.frame(CONTINUATION, if last { END_HEADERS } else { 0 }, id, chunk);
        }
        let pending = (!body.is_empty()).then(|| (body.clone(), 0));
        self.streams.push(Stream {
            id,
            f,
            status: 0,
            grpc: None,
            body: 0,
            unacked: 0,
            send_window: self.peer_window,
            pending,
        });
        self.send_bodies();
    }

    /// Reset every stream whose deadline is at or before `now` (CANCEL), returning them.
    pub fn expire(&mut self, now: u64, expired: &mut Vec<InFlight>) {
        let mut i = 0;
        while i < self.streams.len() {
            if self.streams[i].f.deadline_ns <= now {
                let s = self.streams.swap_remove(i);
                self.frame(RST_STREAM, 0, s.id, &CANCEL.to_be_bytes());
                expired.push(s.f);
            } else {
                i += 1;
            }
        }
    }

    /// Every stream still open, taken (the connection is closing or the run stopped).
    pub fn take_all(&mut self) -> impl Iterator<Item = InFlight> + '_ {
        self.streams.drain(..).map(|s| s.f)
    }

    fn remove(&mut self, id: u32) -> Option<Stream> {
        let i = self.streams.iter().position(|s| s.id == id)?;
        Some(self.streams.swap_remove(i))
    }

    /// Send what the windows allow of the request bodies still pending.
    fn send_bodies(&mut self) {
        let mut frames: Vec<(u32, Bytes, bool)> = Vec::new();
        for s in &mut self.streams {
            let Some((body, from)) = s.pending.as_mut() else { continue };
            while *from < body.len() {
                let n = (body.len() - *from)
                    .min(self.peer_max_frame)
                    .min(s.send_window.max(0) as usize)
                    .min(self.conn_send_window.max(0) as usize);
                if n == 0 {
                    break;
                }
                let end = *from + n == body.len();
                frames.push((s.id, body.slice(*from..*from + n), end));
                *from += n;
                s.send_window -= n as i64;
                self.conn_send_window -= n as i64;
            }
            if *from == body.len() {
                s.pending = None;
            }
        }
        for (id, chunk, end) in frames {
            self.frame(DATA, if end { END_STREAM } else { 0 }, id, &chunk);
        }
    }

    fn frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        let len = payload.len() as u32;
        self.out.extend_from_slice(&len.to_be_bytes()[1..]);
        self.out.push(kind);
        self.out.push(flags);
        self.out.extend_from_slice(&stream.to_be_bytes());
        self.out.extend_from_slice(payload);
    }
}

/// What a server's bytes `wire` do to three streams (GETs, a body of 5 bytes on the third)
/// on a fresh connection of the io_uring engine, fed in pieces of `piece` bytes (at least 1)
/// — for the fuzz target `http2_response`, as text: each stream's end in order, then the
/// connection error if one came. Never panics; the invariants a run relies on are checked.
pub fn outcome_of_wire(wire: &[u8], max_body: u64, grpc: bool, piece: usize) -> String {
    let mut w = Wire::new(Limits { max_head: 16 << 10, max_body }, grpc);
    let f = |request| InFlight {
        phase: 0,
        request,
        intended_ns: 0,
        sent_ns: 0,
        deadline_ns: u64::MAX,
        written: 0,
        retried: false,
        waited: false,
        free_ns: 0,
        taken_ns: 0,
    };
    w.open(f(0), &[0x82, 0x86, 0x84], &Bytes::new());
    w.open(f(1), &[0x82, 0x86, 0x84], &Bytes::new());
    w.open(f(2), &[0x83, 0x86, 0x84], &Bytes::from_static(&[0, 0, 0, 0, 0]));
    let mut events = Vec::new();
    let mut out = String::new();
    for chunk in wire.chunks(piece.max(1)) {
        if let Err(e) = w.feed(chunk, &mut events) {
            out = format!("{}: {}", e.class.as_str(), e.message);
            break;
        }
    }
    let ended = events.len();
    let mut ends: Vec<String> = events
        .into_iter()
        .map(|e| match e {
            Event::Answered { f, status, grpc } => format!("{} {status} {grpc:?}", f.request),
            Event::Failed { f, class, message } => format!("{} {}: {message}", f.request, class.as_str()),
            Event::Unprocessed { f } => format!("{} not processed", f.request),
        })
        .collect();
    // Every stream ended once at most, and the ones left are still counted.
    assert_eq!(ended + w.active() as usize, 3, "streams lost or ended twice: {ends:?}");
    ends.push(out);
    ends.join("; ")
}

mod read;

#[cfg(test)]
pub(super) mod tests;
