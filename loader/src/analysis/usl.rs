//! The Universal Scalability Law fitted to a run's trusted steps (seed 002: "fitted from a
//! closed-model test or from measured concurrency, L = λW, with 6–8 clean points").
//!
//! `X(N) = λN ÷ (1 + σ(N − 1) + κN(N − 1))`: throughput `X` at concurrency `N`, with `λ` the
//! throughput of one, `σ` the share serialised (contention: Amdahl), `κ` the cost of keeping
//! copies coherent (crosstalk: what makes throughput fall past a peak at
//! `N* = √((1 − σ) ÷ κ)`). In an open run `N` is each step's measured concurrency, ok/s ×
//! mean latency (Little's law), and `X` its ok/s; in a closed run (`--vus`) `N` is each
//! step's virtual users.
//!
//! The fit: `N ÷ X = a + b(N − 1) + cN(N − 1)` is linear in `a = 1/λ`, `b = σ/λ`, `c = κ/λ`,
//! solved by least squares on relative errors (each row over its `N ÷ X`); a solution with a negative coefficient is replaced by the best
//! one without it (σ = 0, κ = 0 or both), so σ and κ are never negative. The error is the
//! mean of |predicted − measured| ÷ measured over the points. Fewer than [`MIN_POINTS`]
//! trusted steps with answers: not fitted, and the summary says why rather than fit a curve
//! through too few points.
//!
//! Owns the fit only: it judges nothing and changes no step.

use crate::summary::{Summary, UslPoint, UslSummary};

/// Trusted steps with answers a fit needs (seed 002: 6–8 clean points).
pub const MIN_POINTS: usize = 6;

/// A mean error above this (10 %) says the law does not describe the steps: the built-in
/// target with 4 workers of 10 ms, stepped 100–600 req/s past its 400, fitted at 17.7 %
/// (`X = min(N ÷ 10 ms, 400)` is a corner the law's smooth curve cannot turn).
pub const POOR_FIT: f64 = 0.10;

/// Fit the USL to `s`'s measured, trusted steps; `None` for a run with no measured step.
pub fn fit(s: &Summary) -> Option<UslSummary> {
    let measured: Vec<_> = s.phases.iter().filter(|p| p.kind == "hold" && p.requests > 0).collect();
    if measured.is_empty() {
        return None;
    }
    let points: Vec<UslPoint> = measured
        .iter()
        .filter(|p| s.verdict.on_phase(&p.name) != Some(false) && p.ok > 0 && p.latency_ms.mean > 0.0)
        .map(|p| UslPoint { step: p.name.clone(), n: concurrency(p), x: p.ok_rps })
        .collect();
    if points.len() < MIN_POINTS {
        let detail = format!(
            "USL not fitted: {} trusted step{} with answers, {MIN_POINTS} needed (seed 002: 6–8 clean points) — step the run finer or longer",
            points.len(),
            if points.len() == 1 { "" } else { "s" }
        );
        return Some(UslSummary { detail, points, ..Default::default() });
    }
    let xy: Vec<(f64, f64)> = points.iter().map(|p| (p.n, p.x)).collect();
    let Some((a, b, c)) = solve(&xy) else {
        let detail = "USL not fitted: the steps' concurrency and throughput admit no fit with σ, κ ≥ 0".to_string();
        return Some(UslSummary { detail, points, ..Default::default() });
    };
    let (lambda, sigma, kappa) = (1.0 / a, b / a, c / a);
    let (axis, unit) = match s.run.closed {
        Some(_) => ("N = virtual users", "users"),
        None => ("N = ok/s × mean latency", "in flight"),
    };
    let error = xy.iter().map(|&(n, x)| (model(n, lambda, sigma, kappa) - x).abs() / x).sum::<f64>() / xy.len() as f64;
    let peak_n = (kappa > 0.0 && sigma < 1.0).then(|| ((1.0 - sigma) / kappa).sqrt());
    let peak_x = peak_n.map(|n| model(n, lambda, sigma, kappa));
    let peak = match (peak_n, peak_x) {
        (Some(n), Some(x)) => format!("peak {x:.0} req/s at {n:.1} {unit} (N* = √((1 − σ) ÷ κ))"),
        _ if sigma > 0.0 => {
            format!("no peak: κ = 0, throughput levels off towards {:.0} req/s (λ ÷ σ)", lambda / sigma)
        }
        _ => "no peak: σ = κ = 0, throughput grew in proportion to concurrency over these steps".to_string(),
    };
    let poor = if error > POOR_FIT {
        " — too large to plan with: the law does not describe these steps (a hard ceiling such as a fixed pool of workers bends sharper than it does)"
    } else {
        ""
    };
    let detail = format!(
        "USL over {} trusted steps ({axis}): σ {sigma:.4}, κ {kappa:.6}, λ {lambda:.1} req/s per unit of concurrency; {peak}; fit error {:.1} %{poor}",
        points.len(),
        error * 100.0
    );
    Some(UslSummary {
        fitted: true,
        detail,
        points,
        sigma: Some(sigma),
        kappa: Some(kappa),
        lambda: Some(lambda),
        peak_n,
        peak_x,
        error_pct: Some(error * 100.0),
    })
}

/// A step's `N`: its virtual users in a closed run, else its measured concurrency.
fn concurrency(p: &crate::summary::PhaseSummary) -> f64 {
    match &p.closed {
        Some(c) => f64::from(c.users),
        None => p.ok_rps * p.latency_ms.mean / 1000.0,
    }
}

/// `X(N)` of the law.
pub fn model(n: f64, lambda: f64, sigma: f64, kappa: f64) -> f64 {
    lambda * n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0))
}

/// The least-squares `(a, b, c)` of `N/X = a + b(N − 1) + cN(N − 1)` with `b, c ≥ 0` and
/// `a > 0`: of the fits with each subset of `b`, `c` free, the feasible one whose predicted
/// throughput errs least.
fn solve(xy: &[(f64, f64)]) -> Option<(f64, f64, f64)> {
    // Each row scaled by 1/y: the squares summed are relative errors, so the saturated steps
    // (large N/X) do not outweigh the ones below the knee.
    let rows: Vec<([f64; 3], f64)> = xy
        .iter()
        .map(|&(n, x)| {
            let y = n / x;
            ([1.0 / y, (n - 1.0) / y, n * (n - 1.0) / y], 1.0)
        })
        .collect();
    let mut best: Option<((f64, f64, f64), f64)> = None;
    for free in [[true, true], [true, false], [false, true], [false, false]] {
        let cols: Vec<usize> = [0].into_iter().chain((1..3).filter(|&k| free[k - 1])).collect();
        let Some(coef) = least_squares(&rows, &cols) else { continue };
        let mut abc = [0.0; 3];
        for (k, &col) in cols.iter().enumerate() {
            abc[col] = coef[k];
        }
        let (a, b, c) = (abc[0], abc[1], abc[2]);
        if !(a > 0.0 && b >= 0.0 && c >= 0.0) {
            continue;
        }
        let err: f64 = xy.iter().map(|&(n, x)| ((model(n, 1.0 / a, b / a, c / a) - x) / x).powi(2)).sum();
        if best.as_ref().is_none_or(|(_, e)| err < *e) {
            best = Some(((a, b, c), err));
        }
    }
    best.map(|(abc, _)| abc)
}

/// Ordinary least squares on the columns `cols` of `rows` (normal equations, Gaussian
/// elimination with partial pivoting); `None` when they are singular.
fn least_squares(rows: &[([f64; 3], f64)], cols: &[usize]) -> Option<Vec<f64>> {
    let k = cols.len();
    let mut m = vec![vec![0.0; k + 1]; k];
    for (x, y) in rows {
        for i in 0..k {
            for j in 0..k {
                m[i][j] += x[cols[i]] * x[cols[j]];
            }
            m[i][k] += x[cols[i]] * y;
        }
    }
    for col in 0..k {
        let pivot = (col..k).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        if m[pivot][col].abs() < 1e-12 {
            return None;
        }
        m.swap(col, pivot);
        let pivot_row = m[col].clone();
        for (row, r) in m.iter_mut().enumerate() {
            if row != col {
                let f = r[col] / pivot_row[col];
                for (v, p) in r.iter_mut().zip(&pivot_row).skip(col) {
                    *v -= f * p;
                }
            }
        }
    }
    Some((0..k).map(|i| m[i][k] / m[i][i]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(points: &[(f64, f64)]) -> Summary {
        let mut s = crate::verdict::tests::clean();
        let base = s.phases[0].clone();
        s.phases = points
            .iter()
            .enumerate()
            .map(|(k, &(n, x))| {
                let mut p = base.clone();
                p.name = format!("step {}", k + 1);
                p.kind = "hold".into();
                p.ok_rps = x;
                p.ok = (x * 10.0) as u64 + 1;
                p.requests = p.ok;
                p.latency_ms.mean = n / x * 1000.0;
                p
            })
            .collect();
        s.verdict.trusted = Some(true);
        s.verdict.steps.clear();
        s
    }

    #[test]
    fn a_known_law_is_recovered_with_its_peak() {
        let (lambda, sigma, kappa) = (100.0, 0.05, 0.002);
        let pts: Vec<(f64, f64)> = [1.0, 4.0, 8.0, 16.0, 24.0, 32.0, 48.0, 64.0]
            .iter()
            .map(|&n| (n, model(n, lambda, sigma, kappa)))
            .collect();
        let u = fit(&steps(&pts)).expect("a fit");
        assert!(u.fitted, "{}", u.detail);
        assert!((u.sigma.unwrap() - sigma).abs() < 1e-6 && (u.kappa.unwrap() - kappa).abs() < 1e-8, "{}", u.detail);
        let n_star = ((1.0 - sigma) / kappa).sqrt();
        assert!((u.peak_n.unwrap() - n_star).abs() < 1e-3, "{}", u.detail);
        assert!(u.error_pct.unwrap() < 1e-6);
        assert!(u.detail.contains("peak 740 req/s at 21.8 in flight"), "{}", u.detail);
    }

    #[test]
    fn a_linear_run_has_no_crosstalk_and_no_invented_peak() {
        // Throughput ∝ concurrency, a little noise: σ and κ clamp at 0, never negative.
        let pts = [(0.5, 100.0), (1.0, 201.0), (1.5, 299.0), (2.0, 400.0), (2.5, 502.0), (3.0, 598.0)];
        let u = fit(&steps(&pts)).expect("a fit");
        assert!(u.fitted && u.sigma.unwrap() >= 0.0 && u.kappa.unwrap() >= 0.0, "{}", u.detail);
        if u.kappa == Some(0.0) {
            assert!(u.peak_n.is_none() && u.detail.contains("no peak"), "{}", u.detail);
        }
        assert!(u.error_pct.unwrap() < 2.0, "{}", u.detail);
    }

    #[test]
    fn too_few_trusted_steps_are_not_fitted_and_say_why() {
        let mut s = steps(&[(1.0, 100.0), (2.0, 190.0), (4.0, 330.0), (8.0, 500.0), (16.0, 600.0), (32.0, 550.0)]);
        assert!(fit(&s).unwrap().fitted);
        s.verdict.steps = vec![crate::summary::StepTrust {
            phase: "step 6".into(),
            trusted: false,
            reasons: vec!["late_sends".into()],
        }];
        let u = fit(&s).unwrap();
        assert!(!u.fitted && u.sigma.is_none(), "{}", u.detail);
        assert!(u.detail.starts_with("USL not fitted: 5 trusted steps with answers, 6 needed"), "{}", u.detail);
    }
}
