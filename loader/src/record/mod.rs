//! Recording: what each shard measured, kept per phase and per second, merged once.
//!
//! Each shard owns a [`ShardRecord`] and writes to it from its own loop — no locks, no
//! channels, no allocation per request. After the run the records are [`ShardRecord::merge`]d
//! (HdrHistogram addition is exact, so merged percentiles are true percentiles).
//!
//! Per phase (attributed by the request's *intended* time, so a step is judged on the
//! requests that started in it): corrected latency (completion − intended), uncorrected
//! service time (completion − actual send), send lag (actual send − intended) and counts.
//! Per second of the run: sent, ok, errors by class, in-flight high-water mark.
//! Memory is fixed by the plan: histograms have fixed bounds and the series one bucket a
//! second.
//!
//! This module does not decide anything (that is analysis) and does not print (report).

use hdrhistogram::Histogram;

use crate::schedule::Window;

/// Highest latency a histogram holds, in microseconds (one hour); larger values saturate.
const MAX_US: u64 = 3_600_000_000;
/// A send this far behind its intended time counts as late.
pub const LATE_NS: u64 = 10_000_000;

/// Why a request did not end in a 2xx/3xx response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum ErrorClass {
    /// HTTP 429 Too Many Requests.
    Http429,
    /// Other HTTP 4xx.
    Http4xx,
    /// HTTP 5xx.
    Http5xx,
    /// No complete response within the client timeout.
    Timeout,
    /// The connection could not be opened.
    Connect,
    /// The peer reset or closed the connection mid-request.
    Reset,
    /// The response could not be parsed as HTTP/1.1.
    Protocol,
    /// Never sent: no connection became free before the timeout.
    Dropped,
}

impl ErrorClass {
    /// Every class, in report order.
    pub const ALL: [ErrorClass; 8] = [
        ErrorClass::Http429,
        ErrorClass::Http4xx,
        ErrorClass::Http5xx,
        ErrorClass::Timeout,
        ErrorClass::Connect,
        ErrorClass::Reset,
        ErrorClass::Protocol,
        ErrorClass::Dropped,
    ];

    /// Stable name used in `summary.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Http429 => "http_429",
            ErrorClass::Http4xx => "http_4xx",
            ErrorClass::Http5xx => "http_5xx",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Connect => "connect",
            ErrorClass::Reset => "reset",
            ErrorClass::Protocol => "protocol",
            ErrorClass::Dropped => "dropped",
        }
    }

    /// Class of an HTTP status, `None` for 2xx/3xx (ok).
    pub fn of_status(status: u16) -> Option<ErrorClass> {
        match status {
            200..=399 => None,
            429 => Some(ErrorClass::Http429),
            400..=499 => Some(ErrorClass::Http4xx),
            _ => Some(ErrorClass::Http5xx),
        }
    }
}

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
    /// Requests sent.
    pub sent: u64,
    /// Requests answered 2xx/3xx.
    pub ok: u64,
    /// Failed requests by [`ErrorClass`].
    pub errors: [u64; 8],
    /// Sends more than [`LATE_NS`] behind schedule.
    pub late: u64,
    /// Of those, sends that did not wait for a connection: the loader itself was late
    /// (scheduling, CPU), not the pool.
    pub late_unpooled: u64,
    /// Sends that found no free connection at their due time and waited for one.
    pub waited_for_connection: u64,
    /// Sends whose actual send time fell inside the phase window (for sent/s).
    pub sent_in_window: u64,
    /// 2xx/3xx responses completed inside the phase window (for ok/s, goodput).
    pub ok_in_window: u64,
}

impl PhaseRecord {
    fn new() -> Self {
        PhaseRecord {
            latency: histogram(),
            service: histogram(),
            send_lag: histogram(),
            sent: 0,
            ok: 0,
            errors: [0; 8],
            late: 0,
            late_unpooled: 0,
            waited_for_connection: 0,
            sent_in_window: 0,
            ok_in_window: 0,
        }
    }

    fn merge(&mut self, other: &PhaseRecord) {
        self.latency.add(&other.latency).expect("same bounds");
        self.service.add(&other.service).expect("same bounds");
        self.send_lag.add(&other.send_lag).expect("same bounds");
        self.sent += other.sent;
        self.ok += other.ok;
        for (a, b) in self.errors.iter_mut().zip(other.errors) {
            *a += b;
        }
        self.late += other.late;
        self.late_unpooled += other.late_unpooled;
        self.waited_for_connection += other.waited_for_connection;
        self.sent_in_window += other.sent_in_window;
        self.ok_in_window += other.ok_in_window;
    }

    /// Requests that ended (ok or error), i.e. the phase's finished requests.
    pub fn finished(&self) -> u64 {
        self.ok + self.errors.iter().sum::<u64>()
    }

    /// Count of one error class.
    pub fn error(&self, class: ErrorClass) -> u64 {
        self.errors[class as usize]
    }
}

/// One second of the run (by the time things happened, not by phase).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Second {
    /// Requests sent.
    pub sent: u32,
    /// 2xx/3xx responses.
    pub ok: u32,
    /// Failures by [`ErrorClass`].
    pub errors: [u32; 8],
    /// Highest number of requests in flight.
    pub in_flight_max: u32,
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
    /// Requests sent again on a fresh connection after a reused one turned out closed.
    pub retried_on_stale_connection: u64,
    /// Requests still in flight when a stopped run gave up waiting for them (not recorded).
    pub abandoned: u64,
    /// TLS handshakes (https targets; all zero otherwise).
    pub tls: TlsRecord,
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
            abandoned: 0,
            retried_on_stale_connection: 0,
            tls: TlsRecord::new(),
        }
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

    /// A request of `phase` due at `intended_ns` was sent at `sent_ns`.
    #[inline]
    pub fn on_send(
        &mut self,
        phase: usize,
        intended_ns: u64,
        sent_ns: u64,
        waited_for_connection: bool,
        in_flight: u32,
    ) {
        let lag = sent_ns.saturating_sub(intended_ns);
        let in_window = self.window_of(sent_ns);
        let p = &mut self.phases[phase];
        p.sent += 1;
        p.send_lag.saturating_record(us(lag));
        p.late += u64::from(lag > LATE_NS);
        p.late_unpooled += u64::from(lag > LATE_NS && !waited_for_connection);
        p.waited_for_connection += u64::from(waited_for_connection);
        if let Some(w) = in_window {
            self.phases[w].sent_in_window += 1;
        }
        let s = self.second(sent_ns);
        s.sent += 1;
        s.in_flight_max = s.in_flight_max.max(in_flight);
    }

    /// A response with `status` completed at `done_ns`.
    #[inline]
    pub fn on_response(&mut self, phase: usize, intended_ns: u64, sent_ns: u64, done_ns: u64, status: u16) {
        let in_window = self.window_of(done_ns);
        let p = &mut self.phases[phase];
        p.latency.saturating_record(us(done_ns.saturating_sub(intended_ns)));
        p.service.saturating_record(us(done_ns.saturating_sub(sent_ns)));
        match ErrorClass::of_status(status) {
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
            }
        }
    }

    /// A request failed with `class` at `done_ns`. Timeouts and drops also enter the latency
    /// record at their deadline (`done_ns`), so the tail shows them; transport failures do not
    /// (they have no latency to speak of and would flatter the percentiles).
    #[inline]
    pub fn on_failure(&mut self, phase: usize, intended_ns: u64, done_ns: u64, class: ErrorClass) {
        let p = &mut self.phases[phase];
        p.errors[class as usize] += 1;
        if matches!(class, ErrorClass::Timeout | ErrorClass::Dropped) {
            p.latency.saturating_record(us(done_ns.saturating_sub(intended_ns)));
        }
        self.second(done_ns).errors[class as usize] += 1;
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
        }
        self.connections_opened += other.connections_opened;
        self.connect_failures += other.connect_failures;
        self.abandoned += other.abandoned;
        self.retried_on_stale_connection += other.retried_on_stale_connection;
        self.tls.merge(&other.tls);
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
        r.on_send(0, 100_000_000, 150_000_000, true, 1);
        r.on_response(0, 100_000_000, 150_000_000, 160_000_000, 200);
        let p = &r.phases[0];
        assert!(p.latency.equivalent(p.latency.max(), 60_000));
        assert!(p.service.equivalent(p.service.max(), 10_000));
        assert!(p.send_lag.equivalent(p.send_lag.max(), 50_000));
        assert_eq!((p.sent, p.ok, p.late, p.waited_for_connection, p.late_unpooled), (1, 1, 1, 1, 0));
    }

    #[test]
    fn phases_attribute_by_intended_time_and_rates_by_window() {
        let mut r = ShardRecord::new(windows(), 2);
        // Intended in phase 0, sent and completed during phase 1.
        r.on_send(0, 900_000_000, 1_100_000_000, false, 1);
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
        r.on_failure(0, 0, 5_000_000_000, ErrorClass::Timeout);
        r.on_failure(0, 0, 1_000, ErrorClass::Reset);
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
    }

    #[test]
    fn merge_adds_exactly() {
        let mut a = ShardRecord::new(windows(), 2);
        let mut b = ShardRecord::new(windows(), 2);
        a.on_response(1, 0, 0, 3_000_000, 200);
        b.on_response(1, 0, 0, 9_000_000, 500);
        a.merge(&b);
        assert_eq!(a.phases[1].latency.len(), 2);
        assert!(a.phases[1].latency.equivalent(a.phases[1].latency.max(), 9_000));
        assert_eq!(a.phases[1].error(ErrorClass::Http5xx), 1);
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
}
