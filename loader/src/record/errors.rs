//! Why requests failed: the error classes every request that did not end in 2xx/3xx falls
//! into, and per class the first distinct messages with their counts.

use std::borrow::Cow;

/// Why a request did not end in a 2xx/3xx response.
///
/// Every planned request ends in exactly one place: `ok` or one of these classes, so that
/// `planned = ok + Σ errors` holds for every phase of every run, stopped ones included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum ErrorClass {
    /// HTTP 429 Too Many Requests.
    Http429,
    /// Other HTTP 4xx.
    Http4xx,
    /// HTTP 5xx.
    Http5xx,
    /// A final status outside 200–599 (a 1xx other than an interim response, 600 and up).
    HttpOther,
    /// No complete response by the request's deadline (intended send time + timeout).
    Timeout,
    /// The connection could not be opened (refused, unreachable, no local port, TLS refused).
    Connect,
    /// The peer reset or closed the connection mid-request.
    Reset,
    /// The response could not be parsed as HTTP/1.1, or broke a size limit.
    Protocol,
    /// Any other socket error, named in the error detail (its errno).
    IoError,
    /// HTTP/2: the server reset the request's stream (RST_STREAM, its error code in the
    /// detail) — other than REFUSED_STREAM, which means "not processed" and is sent again.
    StreamReset,
    /// HTTP/2: the connection ended in a connection error under the request (a GOAWAY with an
    /// error code, or a protocol error), its error code in the detail.
    ConnectionError,
    /// gRPC: the call ended with a `grpc-status` other than OK (per code in the phase's
    /// `grpc` counts; the client's own deadline is `timeout`).
    Grpc,
    /// Never sent: no connection became free before the request's deadline.
    Dropped,
    /// In flight, or due and waiting for a connection, when the run stopped (interrupt,
    /// emergency stop) and stopped waiting: its latency is recorded at that instant, a lower
    /// bound of the truth.
    Aborted,
    /// Planned but not yet due when the run stopped: never attempted, no latency.
    Unsent,
}

impl ErrorClass {
    /// Number of classes.
    pub const COUNT: usize = 15;

    /// Every class, in report order.
    pub const ALL: [ErrorClass; ErrorClass::COUNT] = [
        ErrorClass::Http429,
        ErrorClass::Http4xx,
        ErrorClass::Http5xx,
        ErrorClass::HttpOther,
        ErrorClass::Timeout,
        ErrorClass::Connect,
        ErrorClass::Reset,
        ErrorClass::Protocol,
        ErrorClass::IoError,
        ErrorClass::StreamReset,
        ErrorClass::ConnectionError,
        ErrorClass::Grpc,
        ErrorClass::Dropped,
        ErrorClass::Aborted,
        ErrorClass::Unsent,
    ];

    /// Stable name used in `summary.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Http429 => "http_429",
            ErrorClass::Http4xx => "http_4xx",
            ErrorClass::Http5xx => "http_5xx",
            ErrorClass::HttpOther => "http_other",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Connect => "connect",
            ErrorClass::Reset => "reset",
            ErrorClass::Protocol => "protocol",
            ErrorClass::IoError => "io_error",
            ErrorClass::StreamReset => "stream_reset",
            ErrorClass::ConnectionError => "connection_error",
            ErrorClass::Grpc => "grpc",
            ErrorClass::Dropped => "dropped",
            ErrorClass::Aborted => "aborted",
            ErrorClass::Unsent => "unsent",
        }
    }

    /// Class of an HTTP status, `None` for 2xx/3xx (ok). By range: 429 apart, 4xx, 5xx, and
    /// everything else (1xx final answers, 600 and up) as `http_other`.
    pub fn of_status(status: u16) -> Option<ErrorClass> {
        match status {
            200..=399 => None,
            429 => Some(ErrorClass::Http429),
            400..=499 => Some(ErrorClass::Http4xx),
            500..=599 => Some(ErrorClass::Http5xx),
            _ => Some(ErrorClass::HttpOther),
        }
    }

    /// Classes that are failures of an attempted request (the error budget's numerator):
    /// everything but `dropped` (judged apart), `aborted` and `unsent` (the run stopped).
    pub fn is_failure(self) -> bool {
        !matches!(self, ErrorClass::Dropped | ErrorClass::Aborted | ErrorClass::Unsent)
    }
}

/// Distinct messages kept per error class; later distinct messages are counted together,
/// by their group (the text before the first `": "`, a gRPC status's name) while there are
/// at most this many groups, then under [`OTHER_MESSAGES`].
pub const DETAIL_MESSAGES: usize = 8;
/// The message under which distinct messages beyond [`DETAIL_MESSAGES`] are counted; a
/// group's own overflow reads `"NOT_FOUND: (other messages)"`.
pub const OTHER_MESSAGES: &str = "(other messages)";

/// Why requests failed: per class, the first distinct messages and how often each occurred
/// (like oha's error distribution). Written on failures only, never on the success path.
#[derive(Debug, Clone, Default)]
pub struct ErrorDetail {
    /// Per class (indexed like [`ErrorClass::ALL`]): `(message, count)` in order of first
    /// occurrence — at most [`DETAIL_MESSAGES`] messages, then at most as many groups'
    /// overflows, then [`OTHER_MESSAGES`].
    pub by_class: [Vec<(Cow<'static, str>, u64)>; ErrorClass::COUNT],
}

impl ErrorDetail {
    /// Count `n` failures of `class` with `message`.
    pub fn note(&mut self, class: ErrorClass, message: Cow<'static, str>, n: u64) {
        let list = &mut self.by_class[class as usize];
        if let Some(entry) = list.iter_mut().find(|(m, _)| *m == message) {
            entry.1 += n;
            return;
        }
        if list.len() < DETAIL_MESSAGES {
            list.push((message, n));
            return;
        }
        // Full: counted with the messages of its group, so a status's share stays visible.
        let overflow = match message.split_once(": ") {
            Some((group, _)) if !group.is_empty() => format!("{group}: {OTHER_MESSAGES}"),
            _ => OTHER_MESSAGES.to_string(),
        };
        if let Some(entry) = list.iter_mut().find(|(m, _)| *m == overflow) {
            entry.1 += n;
            return;
        }
        let groups = list.iter().filter(|(m, _)| m.ends_with(OTHER_MESSAGES) && m != OTHER_MESSAGES).count();
        let overflow = if overflow == OTHER_MESSAGES || groups < DETAIL_MESSAGES {
            Cow::Owned(overflow)
        } else {
            Cow::Borrowed(OTHER_MESSAGES)
        };
        match list.iter_mut().find(|(m, _)| *m == overflow) {
            Some(entry) => entry.1 += n,
            None => list.push((overflow, n)),
        }
    }

    pub(super) fn merge(&mut self, other: &ErrorDetail) {
        for (class, list) in ErrorClass::ALL.iter().zip(&other.by_class) {
            for (message, n) in list {
                self.note(*class, message.clone(), *n);
            }
        }
    }
}

/// The error-detail message of a failing status: the status itself (`status 503`), so the
/// detail is a status-code distribution.
pub(super) fn status_message(status: u16) -> Cow<'static, str> {
    match status {
        429 => Cow::Borrowed("status 429"),
        500 => Cow::Borrowed("status 500"),
        502 => Cow::Borrowed("status 502"),
        503 => Cow::Borrowed("status 503"),
        504 => Cow::Borrowed("status 504"),
        404 => Cow::Borrowed("status 404"),
        _ => Cow::Owned(format!("status {status}")),
    }
}

/// A server's own words with what varies per request taken out, so that one cause is one
/// line of the error detail: every run of digits becomes `#`, and a word of 8 or more hex
/// digits and dashes with a digit in it (an id, a UUID, a hash) becomes `#` whole.
/// `"ledger says not_found for acct-00006"` → `"ledger says not_found for acct-#"`.
pub fn normalise(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let id = word.len() >= 8
            && word.bytes().any(|b| b.is_ascii_digit())
            && word.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        if id {
            out.push('#');
            continue;
        }
        let mut in_digits = false;
        for c in word.chars() {
            if c.is_ascii_digit() {
                if !in_digits {
                    out.push('#');
                }
                in_digits = true;
            } else {
                out.push(c);
                in_digits = false;
            }
        }
    }
    out
}
