//! One request on one stream: send it, await the response head and body (returning flow
//! control credit as the body arrives), and record how it ended.

use std::borrow::Cow;
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use h2::Reason;

use super::{Ctx, Flight};
use crate::engine::own_lag;
use crate::record::ErrorClass;

/// How a stream failed.
enum Fail {
    /// The server says it did not process the request: send it again elsewhere.
    Unprocessed,
    /// A failure of this class, with its detail.
    Class(ErrorClass, Cow<'static, str>),
}

/// A stream in flight: awaits its answer and records it. The shard's loop polls these
/// itself, between looks at the clock, rather than spawning a task per stream: a send due
/// while answers are being read goes first, and no task is made per request.
pub(super) type Exchange = Pin<Box<dyn Future<Output = ()>>>;

/// Send `f` on connection `c` (the loop picked it with a stream free). `woke` and `target`:
/// when the loop woke and what for (the loader's own part of the send lag). `Err(f)`: the
/// connection refused a new stream (it is going away); nothing was sent or counted.
pub(super) fn send(ctx: &Rc<Ctx>, c: usize, mut f: Flight, woke: u64, target: u64) -> Result<Exchange, Flight> {
    let (request, body) = ctx.h2.requests.get(f.request);
    let now = ctx.cfg.clock.now_ns();
    let mut st = ctx.state.borrow_mut();
    let Some(handle) = st.slots[c].send.as_mut() else { return Err(f) };
    let end = body.is_empty();
    let (response, mut stream) = match handle.send_request(request, end) {
        Ok(pair) => pair,
        Err(_) => {
            st.slots[c].send = None;
            st.open -= 1;
            drop(st);
            super::conns::open(ctx, c);
            return Err(f);
        }
    };
    if !end {
        // A body past the server's first window needs its WINDOW_UPDATEs read as they come.
        if body.len() as u64 >= LARGE_BODY {
            ctx.answers.large.set(true);
        }
        // Buffered by h2 and sent as the windows allow; a failure shows on the response.
        let _ = stream.send_data(body, true);
    }
    st.slots[c].active += 1;
    let generation = st.slots[c].generation;
    let rx = Rc::clone(&st.slots[c].rx);
    if !f.counted {
        st.in_flight += 1;
        let in_flight = st.in_flight;
        // A request that waited for a stream was the pool's until the loop woke to one; only
        // what came after is the loader's own.
        let from = if f.waited { woke.max(f.intended_ns) } else { f.intended_ns };
        let own = own_lag(from, now, woke, target);
        st.record.on_send(f.phase, f.intended_ns, now, own, f.waited, in_flight);
        if let Some(row) = ctx.cfg.requests.row_of(f.request) {
            st.record.on_row(row);
        }
        st.sent += 1;
        f.counted = true;
    }
    f.sent_ns = now;
    st.last_send_ns = Some(now);
    let key = st.insert(f);
    drop(st);
    Ok(Box::pin(exchange(Rc::clone(ctx), (c, generation, rx), key, f, response)))
}

/// Await the answer to `f` on connection `c` (of `generation`, its reads stamped in `rx`)
/// until its deadline and record it.
async fn exchange(
    ctx: Rc<Ctx>,
    (c, generation, rx): (usize, u32, Rc<Cell<u64>>),
    key: usize,
    f: Flight,
    response: h2::client::ResponseFuture,
) {
    let deadline = tokio::time::Instant::from_std(ctx.cfg.clock.start() + Duration::from_nanos(f.deadline_ns));
    let read = read(response, ctx.cfg.limits.max_body, ctx.h2.grpc, &ctx.answers);
    let outcome = tokio::time::timeout_at(deadline, read).await;
    let now = ctx.cfg.clock.now_ns();
    let mut st = ctx.state.borrow_mut();
    // The answer ended in the connection's latest read: when that read's newest bytes
    // arrived, however late the loop got to it (inside the request's life; unstamped: now).
    let answered = match rx.get() {
        0 => now,
        stamp => st.realtime.run_time(stamp, f.sent_ns, now),
    };
    if st.remove(key).is_none() {
        return; // the stop accounted for it already
    }
    if st.slots[c].generation == generation {
        st.slots[c].active = st.slots[c].active.saturating_sub(1);
    }
    match outcome {
        Ok(Ok(Answer { status: 200, grpc: Some((code, message)) })) => {
            st.record.on_grpc(f.phase, f.intended_ns, f.sent_ns, answered, code, &message);
            if code == 0 {
                st.ok += 1;
            } else {
                st.errors += 1;
            }
            st.in_flight -= 1;
        }
        Ok(Ok(Answer { status, .. })) => {
            // (A gRPC call answered with an HTTP error status is that HTTP error.)
            st.record.on_response(f.phase, f.intended_ns, f.sent_ns, answered, status);
            if (200..400).contains(&status) {
                st.ok += 1;
            } else {
                st.errors += 1;
            }
            st.in_flight -= 1;
        }
        Ok(Err(Fail::Unprocessed)) => {
            // Still in flight: the loop sends it again first thing, before its deadline.
            st.record.retried_on_stale_connection += 1;
            st.retries.push_back(f);
            drop(st);
            ctx.wake.notify_one();
            return;
        }
        Ok(Err(Fail::Class(class, message))) => {
            st.fail(&f, now, class, message);
            st.in_flight -= 1;
        }
        Err(_) => {
            // Dropping the stream resets it (CANCEL): the server may stop working on it.
            st.fail(
                &f,
                f.deadline_ns,
                ErrorClass::Timeout,
                "no complete response by its deadline (intended time + timeout)".into(),
            );
            st.in_flight -= 1;
        }
    }
    let waiting = st.waiting;
    drop(st);
    if waiting {
        ctx.wake.notify_one();
    }
}

/// How a stream was answered.
struct Answer {
    status: u16,
    /// gRPC: `grpc-status` and `grpc-message` (from the trailers, or from the headers of a
    /// trailers-only answer); a gRPC answer without one is UNKNOWN (2).
    grpc: Option<(u32, String)>,
}

/// A gRPC status and message from `headers`, if they carry one.
pub(super) fn grpc_status(headers: &http::HeaderMap) -> Option<(u32, String)> {
    let code = headers.get("grpc-status")?.to_str().ok()?.trim().parse().unwrap_or(2);
    let message = headers.get("grpc-message").and_then(|v| v.to_str().ok()).unwrap_or_default();
    Some((code, message.to_string()))
}

/// A body this large is not slept through: a loop asleep past an answer's start would let it
/// fill the socket's receive buffer (128 KiB by default) and stall the server, and a request
/// body past the server's first stream window (64 KiB by default) waits for the
/// WINDOW_UPDATEs the loop would not read.
const LARGE_BODY: u64 = 64 << 10;

/// What a shard's answers are like, for whether its loop may sleep through them.
#[derive(Default)]
pub(crate) struct Answers {
    /// Streams whose body is still coming.
    streaming: Cell<u32>,
    /// A body of [`LARGE_BODY`] or more was seen or sent (from then on the loop wakes for
    /// answers).
    large: Cell<bool>,
}

impl Answers {
    /// No body is coming and none was large.
    pub(crate) fn small(&self) -> bool {
        self.streaming.get() == 0 && !self.large.get()
    }
}

/// Counts a stream in [`Answers::streaming`] while its body is still coming.
struct Streaming<'a>(&'a Answers);

impl<'a> Streaming<'a> {
    fn new(answers: &'a Answers) -> Streaming<'a> {
        answers.streaming.set(answers.streaming.get() + 1);
        Streaming(answers)
    }
}

impl Drop for Streaming<'_> {
    fn drop(&mut self) {
        self.0.streaming.set(self.0.streaming.get() - 1);
    }
}

/// The response's status once its body has ended (credit returned as each chunk arrives),
/// noted in `answers` while its body comes and if it is large.
async fn read(
    response: h2::client::ResponseFuture,
    max_body: u64,
    grpc: bool,
    answers: &Answers,
) -> Result<Answer, Fail> {
    let response = response.await.map_err(classify)?;
    let status = response.status().as_u16();
    let early = if grpc { grpc_status(response.headers()) } else { None };
    let mut body = response.into_body();
    let _streaming = Streaming::new(answers);
    let mut total = 0u64;
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(classify)?;
        total += chunk.len() as u64;
        if total >= LARGE_BODY {
            answers.large.set(true);
        }
        let _ = body.flow_control().release_capacity(chunk.len());
        if total > max_body {
            return Err(Fail::Class(ErrorClass::Protocol, "response body larger than --max-body".into()));
        }
    }
    if !grpc {
        return Ok(Answer { status, grpc: None });
    }
    let late = match early {
        Some(_) => None,
        None => body.trailers().await.map_err(classify)?.as_ref().and_then(grpc_status),
    };
    let code = early.or(late).unwrap_or_else(|| (2, "no grpc-status in the answer".into()));
    Ok(Answer { status, grpc: Some(code) })
}

/// An `h2` error → retry or error class (RFC 9113 §8.7: a stream above a GOAWAY's last
/// stream id, or refused with REFUSED_STREAM, was not processed).
fn classify(e: h2::Error) -> Fail {
    let reason = e.reason();
    if e.is_remote() && ((e.is_go_away() && reason == Some(Reason::NO_ERROR)) || reason == Some(Reason::REFUSED_STREAM))
    {
        return Fail::Unprocessed;
    }
    let code = reason.map_or_else(|| "?".to_string(), |r| format!("{r:?}"));
    if e.is_reset() && e.is_remote() {
        return Fail::Class(
            ErrorClass::StreamReset,
            Cow::Owned(format!("the server reset the stream (RST_STREAM {code})")),
        );
    }
    if e.is_go_away() {
        let who = if e.is_remote() { "the server" } else { "the loader" };
        return Fail::Class(
            ErrorClass::ConnectionError,
            Cow::Owned(format!("{who} ended the connection (GOAWAY {code})")),
        );
    }
    if let Some(io) = e.get_io() {
        return match io.kind() {
            std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::UnexpectedEof => {
                Fail::Class(ErrorClass::Reset, Cow::Owned(format!("the connection broke under the stream: {io}")))
            }
            _ => Fail::Class(ErrorClass::IoError, Cow::Owned(format!("socket error: {io}"))),
        };
    }
    Fail::Class(ErrorClass::ConnectionError, Cow::Owned(format!("HTTP/2 error: {e}")))
}

/// What one stream's answer comes to, from the bytes a server sends on a fresh connection
/// (the fuzz target `http2_response`): the same reading and classification as a run, as text.
pub(super) async fn outcome_of(response: h2::client::ResponseFuture, max_body: u64, grpc: bool) -> String {
    match read(response, max_body, grpc, &Answers::default()).await {
        Ok(Answer { status, grpc: None }) => format!("status {status}"),
        Ok(Answer { status, grpc: Some((code, message)) }) => format!("status {status} grpc {code} {message}"),
        Err(Fail::Unprocessed) => "not processed: sent again".into(),
        Err(Fail::Class(class, message)) => format!("{}: {message}", class.as_str()),
    }
}
