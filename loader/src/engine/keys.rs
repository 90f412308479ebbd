//! Which row of a data file (`--data`) each request uses: in sequence, uniformly, or
//! Zipf-skewed (`--key-dist zipf:S`, row 1 the hottest).
//!
//! The choice is a function of the run's seed and the request's place in the schedule (its
//! number over the whole run), not of the shard that sends it: the same seed and plan send
//! the same key for the same request, whatever `--threads` is. Each pick seeds a small
//! generator from that pair (`SmallRng::seed_from_u64`, a few multiply-xorshifts) and draws
//! from `rand_distr` — tens of nanoseconds against the microseconds a send costs.

use rand::rngs::SmallRng;
use rand::{Rng as _, SeedableRng as _};
use rand_distr::{Distribution as _, Zipf};

/// How rows are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyDist {
    /// Row 1, 2, 3 … in order, wrapping round.
    Sequence,
    /// Every row equally likely.
    Uniform,
    /// Row `k` (1-based) with probability ∝ 1 / k^s.
    Zipf(f64),
}

impl KeyDist {
    /// Parse `seq`, `uniform` or `zipf:S` (S > 0, finite).
    pub fn parse(text: &str) -> Result<KeyDist, String> {
        let t = text.trim().to_ascii_lowercase();
        match t.as_str() {
            "seq" | "sequence" | "sequential" => Ok(KeyDist::Sequence),
            "uniform" | "random" => Ok(KeyDist::Uniform),
            _ => {
                let Some(s) = t.strip_prefix("zipf:") else {
                    return Err(format!(
                        "`{text}` is not a key distribution: give seq, uniform or zipf:S (e.g. zipf:1.1)"
                    ));
                };
                match s.trim().parse::<f64>() {
                    Ok(s) if s.is_finite() && s > 0.0 && s <= 100.0 => Ok(KeyDist::Zipf(s)),
                    _ => Err(format!(
                        "`{text}`: the Zipf exponent must be a number above 0 (and at most 100), e.g. zipf:1.1"
                    )),
                }
            }
        }
    }

    /// The hottest row's expected share of sends over `rows` rows.
    pub fn hottest_share(self, rows: usize) -> f64 {
        match self {
            KeyDist::Sequence | KeyDist::Uniform => 1.0 / rows.max(1) as f64,
            KeyDist::Zipf(s) => 1.0 / (1..=rows.max(1)).map(|k| (k as f64).powf(-s)).sum::<f64>(),
        }
    }
}

impl std::fmt::Display for KeyDist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyDist::Sequence => f.write_str("seq"),
            KeyDist::Uniform => f.write_str("uniform"),
            KeyDist::Zipf(s) => write!(f, "zipf:{s}"),
        }
    }
}

/// Picks a row for each request.
#[derive(Debug, Clone)]
pub struct Keys {
    rows: u32,
    seed: u64,
    zipf: Option<Zipf<f64>>,
    dist: KeyDist,
}

impl Keys {
    /// Over `rows` rows (≥ 1, at most `u32::MAX`).
    pub fn new(rows: usize, dist: KeyDist, seed: u64) -> Keys {
        let rows = u32::try_from(rows.max(1)).unwrap_or(u32::MAX);
        let zipf = match dist {
            KeyDist::Zipf(s) => Zipf::new(f64::from(rows), s).ok(),
            _ => None,
        };
        Keys { rows, seed, zipf, dist }
    }

    /// Rows to pick from.
    pub fn rows(&self) -> usize {
        self.rows as usize
    }

    /// The row (0-based) of request number `n` of the run.
    #[inline]
    pub fn pick(&self, n: u64) -> u32 {
        match self.dist {
            KeyDist::Sequence => (n % u64::from(self.rows)) as u32,
            KeyDist::Uniform => self.rng(n).random_range(0..self.rows),
            KeyDist::Zipf(_) => match &self.zipf {
                // Zipf draws 1..=rows as a float.
                Some(z) => (z.sample(&mut self.rng(n)) as u32).clamp(1, self.rows) - 1,
                None => 0,
            },
        }
    }

    fn rng(&self, n: u64) -> SmallRng {
        SmallRng::seed_from_u64(self.seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distributions_parse_and_reject_with_a_reason() {
        assert_eq!(KeyDist::parse("seq"), Ok(KeyDist::Sequence));
        assert_eq!(KeyDist::parse("Uniform"), Ok(KeyDist::Uniform));
        assert_eq!(KeyDist::parse("zipf:1.1"), Ok(KeyDist::Zipf(1.1)));
        assert!(KeyDist::parse("zipf:0").unwrap_err().contains("above 0"));
        assert!(KeyDist::parse("zipf:x").unwrap_err().contains("Zipf exponent"));
        assert!(KeyDist::parse("pareto").unwrap_err().contains("seq, uniform or zipf:S"));
        assert_eq!(KeyDist::Zipf(1.1).to_string(), "zipf:1.1");
    }

    #[test]
    fn sequence_wraps_and_picks_depend_on_the_seed_and_the_request_only() {
        let seq = Keys::new(3, KeyDist::Sequence, 0);
        assert_eq!((0..7).map(|n| seq.pick(n)).collect::<Vec<_>>(), [0, 1, 2, 0, 1, 2, 0]);
        let a = Keys::new(1000, KeyDist::Uniform, 7);
        let b = Keys::new(1000, KeyDist::Uniform, 7);
        let c = Keys::new(1000, KeyDist::Uniform, 8);
        let draw = |k: &Keys| (0..100).map(|n| k.pick(n)).collect::<Vec<_>>();
        assert_eq!(draw(&a), draw(&b));
        assert_ne!(draw(&a), draw(&c));
        assert!(draw(&a).iter().all(|&r| r < 1000));
    }

    #[test]
    fn uniform_spreads_evenly() {
        let k = Keys::new(10, KeyDist::Uniform, 1);
        let mut counts = [0u32; 10];
        (0..100_000).for_each(|n| counts[k.pick(n) as usize] += 1);
        // 10,000 expected each; 5 standard deviations is ±474.
        assert!(counts.iter().all(|&c| (9_500..=10_500).contains(&c)), "{counts:?}");
    }

    #[test]
    fn zipf_follows_the_law() {
        // Zipf(1.1) over 100,000 rows: the hottest row's share is 1 / H(100000, 1.1) ≈ 13.5 %,
        // the second's 2^-1.1 of that, the tenth's 10^-1.1.
        let (rows, n) = (100_000, 400_000u64);
        let k = Keys::new(rows, KeyDist::Zipf(1.1), 42);
        let mut counts = vec![0u32; rows];
        (0..n).for_each(|i| counts[k.pick(i) as usize] += 1);
        let expected = KeyDist::Zipf(1.1).hottest_share(rows);
        assert!((0.13..0.14).contains(&expected), "{expected}");
        for rank in [1usize, 2, 3, 10] {
            let want = expected * (rank as f64).powf(-1.1);
            let got = f64::from(counts[rank - 1]) / n as f64;
            assert!((got / want - 1.0).abs() < 0.1, "rank {rank}: {got} vs {want}");
        }
        let distinct = counts.iter().filter(|&&c| c > 0).count();
        assert!(distinct > 10_000 && distinct < rows, "{distinct}");
    }
}
