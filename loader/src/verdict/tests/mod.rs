use super::*;
use crate::cli::RunArgs;
use crate::record::ShardRecord;
use crate::scenario::{Plan, Spec};
use crate::summary::{self, HealthSummary, ProbeSummary, Resets, RunQueueUs};

mod machine;
mod starvation;
mod steps;

/// A clean run: 100 req/s for 2 s, all answered on time, probes on.
pub(crate) fn clean() -> Summary {
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
        rec.on_send(0, t, t + 20_000, 0, false, 1);
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
        cpu: &[vec![10.0], vec![12.0]],
        rss_mib: (None, None, None),
        health: HealthSummary::default(),
        stopped_at_s: None,
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
    s.loader.cpu_p95 = Some(95.0);
    s.probes.runqueue_us = Some(RunQueueUs { p50: 20.0, p99: 2500.0, max: 9000.0, count: 1000, ..Default::default() });
    let v = judge(&s, &Limits::default());
    assert_eq!(v.trusted, Some(false));
    assert_eq!(codes(&v), ["runqueue_delay", "loader_cpu"]);
    assert!(v.reasons.iter().all(|r| r.side == LOADER && r.invalidates));
    // A looser limit re-judges the same run as trusted.
    let loose = Limits { cpu_p95_pct: 96.0, runqueue_p99_ms: 5.0, loader_delay_pct: 100.0, ..Limits::default() };
    assert_eq!(judge(&s, &loose).trusted, Some(true));
}

#[test]
fn a_run_queue_p99_of_a_few_waits_with_every_send_on_time_is_a_note() {
    // CI: 50 req/s of refused connects for 2 s, a few hundred waits, p99 1.44 ms amid steal.
    let mut s = big_clean();
    s.probes.runqueue_us = Some(RunQueueUs { p50: 8.0, p99: 1440.0, max: 3100.0, count: 340, ..Default::default() });
    s.health.peaks.steal_ms = Some(60.0);
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(true), vec!["runqueue_delay"]));
    let d = &v.reasons[0].detail;
    assert!(!v.reasons[0].invalidates && d.contains("only 340 waits") && d.contains("steal"), "{d}");
    // The same few waits with the loader's own sends late: they held the sends.
    let late = lagging(s.clone(), 0.5, 0.5, 0.6);
    let v = judge(&late, &Limits::default());
    assert_eq!(v.trusted, Some(false));
    assert_eq!(codes(&v)[0], "runqueue_delay", "still listed first");
    assert!(v.reasons[0].invalidates && v.reasons[0].detail.contains("(send_lag)"), "{}", v.reasons[0].detail);
    // Enough waits for a p99 that one spell cannot set, or a summary that did not count them.
    for count in [1_000, 0] {
        s.probes.runqueue_us = Some(RunQueueUs { p50: 8.0, p99: 1440.0, max: 3100.0, count, ..Default::default() });
        let v = judge(&s, &Limits::default());
        assert_eq!((v.trusted, codes(&v)), (Some(false), vec!["runqueue_delay"]), "count {count}");
    }
}

#[test]
fn cpu_above_the_limit_with_every_send_on_time_is_a_headroom_note() {
    // One shard at 10,000 req/s on the 2-core VM: 70 % CPU, send lag p99 0.08 ms.
    let mut s = big_clean();
    s.loader.cpu_p95 = Some(72.0);
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(true), vec!["loader_cpu"]));
    assert!(!v.reasons[0].invalidates && v.reasons[0].detail.contains("kept its schedule"), "{}", v.reasons[0].detail);
    // The same CPU with the loader's own sends late: saturation, shown.
    let late = lagging(s.clone(), 0.5, 0.5, 0.6);
    let v = judge(&late, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(false), vec!["send_lag", "loader_cpu"]));
    assert!(v.reasons[1].invalidates && v.reasons[1].detail.contains("(send_lag)"), "{}", v.reasons[1].detail);
    // No headroom at all invalidates whatever the timing.
    s.loader.cpu_p95 = Some(93.0);
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(false), vec!["loader_cpu"]));
}

/// `s` with its measured phase's lag, own lag and latency p99 (ms).
fn lagging(mut s: Summary, lag: f64, own: f64, latency: f64) -> Summary {
    s.phases[0].send_lag_ms.p99 = lag;
    s.phases[0].own_lag_ms = Some(crate::summary::SendLagMs { p50: own / 10.0, p99: own, p999: own, max: own });
    s.phases[0].latency_ms.p99 = latency;
    s
}

fn with_preflight(mut s: Summary, late_p99_us: f64) -> Summary {
    s.preflight = Some(crate::health::preflight::Preflight { wakeups: 2000, late_p99_us, ..Default::default() });
    s
}

#[test]
fn the_loaders_own_work_delaying_its_sends_invalidates() {
    // Own lag p99 1.0 ms against a latency p99 of 1.6 ms, on a host whose wake-ups are
    // 0.1 ms late: the loader's own work is most of the tail.
    let s = with_preflight(lagging(big_clean(), 1.0, 1.0, 1.6), 100.0);
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(false), vec!["send_lag"]));
    assert_eq!((v.reasons[0].side.as_str(), v.reasons[0].limit), (LOADER, Some(0.4)));
    assert!(v.reasons[0].detail.contains("own work"), "{}", v.reasons[0].detail);
    // Not when the lag is waiting for connections (a slow or stalled target's story) …
    let mut waited = s.clone();
    waited.phases[0].waited_for_connection = 20;
    let v = judge(&waited, &Limits::default());
    assert_eq!(v.trusted, Some(true));
    // … but named, when the waits set a material part of the tail (the target's side).
    assert_eq!(codes(&v), ["pool_exhausted"], "{:?}", v.reasons);
    assert_eq!(v.reasons[0].side, TARGET);
    assert!(v.reasons[0].detail.contains("20 sends") && v.reasons[0].detail.contains("waited for a connection"));
    // A few waits (≤ 0.5 % of the sends) leave the lag the loader's to answer for.
    waited.phases[0].waited_for_connection = waited.phases[0].sent / 1000;
    assert_eq!(codes(&judge(&waited, &Limits::default())), ["send_lag"]);
    // … nor when it is a small share of the tail, nor when the rule is off.
    let s = with_preflight(lagging(big_clean(), 1.0, 1.0, 5.0), 100.0);
    assert!(judge(&s, &Limits::default()).reasons.is_empty());
    let s = with_preflight(lagging(big_clean(), 1.0, 1.0, 1.6), 100.0);
    assert!(judge(&s, &Limits { loader_delay_pct: 100.0, ..Limits::default() }).reasons.is_empty());
}

#[test]
fn a_spell_of_jitter_in_one_phase_is_that_phases_floor() {
    // CI, a calibration step at 1,953 req/s: shards 17 % busy, run-queue p99 27 µs, own lag
    // p99 6 µs, lag p99 0.68 ms in a latency p99 of 1.55 ms; the run's floor 0.40 ms. Judged
    // against the run's floor it was the loader's; the shard's own sleeps in that window
    // were as late as its sends.
    let mut s = with_preflight(lagging(big_clean(), 0.684, 0.006, 1.548), 403.0);
    s.probes.runqueue_us = Some(RunQueueUs { p50: 8.0, p99: 27.0, max: 300.0, count: 9000, ..Default::default() });
    assert_eq!(codes(&judge(&s, &Limits::default())), ["send_lag"], "against the run's floor");
    let wake =
        |p99: f64, count: u64| Some(crate::summary::WakeLateUs { p50: 30.0, p90: 90.0, p99, max: 2_000.0, count });
    s.phases[0].wake_late_us = wake(700.0, 3_900);
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(true), vec!["host_resolution"]));
    assert!(v.reasons[0].detail.contains("this phase's own wake-ups p99 700 µs"), "{}", v.reasons[0].detail);
    // Too few wake-ups for a p99, or lateness the run queue explains: the run's floor.
    s.phases[0].wake_late_us = wake(700.0, 150);
    assert_eq!(judge(&s, &Limits::default()).trusted, Some(false));
    s.phases[0].wake_late_us = wake(700.0, 3_900);
    s.probes.runqueue_us = Some(RunQueueUs { p50: 8.0, p99: 400.0, max: 3_000.0, count: 9000, ..Default::default() });
    assert_eq!(judge(&s, &Limits::default()).trusted, Some(false));
    // A phase calmer than the run keeps the run's floor.
    s.probes.runqueue_us = None;
    s.phases[0].wake_late_us = wake(100.0, 3_900);
    assert_eq!(judge(&s, &Limits::default()).trusted, Some(false));
}

#[test]
fn the_default_batching_window_a_little_above_the_runs_jitter_is_at_the_floor() {
    // CI, clean 30,000 req/s: the adaptive window at its 100 µs bound, the run's own wake-ups
    // 80 µs late at p99: own lag p99 0.10 ms, all lag 0.16 ms, latency p99 0.29 ms.
    let mut s = lagging(big_clean(), 0.156, 0.10, 0.292);
    s.loader.wake_late_us =
        Some(crate::summary::WakeLateUs { p50: 38.0, p90: 54.0, p99: 80.0, max: 12_687.0, count: 58_135 });
    s.run.wake_window_us = 100.0;
    s.run.wake_window_adaptive = true;
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(true), vec!["host_resolution"]));
    // CI again (the next day): wake-ups 79 µs late at p99, lag p99 0.238 ms, own 0.101 ms.
    // With the window the engine chose counted whole, the floor of a batched send is
    // 1.5 × (0.079 + 0.1) = 0.27 ms; the same lag under a fixed `--wake-window 100us` — the
    // user's choice, counted up to the floor (0.237 ms) — is the loader's.
    let mut ci = lagging(s.clone(), 0.238, 0.101, 0.606);
    ci.loader.wake_late_us =
        Some(crate::summary::WakeLateUs { p50: 41.0, p90: 50.0, p99: 79.0, max: 4_171.0, count: 61_391 });
    assert_eq!(codes(&judge(&ci, &Limits::default())), ["host_resolution"]);
    ci.run.wake_window_adaptive = false;
    assert_eq!(judge(&ci, &Limits::default()).trusted, Some(false));
    // Own lag beyond what the window and the floor allow (1.5 × (0.08 + 0.1) = 0.27 ms) is
    // the loader's.
    let s2 = lagging(s.clone(), 0.35, 0.3, 0.45);
    let v = judge(&s2, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(false), vec!["send_lag"]));
    assert!(v.reasons[0].detail.contains("its own scheduling"), "{}", v.reasons[0].detail);
    // Without a window the own work's bound is 1.5 × the floor (0.12 ms).
    let mut s3 = lagging(s.clone(), 0.2, 0.15, 0.3);
    s3.run.wake_window_us = 0.0;
    let v = judge(&s3, &Limits::default());
    assert!(v.reasons[0].detail.contains("its own work"), "{}", v.reasons[0].detail);
}

#[test]
fn a_batched_send_waits_for_the_window_and_the_wake_up_both_within_the_floor() {
    // CI, clean 30,000 req/s (2026-12-01): wake-ups 73 µs late at p99, the adaptive window up
    // to 100 µs, own work 0.10 ms, all lag 0.19 ms inside a latency p99 of 0.45 ms; one
    // run-queue wait of 1.58 ms (p99 23 µs). It was UNTRUSTED, "explained" by that one wait.
    let mut s = lagging(big_clean(), 0.189, 0.10, 0.45);
    s.phases[0].sent = 180_000;
    s.phases[0].sent_rps = 30_000.0;
    s.loader.wake_late_us =
        Some(crate::summary::WakeLateUs { p50: 32.0, p90: 50.0, p99: 73.0, max: 5_907.0, count: 65_458 });
    s.probes.runqueue_us = Some(RunQueueUs { p50: 11.0, p99: 23.0, max: 1_576.0, count: 65_000, ..Default::default() });
    s.run.wake_window_us = 100.0;
    s.run.wake_window_adaptive = true;
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(true), vec!["host_resolution"]));
    assert!(v.reasons[0].detail.contains("under about 0.26 ms"), "{}", v.reasons[0].detail);
    // A fixed window counts up to the floor: 1.5 × (0.073 + 0.073) = 0.22 ms.
    s.run.wake_window_adaptive = false;
    let v = judge(&s, &Limits::default());
    assert!(v.reasons[0].detail.contains("under about 0.22 ms"), "{}", v.reasons[0].detail);
    // Without batching (a lone wake-up per send) the same lag is beyond the floor; that one
    // run-queue wait holds up 47 of 180,000 sends, too few to set a p99, so it is not named.
    s.run.wake_window_us = 0.0;
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(false), vec!["send_lag"]));
    assert!(v.reasons[0].limit.is_some_and(|l| (l - 0.1095).abs() < 1e-9), "{:?}", v.reasons[0].limit);
    assert!(v.reasons[0].detail.contains("not running"), "{}", v.reasons[0].detail);
    assert!(!v.reasons[0].detail.contains("steal"), "{}", v.reasons[0].detail);
    // On a virtual machine whose host took its CPUs, the sentence says so.
    let mut stolen = s.clone();
    stolen.health.peaks.steal_ms = Some(30.0);
    stolen.health.peaks.steal_max_ms_per_s = Some(20.0);
    let v = judge(&stolen, &Limits::default());
    assert!(
        v.reasons[0].detail.contains("host took 30 ms of its CPUs during the run (steal, up to 20 ms"),
        "{}",
        v.reasons[0].detail
    );
    stolen.health.peaks.steal_ms = Some(0.0);
    assert!(!judge(&stolen, &Limits::default()).reasons[0].detail.contains("steal"));
    // Waits long enough to hold up 1 % of the sends beyond the lag (60 ms beyond 0.19 ms at
    // 30,000/s)
    s.probes.runqueue_us =
        Some(RunQueueUs { p50: 11.0, p99: 23.0, max: 61_000.0, count: 65_000, ..Default::default() });
    // are named, by the send lag and by the run-queue rule, though the waits' p99 is 23 µs.
    let v = judge(&s, &Limits::default());
    assert_eq!(codes(&v), ["runqueue_delay", "send_lag"]);
    assert!(v.reasons[1].detail.contains("run-queue waits explain it (longest 61.00 ms)"), "{}", v.reasons[1].detail);
}

#[test]
fn lag_at_the_hosts_wake_up_jitter_is_a_resolution_note_not_saturation() {
    // Issue 9's clean 500/s run: send lag p99 0.30 ms inside a latency p99 of 0.58 ms, all of
    // it wake-up lateness (own work 0.01 ms), on a host whose sleeps wake 0.25 ms late (p99).
    let s = with_preflight(lagging(big_clean(), 0.30, 0.01, 0.58), 250.0);
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(true), vec!["host_resolution"]));
    let r = &v.reasons[0];
    assert!(!r.invalidates && r.side == LOADER);
    assert!(r.detail.contains("within it") && r.detail.contains("pre-flight p99 250 µs"), "{}", r.detail);
    // The run's own timer wake-ups are evidence of the floor too, when run-queue delay does
    // not explain them.
    let mut s = lagging(big_clean(), 0.30, 0.01, 0.58);
    s.loader.wake_late_us =
        Some(crate::summary::WakeLateUs { p50: 60.0, p90: 150.0, p99: 280.0, max: 900.0, count: 5000 });
    s.probes.runqueue_us = Some(RunQueueUs { p50: 4.0, p99: 40.0, max: 300.0, count: 9000, ..Default::default() });
    assert_eq!(codes(&judge(&s, &Limits::default())), ["host_resolution"]);
}

#[test]
fn lag_beyond_the_floor_that_nothing_of_the_loader_explains_means_it_was_not_running() {
    // Stopped (SIGSTOP, throttled, paused VM): 40 ms late at p99 while the host's timer is
    // 0.1 ms late and nothing waited in the run queue.
    let s = with_preflight(lagging(big_clean(), 40.0, 0.01, 45.0), 100.0);
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(false), vec!["send_lag"]));
    assert!(v.reasons[0].detail.contains("not running"), "{}", v.reasons[0].detail);
}

#[test]
fn delays_that_reach_only_the_tail_above_p99_are_annotated() {
    // A clean p99; above it, a few sends 2–4 ms late make most of the p99.9.
    let mut s = big_clean();
    s.phases[0].latency_ms.p999 = 2.5;
    s.phases[0].latency_ms.max = 4.2;
    s.phases[0].send_lag_ms.p999 = 2.3;
    s.phases[0].send_lag_ms.max = 4.1;
    s.probes.runqueue_us = Some(RunQueueUs { p50: 10.0, p99: 40.0, max: 3_900.0, count: 2_000, ..Default::default() });
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(true), vec!["tail_own_delay"]));
    let r = &v.reasons[0];
    assert_eq!((r.side.as_str(), r.value, r.limit), ("loader", Some(2.3), Some(0.625)));
    assert!(r.detail.contains("p99 and below hold") && r.detail.contains("run-queue wait 3.90 ms"), "{}", r.detail);
    // Timer jitter in the tail (no send even 1 ms late) is not worth a word …
    s.phases[0].send_lag_ms.max = 0.9;
    s.phases[0].send_lag_ms.p999 = 0.8;
    assert!(judge(&s, &Limits::default()).reasons.is_empty());
    // … nor a tail the target made (the loader's delay a small part of its p99.9 and max).
    s.phases[0].send_lag_ms.max = 4.1;
    s.phases[0].send_lag_ms.p999 = 0.3;
    s.phases[0].latency_ms.max = 42.0;
    assert!(judge(&s, &Limits::default()).reasons.is_empty());
    // A pause reaches the latency tail by more than its send lag shows (the requests around it
    // take longer from send to answer too): CI, an 8 ms stop at 1,000 req/s, send lag p99.9
    // 1.7 ms of a latency p99.9 of 7.25 ms, but its max 7.03 ms of a latency max of 11.2 ms.
    s.phases[0].latency_ms.p999 = 7.25;
    s.phases[0].latency_ms.max = 11.2;
    s.phases[0].send_lag_ms.p999 = 1.7;
    s.phases[0].send_lag_ms.max = 7.03;
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(true), vec!["tail_own_delay"]));
    assert_eq!((v.reasons[0].value, v.reasons[0].limit), (Some(7.03), Some(2.8)));
    assert!(v.reasons[0].detail.contains("63% of the latency max of 11.20 ms"), "{}", v.reasons[0].detail);
    s.phases[0].send_lag_ms.p999 = 0.3;
    s.phases[0].send_lag_ms.max = 4.1;
    s.phases[0].latency_ms.p999 = 2.5;
    s.phases[0].latency_ms.max = 42.0;
    // … nor a lag that is the wait for a busy connection: a saturated target exhausted the
    // pool (a stepped run past a 1-worker target's capacity: send lag p99.9 1379 ms = 91 % of
    // the latency p99.9, all of it pool waits, was blamed on "the host pausing the loader").
    s.phases[0].send_lag_ms.p999 = 2.3;
    s.phases[0].waited_for_connection = s.phases[0].sent / 100;
    assert!(!codes(&judge(&s, &Limits::default())).contains(&"tail_own_delay"));
}

#[test]
fn run_queue_delay_is_judged_against_the_fastest_tail() {
    // Run-queue delay p99 0.43 ms against the fastest phase's latency p99 of 1.2 ms.
    let mut s = big_clean();
    s.phases[0].latency_ms.p99 = 1.2;
    s.probes.runqueue_us = Some(RunQueueUs { p50: 6.0, p99: 430.0, max: 8000.0, count: 9000, ..Default::default() });
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(false), vec!["runqueue_delay"]));
    assert!(v.reasons[0].detail.contains("material"), "{}", v.reasons[0].detail);
    // Under 1000 sends a p99 is one or two samples: the relative rules do not apply.
    s.phases[0].sent = 200;
    assert!(judge(&s, &Limits::default()).reasons.is_empty());
    s.phases[0].sent = 2000;
    // A clean run's 0.05 ms is noise, whatever the latency.
    s.probes.runqueue_us = Some(RunQueueUs { p50: 6.0, p99: 50.0, max: 2000.0, count: 9000, ..Default::default() });
    s.phases[0].latency_ms.p99 = 0.12;
    assert!(judge(&s, &Limits::default()).reasons.is_empty());
}

#[test]
fn late_sends_under_one_percent_and_small_against_the_p99_are_a_note() {
    // CI (2 % loss, 5 ms delay, 500 req/s): one 22 ms pause of the shard, 10 late sends of
    // 3000 (0.33 %), a latency p99 of 216 ms — the p99 moves by 22 ms at most.
    let mut s = clean();
    let p = &mut s.phases[0];
    (p.sent, p.late, p.late_unpooled, p.late_unpooled_max_ms) = (3000, 10, 10, Some(21.7));
    p.latency_ms.p99 = 216.0;
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(true), vec!["late_sends"]), "{:?}", v.reasons);
    assert!(!v.reasons[0].invalidates && v.reasons[0].detail.contains("the p99 and below hold"), "{:?}", v.reasons);
    // Late by a quarter of the p99 or more: the p99 may be the loader's.
    s.phases[0].late_unpooled_max_ms = Some(54.0);
    assert_eq!(judge(&s, &Limits::default()).trusted, Some(false));
    // 1 % of the sends or more may be the p99's requests, but each is later by at most the
    // loader's part: the p99 moves by no more than 21.7 ms of 216 whatever their number
    // (issue 46). Late by a quarter of it, they invalidate as one pause does.
    s.phases[0].late_unpooled_max_ms = Some(21.7);
    (s.phases[0].late, s.phases[0].late_unpooled) = (30, 30);
    assert_eq!(judge(&s, &Limits::default()).trusted, Some(true));
    s.phases[0].late_unpooled_max_ms = Some(54.0);
    assert_eq!(judge(&s, &Limits::default()).trusted, Some(false));
    s.phases[0].late_unpooled_max_ms = Some(21.7);
    // The relative rules off (loader_delay_pct 100): the absolute share decides.
    (s.phases[0].late, s.phases[0].late_unpooled) = (10, 10);
    let off = Limits { loader_delay_pct: 100.0, ..Limits::default() };
    assert_eq!(judge(&s, &off).trusted, Some(false));
    // Unknown lateness (a summary from before it was kept): as before.
    s.phases[0].late_unpooled_max_ms = None;
    assert_eq!(judge(&s, &Limits::default()).trusted, Some(false));
}

#[test]
fn a_loader_part_small_against_a_collapsed_targets_p99_is_a_note_not_send_lag() {
    // Issue 46: a database endpoint past its knee, every answer waiting up to its 5 s timeout:
    // send lag p99 4,641 ms, all of it waits for a busy connection but for the loader's part
    // of 227 sends of 3,080 (up to 103 ms: a 100 ms steal of its core, carried from cycle to
    // cycle by the instant-reading pool). The p99 is the target's.
    let mut s = clean();
    let p = &mut s.phases[0];
    (p.sent, p.late, p.late_unpooled, p.late_unpooled_max_ms, p.waited_for_connection) =
        (3080, 3080, 227, Some(102.6), 3080);
    p.send_lag_ms.p99 = 4640.8;
    p.latency_ms.p99 = 5001.2;
    let v = judge(&s, &Limits::default());
    assert!(!codes(&v).contains(&"send_lag"), "{:?}", v.reasons);
    let late = v.reasons.iter().find(|r| r.code == "late_sends").expect("the loader's late sends noted");
    assert!(!late.invalidates && late.detail.contains("under 25% of the latency p99"), "{late:?}");
    assert_eq!(v.trusted, Some(true), "{:?}", v.reasons);
    // The same sends late by 1.3 s of the loader's own: a quarter of the p99, its doing.
    s.phases[0].late_unpooled_max_ms = Some(1300.0);
    let v = judge(&s, &Limits::default());
    assert!(v.reasons.iter().any(|r| r.code == "send_lag" && r.invalidates), "{:?}", v.reasons);
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
    // … and one late send with a connection free among them does not make that p99 the
    // loader's (CI: 25 % of SYNs dropped, no keep-alive, 1 of 300 sends late unpooled): the
    // isolated late send is noted, the run stays trusted.
    s.phases[0].sent = 300;
    s.phases[0].late = 83;
    s.phases[0].late_unpooled = 1;
    s.phases[0].waited_for_connection = 285;
    s.phases[0].send_lag_ms.p99 = 2059.0;
    let v = judge(&s, &Limits::default());
    assert_eq!(v.trusted, Some(true), "{:?}", v.reasons);
    assert!(!codes(&v).contains(&"send_lag") && codes(&v).contains(&"late_sends"), "{:?}", codes(&v));
    // Enough of them to set the p99 (≥ 1 % of sends): the loader's, as before.
    s.phases[0].late_unpooled = 5;
    assert!(codes(&judge(&s, &Limits::default())).contains(&"send_lag"));
}

#[test]
fn network_and_target_evidence_annotates_without_invalidating() {
    let mut s = clean();
    s.probes.syn_retransmits = Some(3);
    s.probes.retransmits = Some(10);
    s.probes.resets = Some(Resets { sent: 0, received: 2 });
    let v = judge(&s, &Limits::default());
    assert_eq!(v.trusted, Some(true));
    let sides: Vec<(&str, &str)> = v.reasons.iter().map(|r| (r.code.as_str(), r.side.as_str())).collect();
    assert_eq!(sides, [("syn_retransmits", NETWORK), ("retransmits", NETWORK), ("resets_received", TARGET)]);
    assert_eq!(v.reasons[1].value, Some(7.0), "data segments: all retransmits but the SYNs");
}

#[test]
fn lost_probe_events_annotate_and_invalidate_when_they_could_hide_a_rule() {
    use crate::probes::LossShare;
    let mut s = big_clean();
    s.probes.lost = Some(1);
    s.probes.loss_share = Some(LossShare { runqueue: 0.000_01, sockets: 0.0 });
    assert!(judge(&s, &Limits::default()).reasons.is_empty(), "1 in 100,000 changes nothing");
    s.probes.lost = Some(500);
    s.probes.loss_share = Some(LossShare { runqueue: 0.004, sockets: 0.0 });
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(true), vec!["probe_events_lost"]));
    s.probes.loss_share = Some(LossShare { runqueue: 0.03, sockets: 0.0 });
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(false), vec!["probe_events_lost"]));
    assert!(v.reasons[0].detail.contains("run-queue"), "{}", v.reasons[0].detail);
    // A few socket events of a keep-alive run (15 of 500): too few to hide a TIME_WAIT
    // crossing, noted; as many as could hide one, invalidating.
    s.probes.lost = Some(15);
    s.probes.loss_share = Some(LossShare { runqueue: 0.0, sockets: 0.03 });
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(true), vec!["probe_events_lost"]));
    s.probes.lost = Some(600);
    s.probes.time_wait =
        Some(crate::summary::TimeWait { entries: 9_000, max_live: 4_500, host_max_live: None, own_choice_max: None });
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(false), vec!["probe_events_lost"]));
    assert!(v.reasons[0].detail.contains("sockets"), "{}", v.reasons[0].detail);
}

#[test]
fn a_probe_that_did_not_run_is_named_and_its_rule_skipped() {
    let mut s = clean();
    s.probes.availability = Some(
        [
            ("runqueue".to_string(), "ok".to_string()),
            ("tls_handshakes".to_string(), "error resolving symbol".to_string()),
            ("runqueue.sched_wakeup_new".to_string(), "missing".to_string()),
        ]
        .into(),
    );
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(true), vec!["probe_unavailable"]));
    assert!(v.reasons[0].detail.contains("tls_handshakes (error resolving symbol)"), "{}", v.reasons[0].detail);
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
