//! The closed model's schedule: virtual users instead of an arrival rate.
//!
//! Each user sends, waits for its answer (or its deadline), thinks, and sends again; a
//! step of the run holds `N` users. A request is due when its user's think time ends, so
//! the next send is known only once an answer is in: the shard tells the schedule when each
//! request finished ([`Users::finished`]) and the schedule keeps one wake-up per user
//! thinking, earliest first. Users are interchangeable (their think times are drawn alike),
//! so a wake-up is an instant, not a user.
//!
//! At a step's start the users it adds begin one by one over a think time (at once with no
//! think time), as users arriving, not as one burst; the users a step removes leave as their
//! requests finish. A run with `n` shards gives each about `N / n` users, and each shard
//! numbers its requests apart (`shard + k·n`), so the request mix and data rows go round as
//! in an open run.
//!
//! Pure, as the rest of `schedule`: the shard passes every instant in.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::Due;
use super::poisson::mix;

/// A user's think time between an answer and its next send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Think {
    /// None: the user sends again as soon as its answer is in (wrk's and oha's loop).
    #[default]
    None,
    /// Always this long, ns.
    Constant(u64),
    /// Exponentially distributed with this mean, ns (users that act independently).
    Exponential(u64),
}

impl Think {
    /// The mean think time, ns.
    pub fn mean_ns(self) -> u64 {
        match self {
            Think::None => 0,
            Think::Constant(ns) | Think::Exponential(ns) => ns,
        }
    }

    /// Its law's name in `summary.json` (`run.think`): `constant` or `exponential`.
    pub fn law(self) -> &'static str {
        match self {
            Think::Exponential(_) => "exponential",
            _ => "constant",
        }
    }
}

/// One closed step as the schedule needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Start, ns from the run's start.
    pub start_ns: u64,
    /// End (exclusive), ns from the run's start.
    pub end_ns: u64,
    /// Users of the whole run in this step.
    pub users: u32,
}

/// Users of a run of `users` that shard `shard` of `shards` runs.
fn users_of(users: u32, shard: usize, shards: usize) -> u32 {
    let (n, k) = (shards.max(1) as u32, shard as u32);
    users / n + u32::from(k < users % n)
}

/// One shard's virtual users.
#[derive(Debug, Clone)]
pub struct Users {
    /// Each phase: its window and this shard's users in it.
    steps: Vec<Step>,
    think: Think,
    /// The state of the think-time draws.
    draws: u64,
    /// Users thinking (or ready), by the instant they send next.
    wakes: BinaryHeap<Reverse<u64>>,
    /// Users alive: thinking, ready, or waiting for an answer.
    alive: u32,
    /// Users the steps applied so far call for.
    target: u32,
    /// The next step whose users are not applied yet.
    boundary: usize,
    /// Requests this shard started in each phase.
    started: Vec<u64>,
    shard: u64,
    shards: u64,
    next: Option<Due>,
    /// The run stopped: a request that finishes now ends its user.
    stopped: bool,
}

impl Users {
    /// Shard `shard` of `shards`' users over `steps` (in time order, each with the whole
    /// run's users), thinking `think`, draws seeded by `seed`.
    pub fn new(steps: &[Step], think: Think, seed: u64, shard: usize, shards: usize) -> Users {
        let steps: Vec<Step> = steps.iter().map(|s| Step { users: users_of(s.users, shard, shards), ..*s }).collect();
        let mut u = Users {
            started: vec![0; steps.len()],
            steps,
            think,
            draws: mix(seed ^ mix(shard as u64 + 1)),
            wakes: BinaryHeap::new(),
            alive: 0,
            target: 0,
            boundary: 0,
            shard: shard as u64,
            shards: shards.max(1) as u64,
            next: None,
            stopped: false,
        };
        u.refresh();
        u
    }

    /// The next request due, if any user will send again before the run ends.
    #[inline]
    pub fn peek(&self) -> Option<Due> {
        self.next
    }

    /// The request `peek` returned was taken (sent, or given up unsent).
    pub fn advance(&mut self) {
        if let Some(d) = self.next.take() {
            self.wakes.pop();
            self.started[d.phase] += 1;
        }
        self.refresh();
    }

    /// A request of this shard's finished at `at_ns` (answered, failed, timed out or dropped):
    /// its user thinks, then is due again.
    pub fn finished(&mut self, at_ns: u64) {
        if self.stopped {
            return;
        }
        let think = self.draw();
        self.wakes.push(Reverse(at_ns.saturating_add(think)));
        self.refresh();
    }

    /// The run stopped: the users thinking stay (those due by the stop are accounted for as
    /// due and unsent), and a request that finishes from now on ends its user rather than
    /// making it due again.
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// The most users this shard has in any step.
    pub fn most(&self) -> u32 {
        self.steps.iter().map(|s| s.users).max().unwrap_or(0)
    }

    fn draw(&mut self) -> u64 {
        match self.think {
            Think::None => 0,
            Think::Constant(ns) => ns,
            Think::Exponential(mean) => {
                self.draws = mix(self.draws);
                // A uniform in (0, 1] from the top 53 bits: −ln u is exponential with mean 1.
                let u = ((self.draws >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
                let t = -u.ln() * mean as f64;
                if t.is_finite() { t as u64 } else { 0 }
            }
        }
    }

    /// Settle the head: apply the steps whose start the users reached, retire the users a
    /// smaller step no longer has, and make the next request due.
    fn refresh(&mut self) {
        let end = self.steps.last().map_or(0, |s| s.end_ns);
        loop {
            let head = self.wakes.peek().map(|r| r.0);
            if let Some(step) = self.steps.get(self.boundary).copied() {
                // A step starts once the earliest user gets to it — or, with every user waiting
                // for an answer, at once when it adds users (they start at its start, not when an
                // answer comes); one that removes users waits for a user to reach it.
                let reached = head.is_some_and(|h| h >= step.start_ns);
                if reached || (head.is_none() && step.users >= self.target) {
                    self.start_step(step);
                    continue;
                }
            }
            let Some(at) = head.filter(|&h| h < end) else {
                self.next = None;
                return;
            };
            if self.alive > self.target {
                self.wakes.pop();
                self.alive -= 1;
                continue;
            }
            let phase = self.steps.iter().rposition(|s| s.start_ns <= at).unwrap_or(0);
            let index = self.shard + self.started[phase] * self.shards;
            self.next = Some(Due { intended_ns: at, phase, index });
            return;
        }
    }

    /// Apply `step`: its users are the target; those it adds begin over one think time.
    fn start_step(&mut self, step: Step) {
        self.boundary += 1;
        self.target = step.users;
        let added = step.users.saturating_sub(self.alive);
        let spread = self.think.mean_ns().min(step.end_ns.saturating_sub(step.start_ns) / 4);
        for k in 0..u64::from(added) {
            self.wakes.push(Reverse(step.start_ns + spread * k / u64::from(added)));
        }
        self.alive += added;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn step(start_ms: u64, end_ms: u64, users: u32) -> Step {
        Step { start_ns: start_ms * MS, end_ns: end_ms * MS, users }
    }

    /// Run `u` against a server that answers each request `service` after it is sent,
    /// returning each send's instant and phase.
    fn simulate(mut u: Users, service: u64) -> Vec<(u64, usize)> {
        let mut sends = Vec::new();
        let mut answers: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
        for _ in 0..1_000_000 {
            let due = u.peek().map(|d| d.intended_ns);
            let answer = answers.peek().map(|r| r.0);
            match (due, answer) {
                (Some(d), a) if a.is_none_or(|a| d < a) => {
                    let phase = u.peek().map(|d| d.phase).unwrap_or(0);
                    sends.push((d, phase));
                    u.advance();
                    answers.push(Reverse(d + service));
                }
                (_, Some(a)) => {
                    answers.pop();
                    u.finished(a);
                }
                (None, None) => return sends,
                _ => unreachable!(),
            }
        }
        panic!("no end");
    }

    #[test]
    fn users_without_think_time_send_as_answers_come() {
        // 4 users, 10 ms answers, 1 s: 4 × 100 requests, each user's sends 10 ms apart.
        let u = Users::new(&[step(0, 1000, 4)], Think::None, 1, 0, 1);
        let sends = simulate(u, 10 * MS);
        assert_eq!(sends.len(), 400);
        assert_eq!(sends.iter().filter(|s| s.0 == 990 * MS).count(), 4);
    }

    #[test]
    fn throughput_follows_n_over_r_plus_z() {
        // X = N ÷ (R + Z) = 10 ÷ (20 ms + 80 ms) = 100/s over 2 s: 200 requests.
        let u = Users::new(&[step(0, 2000, 10)], Think::Constant(80 * MS), 1, 0, 1);
        let sends = simulate(u, 20 * MS);
        assert!((195..=200).contains(&sends.len()), "{}", sends.len());
        // The users began one by one over a think time, not in one burst.
        let first: Vec<u64> = sends.iter().take(10).map(|s| s.0 / MS).collect();
        assert_eq!(first, [0, 8, 16, 24, 32, 40, 48, 56, 64, 72]);
    }

    #[test]
    fn steps_add_and_remove_users() {
        let steps = [step(0, 1000, 2), step(1000, 2000, 6), step(2000, 3000, 1)];
        let sends = simulate(Users::new(&steps, Think::None, 1, 0, 1), 10 * MS);
        let per: Vec<usize> = (0..3).map(|p| sends.iter().filter(|s| s.1 == p).count()).collect();
        assert_eq!(per, [200, 600, 100]);
    }

    #[test]
    fn a_stopped_run_s_users_are_not_due_again() {
        let mut u = Users::new(&[step(0, 1000, 2)], Think::None, 1, 0, 1);
        u.advance();
        u.advance();
        assert_eq!(u.peek(), None, "both users wait for their answers");
        u.stop();
        u.finished(5 * MS);
        assert_eq!(u.peek(), None, "an aborted request ends its user");
    }

    #[test]
    fn shards_split_the_users_and_number_their_requests_apart() {
        assert_eq!((0..3).map(|k| users_of(10, k, 3)).collect::<Vec<_>>(), [4, 3, 3]);
        let steps = [step(0, 100, 3)];
        let mut indices: Vec<u64> = (0..2)
            .flat_map(|k| {
                let mut u = Users::new(&steps, Think::None, 1, k, 2);
                let mut out = Vec::new();
                while let Some(d) = u.peek() {
                    out.push(d.index);
                    u.advance();
                    if out.len() % 2 == 0 {
                        u.finished(d.intended_ns + 10 * MS);
                    }
                }
                out
            })
            .collect();
        indices.sort();
        indices.dedup();
        assert!(indices.len() >= 3 && indices.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn exponential_think_times_have_their_mean_and_repeat_with_the_seed() {
        let draws = |seed| {
            let mut u = Users::new(&[step(0, 1, 1)], Think::Exponential(100 * MS), seed, 0, 1);
            (0..20_000).map(|_| u.draw()).collect::<Vec<u64>>()
        };
        let a = draws(7);
        assert_eq!(a, draws(7));
        assert_ne!(a, draws(8));
        let mean = a.iter().sum::<u64>() as f64 / a.len() as f64 / MS as f64;
        assert!((mean - 100.0).abs() < 3.0, "mean {mean} ms");
        let ms: Vec<f64> = a.iter().map(|&t| t as f64 / 1e6).collect();
        assert!(super::super::ks_exponential_p(&ms) > 0.01);
    }
}
