//! The trust verdict: can these numbers be trusted, and which side explains each anomaly?
//!
//! [`judge`] reads a finished [`Summary`] — loader health, probe figures, per-phase send
//! figures — and returns [`Reason`]s, each with a stable code, a side (`loader`, `network`,
//! `target`), the measured value, the limit, whether it *invalidates* the run or only
//! annotates it, and a sentence. The run is trusted when no reason invalidates it.
//!
//! The verdict deliberately does not look at the latency numbers themselves: a high p99 is a
//! finding about the target, not evidence against the measurement. Evidence comes from the
//! loader's own CPU, its threads' run-queue delay, how late it sent, its descriptors, ports and
//! TIME_WAIT, and what the kernel saw on its sockets. The latency p99 only sets how large the
//! loader's own delays may be before they are a material part of it.
//!
//! Three kinds of finding are kept apart: loader saturation (invalidates), the host's
//! resolution limit (its wake-up jitter, the [`floor::Floor`]: annotates which latencies lie
//! within it), and neighbours on the load machine (their TIME_WAIT or ports: annotate, unless
//! the loader itself ran short). Rules by subject: `delay.rs` (run-queue, send lag, late sends,
//! pool waits and drops by cause, read lag), `stop.rs` (whose the emergency stop was),
//! `machine.rs` (CPU, TIME_WAIT, ports, descriptors, cgroup, certificate, TLS), `evidence.rs`
//! (network and target evidence, probe completeness and lost events).
//!
//! It is pure: `loader verdict DIR` re-judges a saved summary with other [`Limits`].

mod delay;
pub mod entries;
mod evidence;
pub mod floor;
mod machine;
mod nic;
mod runqueue;
pub mod scope;
mod steps;
mod stop;

use crate::summary::{Reason, Summary, Verdict};

pub use delay::{ISOLATED_LATE_SENDS, Lag, MATERIAL_DELAY_FLOOR_MS, judge_lag};
pub use machine::CPU_SATURATED_PCT;

/// Limits the evidence is held against: DESIGN.md's defaults, overridden by a scenario's
/// `[verdict]` (the same type: scenario validates it, the verdict reads it).
pub use crate::scenario::VerdictLimits as Limits;

/// Sides a reason can name.
pub const LOADER: &str = "loader";
/// The network between loader and target.
pub const NETWORK: &str = "network";
/// The system under test.
pub const TARGET: &str = "target";

fn reason(code: &str, side: &str, invalidates: bool, value: f64, limit: Option<f64>, detail: String) -> Reason {
    Reason { code: code.into(), side: side.into(), invalidates, value: Some(value), limit, detail }
}

/// Judge `s` against `limits`: each measured phase on the evidence of its own seconds
/// ([`scope`]), the reasons gathered over them ([`steps`]); a run of one measured phase is
/// judged whole.
pub fn judge(s: &Summary, limits: &Limits) -> Verdict {
    let windows = scope::windows(s);
    let mut v = if windows.len() <= 1 {
        let mut v = judge_evidence(s, limits);
        v.steps = windows.iter().map(|w| steps::trust_of(&s.phases[w.phase].name, &v.reasons)).collect();
        v
    } else {
        let whole = judge_evidence(s, limits);
        let each: Vec<(String, Verdict)> = windows
            .iter()
            .map(|w| (s.phases[w.phase].name.clone(), judge_evidence(&scope::scoped(s, w), limits)))
            .collect();
        steps::gather(&whole, &each)
    };
    held_up_closes(s, &mut v.reasons);
    v
}

/// Judge `summary` and write the verdict into it, with the emergency stop's `loader_behind`
/// set to what the verdict concluded of the stop.
pub fn judge_into(summary: &mut Summary, limits: &Limits) {
    summary.verdict = judge(summary, limits);
    if let Some(e) = summary.analysis.emergency_stop.as_mut() {
        e.loader_behind = summary.verdict.reasons.iter().any(|r| r.code == "emergency_stop" && r.invalidates);
    }
}

/// Every rule over one body of evidence: the whole run, or one phase's view of it.
fn judge_evidence(s: &Summary, limits: &Limits) -> Verdict {
    let mut reasons = Vec::new();
    let floor = floor::Floor::of(s);
    machine::judge(s, limits, &mut reasons);
    let first = reasons.len();
    delay::judge(s, limits, &floor, &mut reasons);
    runqueue::judge(s, limits, first, &mut reasons);
    delay::tail(s, limits, &mut reasons);
    stop::emergency_stop(s, limits.loader_delay_pct / 100.0, &mut reasons);
    let sends_late = delay::sends_show_it(&reasons).map(|r| r.code.clone());
    machine::throttling(s, limits, sends_late.as_deref(), &mut reasons);
    machine::cpu(s, limits, &mut reasons);
    evidence::judge(s, limits, &mut reasons);
    nic::judge(s, limits, &mut reasons);
    machine::judge_capacity(s, limits, &mut reasons);
    let trusted = !reasons.iter().any(|r| r.invalidates);
    Verdict { trusted: Some(trusted), reasons, steps: Vec::new() }
}

/// Connections that churned and resets that came back after requests timed out, in a run
/// where the loader itself held its requests up (it left answers unread, or fell behind its
/// schedule): its timeouts closed those connections, and a server answering on a socket the
/// loader closed resets it. They say nothing about the target then, so they are laid at the
/// loader's door, as notes.
fn held_up_closes(s: &Summary, reasons: &mut [Reason]) {
    let held_up = reasons.iter().any(|r| {
        r.invalidates
            && matches!(r.code.as_str(), "read_lag" | "loader_held_connections" | "send_lag" | "emergency_stop")
    });
    let timeouts: u64 = s.phases.iter().map(|p| p.errors.get("timeout").copied().unwrap_or(0)).sum();
    if !held_up || timeouts == 0 {
        return;
    }
    for r in reasons.iter_mut().filter(|r| {
        r.side == TARGET
            && matches!(r.code.as_str(), "connection_churn" | "resets_received" | "time_wait_from_timeouts")
    }) {
        r.side = LOADER.into();
        r.detail = format!(
            "{} — after {timeouts} timeouts of requests the loader itself held up: its own closes, not evidence about the target",
            r.detail
        );
    }
}

#[cfg(test)]
pub(crate) mod tests;
