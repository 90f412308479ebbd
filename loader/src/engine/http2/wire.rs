//! HTTP/2 on the io_uring shards, without I/O: the frames of one client connection in and
//! out (RFC 9113). Bytes the socket received go in ([`Wire::feed`]), what the connection
//! must write comes out in [`Wire::out`], and each stream's end comes out as an [`Event`].
//! The shard (`engine::shard::h2`) owns the socket, the clock and the record.
//!
//! What it keeps small on purpose:
//!
//! - **Request header blocks are encoded once**, at start-up ([`encode_block`]), with HPACK
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

use crate::engine::conn::InFlight;
use crate::engine::http1::Limits;
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

    /// Something is under way that the connection must read soon: a frame cut in two, a
    /// header block not complete, an answer whose body is coming, or a request body waiting
    /// for window.
    pub fn busy_reading(&self) -> bool {
        !self.carry.is_empty()
            || self.block.is_some()
            || self.streams.iter().any(|s| s.status != 0 || s.pending.is_some())
    }

    /// The earliest deadline of its streams (`u64::MAX`: none).
    pub fn next_deadline(&self) -> u64 {
        self.streams.iter().map(|s| s.f.deadline_ns).min().unwrap_or(u64::MAX)
    }

    /// Open a stream for `f`: its header block (encoded once, [`encode_block`]) and its body.
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

    /// Take the bytes the socket received; each stream that ended is pushed to `events`.
    /// `Err`: the connection broke the protocol; the streams still open are the caller's to
    /// fail ([`Wire::take_all`]).
    pub fn feed(&mut self, data: &[u8], events: &mut Vec<Event>) -> Result<(), ConnError> {
        if self.carry.is_empty() {
            let used = self.frames(data, events)?;
            self.carry.extend_from_slice(&data[used..]);
            return Ok(());
        }
        let mut carry = std::mem::take(&mut self.carry);
        carry.extend_from_slice(data);
        let used = self.frames(&carry, events)?;
        carry.drain(..used);
        self.carry = carry;
        Ok(())
    }

    /// Handle the whole frames at the front of `data`; how many bytes they took.
    fn frames(&mut self, data: &[u8], events: &mut Vec<Event>) -> Result<usize, ConnError> {
        let mut at = 0;
        while data.len() - at >= 9 {
            let h = &data[at..at + 9];
            let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
            if len > MAX_FRAME {
                return Err(conn_error(
                    FRAME_SIZE_ERROR,
                    &format!("a frame of {len} bytes, above the {MAX_FRAME} the loader allows"),
                ));
            }
            if data.len() - at < 9 + len {
                break;
            }
            let (kind, flags) = (h[3], h[4]);
            let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & MAX_STREAM_ID;
            let payload = &data[at + 9..at + 9 + len];
            at += 9 + len;
            self.on_frame(kind, flags, stream, payload, events)?;
        }
        Ok(at)
    }

    fn on_frame(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        payload: &[u8],
        events: &mut Vec<Event>,
    ) -> Result<(), ConnError> {
        if self.block.is_some() && kind != CONTINUATION {
            return Err(conn_error(PROTOCOL_ERROR, "a header block interrupted by another frame"));
        }
        match kind {
            DATA => self.on_data(flags, stream, payload, events),
            HEADERS => {
                if stream == 0 {
                    return Err(conn_error(PROTOCOL_ERROR, "HEADERS on stream 0"));
                }
                let mut fragment = unpad(flags, payload)?;
                if flags & PRIORITY_FLAG != 0 {
                    fragment = fragment.get(5..).ok_or_else(|| conn_error(FRAME_SIZE_ERROR, "HEADERS too short"))?;
                }
                self.block_bytes.clear();
                self.gather(fragment)?;
                self.block = Some((stream, flags & END_STREAM != 0));
                if flags & END_HEADERS != 0 {
                    self.end_block(events)?;
                }
                Ok(())
            }
            CONTINUATION => {
                match self.block {
                    Some((s, _)) if s == stream => {}
                    _ => return Err(conn_error(PROTOCOL_ERROR, "CONTINUATION without its HEADERS")),
                }
                self.gather(payload)?;
                if flags & END_HEADERS != 0 {
                    self.end_block(events)?;
                }
                Ok(())
            }
            RST_STREAM => {
                let code = word(payload, "RST_STREAM")?;
                if let Some(s) = self.remove(stream) {
                    events.push(if code == REFUSED_STREAM {
                        Event::Unprocessed { f: s.f }
                    } else {
                        Event::Failed {
                            f: s.f,
                            class: ErrorClass::StreamReset,
                            message: Cow::Owned(format!(
                                "the server reset the stream (RST_STREAM {})",
                                code_name(code)
                            )),
                        }
                    });
                }
                Ok(())
            }
            SETTINGS => self.on_settings(flags, stream, payload),
            PUSH_PROMISE => Err(conn_error(PROTOCOL_ERROR, "the server pushed a stream though push is off")),
            PING => {
                if payload.len() != 8 {
                    return Err(conn_error(FRAME_SIZE_ERROR, "a PING that is not 8 bytes"));
                }
                if flags & ACK == 0 {
                    self.frame(PING, ACK, 0, payload);
                }
                Ok(())
            }
            GOAWAY => {
                if payload.len() < 8 {
                    return Err(conn_error(FRAME_SIZE_ERROR, "a GOAWAY shorter than 8 bytes"));
                }
                let last = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & MAX_STREAM_ID;
                let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
                // A second GOAWAY may only lower the last stream id.
                let last = self.goaway.map_or(last, |(before, _)| before.min(last));
                self.goaway = Some((last, code));
                let mut i = 0;
                while i < self.streams.len() {
                    if self.streams[i].id > last {
                        let s = self.streams.swap_remove(i);
                        events.push(if code == NO_ERROR {
                            Event::Unprocessed { f: s.f }
                        } else {
                            Event::Failed {
                                f: s.f,
                                class: ErrorClass::ConnectionError,
                                message: Cow::Owned(format!(
                                    "the server ended the connection (GOAWAY {})",
                                    code_name(code)
                                )),
                            }
                        });
                    } else {
                        i += 1;
                    }
                }
                Ok(())
            }
            WINDOW_UPDATE => {
                let increment = i64::from(word(payload, "WINDOW_UPDATE")? & MAX_STREAM_ID);
                if stream == 0 {
                    if increment == 0 {
                        return Err(conn_error(PROTOCOL_ERROR, "a WINDOW_UPDATE of 0"));
                    }
                    self.conn_send_window += increment;
                    if self.conn_send_window > MAX_WINDOW {
                        return Err(conn_error(FLOW_CONTROL_ERROR, "the connection window passed 2^31-1"));
                    }
                } else if let Some(s) = self.streams.iter_mut().find(|s| s.id == stream) {
                    s.send_window += increment;
                }
                self.send_bodies();
                Ok(())
            }
            // PRIORITY, and frame types this end does not know, are ignored (RFC 9113 §4.1).
            _ => Ok(()),
        }
    }

    fn on_data(&mut self, flags: u8, stream: u32, payload: &[u8], events: &mut Vec<Event>) -> Result<(), ConnError> {
        if stream == 0 {
            return Err(conn_error(PROTOCOL_ERROR, "DATA on stream 0"));
        }
        let body = unpad(flags, payload)?;
        // The whole frame counts against the windows, padding included.
        let counted = payload.len() as u32;
        self.conn_unacked += counted;
        if self.conn_unacked >= CONN_WINDOW / 2 {
            let credit = std::mem::take(&mut self.conn_unacked);
            self.frame(WINDOW_UPDATE, 0, 0, &credit.to_be_bytes());
        }
        let end = flags & END_STREAM != 0;
        let max_body = self.limits.max_body;
        let Some(i) = self.streams.iter().position(|s| s.id == stream) else { return Ok(()) };
        let s = &mut self.streams[i];
        s.body += body.len() as u64;
        if s.body > max_body {
            let s = self.streams.swap_remove(i);
            if !end {
                self.frame(RST_STREAM, 0, s.id, &CANCEL.to_be_bytes());
            }
            events.push(Event::Failed {
                f: s.f,
                class: ErrorClass::Protocol,
                message: Cow::Borrowed("response body larger than --max-body"),
            });
            return Ok(());
        }
        if end {
            let s = self.streams.swap_remove(i);
            events.push(self.ended(s));
            return Ok(());
        }
        s.unacked += counted;
        if s.unacked >= STREAM_WINDOW / 2 {
            let credit = std::mem::take(&mut s.unacked);
            self.frame(WINDOW_UPDATE, 0, stream, &credit.to_be_bytes());
        }
        Ok(())
    }

    fn on_settings(&mut self, flags: u8, stream: u32, payload: &[u8]) -> Result<(), ConnError> {
        if stream != 0 {
            return Err(conn_error(PROTOCOL_ERROR, "SETTINGS on a stream"));
        }
        if flags & ACK != 0 {
            return Ok(());
        }
        if !payload.len().is_multiple_of(6) {
            return Err(conn_error(FRAME_SIZE_ERROR, "a SETTINGS frame not made of 6-byte settings"));
        }
        for setting in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([setting[0], setting[1]]);
            let value = u32::from_be_bytes([setting[2], setting[3], setting[4], setting[5]]);
            match id {
                3 => self.peer_max_streams = value,
                4 => {
                    if i64::from(value) > MAX_WINDOW {
                        return Err(conn_error(FLOW_CONTROL_ERROR, "an initial window above 2^31-1"));
                    }
                    let delta = i64::from(value) - self.peer_window;
                    self.peer_window = i64::from(value);
                    for s in &mut self.streams {
                        s.send_window += delta;
                    }
                }
                5 => {
                    if !(16_384..=16_777_215).contains(&value) {
                        return Err(conn_error(PROTOCOL_ERROR, "a SETTINGS_MAX_FRAME_SIZE out of range"));
                    }
                    self.peer_max_frame = value as usize;
                }
                _ => {}
            }
        }
        self.frame(SETTINGS, ACK, 0, &[]);
        self.send_bodies();
        Ok(())
    }

    /// Add a header block fragment, within `--max-header`.
    fn gather(&mut self, fragment: &[u8]) -> Result<(), ConnError> {
        if self.block_bytes.len() + fragment.len() > self.limits.max_head {
            return Err(ConnError {
                class: ErrorClass::Protocol,
                message: Cow::Owned(format!(
                    "response header block larger than the {} byte limit (--max-header)",
                    self.limits.max_head
                )),
            });
        }
        self.block_bytes.extend_from_slice(fragment);
        Ok(())
    }

    /// A header block is complete: decode it (always — the table must stay in step) and
    /// apply it to its stream, if that is still ours.
    fn end_block(&mut self, events: &mut Vec<Event>) -> Result<(), ConnError> {
        let Some((stream, end_stream)) = self.block.take() else { return Ok(()) };
        let (mut status, mut grpc_status, mut grpc_message) = (None, None, None);
        let grpc = self.grpc;
        let wanted = |name: &[u8]| name == b":status" || (grpc && name.starts_with(b"grpc-"));
        let decoded = self.decoder.decode_some(&self.block_bytes, wanted, |name, value| match name {
            b":status" => status = std::str::from_utf8(value).ok().and_then(|v| v.parse::<u16>().ok()),
            b"grpc-status" if grpc => {
                grpc_status = Some(std::str::from_utf8(value).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(2))
            }
            b"grpc-message" if grpc => grpc_message = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {}
        });
        if let Err(e) = decoded {
            return Err(conn_error(COMPRESSION_ERROR, &format!("a header block HPACK cannot decode: {}", e.0)));
        }
        let Some(i) = self.streams.iter().position(|s| s.id == stream) else { return Ok(()) };
        let s = &mut self.streams[i];
        if s.status == 0 {
            match status {
                // An interim answer (100 Continue, 103 Early Hints): the real one follows.
                Some(100..=199) if !end_stream => return Ok(()),
                Some(code) if (100..=999).contains(&code) => s.status = code,
                _ => {
                    let s = self.streams.swap_remove(i);
                    self.frame(RST_STREAM, 0, s.id, &PROTOCOL_ERROR.to_be_bytes());
                    events.push(Event::Failed {
                        f: s.f,
                        class: ErrorClass::Protocol,
                        message: Cow::Borrowed("a response head without a valid :status"),
                    });
                    return Ok(());
                }
            }
        }
        if let Some(code) = grpc_status
            && s.grpc.is_none()
        {
            s.grpc = Some((code, grpc_message.unwrap_or_default()));
        }
        if end_stream {
            let s = self.streams.swap_remove(i);
            events.push(self.ended(s));
        }
        Ok(())
    }

    /// The stream's answer ended (END_STREAM).
    fn ended(&self, s: Stream) -> Event {
        let grpc = self.grpc.then(|| s.grpc.unwrap_or_else(|| (2, "no grpc-status in the answer".into())));
        Event::Answered { f: s.f, status: s.status, grpc }
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

/// A payload without its padding (PADDED).
fn unpad(flags: u8, payload: &[u8]) -> Result<&[u8], ConnError> {
    if flags & PADDED == 0 {
        return Ok(payload);
    }
    let pad =
        usize::from(*payload.first().ok_or_else(|| conn_error(FRAME_SIZE_ERROR, "a padded frame without its length"))?);
    payload
        .get(1..payload.len().saturating_sub(pad).max(1))
        .filter(|_| pad < payload.len())
        .ok_or_else(|| conn_error(PROTOCOL_ERROR, "padding longer than the frame"))
}

/// The 4-byte payload of a RST_STREAM or WINDOW_UPDATE.
fn word(payload: &[u8], what: &str) -> Result<u32, ConnError> {
    match payload {
        &[a, b, c, d] => Ok(u32::from_be_bytes([a, b, c, d])),
        _ => Err(conn_error(FRAME_SIZE_ERROR, &format!("a {what} that is not 4 bytes"))),
    }
}

/// A request's header block (HPACK, RFC 7541), encoded once: pseudo-headers first, from the
/// static table where it has the field, then literals without indexing, so no block changes
/// the server's dynamic table and every stream can send the same bytes.
pub fn encode_block<'a>(
    method: &str,
    scheme: &str,
    authority: &str,
    path: &str,
    headers: impl Iterator<Item = (&'a str, &'a [u8])>,
) -> Vec<u8> {
    let mut block = Vec::with_capacity(64);
    match method {
        "GET" => block.push(0x82),
        "POST" => block.push(0x83),
        _ => literal_indexed_name(&mut block, 2, method.as_bytes()),
    }
    match scheme {
        "https" => block.push(0x87),
        _ => block.push(0x86),
    }
    match path {
        "/" => block.push(0x84),
        _ => literal_indexed_name(&mut block, 4, path.as_bytes()),
    }
    literal_indexed_name(&mut block, 1, authority.as_bytes());
    for (name, value) in headers {
        block.push(0x00);
        string(&mut block, name.as_bytes());
        string(&mut block, value);
    }
    block
}

/// A literal header field without indexing whose name is static table entry `index`.
fn literal_indexed_name(block: &mut Vec<u8>, index: usize, value: &[u8]) {
    integer(block, 0x00, 4, index);
    string(block, value);
}

/// A string literal, not Huffman-coded.
fn string(block: &mut Vec<u8>, s: &[u8]) {
    integer(block, 0x00, 7, s.len());
    block.extend_from_slice(s);
}

/// An HPACK integer with an `n`-bit prefix after the bits `first`.
fn integer(block: &mut Vec<u8>, first: u8, n: u32, mut value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        block.push(first | value as u8);
        return;
    }
    block.push(first | max as u8);
    value -= max;
    while value >= 128 {
        block.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    block.push(value as u8);
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    fn flight(deadline_ns: u64) -> InFlight {
        InFlight {
            phase: 0,
            request: 0,
            intended_ns: 0,
            sent_ns: 0,
            deadline_ns,
            written: 0,
            retried: false,
            waited: false,
        }
    }

    pub(in crate::engine::http2) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend([kind, flags]);
        f.extend(stream.to_be_bytes());
        f.extend(payload);
        f
    }

    /// A literal header without indexing, new name (HPACK §6.2.2).
    pub(in crate::engine::http2) fn literal(name: &[u8], value: &[u8]) -> Vec<u8> {
        [&[0, name.len() as u8][..], name, &[value.len() as u8], value].concat()
    }

    fn wire(grpc: bool) -> Wire {
        let mut w = Wire::new(Limits::default(), grpc);
        w.out.clear();
        w
    }

    fn feed(w: &mut Wire, bytes: &[u8]) -> Vec<Event> {
        let mut events = Vec::new();
        w.feed(bytes, &mut events).unwrap();
        events
    }

    fn answered(e: &Event) -> (u16, Option<(u32, String)>) {
        match e {
            Event::Answered { status, grpc, .. } => (*status, grpc.clone()),
            other => panic!("not answered: {other:?}"),
        }
    }

    #[test]
    fn the_preface_settings_and_window_open_the_connection() {
        let w = Wire::new(Limits::default(), false);
        assert!(w.out.starts_with(PREFACE));
        let rest = &w.out[PREFACE.len()..];
        assert_eq!(&rest[..9], &frame(SETTINGS, 0, 0, &[0; 12])[..9]);
        assert_eq!(&rest[9..21], &[0, 2, 0, 0, 0, 0, 0, 4, 0, 0x40, 0, 0]);
        assert_eq!(&rest[21..], &frame(WINDOW_UPDATE, 0, 0, &(CONN_WINDOW - 65_535).to_be_bytes())[..]);
    }

    #[test]
    fn the_request_block_decodes_to_the_request() {
        let block = encode_block(
            "PUT",
            "http",
            "127.0.0.1:8080",
            "/items?id=7",
            [("content-type", &b"application/json"[..]), ("x-long", &[b'a'; 300][..])].into_iter(),
        );
        let mut got: Vec<(String, String)> = Vec::new();
        super::super::hpack::Decoder::default()
            .decode(&block, |n, v| {
                got.push((String::from_utf8(n.to_vec()).unwrap(), String::from_utf8(v.to_vec()).unwrap()))
            })
            .unwrap();
        assert_eq!(got[0], (":method".into(), "PUT".into()));
        assert_eq!(got[1], (":scheme".into(), "http".into()));
        assert_eq!(got[2], (":path".into(), "/items?id=7".into()));
        assert_eq!(got[3], (":authority".into(), "127.0.0.1:8080".into()));
        assert_eq!(got[4], ("content-type".into(), "application/json".into()));
        assert_eq!(got[5].1.len(), 300);
        let get = encode_block("GET", "https", "a", "/", std::iter::empty());
        assert_eq!(&get[..3], &[0x82, 0x87, 0x84]);
    }

    #[test]
    fn streams_answer_in_any_order_and_frames_may_be_cut_anywhere() {
        let mut w = wire(false);
        w.open(flight(10), &[0x82], &Bytes::new());
        w.open(flight(10), &[0x82], &Bytes::new());
        assert_eq!(w.active(), 2);
        assert_eq!(&w.out[..9], &frame(HEADERS, END_STREAM | END_HEADERS, 1, &[0x82])[..9]);
        // Stream 3 answered 404 (static :status 404 is index 13), then stream 1 200 with a body.
        let wire_bytes = [
            frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 50]),
            frame(HEADERS, END_STREAM | END_HEADERS, 3, &[0x8d]),
            frame(HEADERS, END_HEADERS, 1, &[0x88]),
            frame(DATA, 0, 1, b"hello"),
            frame(DATA, END_STREAM, 1, b" world"),
        ]
        .concat();
        for step in [1, 2, 7, 9, 10, wire_bytes.len()] {
            let mut w2 = wire(false);
            w2.open(flight(10), &[0x82], &Bytes::new());
            w2.open(flight(10), &[0x82], &Bytes::new());
            let mut events = Vec::new();
            for piece in wire_bytes.chunks(step) {
                w2.feed(piece, &mut events).unwrap();
            }
            assert_eq!(events.len(), 2, "step {step}");
            assert_eq!(answered(&events[0]).0, 404);
            assert_eq!(answered(&events[1]).0, 200);
            assert_eq!(w2.active(), 0);
            assert!(!w2.busy_reading());
            assert_eq!(w2.free(100), 50, "the server's SETTINGS_MAX_CONCURRENT_STREAMS");
            // The SETTINGS was acknowledged.
            assert!(w2.out.windows(9).any(|f| f == &frame(SETTINGS, ACK, 0, &[])[..]));
        }
        let events = feed(&mut w, &wire_bytes);
        assert_eq!(events.len(), 2);
    }

    #[test]
    fn grpc_status_comes_from_trailers_or_a_trailers_only_head() {
        let mut w = wire(true);
        for _ in 0..3 {
            w.open(flight(10), &[0x83], &Bytes::from_static(&[0, 0, 0, 0, 0]));
        }
        let trailers_only: Vec<u8> =
            [vec![0x88], literal(b"grpc-status", b"14"), literal(b"grpc-message", b"down")].concat();
        let events = feed(
            &mut w,
            &[
                frame(HEADERS, END_STREAM | END_HEADERS, 1, &trailers_only),
                frame(HEADERS, END_HEADERS, 3, &[0x88]),
                frame(DATA, 0, 3, &[0; 5]),
                frame(HEADERS, END_STREAM | END_HEADERS, 3, &literal(b"grpc-status", b"0")),
                frame(HEADERS, END_HEADERS, 5, &[0x88]),
                frame(DATA, END_STREAM, 5, &[0; 5]),
            ]
            .concat(),
        );
        assert_eq!(answered(&events[0]), (200, Some((14, "down".into()))));
        assert_eq!(answered(&events[1]), (200, Some((0, String::new()))));
        assert_eq!(answered(&events[2]), (200, Some((2, "no grpc-status in the answer".into()))));
    }

    #[test]
    fn refusals_and_a_graceful_goaway_are_unprocessed_other_resets_are_named() {
        let mut w = wire(false);
        for _ in 0..4 {
            w.open(flight(10), &[0x82], &Bytes::new());
        }
        let goaway = [3u32.to_be_bytes(), NO_ERROR.to_be_bytes()].concat();
        let events = feed(
            &mut w,
            &[
                frame(RST_STREAM, 0, 1, &REFUSED_STREAM.to_be_bytes()),
                frame(RST_STREAM, 0, 3, &2u32.to_be_bytes()),
                frame(GOAWAY, 0, 0, &goaway),
            ]
            .concat(),
        );
        assert!(matches!(events[0], Event::Unprocessed { .. }));
        match &events[1] {
            Event::Failed { class, message, .. } => {
                assert_eq!(*class, ErrorClass::StreamReset);
                assert_eq!(message, "the server reset the stream (RST_STREAM INTERNAL_ERROR)");
            }
            other => panic!("{other:?}"),
        }
        // Streams 5 and 7 are above the GOAWAY's last stream (3): not processed.
        assert_eq!(events.len(), 4);
        assert!(events[2..].iter().all(|e| matches!(e, Event::Unprocessed { .. })));
        assert!(w.retiring() && w.free(100) == 0);
        // A GOAWAY with an error fails what it cuts off, named.
        let mut w = wire(false);
        w.open(flight(10), &[0x82], &Bytes::new());
        let events = feed(&mut w, &frame(GOAWAY, 0, 0, &[0, 0, 0, 0, 0, 0, 0, 11]));
        match &events[0] {
            Event::Failed { class, message, .. } => {
                assert_eq!(*class, ErrorClass::ConnectionError);
                assert!(message.contains("ENHANCE_YOUR_CALM"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bodies_wait_for_window_and_credit_is_returned() {
        let mut w = wire(false);
        // The server allows 10 bytes a stream.
        feed(&mut w, &frame(SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 10]));
        w.out.clear();
        w.open(flight(10), &[0x83], &Bytes::from(vec![7u8; 25]));
        // HEADERS, then one DATA of 10 bytes.
        assert_eq!(w.out.len(), 9 + 1 + 9 + 10);
        assert!(w.busy_reading(), "a body waits for window");
        w.out.clear();
        feed(&mut w, &frame(WINDOW_UPDATE, 0, 1, &20u32.to_be_bytes()));
        // 15 bytes left, all allowed now: END_STREAM on the last.
        assert_eq!(w.out.len(), 9 + 15);
        assert_eq!(w.out[4], END_STREAM);
        // A large answer returns stream credit once half the window is used.
        w.out.clear();
        feed(&mut w, &frame(HEADERS, END_HEADERS, 1, &[0x88]));
        let chunk = vec![0u8; MAX_FRAME];
        for _ in 0..(STREAM_WINDOW as usize / 2 / MAX_FRAME) {
            feed(&mut w, &frame(DATA, 0, 1, &chunk));
        }
        assert!(w.out.windows(9).any(|f| f == &frame(WINDOW_UPDATE, 0, 1, &[0; 4])[..9]));
    }

    #[test]
    fn deadlines_cancel_their_streams() {
        let mut w = wire(false);
        w.open(flight(5), &[0x82], &Bytes::new());
        w.open(flight(9), &[0x82], &Bytes::new());
        assert_eq!(w.next_deadline(), 5);
        w.out.clear();
        let mut expired = Vec::new();
        w.expire(6, &mut expired);
        assert_eq!(expired.len(), 1);
        assert_eq!(w.out, frame(RST_STREAM, 0, 1, &CANCEL.to_be_bytes()));
        // Its late answer still goes through HPACK and changes nothing.
        let events = feed(&mut w, &frame(HEADERS, END_STREAM | END_HEADERS, 1, &[0x88]));
        assert!(events.is_empty());
        assert_eq!(w.active(), 1);
    }

    #[test]
    fn hostile_frames_are_connection_errors_not_panics() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (frame(PUSH_PROMISE, END_HEADERS, 1, &[0, 0, 0, 2]), "push"),
            (frame(PING, 0, 0, &[1, 2, 3]), "PING"),
            (frame(SETTINGS, 0, 0, &[0, 5, 0, 0, 0, 1]), "MAX_FRAME_SIZE"),
            (frame(HEADERS, END_HEADERS, 1, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff]), "HPACK"),
            (frame(HEADERS, PADDED | END_HEADERS, 1, &[9, 0x88]), "padding"),
            (frame(DATA, 0, 0, b"x"), "stream 0"),
            ([frame(HEADERS, 0, 1, &[0x88]), frame(DATA, 0, 1, b"x")].concat(), "interrupted"),
            (vec![0x01, 0, 0, 0, 0, 0, 0, 0, 1], "frame of 65536 bytes"),
            (frame(WINDOW_UPDATE, 0, 0, &[0x7f, 0xff, 0xff, 0xff]), "2^31-1"),
        ];
        for (bytes, needle) in cases {
            let mut w = wire(false);
            w.open(flight(10), &[0x82], &Bytes::new());
            let mut events = Vec::new();
            let err = w.feed(&bytes, &mut events).unwrap_err();
            assert!(err.message.contains(needle), "{needle}: {}", err.message);
        }
        // A head past --max-header.
        let mut w = Wire::new(Limits { max_head: 8, max_body: 1 }, false);
        w.open(flight(10), &[0x82], &Bytes::new());
        let err = w.feed(&frame(HEADERS, END_HEADERS, 1, &literal(b"x", b"0123456789")), &mut Vec::new()).unwrap_err();
        assert!(err.message.contains("--max-header"), "{}", err.message);
        // A body past --max-body fails its stream only.
        let mut w = Wire::new(Limits { max_head: 1024, max_body: 4 }, false);
        w.open(flight(10), &[0x82], &Bytes::new());
        let events =
            feed(&mut w, &[frame(HEADERS, END_HEADERS, 1, &[0x88]), frame(DATA, 0, 1, b"0123456789")].concat());
        assert!(matches!(&events[0], Event::Failed { class: ErrorClass::Protocol, .. }));
    }

    #[test]
    fn pings_are_answered_and_interim_heads_skipped() {
        let mut w = wire(false);
        w.open(flight(10), &[0x82], &Bytes::new());
        w.out.clear();
        let events = feed(
            &mut w,
            &[
                frame(PING, 0, 0, &[1; 8]),
                frame(HEADERS, END_HEADERS, 1, &[0x08, 3, b'1', b'0', b'3']),
                frame(HEADERS, END_STREAM | END_HEADERS, 1, &[0x89]),
            ]
            .concat(),
        );
        assert_eq!(w.out, frame(PING, ACK, 0, &[1; 8]));
        assert_eq!(answered(&events[0]).0, 204);
    }
}
