//! The live metrics endpoint of `loader run --metrics ADDR`: Prometheus / OpenMetrics text of
//! the run as it goes, for Prometheus and Grafana. The metric names and their meaning are
//! listed in docs/metrics.md.
//!
//! [`LiveMetrics`] holds the figures (a `prometheus-client` registry) and is updated by the
//! run's once-a-second loop, on the main thread: from the shards' copies of their records
//! (`record::LiveCopies`: counts, latency and send-lag histograms), from the shards' live
//! gauges, their CPU and the probes' per-second sample. Once the shards have ended,
//! [`LiveMetrics::finish`] sets every count from the merged record — the record
//! `summary.json` is built from — so the last values equal the summary's totals exactly.
//! [`LiveMetrics::render`] encodes both formats once; the [`Endpoint`] thread only serves the
//! latest rendering, so a scrape never touches the run's data and never runs on a shard.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the metrics, their updates, the final values |
//! | `buckets.rs` | HdrHistogram → fixed Prometheus buckets (seconds) |
//! | `exposition.rs` | the two text formats and the choice between them (`Accept`) |
//! | `serve.rs` | the HTTP endpoint on its own thread and runtime |
//!
//! Not here: when the copies are taken (the shards, `record::live_copy`), when updates happen
//! (`measure::execute`).

mod buckets;
mod exposition;
mod serve;

pub use exposition::Exposition;
pub use serve::{Endpoint, EndpointError};

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use crate::record::{ErrorClass, PhaseCopy, PhaseRecord, ShardRecord};
use crate::scenario::Plan;
use buckets::{Folded, LATENCY_BOUNDS, SEND_LAG_BOUNDS, SharedHistogram};

/// Label of the error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabel {
    class: String,
}

/// Label of the per-shard CPU gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardLabel {
    shard: String,
}

/// Labels of the phase gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: String,
    kind: String,
}

/// One phase of one shard, as last copied: its counts and its histograms in buckets.
#[derive(Debug, Clone)]
struct Part {
    sent: u64,
    ok: u64,
    errors: [u64; ErrorClass::COUNT],
    late: u64,
    late_unpooled: u64,
    sent_ahead: u64,
    latency: Folded,
    send_lag: Folded,
}

impl Part {
    fn of(
        sent: u64,
        ok: u64,
        errors: [u64; ErrorClass::COUNT],
        timing: (u64, u64, u64),
        hists: [&hdrhistogram::Histogram<u64>; 2],
    ) -> Self {
        Part {
            sent,
            ok,
            errors,
            late: timing.0,
            late_unpooled: timing.1,
            sent_ahead: timing.2,
            latency: Folded::of(hists[0], LATENCY_BOUNDS),
            send_lag: Folded::of(hists[1], SEND_LAG_BOUNDS),
        }
    }

    fn from_copy(c: &PhaseCopy) -> Self {
        Part::of(c.sent, c.ok, c.errors, (c.late, c.late_unpooled, c.sent_ahead), [&c.latency, &c.send_lag])
    }

    fn from_record(p: &PhaseRecord) -> Self {
        Part::of(p.sent, p.ok, p.errors, (p.late, p.late_unpooled, p.sent_ahead), [&p.latency, &p.send_lag])
    }
}

/// What the once-a-second loop knows besides the shards' copies.
#[derive(Debug, Clone, Default)]
pub struct Tick<'a> {
    /// Requests the schedule offered from the run's start to now.
    pub offered: u64,
    /// Requests in flight now (all shards).
    pub in_flight: u64,
    /// Connections open now (all shards).
    pub open: u64,
    /// CPU of each shard over the last second, percent of one core.
    pub cpu_pct: &'a [f64],
    /// The phase running now (index in the plan), `None` before the first or after the last.
    pub phase: Option<usize>,
    /// The probes' run-queue delay p99 of the shard threads over the last second, µs.
    pub runqueue_p99_us: Option<f64>,
    /// Events the probes lost in the last second.
    pub lost: u64,
    /// The emergency stop has fired.
    pub emergency_stop: bool,
}

/// The run's metrics, as the endpoint shows them.
#[derive(Debug)]
pub struct LiveMetrics {
    registry: Registry,
    offered: Counter,
    sent: Counter,
    ok: Counter,
    errors: Family<ClassLabel, Counter>,
    late: Counter,
    late_unpooled: Counter,
    sent_ahead: Counter,
    latency: SharedHistogram,
    send_lag: SharedHistogram,
    in_flight: Gauge,
    open: Gauge,
    shard_cpu: Family<ShardLabel, Gauge<f64, AtomicU64>>,
    /// Registered only when the probes run.
    runqueue_p99: Option<Gauge<f64, AtomicU64>>,
    lost: Option<Counter>,
    phase: Family<PhaseLabel, Gauge>,
    phases: Vec<PhaseLabel>,
    emergency_stop: Gauge,
    finished: Gauge,
    /// Per shard, per phase: the last copy, folded.
    parts: Vec<Vec<Option<Part>>>,
}

impl LiveMetrics {
    /// The metrics of a run of `plan`, all at zero; `probes`: the probes run (their metrics
    /// are registered only then).
    pub fn new(plan: &Plan, probes: bool) -> Self {
        let mut registry = Registry::with_prefix("loader");
        let offered = Counter::default();
        registry.register(
            "requests_offered",
            "Requests the schedule offered so far (planned up to now)",
            offered.clone(),
        );
        let sent = Counter::default();
        registry.register("requests_sent", "Requests sent", sent.clone());
        let ok = Counter::default();
        registry.register("requests_ok", "Requests answered 2xx/3xx", ok.clone());
        let errors = Family::<ClassLabel, Counter>::default();
        registry.register(
            "request_errors",
            "Requests that ended in an error class (see docs/metrics.md)",
            errors.clone(),
        );
        for class in ErrorClass::ALL {
            // Every class is a series from the start, so `rate()` sees the first error.
            let _ = errors.get_or_create(&ClassLabel { class: class.as_str().to_string() });
        }
        let late = Counter::default();
        registry.register("late_sends", "Sends more than 10 ms behind their intended time", late.clone());
        let late_unpooled = Counter::default();
        registry.register(
            "late_sends_unpooled",
            "Late sends that did not wait for a connection: the loader itself was late",
            late_unpooled.clone(),
        );
        let sent_ahead = Counter::default();
        registry.register(
            "sends_ahead",
            "Sends that left up to the send-ahead window before their intended time (on an early wake-up, or with one that sent another)",
            sent_ahead.clone(),
        );
        let latency = SharedHistogram::new(LATENCY_BOUNDS);
        registry.register_with_unit(
            "latency",
            "Latency from the intended send time (coordinated omission corrected)",
            Unit::Seconds,
            latency.clone(),
        );
        let send_lag = SharedHistogram::new(SEND_LAG_BOUNDS);
        registry.register_with_unit(
            "send_lag",
            "Actual send time minus intended send time",
            Unit::Seconds,
            send_lag.clone(),
        );
        let in_flight = Gauge::default();
        registry.register("requests_in_flight", "Requests in flight now", in_flight.clone());
        let open = Gauge::default();
        registry.register("connections_open", "Connections open now", open.clone());
        let shard_cpu = Family::<ShardLabel, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "shard_cpu_ratio",
            "CPU of each shard thread over the last second, in cores",
            shard_cpu.clone(),
        );
        for shard in 0..plan.threads {
            let _ = shard_cpu.get_or_create(&ShardLabel { shard: shard.to_string() });
        }
        let (runqueue_p99, lost) = if probes {
            let g = Gauge::<f64, AtomicU64>::default();
            registry.register_with_unit(
                "runqueue_delay_p99",
                "Run-queue delay p99 of the shard threads over the last second (eBPF probes)",
                Unit::Seconds,
                g.clone(),
            );
            let c = Counter::default();
            registry.register("probe_lost_events", "Events the eBPF probes lost", c.clone());
            (Some(g), Some(c))
        } else {
            (None, None)
        };
        let phase = Family::<PhaseLabel, Gauge>::default();
        registry.register("phase", "1 for the phase running now, 0 for the others", phase.clone());
        let phases: Vec<PhaseLabel> = plan
            .phases
            .iter()
            .map(|p| PhaseLabel { phase: p.name.clone(), kind: p.kind.as_str().to_string() })
            .collect();
        for label in &phases {
            let _ = phase.get_or_create(label);
        }
        let emergency_stop = Gauge::default();
        registry.register("emergency_stop", "1 once the emergency stop has halted sending", emergency_stop.clone());
        let finished = Gauge::default();
        registry.register("run_finished", "1 once the run has ended: the counts are final", finished.clone());
        LiveMetrics {
            registry,
            offered,
            sent,
            ok,
            errors,
            late,
            late_unpooled,
            sent_ahead,
            latency,
            send_lag,
            in_flight,
            open,
            shard_cpu,
            runqueue_p99,
            lost,
            phase,
            phases,
            emergency_stop,
            finished,
            parts: vec![vec![None; plan.phases.len()]; plan.threads],
        }
    }

    /// Take in a shard's fresh copy of one phase.
    pub fn absorb(&mut self, shard: usize, phase: usize, copy: &PhaseCopy) {
        if let Some(slot) = self.parts.get_mut(shard).and_then(|s| s.get_mut(phase)) {
            *slot = Some(Part::from_copy(copy));
        }
    }

    /// Between seconds: the totals of the copies taken in so far, what the schedule offered
    /// until now, and the levels now. The per-second figures (CPU, run-queue delay, lost
    /// events, the phase) wait for [`LiveMetrics::second`].
    pub fn refresh(&mut self, offered: u64, in_flight: u64, open: u64) {
        self.publish_parts();
        self.offered.inner().fetch_max(offered, std::sync::atomic::Ordering::Relaxed);
        self.in_flight.set(in_flight as i64);
        self.open.set(open as i64);
    }

    /// The end of one second: [`LiveMetrics::refresh`], and `tick`'s per-second figures.
    pub fn second(&mut self, tick: &Tick<'_>) {
        self.refresh(tick.offered, tick.in_flight, tick.open);
        for (shard, pct) in tick.cpu_pct.iter().enumerate() {
            self.shard_cpu.get_or_create(&ShardLabel { shard: shard.to_string() }).set(pct / 100.0);
        }
        for (i, label) in self.phases.iter().enumerate() {
            self.phase.get_or_create(label).set(i64::from(tick.phase == Some(i)));
        }
        if let (Some(g), Some(p99)) = (&self.runqueue_p99, tick.runqueue_p99_us) {
            g.set(p99 / 1e6);
        }
        if let Some(c) = &self.lost {
            c.inc_by(tick.lost);
        }
        self.emergency_stop.set(i64::from(tick.emergency_stop));
    }

    /// The run has ended: every count from the merged `record` (what `summary.json` is built
    /// from), `offered` = the plan's requests, the probes' lost events from their final
    /// reading; no phase runs any more.
    pub fn finish(&mut self, record: &ShardRecord, offered: u64, lost: Option<u64>) {
        let merged = record.phases.iter().map(|p| Some(Part::from_record(p))).collect();
        self.parts = vec![merged];
        self.publish_parts();
        self.offered.inner().store(offered, std::sync::atomic::Ordering::Relaxed);
        if let (Some(c), Some(total)) = (&self.lost, lost) {
            c.inner().fetch_max(total, std::sync::atomic::Ordering::Relaxed);
        }
        self.in_flight.set(0);
        self.open.set(0);
        for label in &self.phases {
            self.phase.get_or_create(label).set(0);
        }
        self.finished.set(1);
    }

    /// Set the counts and histograms to the sums over the parts. Each part only grows from
    /// one copy to the next (and the merged record holds every copy), so no count goes down.
    fn publish_parts(&self) {
        let parts = || self.parts.iter().flatten().flatten();
        let set = |c: &Counter, v: u64| c.inner().store(v, std::sync::atomic::Ordering::Relaxed);
        set(&self.sent, parts().map(|p| p.sent).sum());
        set(&self.ok, parts().map(|p| p.ok).sum());
        set(&self.late, parts().map(|p| p.late).sum());
        set(&self.late_unpooled, parts().map(|p| p.late_unpooled).sum());
        set(&self.sent_ahead, parts().map(|p| p.sent_ahead).sum());
        for class in ErrorClass::ALL {
            let n = parts().map(|p| p.errors[class as usize]).sum();
            set(&self.errors.get_or_create(&ClassLabel { class: class.as_str().to_string() }), n);
        }
        self.latency.set(parts().map(|p| &p.latency));
        self.send_lag.set(parts().map(|p| &p.send_lag));
    }

    /// Both text formats of the metrics as they are now.
    pub fn render(&self) -> Exposition {
        Exposition::of(&self.registry)
    }
}

#[cfg(test)]
mod tests;
