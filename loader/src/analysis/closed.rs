//! What a closed run's report says of it: that its target set the pace, and each step's
//! throughput against the law a closed loop obeys, `X = N ÷ (R + Z)`.
//!
//! A closed run's users wait for each answer before the next send, so a slow target slows
//! the users instead of queueing their requests: its latency stays as long as the users'
//! wait, and it never shows the timeouts an open run at the same nominal load would
//! (seed 002: "the closed model never says broken, only a little slower"). The law holds
//! in any closed loop; a step whose throughput falls short of it lost time in its users'
//! cycles that neither the target's answers nor the think time account for — the loader's
//! (late wake-ups after a think time, answers read late).

use std::fmt::Write;

use crate::summary::Summary;

/// A throughput further than this below its law (5 %) is said at a glance.
pub const LAW_SHORT: f64 = 0.05;

/// The closed run's notes (nothing for an open run): what the model means, and each judged
/// step's throughput against its law — all of them with `--all` (`all`), at a glance only
/// those short of it.
pub fn notes(s: &Summary, all: bool) -> String {
    let mut out = String::new();
    let Some(c) = &s.run.closed else { return out };
    let think = match (c.think_ms, c.think.as_str()) {
        (0.0, _) => "no think time".to_string(),
        (t, "exponential") => format!("exponential think times of mean {t} ms"),
        (t, _) => format!("think time {t} ms"),
    };
    let _ = writeln!(
        out,
        "closed model: up to {} users, {think}; each user waits for its answer, so the target set the pace — a step's shortfall from offered (its users at the lightest step's {}/s each) is its queue, held in the users' wait rather than shown as timeouts",
        c.users_max,
        c.per_user_rps.map_or("-".to_string(), |x| format!("{x:.2}")),
    );
    for p in s.phases.iter().filter(|p| p.kind == "hold") {
        let Some(step) = &p.closed else { continue };
        let Some(law) = step.law_rps else { continue };
        let short = law > 0.0 && p.ok_rps < (1.0 - LAW_SHORT) * law && p.sent > 0;
        if !all && !short {
            continue;
        }
        let gap = if law > 0.0 { (p.sent_rps - law) / law * 100.0 } else { 0.0 };
        let _ = writeln!(
            out,
            "  {}: {} users, sent {:.1}/s against N ÷ (R + Z) = {} ÷ ({:.1} + {} ms) = {law:.1}/s ({gap:+.1} %){}",
            p.name,
            step.users,
            p.sent_rps,
            step.users,
            p.service_ms.mean,
            c.think_ms,
            if short {
                " — time in the users' cycle that neither the target nor the think time explains"
            } else {
                ""
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::phase;
    use super::*;
    use crate::summary::{ClosedRun, ClosedStep};

    #[test]
    fn a_step_short_of_its_law_is_said_at_a_glance_and_every_step_with_all() {
        let mut s = crate::verdict::tests::clean();
        s.phases = vec![phase("step 1", 100.0, 100.0, 4.0), phase("step 2", 200.0, 150.0, 4.0)];
        // 20 and 40 users, R 6 ms (the fixture's mean), Z 194 ms: the law is 100 and 200/s;
        // step 2 sent 150.
        s.phases[1].sent_rps = 150.0;
        for (p, users) in s.phases.iter_mut().zip([20, 40]) {
            p.closed = Some(ClosedStep { users, law_rps: Some(f64::from(users) * 5.0) });
        }
        assert_eq!(notes(&s, false), "", "an open run has no closed notes");
        s.run.closed = Some(ClosedRun {
            users_max: 40,
            think: "constant".into(),
            think_ms: 194.0,
            seed: None,
            per_user_rps: Some(5.0),
        });
        let glance = notes(&s, false);
        assert!(glance.starts_with("closed model: up to 40 users, think time 194 ms; each user waits"), "{glance}");
        assert!(glance.contains("the lightest step's 5.00/s each"), "{glance}");
        assert!(!glance.contains("step 1:"), "a step on its law is not news: {glance}");
        assert!(
            glance.contains(
                "step 2: 40 users, sent 150.0/s against N ÷ (R + Z) = 40 ÷ (6.0 + 194 ms) = 200.0/s (-25.0 %)"
            ),
            "{glance}"
        );
        assert!(notes(&s, true).contains("step 1: 20 users, sent 100.0/s"), "{}", notes(&s, true));
    }
}
