//! The figures over time: the bounded per-second series ([`Probes::sample`]) and the
//! cumulative readings ([`Probes::readings`]), whose live TIME_WAIT and port maxima come
//! from the series.
//!
//! Owns: the deltas between samples, the loader's own live TIME_WAIT (its entries of the last
//! 60 s), and the maxima kept across samples. Does not: read a map itself (the readers do),
//! or count losses (`loss.rs`).

use std::{collections::VecDeque, time::Instant};

use super::ReadError;
use super::{
    LatencyHistogram, ProbeReadings, ProbeSample, Probes, SERIES_CAPACITY, SockEvents,
    readings::{ConnectMs, Resets, RunqueueUs, TimeWait},
    time_wait,
};

/// The per-second series and what it needs to compute deltas.
#[derive(Debug)]
pub(super) struct Series {
    started: Instant,
    samples: VecDeque<ProbeSample>,
    dropped: u64,
    previous: Option<Cumulative>,
    max_live_time_wait: Option<u64>,
    max_port_ratio: Option<f64>,
    /// The loader's entries into TIME_WAIT of the last [`TIME_WAIT_SECONDS`] samples.
    recent_entries: VecDeque<u64>,
    max_own_time_wait: Option<u64>,
    max_own_port_ratio: Option<f64>,
}

/// Linux keeps a socket in TIME_WAIT for 60 s (`TCP_TIMEWAIT_LEN`, not tunable).
const TIME_WAIT_SECONDS: usize = 60;

impl Series {
    pub(super) fn new() -> Series {
        Series {
            started: Instant::now(),
            samples: VecDeque::new(),
            dropped: 0,
            previous: None,
            max_live_time_wait: None,
            max_port_ratio: None,
            recent_entries: VecDeque::with_capacity(TIME_WAIT_SECONDS),
            max_own_time_wait: None,
            max_own_port_ratio: None,
        }
    }

    /// The loader's own live TIME_WAIT now: its entries of the last 60 s (plus `since_last`,
    /// not sampled yet), at most the namespace's `live` count.
    fn own_time_wait(&self, since_last: u64, live: Option<u64>) -> u64 {
        let entries = self.recent_entries.iter().sum::<u64>() + since_last;
        live.map_or(entries, |live| entries.min(live))
    }
}

/// Cumulative counters at one sample.
#[derive(Debug, Clone, Default)]
pub(super) struct Cumulative {
    connects: u64,
    failed_connects: u64,
    time_wait_entries: u64,
    sock_events: SockEvents,
    drops: u64,
    runqueue: LatencyHistogram,
    tls_handshakes: u64,
    lost: u64,
}

impl Probes {
    /// Everything the probes measured since start (see [`ProbeReadings`]). Reads every map
    /// and, for the live TIME_WAIT and port figures, `/proc` once more (so the maxima include
    /// this instant even if [`Probes::sample`] was never called).
    pub fn readings(&self) -> Result<ProbeReadings, ReadError> {
        let transitions = self.tcp_states.read()?;
        let connect = self.connect_latency.read()?;
        let events = self.sock_events.read()?;
        let runqueue = self.runqueue.read()?;
        let runqueue_other = self.runqueue.read_other()?;
        let tls_handshakes = self.tls_handshakes.read()?;
        let lost_by_reason = self.lost_by_reason()?;
        let live_now = time_wait::live_time_wait(self.tgid).ok();
        // At the end of a run the loader has no socket open: its share is its TIME_WAIT.
        let ports_now = time_wait::ephemeral_ports(self.tgid, 0).ok();
        let since_last = transitions
            .time_wait_entries()
            .saturating_sub(self.series.previous.as_ref().map_or(0, |p| p.time_wait_entries));
        let own_now = self.series.own_time_wait(since_last, live_now);
        Ok(ProbeReadings {
            connect_ms: ConnectMs::new(&connect, transitions.failed_connects()),
            syn_retransmits: events.syn_retransmits,
            retransmits: events.retransmits,
            resets: Resets { sent: events.resets_sent, received: events.resets_received },
            time_wait: TimeWait {
                entries: transitions.time_wait_entries(),
                max_live: max_option(self.series.max_own_time_wait, Some(own_now)),
                host_max_live: max_option(self.series.max_live_time_wait, live_now),
            },
            ephemeral_ports_max_ratio: max_option(
                self.series.max_own_port_ratio,
                ports_now.map(|p| p.own_ratio(own_now)),
            ),
            host_ephemeral_ports_max_ratio: max_option(self.series.max_port_ratio, ports_now.map(|p| p.ratio)),
            runqueue_us: RunqueueUs::new(&runqueue),
            runqueue_other_us: RunqueueUs::new(&runqueue_other),
            drops: self.drops.read()?,
            tls_handshakes,
            tcp_states: transitions.named(),
            lost: lost_by_reason.values().fold(0u64, |total, &n| total.saturating_add(n)),
            loss_share: self.loss_share(&lost_by_reason, runqueue.count + runqueue_other.count, &transitions)?,
            lost_by_reason: lost_by_reason.into_iter().map(|(reason, n)| (reason.to_owned(), n)).collect(),
            availability: self.availability.clone(),
            connect_histogram: connect,
            runqueue_histogram: runqueue,
            runqueue_other_histogram: runqueue_other,
        })
    }

    /// Take one sample of the per-second series: what the counters did since the previous
    /// call, live TIME_WAIT and ephemeral-port use now, given the loader's open sockets now
    /// (`own_open`). Call once a second from the run loop; costs a few map reads and two small
    /// `/proc` files. Never fails: a figure that cannot be read is `None` (or 0 for a counter)
    /// in the sample.
    pub fn sample(&mut self, own_open: u64, run_second: u64) {
        let now = self.cumulative();
        let previous = self.series.previous.take().unwrap_or_default();
        let live = time_wait::live_time_wait(self.tgid).ok();
        let ports = time_wait::ephemeral_ports(self.tgid, own_open).ok();
        let interval_runqueue = now.runqueue.since(&previous.runqueue);
        let entries = now.time_wait_entries.saturating_sub(previous.time_wait_entries);
        let own_time_wait = self.series.own_time_wait(entries, live);
        let own_ports = ports.map(|p| p.own_ratio(own_time_wait));
        let sample = ProbeSample {
            elapsed_s: self.series.started.elapsed().as_secs_f64(),
            t: Some(run_second),
            connects: now.connects.saturating_sub(previous.connects),
            failed_connects: now.failed_connects.saturating_sub(previous.failed_connects),
            time_wait_entries: entries,
            time_wait_live: live,
            time_wait_own: Some(own_time_wait),
            ephemeral_ports_in_use: ports.map(|p| p.in_use),
            ephemeral_ports_ratio: ports.map(|p| p.ratio),
            own_ports_ratio: own_ports,
            syn_retransmits: now.sock_events.syn_retransmits.saturating_sub(previous.sock_events.syn_retransmits),
            resets_sent: now.sock_events.resets_sent.saturating_sub(previous.sock_events.resets_sent),
            resets_received: now.sock_events.resets_received.saturating_sub(previous.sock_events.resets_received),
            drops: now.drops.saturating_sub(previous.drops),
            runqueue_count: interval_runqueue.count,
            runqueue_p99_us: interval_runqueue.p99_us(),
            runqueue_max_us: interval_runqueue.max_us(),
            runqueue_buckets: RunqueueUs::new(&interval_runqueue).buckets,
            tls_handshakes: now.tls_handshakes.saturating_sub(previous.tls_handshakes),
            lost: now.lost.saturating_sub(previous.lost),
        };
        self.series.max_live_time_wait = max_option(self.series.max_live_time_wait, live);
        self.series.max_port_ratio = max_option(self.series.max_port_ratio, ports.map(|p| p.ratio));
        self.series.max_own_time_wait = max_option(self.series.max_own_time_wait, Some(own_time_wait));
        self.series.max_own_port_ratio = max_option(self.series.max_own_port_ratio, own_ports);
        if self.series.recent_entries.len() == TIME_WAIT_SECONDS {
            self.series.recent_entries.pop_front();
        }
        self.series.recent_entries.push_back(entries);
        if self.series.samples.len() == SERIES_CAPACITY {
            self.series.samples.pop_front();
            self.series.dropped += 1;
        }
        self.series.samples.push_back(sample);
        self.series.previous = Some(now);
    }

    /// The per-second series recorded by [`Probes::sample`], oldest first (at most
    /// [`SERIES_CAPACITY`]).
    pub fn series(&self) -> impl ExactSizeIterator<Item = &ProbeSample> {
        self.series.samples.iter()
    }

    /// Samples dropped from the front of the series because it was full.
    pub fn samples_dropped(&self) -> u64 {
        self.series.dropped
    }

    /// Cumulative counters now; a map that cannot be read leaves its fields at 0.
    fn cumulative(&self) -> Cumulative {
        let transitions = self.tcp_states.read().unwrap_or_default();
        Cumulative {
            connects: transitions.connects(),
            failed_connects: transitions.failed_connects(),
            time_wait_entries: transitions.time_wait_entries(),
            sock_events: self.sock_events.read().unwrap_or_default(),
            drops: self.drops.read().map(|d| d.values().sum()).unwrap_or(0),
            runqueue: self.runqueue.read().unwrap_or_default(),
            tls_handshakes: self.tls_handshakes.completed().unwrap_or(0),
            lost: self.lost(),
        }
    }
}

/// The larger of two optional values (`None` only if both are).
fn max_option<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b > a { b } else { a }),
        (a, b) => a.or(b),
    }
}
