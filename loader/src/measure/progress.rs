//! The live progress display: on a terminal an indicatif bar over the whole run (phase, time
//! left, the second's live signals), plain lines otherwise (`--plain`, pipes, CI logs), none
//! when stdout is for scripts (`--quiet`, `--json`: events then go to stderr).

use std::io::{IsTerminal as _, Write as _};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::meters::LiveTotals;
use crate::scenario::Plan;
use crate::schedule::Window;

/// Redraws of the bar per second: the figures change once a second, the spinner and the
/// elapsed time a little more often so a stalled run is visible as a stalled run.
const REFRESH_HZ: u8 = 4;

/// Below this share of the offered rate a second's sends count as falling behind (shown as a
/// live signal; the verdict decides afterwards).
const BEHIND_SHARE: f64 = 0.95;

/// The live progress display: a bar on a terminal, plain lines otherwise, or nothing.
pub(super) struct Progress<'a> {
    bar: Option<ProgressBar>,
    /// Whether stdout carries the progress at all (not with `--quiet` or `--json`).
    shown: bool,
    plan: &'a Plan,
    /// The phases' send schedules: what each second offered.
    windows: Vec<Window>,
}

impl<'a> Progress<'a> {
    pub fn new(plan: &'a Plan) -> Self {
        let shown = plan.stdout.full();
        let tty = shown && !plan.plain && std::io::stdout().is_terminal();
        let bar = tty.then(|| {
            let bar = ProgressBar::with_draw_target(
                Some(plan.duration().as_secs().max(1)),
                ProgressDrawTarget::stdout_with_hz(REFRESH_HZ),
            );
            let style = ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:12.cyan/blue} {pos:>4}/{len}s {prefix:<18} {wide_msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style.progress_chars("=> "));
            bar.enable_steady_tick(Duration::from_millis(1000 / u64::from(REFRESH_HZ)));
            bar
        });
        Progress { bar, shown, plan, windows: plan.phases.iter().map(|p| p.window()).collect() }
    }

    pub fn line(&self, at: Duration, second: &LiveTotals, cpu: f64) {
        if !self.shown {
            return;
        }
        let phase_text = self.plan.phase_at(at).map_or_else(
            || "draining".to_string(),
            |p| match p.users {
                0 => format!("{} @ {:.0}/s", p.name, p.offered()),
                n => format!("{} @ {n} users", p.name),
            },
        );
        // The second that just ended: (at - 1 s, at].
        let to = at.as_nanos() as u64;
        let from = to.saturating_sub(1_000_000_000);
        let offered: u64 = self.windows.iter().map(|w| w.planned_between(from, to)).sum();
        let signals = signals(offered, second);
        match &self.bar {
            Some(bar) => {
                bar.set_position(at.as_secs().min(bar.length().unwrap_or(u64::MAX)));
                bar.set_prefix(phase_text);
                // Signals first: a narrow terminal truncates the end of the line.
                bar.set_message(format!(
                    "{}sent {}/s ok {}/s err {} in-flight {} conns {} cpu {cpu:.0}%",
                    signals.trim_start().to_string() + if signals.is_empty() { "" } else { "  " },
                    second.sent,
                    second.ok,
                    second.errors,
                    second.in_flight,
                    second.open
                ));
            }
            None => {
                let text = format!(
                    "[{:>4}s] {phase_text:<20} sent {:>7}/s  ok {:>7}/s  errors {:>5}  in-flight {:>5}  conns {:>5}  cpu {:>3.0}%{signals}",
                    at.as_secs(),
                    second.sent,
                    second.ok,
                    second.errors,
                    second.in_flight,
                    second.open,
                    cpu
                );
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{text}");
                let _ = out.flush();
            }
        }
    }

    /// A line that stays on screen (an event, not progress); on stderr when stdout is for
    /// scripts.
    pub fn note(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(text),
            None if !self.shown => eprintln!("loader: {text}"),
            None => {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{text}");
                let _ = out.flush();
            }
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish();
        }
    }
}

/// The second's live signals, empty when there is nothing to flag: sends behind what the
/// schedule offered in that second (the loader or the pool could not keep up) and errors.
fn signals(offered: u64, second: &LiveTotals) -> String {
    let mut out = String::new();
    if offered > 0 && (second.sent as f64) < BEHIND_SHARE * offered as f64 {
        out.push_str(&format!("  BEHIND: sent {:.0}% of offered", second.sent as f64 / offered as f64 * 100.0));
    }
    if second.errors > 0 {
        out.push_str("  ERRORS");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn second(sent: u64, errors: u64) -> LiveTotals {
        LiveTotals { sent, ok: sent, errors, ..LiveTotals::default() }
    }

    #[test]
    fn signals_flag_a_second_behind_the_rate_and_errors() {
        assert_eq!(signals(1000, &second(1000, 0)), "");
        assert_eq!(signals(1000, &second(960, 0)), "", "within 5 % is on schedule");
        assert_eq!(signals(1000, &second(500, 0)), "  BEHIND: sent 50% of offered");
        assert_eq!(signals(0, &second(0, 3)), "  ERRORS");
        assert_eq!(signals(0, &second(0, 0)), "", "a second that offered nothing is never behind");
    }
}
