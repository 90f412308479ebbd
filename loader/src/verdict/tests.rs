use super::*;
use crate::cli::RunArgs;
use crate::record::ShardRecord;
use crate::report::summary::{self, HealthSummary, ProbeSummary, Resets, RunQueueUs};
use crate::scenario::{Plan, Spec};

/// A clean run: 100 req/s for 2 s, all answered on time, probes on.
fn clean() -> Summary {
    let a = RunArgs {
        url: Some("http://127.0.0.1:9/".into()),
        rate: Some(100.0),
        duration: Some("2s".into()),
        ..Default::default()
    };
    let plan = Plan::resolve(&Spec::from_run_args(&a).unwrap(), "http://127.0.0.1:9/").unwrap();
    let mut rec = ShardRecord::new(plan.phases.iter().map(|p| p.window()).collect(), 3);
    for i in 0..200u64 {
        let t = i * 10_000_000;
        rec.on_send(0, t, t + 20_000, false, 1);
        rec.on_response(0, t, t + 20_000, t + 120_000, 200);
    }
    rec.connections_opened = 64;
    summary::build(&summary::Inputs {
        plan: &plan,
        record: &rec,
        interrupted: false,
        elapsed_s: 2.0,
        started_at: "2026-11-30T00:00:00Z".into(),
        probes: ProbeSummary { available: true, ..Default::default() },
        cpu: &[10.0, 12.0],
        rss_mib: (None, None, None),
        health: HealthSummary::default(),
    })
}

/// [`clean`] with 2000 sends, enough for its p99s to be compared.
fn big_clean() -> Summary {
    let mut s = clean();
    s.phases[0].sent = 2000;
    s
}

fn codes(v: &Verdict) -> Vec<&str> {
    v.reasons.iter().map(|r| r.code.as_str()).collect()
}

#[test]
fn a_clean_run_is_trusted_with_no_reasons() {
    let v = judge(&clean(), &Limits::default());
    assert_eq!(v.trusted, Some(true));
    assert!(v.reasons.is_empty(), "{:?}", codes(&v));
}

#[test]
fn loader_cpu_and_run_queue_invalidate_on_the_loader_side() {
    let mut s = clean();
    s.loader.cpu_p95 = Some(85.0);
    s.probes.runqueue_us = Some(RunQueueUs { p50: 20.0, p99: 2500.0, max: 9000.0 });
    let v = judge(&s, &Limits::default());
    assert_eq!(v.trusted, Some(false));
    assert_eq!(codes(&v), ["loader_cpu", "runqueue_delay"]);
    assert!(v.reasons.iter().all(|r| r.side == LOADER && r.invalidates));
    // A looser limit re-judges the same run as trusted.
    let loose = Limits { cpu_p95_pct: 90.0, runqueue_p99_ms: 5.0, loader_delay_pct: 100.0, ..Limits::default() };
    assert_eq!(judge(&s, &loose).trusted, Some(true));
}

#[test]
fn the_loaders_own_delay_invalidates_when_it_is_a_material_part_of_the_tail() {
    // Send lag p99 1.0 ms against a latency p99 of 1.6 ms (busy loops on every core).
    let mut s = big_clean();
    s.phases[0].send_lag_ms.p99 = 1.0;
    s.phases[0].latency_ms.p99 = 1.6;
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(false), vec!["send_lag"]));
    assert_eq!((v.reasons[0].side.as_str(), v.reasons[0].limit), (LOADER, Some(0.4)));
    // Not when the lag is waiting for connections (a slow or stalled target's story) …
    s.phases[0].waited_for_connection = 20;
    assert_eq!(judge(&s, &Limits::default()).trusted, Some(true));
    // … nor below the noise floor, nor when it is a small share of the tail, nor when off.
    let mut s = big_clean();
    s.phases[0].send_lag_ms.p99 = 0.2;
    s.phases[0].latency_ms.p99 = 0.3;
    assert!(judge(&s, &Limits::default()).reasons.is_empty());
    s.phases[0].send_lag_ms.p99 = 1.0;
    s.phases[0].latency_ms.p99 = 5.0;
    assert!(judge(&s, &Limits::default()).reasons.is_empty());
    s.phases[0].latency_ms.p99 = 1.6;
    assert!(judge(&s, &Limits { loader_delay_pct: 100.0, ..Limits::default() }).reasons.is_empty());

    // Run-queue delay p99 0.43 ms against the fastest phase's latency p99 of 1.2 ms.
    let mut s = big_clean();
    s.phases[0].latency_ms.p99 = 1.2;
    s.probes.runqueue_us = Some(RunQueueUs { p50: 6.0, p99: 430.0, max: 8000.0 });
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(false), vec!["runqueue_delay"]));
    assert!(v.reasons[0].detail.contains("material"), "{}", v.reasons[0].detail);
    // Under 1000 sends a p99 is one or two samples: the relative rules do not apply.
    s.phases[0].sent = 200;
    assert!(judge(&s, &Limits::default()).reasons.is_empty());
    s.phases[0].sent = 2000;
    // A clean run's 0.05 ms is noise, whatever the latency.
    s.probes.runqueue_us = Some(RunQueueUs { p50: 6.0, p99: 50.0, max: 2000.0 });
    s.phases[0].latency_ms.p99 = 0.12;
    assert!(judge(&s, &Limits::default()).reasons.is_empty());
}

#[test]
fn late_sends_split_by_cause() {
    // Late with a connection free: the loader fell behind → untrusted.
    let mut s = clean();
    s.phases[0].late = 30;
    s.phases[0].late_unpooled = 30;
    let v = judge(&s, &Limits::default());
    assert_eq!(v.trusted, Some(false));
    assert_eq!(codes(&v), ["late_sends"]);
    // Three late sends of 200 (1.5 %) invalidate; of 20000 (0.015 %) they are noted.
    s.phases[0].late = 3;
    s.phases[0].late_unpooled = 3;
    assert_eq!(judge(&s, &Limits::default()).trusted, Some(false));
    s.phases[0].sent = 20_000;
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(true), vec!["late_sends"]));
    assert!(!v.reasons[0].invalidates);
    // One or two isolated ones (a host pause) are noted at any share: 1 of 20 sends is 5 %.
    s.phases[0].sent = 20;
    for n in [1, 2] {
        s.phases[0].late = n;
        s.phases[0].late_unpooled = n;
        let v = judge(&s, &Limits::default());
        assert_eq!((v.trusted, codes(&v)), (Some(true), vec!["late_sends"]), "{n} late of 20");
    }
    // Late only because the pool was exhausted by a stalled target → annotated, trusted.
    let mut s = clean();
    s.phases[0].late = 900;
    s.phases[0].waited_for_connection = 950;
    s.phases[0].send_lag_ms.p99 = 800.0;
    let v = judge(&s, &Limits::default());
    assert_eq!(v.trusted, Some(true));
    assert_eq!(codes(&v), ["pool_exhausted"]);
    assert_eq!(v.reasons[0].side, TARGET);
}

#[test]
fn network_and_target_evidence_annotates_without_invalidating() {
    let mut s = clean();
    s.probes.syn_retransmits = Some(3);
    s.probes.resets = Some(Resets { sent: 0, received: 2 });
    let v = judge(&s, &Limits::default());
    assert_eq!(v.trusted, Some(true));
    let sides: Vec<(&str, &str)> = v.reasons.iter().map(|r| (r.code.as_str(), r.side.as_str())).collect();
    assert_eq!(sides, [("syn_retransmits", NETWORK), ("resets_received", TARGET)]);
}

#[test]
fn machine_limits_from_proc_invalidate() {
    let mut s = clean();
    s.health.peaks.time_wait_max = Some(12_000);
    s.health.peaks.ephemeral_ports_max_ratio = Some(0.75);
    s.health.peaks.fds_max_ratio = Some(0.9);
    let v = judge(&s, &Limits::default());
    assert_eq!(codes(&v), ["time_wait", "ephemeral_ports", "fds"]);
    assert_eq!(v.trusted, Some(false));
}

#[test]
fn missing_probes_are_said_but_do_not_invalidate() {
    let mut s = clean();
    s.probes = ProbeSummary { available: false, unavailable_reason: Some("not root".into()), ..Default::default() };
    let v = judge(&s, &Limits::default());
    assert_eq!(v.trusted, Some(true));
    assert_eq!(codes(&v), ["probes_unavailable"]);
    assert!(v.reasons[0].detail.contains("not root"));
}

#[test]
fn churn_on_a_keepalive_run_is_annotated() {
    let mut s = clean();
    s.run.connections_opened = 1000;
    let v = judge(&s, &Limits::default());
    assert_eq!(codes(&v), ["connection_churn"]);
    s.run.keepalive = false;
    assert!(judge(&s, &Limits::default()).reasons.is_empty(), "no keep-alive: churn is the plan");
}

#[test]
fn tls_handshakes_are_named_when_they_crowd_out_the_loader() {
    let mut s = clean();
    s.tls = Some(crate::report::summary::TlsSummary { handshakes: 200, resumed: 190, ..Default::default() });
    // Handshakes on every request, but the loader had CPU to spare: nothing to say.
    assert!(judge(&s, &Limits::default()).reasons.is_empty());
    // The same with the loader short of CPU: the handshakes are named, on the loader side.
    s.loader.cpu_p95 = Some(90.0);
    let v = judge(&s, &Limits::default());
    assert_eq!(codes(&v), ["loader_cpu", "tls_handshakes"]);
    assert!(v.reasons[1].side == LOADER && v.reasons[1].invalidates);
    // With connections reused (few handshakes), CPU trouble is not blamed on TLS.
    s.tls = Some(crate::report::summary::TlsSummary { handshakes: 8, ..Default::default() });
    assert_eq!(codes(&judge(&s, &Limits::default())), ["loader_cpu"]);
}
