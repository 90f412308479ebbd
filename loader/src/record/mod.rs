//! Recording: what each shard measured, kept per phase and per second, merged once.
//!
//! Each shard owns a [`ShardRecord`] and writes to it from its own loop — no locks, no
//! channels, no allocation per request. After the run the records are [`ShardRecord::merge`]d
//! (HdrHistogram addition is exact, so merged percentiles are true percentiles).
//!
//! Per phase (attributed by the request's *intended* time, so a step is judged on the
//! requests that started in it): corrected latency (completion − intended), uncorrected
//! service time (completion − actual send), send lag (actual send − intended) and counts.
//! Per second of the run: sent, ok, errors by class, in-flight high-water mark, and the
//! corrected latencies that completed in it ([`SecondLatency`], about 1 KB).
//! Memory is fixed by the plan: histograms have fixed bounds and the series one bucket a
//! second (a one-hour run: about 3.5 MB per shard).
//!
//! This module does not decide anything (that is analysis) and does not print (report).

use std::borrow::Cow;

use hdrhistogram::Histogram;

use crate::schedule::Window;

mod checkpoint;
mod errors;
pub mod grpc;
mod live_copy;
mod seconds;

pub use checkpoint::{CheckpointSlot, next_copy_ns};
use errors::status_message;
pub use errors::{DETAIL_MESSAGES, ErrorClass, ErrorDetail, OTHER_MESSAGES};
pub use live_copy::{LIVE_COPY_PERIOD_NS, LiveCopies, PhaseCopy};
pub use seconds::SecondLatency;

/// Highest latency a histogram holds, in microseconds (one hour); larger values saturate.
const MAX_US: u64 = 3_600_000_000;
/// A send this far behind its intended time counts as late.
pub const LATE_NS: u64 = 10_000_000;

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, 3).expect("static histogram bounds are valid")
}

#[inline]
fn us(ns: u64) -> u64 {
    (ns + 500) / 1000
}

/// Everything measured for one phase.
#[derive(Debug, Clone)]
pub struct PhaseRecord {
    /// Completion − intended send time, µs (coordinated omission corrected). Holds every
    /// request that got a response, plus timeouts and drops at their deadline.
    pub latency: Histogram<u64>,
    /// Completion − actual send time, µs (what a closed-loop tool would report).
    pub service: Histogram<u64>,
    /// Actual send − intended send time, µs.
    pub send_lag: Histogram<u64>,
    /// The loader's own part of the send lag, µs: actual send − the later of the intended
    /// time and the instant the shard woke to send it (or got a connection for it). What is
    /// left of the lag is the host's wake-up lateness or the wait for a connection.
    pub own_lag: Histogram<u64>,
    /// How late the shard woke from sleeps that ended on their timer inside the phase's
    /// window, µs: the host's wake-up jitter where this phase's sends were due.
    pub wake_lateness: Histogram<u64>,
    /// Requests sent.
    pub sent: u64,
    /// Requests answered 2xx/3xx.
    pub ok: u64,
    /// Failed requests by [`ErrorClass`].
    pub errors: [u64; ErrorClass::COUNT],
    /// Sends more than [`LATE_NS`] behind schedule.
    pub late: u64,
    /// Of those, sends that did not wait for a connection: the loader itself was late
    /// (scheduling, CPU), not the pool.
    pub late_unpooled: u64,
    /// The largest lag of those late sends with a connection free, µs: how far the loader
    /// itself fell behind at worst (the send-lag histogram mixes in the pool's waits).
    pub late_unpooled_max_us: u64,
    /// Sends that found no free connection at their due time and waited for one.
    pub waited_for_connection: u64,
    /// Sends that left before their intended time, on a wake-up early for them or with one
    /// that sent another (`engine::pace`, the send-ahead window).
    pub sent_ahead: u64,
    /// Sends whose actual send time fell inside the phase window (for sent/s).
    pub sent_in_window: u64,
    /// Of the sends that waited for a connection, those whose wait was mostly the loader's:
    /// in the instant-reading pool they would have left in less than half the time — the
    /// answers that freed a connection sat unread, or the loader was not running.
    pub waited_on_loader: u64,
    /// Late sends of the loader's (see `late_unpooled`) made after the phase's window ended:
    /// its backlog spilled into the next phase.
    pub late_after_end: u64,
    /// Requests due (intended time passed) that were never sent: dropped at their deadline,
    /// or still waiting when the run stopped. Each is also in `send_lag`, with the lag it had
    /// reached then (a lower bound).
    pub due_unsent: u64,
    /// Of those, the loader's: a connection was free in the kernel's view (or could be
    /// opened) before the deadline or the stop, so the loader, not the target, kept it back.
    pub due_unsent_loader: u64,
    /// Of those, the ones dropped at their deadline (the rest were waiting at the stop).
    pub dropped_loader: u64,
    /// Answer read − the kernel's receive stamp of its last byte, µs: how long answers sat in
    /// the loader's socket before it read them (answers without a stamp are not in it).
    pub read_lag: Histogram<u64>,
    /// 2xx/3xx responses completed inside the phase window (for ok/s, goodput).
    pub ok_in_window: u64,
    /// gRPC answers by status code (`--grpc`; all zero otherwise).
    pub grpc: [u64; grpc::GRPC_CODES],
}

impl PhaseRecord {
    fn new() -> Self {
        PhaseRecord {
            latency: histogram(),
            service: histogram(),
            send_lag: histogram(),
            own_lag: histogram(),
            wake_lateness: histogram(),
            sent: 0,
            ok: 0,
            errors: [0; ErrorClass::COUNT],
            late: 0,
            late_unpooled: 0,
            late_unpooled_max_us: 0,
            waited_for_connection: 0,
            sent_ahead: 0,
            sent_in_window: 0,
            waited_on_loader: 0,
            late_after_end: 0,
            due_unsent: 0,
            due_unsent_loader: 0,
            dropped_loader: 0,
            read_lag: histogram(),
            ok_in_window: 0,
            grpc: [0; grpc::GRPC_CODES],
        }
    }

    fn merge(&mut self, other: &PhaseRecord) {
        self.latency.add(&other.latency).expect("same bounds");
        self.service.add(&other.service).expect("same bounds");
        self.send_lag.add(&other.send_lag).expect("same bounds");
        self.own_lag.add(&other.own_lag).expect("same bounds");
        self.wake_lateness.add(&other.wake_lateness).expect("same bounds");
        self.sent += other.sent;
        self.ok += other.ok;
        for (a, b) in self.errors.iter_mut().zip(other.errors) {
            *a += b;
        }
        self.late += other.late;
        self.late_unpooled += other.late_unpooled;
        self.late_unpooled_max_us = self.late_unpooled_max_us.max(other.late_unpooled_max_us);
        self.waited_for_connection += other.waited_for_connection;
        self.sent_ahead += other.sent_ahead;
        self.sent_in_window += other.sent_in_window;
        self.waited_on_loader += other.waited_on_loader;
        self.late_after_end += other.late_after_end;
        self.due_unsent += other.due_unsent;
        self.due_unsent_loader += other.due_unsent_loader;
        self.dropped_loader += other.dropped_loader;
        self.read_lag.add(&other.read_lag).expect("same bounds");
        self.ok_in_window += other.ok_in_window;
        for (a, b) in self.grpc.iter_mut().zip(other.grpc) {
            *a += b;
        }
    }

    /// Requests accounted for: ok plus every class. Equals the phase's planned requests
    /// once the run has ended, however it ended.
    pub fn finished(&self) -> u64 {
        self.ok + self.errors.iter().sum::<u64>()
    }

    /// Count of one error class.
    pub fn error(&self, class: ErrorClass) -> u64 {
        self.errors[class as usize]
    }
}

/// How a send's lag divides between waiting for a connection and the loader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendWait {
    /// The pool was exhausted at its intended time (or it opened its own connection).
    pub for_connection: bool,
    /// The loader's part of the lag, ns: the lag less the time no connection was free in the
    /// kernel's view (every one waiting for an answer that had not arrived, or opening).
    pub loader_ns: u64,
}

/// One second of the run (by the time things happened, not by phase).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Second {
    /// Requests sent.
    pub sent: u32,
    /// 2xx/3xx responses.
    pub ok: u32,
    /// Failures by [`ErrorClass`] (`unsent` is never in a second: it did not happen).
    pub errors: [u32; ErrorClass::COUNT],
    /// Highest number of requests in flight.
    pub in_flight_max: u32,
    /// Sends (and due requests never sent) that the loader itself made more than
    /// [`LATE_NS`] late, recorded in the second they left (or were given up): what the
    /// emergency stop asks before it calls a cliff.
    pub late_loader: u32,
    /// Corrected latencies (completion − intended) of the requests that completed in this
    /// second, as the phases' latency histograms count them (timeouts, drops and aborts at
    /// their deadline included).
    pub latency: SecondLatency,
    /// Connections closed this second, by who closed them and why.
    pub closes: Closes,
    /// Connects that failed this second for want of a local port (`EADDRNOTAVAIL`).
    pub connect_no_port: u32,
}

/// Connections that closed, by who closed them: the loader because the target did not answer
/// a request by its deadline, or the target (it closed or reset the connection). What the
/// TIME_WAIT and ports a run leaves behind are a consequence of (DESIGN.md, Verdict: closes
/// have owners too).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Closes {
    /// The loader closed the connection because its request timed out: the target's slowness.
    pub on_timeout: u32,
    /// The target closed or reset the connection (under a request, or after answering).
    pub by_target: u32,
}

impl Closes {
    fn add(&mut self, other: Closes) {
        self.on_timeout += other.on_timeout;
        self.by_target += other.by_target;
    }
}

/// [`Closes`] over a whole run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Closes64 {
    /// See [`Closes::on_timeout`].
    pub on_timeout: u64,
    /// See [`Closes::by_target`].
    pub by_target: u64,
}

/// Why a connection closed, as far as its owner goes ([`Closes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseCause {
    /// Its request timed out and the loader closed it.
    Timeout,
    /// The target closed or reset it.
    Target,
}

/// What one shard measured over the whole run.
#[derive(Debug, Clone)]
pub struct ShardRecord {
    windows: Vec<Window>,
    /// One record per phase, in plan order.
    pub phases: Vec<PhaseRecord>,
    /// One bucket per second of the run.
    pub seconds: Vec<Second>,
    /// TCP connections opened (initial pool and reconnects).
    pub connections_opened: u64,
    /// Connection attempts that failed (with or without a request waiting on them).
    pub connect_failures: u64,
    /// Requests whose deadline passed while their connection was still opening, the connect
    /// itself not yet given its whole timeout: late before the connect began, not a failed
    /// connect.
    pub deadline_while_connecting: u64,
    /// Requests sent again on a fresh connection after a reused one turned out closed.
    pub retried_on_stale_connection: u64,
    /// HTTP/2 answers stamped with the arrival of the segment that carried their last byte
    /// (the probes' segment record) rather than their read's stamp.
    pub stamps_by_segment: u64,
    /// Connections whose segment record disagreed with the kernel's stamps and was let go.
    pub segment_follow_lost: u64,
    /// Requests recorded as `aborted` (in flight or waiting when a stopped run gave up).
    pub abandoned: u64,
    /// Sends (and due requests given up) the loader itself made more than [`LATE_NS`] late,
    /// over the whole run: the sum of the phases' `late_unpooled`, kept for the live stop.
    pub late_loader: u64,
    /// A closed run's: latency runs from each send (a virtual user has no intended time
    /// before it sends), not from the request's due time.
    pub from_send: bool,
    /// Connects that failed for want of a local port (`EADDRNOTAVAIL`): the loader itself
    /// was short of ephemeral ports.
    pub connect_no_port: u64,
    /// Connections closed over the run, by who closed them (each second's are in `seconds`).
    pub closes: Closes64,
    /// How late the shard woke from sleeps that ended on their timer, µs: the host's
    /// wake-up jitter as the run saw it (timer lateness plus any run-queue wait).
    pub wake_lateness: Histogram<u64>,
    /// Why requests failed, per class.
    pub details: ErrorDetail,
    /// TLS handshakes (https targets; all zero otherwise).
    pub tls: TlsRecord,
    /// Sends per data row (`--data`; empty without a data file).
    pub rows: Vec<u32>,
}

/// TLS handshakes of a run (https targets only).
#[derive(Debug, Clone)]
pub struct TlsRecord {
    /// Handshakes completed.
    pub handshakes: u64,
    /// Of those, resumed from an earlier session (TLS 1.3 ticket or TLS 1.2 session).
    pub resumed: u64,
    /// Handshakes that failed (certificate rejected, alert, protocol error, peer closed).
    pub failures: u64,
    /// TCP connect done → handshake done, µs, per completed handshake.
    pub handshake: Histogram<u64>,
    /// The first handshake failure's reason (allocated once, on failure only).
    pub first_error: Option<String>,
}

impl TlsRecord {
    fn new() -> Self {
        TlsRecord { handshakes: 0, resumed: 0, failures: 0, handshake: histogram(), first_error: None }
    }

    /// A handshake completed after `ns`.
    #[inline]
    pub fn on_handshake(&mut self, ns: u64, resumed: bool) {
        self.handshakes += 1;
        self.resumed += u64::from(resumed);
        self.handshake.saturating_record(us(ns));
    }

    /// Keep the reason of the first failure.
    pub fn note_error(&mut self, reason: impl FnOnce() -> String) {
        if self.first_error.is_none() {
            self.first_error = Some(reason());
        }
    }

    fn merge(&mut self, other: &TlsRecord) {
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
        self.handshakes += other.handshakes;
        self.resumed += other.resumed;
        self.failures += other.failures;
        self.handshake.add(&other.handshake).expect("same bounds");
    }
}

impl ShardRecord {
    /// An empty record for a run with these phase windows, lasting about `seconds` seconds.
    pub fn new(windows: Vec<Window>, seconds: usize) -> Self {
        ShardRecord {
            phases: windows.iter().map(|_| PhaseRecord::new()).collect(),
            windows,
            seconds: vec![Second::default(); seconds],
            connections_opened: 0,
            connect_failures: 0,
            deadline_while_connecting: 0,
            abandoned: 0,
            late_loader: 0,
            from_send: false,
            connect_no_port: 0,
            closes: Closes64::default(),
            wake_lateness: histogram(),
            details: ErrorDetail::default(),
            retried_on_stale_connection: 0,
            stamps_by_segment: 0,
            segment_follow_lost: 0,
            tls: TlsRecord::new(),
            rows: Vec::new(),
        }
    }

    /// Latency from each send, not from the due time (a closed run's record).
    pub fn from_send(mut self, yes: bool) -> Self {
        self.from_send = yes;
        self
    }

    /// Count sends per row of a data file of `rows` rows.
    pub fn with_rows(mut self, rows: usize) -> Self {
        self.rows = vec![0; rows];
        self
    }

    #[inline]
    fn second(&mut self, at_ns: u64) -> &mut Second {
        let i = (at_ns / 1_000_000_000) as usize;
        if i >= self.seconds.len() {
            self.seconds.resize(i + 1, Second::default());
        }
        &mut self.seconds[i]
    }

    /// The phase whose window holds `at_ns` (windows are in time order and do not overlap).
    #[inline]
    fn window_of(&self, at_ns: u64) -> Option<usize> {
        let i = self.windows.partition_point(|w| w.start_ns <= at_ns).checked_sub(1)?;
        (at_ns < self.windows[i].end_ns).then_some(i)
    }

    /// A request of `phase` due at `intended_ns` was sent at `sent_ns`; `own_lag_ns` of its
    /// lag was the loader's own (see [`PhaseRecord::own_lag`]). A send that waited for a
    /// connection counts none of its lag as the loader's; [`ShardRecord::on_send_split`] says
    /// how much was.
    #[inline]
    pub fn on_send(
        &mut self,
        phase: usize,
        intended_ns: u64,
        sent_ns: u64,
        own_lag_ns: u64,
        waited_for_connection: bool,
        in_flight: u32,
    ) {
        let loader_ns = if waited_for_connection { 0 } else { sent_ns.saturating_sub(intended_ns) };
        let wait = SendWait { for_connection: waited_for_connection, loader_ns };
        self.on_send_split(phase, intended_ns, sent_ns, own_lag_ns, wait, in_flight);
    }

    /// A request of `phase` due at `intended_ns` was sent at `sent_ns`; `own_lag_ns` of its
    /// lag was the loader's own work, and `wait` says whether it waited for a connection and
    /// how much of its lag the loader owns (all of it but the time every connection was
    /// waiting for an answer that had not reached the kernel, or opening).
    #[inline]
    pub fn on_send_split(
        &mut self,
        phase: usize,
        intended_ns: u64,
        sent_ns: u64,
        own_lag_ns: u64,
        wait: SendWait,
        in_flight: u32,
    ) {
        let lag = sent_ns.saturating_sub(intended_ns);
        let loader_ns = wait.loader_ns.min(lag);
        let in_window = self.window_of(sent_ns);
        let after_end = sent_ns >= self.windows[phase].end_ns;
        let p = &mut self.phases[phase];
        p.sent += 1;
        p.send_lag.saturating_record(us(lag));
        p.own_lag.saturating_record(us(own_lag_ns.min(lag)));
        p.late += u64::from(lag > LATE_NS);
        let loader_late = loader_ns > LATE_NS;
        if loader_late {
            p.late_unpooled += 1;
            p.late_unpooled_max_us = p.late_unpooled_max_us.max(us(loader_ns));
            p.late_after_end += u64::from(after_end);
        }
        // A wait for a connection that was mostly the loader's (however short).
        p.waited_on_loader += u64::from(wait.for_connection && loader_ns > 0 && loader_ns * 2 >= lag);
        p.waited_for_connection += u64::from(wait.for_connection);
        p.sent_ahead += u64::from(sent_ns < intended_ns);
        if let Some(w) = in_window {
            self.phases[w].sent_in_window += 1;
        }
        let s = self.second(sent_ns);
        s.sent += 1;
        s.in_flight_max = s.in_flight_max.max(in_flight);
        s.late_loader += u32::from(loader_late);
        self.late_loader += u64::from(loader_late);
    }

    /// A request of `phase` due at `intended_ns` was given up unsent at `at_ns` (dropped at
    /// its deadline, or waiting when the run stopped): a late send that never left, its lag
    /// at least `at_ns − intended_ns`. `loader` says whether the loader kept it back (a
    /// connection was free in the kernel's view before then) rather than the target. Only
    /// the send side is recorded here; the failure itself is [`ShardRecord::on_failure`]'s.
    #[inline]
    pub fn on_due_unsent(&mut self, phase: usize, intended_ns: u64, at_ns: u64, loader: bool, dropped: bool) {
        let lag = at_ns.saturating_sub(intended_ns);
        let p = &mut self.phases[phase];
        p.due_unsent += 1;
        p.send_lag.saturating_record(us(lag));
        if loader {
            p.due_unsent_loader += 1;
            p.dropped_loader += u64::from(dropped);
            if lag > LATE_NS {
                p.late += 1;
                p.late_unpooled += 1;
                p.late_unpooled_max_us = p.late_unpooled_max_us.max(us(lag));
            }
        }
        if loader && lag > LATE_NS {
            self.second(at_ns).late_loader += 1;
            self.late_loader += 1;
        }
    }

    /// An answer of `phase` whose last byte the kernel stamped at `stamped_ns` was read at
    /// `read_ns`.
    #[inline]
    pub fn on_read(&mut self, phase: usize, stamped_ns: u64, read_ns: u64) {
        self.phases[phase].read_lag.saturating_record(us(read_ns.saturating_sub(stamped_ns)));
    }

    /// A request filled from data row `row` was sent.
    #[inline]
    pub fn on_row(&mut self, row: u32) {
        if let Some(n) = self.rows.get_mut(row as usize) {
            *n += 1;
        }
    }

    /// A sleep that was to end at its timer ended `late_ns` after it, at `at_ns`.
    #[inline]
    pub fn on_wake(&mut self, late_ns: u64, at_ns: u64) {
        self.wake_lateness.saturating_record(us(late_ns));
        if let Some(w) = self.window_of(at_ns) {
            self.phases[w].wake_lateness.saturating_record(us(late_ns));
        }
    }

    /// A response with `status` completed at `done_ns`.
    #[inline]
    pub fn on_response(&mut self, phase: usize, intended_ns: u64, sent_ns: u64, done_ns: u64, status: u16) {
        self.on_answer(phase, intended_ns, sent_ns, done_ns, ErrorClass::of_status(status), || status_message(status));
    }

    /// An answer completed at `done_ns`: latency and service time recorded, then ok (`class`
    /// `None`) or an error of `class` with the detail `message` (built on failures only).
    #[inline]
    pub(crate) fn on_answer(
        &mut self,
        phase: usize,
        intended_ns: u64,
        sent_ns: u64,
        done_ns: u64,
        class: Option<ErrorClass>,
        message: impl FnOnce() -> Cow<'static, str>,
    ) {
        let in_window = self.window_of(done_ns);
        // From the intended time, or from the send if it left ahead of that time (with a
        // wake-up that sent another): a latency never shortened by the schedule.
        // A closed run's, from the send: its users wait for each answer before the next.
        let from = if self.from_send { sent_ns } else { intended_ns.min(sent_ns) };
        let latency_us = us(done_ns.saturating_sub(from));
        self.second(done_ns).latency.record(latency_us);
        let p = &mut self.phases[phase];
        p.latency.saturating_record(latency_us);
        p.service.saturating_record(us(done_ns.saturating_sub(sent_ns)));
        match class {
            None => {
                p.ok += 1;
                if let Some(w) = in_window {
                    self.phases[w].ok_in_window += 1;
                }
                self.second(done_ns).ok += 1;
            }
            Some(class) => {
                p.errors[class as usize] += 1;
                self.second(done_ns).errors[class as usize] += 1;
                self.details.note(class, message(), 1);
            }
        }
    }

    /// A request failed with `class` at `done_ns`, for the reason `message`. Timeouts,
    /// drops and aborts also enter the latency record at `done_ns` (their deadline, or the
    /// instant the run gave up on them), so the tail shows them; transport and protocol
    /// failures do not (they have no latency to speak of and would flatter the percentiles).
    #[inline]
    pub fn on_failure(
        &mut self,
        phase: usize,
        intended_ns: u64,
        done_ns: u64,
        class: ErrorClass,
        message: Cow<'static, str>,
    ) {
        let p = &mut self.phases[phase];
        p.errors[class as usize] += 1;
        let deadline = matches!(class, ErrorClass::Timeout | ErrorClass::Dropped | ErrorClass::Aborted);
        let latency_us = us(done_ns.saturating_sub(intended_ns));
        if deadline {
            p.latency.saturating_record(latency_us);
        }
        if class == ErrorClass::Aborted {
            self.abandoned += 1;
        }
        let second = self.second(done_ns);
        second.errors[class as usize] += 1;
        if deadline {
            second.latency.record(latency_us);
        }
        self.details.note(class, message, 1);
    }

    /// A request of `phase` sent at `sent_ns` timed out at `deadline_ns` with no complete
    /// answer: it held its connection (or stream) on the wire from its send to its deadline,
    /// which its service time records (the failure itself is [`ShardRecord::on_failure`]'s).
    /// So a step where every request timed out still says how long each was on the wire —
    /// what Little's law needs, and what a closed-loop tool's timeout would report.
    #[inline]
    pub fn on_timeout_service(&mut self, phase: usize, sent_ns: u64, deadline_ns: u64) {
        self.phases[phase].service.saturating_record(us(deadline_ns.saturating_sub(sent_ns)));
    }

    /// A connection closed at `at_ns` for `cause` (see [`Closes`]).
    #[inline]
    pub fn on_close(&mut self, cause: CloseCause, at_ns: u64) {
        let second = &mut self.second(at_ns).closes;
        match cause {
            CloseCause::Timeout => {
                second.on_timeout += 1;
                self.closes.on_timeout += 1;
            }
            CloseCause::Target => {
                second.by_target += 1;
                self.closes.by_target += 1;
            }
        }
    }

    /// A connect failed at `at_ns` for want of a local port (`EADDRNOTAVAIL`).
    #[inline]
    pub fn on_connect_no_port(&mut self, at_ns: u64) {
        self.connect_no_port += 1;
        self.second(at_ns).connect_no_port += 1;
    }

    /// `n` requests of `phase` were never attempted: the run stopped before they were due.
    pub fn on_unsent(&mut self, phase: usize, n: u64) {
        if n == 0 {
            return;
        }
        self.phases[phase].errors[ErrorClass::Unsent as usize] += n;
        self.details.note(ErrorClass::Unsent, Cow::Borrowed("the run stopped before they were due"), n);
    }

    /// Add `other` (another shard of the same run) into `self`.
    pub fn merge(&mut self, other: &ShardRecord) {
        for (a, b) in self.phases.iter_mut().zip(&other.phases) {
            a.merge(b);
        }
        if other.seconds.len() > self.seconds.len() {
            self.seconds.resize(other.seconds.len(), Second::default());
        }
        for (a, b) in self.seconds.iter_mut().zip(&other.seconds) {
            a.sent += b.sent;
            a.ok += b.ok;
            for (x, y) in a.errors.iter_mut().zip(b.errors) {
                *x += y;
            }
            // Shards peak at different instants within the second; the sum of their peaks
            // bounds the true peak from above (documented in summary.json's series).
            a.in_flight_max += b.in_flight_max;
            a.late_loader += b.late_loader;
            a.latency.merge(&b.latency);
            a.closes.add(b.closes);
            a.connect_no_port += b.connect_no_port;
        }
        self.connections_opened += other.connections_opened;
        self.connect_failures += other.connect_failures;
        self.deadline_while_connecting += other.deadline_while_connecting;
        self.abandoned += other.abandoned;
        self.late_loader += other.late_loader;
        self.connect_no_port += other.connect_no_port;
        self.closes.on_timeout += other.closes.on_timeout;
        self.closes.by_target += other.closes.by_target;
        self.wake_lateness.add(&other.wake_lateness).expect("same bounds");
        self.details.merge(&other.details);
        self.retried_on_stale_connection += other.retried_on_stale_connection;
        self.stamps_by_segment += other.stamps_by_segment;
        self.segment_follow_lost += other.segment_follow_lost;
        self.tls.merge(&other.tls);
        if self.rows.len() < other.rows.len() {
            self.rows.resize(other.rows.len(), 0);
        }
        for (a, b) in self.rows.iter_mut().zip(&other.rows) {
            *a = a.saturating_add(*b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows() -> Vec<Window> {
        vec![Window::constant(0, 1_000_000_000, 10.0), Window::constant(1_000_000_000, 2_000_000_000, 10.0)]
    }

    #[test]
    fn latency_counts_from_intended_and_service_from_send() {
        let mut r = ShardRecord::new(windows(), 2);
        r.on_send(0, 100_000_000, 150_000_000, 0, true, 1);
        r.on_response(0, 100_000_000, 150_000_000, 160_000_000, 200);
        let p = &r.phases[0];
        assert!(p.latency.equivalent(p.latency.max(), 60_000));
        assert!(p.service.equivalent(p.service.max(), 10_000));
        assert!(p.send_lag.equivalent(p.send_lag.max(), 50_000));
        assert_eq!((p.sent, p.ok, p.late, p.waited_for_connection, p.late_unpooled), (1, 1, 1, 1, 0));
        // The worst late send with a connection free is kept apart from the pool's waits.
        r.on_send(0, 200_000_000, 222_000_000, 0, false, 1);
        r.on_send(0, 300_000_000, 312_000_000, 0, false, 1);
        r.on_send(0, 400_000_000, 405_000_000, 0, false, 1);
        let p = &r.phases[0];
        assert_eq!((p.late_unpooled, p.late_unpooled_max_us), (2, 22_000));
    }

    #[test]
    fn a_send_ahead_of_its_time_is_measured_from_when_it_left() {
        let mut r = ShardRecord::new(windows(), 2);
        // Intended at 100.1 ms, sent 100 µs early with the one before it, answered at 100.5 ms:
        // 500 µs from when it left, not the 400 µs its intended time would give.
        r.on_send(0, 100_100_000, 100_000_000, 0, false, 2);
        r.on_response(0, 100_100_000, 100_000_000, 100_500_000, 200);
        let p = &r.phases[0];
        assert_eq!((p.sent, p.sent_ahead, p.late), (1, 1, 0));
        assert!(p.latency.equivalent(p.latency.max(), 500));
        assert!(p.service.equivalent(p.service.max(), 500));
        assert_eq!(p.send_lag.max(), 0, "early is no lag");
        // On time or late: not ahead.
        r.on_send(0, 200_000_000, 200_000_000, 0, false, 1);
        r.on_send(0, 300_000_000, 300_020_000, 0, false, 1);
        assert_eq!(r.phases[0].sent_ahead, 1);
    }

    #[test]
    fn phases_attribute_by_intended_time_and_rates_by_window() {
        let mut r = ShardRecord::new(windows(), 2);
        // Intended in phase 0, sent and completed during phase 1.
        r.on_send(0, 900_000_000, 1_100_000_000, 200_000_000, false, 1);
        r.on_response(0, 900_000_000, 1_100_000_000, 1_200_000_000, 204);
        assert_eq!(r.phases[0].ok, 1);
        assert_eq!(r.phases[0].ok_in_window, 0);
        assert_eq!(r.phases[1].ok_in_window, 1);
        assert_eq!(r.phases[1].sent_in_window, 1);
        assert_eq!(r.seconds[1].ok, 1);
    }

    #[test]
    fn timeouts_enter_latency_at_deadline_but_resets_do_not() {
        let mut r = ShardRecord::new(windows(), 2);
        r.on_failure(0, 0, 5_000_000_000, ErrorClass::Timeout, "no answer".into());
        r.on_failure(0, 0, 1_000, ErrorClass::Reset, "connection reset by peer".into());
        assert_eq!(r.phases[0].latency.len(), 1);
        assert!(r.phases[0].latency.equivalent(r.phases[0].latency.max(), 5_000_000));
        assert_eq!(r.phases[0].error(ErrorClass::Reset), 1);
        assert_eq!(r.seconds.len(), 6, "series grows to cover late events");
    }

    #[test]
    fn window_lookup_finds_the_phase_or_none() {
        let r = ShardRecord::new(windows(), 2);
        assert_eq!(r.window_of(0), Some(0));
        assert_eq!(r.window_of(999_999_999), Some(0));
        assert_eq!(r.window_of(1_000_000_000), Some(1));
        assert_eq!(r.window_of(2_000_000_000), None);
    }

    #[test]
    fn status_classes() {
        assert_eq!(ErrorClass::of_status(302), None);
        assert_eq!(ErrorClass::of_status(429), Some(ErrorClass::Http429));
        assert_eq!(ErrorClass::of_status(404), Some(ErrorClass::Http4xx));
        assert_eq!(ErrorClass::of_status(503), Some(ErrorClass::Http5xx));
        assert_eq!(ErrorClass::of_status(599), Some(ErrorClass::Http5xx));
        for other in [101, 199, 600, 999] {
            assert_eq!(ErrorClass::of_status(other), Some(ErrorClass::HttpOther), "{other}");
        }
    }

    #[test]
    fn detail_keeps_the_first_distinct_messages_and_counts_the_rest_together() {
        let mut d = ErrorDetail::default();
        for i in 0..12u64 {
            d.note(ErrorClass::Protocol, format!("m{i}").into(), i + 1);
        }
        d.note(ErrorClass::Protocol, "m0".into(), 10);
        let list = &d.by_class[ErrorClass::Protocol as usize];
        assert_eq!(list.len(), DETAIL_MESSAGES + 1);
        assert_eq!(list[0], ("m0".into(), 11));
        assert_eq!(list[DETAIL_MESSAGES], (OTHER_MESSAGES.into(), 9 + 10 + 11 + 12));
        let total: u64 = list.iter().map(|(_, n)| n).sum();
        assert_eq!(total, (1..=12).sum::<u64>() + 10, "nothing is lost");
    }

    /// The case the issue found: a gRPC run's messages carry an account id. Normalised, they
    /// are three lines; and once the list is full, later messages are counted by status.
    #[test]
    fn messages_with_ids_group_by_cause_and_overflow_by_status() {
        let mut r = ShardRecord::new(windows(), 2);
        for i in 0..300 {
            r.on_grpc(
                1,
                1_000_000_000,
                1_000_000_000,
                1_001_000_000,
                5,
                &format!("ledger says not_found for acct-{i:05}"),
            );
        }
        for i in 0..120 {
            r.on_grpc(
                1,
                1_000_000_000,
                1_000_000_000,
                1_001_000_000,
                8,
                &format!("quota {i} of 100 for 3f2a9c1e-77aa-4d0b-9e1f-{i:012x}"),
            );
        }
        for _ in 0..60 {
            r.on_grpc(1, 1_000_000_000, 1_000_000_000, 1_001_000_000, 7, "denied");
        }
        let list = &r.details.by_class[ErrorClass::Grpc as usize];
        let got: Vec<(&str, u64)> = list.iter().map(|(m, n)| (m.as_ref(), *n)).collect();
        assert_eq!(
            got,
            [
                ("NOT_FOUND: ledger says not_found for acct-#", 300),
                ("RESOURCE_EXHAUSTED: quota # of # for #", 120),
                ("PERMISSION_DENIED: denied", 60)
            ]
        );
        // Distinct messages past the first eight: by their status, not one lump.
        let mut d = ErrorDetail::default();
        for i in 0..8 {
            d.note(ErrorClass::Grpc, format!("INTERNAL: shard {i} down ({})", "x".repeat(i)).into(), 1);
        }
        for (status, n) in [("NOT_FOUND", 300), ("UNAVAILABLE", 40)] {
            for i in 0..n {
                d.note(ErrorClass::Grpc, format!("{status}: m{}", "y".repeat(i % 7)).into(), 1);
            }
        }
        let list = &d.by_class[ErrorClass::Grpc as usize];
        assert_eq!(list.len(), DETAIL_MESSAGES + 2);
        assert_eq!(list[DETAIL_MESSAGES], ("NOT_FOUND: (other messages)".into(), 300));
        assert_eq!(list[DETAIL_MESSAGES + 1], ("UNAVAILABLE: (other messages)".into(), 40));
        // Beyond eight groups, the rest in one.
        for g in 0..20 {
            d.note(ErrorClass::Grpc, format!("G{g}: lost").into(), 2);
        }
        let list = &d.by_class[ErrorClass::Grpc as usize];
        assert_eq!(list.len(), 2 * DETAIL_MESSAGES + 1);
        assert_eq!(list.last().unwrap(), &(OTHER_MESSAGES.into(), 2 * (20 - 6)));
        let total: u64 = list.iter().map(|(_, n)| n).sum();
        assert_eq!(total, 8 + 340 + 40, "nothing is lost");
    }

    #[test]
    fn normalising_takes_out_numbers_and_ids_and_keeps_the_words() {
        use super::errors::normalise;
        assert_eq!(normalise("ledger says not_found for acct-00006"), "ledger says not_found for acct-#");
        assert_eq!(normalise("user 42 over limit 100/s"), "user # over limit #/s");
        assert_eq!(normalise("trace 3f2a9c1e-77aa-4d0b-9e1f-0123456789ab failed"), "trace # failed");
        assert_eq!(normalise("deadbeef"), "deadbeef", "a word of hex letters alone is a word");
        assert_eq!(normalise("backend unavailable"), "backend unavailable");
    }

    #[test]
    fn aborts_enter_latency_and_unsent_does_not() {
        let mut r = ShardRecord::new(windows(), 2);
        r.on_failure(1, 1_000_000_000, 1_400_000_000, ErrorClass::Aborted, "stopped".into());
        r.on_unsent(1, 7);
        let p = &r.phases[1];
        assert_eq!((p.error(ErrorClass::Aborted), p.error(ErrorClass::Unsent)), (1, 7));
        assert_eq!(p.latency.len(), 1);
        assert!(p.latency.equivalent(p.latency.max(), 400_000));
        assert_eq!(p.finished(), 8);
        assert_eq!(r.abandoned, 1);
        assert_eq!(r.seconds[1].errors[ErrorClass::Unsent as usize], 0, "unsent happened at no time");
    }

    #[test]
    fn merge_adds_exactly() {
        let mut a = ShardRecord::new(windows(), 2);
        let mut b = ShardRecord::new(windows(), 2);
        a.on_response(1, 0, 0, 3_000_000, 200);
        b.on_response(1, 0, 0, 9_000_000, 500);
        a.on_response(1, 0, 0, 9_000_000, 500);
        a.merge(&b);
        assert_eq!(a.details.by_class[ErrorClass::Http5xx as usize], vec![("status 500".into(), 2)]);
        assert_eq!(a.phases[1].latency.len(), 3);
        assert!(a.phases[1].latency.equivalent(a.phases[1].latency.max(), 9_000));
        assert_eq!(a.phases[1].error(ErrorClass::Http5xx), 2);
    }

    #[test]
    fn tls_handshakes_merge_with_their_durations() {
        let mut a = ShardRecord::new(windows(), 2);
        let mut b = ShardRecord::new(windows(), 2);
        a.tls.on_handshake(2_000_000, false);
        b.tls.on_handshake(500_000, true);
        b.tls.failures += 1;
        a.merge(&b);
        assert_eq!((a.tls.handshakes, a.tls.resumed, a.tls.failures), (2, 1, 1));
        assert!(a.tls.handshake.equivalent(a.tls.handshake.max(), 2_000));
        assert!(a.tls.handshake.equivalent(a.tls.handshake.min(), 500));
    }

    #[test]
    fn a_wait_splits_into_the_targets_part_and_the_loaders() {
        const MS: u64 = 1_000_000;
        let mut r = ShardRecord::new(windows(), 2);
        // Waited 300 ms for a connection; in the instant-reading pool it would have left
        // after 5: 295 ms of it were the loader's.
        r.on_send_split(0, 100 * MS, 400 * MS, 0, SendWait { for_connection: true, loader_ns: 295 * MS }, 1);
        // Waited 300 ms, all of it for the target's answers.
        r.on_send_split(0, 100 * MS, 400 * MS, 0, SendWait { for_connection: true, loader_ns: 0 }, 1);
        let p = &r.phases[0];
        assert_eq!((p.late, p.late_unpooled, p.waited_for_connection, p.waited_on_loader), (2, 1, 2, 1));
        assert_eq!(r.seconds[0].late_loader, 1);
        // Due and never sent: the loader's (a connection was free) and the target's.
        r.on_due_unsent(0, 200 * MS, 900 * MS, true, false);
        r.on_due_unsent(0, 300 * MS, 900 * MS, false, true);
        let p = &r.phases[0];
        assert_eq!((p.due_unsent, p.due_unsent_loader, p.dropped_loader, p.late_unpooled), (2, 1, 0, 2));
        assert_eq!(p.send_lag.len(), 4, "each unsent request is in the send lag with the lag it reached");
        // Read lag: read 3 ms after the kernel's stamp.
        r.on_read(0, 10 * MS, 13 * MS);
        assert!(r.phases[0].read_lag.equivalent(r.phases[0].read_lag.max(), 3_000));
    }
}
