//! [`build`]: the summary from the plan that ran and the shards' merged record — rates over
//! the time each phase actually ran, percentiles from the histograms, the loader's CPU per
//! shard. The verdict, analysis and certificate fields are left for the later stages.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

use super::*;
use crate::record::{ErrorClass, PhaseRecord, ShardRecord, TlsRecord};
use crate::scenario::Plan;
use crate::schedule::Think;

/// Microseconds (histogram unit) to milliseconds; exact to the microsecond.
fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// A histogram of µs as the summary's latency percentiles (ms).
pub fn latency(h: &Histogram<u64>) -> LatencyMs {
    let q = |q: f64| if h.is_empty() { 0.0 } else { ms(h.value_at_quantile(q)) };
    LatencyMs {
        p50: q(0.50),
        p90: q(0.90),
        p95: q(0.95),
        p99: q(0.99),
        p999: q(0.999),
        max: if h.is_empty() { 0.0 } else { ms(h.max()) },
        mean: (h.mean() / 1000.0 * 1000.0).round() / 1000.0,
        count: h.len(),
    }
}

/// A histogram of µs as the summary's send-lag percentiles (ms).
pub fn send_lag(h: &Histogram<u64>) -> SendLagMs {
    let q = |q: f64| if h.is_empty() { 0.0 } else { ms(h.value_at_quantile(q)) };
    SendLagMs { p50: q(0.5), p99: q(0.99), p999: q(0.999), max: if h.is_empty() { 0.0 } else { ms(h.max()) } }
}

fn tls(t: &TlsRecord) -> TlsSummary {
    let lag = send_lag(&t.handshake);
    TlsSummary {
        handshakes: t.handshakes,
        resumed: t.resumed,
        failures: t.failures,
        first_error: t.first_error.clone(),
        handshake_ms: HandshakeMs { p50: lag.p50, p99: lag.p99, max: lag.max },
    }
}

fn errors(p: &PhaseRecord) -> BTreeMap<String, u64> {
    ErrorClass::ALL.iter().map(|&c| (c.as_str().to_string(), p.error(c))).collect()
}

/// Requests planned in `[from_ns, to_ns)` across the plan.
pub fn offered_between(plan: &Plan, from_ns: u64, to_ns: u64) -> u64 {
    plan.phases.iter().map(|ph| ph.window().planned_between(from_ns, to_ns)).sum()
}

/// Requests offered in `[from_ns, to_ns)`, in which `sent` were sent: the plan's
/// ([`offered_between`]), or a closed run's `sent` — its users offered what they sent.
pub fn offered_in(plan: &Plan, from_ns: u64, to_ns: u64, sent: u64) -> u64 {
    if plan.think().is_some() { sent } else { offered_between(plan, from_ns, to_ns) }
}

/// Everything the summary is built from.
#[derive(Debug)]
pub struct Inputs<'a> {
    /// The plan that ran.
    pub plan: &'a Plan,
    /// Merged record of all shards.
    pub record: &'a ShardRecord,
    /// The run was interrupted.
    pub interrupted: bool,
    /// Seconds the plan actually covered (less than planned if interrupted).
    pub elapsed_s: f64,
    /// Run start, RFC 3339.
    pub started_at: String,
    /// Probe figures.
    pub probes: ProbeSummary,
    /// Per second, each shard's CPU (percent of one core).
    pub cpu: &'a [Vec<f64>],
    /// Resident memory: at the first second, at the end, peak (MiB).
    pub rss_mib: (Option<f64>, Option<f64>, Option<f64>),
    /// `/proc` and cgroup health.
    pub health: HealthSummary,
    /// When the run stopped (seconds since start), if it stopped before its plan ended.
    pub stopped_at_s: Option<f64>,
}

/// Build the summary.
pub fn build(inp: &Inputs<'_>) -> Summary {
    let plan = inp.plan;
    let rec = inp.record;
    let mut phases: Vec<PhaseSummary> = plan
        .phases
        .iter()
        .zip(&rec.phases)
        .map(|(ph, r)| {
            let (start, secs) = (ph.start.as_secs_f64(), ph.duration.as_secs_f64());
            // A stopped run covers its phases only up to the stop: rates per second that ran.
            let measured = inp.stopped_at_s.map_or(secs, |at| (at - start).clamp(0.0, secs));
            let per_s = |n: u64| if measured > 0.0 { round2(n as f64 / measured) } else { 0.0 };
            // Answers kept coming after the stop, while the shards waited for them: a cut
            // step's answers are counted over the time they were (else ok/s reads the earlier
            // steps' backlog, answered during the wait, as this one's rate: 294 ok/s from a
            // target of 200).
            let answered = inp.stopped_at_s.map_or(secs, |_| (inp.elapsed_s - start).clamp(0.0, secs));
            let ok_per_s = |n: u64| if answered > 0.0 { round2(n as f64 / answered) } else { 0.0 };
            PhaseSummary {
                watch: BTreeMap::new(),
                name: ph.name.clone(),
                kind: ph.kind.as_str().to_string(),
                start_s: start,
                duration_s: secs,
                measured_s: Some(round2(measured)),
                offered_rps: ph.offered(),
                closed: None,
                sent_rps: per_s(r.sent_in_window),
                ok_rps: ok_per_s(r.ok_in_window),
                // A closed run plans no count: its users started what they finished.
                requests: if ph.users > 0 { r.finished() } else { ph.window().planned() },
                sent: r.sent,
                ok: r.ok,
                errors: errors(r),
                grpc: r
                    .grpc
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| **n > 0)
                    .map(|(code, n)| (crate::record::grpc::code_name(code).to_string(), *n))
                    .collect(),
                late: r.late,
                late_unpooled: r.late_unpooled,
                late_unpooled_max_ms: (r.late_unpooled > 0).then(|| r.late_unpooled_max_us as f64 / 1000.0),
                waited_for_connection: r.waited_for_connection,
                waited_on_loader: r.waited_on_loader,
                late_after_end: r.late_after_end,
                due_unsent: r.due_unsent,
                due_unsent_loader: r.due_unsent_loader,
                dropped_loader: r.dropped_loader,
                read_lag_ms: (!r.read_lag.is_empty()).then(|| latency(&r.read_lag)),
                sent_ahead: r.sent_ahead,
                latency_ms: latency(&r.latency),
                service_ms: latency(&r.service),
                send_lag_ms: send_lag(&r.send_lag),
                own_lag_ms: Some(send_lag(&r.own_lag)),
                wake_late_us: wake_late(&r.wake_lateness),
                passed: None,
                fail_reasons: Vec::new(),
            }
        })
        .collect();
    let closed = plan.think().map(|think| {
        let users: Vec<u32> = plan.phases.iter().map(|p| p.users).collect();
        let think_ms = think.mean_ns() as f64 / 1e6;
        let per_user_rps = super::closed::fill(&mut phases, &users, think_ms);
        let seed = match plan.profile {
            crate::scenario::Profile::Closed { seed, .. } if matches!(think, Think::Exponential(_)) => Some(seed),
            _ => None,
        };
        ClosedRun { users_max: plan.profile.max_users(), think: think.law().into(), think_ms, seed, per_user_rps }
    });
    let series = rec
        .seconds
        .iter()
        .enumerate()
        .map(|(t, s)| SecondSummary {
            t: t as u64,
            offered: offered_in(plan, t as u64 * 1_000_000_000, (t as u64 + 1) * 1_000_000_000, u64::from(s.sent)),
            sent: u64::from(s.sent),
            ok: u64::from(s.ok),
            errors: ErrorClass::ALL
                .iter()
                .filter(|&&c| s.errors[c as usize] > 0)
                .map(|&c| (c.as_str().to_string(), u64::from(s.errors[c as usize])))
                .collect(),
            in_flight_max: u64::from(s.in_flight_max),
            late_loader: u64::from(s.late_loader),
            cpu: inp.cpu.get(t).map(|shards| round2(shards.iter().copied().fold(0.0, f64::max))),
            closed_on_timeout: u64::from(s.closes.on_timeout),
            closed_by_target: u64::from(s.closes.by_target),
            connect_no_port: u64::from(s.connect_no_port),
            latency_ms: second_latency(&s.latency),
        })
        .collect();
    let shards = inp.cpu.iter().map(Vec::len).max().unwrap_or(0);
    let cpu_p95_by_shard: Vec<f64> = (0..shards)
        .filter_map(|k| cpu_stats(&inp.cpu.iter().filter_map(|s| s.get(k).copied()).collect::<Vec<_>>()).0)
        .collect();
    let cpu_p95 = cpu_p95_by_shard.iter().copied().reduce(f64::max);
    let cpu_max = inp.cpu.iter().flatten().copied().reduce(f64::max).map(round2);
    Summary {
        watch: None,
        schema: SCHEMA.to_string(),
        interrupted: inp.interrupted,
        interrupted_by: None,
        failure: None,
        run: RunInfo {
            url: plan.target.url.clone(),
            started_at: inp.started_at.clone(),
            elapsed_s: round2(inp.elapsed_s),
            connections: plan.connections,
            threads: plan.threads,
            timeout_s: plan.timeout.as_secs_f64(),
            keepalive: plan.keepalive,
            protocol: if plan.http2.is_some() { "h2" } else { "http/1.1" }.to_string(),
            max_streams: plan.http2.unwrap_or(0),
            cpu_dma_latency_us: None,
            cpuidle_driver: None,
            virtual_machine: None,
            profile: plan.profile_kind().as_str().to_string(),
            arrival: if closed.is_some() { "closed".into() } else { plan.spec.arrival.name().into() },
            arrival_seed: plan.spec.arrival.seed(),
            closed,
            connections_opened: rec.connections_opened,
            connect_failures: rec.connect_failures,
            deadline_while_connecting: rec.deadline_while_connecting,
            retried_on_stale_connection: rec.retried_on_stale_connection,
            stamps_by_segment: rec.stamps_by_segment,
            segment_follow_lost: rec.segment_follow_lost,
            abandoned: rec.abandoned,
            closed_on_timeout: rec.closes.on_timeout,
            closed_by_target: rec.closes.by_target,
            connect_no_port: rec.connect_no_port,
            wake_window_us: plan.pace().batch_ns as f64 / 1000.0,
            wake_window_adaptive: plan.pace().adaptive,
            send_ahead_us: plan.pace().ahead_ns as f64 / 1000.0,
            loader_version: env!("CARGO_PKG_VERSION").to_string(),
            command_line: Vec::new(),
            shard: plan
                .phases
                .first()
                .filter(|p| !p.share.is_whole())
                .map(|p| super::ShardInfo { index: p.share.index, count: p.share.count }),
            zero_unix_s: None,
            clock: super::ClockState::read(),
            last_send_s: None,
            stop_requested_unix_s: None,
            checkpoint: None,
        },
        machine: None,
        verdict: Verdict::default(),
        phases,
        knee: None,
        cliff: None,
        analysis: AnalysisSummary::default(),
        capacity: None,
        preflight: None,
        probes: inp.probes.clone(),
        tls: plan.target.tls.is_some().then(|| tls(&rec.tls)),
        data: plan.data.as_ref().map(|d| super::data::of(d, &rec.rows)),
        loader: LoaderSummary {
            cpu_p95,
            cpu_max,
            cpu_p95_by_shard,
            wake_late_us: wake_late(&rec.wake_lateness),
            certificate: None,
            rss_mib_start: inp.rss_mib.0,
            rss_mib_end: inp.rss_mib.1,
            rss_mib_peak: inp.rss_mib.2,
        },
        series,
        health: inp.health.clone(),
        errors_detail: errors_detail(&rec.details),
        merged: None,
    }
}

/// A second's latency figures in ms, rounded to the µs; `None` for a second without any.
fn second_latency(l: &crate::record::SecondLatency) -> Option<SecondLatencyMs> {
    let q = |q: f64| l.quantile_us(q).map(|us| us.round() / 1000.0);
    Some(SecondLatencyMs { p50: q(0.5)?, p99: q(0.99)?, max: ms(l.max_us()) })
}

fn wake_late(h: &Histogram<u64>) -> Option<WakeLateUs> {
    (!h.is_empty()).then(|| WakeLateUs {
        p50: h.value_at_quantile(0.5) as f64,
        p90: h.value_at_quantile(0.9) as f64,
        p99: h.value_at_quantile(0.99) as f64,
        max: h.max() as f64,
        count: h.len(),
    })
}

fn errors_detail(d: &crate::record::ErrorDetail) -> BTreeMap<String, Vec<ErrorMessage>> {
    ErrorClass::ALL
        .iter()
        .zip(&d.by_class)
        .filter(|(_, list)| !list.is_empty())
        .map(|(class, list)| {
            let mut messages: Vec<_> =
                list.iter().map(|(m, n)| ErrorMessage { message: m.to_string(), count: *n }).collect();
            // The most frequent first: the first lines account for most of the class.
            messages.sort_by_key(|m| std::cmp::Reverse(m.count));
            (class.as_str().to_string(), messages)
        })
        .collect()
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The p95 (nearest rank) and max of per-second CPU samples, rounded to 0.01.
pub(crate) fn cpu_stats(samples: &[f64]) -> (Option<f64>, Option<f64>) {
    if samples.is_empty() {
        return (None, None);
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let idx = ((sorted.len() as f64 * 0.95).ceil() as usize).clamp(1, sorted.len()) - 1;
    (Some(round2(sorted[idx])), Some(round2(*sorted.last().expect("non-empty"))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::RunArgs;
    use crate::scenario::Spec;

    fn plan() -> Plan {
        let a = RunArgs {
            url: Some("http://127.0.0.1:9/".into()),
            rate: Some(10.0),
            duration: Some("2s".into()),
            warmup: Some("1s".into()),
            ..Default::default()
        };
        Plan::resolve(&Spec::from_run_args(&a).unwrap(), "http://127.0.0.1:9/").unwrap()
    }

    #[test]
    fn offered_per_second_follows_the_plan() {
        let p = plan();
        assert_eq!(offered_between(&p, 0, 1_000_000_000), 10);
        assert_eq!(offered_between(&p, 1_000_000_000, 3_000_000_000), 20);
        assert_eq!(offered_between(&p, 500_000_000, 1_500_000_000), 10);
        assert_eq!(offered_between(&p, 3_000_000_000, 4_000_000_000), 0);
    }

    #[test]
    fn summary_has_the_contract_fields() {
        let p = plan();
        let windows = p.phases.iter().map(|ph| ph.window()).collect();
        let mut rec = ShardRecord::new(windows, 3);
        rec.on_send(1, 1_000_000_000, 1_000_100_000, 0, false, 1);
        rec.on_response(1, 1_000_000_000, 1_000_100_000, 1_002_000_000, 200);
        let s = build(&Inputs {
            plan: &p,
            record: &rec,
            interrupted: false,
            elapsed_s: 3.0,
            started_at: "2026-11-30T00:00:00Z".into(),
            probes: ProbeSummary::default(),
            cpu: &[vec![10.0, 5.0], vec![20.0, 5.0], vec![30.0, 90.0]],
            rss_mib: (Some(3.0), Some(3.5), Some(4.0)),
            health: HealthSummary::default(),
            stopped_at_s: None,
        });
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["schema"], "loader.summary/v1");
        assert!(v["verdict"]["trusted"].is_null() && v["verdict"]["reasons"].is_array());
        let main = &v["phases"][1];
        for key in [
            "name",
            "kind",
            "offered_rps",
            "sent_rps",
            "ok_rps",
            "requests",
            "errors",
            "latency_ms",
            "send_lag_ms",
            "passed",
            "fail_reasons",
        ] {
            assert!(main.get(key).is_some(), "phase field {key}");
        }
        assert_eq!(main["kind"], "hold");
        assert_eq!(main["latency_ms"]["p50"], 2.0);
        assert_eq!(main["errors"]["timeout"], 0);
        assert!(v["knee"].is_null() && v["cliff"].is_null());
        for key in [
            "available",
            "connect_ms",
            "syn_retransmits",
            "resets",
            "time_wait",
            "ephemeral_ports_max_ratio",
            "tls_handshakes",
            "runqueue_us",
            "tcp_states",
        ] {
            assert!(v["probes"].get(key).is_some(), "probes field {key}");
        }
        assert!(v["tls"].is_null(), "http run: no tls section");
        assert_eq!(v["loader"]["cpu_max"], 90.0, "the busiest shard's");
        assert_eq!(v["loader"]["cpu_p95"], 90.0, "one saturated shard of two is saturation");
        assert_eq!(v["series"][2]["cpu"], 90.0);
        assert!(v["series"][0]["latency_ms"].is_null(), "no request completed in the first second");
        let second = &v["series"][1]["latency_ms"];
        assert_eq!(second["max"], 2.0, "the max is exact");
        let p50 = second["p50"].as_f64().unwrap();
        assert!((p50 - 2.0).abs() <= 2.0 * 0.0625, "p50 {p50} within a bucket's half width");
        assert!(v["loader"].get("certificate").is_some());
    }
}
