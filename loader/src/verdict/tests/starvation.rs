//! The starvation rules: read lag, waits and drops by cause, due-but-unsent requests, a
//! warm-up's spilled backlog, run-queue waits against what the schedule needed, and the
//! emergency stop — each with a case where the loader is at fault and one where it is not.

use super::*;
use crate::summary::{EmergencyStop, LatencyMs, SendLagMs};

fn read_lag(p99: f64, count: u64) -> Option<LatencyMs> {
    Some(LatencyMs {
        p50: p99 / 3.0,
        p90: p99 / 2.0,
        p95: p99 / 1.5,
        p99,
        p999: p99,
        max: p99 * 1.2,
        mean: p99 / 3.0,
        count,
    })
}

fn invalidating_sides(v: &Verdict) -> Vec<&str> {
    v.reasons.iter().filter(|r| r.invalidates).map(|r| r.side.as_str()).collect()
}

#[test]
fn answers_left_unread_invalidate_and_the_deliberate_deferral_does_not() {
    // Starved: answers sat 50 ms in the sockets (three loops at nice −10 on the loader's core).
    let mut s = big_clean();
    s.phases[0].read_lag_ms = read_lag(50.0, 2000);
    let v = judge(&s, &Limits::default());
    assert_eq!(v.trusted, Some(false));
    assert!(codes(&v).contains(&"read_lag"), "{:?}", codes(&v));
    assert_eq!(invalidating_sides(&v), [LOADER]);
    // Clean at 1,000 req/s: reads deferred up to 2 ms on purpose (p99 1.0 ms measured).
    let mut s = big_clean();
    s.phases[0].read_lag_ms = read_lag(1.0, 2000);
    assert!(judge(&s, &Limits::default()).reasons.is_empty());
    // Too few answers for a p99: one pause, not evidence.
    let mut s = big_clean();
    s.phases[0].read_lag_ms = read_lag(50.0, 20);
    assert!(judge(&s, &Limits::default()).reasons.is_empty());
}

/// A phase whose sends all waited for a connection and left up to 2.4 s late.
fn waiting(loader_waits: u64) -> Summary {
    let mut s = big_clean();
    let p = &mut s.phases[0];
    p.waited_for_connection = 2000;
    p.waited_on_loader = loader_waits;
    p.late = 2000;
    p.late_unpooled = loader_waits;
    p.send_lag_ms = SendLagMs { p50: 1200.0, p99: 2400.0, p999: 2430.0, max: 2440.0 };
    p.latency_ms.p99 = 2437.0;
    s
}

#[test]
fn a_few_late_waits_beside_many_the_loader_held_are_not_the_targets() {
    // CI, one busy loop on the loader's core: 739 sends waited for answers already in the
    // kernel, 12 late sends left to the target by the model, 2 of the loader's own.
    let mut s = big_clean();
    let p = &mut s.phases[0];
    (p.waited_for_connection, p.waited_on_loader, p.late, p.late_unpooled) = (3650, 739, 14, 2);
    let v = judge(&s, &Limits::default());
    assert!(!v.reasons.iter().any(|r| r.side == TARGET), "the target blamed: {:?}", codes(&v));
    assert!(codes(&v).contains(&"loader_held_connections"), "{:?}", codes(&v));
    // A slow target beside a few of the loader's own holds: still the target's.
    let mut s = big_clean();
    let p = &mut s.phases[0];
    (p.waited_for_connection, p.waited_on_loader, p.late, p.late_unpooled) = (3650, 30, 400, 0);
    let v = judge(&s, &Limits::default());
    assert!(v.reasons.iter().any(|r| r.code == "pool_exhausted" && r.side == TARGET), "{:?}", codes(&v));
}

/// A busy, clean shard reads the answers of its last wake-up together: sends due meanwhile
/// wait for connections whose answers are already in the kernel, briefly. (CI, 70 % of a
/// certified ceiling, 110,286 req/s on one shard: 66,633 such holds in 880,000 sends, read lag
/// p99 0.56 ms, send lag p99 0.55 ms — called untrusted until holds were weighed by how long
/// the answers sat.) The same holds with answers sitting 30 ms, or unmeasured, invalidate.
#[test]
fn brief_holds_of_a_busy_shard_are_a_note_and_long_ones_invalidate() {
    let busy = |read: Option<f64>| {
        let mut s = big_clean();
        let p = &mut s.phases[0];
        let sent = p.sent;
        (p.waited_for_connection, p.waited_on_loader) = (sent / 10, sent / 13);
        p.read_lag_ms = read.and_then(|ms| read_lag(ms, sent));
        s.health.peaks.steal_ms = Some(20.0);
        s
    };
    let v = judge(&busy(Some(0.56)), &Limits::default());
    assert_eq!(v.trusted, Some(true), "{:?}", v.reasons);
    let note = v.reasons.iter().find(|r| r.code == "loader_held_connections").expect("the holds are named");
    assert!(!note.invalidates && note.side == LOADER, "{note:?}");
    assert!(!note.detail.contains("steal"), "a note does not blame the host's steal: {}", note.detail);
    assert!(!v.reasons.iter().any(|r| r.side == TARGET), "the target blamed: {:?}", codes(&v));
    for read in [Some(30.0), None] {
        let v = judge(&busy(read), &Limits::default());
        assert_eq!(v.trusted, Some(false), "read lag {read:?}: {:?}", v.reasons);
        assert!(v.reasons.iter().any(|r| r.code == "loader_held_connections" && r.invalidates), "{:?}", v.reasons);
        assert_eq!(invalidating_sides(&v).iter().filter(|&&s| s != LOADER).count(), 0, "{:?}", codes(&v));
    }
}

#[test]
fn pool_waits_for_answers_that_had_arrived_are_the_loaders() {
    let v = judge(&waiting(2000), &Limits::default());
    assert_eq!(v.trusted, Some(false));
    assert!(codes(&v).contains(&"send_lag"), "{:?}", codes(&v));
    assert!(!codes(&v).contains(&"pool_exhausted"), "the target blamed: {:?}", codes(&v));
    assert!(v.reasons.iter().all(|r| r.side == LOADER), "{:?}", codes(&v));
    // The target slow: the same waits, every one for an answer the kernel had not received.
    let v = judge(&waiting(0), &Limits::default());
    assert_eq!(v.trusted, Some(true), "{:?}", codes(&v));
    assert!(v.reasons.iter().any(|r| r.code == "pool_exhausted" && r.side == TARGET));
}

#[test]
fn due_requests_never_sent_are_late_sends_unless_every_connection_waited_on_the_target() {
    // Stopped part-way: 100 sent, 1,900 due and never sent while a connection was free.
    let mut s = clean();
    let p = &mut s.phases[0];
    p.sent = 100;
    (p.due_unsent, p.due_unsent_loader) = (1900, 1900);
    (p.late, p.late_unpooled, p.late_unpooled_max_ms) = (1900, 1900, Some(3000.0));
    p.send_lag_ms = SendLagMs { p50: 1500.0, p99: 2900.0, p999: 2990.0, max: 3000.0 };
    let v = judge(&s, &Limits::default());
    assert_eq!(v.trusted, Some(false));
    assert_eq!(invalidating_sides(&v).first(), Some(&LOADER), "{:?}", codes(&v));
    // The same requests dropped while every connection waited for the target's answers.
    let mut s = clean();
    let p = &mut s.phases[0];
    p.sent = 100;
    p.due_unsent = 1900;
    p.errors.insert("dropped".into(), 1900);
    let v = judge(&s, &Limits::default());
    assert_eq!(v.trusted, Some(true), "{:?}", codes(&v));
    assert!(v.reasons.iter().any(|r| r.code == "dropped_sends" && r.side == TARGET));
    // Dropped because the loader did not get to them: not the target's.
    s.phases[0].dropped_loader = 1900;
    s.phases[0].due_unsent_loader = 1900;
    let v = judge(&s, &Limits::default());
    assert!(!codes(&v).contains(&"dropped_sends"), "{:?}", codes(&v));
    assert!(v.reasons.iter().any(|r| r.code == "loader_held_connections" && r.invalidates));
}

/// CI, three loops at nice −10 on the loader's core, no emergency stop: the model left 30
/// drops to the target beside 47,956 late sends of the loader's own. A handful beside that
/// backlog is the loader's; the same 30 drops with the loader on time are the target's.
#[test]
fn a_few_drops_beside_the_loaders_backlog_are_not_the_targets() {
    let mut s = big_clean();
    let p = &mut s.phases[0];
    p.errors.insert("dropped".into(), 30);
    (p.late, p.late_unpooled, p.waited_for_connection, p.waited_on_loader) = (1990, 1960, 1500, 1500);
    let v = judge(&s, &Limits::default());
    assert!(!v.reasons.iter().any(|r| r.side == TARGET), "the target blamed: {:?}", codes(&v));
    let drops = v.reasons.iter().find(|r| r.code == "dropped_sends").expect("the drops are named");
    assert!(drops.side == LOADER && !drops.invalidates, "{drops:?}");
    // The loader on time: the drops are the target's.
    let mut s = big_clean();
    s.phases[0].errors.insert("dropped".into(), 30);
    let v = judge(&s, &Limits::default());
    assert!(v.reasons.iter().any(|r| r.code == "dropped_sends" && r.side == TARGET), "{:?}", codes(&v));
}

#[test]
fn a_warm_up_backlog_that_spilled_into_the_run_is_judged() {
    let mut s = big_clean();
    let mut warm = s.phases[0].clone();
    warm.name = "warmup".into();
    warm.kind = "warmup".into();
    (warm.late, warm.late_unpooled, warm.late_unpooled_max_ms) = (1500, 1500, Some(3146.0));
    warm.send_lag_ms = SendLagMs { p50: 900.0, p99: 3146.0, p999: 3150.0, max: 3160.0 };
    let mut spilled = warm.clone();
    spilled.late_after_end = 1200;
    s.phases.insert(0, spilled);
    let v = judge(&s, &Limits::default());
    assert_eq!(v.trusted, Some(false));
    assert!(v.reasons.iter().any(|r| r.invalidates && r.detail.starts_with("warmup")), "{:?}", v.reasons);
    // Late in the warm-up and caught up before it ended: the warm-up is not judged.
    s.phases[0] = warm;
    assert_eq!(judge(&s, &Limits::default()).trusted, Some(true));
}

#[test]
fn few_run_queue_waits_are_starvation_when_the_schedule_needed_many() {
    // 913 waits where 8,000 req/s for 12 s needed tens of thousands, every send sample on
    // time (the sends never happened): starved, not a brief spell.
    let mut s = big_clean();
    s.phases[0].sent = 96_000;
    s.phases[0].duration_s = 12.0;
    s.phases[0].measured_s = Some(12.0);
    s.probes.runqueue_us =
        Some(RunQueueUs { p50: 50.0, p99: 92_000.0, max: 120_000.0, count: 913, ..Default::default() });
    let v = judge(&s, &Limits::default());
    let rq = v.reasons.iter().find(|r| r.code == "runqueue_delay").expect("a run-queue reason");
    assert!(rq.invalidates && rq.detail.contains("starved"), "{}", rq.detail);
    // 340 waits for 2,000 sends over 2 s: as many as the schedule needed — a spell, a note.
    let mut s = big_clean();
    s.probes.runqueue_us = Some(RunQueueUs { p50: 8.0, p99: 1440.0, max: 3100.0, count: 340, ..Default::default() });
    let rq = judge(&s, &Limits::default()).reasons.into_iter().find(|r| r.code == "runqueue_delay").unwrap();
    assert!(!rq.invalidates, "{}", rq.detail);
}

fn stopped(late_loader: u64) -> Summary {
    let mut s = big_clean();
    s.analysis.emergency_stop = Some(EmergencyStop {
        at_s: 5,
        since_s: 3,
        cause: "goodput".into(),
        detail: "cliff held 3 consecutive seconds".into(),
        halted_within_ms: Some(1.0),
        after_last_send: false,
        loader_behind: false,
    });
    s.series = (0..6u64)
        .map(|t| {
            let mut x = crate::analysis::fixtures::second(t, 8000, if t >= 3 { 2938 } else { 8000 }, 0, 32);
            x.late_loader = if t >= 3 { late_loader } else { 0 };
            x
        })
        .collect();
    s
}

#[test]
fn an_emergency_stop_while_the_loader_was_behind_is_the_loaders() {
    let v = judge(&stopped(5000), &Limits::default());
    let r = v.reasons.iter().find(|r| r.code == "emergency_stop").expect("the stop named");
    assert!(r.invalidates && r.side == LOADER && r.detail.starts_with("stopped: the loader fell behind"));
    // The loader on schedule: the stop is the target's cliff, no loader reason.
    let v = judge(&stopped(0), &Limits::default());
    assert!(!codes(&v).contains(&"emergency_stop"), "{:?}", codes(&v));
    assert_eq!(v.trusted, Some(true));
}

#[test]
fn a_stop_beside_answers_of_seconds_is_the_targets_when_the_loader_held_sends_briefly() {
    // Issue 46: the target's answers take up to its 5 s timeout; the loader held 600 sends a
    // second by up to 103 ms (a steal of its core carried by the instant-reading pool).
    let collapsed = |most_ms: f64| {
        let mut s = stopped(600);
        let p = &mut s.phases[0];
        (p.late_unpooled, p.late_unpooled_max_ms, p.duration_s) = (1800, Some(most_ms), 6.0);
        p.latency_ms.p99 = 5001.0;
        s
    };
    let v = judge(&collapsed(103.0), &Limits::default());
    assert!(!codes(&v).contains(&"emergency_stop"), "{:?}", v.reasons);
    // Held by 1.3 s of its own, a quarter of those answers: the stop was the loader's.
    let v = judge(&collapsed(1300.0), &Limits::default());
    let r = v.reasons.iter().find(|r| r.code == "emergency_stop").expect("the stop named");
    assert!(r.invalidates && r.side == LOADER, "{r:?}");
}

#[test]
fn churn_after_the_loaders_own_timeouts_is_not_the_targets() {
    let mut s = waiting(2000);
    s.phases[0].errors.insert("timeout".into(), 300);
    s.run.connections_opened = 400;
    s.probes.resets = Some(Resets { sent: 10, received: 80 });
    let v = judge(&s, &Limits::default());
    assert!(v.reasons.iter().all(|r| r.side != TARGET), "{:?}", v.reasons);
    // The target slow: the same churn and resets are the target's.
    let mut s = waiting(0);
    s.phases[0].errors.insert("timeout".into(), 300);
    s.run.connections_opened = 400;
    s.probes.resets = Some(Resets { sent: 10, received: 80 });
    let v = judge(&s, &Limits::default());
    assert!(v.reasons.iter().any(|r| r.side == TARGET && r.code == "resets_received"), "{:?}", codes(&v));
}

/// CI's shape of two busy loops on the loader's core at 1,000 req/s: 2,948 run-queue waits,
/// p99 0.58 ms (under every p99 limit), eleven of 6–17 ms; send lag p99 3.72 ms beside a
/// latency p99 of 3.79 ms, none of it the loader's own work.
fn rare_long_waits(long_waits: f64) -> Summary {
    let mut s = big_clean();
    let p = &mut s.phases[0];
    (p.sent, p.sent_rps) = (3000, 1000.0);
    p.send_lag_ms = SendLagMs { p50: 0.01, p99: 3.72, p999: 12.0, max: 16.0 };
    p.own_lag_ms = Some(SendLagMs { p50: 0.005, p99: 0.02, p999: 0.05, max: 0.1 });
    p.latency_ms.p99 = 3.79;
    let buckets =
        vec![[1.0, 1.25, 2900.0], [512.0, 640.0, 37.0], [6144.0, 7168.0, long_waits], [16384.0, 20480.0, 1.0]];
    s.probes.runqueue_us =
        Some(RunQueueUs { p50: 1.1, p99: 576.0, max: 16_813.8, count: 2938 + long_waits as u64, buckets });
    s
}

#[test]
fn rare_long_run_queue_waits_that_held_the_sends_are_named_and_a_pause_is_not_theirs() {
    // Ten 6–7 ms waits and one of 16.8 ms held about 44 sends beyond 3.72 ms, more than half
    // of the 30 (1 %) that set the p99: the waits are the cause, named by the run-queue rule
    // and the send lag.
    let v = judge(&rare_long_waits(10.0), &Limits::default());
    assert_eq!(v.trusted, Some(false));
    assert_eq!(codes(&v), ["runqueue_delay", "send_lag"], "{:?}", v.reasons);
    assert_eq!(invalidating_sides(&v), [LOADER, LOADER]);
    let (rq, lag) = (&v.reasons[0], &v.reasons[1]);
    assert_eq!((rq.value, rq.limit), (Some(0.576), Some(1.0)), "quotes the probe's p99 against its limit");
    assert!(rq.detail.contains("held up the sends"), "{}", rq.detail);
    assert!(lag.detail.contains("run-queue waits explain it"), "{}", lag.detail);
    // The same p99 with only the 16.8 ms wait long (13 of the 30 sends held beyond 3.72 ms):
    // the sends' lag is mostly not the waits' — the loader did not run when they were due —
    // and the run-queue rule stays silent; the run is still untrusted, on the loader's side.
    let v = judge(&rare_long_waits(0.0), &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(false), vec!["send_lag"]), "{:?}", v.reasons);
    let d = &v.reasons[0].detail;
    assert!(d.contains("only about 13 of the 30 sends") && d.contains("not running"), "{d}");
    // And without the late sends (the loader kept its schedule), the waits say nothing.
    let mut s = rare_long_waits(10.0);
    s.phases[0].send_lag_ms = SendLagMs { p50: 0.01, p99: 0.05, p999: 12.0, max: 16.0 };
    assert!(!codes(&judge(&s, &Limits::default())).contains(&"runqueue_delay"));
}

#[test]
fn held_time_counts_each_wait_beyond_the_lag() {
    let rq =
        RunQueueUs { max: 9_000.0, buckets: vec![[1000.0, 1250.0, 4.0], [8192.0, 10240.0, 1.0]], ..Default::default() };
    // 4 × (1.125 − 1) + (9.0, the max, − 1) ms.
    assert!((rq.held_beyond_ms(1.0) - 8.5).abs() < 1e-9, "{}", rq.held_beyond_ms(1.0));
    assert_eq!(rq.held_beyond_ms(10.0), 0.0);
    // Without buckets only the longest wait is known.
    let old = RunQueueUs { max: 9_000.0, ..Default::default() };
    assert_eq!(old.held_beyond_ms(1.0), 8.0);
}
