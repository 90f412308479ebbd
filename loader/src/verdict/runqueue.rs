//! The shard threads' run-queue delay (`runqueue_delay`): judged after the sends it may have
//! held (`delay.rs`), and listed before them.

use super::delay::{
    MATERIAL_DELAY_FLOOR_MS, MIN_SENDS_FOR_P99, and_pause, due, judged, measured, pause_clause, sends_show_it,
    waits_held_sends,
};
use super::{LOADER, Limits, reason};
use crate::summary::{Reason, Summary};

/// Fewest run-queue waits for their p99 to invalidate a run whose sends all kept their
/// schedule: from 1000 the p99 is the tenth-worst wait, below it one spell of the host taking
/// the CPU sets it. (CI: 50 req/s of refused connects for 2 s, a few hundred waits, p99 1.44 ms
/// amid hypervisor steal, every send on time — judged untrusted on those few waits.)
const MIN_WAITS_FOR_P99: u64 = 1_000;
/// Fewest run-queue waits per second the schedule needs, per shard, when sends are due at
/// least that often: a shard wakes about once per send up to a few thousand sends a second
/// (clean runs here: 12,008 waits for 12,000 sends at 1,000 req/s, 95,862 for 96,000 at
/// 8,000, 71,818 for 360,000 at 30,000 — it batches there).
const EXPECTED_WAKEUPS_PER_S: f64 = 5_000.0;
/// A shard that ran fewer times than this share of what its schedule needed was starved.
const STARVED_SHARE: f64 = 0.1;

/// The run-queue rule over the reasons from `first` on (the send rules' findings), its
/// reason inserted at `first`.
pub fn judge(s: &Summary, limits: &Limits, first: usize, reasons: &mut Vec<Reason>) {
    let sends_late = sends_show_it(&reasons[first..]).map(|r| r.code.clone());
    // The phases whose own send lag invalidates: the only ones whose lag p99 the waits can
    // be said to have set (a p99 at the host's floor is set by nothing).
    let lagging: Vec<String> = reasons[first..]
        .iter()
        .filter(|r| r.invalidates && r.code == "send_lag")
        .filter_map(|r| r.detail.split_once(": ").map(|(phase, _)| phase.to_string()))
        .collect();
    if let Some(r) = runqueue(s, limits, sends_late.as_deref(), &lagging) {
        reasons.insert(first, r);
    }
}

/// The shard threads' run-queue delay p99: above `Limits::runqueue_p99_ms`, or a material
/// part of the fastest phase's latency p99. It invalidates — unless it rests on fewer than
/// [`MIN_WAITS_FOR_P99`] waits and every send kept its schedule (`sends_late`: the code of
/// an invalidating send-lag or late-send reason, if any): a few waits long enough to set that
/// p99 are one spell of the host taking the CPU, and the engine measured every send and the
/// kernel stamped every answer, so nothing they could have moved moved. Then it annotates.
fn runqueue(s: &Summary, limits: &Limits, sends_late: Option<&str>, lagging: &[String]) -> Option<Reason> {
    let share = limits.loader_delay_pct / 100.0;
    let rq = s.probes.runqueue_us.as_ref()?;
    let p99_ms = rq.p99 / 1000.0;
    // The fastest measured phase's latency p99: the tail most easily bent by the loader.
    let fastest = measured(s)
        .filter(|p| p.sent >= MIN_SENDS_FOR_P99 && p.latency_ms.p99 > 0.0)
        .map(|p| p.latency_ms.p99)
        .min_by(f64::total_cmp);
    let (limit, what) = if p99_ms > limits.runqueue_p99_ms {
        (limits.runqueue_p99_ms, format!("above {} ms", limits.runqueue_p99_ms))
    } else if let Some(fastest) = fastest
        && share < 1.0
        && p99_ms >= MATERIAL_DELAY_FLOOR_MS
        && p99_ms >= share * fastest
    {
        let pct = p99_ms / fastest * 100.0;
        (
            share * fastest,
            format!("{pct:.0}% of the fastest phase's latency p99 ({fastest:.2} ms), a material part of that tail"),
        )
    } else if sends_late == Some("send_lag")
        && let Some(p) =
            judged(s).filter(|p| lagging.contains(&p.name)).find(|p| waits_held_sends(rq, p.send_lag_ms.p99, p))
    {
        (
            limits.runqueue_p99_ms,
            format!(
                "within {} ms, but the longest waits (up to {:.2} ms) held up the sends that set {}'s send lag p99 ({:.2} ms)",
                limits.runqueue_p99_ms,
                rq.max / 1000.0,
                p.name,
                p.send_lag_ms.p99
            ),
        )
    } else {
        return None;
    };
    // A count of 0 is a summary from before waits were counted: judged as before.
    let few = rq.count > 0 && rq.count < MIN_WAITS_FOR_P99;
    let expected = expected_wakeups(s);
    let starved = rq.count > 0 && (rq.count as f64) < STARVED_SHARE * expected;
    let (invalidates, why) = match sends_late {
        _ if starved => (
            true,
            format!(
                "the shards ran only {} times where their schedule needed about {expected:.0} wake-ups: few waits because they were starved, not because the spell was brief",
                rq.count
            ),
        ),
        _ if !few => (true, "something else competed for the loader's CPUs".to_string()),
        Some(code) => (true, format!("a p99 of only {} waits, but the sends show it ({code})", rq.count)),
        None => (
            false,
            and_pause(
                &format!(
                    "a p99 of only {} waits — a few long ones, one spell of the host taking the CPU — and every send kept its schedule (no send-lag or late-send finding) while the kernel stamped every answer: no number moved",
                    rq.count
                ),
                pause_clause(s).as_deref(),
            ),
        ),
    };
    Some(reason(
        "runqueue_delay",
        LOADER,
        invalidates,
        p99_ms,
        Some(limit),
        format!("the loader's shard threads waited {p99_ms:.2} ms (p99) runnable but not running, {what}: {why}"),
    ))
}

/// About how many times the shards had to wake for their schedule: a wake-up per due
/// request, at most [`EXPECTED_WAKEUPS_PER_S`] a second per shard (fewer when they send in
/// rounds, `--send-ahead` of 1 ms or more: one a round).
fn expected_wakeups(s: &Summary) -> f64 {
    let due: u64 = s.phases.iter().map(due).sum();
    let round_ms = s.run.send_ahead_us / 1000.0;
    let per_s = if round_ms >= 1.0 { EXPECTED_WAKEUPS_PER_S.min(1000.0 / round_ms) } else { EXPECTED_WAKEUPS_PER_S };
    let seconds = s.phases.iter().map(|p| p.measured_s.unwrap_or(p.duration_s)).sum::<f64>();
    (due as f64).min(per_s * seconds * s.run.threads.max(1) as f64)
}
