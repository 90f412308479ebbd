//! HTTP/2 (`--http2`): the same schedule, record, deadlines and accounting as the HTTP/1.1
//! shards, with requests multiplexed as streams over each shard's connections.
//!
//! Two engines. h2c (`http://`) runs on the io_uring shards (`engine/shard/h2.rs`) with the
//! frames of [`wire`] and the HPACK decoder of [`hpack`]: no runtime between the schedule and
//! the socket, 1.8× cheaper per request at 10,000 req/s (docs/http2.md). HTTP/2 over TLS runs
//! here, on the `h2` crate (hyper's HTTP/2: framing, HPACK, flow control, the stream state
//! machine) on a single-threaded tokio runtime per shard thread — one shard, one thread, as on
//! HTTP/1.1 — until the io_uring TLS path learns ALPN `h2`. What this engine adds around `h2`:
//!
//! - **The schedule.** The shard sleeps to each intended send time on a `timerfd`
//!   ([`timer`]), not on tokio's 1 ms timer wheel; send lag and the loader's own part of it
//!   are recorded as on HTTP/1.1. The streams in flight are polled by the loop itself
//!   while it waits, its timer looked at before each, so a burst of answers does not hold
//!   a due send back; requests due together go on one connection ([`conns::pick`]).
//! - **Sleeping through answers.** With a send coming, a stream free and no connection
//!   carrying two streams, the loop sleeps outside the runtime and reads the answers when
//!   it wakes; each stream ends at the kernel's receive stamp of the read that carried it
//!   ([`stamped`]), so no latency moves (`Shard::wait_quiet`).
//! - **Streams as the pool.** A connection takes at most `min(--max-streams, the server's
//!   SETTINGS_MAX_CONCURRENT_STREAMS)` requests at once; a due request with no stream free
//!   waits at the head of the schedule (its latency counting from the intended time), and
//!   is attributed to the pool exactly as a wait for an HTTP/1.1 connection is.
//! - **GOAWAY and REFUSED_STREAM.** A request the server says it did not process (a stream
//!   above a graceful GOAWAY's last stream id, or reset with REFUSED_STREAM) is sent again on
//!   another connection before its deadline — never counted twice; the connection that went
//!   away is replaced. Other resets are `stream_reset`, connection errors `connection_error`,
//!   both with the HTTP/2 error code in the detail.
//! - **One deadline per request** (intended time + timeout): not sent by then it is
//!   `dropped`, not answered by then `timeout` (its stream reset with CANCEL), recorded at
//!   exactly the deadline. A stopped run records what was in flight as `aborted` and what
//!   was not yet due as `unsent`, so `planned = ok + Σ errors` holds here too.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the shard's state, its loop (dispatch on schedule, drain, accounting) |
//! | `conns.rs` | connections: connect, TLS with ALPN `h2`, handshake, the connection task |
//! | `exchange.rs` | one request's stream: response, body, flow control, error classes |
//! | `fuzz.rs` | the fuzz target's way in: one GET against arbitrary server bytes |
//! | `hpack.rs` | HPACK decoding for the io_uring engine |
//! | `reflect.rs` | gRPC server reflection: a service's descriptors asked of the server |
//! | `requests.rs` | the request table in HTTP/2 form |
//! | `stamped.rs` | the socket, read with the kernel's receive stamps |
//! | `timer.rs` | precise wake-ups inside the runtime |
//! | `wire.rs` | the io_uring engine's frames: one connection's HTTP/2 without I/O |

mod conns;
mod exchange;
mod fuzz;
pub(crate) mod hpack;
pub mod reflect;
mod requests;
mod stamped;
mod timer;
pub(crate) mod wire;

pub use fuzz::answer_from_wire;
pub use wire::outcome_of_wire;

pub use requests::Http2Requests;

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt as _, StreamExt as _};
use tokio::sync::Notify;

use super::pool::PoolWatch;
use super::{EngineError, ShardConfig, ShardResult};
use crate::record::{ErrorClass, ShardRecord};
use crate::schedule::{Due, ShardSchedule};
use timer::Timer;

/// Default of `--max-streams`: requests in flight per connection.
pub const DEFAULT_MAX_STREAMS: u32 = 100;
/// Highest `--max-streams` accepted.
pub const MAX_MAX_STREAMS: u32 = 10_000;
/// Longest wait for in-flight answers after a stop (as on HTTP/1.1).
const MAX_DRAIN_NS: u64 = 1_000_000_000;
/// Longest sleep: the shard looks at the halt flag at least this often.
const MAX_WAIT_NS: u64 = super::pace::MAX_WAIT_NS;
/// Longest sleep through answers while requests are in flight (as on HTTP/1.1).
const MAX_DEFER_NS: u64 = super::pace::MAX_DEFER_NS;

/// What every HTTP/2 shard of a run shares.
#[derive(Debug)]
pub struct Http2 {
    /// The request table in HTTP/2 form.
    pub requests: Http2Requests,
    /// Streams in flight per connection at most (`--max-streams`), lowered to the server's
    /// SETTINGS_MAX_CONCURRENT_STREAMS when that is lower.
    pub max_streams: u32,
    /// TLS (https), with ALPN `h2` only; `None`: cleartext with prior knowledge (h2c).
    pub tls: Option<(Arc<rustls::ClientConfig>, rustls::pki_types::ServerName<'static>)>,
    /// The requests are gRPC calls: `grpc-status` decides each outcome.
    pub grpc: bool,
}

/// A request between the schedule and its end.
#[derive(Debug, Clone, Copy)]
pub(super) struct Flight {
    pub phase: usize,
    /// Entry of the request table.
    pub request: u32,
    pub intended_ns: u64,
    pub sent_ns: u64,
    pub deadline_ns: u64,
    /// Waited for a free stream or connection (pool attribution).
    pub waited: bool,
    /// Sent (and counted) once already: a request the server did not process, to send again.
    pub counted: bool,
}

/// One connection slot.
#[derive(Default)]
pub(super) struct Slot {
    /// The handle to open streams on; `None` while closed or connecting.
    pub send: Option<h2::client::SendRequest<Bytes>>,
    pub connecting: bool,
    /// Streams of ours open on it.
    pub active: u32,
    /// Bumped at every new connection, so a late event of an old one changes nothing.
    pub generation: u32,
    /// The receive stamp of the connection's latest read ([`stamped::Stamped`]).
    pub rx: Rc<Cell<u64>>,
}

/// The shard's mutable state, shared by its tasks (one thread: `Rc<RefCell>`; no borrow is
/// ever held across an await).
pub(super) struct State {
    pub record: ShardRecord,
    pub slots: Vec<Slot>,
    /// Requests on a stream, by key (a free list reuses keys), for the stop's accounting.
    pub flights: Vec<Option<Flight>>,
    free_keys: Vec<usize>,
    /// Requests the server did not process, to send again (before the schedule's next).
    pub retries: VecDeque<Flight>,
    /// A connect failed since the loop last looked: (when, why).
    pub connect_failed: Option<(u64, String)>,
    pub in_flight: u32,
    pub open: u32,
    pub sent: u64,
    pub ok: u64,
    pub errors: u64,
    /// The loop waits for a stream or connection: tasks that free one wake it.
    pub waiting: bool,
    pub last_send_ns: Option<u64>,
    pub pool: PoolWatch,
    /// Turns the kernel's receive stamps into the run's clock (synced at each wake-up).
    pub realtime: crate::engine::rxtime::Realtime,
}

impl State {
    fn insert(&mut self, f: Flight) -> usize {
        match self.free_keys.pop() {
            Some(k) => {
                self.flights[k] = Some(f);
                k
            }
            None => {
                self.flights.push(Some(f));
                self.flights.len() - 1
            }
        }
    }

    pub(super) fn remove(&mut self, key: usize) -> Option<Flight> {
        let f = self.flights.get_mut(key)?.take();
        if f.is_some() {
            self.free_keys.push(key);
        }
        f
    }

    pub(super) fn fail(&mut self, f: &Flight, at_ns: u64, class: ErrorClass, message: Cow<'static, str>) {
        self.record.on_failure(f.phase, f.intended_ns, at_ns, class, message);
        self.errors += 1;
    }
}

/// What the shard's tasks share read-only.
pub(super) struct Ctx {
    pub cfg: ShardConfig,
    pub h2: Arc<Http2>,
    pub state: RefCell<State>,
    /// Wakes the loop: a connection came up or went, a retry is queued, a stream freed
    /// while the loop waited for one.
    pub wake: Notify,
    pub timeout_ns: u64,
    /// What the answers are like, for whether the loop may sleep through them.
    pub(super) answers: exchange::Answers,
}

/// Run an HTTP/2 shard on the current thread until its schedule is done or the run stops.
pub(super) fn run_shard(mut cfg: ShardConfig, h2: Arc<Http2>) -> Result<ShardResult, EngineError> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(EngineError::Runtime)?;
    let rows = cfg.requests.keys.as_ref().map_or(0, |k| k.rows());
    let record = ShardRecord::new(std::mem::take(&mut cfg.windows), cfg.seconds).with_rows(rows);
    let slots = (0..cfg.connections).map(|_| Slot::default()).collect();
    let schedule = std::mem::replace(&mut cfg.schedule, ShardSchedule::new(Vec::new(), 0, 1));
    let ctx = Rc::new(Ctx {
        timeout_ns: cfg.timeout.as_nanos() as u64,
        cfg,
        h2,
        state: RefCell::new(State {
            record,
            slots,
            flights: Vec::new(),
            free_keys: Vec::new(),
            retries: VecDeque::new(),
            connect_failed: None,
            in_flight: 0,
            open: 0,
            sent: 0,
            ok: 0,
            errors: 0,
            waiting: false,
            last_send_ns: None,
            pool: PoolWatch::default(),
            realtime: Default::default(),
        }),
        wake: Notify::new(),
        answers: exchange::Answers::default(),
    });
    // The timerfd's waits end when asked, and a wake-up preempts what runs on the core.
    crate::engine::wakeup::on_time();
    let local = tokio::task::LocalSet::new();
    let timer = {
        let _guard = runtime.enter();
        Timer::new(ctx.cfg.clock).map_err(EngineError::Runtime)?
    };
    let ended = local.block_on(
        &runtime,
        Shard {
            ctx: Rc::clone(&ctx),
            schedule,
            timer,
            woke_at: 0,
            wake_target: 0,
            copy_due: 0,
            checkpoint_due: crate::record::next_copy_ns(0),
            batch_ns: 0,
            wakes: 0,
            streams: FuturesUnordered::new(),
        }
        .run(),
    );
    // The streams ended with the loop; every task (connections) ends with the runtime; then
    // the state is ours alone.
    drop(local);
    drop(runtime);
    let state = match Rc::try_unwrap(ctx) {
        Ok(ctx) => ctx.state.into_inner(),
        Err(_) => unreachable!("every task holding the context ended with the runtime"),
    };
    Ok(ShardResult {
        record: state.record,
        error: None,
        stopped_at_ns: ended.stopped_at_ns,
        last_send_ns: state.last_send_ns,
    })
}

/// How the loop ended.
struct Ended {
    stopped_at_ns: Option<u64>,
}

/// The loop's own part: the schedule and the timer (the tasks never touch them).
struct Shard {
    ctx: Rc<Ctx>,
    schedule: ShardSchedule,
    timer: Timer,
    /// When the loop last woke, and the instant that sleep was for (the send lag's own part).
    woke_at: u64,
    wake_target: u64,
    /// When the live metrics endpoint gets its next copy of the record.
    copy_due: u64,
    /// When the run's checkpoint gets its next copy of the record.
    checkpoint_due: u64,
    /// The batching window now (see `window`), and wake-ups since it was last computed.
    batch_ns: u64,
    wakes: u64,
    /// The streams in flight ([`exchange::Exchange`]), polled in `wait`.
    streams: FuturesUnordered<exchange::Exchange>,
}

impl Shard {
    async fn run(mut self) -> Ended {
        let ctx = Rc::clone(&self.ctx);
        // Open the pool before the start instant (as HTTP/1.1 does), all at once.
        for c in 0..ctx.cfg.connections {
            conns::open(&ctx, c);
        }
        // Receive stamps turn into run time from the first answer on.
        ctx.state.borrow_mut().realtime.sync(ctx.cfg.clock.now_ns());
        let mut stopped_at = None;
        loop {
            let now = ctx.cfg.clock.now_ns();
            if self.stopping() {
                stopped_at = Some(now);
                break;
            }
            self.fail_for_connect(now);
            let head = self.head();
            let Some(due_ns) = head else {
                if ctx.state.borrow().in_flight == 0 {
                    break; // the schedule is done and answered
                }
                self.wait(now + MAX_WAIT_NS).await;
                continue;
            };
            if due_ns > now {
                let wake = (due_ns + self.window()).min(now + MAX_WAIT_NS);
                if self.quiet() {
                    self.wait_quiet(wake).await;
                } else {
                    self.wait(wake).await;
                }
                continue;
            }
            let woke = ctx.cfg.clock.now_ns();
            if !self.dispatch() {
                // Due requests wait for a stream or a connection: until one frees, a
                // connect ends, or the head's deadline.
                let deadline = self.head().map_or(u64::MAX, |d| d + ctx.timeout_ns);
                ctx.state.borrow_mut().waiting = true;
                self.wait(deadline.min(woke + MAX_WAIT_NS)).await;
                ctx.state.borrow_mut().waiting = false;
            }
            self.publish();
        }
        self.drain(stopped_at).await;
        let now = ctx.cfg.clock.now_ns();
        self.account_unfinished(now, stopped_at);
        self.publish();
        Ended { stopped_at_ns: stopped_at }
    }

    fn stopping(&self) -> bool {
        self.ctx.cfg.stop.load(Ordering::Relaxed) || self.ctx.cfg.halt.load(Ordering::Relaxed)
    }

    /// How long past a due send the shard may sleep so that the sends due meanwhile share
    /// its wake-up — the HTTP/1.1 shards' batching (`engine::pace`): from 20,000 req/s per
    /// shard (or `--wake-window`), the p99 of the shard's own measured wake-up lateness
    /// within the window's bounds, so batching moves no send later than the host's jitter
    /// already does; 0 (a wake-up per send) below. Re-read every 256 wake-ups.
    fn window(&mut self) -> u64 {
        let pace = self.ctx.cfg.pace;
        if pace.batch_ns == 0 {
            return 0;
        }
        self.wakes = self.wakes.wrapping_add(1);
        if self.wakes % 256 == 1 {
            let late = self.ctx.state.borrow().record.wake_lateness.value_at_quantile(0.99) * 1000;
            self.batch_ns = pace.window(late);
        }
        self.batch_ns
    }

    /// The intended time of the next request to send: a retry first, else the schedule's.
    fn head(&self) -> Option<u64> {
        let retry = self.ctx.state.borrow().retries.front().map(|f| f.intended_ns);
        retry.or_else(|| self.schedule.peek().map(|d| d.intended_ns))
    }

    /// Sleep until `until` (run time) or until a task wakes the loop, reading the answers
    /// of the streams in flight meanwhile — the clock first, before each one: a send that
    /// falls due while answers are read waits for at most the one being recorded.
    async fn wait(&mut self, until: u64) {
        self.timer.off_rhythm();
        let before = self.ctx.cfg.clock.now_ns();
        loop {
            let timed_out = tokio::select! {
                biased;
                () = self.timer.sleep_until(until) => true,
                () = self.ctx.wake.notified() => false,
                Some(()) = self.streams.next(), if !self.streams.is_empty() => continue,
            };
            if timed_out && until > before {
                let woke = self.ctx.cfg.clock.now_ns();
                self.ctx.state.borrow_mut().record.on_wake(woke.saturating_sub(until), woke);
            }
            break;
        }
        self.woke(until);
    }

    /// Whether the wait for the next send may sleep through answers: no connection has more
    /// than one stream in flight (a read then carries one answer, so its receive stamp is
    /// that answer's: two answers in one read would both get the later one's — CI: a gRPC
    /// p50 of 6.55 ms for a server's 5 ms), a stream is free for the send on an open
    /// connection, nothing is connecting (a connect or handshake needs its answers read as
    /// they come), no request waits to be sent (again), and no answer's body is still coming
    /// or has been large (unread, it would fill the socket's buffer and stall the server).
    fn quiet(&self) -> bool {
        let st = self.ctx.state.borrow();
        let free = |s: &Slot| {
            s.send
                .as_ref()
                .is_some_and(|h| s.active < (h.current_max_send_streams() as u32).min(self.ctx.h2.max_streams))
        };
        self.ctx.answers.small()
            && st.retries.is_empty()
            && !st.waiting
            && st.slots.iter().all(|s| !s.connecting && s.active <= 1)
            && st.slots.iter().any(free)
    }

    /// Sleep until `until` (the next send's wake-up) through the answers that arrive
    /// meanwhile, as the HTTP/1.1 shards do (`engine::pace`): the thread sleeps outside the
    /// runtime, so an answer wakes nothing, and answers are read when the loop next waits,
    /// each stream ending at its read's kernel receive stamp ([`stamped`]), so no latency
    /// moves. A wake-up per request instead of two at rates that send one per wake-up.
    /// With requests in flight the sleep lasts [`MAX_DEFER_NS`] at most.
    async fn wait_quiet(&mut self, until: u64) {
        // First the connections write what was just sent and read what has arrived (tokio
        // polls its driver before a yielded task runs again); then the streams that ended
        // are recorded.
        tokio::task::yield_now().await;
        while let Some(Some(())) = self.streams.next().now_or_never() {}
        let now = self.ctx.cfg.clock.now_ns();
        let until = if self.ctx.state.borrow().in_flight > 0 { until.min(now + MAX_DEFER_NS) } else { until };
        if !self.quiet() {
            // What was read changed that (a body still coming, a connection gone).
            return self.wait(until).await;
        }
        if until > now {
            self.timer.block_until(until);
            let woke = self.ctx.cfg.clock.now_ns();
            self.ctx.state.borrow_mut().record.on_wake(woke.saturating_sub(until), woke);
        }
        self.woke(until);
    }

    /// After a wait for `until`: when the loop woke (the send lag's own part), and the
    /// offset that turns receive stamps into the run's clock.
    fn woke(&mut self, until: u64) {
        self.woke_at = self.ctx.cfg.clock.now_ns();
        self.wake_target = until;
        self.ctx.state.borrow_mut().realtime.sync(self.woke_at);
    }

    /// Send every due request that has a stream — and those due within the pace's send-ahead
    /// window, early (`engine::pace`); `false` when one is left waiting for a stream.
    fn dispatch(&mut self) -> bool {
        let ctx = Rc::clone(&self.ctx);
        // The connection this wake-up's last request went on: the next goes with it.
        let mut last = None;
        let until = ctx.cfg.pace.sends_until(ctx.cfg.clock.now_ns(), self.schedule.peek().map(|d| d.intended_ns));
        loop {
            let now = ctx.cfg.clock.now_ns();
            let retry = ctx.state.borrow_mut().retries.pop_front();
            let (f, from_schedule) = match retry {
                Some(f) => (f, false),
                None => match self.schedule.peek().filter(|d| d.intended_ns <= until.max(now)) {
                    Some(due) => (self.take(due, now), true),
                    None => break,
                },
            };
            if now >= f.deadline_ns {
                let mut st = ctx.state.borrow_mut();
                if f.counted {
                    st.in_flight -= 1;
                    let why = "its deadline passed before it could be sent again (the server had not processed it)";
                    st.fail(&f, f.deadline_ns, ErrorClass::Timeout, why.into());
                } else {
                    let why = "no stream came free before its deadline (intended time + timeout)";
                    st.fail(&f, f.deadline_ns, ErrorClass::Dropped, why.into());
                }
                drop(st);
                if from_schedule {
                    self.schedule.advance();
                }
                continue;
            }
            match conns::pick(&ctx, last) {
                Some(c) => {
                    if from_schedule {
                        self.schedule.advance();
                    }
                    last = Some(c);
                    match exchange::send(&ctx, c, f, self.woke_at, self.wake_target) {
                        Ok(stream) => self.streams.push(stream),
                        // The connection is going away: the request goes first on another.
                        Err(f) => ctx.state.borrow_mut().retries.push_front(f),
                    }
                }
                // Not due yet: it does not go ahead of its time without a stream to go on.
                None if from_schedule && f.intended_ns > now => break,
                None => {
                    // Taken when due and no stream to give: it waits for one (the pool's
                    // time, not the loader's), first in line.
                    let mut st = ctx.state.borrow_mut();
                    st.pool.exhausted(now);
                    if from_schedule {
                        self.schedule.advance();
                    }
                    st.retries.push_front(Flight { waited: true, ..f });
                    drop(st);
                    conns::reopen_one(&ctx);
                    return false;
                }
            }
        }
        ctx.state.borrow_mut().pool.free();
        true
    }

    /// The schedule's due request, taken at `now`.
    fn take(&self, due: Due, now: u64) -> Flight {
        let waited = self.ctx.state.borrow().pool.waited(due.intended_ns);
        Flight {
            phase: due.phase,
            request: self.ctx.cfg.requests.pick(due.phase, due.index),
            intended_ns: due.intended_ns,
            sent_ns: now,
            deadline_ns: due.intended_ns + self.ctx.timeout_ns,
            waited,
            counted: false,
        }
    }

    /// A connect failed and no connection is open: the requests already due fail as
    /// `connect` (each would have had a connection of its own on HTTP/1.1), at the failure.
    fn fail_for_connect(&mut self, now: u64) {
        let ctx = Rc::clone(&self.ctx);
        let Some((at, why)) = ctx.state.borrow_mut().connect_failed.take() else { return };
        if ctx.state.borrow().open > 0 {
            return;
        }
        // Those waiting for a connection first (a request the server did not process and that
        // cannot go again is in flight until now), then the schedule's due ones.
        let waiting: Vec<Flight> = ctx.state.borrow_mut().retries.drain(..).collect();
        for f in waiting {
            let mut st = ctx.state.borrow_mut();
            if f.counted {
                st.in_flight -= 1;
            }
            st.fail(&f, at.max(f.intended_ns), ErrorClass::Connect, Cow::Owned(why.clone()));
        }
        while let Some(due) = self.schedule.peek().filter(|d| d.intended_ns <= now) {
            let f = self.take(due, now);
            ctx.state.borrow_mut().fail(&f, at.max(f.intended_ns), ErrorClass::Connect, Cow::Owned(why.clone()));
            self.schedule.advance();
        }
    }

    /// After a stop or the schedule's end: wait for what is in flight, at most the drain.
    async fn drain(&mut self, stopped_at: Option<u64>) {
        let Some(at) = stopped_at else { return };
        let until = at + self.ctx.timeout_ns.min(MAX_DRAIN_NS);
        loop {
            let now = self.ctx.cfg.clock.now_ns();
            if self.ctx.state.borrow().in_flight == 0 || now >= until {
                return;
            }
            self.ctx.state.borrow_mut().waiting = true;
            self.wait(until.min(now + 10_000_000)).await;
        }
    }

    /// What is still in flight or due is `aborted` at `now`; what was not yet due `unsent`.
    fn account_unfinished(&mut self, now: u64, stopped_at: Option<u64>) {
        let Some(stopped_at) = stopped_at else { return };
        let mut st = self.ctx.state.borrow_mut();
        let mut pending: Vec<Flight> = st.flights.iter_mut().filter_map(Option::take).collect();
        pending.extend(st.retries.drain(..));
        for f in pending {
            st.fail(
                &f,
                now,
                ErrorClass::Aborted,
                "in flight when the run stopped (latency recorded then: a lower bound)".into(),
            );
        }
        // Due and unsent at the stop: the loader's when some connection had a stream free.
        let loader = st.slots.iter().any(|s| {
            s.send
                .as_ref()
                .is_some_and(|h| s.active < (h.current_max_send_streams() as u32).min(self.ctx.h2.max_streams))
        });
        st.errors += super::account_stopped_schedule(&mut st.record, &mut self.schedule, now, stopped_at, loader);
        st.in_flight = 0;
    }

    fn publish(&mut self) {
        let st = self.ctx.state.borrow();
        self.ctx.cfg.live.publish(st.sent, st.ok, st.errors, u64::from(st.in_flight), u64::from(st.open));
        self.ctx.cfg.live.publish_late(st.record.late_loader);
        // Every `LIVE_COPY_PERIOD_NS` at most (a turn that finds the main thread reading tries
        // next turn); the checkpoint once a second.
        let now = self.ctx.cfg.clock.now_ns();
        if let Some(copies) = &self.ctx.cfg.live_copies
            && now >= self.copy_due
            && copies.copy_from(&st.record)
        {
            self.copy_due = now + crate::record::LIVE_COPY_PERIOD_NS;
        }
        if let Some(slot) = &self.ctx.cfg.checkpoint
            && now >= self.checkpoint_due
            && slot.offer(&st.record, now)
        {
            self.checkpoint_due = crate::record::next_copy_ns(now);
        }
    }
}
