//! The live progress display: a status line on a terminal, plain lines otherwise.

use std::io::{IsTerminal as _, Write as _};
use std::time::Duration;

use super::meters::LiveTotals;
use crate::scenario::Plan;

/// The live progress display: a status line on a terminal, plain lines otherwise.
pub(super) struct Progress {
    tty: bool,
    phases: Vec<(Duration, String, f64)>,
}

impl Progress {
    pub fn new(plan: &Plan) -> Self {
        Progress {
            tty: !plan.plain && std::io::stdout().is_terminal(),
            phases: plan.phases.iter().map(|p| (p.start, p.name.clone(), p.rate)).collect(),
        }
    }

    pub fn line(&self, at: Duration, second: &LiveTotals, cpu: f64) {
        let phase = self
            .phases
            .iter()
            .rev()
            .find(|(start, ..)| at > *start)
            .map(|(_, name, rate)| format!("{name} @ {rate:.0}/s"))
            .unwrap_or_else(|| "draining".to_string());
        let text = format!(
            "[{:>4}s] {phase:<20} sent {:>7}/s  ok {:>7}/s  errors {:>5}  in-flight {:>5}  conns {:>5}  cpu {:>3.0}%",
            at.as_secs(),
            second.sent,
            second.ok,
            second.errors,
            second.in_flight,
            second.open,
            cpu
        );
        let mut out = std::io::stdout().lock();
        if self.tty {
            let _ = write!(out, "\r{text}\x1b[K");
        } else {
            let _ = writeln!(out, "{text}");
        }
        let _ = out.flush();
    }

    /// A line that stays on screen (an event, not progress).
    pub fn note(&self, text: &str) {
        let mut out = std::io::stdout().lock();
        let _ = if self.tty { writeln!(out, "\r{text}\x1b[K") } else { writeln!(out, "{text}") };
        let _ = out.flush();
    }

    pub fn finish(&self) {
        if self.tty {
            println!();
        }
    }
}
