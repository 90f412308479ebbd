//! Feeding the live metrics endpoint (`--metrics`) from the main loop: every [`REFRESH`]
//! the shards' copies of their records, the offered count and the levels; once a second also
//! CPU, the probes' last sample, the emergency stop — each time one rendering handed to the
//! endpoint.
//!
//! Not here: the metrics themselves and the endpoint (`report::metrics`), the copies'
//! hand-over (`record::LiveCopies`), the final values (`measure`, from the merged record).

use std::sync::Arc;
use std::time::Duration;

use crate::probes::Probes;
use crate::record::LiveCopies;
use crate::report::metrics::{Endpoint, LiveMetrics, Tick};
use crate::scenario::Plan;
use crate::summary;

use super::meters::LiveTotals;

/// How often the endpoint's counts are brought up to the shards' copies (which they make as
/// often, `record::LIVE_COPY_PERIOD_NS`).
pub(super) const REFRESH: Duration = Duration::from_nanos(crate::record::LIVE_COPY_PERIOD_NS);

/// The run's metrics and where they come from and go.
pub(super) struct MetricsFeed<'a> {
    endpoint: &'a Endpoint,
    metrics: LiveMetrics,
    /// One hand-over point per shard.
    copies: Vec<Arc<LiveCopies>>,
}

impl<'a> MetricsFeed<'a> {
    /// Metrics of a run of `plan` on `endpoint`; `probes`: the probes run.
    pub fn new(endpoint: &'a Endpoint, plan: &Plan, probes: bool) -> Self {
        let copies = (0..plan.threads).map(|_| Arc::new(LiveCopies::default())).collect();
        let feed = MetricsFeed { endpoint, metrics: LiveMetrics::new(plan, probes), copies };
        // A scrape before the first second shows the run's metrics at zero, not the last run's.
        endpoint.publish(feed.metrics.render());
        feed
    }

    /// Shard `shard`'s hand-over point, for its config.
    pub fn copies_for(&self, shard: usize) -> Option<Arc<LiveCopies>> {
        self.copies.get(shard).cloned()
    }

    /// Between seconds, `at` after the run's zero: take the fresh copies, the offered count
    /// and the levels, publish (the main loop calls it every [`REFRESH`]).
    pub fn refresh(&mut self, plan: &Plan, at: Duration, totals: &LiveTotals) {
        self.take_copies();
        let offered = summary::offered_between(plan, 0, at.as_nanos() as u64);
        self.metrics.refresh(offered, totals.in_flight, totals.open);
        self.endpoint.publish(self.metrics.render());
    }

    fn take_copies(&mut self) {
        for (shard, copies) in self.copies.iter().enumerate() {
            copies.take_fresh(|phase, copy| self.metrics.absorb(shard, phase, copy));
        }
    }

    /// The second ending `at` after the run's zero: take the fresh copies, set the gauges,
    /// publish.
    pub fn second(
        &mut self,
        plan: &Plan,
        at: Duration,
        totals: &LiveTotals,
        cpu_pct: &[f64],
        probes: Option<&Probes>,
        emergency_stop: bool,
    ) {
        self.take_copies();
        let sample = probes.and_then(|p| p.series().last());
        self.metrics.second(&Tick {
            offered: summary::offered_between(plan, 0, at.as_nanos() as u64),
            in_flight: totals.in_flight,
            open: totals.open,
            cpu_pct,
            phase: plan.phase_index_at(at),
            runqueue_p99_us: sample.and_then(|s| s.runqueue_p99_us),
            lost: sample.map_or(0, |s| s.lost),
            emergency_stop,
        });
        self.endpoint.publish(self.metrics.render());
    }

    /// The metrics, for their final values once the record is merged.
    pub fn into_metrics(self) -> (LiveMetrics, &'a Endpoint) {
        (self.metrics, self.endpoint)
    }
}
