//! Per-step trust: each step judged on its own seconds — a spell or a starvation that begins in
//! one step spoils that step and the ones it lasts into, never an earlier one; TIME_WAIT left
//! by the target's timeouts is the target's story until ports run short.

use super::*;
use crate::health::HealthSample;
use crate::probes::ProbeSample;

/// Warm-up 2 s, then steps of 100, 200, 300 and 400 req/s held 8 s each (34 s), every request
/// answered in 0.5 ms; each second's CPU, health and probe samples clean.
fn stepped() -> Summary {
    let a = RunArgs {
        url: Some("http://127.0.0.1:9/".into()),
        profile: Some("step".into()),
        steps: Some(vec![100.0, 200.0, 300.0, 400.0]),
        hold: Some("8s".into()),
        warmup: Some("2s".into()),
        ..Default::default()
    };
    let plan = Plan::resolve(&Spec::from_run_args(&a).unwrap(), "http://127.0.0.1:9/").unwrap();
    let mut rec = ShardRecord::new(plan.phases.iter().map(|p| p.window()).collect(), 35);
    for (k, p) in plan.phases.iter().enumerate() {
        let w = p.window();
        let rate = p.rate.max(1.0);
        let n = ((w.end_ns - w.start_ns) as f64 / 1e9 * rate) as u64;
        for i in 0..n {
            let t = w.start_ns + (i as f64 * 1e9 / rate) as u64;
            rec.on_send(k, t, t + 20_000, 0, false, 1);
            rec.on_response(k, t, t + 20_000, t + 500_000, 200);
        }
    }
    rec.connections_opened = 64;
    let cpu: Vec<Vec<f64>> = (0..34).map(|_| vec![12.0]).collect();
    let mut s = summary::build(&summary::Inputs {
        plan: &plan,
        record: &rec,
        interrupted: false,
        elapsed_s: 34.0,
        started_at: "2026-12-07T00:00:00Z".into(),
        probes: ProbeSummary { available: true, ..Default::default() },
        cpu: &cpu,
        rss_mib: (None, None, None),
        health: HealthSummary::default(),
        stopped_at_s: None,
    });
    s.health.series =
        (1..=34).map(|t| HealthSample { t, core_steal_ms: vec![0.0, 0.0], ..Default::default() }).collect();
    s.health.peaks = crate::health::peaks_of(&s.health.series, &[0]);
    s.probes.series = (1..=34)
        .map(|t| ProbeSample {
            t: Some(t),
            elapsed_s: t as f64,
            runqueue_count: 300,
            runqueue_p99_us: Some(9.0),
            runqueue_max_us: Some(40.0),
            runqueue_buckets: vec![[4.0, 5.0, 200.0], [8.0, 10.0, 97.0], [32.0, 40.0, 3.0]],
            time_wait_own: Some(0),
            time_wait_live: Some(0),
            own_ports_ratio: Some(0.002),
            ..Default::default()
        })
        .collect();
    s.probes.runqueue_us =
        Some(RunQueueUs { p50: 4.5, p99: 9.0, max: 40.0, count: 300 * 34, buckets: vec![[4.0, 5.0, 6800.0]] });
    s.probes.time_wait =
        Some(crate::summary::TimeWait { entries: 0, max_live: 0, host_max_live: Some(0), own_choice_max: None });
    s.probes.ephemeral_ports_max_ratio = Some(0.002);
    s
}

fn trusted_steps(v: &Verdict) -> Vec<(&str, bool)> {
    v.steps.iter().map(|t| (t.phase.as_str(), t.trusted)).collect()
}

#[test]
fn a_clean_stepped_run_is_trusted_step_by_step() {
    let v = judge(&stepped(), &Limits::default());
    assert_eq!(v.trusted, Some(true), "{:?}", codes(&v));
    assert_eq!(trusted_steps(&v), [("step 1", true), ("step 2", true), ("step 3", true), ("step 4", true)]);
}

#[test]
fn a_host_spell_in_step_1_spoils_step_1_alone() {
    // Issue 46, finding 3: a spell of the host in one second of step 1 (here 800 ms of the
    // loader's core taken: 80 ms a second over step 1's 10 s, above the 50 that invalidate).
    let mut s = stepped();
    s.health.series[4].core_steal_ms = vec![800.0, 0.0];
    s.health.peaks = crate::health::peaks_of(&s.health.series, &[0]);
    let v = judge(&s, &Limits::default());
    assert_eq!(trusted_steps(&v), [("step 1", false), ("step 2", true), ("step 3", true), ("step 4", true)]);
    assert_eq!(v.steps[0].reasons, ["host_steal"]);
    let steal = v.reasons.iter().find(|r| r.code == "host_steal").unwrap();
    assert!(steal.detail.starts_with("in step 1: "), "{}", steal.detail);
    // Judged over the whole run the spell is diluted: 800 ms in 34 s is under the limit.
    let mut whole = s.clone();
    whole.phases.truncate(2);
    assert!(judge(&whole, &Limits::default()).reasons.iter().all(|r| !r.invalidates || r.code != "host_steal"));
}

#[test]
fn starvation_from_step_3_on_spoils_steps_3_and_4_and_names_the_loader() {
    let mut s = stepped();
    for x in s.probes.series.iter_mut().filter(|x| x.t.unwrap() > 18) {
        x.runqueue_buckets = vec![[4.0, 5.0, 150.0], [16_384.0, 20_480.0, 150.0]];
        x.runqueue_max_us = Some(20_000.0);
    }
    let v = judge(&s, &Limits::default());
    assert_eq!(trusted_steps(&v), [("step 1", true), ("step 2", true), ("step 3", false), ("step 4", false)]);
    let rq = v.reasons.iter().find(|r| r.code == "runqueue_delay").unwrap();
    assert!(rq.invalidates && rq.side == LOADER, "{rq:?}");
    assert!(rq.detail.starts_with("in step 3, step 4: "), "{}", rq.detail);
}

/// Steps 3 and 4 collapse: every request times out at 5 s and the loader closes its
/// connection, `closes` a second; the loader's own TIME_WAIT follows them.
fn collapsing(closes: u64) -> Summary {
    let mut s = stepped();
    for x in s.series.iter_mut().filter(|x| x.t >= 18) {
        x.closed_on_timeout = closes;
    }
    s.run.closed_on_timeout = closes * 16;
    for x in s.probes.series.iter_mut().filter(|x| x.t.unwrap() > 18) {
        let t = x.t.unwrap();
        x.time_wait_entries = 400;
        x.time_wait_own = Some(400 * (t - 18));
        x.own_ports_ratio = Some(400.0 * (t - 18) as f64 / 28_232.0);
    }
    s.probes.time_wait = Some(crate::summary::TimeWait {
        entries: 6_400,
        max_live: 6_400,
        host_max_live: Some(6_400),
        own_choice_max: None,
    });
    s.probes.ephemeral_ports_max_ratio = Some(0.23);
    s
}

#[test]
fn time_wait_left_by_the_targets_timeouts_is_the_targets_until_ports_run_short() {
    // Finding 1 of issue 46: the target's timeouts made the loader close its connections.
    let v = judge(&collapsing(400), &Limits::default());
    assert_eq!(v.trusted, Some(true), "{:?}", codes(&v));
    let tw = v.reasons.iter().find(|r| r.code == "time_wait_from_timeouts").unwrap();
    assert_eq!((tw.side.as_str(), tw.invalidates), (TARGET, false));
    assert!(tw.detail.contains("closed because their requests timed out"), "{}", tw.detail);
    // The same TIME_WAIT with no timeouts is the loader's own churn: it invalidates, in the
    // steps it was in.
    let v = judge(&collapsing(0), &Limits::default());
    assert_eq!(trusted_steps(&v), [("step 1", true), ("step 2", true), ("step 3", true), ("step 4", false)]);
    assert!(v.reasons.iter().any(|r| r.code == "time_wait" && r.invalidates && r.side == LOADER));
    // Ports that did run short (connects failing with EADDRNOTAVAIL in step 4) make step 4
    // the load machine's limit, with the cause said.
    let mut s = collapsing(400);
    for x in s.series.iter_mut().filter(|x| x.t >= 30) {
        x.connect_no_port = 5;
    }
    s.run.connect_no_port = 20;
    let v = judge(&s, &Limits::default());
    assert_eq!(trusted_steps(&v), [("step 1", true), ("step 2", true), ("step 3", true), ("step 4", false)]);
    let ports = v.reasons.iter().find(|r| r.code == "ports_exhausted").unwrap();
    assert!(ports.detail.contains("the target's timeouts made the loader close"), "{}", ports.detail);
}
