//! Pure: the bisections that follow the coarse pass, and the one figure of several.
//!
//! The coarse pass brackets the limit between its last good step and its first confirmed
//! failure (×1.25 apart). Each bisection then probes the geometric middle of that bracket
//! widened by one coarse step — its first probe is the failed rate again (CI: one coarse
//! failure by the host's noise at 186,265/s capped a calibration at 146,941 between others of
//! 186,265–191,533) — [`PROBES`] times (to within 1.5625^(1/16) ≈ 2.8 %), each a run of its own: a warm-up
//! and one hold at that rate, judged by `judge.rs` on its settled seconds. A probe that passes
//! raises the bracket's floor, one that fails lowers its top. Several bisections in a row
//! meet the host's noise independently; the certificate takes their median, and their spread
//! says how far one calibration can be trusted to repeat.
//!
//! It runs nothing and reads nothing.

use super::judge::{Side, StepCall, on_schedule};

/// Probes per bisection.
pub const PROBES: usize = 4;
/// Bisections per calibration: the figure is their median.
pub const BISECTIONS: usize = 3;

/// One bisection between a rate that passed and one that failed.
#[derive(Debug, Clone)]
pub struct Bisection {
    lo: f64,
    hi: f64,
    /// The on-schedule rate of the coarse step the floor starts at.
    floor_rps: f64,
    /// The highest probe that passed.
    pub best: Option<StepCall>,
    /// The side of the lowest probe that failed (`None`: every probe passed).
    pub failed_side: Option<Side>,
    /// Every probe, in order.
    pub probes: Vec<StepCall>,
}

impl Bisection {
    /// Between `good` (a step that passed) and `top`, one coarse step past `bad` (the first
    /// confirmed failure above it), or less where `--max-rate` says: the first probe is then
    /// `bad`'s rate again, so a coarse failure that was the host's noise is found out instead
    /// of capping every bisection below it.
    pub fn new(good: &StepCall, top: f64) -> Bisection {
        Bisection {
            lo: good.figures.offered_rps,
            hi: top,
            floor_rps: on_schedule(good),
            best: None,
            failed_side: None,
            probes: Vec::new(),
        }
    }

    /// The rate of the next probe; `None` once [`PROBES`] have run.
    pub fn next_rate(&self) -> Option<f64> {
        (self.probes.len() < PROBES).then(|| (self.lo * self.hi).sqrt().round())
    }

    /// Take a judged probe at the rate [`next_rate`](Self::next_rate) gave.
    pub fn record(&mut self, probe: StepCall) {
        let rate = probe.figures.offered_rps;
        if probe.side == Side::Ok {
            self.lo = rate;
            self.best = Some(probe.clone());
        } else {
            self.hi = rate;
            self.failed_side = Some(probe.side);
        }
        self.probes.push(probe);
    }

    /// What this bisection found: the highest passing probe's on-schedule rate, or the coarse
    /// floor when none passed.
    pub fn figure(&self) -> f64 {
        self.best.as_ref().map_or(self.floor_rps, on_schedule)
    }
}

/// The median of `xs` (of an even count, the lower middle one); `None` for none.
pub fn median(xs: &[f64]) -> Option<f64> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len().saturating_sub(1) / 2).copied()
}

/// The largest distance of any of `xs` from `center`, percent of it (one decimal).
pub fn spread_pct(xs: &[f64], center: f64) -> f64 {
    if center <= 0.0 {
        return 0.0;
    }
    let worst = xs.iter().map(|x| (x / center - 1.0).abs()).fold(0.0, f64::max);
    (worst * 1000.0).round() / 10.0
}

/// The side most bisections' failures were on (`coarse`: the coarse failure's, for a
/// bisection where every probe passed); a tie goes to the loader only with a strict majority.
pub fn limiting_side(bisections: &[Bisection], coarse: Side) -> Side {
    let loader = bisections.iter().filter(|b| b.failed_side.unwrap_or(coarse) == Side::Loader).count();
    if loader * 2 > bisections.len() { Side::Loader } else { Side::Target }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::judge::StepFigures;

    fn call(rate: f64, side: Side) -> StepCall {
        StepCall {
            figures: StepFigures {
                step: format!("probe {rate}"),
                offered_rps: rate,
                sent_rps: rate,
                ok_rps: rate,
                sent: (rate * 3.0) as u64,
                ..Default::default()
            },
            side,
            why: Vec::new(),
        }
    }

    #[test]
    fn probes_halve_the_bracket_geometrically() {
        let mut b = Bisection::new(&call(80_000.0, Side::Ok), 125_000.0);
        assert_eq!(b.next_rate(), Some(100_000.0), "the failed rate again first");
        b.record(call(100_000.0, Side::Ok));
        assert_eq!(b.next_rate(), Some(111_803.0), "it passed: above it");
        b.record(call(111_803.0, Side::Loader));
        assert_eq!(b.next_rate(), Some(105_737.0));
        b.record(call(105_737.0, Side::Loader));
        b.record(call(102_800.0, Side::Ok));
        assert_eq!(b.next_rate(), None, "{} probes", PROBES);
        assert_eq!(b.figure(), 102_800.0);
        assert_eq!(b.failed_side, Some(Side::Loader));
    }

    #[test]
    fn a_bisection_where_every_probe_failed_keeps_the_coarse_floor() {
        let mut b = Bisection::new(&call(80_000.0, Side::Ok), 125_000.0);
        while let Some(r) = b.next_rate() {
            b.record(call(r, Side::Target));
        }
        assert_eq!(b.figure(), 80_000.0);
        assert_eq!(b.failed_side, Some(Side::Target));
    }

    #[test]
    fn the_figure_is_the_median_and_the_spread_its_widest_distance() {
        assert_eq!(median(&[95_000.0, 120_000.0, 100_000.0]), Some(100_000.0));
        assert_eq!(median(&[]), None);
        assert_eq!(spread_pct(&[95_000.0, 120_000.0, 100_000.0], 100_000.0), 20.0);
        assert_eq!(spread_pct(&[99_000.0, 100_000.0], 100_000.0), 1.0);
    }

    #[test]
    fn the_side_is_what_most_bisections_ran_into() {
        let ended = |side: Option<Side>| {
            let mut b = Bisection::new(&call(1000.0, Side::Ok), 1562.5);
            b.failed_side = side;
            b
        };
        let two_loader = [ended(Some(Side::Loader)), ended(Some(Side::Target)), ended(None)];
        assert_eq!(limiting_side(&two_loader, Side::Loader), Side::Loader);
        assert_eq!(limiting_side(&two_loader, Side::Target), Side::Target);
        let target = [ended(Some(Side::Target)), ended(Some(Side::Target)), ended(Some(Side::Loader))];
        assert_eq!(limiting_side(&target, Side::Loader), Side::Target);
    }
}
