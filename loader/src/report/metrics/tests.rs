//! The text encoding: names, types, labels, and the final values' source.

use super::*;
use crate::cli::RunArgs;
use crate::record::LiveCopies;
use crate::scenario::Spec;

fn plan() -> Plan {
    let a = RunArgs {
        url: Some("http://127.0.0.1:9/".into()),
        rate: Some(10.0),
        duration: Some("2s".into()),
        warmup: Some("1s".into()),
        threads: Some(2),
        ..Default::default()
    };
    Plan::resolve(&Spec::from_run_args(&a).unwrap(), "http://127.0.0.1:9/").unwrap()
}

fn record(plan: &Plan) -> ShardRecord {
    ShardRecord::new(plan.phases.iter().map(|p| p.window()).collect(), 4)
}

/// The sample line `name` (with its labels, if any) of `text`, its value parsed.
fn sample(text: &str, name: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.rsplit_once(' ').is_some_and(|(n, _)| n == name))
        .unwrap_or_else(|| panic!("no sample {name} in\n{text}"));
    line.rsplit_once(' ').unwrap().1.parse().unwrap()
}

#[test]
fn openmetrics_names_types_and_labels() {
    let plan = plan();
    let mut m = LiveMetrics::new(&plan, true);
    let mut r = record(&plan);
    r.on_send(1, 1_000_000_000, 1_000_100_000, 0, false, 1);
    r.on_response(1, 1_000_000_000, 1_000_100_000, 1_003_000_000, 200);
    // Sent 50 µs ahead of its time: 2.05 ms from when it left.
    r.on_send(1, 1_100_000_000, 1_099_950_000, 0, false, 1);
    r.on_response(1, 1_100_000_000, 1_099_950_000, 1_102_000_000, 503);
    let copies = LiveCopies::default();
    assert!(copies.copy_from(&r));
    copies.take_fresh(|phase, c| m.absorb(1, phase, c));
    m.second(&Tick {
        offered: 12,
        in_flight: 3,
        open: 4,
        cpu_pct: &[25.0, 50.0],
        phase: Some(1),
        runqueue_p99_us: Some(250.0),
        lost: 2,
        emergency_stop: false,
    });
    let om = m.render().openmetrics;
    for type_line in [
        "# TYPE loader_requests_offered counter",
        "# TYPE loader_requests_sent counter",
        "# TYPE loader_requests_ok counter",
        "# TYPE loader_request_errors counter",
        "# TYPE loader_late_sends counter",
        "# TYPE loader_late_sends_unpooled counter",
        "# TYPE loader_sends_ahead counter",
        "# TYPE loader_latency_seconds histogram",
        "# UNIT loader_latency_seconds seconds",
        "# TYPE loader_send_lag_seconds histogram",
        "# TYPE loader_requests_in_flight gauge",
        "# TYPE loader_connections_open gauge",
        "# TYPE loader_shard_cpu_ratio gauge",
        "# TYPE loader_runqueue_delay_p99_seconds gauge",
        "# TYPE loader_probe_lost_events counter",
        "# TYPE loader_phase gauge",
        "# TYPE loader_emergency_stop gauge",
        "# TYPE loader_run_finished gauge",
    ] {
        assert!(om.lines().any(|l| l == type_line), "missing {type_line:?} in\n{om}");
    }
    assert!(om.ends_with("# EOF\n"));
    assert_eq!(sample(&om, "loader_requests_offered_total"), 12.0);
    assert_eq!(sample(&om, "loader_requests_sent_total"), 2.0);
    assert_eq!(sample(&om, "loader_requests_ok_total"), 1.0);
    assert_eq!(sample(&om, "loader_request_errors_total{class=\"http_5xx\"}"), 1.0);
    assert_eq!(sample(&om, "loader_request_errors_total{class=\"timeout\"}"), 0.0, "every class is shown");
    assert_eq!(sample(&om, "loader_latency_seconds_count"), 2.0);
    assert_eq!(sample(&om, "loader_latency_seconds_bucket{le=\"0.0025\"}"), 1.0, "2 ms");
    assert_eq!(sample(&om, "loader_latency_seconds_bucket{le=\"0.005\"}"), 2.0, "cumulative: 2 and 3 ms");
    assert_eq!(sample(&om, "loader_latency_seconds_bucket{le=\"+Inf\"}"), 2.0);
    assert!((sample(&om, "loader_latency_seconds_sum") - 0.00505).abs() < 1e-5);
    assert_eq!(sample(&om, "loader_sends_ahead_total"), 1.0);
    assert_eq!(sample(&om, "loader_send_lag_seconds_bucket{le=\"0.0001\"}"), 2.0, "0 and 100 µs");
    assert_eq!(sample(&om, "loader_requests_in_flight"), 3.0);
    assert_eq!(sample(&om, "loader_shard_cpu_ratio{shard=\"1\"}"), 0.5);
    assert_eq!(sample(&om, "loader_runqueue_delay_p99_seconds"), 0.00025);
    assert_eq!(sample(&om, "loader_probe_lost_events_total"), 2.0);
    assert_eq!(sample(&om, "loader_phase{phase=\"main\",kind=\"hold\"}"), 1.0);
    assert_eq!(sample(&om, "loader_phase{phase=\"warmup\",kind=\"warmup\"}"), 0.0);
    assert_eq!(sample(&om, "loader_run_finished"), 0.0);

    let text = m.render().prometheus;
    assert!(text.lines().any(|l| l == "# TYPE loader_requests_sent_total counter"), "{text}");
    assert!(!text.contains("# EOF") && !text.contains("# UNIT"), "{text}");
    assert_eq!(sample(&text, "loader_requests_sent_total"), 2.0);
}

#[test]
fn final_values_come_from_the_merged_record_and_never_go_down() {
    let plan = plan();
    let mut m = LiveMetrics::new(&plan, false);
    let mut shards = [record(&plan), record(&plan)];
    for (k, r) in shards.iter_mut().enumerate() {
        for i in 0..5u64 {
            let t = 1_000_000_000 + i * 100_000_000 + k as u64;
            r.on_send(1, t, t, 0, false, 1);
            r.on_response(1, t, t, t + 1_000_000, 200);
        }
    }
    let copies = LiveCopies::default();
    assert!(copies.copy_from(&shards[0]));
    copies.take_fresh(|phase, c| m.absorb(0, phase, c));
    m.second(&Tick::default());
    assert_eq!(sample(&m.render().openmetrics, "loader_requests_sent_total"), 5.0, "shard 1 not copied yet");
    // After the copy, shard 1 goes on: the merge holds more than any copy.
    shards[1].on_failure(1, 2_000_000_000, 2_500_000_000, ErrorClass::Timeout, "late".into());
    let mut merged = shards[0].clone();
    merged.merge(&shards[1]);
    m.finish(&merged, 31, None);
    let om = m.render().openmetrics;
    assert_eq!(sample(&om, "loader_requests_sent_total"), 10.0);
    assert_eq!(sample(&om, "loader_requests_ok_total"), 10.0);
    assert_eq!(sample(&om, "loader_request_errors_total{class=\"timeout\"}"), 1.0);
    assert_eq!(sample(&om, "loader_latency_seconds_count"), 11.0, "timeouts enter latency at the deadline");
    assert_eq!(sample(&om, "loader_requests_offered_total"), 31.0);
    assert_eq!(sample(&om, "loader_run_finished"), 1.0);
    assert!(!om.contains("loader_probe_lost_events"), "no probes, no probe metrics");
}
