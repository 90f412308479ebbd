//! The send schedule: the intended send time of every request, computed, never discovered.
//!
//! A window's arrival rate is constant or changes linearly from `rate` at its start to
//! `end_rate` at its end. Request `i` is due at the instant `t` where the requests planned
//! so far reach `i`:
//!
//! - constant rate `r`: `t = i / r` — wrk2's absolute schedule;
//! - linear ramp from `r0` to `r1` over `T`: `N(t) = r0·t + (r1 − r0)·t²/(2T) = i`, solved
//!   exactly as `t = 2i / (r0 + √(r0² + 2(r1 − r0)·i/T))` (the cancellation-free root,
//!   valid for ramps up and down and for `r0 = 0`).
//!
//! So a slow response or a late wake-up never shifts later requests. A run with `n` shards
//! gives shard `k` every request with `i % n == k`: the shards together send exactly the
//! planned sequence, and each one's share is evenly spread.
//!
//! A run spread over machines (`--shard i/N`) gives machine `i` every request with
//! `i % N == i` in the same way ([`Share`]): a window with a share plans, times and counts
//! only its own requests, and the machines' shards split those again.
//!
//! With Poisson arrivals (`arrival = "poisson"`) request `i` is due at a random instant
//! instead, still a function of `i` and the seed (`poisson.rs`): the same partition, the
//! same exact counts, the count itself drawn.
//!
//! A closed run (`--vus`) has no arrival rate: its requests fall due as its virtual users'
//! answers come in and their think times end (`closed.rs`).
//!
//! This module is pure (no clock, no I/O); the engine asks it what is due next.

mod closed;
mod poisson;

use std::sync::Arc;

pub use closed::{Step, Think, Users};
pub use poisson::{Arrivals, ks_exponential_p};

/// One machine's part of a run spread over several (`--shard INDEX/COUNT`): request `k` of
/// every window is this machine's when `k % count == index`. The whole run is `0/1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    /// This machine's index, `0..count`.
    pub index: u64,
    /// Machines in the run (≥ 1).
    pub count: u64,
}

/// Most machines one run may be spread over.
pub const MAX_MACHINES: u64 = 10_000;

impl Default for Share {
    fn default() -> Self {
        Share { index: 0, count: 1 }
    }
}

impl Share {
    /// Of the first `n` requests of a window, how many are this share's.
    pub fn of(&self, n: u64) -> u64 {
        if n > self.index { (n - self.index).div_ceil(self.count) } else { 0 }
    }

    /// The run's request number of this share's request `j`.
    pub fn global(&self, j: u64) -> u64 {
        self.index.saturating_add(self.count.saturating_mul(j))
    }

    /// The whole run (one machine).
    pub fn is_whole(&self) -> bool {
        self.count <= 1
    }
}

/// How a phase's requests arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Arrival {
    /// Evenly spaced: request `i` at `N⁻¹(i)` (wrk2's schedule).
    #[default]
    Uniform,
    /// At the instants of a Poisson process of the same rate, drawn from `seed`.
    Poisson {
        /// The seed of the draws.
        seed: u64,
    },
}

impl Arrival {
    /// Its name in `summary.json` (`run.arrival`) and the flag: `uniform` or `poisson`.
    pub fn name(self) -> &'static str {
        match self {
            Arrival::Uniform => "uniform",
            Arrival::Poisson { .. } => "poisson",
        }
    }

    /// The seed of its draws (Poisson's).
    pub fn seed(self) -> Option<u64> {
        match self {
            Arrival::Uniform => None,
            Arrival::Poisson { seed } => Some(seed),
        }
    }
}

/// One phase as the schedule needs it: a window of the run and its arrival rate, constant
/// (`rate == end_rate`) or changing linearly from `rate` to `end_rate`.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// Start, in nanoseconds from the run's start instant.
    pub start_ns: u64,
    /// End (exclusive), in nanoseconds from the run's start instant.
    pub end_ns: u64,
    /// Arrival rate at the window's start, requests per second (≥ 0; > 0 when constant).
    pub rate: f64,
    /// Arrival rate at the window's end, requests per second (≥ 0); equal to `rate` for a
    /// constant window.
    pub end_rate: f64,
    /// The part of the window this machine sends (the whole window unless `--shard`).
    pub share: Share,
    /// Its Poisson arrivals (over all machines); `None`: evenly spaced.
    pub arrivals: Option<Arc<Arrivals>>,
}

impl Window {
    /// A window at one constant rate.
    pub fn constant(start_ns: u64, end_ns: u64, rate: f64) -> Self {
        Window { start_ns, end_ns, rate, end_rate: rate, share: Share::default(), arrivals: None }
    }

    /// A window whose rate changes linearly from `from` to `to`.
    pub fn ramp(start_ns: u64, end_ns: u64, from: f64, to: f64) -> Self {
        Window { start_ns, end_ns, rate: from, end_rate: to, share: Share::default(), arrivals: None }
    }

    /// This window as machine `share` sends it.
    pub fn with_share(self, share: Share) -> Self {
        Window { share, ..self }
    }

    /// This window with its requests arriving as `arrival` says.
    pub fn with_arrival(self, arrival: Arrival) -> Self {
        match arrival {
            Arrival::Uniform => Window { arrivals: None, ..self },
            Arrival::Poisson { seed } => {
                let identity = [self.start_ns, self.end_ns, self.rate.to_bits(), self.end_rate.to_bits()]
                    .into_iter()
                    .fold(0u64, |h, x| poisson::mix(h ^ x));
                let arrivals = Arrivals::of(seed, identity, self.arrivals_by(self.span_s()));
                Window { arrivals: Some(arrivals), ..self }
            }
        }
    }

    fn is_constant(&self) -> bool {
        self.rate == self.end_rate
    }

    fn span_s(&self) -> f64 {
        self.end_ns.saturating_sub(self.start_ns) as f64 / 1e9
    }

    /// Requests planned in the first `t` seconds of the window, as a real number: `N(t)`.
    fn arrivals_by(&self, t: f64) -> f64 {
        let span = self.span_s();
        if self.is_constant() || span <= 0.0 {
            return t * self.rate;
        }
        self.rate * t + (self.end_rate - self.rate) * t * t / (2.0 * span)
    }

    /// Number of requests due in this window across all shards (of this machine's share):
    /// every `i` with `intended(i) < end`.
    pub fn planned(&self) -> u64 {
        self.share.of(self.planned_all())
    }

    /// [`Window::planned`] over all machines.
    pub fn planned_all(&self) -> u64 {
        if let Some(a) = &self.arrivals {
            return a.total();
        }
        let n = if self.is_constant() {
            // Kept as it always was: the constant path is wrk2's exact count.
            (self.span_s() * self.rate).ceil()
        } else {
            ((self.rate + self.end_rate) / 2.0 * self.span_s()).ceil()
        };
        if !n.is_finite() || n <= 0.0 {
            return 0;
        }
        let n = n as u64;
        // Guard the float edge: the last request must still start before `end`.
        if n > 0 && self.intended_all_ns(n - 1) >= self.end_ns { n - 1 } else { n }
    }

    /// Intended send time of the window's request `i` (of this machine's share).
    pub fn intended_ns(&self, i: u64) -> u64 {
        self.intended_all_ns(self.share.global(i))
    }

    /// Intended send time of the window's request `i` over all machines.
    fn intended_all_ns(&self, i: u64) -> u64 {
        match &self.arrivals {
            Some(a) => self.time_of_arrival(a.mass_of(i)),
            None => self.time_at(i as f64),
        }
    }

    /// The instant of a Poisson arrival of mass `m` (`m < N(T)`): always inside the window.
    fn time_of_arrival(&self, m: f64) -> u64 {
        self.time_at(m).min(self.end_ns.saturating_sub(1)).max(self.start_ns)
    }

    /// The instant at which the planned requests reach `i` (a real number): `N⁻¹(i)`.
    fn time_at(&self, i_f: f64) -> u64 {
        if self.is_constant() {
            return self.start_ns.saturating_add((i_f * 1e9 / self.rate) as u64);
        }
        if i_f <= 0.0 {
            return self.start_ns;
        }
        let r0 = self.rate;
        // N(t) = r0·t + a·t² with a = (r1 − r0)/(2T); the root of a·t² + r0·t − i = 0 written
        // as 2i / (r0 + √(r0² + 4a·i)) never subtracts nearly equal numbers, and the
        // discriminant is ≥ r1² ≥ 0 for every i ≤ N(T) (clamped against rounding).
        let a = (self.end_rate - r0) / (2.0 * self.span_s());
        let disc = (r0 * r0 + 4.0 * a * i_f).max(0.0);
        let denom = r0 + disc.sqrt();
        // Only a window that plans nothing (both rates 0) or NaN rates get here.
        if denom.is_nan() || denom <= 0.0 {
            return self.end_ns;
        }
        let t_ns = 2.0 * i_f / denom * 1e9;
        self.start_ns.saturating_add(if t_ns.is_finite() { t_ns as u64 } else { u64::MAX - self.start_ns })
    }

    /// Requests of this window (of this machine's share) whose intended time falls before
    /// `at_ns`.
    fn planned_before(&self, at_ns: u64) -> u64 {
        self.share.of(self.planned_before_all(at_ns))
    }

    /// Requests of this window over all machines whose intended time falls before `at_ns`
    /// (exact: agrees with [`Window::intended_all_ns`] request by request).
    fn planned_before_all(&self, at_ns: u64) -> u64 {
        let planned = self.planned_all();
        if at_ns <= self.start_ns {
            return 0;
        }
        if at_ns >= self.end_ns {
            return planned;
        }
        // First guess from N(t), then settle on the exact boundary.
        let mass = self.arrivals_by((at_ns - self.start_ns) as f64 / 1e9);
        let guess = match &self.arrivals {
            Some(a) => a.before_mass(mass) as f64,
            None => mass.ceil(),
        };
        let mut k = if guess.is_finite() && guess > 0.0 { (guess as u64).min(planned) } else { 0 };
        while k > 0 && self.intended_all_ns(k - 1) >= at_ns {
            k -= 1;
        }
        while k < planned && self.intended_all_ns(k) < at_ns {
            k += 1;
        }
        k
    }

    /// Requests of this window (all shards) due in `[from_ns, to_ns)`.
    pub fn planned_between(&self, from_ns: u64, to_ns: u64) -> u64 {
        if from_ns >= to_ns {
            return 0;
        }
        self.planned_before(to_ns) - self.planned_before(from_ns)
    }
}

/// A request that is due: when it should be sent, and the phase it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// Intended send time, nanoseconds from the run's start.
    pub intended_ns: u64,
    /// Index of the phase (window) it belongs to.
    pub phase: usize,
    /// Its index within the phase across all shards (`i` in `start + i / rate`).
    pub index: u64,
}

/// One shard's share of the schedule, walked in order.
#[derive(Debug, Clone)]
pub struct ShardSchedule {
    windows: Vec<Window>,
    planned: Vec<u64>,
    shard: u64,
    shards: u64,
    phase: usize,
    /// Next global index (within `phase`) that belongs to this shard.
    index: u64,
    /// The request at `index`, made when the schedule moved there.
    next: Option<Due>,
    /// The Poisson slot the last request came from: its phase, number, first arrival and
    /// masses (made once per slot, not once per request).
    slot: Option<(usize, usize, u64, Vec<f64>)>,
    /// A closed run's virtual users, which then make every request due (`None`: open).
    users: Option<Box<Users>>,
}

impl ShardSchedule {
    /// Shard `shard` of `shards` over `windows` (in time order).
    pub fn new(windows: Vec<Window>, shard: usize, shards: usize) -> Self {
        assert!(shards > 0 && shard < shards, "shard {shard} of {shards}");
        let planned = windows.iter().map(Window::planned).collect();
        let mut s = ShardSchedule {
            windows,
            planned,
            shard: shard as u64,
            shards: shards as u64,
            phase: 0,
            index: shard as u64,
            next: None,
            slot: None,
            users: None,
        };
        s.skip_exhausted();
        s
    }

    /// A closed run's schedule: `users` make every request due (see `closed.rs`).
    pub fn closed(users: Users) -> Self {
        ShardSchedule {
            windows: Vec::new(),
            planned: Vec::new(),
            shard: 0,
            shards: 1,
            phase: 0,
            index: 0,
            next: None,
            slot: None,
            users: Some(Box::new(users)),
        }
    }

    /// A request of a closed run finished at `at_ns`: its user thinks, then is due again.
    /// Nothing on an open run.
    #[inline]
    pub fn finished(&mut self, at_ns: u64) {
        if let Some(u) = self.users.as_mut() {
            u.finished(at_ns);
        }
    }

    /// The run stopped: a closed run's users send no more (see [`Users::stop`]).
    pub fn stop_users(&mut self) {
        if let Some(u) = self.users.as_mut() {
            u.stop();
        }
    }

    /// A closed run's most users on this shard at once (`None`: an open run).
    pub fn users_most(&self) -> Option<u32> {
        self.users.as_ref().map(|u| u.most())
    }

    /// Whether the run is closed: a completion may make a request due.
    #[inline]
    pub fn is_closed(&self) -> bool {
        self.users.is_some()
    }

    fn skip_exhausted(&mut self) {
        while self.phase < self.windows.len() && self.index >= self.planned[self.phase] {
            self.phase += 1;
            self.index = self.shard;
        }
        self.next = self.make_next();
    }

    /// The request at `index` of `phase`; a Poisson window's from its slot, kept.
    fn make_next(&mut self) -> Option<Due> {
        let w = self.windows.get(self.phase)?;
        let intended_ns = match &w.arrivals {
            None => w.intended_ns(self.index),
            Some(a) => {
                let i = w.share.global(self.index);
                let j = a.slot_of(i);
                let fresh = !matches!(&self.slot, Some((p, k, _, _)) if *p == self.phase && *k == j);
                if fresh {
                    self.slot = Some((self.phase, j, a.first_of(j), a.slot_masses(j)));
                }
                let (_, _, first, masses) = self.slot.as_ref()?;
                let m = masses.get((i - first) as usize).copied().unwrap_or(f64::MAX);
                w.time_of_arrival(m)
            }
        };
        Some(Due { intended_ns, phase: self.phase, index: self.index })
    }

    /// The next request of this shard, if any remain.
    #[inline]
    pub fn peek(&self) -> Option<Due> {
        match &self.users {
            Some(u) => u.peek(),
            None => self.next,
        }
    }

    /// Move past the request `peek` returned.
    #[inline]
    pub fn advance(&mut self) {
        if let Some(u) = self.users.as_mut() {
            u.advance();
            return;
        }
        self.index += self.shards;
        self.skip_exhausted();
    }

    /// Requests of this shard due in phase `phase`.
    pub fn planned_in(&self, phase: usize) -> u64 {
        let Some(&total) = self.planned.get(phase) else { return 0 };
        if total > self.shard { (total - self.shard).div_ceil(self.shards) } else { 0 }
    }

    /// What is left of this shard's schedule, from the request [`ShardSchedule::peek`] would
    /// return on: `(phase, requests)` for every phase with some left.
    pub fn remaining(&self) -> Vec<(usize, u64)> {
        (self.phase..self.windows.len())
            .map(|p| {
                let from = if p == self.phase { self.index } else { self.shard };
                let total = self.planned[p];
                (p, if total > from { (total - from).div_ceil(self.shards) } else { 0 })
            })
            .filter(|&(_, n)| n > 0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn win(start_s: f64, end_s: f64, rate: f64) -> Window {
        Window::constant((start_s * 1e9) as u64, (end_s * 1e9) as u64, rate)
    }

    fn ramp(start_s: f64, end_s: f64, from: f64, to: f64) -> Window {
        Window::ramp((start_s * 1e9) as u64, (end_s * 1e9) as u64, from, to)
    }

    /// Every request of `w`, checked against the closed form and the window's edges.
    fn check_ramp(w: Window) -> Vec<u64> {
        let n = w.planned();
        let times: Vec<u64> = (0..n).map(|i| w.intended_ns(i)).collect();
        assert!(times.windows(2).all(|p| p[0] < p[1]), "{w:?}: not strictly increasing");
        assert!(times.iter().all(|&t| t >= w.start_ns && t < w.end_ns), "{w:?}: spills out");
        // N(t_i) = i, to well under one request.
        let span = (w.end_ns - w.start_ns) as f64 / 1e9;
        for (i, &t) in times.iter().enumerate() {
            let t = (t - w.start_ns) as f64 / 1e9;
            let arrivals = w.rate * t + (w.end_rate - w.rate) * t * t / (2.0 * span);
            assert!((arrivals - i as f64).abs() < 1e-3 * (1.0 + i as f64).sqrt(), "{w:?} i={i}: N = {arrivals}");
        }
        // The next request would start at or past the end.
        assert!(w.intended_ns(n) >= w.end_ns || n == 0, "{w:?}: request {n} fits before the end");
        times
    }

    fn drain(mut s: ShardSchedule) -> Vec<Due> {
        let mut out = Vec::new();
        while let Some(d) = s.peek() {
            out.push(d);
            s.advance();
        }
        out
    }

    #[test]
    fn constant_rate_is_evenly_spaced_and_exact_in_count() {
        let w = win(0.0, 10.0, 2000.0);
        assert_eq!(w.planned(), 20_000);
        let all = drain(ShardSchedule::new(vec![w], 0, 1));
        assert_eq!(all.len(), 20_000);
        assert_eq!(all[0].intended_ns, 0);
        assert_eq!(all[1].intended_ns, 500_000);
        assert_eq!(all[19_999].intended_ns, 9_999_500_000);
    }

    #[test]
    fn shards_partition_the_global_sequence() {
        let windows = vec![win(0.0, 1.0, 1000.0), win(1.0, 2.5, 333.0)];
        let whole = drain(ShardSchedule::new(windows.clone(), 0, 1));
        let mut merged: Vec<Due> = (0..3).flat_map(|k| drain(ShardSchedule::new(windows.clone(), k, 3))).collect();
        merged.sort_by_key(|d| (d.intended_ns, d.phase, d.index));
        assert_eq!(merged, whole);
        for k in 0..3 {
            let s = ShardSchedule::new(windows.clone(), k, 3);
            let n = drain(s.clone()).iter().filter(|d| d.phase == 1).count() as u64;
            assert_eq!(s.planned_in(1), n, "shard {k}");
        }
    }

    #[test]
    fn machines_and_their_shards_partition_the_global_sequence() {
        // 3 machines of 2 shards each send exactly what one machine would, ramps included.
        let windows = vec![win(0.0, 1.0, 1000.0), ramp(1.0, 3.0, 100.0, 701.0), win(3.0, 3.5, 3.3)];
        let whole = drain(ShardSchedule::new(windows.clone(), 0, 1));
        let mut union = Vec::new();
        let (mut planned, mut between) = (vec![0; windows.len()], 0);
        for index in 0..3 {
            let share = Share { index, count: 3 };
            let mine: Vec<Window> = windows.iter().map(|w| w.clone().with_share(share)).collect();
            for (p, w) in mine.iter().enumerate() {
                planned[p] += w.planned();
                between += w.planned_between(500_000_000, 2_000_000_000);
            }
            for shard in 0..2 {
                // Back to the run's numbering: request j of this machine is k = index + 3j.
                union.extend(
                    drain(ShardSchedule::new(mine.clone(), shard, 2))
                        .into_iter()
                        .map(|d| Due { index: share.global(d.index), ..d }),
                );
            }
        }
        union.sort_by_key(|d| (d.intended_ns, d.phase, d.index));
        assert_eq!(union, whole);
        assert_eq!(planned, windows.iter().map(Window::planned).collect::<Vec<_>>());
        let whole_between: u64 = windows.iter().map(|w| w.planned_between(500_000_000, 2_000_000_000)).sum();
        assert_eq!(between, whole_between);
        assert_eq!(Share { index: 2, count: 3 }.of(7), 2);
        assert_eq!(Share { index: 2, count: 3 }.of(2), 0);
    }

    #[test]
    fn fractional_rates_never_spill_past_the_window() {
        let w = win(2.0, 3.0, 3.3);
        let all = drain(ShardSchedule::new(vec![w.clone()], 0, 1));
        assert_eq!(all.len(), 4);
        assert!(all.iter().all(|d| d.intended_ns < w.end_ns));
    }

    #[test]
    fn ramps_are_exact_in_count_and_monotone() {
        // Mean rate × span, rounded up: (0 + 100)/2 × 10 s = 500; (100 + 300)/2 × 2 s = 400.
        assert_eq!(check_ramp(ramp(0.0, 10.0, 0.0, 100.0)).len(), 500);
        assert_eq!(check_ramp(ramp(5.0, 7.0, 100.0, 300.0)).len(), 400);
        // Ramps down, to zero, fractional totals.
        assert_eq!(check_ramp(ramp(0.0, 4.0, 300.0, 100.0)).len(), 800);
        assert_eq!(check_ramp(ramp(0.0, 2.0, 50.0, 0.0)).len(), 50);
        assert_eq!(check_ramp(ramp(1.0, 1.5, 3.0, 7.0)).len(), 3);
        assert_eq!(check_ramp(ramp(0.0, 3.0, 0.0, 0.0)).len(), 0);
        // A long, fast ramp stays exact.
        assert_eq!(check_ramp(ramp(0.0, 60.0, 1000.0, 50_000.0)).len(), 1_530_000);
    }

    #[test]
    fn a_ramp_from_zero_starts_slowly_and_ends_at_its_rate() {
        let w = ramp(0.0, 10.0, 0.0, 100.0);
        // N(t) = 5 t²: request 5 is due at 1 s, request 125 at 5 s.
        assert_eq!(w.intended_ns(0), 0);
        assert_eq!(w.intended_ns(5), 1_000_000_000);
        assert_eq!(w.intended_ns(125), 5_000_000_000);
        // Near the end the gaps are 1/100 s.
        let gap = w.intended_ns(499) - w.intended_ns(498);
        assert!((9_990_000..=10_100_000).contains(&gap), "{gap}");
    }

    #[test]
    fn a_ramp_between_equal_rates_is_the_constant_schedule() {
        let c = win(0.0, 10.0, 2000.0);
        assert_eq!(c, ramp(0.0, 10.0, 2000.0, 2000.0));
        assert_eq!(c.planned(), 20_000);
    }

    #[test]
    fn shards_partition_ramps_exactly() {
        let windows =
            vec![win(0.0, 1.0, 100.0), ramp(1.0, 2.0, 100.0, 500.0), win(2.0, 3.0, 500.0), ramp(3.0, 3.5, 500.0, 0.0)];
        let whole = drain(ShardSchedule::new(windows.clone(), 0, 1));
        assert_eq!(whole.len() as u64, windows.iter().map(Window::planned).sum::<u64>());
        let mut merged: Vec<Due> = (0..4).flat_map(|k| drain(ShardSchedule::new(windows.clone(), k, 4))).collect();
        merged.sort_by_key(|d| (d.intended_ns, d.phase, d.index));
        assert_eq!(merged, whole);
        for k in 0..4 {
            let s = ShardSchedule::new(windows.clone(), k, 4);
            let n = drain(s.clone()).iter().filter(|d| d.phase == 1).count() as u64;
            assert_eq!(s.planned_in(1), n, "shard {k}");
        }
    }

    #[test]
    fn planned_between_agrees_with_the_schedule() {
        for w in [win(0.0, 3.0, 333.0), ramp(0.5, 4.0, 0.0, 250.0), ramp(1.0, 2.0, 400.0, 10.0), win(2.0, 3.0, 3.3)] {
            let times: Vec<u64> = (0..w.planned()).map(|i| w.intended_ns(i)).collect();
            let cuts = [
                0,
                1,
                250_000_000,
                499_999_999,
                500_000_000,
                1_000_000_000,
                1_700_000_001,
                3_000_000_000,
                5_000_000_000,
            ];
            for &a in &cuts {
                for &b in &cuts {
                    let expect = times.iter().filter(|&&t| t >= a && t < b).count() as u64;
                    assert_eq!(w.planned_between(a, b), expect, "{w:?} [{a}, {b})");
                }
            }
            assert_eq!(w.planned_between(0, u64::MAX), w.planned());
        }
    }

    #[test]
    fn a_shard_with_no_share_is_empty() {
        let w = win(0.0, 1.0, 1.0);
        assert!(ShardSchedule::new(vec![w], 1, 2).peek().is_none());
    }

    #[test]
    fn what_remains_is_what_a_drain_would_still_see() {
        let windows = vec![win(0.0, 1.0, 1000.0), win(1.0, 2.5, 333.0)];
        for shard in 0..3 {
            let mut s = ShardSchedule::new(windows.clone(), shard, 3);
            for _ in 0..100 {
                s.advance();
            }
            let mut counts = std::collections::BTreeMap::new();
            for d in drain(s.clone()) {
                *counts.entry(d.phase).or_insert(0u64) += 1;
            }
            assert_eq!(s.remaining(), counts.into_iter().collect::<Vec<_>>(), "shard {shard}");
        }
        let mut s = ShardSchedule::new(vec![win(0.0, 0.01, 1000.0)], 0, 1);
        while s.peek().is_some() {
            s.advance();
        }
        assert!(s.remaining().is_empty());
    }

    fn gaps_s(times: &[u64]) -> Vec<f64> {
        times.windows(2).map(|p| (p[1] - p[0]) as f64 / 1e9).collect()
    }

    #[test]
    fn poisson_gaps_are_exponential_and_the_seed_repeats_them() {
        // 60 s at 1,000 req/s, five seeds: each passes the KS test against the exponential.
        for seed in 1..=5 {
            let w = win(0.0, 60.0, 1000.0).with_arrival(Arrival::Poisson { seed });
            let times: Vec<u64> =
                drain(ShardSchedule::new(vec![w.clone()], 0, 1)).iter().map(|d| d.intended_ns).collect();
            assert!(times.windows(2).all(|p| p[0] <= p[1]) && times.iter().all(|&t| t < 60_000_000_000));
            let n = times.len() as f64;
            assert!((n - 60_000.0).abs() < 5.0 * 60_000f64.sqrt(), "Poisson(60,000) count: {n}");
            let p = ks_exponential_p(&gaps_s(&times));
            eprintln!("seed {seed}: {n} arrivals, KS p = {p:.3}");
            assert!(p > 0.01, "seed {seed}: KS p = {p}");
            // Against the wrong law (evenly spaced: every gap the mean) it fails outright.
            let even: Vec<u64> = (0..60_000).map(|i| i * 1_000_000).collect();
            assert!(ks_exponential_p(&gaps_s(&even)) < 1e-6);
            let again: Vec<u64> = drain(ShardSchedule::new(vec![w], 0, 1)).iter().map(|d| d.intended_ns).collect();
            assert_eq!(again, times, "the same seed, the same schedule");
        }
        let a = win(0.0, 1.0, 1000.0).with_arrival(Arrival::Poisson { seed: 1 });
        let b = win(0.0, 1.0, 1000.0).with_arrival(Arrival::Poisson { seed: 2 });
        assert_ne!(a.intended_ns(10), b.intended_ns(10), "another seed, another schedule");
    }

    #[test]
    fn poisson_shards_and_machines_partition_the_one_schedule_and_count_it_exactly() {
        let arrival = Arrival::Poisson { seed: 42 };
        let windows =
            vec![win(0.0, 3.0, 3000.0).with_arrival(arrival), ramp(3.0, 6.0, 1000.0, 5000.0).with_arrival(arrival)];
        let whole = drain(ShardSchedule::new(windows.clone(), 0, 1));
        assert_eq!(whole.len() as u64, windows.iter().map(Window::planned).sum::<u64>());
        let mut merged: Vec<Due> = (0..3).flat_map(|k| drain(ShardSchedule::new(windows.clone(), k, 3))).collect();
        merged.sort_by_key(|d| (d.phase, d.index));
        assert_eq!(merged, whole);
        // Two machines, two shards each: the same schedule, split four ways.
        let mut machines: Vec<Due> = Vec::new();
        for m in 0..2 {
            let share = Share { index: m, count: 2 };
            let mine: Vec<Window> = windows.iter().map(|w| w.clone().with_share(share)).collect();
            for k in 0..2 {
                machines.extend(
                    drain(ShardSchedule::new(mine.clone(), k, 2))
                        .into_iter()
                        .map(|d| (d.intended_ns, d.phase))
                        .map(|(t, p)| Due { intended_ns: t, phase: p, index: 0 }),
                );
            }
        }
        let mut a: Vec<(u64, usize)> = machines.iter().map(|d| (d.intended_ns, d.phase)).collect();
        let mut b: Vec<(u64, usize)> = whole.iter().map(|d| (d.intended_ns, d.phase)).collect();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
        // Counts between any two instants agree with the schedule, request by request.
        for w in &windows {
            let times: Vec<u64> = (0..w.planned()).map(|i| w.intended_ns(i)).collect();
            for (from, to) in [(0, 1_500_000_000), (1_234_567_890, 4_000_000_000), (3_000_000_000, 6_000_000_000)] {
                let want = times.iter().filter(|&&t| t >= from && t < to).count() as u64;
                assert_eq!(w.planned_between(from, to), want, "{from}..{to}");
            }
        }
        // The ramp's arrivals thicken as its rate rises: its last second holds more than its first.
        let ramp_times: Vec<u64> = whole.iter().filter(|d| d.phase == 1).map(|d| d.intended_ns).collect();
        let first = ramp_times.iter().filter(|&&t| t < 4_000_000_000).count();
        let last = ramp_times.iter().filter(|&&t| t >= 5_000_000_000).count();
        assert!(last > 2 * first, "{first} then {last}");
    }
}
