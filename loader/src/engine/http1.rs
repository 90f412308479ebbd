//! HTTP/1.1 response framing: where one response ends, its status, and whether the
//! connection may be reused. Pure and incremental — bytes go in as they arrive.
//!
//! Heads are parsed with `httparse`; bodies are framed by `Content-Length`, chunked
//! transfer-encoding (`httparse::parse_chunk_size`), or the connection's close. Body bytes
//! are counted and dropped, never copied. This module does no I/O and keeps no buffers:
//! the caller keeps unconsumed bytes and feeds them again with what arrives next.
//!
//! A response may be hostile: every failure names what was wrong (the error detail of the
//! run shows it), and bodies are bounded by [`Limits::max_body`] (the head is bounded by the
//! caller, which holds its bytes).

use std::borrow::Cow;
use std::fmt;

/// Most header fields a response may carry.
pub const MAX_HEADERS: usize = 64;

/// Size limits on a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest status line plus header section, bytes.
    pub max_head: usize,
    /// Largest body, bytes.
    pub max_body: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_head: 64 * 1024, max_body: 256 * 1024 * 1024 }
    }
}

/// A response that is not valid HTTP/1.x, or breaks a limit; the text says which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub Cow<'static, str>);

impl ProtocolError {
    fn new(message: impl Into<Cow<'static, str>>) -> Self {
        ProtocolError(message.into())
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProtocolError {}

/// Progress after feeding bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// The response is not complete yet; feed more bytes.
    More,
    /// The response is complete.
    Done {
        /// HTTP status code.
        status: u16,
        /// The connection must not be reused.
        close: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Head,
    Body { remaining: u64 },
    ChunkSize,
    ChunkData { remaining: u64 },
    ChunkDataEnd,
    Trailers,
    UntilClose,
}

/// Frames one response at a time; [`ResponseParser::reset`] before the next request.
#[derive(Debug, Clone)]
pub struct ResponseParser {
    head_request: bool,
    state: State,
    status: u16,
    close: bool,
    /// Body bytes of the current response so far (chunked and close-delimited bodies).
    body: u64,
    max_body: u64,
    /// Largest head (status line and header section) accepted, however it arrives.
    max_head: usize,
}

impl ResponseParser {
    /// A parser for responses to `HEAD` (no body) or any other method, with the default
    /// body limit.
    pub fn new(head_request: bool) -> Self {
        Self::with_max_body(head_request, Limits::default().max_body)
    }

    /// A parser whose responses may carry at most `max_body` bytes of body.
    pub fn with_max_body(head_request: bool, max_body: u64) -> Self {
        Self::with_limits(head_request, Limits { max_body, ..Limits::default() })
    }

    /// A parser whose responses must fit `limits`: a head over `max_head` fails whether it
    /// arrives whole or cut, a body over `max_body` fails.
    pub fn with_limits(head_request: bool, limits: Limits) -> Self {
        ResponseParser {
            head_request,
            state: State::Head,
            status: 0,
            close: false,
            body: 0,
            max_body: limits.max_body,
            max_head: limits.max_head,
        }
    }

    /// The next response answers a HEAD request (no body) or not.
    pub fn expect_head(&mut self, head_request: bool) {
        self.head_request = head_request;
    }

    /// Ready for the next response on the same connection.
    pub fn reset(&mut self) {
        self.state = State::Head;
        self.status = 0;
        self.close = false;
        self.body = 0;
    }

    /// `n` more body bytes of a chunked or close-delimited body.
    fn count_body(&mut self, n: u64) -> Result<(), ProtocolError> {
        self.body += n;
        if self.body > self.max_body {
            return Err(ProtocolError::new(format!(
                "response body larger than the {} byte limit (--max-body)",
                self.max_body
            )));
        }
        Ok(())
    }

    /// No byte of the current response has been consumed yet.
    pub fn at_start(&self) -> bool {
        self.state == State::Head
    }

    fn done(&self) -> Progress {
        Progress::Done { status: self.status, close: self.close }
    }

    /// Consume what can be consumed of `buf`; returns the bytes consumed and the progress.
    /// Unconsumed bytes (a partial head or chunk-size line) must be fed again, followed by
    /// the bytes that arrive next. Bytes after a complete response are left unconsumed.
    pub fn feed(&mut self, buf: &[u8]) -> Result<(usize, Progress), ProtocolError> {
        let mut at = 0;
        loop {
            let rest = &buf[at..];
            match self.state {
                State::Head => match self.parse_head(rest)? {
                    Some(n) => at += n,
                    None => return Ok((at, Progress::More)),
                },
                State::Body { remaining } => {
                    let take = remaining.min(rest.len() as u64);
                    at += take as usize;
                    if take == remaining {
                        return Ok((at, self.done()));
                    }
                    self.state = State::Body { remaining: remaining - take };
                    return Ok((at, Progress::More));
                }
                State::ChunkSize => match httparse::parse_chunk_size(rest) {
                    // `n` counts the line's CRLF.
                    Ok(httparse::Status::Complete((n, _))) if n - 2 > MAX_CHUNK_LINE => {
                        return Err(ProtocolError::new("chunk size line longer than 1024 bytes"));
                    }
                    Ok(httparse::Status::Complete((n, 0))) => {
                        at += n;
                        self.state = State::Trailers;
                    }
                    Ok(httparse::Status::Complete((n, size))) => {
                        at += n;
                        self.state = State::ChunkData { remaining: size };
                    }
                    Ok(httparse::Status::Partial) => {
                        if unfinished_line_len(rest) > MAX_CHUNK_LINE {
                            return Err(ProtocolError::new("chunk size line longer than 1024 bytes"));
                        }
                        return Ok((at, Progress::More));
                    }
                    Err(_) => return Err(ProtocolError::new("invalid chunk size line")),
                },
                State::ChunkData { remaining } => {
                    let take = remaining.min(rest.len() as u64);
                    self.count_body(take)?;
                    at += take as usize;
                    if take < remaining {
                        self.state = State::ChunkData { remaining: remaining - take };
                        return Ok((at, Progress::More));
                    }
                    self.state = State::ChunkDataEnd;
                }
                State::ChunkDataEnd => {
                    if rest.len() < 2 {
                        return Ok((at, Progress::More));
                    }
                    if &rest[..2] != b"\r\n" {
                        return Err(ProtocolError::new("chunk data not followed by CRLF"));
                    }
                    at += 2;
                    self.state = State::ChunkSize;
                }
                State::Trailers => {
                    // Trailer lines until an empty line.
                    let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
                        if unfinished_line_len(rest) > MAX_CHUNK_LINE {
                            return Err(ProtocolError::new("trailer line longer than 1024 bytes"));
                        }
                        return Ok((at, Progress::More));
                    };
                    if eol > MAX_CHUNK_LINE {
                        return Err(ProtocolError::new("trailer line longer than 1024 bytes"));
                    }
                    at += eol + 2;
                    if eol == 0 {
                        return Ok((at, self.done()));
                    }
                }
                State::UntilClose => {
                    self.count_body(rest.len() as u64)?;
                    return Ok((buf.len(), Progress::More));
                }
            }
        }
    }

    /// The peer closed the connection. A body framed by the close ends here; anything
    /// else cut short is an error for the caller to classify.
    pub fn on_eof(&mut self) -> Option<Progress> {
        (self.state == State::UntilClose).then(|| self.done())
    }

    /// Parse a head from `buf`; `Some(consumed)` once complete.
    fn parse_head(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut headers);
        let n = match resp.parse(buf) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => {
                return Err(ProtocolError::new(format!(
                    "{} header fields, more than {MAX_HEADERS}",
                    header_lines(buf)
                )));
            }
            Err(e) => return Err(ProtocolError::new(format!("invalid response head: {e}"))),
        };
        if n > self.max_head {
            return Err(ProtocolError::new(format!(
                "response head larger than the {} byte limit (--max-header)",
                self.max_head
            )));
        }
        let status = resp.code.unwrap_or(0);
        if (100..200).contains(&status) && status != 101 {
            // Interim response (100 Continue, 103 Early Hints): the real one follows.
            return Ok(Some(n));
        }
        let http10 = resp.version == Some(0);
        let mut content_length = None;
        let mut chunked = false;
        let mut transfer_encoding = false;
        let mut close = http10;
        for h in resp.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                let text = String::from_utf8_lossy(h.value);
                let Some(v) = text.trim().parse::<u64>().ok() else {
                    return Err(ProtocolError::new(format!("invalid Content-Length: {:.40}", text.trim())));
                };
                match content_length {
                    None => content_length = Some(v),
                    Some(prev) if v == prev => {}
                    Some(prev) => {
                        return Err(ProtocolError::new(format!("conflicting Content-Length headers ({prev} and {v})")));
                    }
                }
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                transfer_encoding = true;
                chunked = h.value.rsplit(|&b| b == b',').next().is_some_and(|last| {
                    std::str::from_utf8(last).is_ok_and(|s| s.trim().eq_ignore_ascii_case("chunked"))
                });
            } else if h.name.eq_ignore_ascii_case("connection") {
                let v = std::str::from_utf8(h.value).unwrap_or("");
                for token in v.split(',').map(str::trim) {
                    if token.eq_ignore_ascii_case("close") {
                        close = true;
                    } else if token.eq_ignore_ascii_case("keep-alive") && http10 {
                        close = false;
                    }
                }
            }
        }
        self.status = status;
        // RFC 9112 §6.3: Transfer-Encoding overrides Content-Length, and a message with both
        // may be smuggling — its connection is not reused. A 101 the loader never asked for
        // leaves a connection that no longer speaks HTTP/1.1.
        self.close = close || (transfer_encoding && content_length.is_some()) || status == 101;
        let bodiless = self.head_request || status == 204 || status == 304 || status == 101;
        self.state = if bodiless {
            State::Body { remaining: 0 }
        } else if chunked {
            State::ChunkSize
        } else if let Some(len) = content_length {
            if len > self.max_body {
                return Err(ProtocolError::new(format!(
                    "Content-Length {len} is larger than the {} byte body limit (--max-body)",
                    self.max_body
                )));
            }
            State::Body { remaining: len }
        } else {
            self.close = true;
            State::UntilClose
        };
        Ok(Some(n))
    }
}

/// Longest chunk-size or trailer line accepted (bytes before its CRLF), wherever the bytes
/// were cut: a complete line is held to it as well as one still arriving.
const MAX_CHUNK_LINE: usize = 1024;

/// Bytes so far of a line whose CRLF has not arrived; a final `\r` may be the CRLF's start.
fn unfinished_line_len(rest: &[u8]) -> usize {
    rest.len() - usize::from(rest.ends_with(b"\r"))
}

/// Header lines in what arrived of a head (status line excluded), for the error message.
fn header_lines(buf: &[u8]) -> usize {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").map_or(buf.len(), |p| p + 2);
    buf[..end].windows(2).filter(|w| w == b"\r\n").count().saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `wire` in pieces of `step` bytes the way the engine does (keeping the
    /// unconsumed tail), returning the final progress and the bytes left over.
    fn feed_in_steps(p: &mut ResponseParser, wire: &[u8], step: usize) -> (Progress, Vec<u8>) {
        let mut pending = Vec::new();
        let mut last = Progress::More;
        for piece in wire.chunks(step) {
            pending.extend_from_slice(piece);
            let (n, prog) = p.feed(&pending).unwrap();
            pending.drain(..n);
            last = prog;
            if matches!(prog, Progress::Done { .. }) {
                break;
            }
        }
        (last, pending)
    }

    #[test]
    fn content_length_in_any_split() {
        let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world";
        for step in 1..wire.len() {
            let mut p = ResponseParser::new(false);
            let (prog, rest) = feed_in_steps(&mut p, wire, step);
            assert_eq!(prog, Progress::Done { status: 200, close: false }, "step {step}");
            assert!(rest.is_empty());
        }
    }

    #[test]
    fn chunked_with_trailers_in_any_split() {
        let wire = b"HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\nX-T: 1\r\n\r\n";
        for step in 1..wire.len() {
            let mut p = ResponseParser::new(false);
            let (prog, rest) = feed_in_steps(&mut p, wire, step);
            assert_eq!(prog, Progress::Done { status: 503, close: false }, "step {step}");
            assert!(rest.is_empty());
        }
    }

    #[test]
    fn close_and_http10_rules() {
        let mut p = ResponseParser::new(false);
        let (_, prog) = p.feed(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").unwrap();
        assert_eq!(prog, Progress::Done { status: 200, close: true });
        let mut p = ResponseParser::new(false);
        let (_, prog) = p.feed(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").unwrap();
        assert_eq!(prog, Progress::Done { status: 200, close: true });
        let mut p = ResponseParser::new(false);
        let (_, prog) = p.feed(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n").unwrap();
        assert_eq!(prog, Progress::Done { status: 200, close: false });
    }

    #[test]
    fn body_until_close() {
        let mut p = ResponseParser::new(false);
        let (n, prog) = p.feed(b"HTTP/1.1 200 OK\r\n\r\npartial body").unwrap();
        assert_eq!((n, prog), (31, Progress::More));
        assert_eq!(p.on_eof(), Some(Progress::Done { status: 200, close: true }));
    }

    #[test]
    fn head_204_304_and_interim_responses_have_no_body() {
        let mut p = ResponseParser::new(true);
        let (_, prog) = p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n").unwrap();
        assert_eq!(prog, Progress::Done { status: 200, close: false });
        for code in [204, 304] {
            let mut p = ResponseParser::new(false);
            let wire = format!("HTTP/1.1 {code} X\r\nContent-Length: 5\r\n\r\n");
            assert_eq!(p.feed(wire.as_bytes()).unwrap().1, Progress::Done { status: code, close: false });
        }
        let mut p = ResponseParser::new(false);
        let wire = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
        assert_eq!(p.feed(wire).unwrap(), (wire.len(), Progress::Done { status: 201, close: false }));
    }

    #[test]
    fn extra_bytes_are_left_for_the_caller() {
        let mut p = ResponseParser::new(false);
        let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxGARBAGE";
        let (n, prog) = p.feed(wire).unwrap();
        assert_eq!(prog, Progress::Done { status: 200, close: false });
        assert_eq!(&wire[n..], b"GARBAGE");
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        assert!(ResponseParser::new(false).feed(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        let mut p = ResponseParser::new(false);
        assert!(p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n").is_err());
        let mut p = ResponseParser::new(false);
        assert!(p.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").is_err());
    }

    #[test]
    fn hostile_heads_fail_with_a_message_that_names_the_problem() {
        let mut wire = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..5000 {
            wire.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
        }
        wire.extend_from_slice(b"\r\n");
        let err = ResponseParser::new(false).feed(&wire).unwrap_err();
        assert_eq!(err.to_string(), "5000 header fields, more than 64");
        let err = ResponseParser::new(false).feed(b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n").unwrap_err();
        assert_eq!(err.to_string(), "invalid Content-Length: -5");
        let err = ResponseParser::new(false)
            .feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
            .unwrap_err();
        assert_eq!(err.to_string(), "conflicting Content-Length headers (1 and 2)");
        let err = ResponseParser::new(false).feed(b"HTTP/1.1 2OO OK\r\n\r\n").unwrap_err();
        assert!(err.to_string().starts_with("invalid response head"), "{err}");
    }

    #[test]
    fn bodies_are_bounded_however_they_are_framed() {
        let mut p = ResponseParser::with_max_body(false, 10);
        let err = p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n").unwrap_err();
        assert!(err.to_string().contains("body limit"), "{err}");
        let mut p = ResponseParser::with_max_body(false, 10);
        let wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n8\r\n12345678\r\n";
        assert!(p.feed(wire).is_err());
        let mut p = ResponseParser::with_max_body(false, 10);
        let (_, prog) = p.feed(b"HTTP/1.1 200 OK\r\n\r\n0123456789").unwrap();
        assert_eq!(prog, Progress::More);
        assert!(p.feed(b"x").is_err());
        // Exactly at the limit is fine, and the count starts again for the next response.
        let mut p = ResponseParser::with_max_body(false, 10);
        let wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n0\r\n\r\n";
        assert_eq!(p.feed(wire).unwrap().1, Progress::Done { status: 200, close: false });
        p.reset();
        assert_eq!(p.feed(wire).unwrap().1, Progress::Done { status: 200, close: false });
    }

    /// Found by fuzzing (fuzz/corpus/http1_response/long-chunk-line-split-*): a line over
    /// the limit passed when it arrived whole and failed when it was cut; at the limit it
    /// failed when the cut fell between its `\r` and `\n`.
    #[test]
    fn chunk_and_trailer_lines_are_limited_the_same_however_they_are_cut() {
        let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        let wire = |ext: usize, trailer: usize| {
            let mut wire = head.to_vec();
            wire.extend_from_slice(b"1;");
            wire.extend(std::iter::repeat_n(b'e', ext - 2));
            wire.extend_from_slice(b"\r\nx\r\n0\r\nX-T: ");
            wire.extend(std::iter::repeat_n(b't', trailer - 5));
            wire.extend_from_slice(b"\r\n\r\n");
            wire
        };
        // Every split: pieces of `step` bytes, unconsumed bytes fed again with the next.
        let outcome = |wire: &[u8], step: usize| {
            let mut p = ResponseParser::new(false);
            let mut pending = Vec::new();
            for piece in wire.chunks(step) {
                pending.extend_from_slice(piece);
                let (n, prog) = p.feed(&pending).map_err(|e| e.to_string())?;
                pending.drain(..n);
                if prog != Progress::More {
                    return Ok(prog);
                }
            }
            Ok(Progress::More)
        };
        let done = Ok(Progress::Done { status: 200, close: false });
        for (ext, trailer, expected) in [
            (MAX_CHUNK_LINE, MAX_CHUNK_LINE, done),
            (MAX_CHUNK_LINE + 1, 10, Err("chunk size line longer than 1024 bytes".to_string())),
            (10, MAX_CHUNK_LINE + 1, Err("trailer line longer than 1024 bytes".to_string())),
        ] {
            let wire = wire(ext, trailer);
            for step in [1, 2, 3, 7, 500, 1025, 1026, wire.len()] {
                assert_eq!(outcome(&wire, step), expected, "lines of {ext} and {trailer} bytes in pieces of {step}");
            }
        }
    }

    #[test]
    fn an_endless_chunk_line_fails_instead_of_waiting_for_ever() {
        let mut p = ResponseParser::new(false);
        let mut wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        wire.extend(std::iter::repeat_n(b'1', 2000));
        assert!(p.feed(&wire).is_err());
    }
}
