//! The charts' drawing core: axes that map data to pixels (linear or log10), tick choice,
//! downsampling of long series, and [`Chart`], which collects shapes and writes one inline
//! `<svg>`. What each chart shows is `charts.rs`; the colours are the page's CSS classes.

use std::fmt::Write as _;

use super::escape::{esc, px};

/// Width of every chart, in SVG user units (the page scales it to the column).
pub const WIDTH: f64 = 960.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 14.0;
const BOTTOM: f64 = 34.0;

/// How an axis maps values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Evenly.
    Linear,
    /// By decades (values must be > 0; smaller ones are drawn at the low end).
    Log10,
}

/// A data range mapped onto a pixel range.
#[derive(Debug, Clone, Copy)]
pub struct Axis {
    lo: f64,
    hi: f64,
    scale: Scale,
    from: f64,
    to: f64,
}

impl Axis {
    /// `[lo, hi]` onto `[from, to]` pixels (`to < from` for an upward y axis). An empty or
    /// inverted range is widened so that every value still maps to a finite pixel.
    pub fn new(lo: f64, hi: f64, scale: Scale, from: f64, to: f64) -> Axis {
        let (mut lo, mut hi) = (lo, hi);
        if scale == Scale::Log10 {
            lo = if lo.is_finite() && lo > 0.0 { lo } else { 1e-3 };
            hi = if hi.is_finite() && hi > lo { hi } else { lo * 10.0 };
        } else {
            lo = if lo.is_finite() { lo } else { 0.0 };
            hi = if hi.is_finite() && hi > lo { hi } else { lo + 1.0 };
        }
        Axis { lo, hi, scale, from, to }
    }

    /// The pixel of `v`, clamped to the axis.
    pub fn map(&self, v: f64) -> f64 {
        let f = |x: f64| if self.scale == Scale::Log10 { x.max(self.lo * 1e-9).log10() } else { x };
        let share = ((f(v) - f(self.lo)) / (f(self.hi) - f(self.lo))).clamp(0.0, 1.0);
        let share = if share.is_finite() { share } else { 0.0 };
        self.from + share * (self.to - self.from)
    }

    /// Ticks: round 1-2-5 steps (at most about `n`) on a linear axis; on a log one decades,
    /// with 2 and 5 between them when the axis spans fewer than two and a half.
    pub fn ticks(&self, n: usize) -> Vec<f64> {
        match self.scale {
            Scale::Linear => linear_ticks(self.lo, self.hi, n),
            Scale::Log10 => {
                let first = self.lo.log10().floor() as i32;
                let last = self.hi.log10().ceil() as i32;
                let steps: &[f64] = if (self.hi / self.lo).log10() < 2.5 { &[1.0, 2.0, 5.0] } else { &[1.0] };
                (first..=last.min(first + 12))
                    .flat_map(|e| steps.iter().map(move |m| m * 10f64.powi(e)))
                    .filter(|v| *v >= self.lo && *v <= self.hi)
                    .collect()
            }
        }
    }
}

/// Round ticks from `lo` to `hi`: a step of 1, 2 or 5 × 10^k giving at most about `n`.
pub fn linear_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    if !lo.is_finite() || !hi.is_finite() || hi <= lo {
        return vec![lo];
    }
    let rough = (hi - lo) / n.max(1) as f64;
    let decade = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * decade).find(|s| *s >= rough).unwrap_or(10.0 * decade);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last.min(first + 100)).map(|k| k as f64 * step).collect()
}

/// What a bucket of a downsampled series keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The mean: rates, whose area matters.
    Mean,
    /// The largest: latency tails and peaks, which must not be averaged away.
    Max,
}

/// At most `max_points` of `points` (x ascending): consecutive runs merged into one point at
/// the run's first x. Missing values (NaN) are left out of a bucket; an all-missing bucket
/// stays NaN (a gap in the line).
pub fn downsample(points: &[(f64, f64)], max_points: usize, keep: Keep) -> Vec<(f64, f64)> {
    if points.len() <= max_points || max_points == 0 {
        return points.to_vec();
    }
    let bucket = points.len().div_ceil(max_points);
    points
        .chunks(bucket)
        .map(|run| {
            let ys = run.iter().map(|p| p.1).filter(|y| y.is_finite());
            let y = match keep {
                Keep::Max => ys.fold(f64::NAN, f64::max),
                Keep::Mean => {
                    let (sum, n) = ys.fold((0.0, 0usize), |(s, n), y| (s + y, n + 1));
                    if n == 0 { f64::NAN } else { sum / n as f64 }
                }
            };
            (run[0].0, y)
        })
        .collect()
}

/// One chart being drawn: its axes and the shapes so far.
#[derive(Debug)]
pub struct Chart {
    /// Height in SVG units.
    height: f64,
    /// The x axis.
    pub x: Axis,
    /// The y axis.
    pub y: Axis,
    bands: String,
    shapes: String,
}

impl Chart {
    /// A chart `height` units tall over these data ranges.
    pub fn new(height: f64, x: (f64, f64, Scale), y: (f64, f64, Scale)) -> Chart {
        Chart {
            height,
            x: Axis::new(x.0, x.1, x.2, LEFT, WIDTH - RIGHT),
            y: Axis::new(y.0, y.1, y.2, height - BOTTOM, TOP),
            bands: String::new(),
            shapes: String::new(),
        }
    }

    /// A shaded span of x (a phase), labelled at its top.
    pub fn band(&mut self, x0: f64, x1: f64, class: &str, label: &str) {
        let (a, b) = (self.x.map(x0), self.x.map(x1));
        let _ = write!(
            self.bands,
            r#"<rect class="{class}" x="{}" y="{}" width="{}" height="{}"><title>{}</title></rect>"#,
            px(a),
            px(TOP),
            px((b - a).max(0.0)),
            px(self.height - BOTTOM - TOP),
            esc(label)
        );
        if b - a > 36.0 {
            let _ = write!(
                self.bands,
                r#"<text class="band-label" x="{}" y="{}">{}</text>"#,
                px(a + 3.0),
                px(TOP + 10.0),
                esc(label)
            );
        }
    }

    /// A line through `points` (NaN breaks it), drawn with `class`.
    pub fn line(&mut self, points: &[(f64, f64)], class: &str, title: &str) {
        let mut d = String::new();
        let mut pen_down = false;
        for &(x, y) in points {
            if !(x.is_finite() && y.is_finite()) {
                pen_down = false;
                continue;
            }
            let _ = write!(d, "{}{} {}", if pen_down { "L" } else { "M" }, px(self.x.map(x)), px(self.y.map(y)));
            pen_down = true;
        }
        if !d.is_empty() {
            let _ = write!(self.shapes, r#"<path class="{class}" d="{d}"><title>{}</title></path>"#, esc(title));
        }
    }

    /// A horizontal marker at `y` (a limit), labelled at the right.
    pub fn hline(&mut self, y: f64, class: &str, label: &str) {
        let py = px(self.y.map(y));
        let _ = write!(
            self.shapes,
            r#"<line class="{class}" x1="{}" x2="{}" y1="{py}" y2="{py}"/><text class="mark-label" x="{}" y="{}" text-anchor="end">{}</text>"#,
            px(LEFT),
            px(WIDTH - RIGHT),
            px(WIDTH - RIGHT - 2.0),
            px(self.y.map(y) - 3.0),
            esc(label)
        );
    }

    /// A vertical marker at `x` (the knee, the cliff), labelled at its top.
    pub fn vline(&mut self, x: f64, class: &str, label: &str) {
        let p = px(self.x.map(x));
        let _ = write!(
            self.shapes,
            r#"<line class="{class}" x1="{p}" x2="{p}" y1="{}" y2="{}"/><text class="mark-label" x="{}" y="{}">{}</text>"#,
            px(TOP),
            px(self.height - BOTTOM),
            px(self.x.map(x) + 3.0),
            px(TOP + 22.0),
            esc(label)
        );
    }

    /// The finished `<svg>`: grid and tick labels (`x_ticks`, `y_ticks` as value and text),
    /// the axis titles, then the shapes; `title` is its accessible name.
    pub fn finish(
        self,
        title: &str,
        x_ticks: &[(f64, String)],
        y_ticks: &[(f64, String)],
        axes: (&str, &str),
    ) -> String {
        let (bottom, right) = (self.height - BOTTOM, WIDTH - RIGHT);
        let mut out = format!(
            r#"<svg class="chart" viewBox="0 0 {} {}" role="img" aria-label="{}"><rect class="plot" x="{}" y="{}" width="{}" height="{}"/>"#,
            px(WIDTH),
            px(self.height),
            esc(title),
            px(LEFT),
            px(TOP),
            px(right - LEFT),
            px(bottom - TOP)
        );
        out.push_str(&self.bands);
        for (v, label) in y_ticks {
            let y = px(self.y.map(*v));
            let _ = write!(
                out,
                r#"<line class="grid" x1="{}" x2="{}" y1="{y}" y2="{y}"/><text class="tick" x="{}" y="{y}" dy="4" text-anchor="end">{}</text>"#,
                px(LEFT),
                px(right),
                px(LEFT - 5.0),
                esc(label)
            );
        }
        for (v, label) in x_ticks {
            let x = px(self.x.map(*v));
            let _ = write!(
                out,
                r#"<line class="grid" x1="{x}" x2="{x}" y1="{}" y2="{}"/><text class="tick" x="{x}" y="{}" text-anchor="middle">{}</text>"#,
                px(TOP),
                px(bottom),
                px(bottom + 14.0),
                esc(label)
            );
        }
        let _ = write!(
            out,
            r#"<text class="axis" x="{}" y="{}" text-anchor="middle">{}</text><text class="axis" x="12" y="{}" transform="rotate(-90 12 {})" text-anchor="middle">{}</text>"#,
            px((LEFT + right) / 2.0),
            px(self.height - 4.0),
            esc(axes.0),
            px((TOP + bottom) / 2.0),
            px((TOP + bottom) / 2.0),
            esc(axes.1)
        );
        out.push_str(&self.shapes);
        out.push_str("</svg>");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_linear_axis_maps_ends_to_ends_and_clamps() {
        let a = Axis::new(0.0, 100.0, Scale::Linear, 10.0, 110.0);
        assert_eq!(a.map(0.0), 10.0);
        assert_eq!(a.map(50.0), 60.0);
        assert_eq!(a.map(100.0), 110.0);
        assert_eq!(a.map(1e9), 110.0);
        assert_eq!(a.map(-5.0), 10.0);
        // Upward y: the top of the range is the smaller pixel.
        let y = Axis::new(0.0, 10.0, Scale::Linear, 200.0, 0.0);
        assert_eq!(y.map(10.0), 0.0);
    }

    #[test]
    fn a_log_axis_spaces_decades_evenly() {
        let a = Axis::new(1.0, 1000.0, Scale::Log10, 0.0, 300.0);
        assert!((a.map(10.0) - 100.0).abs() < 1e-9);
        assert!((a.map(100.0) - 200.0).abs() < 1e-9);
        assert_eq!(a.map(0.0), 0.0, "zero is drawn at the low end, not at -inf");
        assert_eq!(a.ticks(5), [1.0, 10.0, 100.0, 1000.0]);
        let narrow = Axis::new(0.5, 20.0, Scale::Log10, 0.0, 300.0);
        assert_eq!(narrow.ticks(5), [0.5, 1.0, 2.0, 5.0, 10.0, 20.0]);
    }

    #[test]
    fn degenerate_ranges_still_map_to_finite_pixels() {
        for a in [
            Axis::new(5.0, 5.0, Scale::Linear, 0.0, 100.0),
            Axis::new(f64::NAN, f64::INFINITY, Scale::Linear, 0.0, 100.0),
            Axis::new(0.0, 0.0, Scale::Log10, 0.0, 100.0),
        ] {
            for v in [0.0, 5.0, 1e12, -1.0, f64::NAN] {
                assert!(a.map(v).is_finite(), "{a:?} {v}");
            }
        }
    }

    #[test]
    fn linear_ticks_are_round_and_bounded() {
        assert_eq!(linear_ticks(0.0, 100.0, 5), [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        assert_eq!(linear_ticks(0.0, 7.0, 4), [0.0, 2.0, 4.0, 6.0]);
        assert_eq!(linear_ticks(3.0, 3.0, 4), [3.0]);
        assert!(linear_ticks(0.0, 1e300, 5).len() <= 101);
    }

    #[test]
    fn downsampling_keeps_the_peak_of_a_bucket_for_tails() {
        let points: Vec<(f64, f64)> = (0..3600).map(|t| (t as f64, if t == 1234 { 900.0 } else { 1.0 })).collect();
        let max = downsample(&points, 600, Keep::Max);
        assert_eq!(max.len(), 600);
        assert_eq!(max.iter().map(|p| p.1).fold(0.0, f64::max), 900.0, "the spike survives");
        let mean = downsample(&points, 600, Keep::Mean);
        assert!(mean.iter().all(|p| p.1 < 900.0), "a mean spreads the spike over its bucket");
        assert_eq!(mean[0], (0.0, 1.0));
        assert_eq!(mean[1].0, 6.0, "each point sits at its bucket's first x");
        // Short series and missing values.
        assert_eq!(downsample(&points[..10], 600, Keep::Max).len(), 10);
        let gaps = [(0.0, f64::NAN), (1.0, f64::NAN), (2.0, 3.0), (3.0, f64::NAN)];
        let d = downsample(&gaps, 2, Keep::Mean);
        assert!(d[0].1.is_nan());
        assert_eq!(d[1], (2.0, 3.0));
    }

    #[test]
    fn a_line_breaks_at_missing_values_and_titles_are_escaped() {
        let mut c = Chart::new(200.0, (0.0, 10.0, Scale::Linear), (0.0, 10.0, Scale::Linear));
        c.line(&[(0.0, 1.0), (1.0, 2.0), (2.0, f64::NAN), (3.0, 4.0)], "s-ok", "<ok>");
        let svg = c.finish("t", &[], &[], ("x", "y"));
        let d = svg.split(" d=\"").nth(1).unwrap().split('"').next().unwrap();
        assert_eq!((d.matches('M').count(), d.matches('L').count()), (2, 1), "{d}");
        assert!(svg.contains("<title>&lt;ok&gt;</title>"));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
    }
}
