//! Test fixtures: synthetic phases and the step tables of seed 002, as summary types.
//!
//! Where the seed gives a number it is used as printed (k6 summary lines, the article's
//! text); where a field the summary needs is not in the seed, the comment says what was
//! assumed. k6 counts only the requests it sent, so `requests = sent` unless the step was cut
//! short by an abort (then the rest of the hold's plan is unsent).

use std::collections::BTreeMap;

use super::step::{StepJudgement, judge_steps};
use crate::record::ErrorClass;
use crate::summary::Criteria;
use crate::summary::{LatencyMs, PhaseSummary, SecondSummary, SendLagMs};

fn latency(l: [f64; 6], count: u64) -> LatencyMs {
    let [p50, p90, p95, p99, max, mean] = l;
    LatencyMs { p50, p90, p95, p99, p999: max, max, mean, count }
}

/// A healthy hold step at `offered` req/s for `duration_s`, with `ok_rps` goodput.
///
/// Built from JSON, as `loader verdict DIR` reads a saved summary, so fields the summary gains
/// later (added with serde defaults) do not break these fixtures.
pub fn phase(name: &str, offered: f64, ok_rps: f64, duration_s: f64) -> PhaseSummary {
    let n = (offered * duration_s).round() as u64;
    let errors: BTreeMap<String, u64> = ErrorClass::ALL.iter().map(|c| (c.as_str().to_string(), 0)).collect();
    let l = latency([5.0, 8.0, 10.0, 20.0, 40.0, 6.0], n);
    serde_json::from_value(serde_json::json!({
        "name": name,
        "kind": "hold",
        "start_s": 0.0,
        "duration_s": duration_s,
        "offered_rps": offered,
        "sent_rps": offered,
        "ok_rps": ok_rps,
        "requests": n,
        "sent": n,
        "ok": n,
        "errors": errors,
        "late": 0,
        "waited_for_connection": 0,
        "latency_ms": l,
        "service_ms": l,
        "send_lag_ms": SendLagMs { p50: 0.01, p99: 0.05, p999: 0.1, max: 0.2 },
        "passed": null,
        "fail_reasons": [],
    }))
    .expect("a phase as summary.json writes it")
}

/// A step the run stopped during: `requests` were planned, the ones neither sent nor
/// dropped were never attempted (`unsent`, as the engine records a stop).
fn cut_short(p: &mut PhaseSummary, requests: u64) {
    p.requests = requests;
    let dropped = p.errors.get("dropped").copied().unwrap_or(0);
    p.errors.insert("unsent".into(), requests.saturating_sub(p.sent + dropped));
}

/// A step from a k6 summary line: `[p50, p90, p95, p99, max, avg]` ms and `count`, starting
/// at `start_s`. ok/s = count / hold unless set after.
fn seed_step(name: &str, offered: f64, start_s: f64, hold: f64, count: u64, l: [f64; 6]) -> PhaseSummary {
    let mut p = phase(name, offered, count as f64 / hold, hold);
    p.start_s = start_s;
    p.requests = count;
    p.sent = count;
    p.ok = count;
    p.sent_rps = count as f64 / hold;
    p.latency_ms = latency(l, count);
    p.service_ms = latency(l, count);
    p
}

fn fail(p: &mut PhaseSummary, class: &str, n: u64) {
    p.ok -= n;
    *p.errors.get_mut(class).expect("known class") += n;
}

/// Seed 002 §5.1.2, PHP `/api/db`, 20 workers, run exp1-db-mc20-r2 (the cleanest), 20 s holds,
/// SLO p95 200 ms. ok/s and sent/s at 180 from §0.8 (176.6 of 179.9). The run aborted one
/// second into r0210 (254 of 4200 planned requests sent).
pub fn php_r2() -> Vec<PhaseSummary> {
    let rows: [(f64, u64, [f64; 6]); 6] = [
        (60.0, 1199, [9.7, 15.44, 18.04, 27.86, 50.04, 10.83]),
        (90.0, 1800, [13.88, 235.89, 343.27, 471.13, 640.99, 63.21]),
        (120.0, 2399, [23.33, 161.9, 236.25, 365.25, 613.98, 58.09]),
        (150.0, 3000, [19.2, 76.81, 108.9, 154.07, 339.68, 32.48]),
        // k6 prints p95 "1.11s"; the article's report table gives 1,113 ms.
        (180.0, 3599, [37.41, 969.4, 1113.0, 1260.0, 1550.0, 221.02]),
        (210.0, 254, [229.48, 315.22, 331.77, 361.5, 436.76, 236.24]),
    ];
    let mut steps: Vec<PhaseSummary> = rows
        .iter()
        .enumerate()
        .map(|(i, &(rate, count, l))| seed_step(&format!("r{:04}", rate as u64), rate, 20.0 * i as f64, 20.0, count, l))
        .collect();
    steps[4].ok_rps = 176.6;
    steps[4].sent_rps = 179.9;
    cut_short(&mut steps[5], 4200);
    steps
}

/// Seed 002 §0.8 example 2, per-second in-flight ("max VUs") of [`php_r2`]: 27–39 at 90 and
/// 120, 20 at 150, 228 at 180; not given for 60 and 210 (no seconds, so `None`).
pub fn php_r2_series() -> Vec<SecondSummary> {
    let per_step = [None, Some(27), Some(39), Some(20), Some(228), None];
    per_step
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.map(|v| (i, v)))
        .flat_map(|(i, v)| (0..20).map(move |s| second(20 * i as u64 + s, 0, 0, 0, if s == 13 { v } else { v / 2 })))
        .collect()
}

/// Seed 002 §0.8 example 2, Node `/cpu`, 1 process, run 2a, 22 s holds, SLO p95 100 ms.
/// Aborted in 05_rps175 with 770 of 3850 planned requests sent (§0.5).
pub fn node_2a() -> Vec<PhaseSummary> {
    let rows: [(f64, u64, [f64; 6]); 5] = [
        (50.0, 1100, [8.91, 48.52, 73.62, 142.26, 173.5, 19.27]),
        (100.0, 2200, [6.59, 19.18, 34.38, 79.78, 193.4, 10.87]),
        (125.0, 2750, [6.13, 11.04, 17.57, 62.28, 107.41, 8.38]),
        (150.0, 3300, [6.19, 20.91, 37.28, 60.9, 101.99, 10.45]),
        (175.0, 770, [364.48, 696.38, 800.05, 860.39, 866.54, 439.38]),
    ];
    let mut steps: Vec<PhaseSummary> = rows
        .iter()
        .enumerate()
        .map(|(i, &(rate, count, l))| {
            seed_step(&format!("{:02}_rps{}", i + 1, rate as u64), rate, 30.0 * i as f64 + 8.0, 22.0, count, l)
        })
        .collect();
    cut_short(&mut steps[4], 3850);
    steps
}

/// Seed 002 §5.2.3, Node `/dbsleep`, pool timeout 1 s, run 1c, 22 s holds, SLO p95 2 s.
/// 01_rps300 is only called "clean"; its latencies are the same app's 300 step of run 1b.
/// 02_rps550: 432.9 done/s, 429.0 ok/s, 86 errors of 9523, and the rest of the plan dropped
/// by k6 (6168 drops over the run). 03_rps600: 136 errors of 721, aborted; its latencies are
/// not given (set near the 1 s pool timeout).
pub fn node_1c() -> Vec<PhaseSummary> {
    let mut s300 = seed_step("01_rps300", 300.0, 8.0, 22.0, 6600, [22.27, 29.8, 40.98, 70.9, 151.6, 25.1]);
    s300.ok_rps = 300.0;
    let mut s550 = seed_step("02_rps550", 550.0, 38.0, 22.0, 9523, [892.0, 1000.0, 1016.8, 1040.0, 1150.0, 846.65]);
    s550.requests = 12_100;
    s550.sent_rps = 432.9;
    s550.ok_rps = 429.0;
    fail(&mut s550, "http_5xx", 86);
    *s550.errors.get_mut("dropped").expect("class") = 12_100 - 9523;
    let mut s600 = seed_step("03_rps600", 600.0, 68.0, 22.0, 721, [900.0, 1000.0, 1000.0, 1050.0, 1100.0, 930.0]);
    cut_short(&mut s600, 13_200);
    fail(&mut s600, "http_5xx", 136);
    vec![s300, s550, s600]
}

/// Seed 002 §5.1.4, PHP `/api/slow`, 5 workers (capacity N/W = 44.6 req/s), 20 s holds:
/// r0030–r0045 from round 1 (43.5 ok/s at 45), r0060 and r0090 from run exp3sat of the same
/// configuration (26.4 ok/s with 670 504s; 0.0 ok/s with 1799 504s). exp3sat's latencies are
/// not given: set to the proxy's 5 s `fastcgi_read_timeout` that produced the 504s.
pub fn pool_n5() -> Vec<PhaseSummary> {
    let mut steps = vec![
        seed_step("r0030", 30.0, 0.0, 20.0, 600, [109.22, 113.18, 115.41, 119.71, 122.12, 110.0]),
        seed_step("r0040", 40.0, 20.0, 20.0, 800, [110.53, 116.45, 120.21, 136.15, 163.82, 112.06]),
        seed_step("r0045", 45.0, 40.0, 20.0, 873, [416.68, 2040.0, 2060.0, 2090.0, 2100.0, 709.96]),
        seed_step("r0060", 60.0, 60.0, 20.0, 1200, [5000.0; 6]),
        seed_step("r0090", 90.0, 80.0, 20.0, 1800, [5000.0; 6]),
    ];
    steps[2].ok_rps = 43.5;
    steps[3].ok_rps = 26.4;
    fail(&mut steps[3], "http_5xx", 670);
    steps[4].ok_rps = 0.0;
    fail(&mut steps[4], "http_5xx", 1799);
    steps
}

/// One second of a series.
pub fn second(t: u64, offered: u64, ok: u64, errors: u64, in_flight_max: u64) -> SecondSummary {
    let mut e = BTreeMap::new();
    if errors > 0 {
        e.insert("http_5xx".to_string(), errors);
    }
    serde_json::from_value(serde_json::json!({
        "t": t, "offered": offered, "sent": offered, "ok": ok, "errors": e, "in_flight_max": in_flight_max, "cpu": null,
    }))
    .expect("a second as summary.json writes it")
}

/// Judge `phases` with a p95 SLO and default criteria otherwise.
pub fn judged(phases: &[PhaseSummary], p95_slo: f64) -> Vec<StepJudgement> {
    judge_steps(phases, &[], &Criteria { p95_ms: Some(p95_slo), ..Default::default() }, None)
}

/// Judged steps `s1, s2, …` from `(offered, ok/s, p99 ms)`, 20 s holds, no errors.
pub fn steps_from(rows: &[(f64, f64, f64)]) -> Vec<StepJudgement> {
    let phases: Vec<PhaseSummary> = rows
        .iter()
        .enumerate()
        .map(|(i, &(offered, ok, p99))| {
            let mut p = phase(&format!("s{}", i + 1), offered, ok, 20.0);
            p.start_s = 20.0 * i as f64;
            p.latency_ms.p99 = p99;
            p
        })
        .collect();
    judge_steps(&phases, &[], &Criteria::default(), None)
}
