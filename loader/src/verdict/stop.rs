//! The emergency stop, judged after the loader's own delays: a cliff of the target's only if
//! the loader kept its schedule while the stop's condition held.

use super::delay::{own_part_material, sends_show_it};
use super::{LOADER, reason};
use crate::summary::{Reason, Summary};

/// The emergency stop is a cliff of the target's only if the loader kept its schedule while
/// the condition held. If the loader was behind (its own late sends in those seconds, as the
/// finished series shows them, or any invalidating evidence on its sends), the stop was the
/// loader's: it says so and invalidates. A stop met after the plan's last send cut nothing.
///
/// Late sends of the loader's count only when its part of them is a material share (`share`)
/// of the latency p99 of a step the streak fell in (`delay::own_part_material`): a target
/// whose answers take seconds collapses on its own while the loader holds a send 100 ms.
pub(super) fn emergency_stop(s: &Summary, share: f64, reasons: &mut Vec<Reason>) {
    let Some(e) = &s.analysis.emergency_stop else { return };
    let seconds = || s.series.iter().filter(|x| x.t >= e.since_s && x.t <= e.at_s);
    let late: u64 = seconds().map(|x| x.late_loader).sum();
    let (from, to) = (e.since_s as f64, e.at_s as f64 + 1.0);
    let streak_steps: Vec<_> = super::delay::judged(s)
        .filter(|p| p.late_unpooled > 0 && p.start_s < to && p.start_s + p.duration_s > from)
        .collect();
    let material = streak_steps.is_empty() || streak_steps.iter().any(|p| own_part_material(p, share));
    let behind_seconds =
        if material { seconds().filter(|x| crate::analysis::LiveSecond::from(*x).loader_behind()).count() } else { 0 };
    let sends = sends_show_it(reasons).map(|r| r.code.clone());
    // Read from the finished series (what the live detector read, and `loader_behind` is
    // set from this reason, so a re-judged run is not held to an earlier conclusion).
    if e.after_last_send || !(behind_seconds > 0 || sends.is_some()) {
        return;
    }
    let evidence = match sends {
        Some(code) if behind_seconds == 0 => format!("its sends show it ({code})"),
        _ => format!(
            "{late} of its own sends left more than 10 ms late with a connection free in the seconds the condition held ({behind_seconds} of them behind)"
        ),
    };
    reasons.push(reason(
        "emergency_stop",
        LOADER,
        true,
        e.at_s as f64,
        None,
        format!(
            "stopped: the loader fell behind its schedule, not the target — {evidence}; the bad seconds from t={} s to t={} s ({}) were the loader's, so no cliff of the target's is called",
            e.since_s, e.at_s, e.cause
        ),
    ));
}
