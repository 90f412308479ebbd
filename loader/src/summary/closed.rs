//! A closed run's figures: its users and think time, and each step's load and throughput
//! law.
//!
//! A closed run has no arrival rate to offer; its users send as their answers come. So each
//! step's `offered_rps` is what its `N` users would send at the lightest step's pace: `N`
//! times that step's sends per user, `X₀ ÷ N₀` (by the law below, `N ÷ (R₀ + Z)` with the
//! loader's own share of each cycle in it). Throughput that falls short of it is the target
//! setting the pace, which the knee and the step judgement read as they read an open run's
//! shortfall. Each step's own law, `N ÷ (R + Z)` with its own mean response time `R` and the
//! mean think time `Z`, is what its throughput must be in a closed loop (the interactive
//! response time law): a throughput well below it means time in each user's cycle that
//! neither the target's answer nor the think time explains — the loader's.

use serde::{Deserialize, Serialize};

use super::PhaseSummary;

/// The closed model's settings (`run.closed`; null on an open run).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClosedRun {
    /// The most virtual users of any step.
    pub users_max: u32,
    /// The think time's law: `constant` or `exponential`.
    pub think: String,
    /// The mean think time, ms (0: the users send again at once).
    pub think_ms: f64,
    /// The seed of exponential think times (`--seed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The lightest step's sends a second per user, `X₀ ÷ N₀`: each step's `offered_rps`
    /// is its users times this (null: the lightest step sent nothing).
    pub per_user_rps: Option<f64>,
}

/// One closed phase's load (`phases[].closed`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClosedStep {
    /// Its virtual users.
    pub users: u32,
    /// `N ÷ (R + Z)` with this step's mean response time `R`: what its throughput must be
    /// when nothing but the target and the think time holds the users (null: nothing answered).
    pub law_rps: Option<f64>,
}

/// Fill in a closed run's phases: each one's users, law and offered load (`users[i]`: the
/// users of phase `i`; `think_ms`: the mean think time). Returns `X₀ ÷ N₀`.
pub fn fill(phases: &mut [PhaseSummary], users: &[u32], think_ms: f64) -> Option<f64> {
    // The lightest judged step that sent; the warm-up when nothing else did.
    let per_user = phases
        .iter()
        .zip(users)
        .filter(|(p, n)| p.sent > 0 && p.sent_rps > 0.0 && **n > 0)
        .min_by_key(|(p, n)| (p.kind != "hold", **n))
        .map(|(p, n)| p.sent_rps / f64::from(*n));
    for (p, &n) in phases.iter_mut().zip(users) {
        let law =
            (p.service_ms.count > 0).then(|| round2(f64::from(n) * 1000.0 / (p.service_ms.mean + think_ms).max(1e-6)));
        p.closed = Some(ClosedStep { users: n, law_rps: law });
        p.offered_rps = per_user.map_or(p.sent_rps, |x| round2(x * f64::from(n)));
    }
    per_user.map(round2)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
