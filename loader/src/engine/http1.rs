//! HTTP/1.1 response framing: where one response ends, its status, and whether the
//! connection may be reused. Pure and incremental — bytes go in as they arrive.
//!
//! Heads are parsed with `httparse`; bodies are framed by `Content-Length`, chunked
//! transfer-encoding (`httparse::parse_chunk_size`), or the connection's close. Body bytes
//! are counted and dropped, never copied. This module does no I/O and keeps no buffers:
//! the caller keeps unconsumed bytes and feeds them again with what arrives next.

use std::fmt;

/// Most headers a response may carry.
const MAX_HEADERS: usize = 64;

/// A response that is not valid HTTP/1.x.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

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
}

impl ResponseParser {
    /// A parser for responses to `HEAD` (no body) or any other method.
    pub fn new(head_request: bool) -> Self {
        ResponseParser { head_request, state: State::Head, status: 0, close: false }
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
                    Ok(httparse::Status::Complete((n, 0))) => {
                        at += n;
                        self.state = State::Trailers;
                    }
                    Ok(httparse::Status::Complete((n, size))) => {
                        at += n;
                        self.state = State::ChunkData { remaining: size };
                    }
                    Ok(httparse::Status::Partial) => return Ok((at, Progress::More)),
                    Err(_) => return Err(ProtocolError("invalid chunk size line".into())),
                },
                State::ChunkData { remaining } => {
                    let take = remaining.min(rest.len() as u64);
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
                        return Err(ProtocolError("chunk data not followed by CRLF".into()));
                    }
                    at += 2;
                    self.state = State::ChunkSize;
                }
                State::Trailers => {
                    // Trailer lines until an empty line.
                    let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
                        return Ok((at, Progress::More));
                    };
                    at += eol + 2;
                    if eol == 0 {
                        return Ok((at, self.done()));
                    }
                }
                State::UntilClose => return Ok((buf.len(), Progress::More)),
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
            Err(e) => return Err(ProtocolError(format!("invalid response head: {e}"))),
        };
        let status = resp.code.unwrap_or(0);
        if (100..200).contains(&status) && status != 101 {
            // Interim response (100 Continue, 103 Early Hints): the real one follows.
            return Ok(Some(n));
        }
        let http10 = resp.version == Some(0);
        let mut content_length = None;
        let mut chunked = false;
        let mut close = http10;
        for h in resp.headers.iter() {
            if h.name.eq_ignore_ascii_case("content-length") {
                let v = std::str::from_utf8(h.value).ok().and_then(|s| s.trim().parse::<u64>().ok());
                match (v, content_length) {
                    (Some(v), None) => content_length = Some(v),
                    (Some(v), Some(prev)) if v == prev => {}
                    _ => return Err(ProtocolError("invalid or conflicting Content-Length".into())),
                }
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
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
        self.close = close;
        let bodiless = self.head_request || status == 204 || status == 304 || status == 101;
        self.state = if bodiless {
            State::Body { remaining: 0 }
        } else if chunked {
            State::ChunkSize
        } else if let Some(len) = content_length {
            State::Body { remaining: len }
        } else {
            self.close = true;
            State::UntilClose
        };
        Ok(Some(n))
    }
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
}
