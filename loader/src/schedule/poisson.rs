//! Poisson arrivals: a window's requests at random instants, as independent users arrive
//! (Tsung's, Gatling's and JMeter's Poisson arrivals), the same for the same seed.
//!
//! The schedule stays a function of the request's number: request `i`'s instant is computed,
//! not discovered, and shards and machines still take `i % n`. The arrivals are a unit-rate
//! Poisson process in the window's *mass* `m = N(t)` — the requests the even schedule plans
//! by `t` — mapped back to time through `N⁻¹` (for a ramp, that is the Poisson process of
//! rate `λ(t)`). The mass is cut in slots of [`SLOT`] units: slot `j` holds a Poisson
//! number of arrivals with mean its width, drawn from the seed, the window and `j` alone;
//! given that count, its arrivals are uniform over the slot, made in order from exponential
//! spacings (`Sₖ ÷ Sₙ₊₁`). The counts before each slot are kept (8 bytes per 4,096 planned
//! requests); a slot's instants are made when asked, by whoever asks.
//!
//! Owns: the counts and the masses. Does not: map a mass to a time (`Window`, which knows
//! its rates), walk a shard's share (`ShardSchedule`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use rand::SeedableRng as _;
use rand::rngs::SmallRng;
use rand_distr::{Distribution as _, Exp1, Poisson};

/// Mass of one slot: 4,096 planned requests.
pub const SLOT: f64 = 4096.0;

/// The Poisson arrivals of one window.
#[derive(Debug, PartialEq)]
pub struct Arrivals {
    /// The seed, mixed with the window's identity.
    base: u64,
    /// The window's mass, `N(T)`: its planned requests as a real number.
    mass: f64,
    /// `before[j]`: arrivals in the slots before `j` (one more entry than slots).
    before: Vec<u64>,
}

/// Arrivals made lately, shared: a phase's window is asked for many times a run.
static MADE: Mutex<VecDeque<Arc<Arrivals>>> = Mutex::new(VecDeque::new());

/// Most windows' arrivals kept made.
const KEPT: usize = 64;

impl Arrivals {
    /// The arrivals of a window of mass `mass` identified by `window` (its bounds and rates,
    /// hashed), from `seed`; made once and shared.
    pub fn of(seed: u64, window: u64, mass: f64) -> Arc<Arrivals> {
        let base = mix(seed ^ mix(window));
        let mut made = MADE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = made.iter().find(|a| a.base == base && a.mass.to_bits() == mass.to_bits()) {
            return Arc::clone(a);
        }
        let a = Arc::new(Arrivals::new(base, mass));
        if made.len() >= KEPT {
            made.pop_front();
        }
        made.push_back(Arc::clone(&a));
        a
    }

    fn new(base: u64, mass: f64) -> Arrivals {
        let mass = if mass.is_finite() && mass > 0.0 { mass } else { 0.0 };
        let slots = (mass / SLOT).ceil() as usize;
        let mut before = Vec::with_capacity(slots + 1);
        let mut total = 0u64;
        before.push(0);
        for j in 0..slots {
            let width = slot_width(mass, j);
            let mut rng = SmallRng::seed_from_u64(mix(base ^ mix(2 * j as u64)));
            let n = Poisson::new(width).map_or(0.0, |p| p.sample(&mut rng));
            total = total.saturating_add(n as u64);
            before.push(total);
        }
        Arrivals { base, mass, before }
    }

    /// Arrivals in the whole window.
    pub fn total(&self) -> u64 {
        self.before.last().copied().unwrap_or(0)
    }

    /// The slot holding arrival `i` (`i < total`).
    pub fn slot_of(&self, i: u64) -> usize {
        self.before.partition_point(|&b| b <= i).saturating_sub(1)
    }

    /// The number of slot `j`'s first arrival.
    pub fn first_of(&self, j: usize) -> u64 {
        self.before.get(j).copied().unwrap_or_else(|| self.total())
    }

    /// The masses of slot `j`'s arrivals, ascending, each in `[j·SLOT, j·SLOT + width)`.
    pub fn slot_masses(&self, j: usize) -> Vec<f64> {
        let n = match (self.before.get(j), self.before.get(j + 1)) {
            (Some(&a), Some(&b)) => (b - a) as usize,
            _ => return Vec::new(),
        };
        let (from, width) = (j as f64 * SLOT, slot_width(self.mass, j));
        let mut rng = SmallRng::seed_from_u64(mix(self.base ^ mix(2 * j as u64 + 1)));
        let mut sums = Vec::with_capacity(n);
        let mut sum = 0.0f64;
        for _ in 0..n {
            let e: f64 = Exp1.sample(&mut rng);
            sum += e;
            sums.push(sum);
        }
        let e: f64 = Exp1.sample(&mut rng);
        let whole = sum + e;
        sums.iter().map(|s| from + width * (s / whole)).collect()
    }

    /// The mass of arrival `i` (`i < total`), made from its slot.
    pub fn mass_of(&self, i: u64) -> f64 {
        let j = self.slot_of(i);
        let k = (i - self.first_of(j)) as usize;
        self.slot_masses(j).get(k).copied().unwrap_or(self.mass)
    }

    /// Arrivals whose mass is below `m`.
    pub fn before_mass(&self, m: f64) -> u64 {
        if m <= 0.0 {
            return 0;
        }
        if m >= self.mass {
            return self.total();
        }
        let j = ((m / SLOT) as usize).min(self.before.len().saturating_sub(2));
        self.first_of(j) + self.slot_masses(j).partition_point(|&x| x < m) as u64
    }
}

/// Slot `j`'s width in mass: [`SLOT`], or what is left of the window for the last.
fn slot_width(mass: f64, j: usize) -> f64 {
    (mass - j as f64 * SLOT).clamp(0.0, SLOT)
}

/// The Kolmogorov–Smirnov p-value of `gaps` (inter-arrival times, any unit) against the
/// exponential of their mean — the test Poisson arrivals must pass, here and end to end
/// (Stephens' small-sample correction; the mean is estimated, which only makes passing
/// harder).
pub fn ks_exponential_p(gaps: &[f64]) -> f64 {
    let mut gaps: Vec<f64> = gaps.iter().copied().filter(|g| g.is_finite()).collect();
    if gaps.is_empty() {
        return 0.0;
    }
    gaps.sort_by(f64::total_cmp);
    let n = gaps.len() as f64;
    let mean = gaps.iter().sum::<f64>() / n;
    let d = gaps
        .iter()
        .enumerate()
        .map(|(k, &x)| {
            let f = 1.0 - (-x / mean).exp();
            (f - k as f64 / n).abs().max(((k + 1) as f64 / n - f).abs())
        })
        .fold(0.0, f64::max);
    let lambda = (n.sqrt() + 0.12 + 0.11 / n.sqrt()) * d;
    let q: f64 = (1..=100)
        .map(|k: i32| (if k % 2 == 1 { 2.0 } else { -2.0 }) * (-2.0 * f64::from(k * k) * lambda * lambda).exp())
        .sum();
    q.clamp(0.0, 1.0)
}

/// SplitMix64's finaliser: nearby inputs, unrelated outputs.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_masses_agree_and_repeat_for_a_seed() {
        let a = Arrivals::new(mix(7), 10_000.5);
        assert_eq!(a.before.len(), 4, "three slots: 4096, 4096, 1808.5");
        let all: Vec<f64> = (0..a.before.len() - 1).flat_map(|j| a.slot_masses(j)).collect();
        assert_eq!(all.len() as u64, a.total());
        assert!(all.windows(2).all(|w| w[0] < w[1]), "ascending");
        assert!(all.iter().all(|&m| (0.0..10_000.5).contains(&m)));
        assert_eq!(a.mass_of(5_000), all[5_000]);
        assert_eq!(a.before_mass(all[1234]), 1234);
        assert_eq!(a.before_mass(all[1234] + 1e-9), 1235);
        assert_eq!(Arrivals::new(mix(7), 10_000.5), a, "the same seed, the same arrivals");
        assert_ne!(Arrivals::new(mix(8), 10_000.5).slot_masses(0), a.slot_masses(0));
        // Poisson(10,000.5): within 5 standard deviations of its mean.
        assert!((a.total() as f64 - 10_000.5).abs() < 5.0 * 100.0, "{}", a.total());
    }

    #[test]
    fn an_empty_window_has_none() {
        let a = Arrivals::new(1, 0.0);
        assert_eq!((a.total(), a.before_mass(5.0)), (0, 0));
        assert!(a.slot_masses(0).is_empty());
    }
}
