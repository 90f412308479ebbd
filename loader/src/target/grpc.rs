//! `loader target --grpc`: every POST is answered as a gRPC unary call — an empty message
//! and `grpc-status` OK, or, by `--grpc-status CODE=SHARE,…`, an injected status (trailers
//! only, with a `grpc-message`). The shares hold to within a call: after n calls, a code of
//! share s has been answered ⌊n·s⌋ times, or once fewer when two codes came due on the same
//! call (the first code behind its share takes each call).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::HeaderMap;
use hyper::body::{Body, Frame, SizeHint};
use hyper::header::HeaderValue;

use crate::error::InputError;
use crate::record::grpc::{GRPC_CODES, code_name};

/// The injected statuses and how many of each were given.
#[derive(Debug)]
pub struct GrpcReply {
    /// (code, share) in the order given.
    codes: Vec<(u32, f64)>,
    /// Calls answered so far, and per injected code how many got it.
    given: Mutex<(u64, Vec<u64>)>,
}

impl GrpcReply {
    /// Parse `--grpc-status` (`UNAVAILABLE=0.1,8=0.05`: a name or a number, a share in (0, 1]).
    pub fn parse(text: Option<&str>) -> Result<GrpcReply, InputError> {
        let bad = |e: String| InputError::new("--grpc-status", e);
        let mut codes = Vec::new();
        for part in text.unwrap_or_default().split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, share) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("expected CODE=SHARE like UNAVAILABLE=0.1, got {part:?}")))?;
            let name = name.trim();
            let code = match name.parse::<u32>() {
                Ok(n) if (n as usize) < GRPC_CODES => n,
                _ => (0..GRPC_CODES as u32)
                    .find(|&c| code_name(c as usize).eq_ignore_ascii_case(name))
                    .ok_or_else(|| bad(format!("unknown gRPC status {name:?} (0-16 or a name like UNAVAILABLE)")))?,
            };
            let share: f64 = share.trim().parse().map_err(|_| bad(format!("share {share:?} is not a number")))?;
            if !(share > 0.0 && share <= 1.0) {
                return Err(bad(format!("share of {name} must be in (0, 1], got {share}")));
            }
            codes.push((code, share));
        }
        let total: f64 = codes.iter().map(|(_, s)| s).sum();
        if total > 1.0 + 1e-9 {
            return Err(bad(format!("the shares add up to {total}, more than 1")));
        }
        let n = codes.len();
        Ok(GrpcReply { codes, given: Mutex::new((0, vec![0; n])) })
    }

    /// The status of the next call.
    pub fn next(&self) -> u32 {
        let mut guard = self.given.lock().unwrap_or_else(|p| p.into_inner());
        let (calls, given) = &mut *guard;
        *calls += 1;
        for (i, (code, share)) in self.codes.iter().enumerate() {
            if (given[i] as f64) < (*calls as f64 * share).floor() {
                given[i] += 1;
                return *code;
            }
        }
        0
    }
}

/// An answer body: a gRPC message then trailers, or (trailers-only) nothing.
pub struct GrpcBody {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl GrpcBody {
    /// OK with an empty message (`00 00000000`), then `grpc-status: 0`.
    pub fn ok() -> GrpcBody {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        GrpcBody { data: Some(Bytes::from_static(&[0, 0, 0, 0, 0])), trailers: Some(trailers) }
    }

    /// No body: the status went in the response headers (trailers-only).
    pub fn empty() -> GrpcBody {
        GrpcBody { data: None, trailers: None }
    }
}

impl Body for GrpcBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(data) = self.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injected_shares_hold_to_within_a_call() {
        let one = GrpcReply::parse(Some("UNAVAILABLE=0.25")).unwrap();
        let codes: Vec<u32> = (0..1000).map(|_| one.next()).collect();
        assert_eq!(codes.iter().filter(|&&c| c == 14).count(), 250, "one code: exact");
        let two = GrpcReply::parse(Some("UNAVAILABLE=0.1, 8=0.25")).unwrap();
        let codes: Vec<u32> = (0..1000).map(|_| two.next()).collect();
        let n = |code| codes.iter().filter(|&&c| c == code).count();
        assert!((99..=100).contains(&n(14)) && (249..=250).contains(&n(8)), "{} {}", n(14), n(8));
        assert_eq!(n(0) + n(8) + n(14), 1000);
    }

    #[test]
    fn bad_lists_are_one_line_errors() {
        for (text, want) in [
            ("NOPE=0.1", "unknown gRPC status"),
            ("14", "expected CODE=SHARE"),
            ("14=2", "(0, 1]"),
            ("14=0.6,13=0.6", "add up"),
        ] {
            let e = GrpcReply::parse(Some(text)).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
