//! [`Profile`]: the load shape as the user asked for it, validated — constant, step,
//! linear ramp, spike, soak, breakpoint (seed 003's four shapes plus seed 002/004's stepped
//! ramp-and-hold and breakpoint runs). Turning a profile into timed phases is
//! [`super::plan`]'s job.

use std::time::Duration;

use super::input::{Given, Origin};
use super::options::{RawProfile, Section};
use super::raw::Raw;
use super::values::{MAX_DURATION, count, duration, positive_duration, rate, rate_of};
use crate::error::InputError;
use crate::schedule::Think;

/// Most steps in one stepped or breakpoint profile.
pub const MAX_STEPS: usize = 1000;

/// Most virtual users of a closed run (each holds a connection on HTTP/1.1).
pub const MAX_USERS: i64 = 100_000;

/// Which shape a run has (`summary.json` and the analysis read it as a tag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileKind {
    /// One rate.
    Constant,
    /// Rates held one after the other, each led in by an optional ramp.
    Step,
    /// One linear change of rate.
    Ramp,
    /// Base rate, a short burst to a peak, back to base.
    Spike,
    /// One rate for a long time (leaks, drift).
    Soak,
    /// Steps up until the target breaks (the emergency stop ends it).
    Breakpoint,
    /// Virtual users in a closed loop: each sends, waits for its answer, thinks, sends again.
    Closed,
}

impl ProfileKind {
    /// The name used in scenario files, flags and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ProfileKind::Constant => "constant",
            ProfileKind::Step => "step",
            ProfileKind::Ramp => "ramp",
            ProfileKind::Spike => "spike",
            ProfileKind::Soak => "soak",
            ProfileKind::Breakpoint => "breakpoint",
            ProfileKind::Closed => "closed",
        }
    }

    fn parse(text: &str) -> Option<ProfileKind> {
        Some(match text.trim().to_ascii_lowercase().as_str() {
            "constant" => ProfileKind::Constant,
            "step" => ProfileKind::Step,
            "ramp" => ProfileKind::Ramp,
            "spike" => ProfileKind::Spike,
            "soak" => ProfileKind::Soak,
            "breakpoint" => ProfileKind::Breakpoint,
            "closed" => ProfileKind::Closed,
            _ => return None,
        })
    }

    /// The `[profile]` keys this kind reads (besides kind, warmup, warmup_rate, arrival, repeat).
    fn keys(self) -> &'static [&'static str] {
        match self {
            ProfileKind::Constant | ProfileKind::Soak => &["rate", "duration"],
            ProfileKind::Step | ProfileKind::Breakpoint => {
                &["steps", "start", "increment", "count", "max_rate", "hold", "ramp"]
            }
            ProfileKind::Ramp => &["from", "rate", "duration"],
            ProfileKind::Spike => &["rate", "peak_rate", "base_hold", "ramp", "hold", "ramp_down", "recovery"],
            ProfileKind::Closed => &["vus", "vus_steps", "think", "duration", "hold"],
        }
    }
}

/// The load shape after warm-up.
#[derive(Debug, Clone, PartialEq)]
pub enum Profile {
    /// One rate for `duration`.
    Constant {
        /// Requests per second.
        rate: f64,
        /// Measured length.
        duration: Duration,
    },
    /// Several rates, each led in by a ramp of `ramp` (zero: none) and held for `hold`.
    Step {
        /// Requests per second of each step, in order.
        rates: Vec<f64>,
        /// Hold time of each step.
        hold: Duration,
        /// Ramp from the previous rate before each hold (zero: jump).
        ramp: Duration,
    },
    /// The rate changes linearly from `from` to `to` over `duration`.
    Ramp {
        /// Rate at the start (may be 0).
        from: f64,
        /// Rate at the end.
        to: f64,
        /// Length of the ramp.
        duration: Duration,
    },
    /// Base → peak within seconds → base.
    Spike {
        /// Base rate before and after.
        base: f64,
        /// Peak rate.
        peak: f64,
        /// Hold at base before the spike.
        base_hold: Duration,
        /// Ramp from base to peak (zero: jump).
        ramp_up: Duration,
        /// Hold at peak.
        peak_hold: Duration,
        /// Ramp from peak back to base (zero: drop).
        ramp_down: Duration,
        /// Hold at base after the spike, where time-to-recover is measured.
        recovery: Duration,
    },
    /// One rate for a long time.
    Soak {
        /// Requests per second.
        rate: f64,
        /// Length.
        duration: Duration,
    },
    /// Steps up until the target breaks (or the steps run out).
    Breakpoint {
        /// Requests per second of each step, increasing.
        rates: Vec<f64>,
        /// Hold time of each step.
        hold: Duration,
        /// Ramp from the previous rate before each hold (zero: jump).
        ramp: Duration,
    },
    /// Virtual users in a closed loop, one count or one per step.
    Closed {
        /// Users of each step (one for `--vus`).
        users: Vec<u32>,
        /// The length of each step (of the run, for `--vus`).
        hold: Duration,
        /// Each user's think time between an answer and its next send.
        think: Think,
        /// Given as steps (`vus_steps`): its holds are named `step 1`, `step 2`, …
        stepped: bool,
        /// The seed of exponential think times (`--seed`).
        seed: u64,
    },
}

impl Profile {
    /// Its kind.
    pub fn kind(&self) -> ProfileKind {
        match self {
            Profile::Constant { .. } => ProfileKind::Constant,
            Profile::Step { .. } => ProfileKind::Step,
            Profile::Ramp { .. } => ProfileKind::Ramp,
            Profile::Spike { .. } => ProfileKind::Spike,
            Profile::Soak { .. } => ProfileKind::Soak,
            Profile::Breakpoint { .. } => ProfileKind::Breakpoint,
            Profile::Closed { .. } => ProfileKind::Closed,
        }
    }

    /// The rate a warm-up runs at by default: the first non-zero rate the profile sends at
    /// (a ramp from 0 warms up at the rate it ramps to).
    pub fn first_rate(&self) -> f64 {
        match self {
            Profile::Constant { rate, .. } | Profile::Soak { rate, .. } => *rate,
            Profile::Step { rates, .. } | Profile::Breakpoint { rates, .. } => rates.first().copied().unwrap_or(0.0),
            Profile::Ramp { from, to, .. } => {
                if *from > 0.0 {
                    *from
                } else {
                    *to
                }
            }
            Profile::Spike { base, .. } => *base,
            Profile::Closed { .. } => 0.0,
        }
    }

    /// The most virtual users a closed profile has (0: open).
    pub fn max_users(&self) -> u32 {
        match self {
            Profile::Closed { users, .. } => users.iter().copied().max().unwrap_or(0),
            _ => 0,
        }
    }

    /// Length of the profile (without warm-up).
    pub fn duration(&self) -> Duration {
        match self {
            Profile::Constant { duration, .. } | Profile::Soak { duration, .. } | Profile::Ramp { duration, .. } => {
                *duration
            }
            Profile::Step { rates, hold, ramp } | Profile::Breakpoint { rates, hold, ramp } => {
                (*hold + *ramp).saturating_mul(rates.len() as u32)
            }
            Profile::Spike { base_hold, ramp_up, peak_hold, ramp_down, recovery, .. } => {
                *base_hold + *ramp_up + *peak_hold + *ramp_down + *recovery
            }
            Profile::Closed { users, hold, .. } => hold.saturating_mul(users.len() as u32),
        }
    }
}

/// Defaults that differ for the built-in demo (no URL, no scenario file).
const DEMO_STEPS: [f64; 6] = [100.0, 200.0, 300.0, 400.0, 500.0, 600.0];

/// The `[profile]` keys every kind reads.
const EVERY_KIND: [&str; 5] = ["kind", "warmup", "warmup_rate", "arrival", "repeat"];

/// Validate the profile part of `raw` (`demo`: no URL and no file).
pub(crate) fn from_raw(raw: &Raw, demo: bool) -> Result<Profile, InputError> {
    let p = &raw.profile;
    // `--vus` or `--vus-steps` on the command line close a file's run of any kind.
    let users_flag = p.vus.as_ref().is_some_and(|g| g.is_flag()) || p.vus_steps.as_ref().is_some_and(|g| g.is_flag());
    let kind = match &p.kind {
        Some(k) if users_flag && !k.is_flag() => ProfileKind::Closed,
        Some(k) => ProfileKind::parse(&k.value).ok_or_else(|| {
            k.err(format!(
                "unknown profile {:?}; expected constant, step, ramp, spike, soak, breakpoint or closed",
                k.value
            ))
        })?,
        None if p.vus.is_some() || p.vus_steps.is_some() => ProfileKind::Closed,
        None if p.steps.is_some() || p.start.is_some() => ProfileKind::Step,
        None if demo && p.rate.is_none() => ProfileKind::Step,
        None => ProfileKind::Constant,
    };
    check_applicable(raw, kind)?;
    let flag_only = |g: &Option<Given<String>>| g.as_ref().filter(|g| g.is_flag()).cloned();
    let dur_or = |g: &Option<Given<String>>, default: Duration| g.as_ref().map_or(Ok(default), positive_duration);
    let profile = match kind {
        ProfileKind::Constant | ProfileKind::Soak => {
            let rate = required_rate(raw, &p.rate, "the arrival rate in requests per second")?;
            // `--hold` also sets a constant run's length (as it always has).
            let length = p.duration.clone().or_else(|| flag_only(&p.hold));
            let default = if kind == ProfileKind::Soak { Duration::from_secs(3600) } else { Duration::from_secs(10) };
            let duration = dur_or(&length, default)?;
            if kind == ProfileKind::Soak {
                Profile::Soak { rate, duration }
            } else {
                Profile::Constant { rate, duration }
            }
        }
        ProfileKind::Step | ProfileKind::Breakpoint => {
            let rates = step_rates(raw, kind, demo)?;
            // `--duration` also sets a step's hold (as it always has).
            let hold_given = p.hold.clone().or_else(|| flag_only(&p.duration));
            let default_hold = if demo { Duration::from_secs(3) } else { Duration::from_secs(20) };
            let hold = dur_or(&hold_given, default_hold)?;
            let ramp = p.ramp.as_ref().map_or(Ok(Duration::ZERO), duration)?;
            if kind == ProfileKind::Step {
                Profile::Step { rates, hold, ramp }
            } else {
                Profile::Breakpoint { rates, hold, ramp }
            }
        }
        ProfileKind::Ramp => {
            let to = match &p.rate {
                Some(g) => rate_of(g, g.value, true)?,
                None => return Err(raw.missing("profile", "rate", "--rate", "required: the rate the ramp reaches")),
            };
            let from = p.from.as_ref().map_or(Ok(0.0), |g| rate_of(g, g.value, true))?;
            if from == 0.0 && to == 0.0 {
                let g = p.rate.as_ref().expect("checked above");
                return Err(g.err("a ramp from 0 to 0 sends nothing"));
            }
            Profile::Ramp { from, to, duration: dur_or(&p.duration, Duration::from_secs(60))? }
        }
        ProfileKind::Spike => {
            let base = required_rate(raw, &p.rate, "the base rate in requests per second")?;
            let peak = match &p.peak_rate {
                Some(g) => {
                    let peak = rate(g)?;
                    if peak <= base {
                        return Err(g.err(format!("the peak ({peak}) must be above the base rate ({base})")));
                    }
                    peak
                }
                None => (base * 4.0).min(super::values::MAX_RATE),
            };
            // `--duration` sets both base holds.
            let around = flag_only(&p.duration);
            let ramp_up = p.ramp.as_ref().map_or(Ok(Duration::from_secs(5)), duration)?;
            Profile::Spike {
                base,
                peak,
                base_hold: dur_or(&p.base_hold.clone().or(around.clone()), Duration::from_secs(30))?,
                ramp_up,
                peak_hold: dur_or(&p.hold, Duration::from_secs(30))?,
                ramp_down: p.ramp_down.as_ref().map_or(Ok(ramp_up), duration)?,
                recovery: dur_or(&p.recovery.clone().or(around), Duration::from_secs(60))?,
            }
        }
        ProfileKind::Closed => closed(raw, demo)?,
    };
    if profile.duration() > MAX_DURATION {
        let at = p.kind.as_ref().map(|k| k.origin.label()).unwrap_or_else(|| "--profile".to_string());
        return Err(InputError::new(
            at,
            format!("the {} profile lasts {:?}, beyond the 30-day limit", kind.as_str(), profile.duration()),
        ));
    }
    Ok(profile)
}

fn required_rate(raw: &Raw, g: &Option<Given<f64>>, what: &str) -> Result<f64, InputError> {
    match g {
        Some(g) => rate(g),
        None => Err(raw.missing("profile", "rate", "--rate", &format!("required: {what}"))),
    }
}

/// Reject keys that the chosen kind does not read — except the file's keys when `--profile`
/// replaced its kind, and the flags that have always doubled as a length (`--duration` for
/// a step's hold or a spike's base holds, `--hold` for a constant run's length).
fn check_applicable(raw: &Raw, kind: ProfileKind) -> Result<(), InputError> {
    for (key, origin) in raw.profile.present() {
        if EVERY_KIND.contains(&key) || kind.keys().contains(&key) {
            continue;
        }
        let excused = match origin {
            Origin::File { .. } => raw.kind_overridden,
            Origin::Flag(flag) => matches!(
                (*flag, kind),
                ("--duration", ProfileKind::Step | ProfileKind::Breakpoint | ProfileKind::Spike)
                    | ("--hold", ProfileKind::Constant | ProfileKind::Soak)
            ),
        };
        if !excused {
            let reads = kind.keys().join(", ");
            return Err(InputError::new(
                origin.label(),
                format!("does not apply to the {} profile (it reads {reads})", kind.as_str()),
            ));
        }
    }
    Ok(())
}

/// The rates of a stepped or breakpoint profile: a list, or start + increment up to a count
/// and/or a max rate.
fn step_rates(raw: &Raw, kind: ProfileKind, demo: bool) -> Result<Vec<f64>, InputError> {
    let p: &RawProfile = &raw.profile;
    if let Some(list) = &p.steps {
        if let Some(extra) =
            [p.start.as_ref().map(|g| &g.origin), p.increment.as_ref().map(|g| &g.origin)].into_iter().flatten().next()
        {
            return Err(InputError::new(extra.label(), "give either a list of steps or start/increment, not both"));
        }
        if let Some(g) = &p.count {
            return Err(g.err("count goes with start/increment, not with a list of steps"));
        }
        if list.value.is_empty() {
            return Err(list.err("needs at least one rate"));
        }
        if list.value.len() > MAX_STEPS {
            return Err(list.err(format!("{} steps; at most {MAX_STEPS}", list.value.len())));
        }
        for (i, &r) in list.value.iter().enumerate() {
            rate_of(list, r, false).map_err(|e| InputError::new(e.key, format!("step {}: {}", i + 1, e.problem)))?;
        }
        if let Some(max) = &p.max_rate {
            let max_rate = rate(max)?;
            let rates: Vec<f64> = list.value.iter().copied().filter(|&r| r <= max_rate).collect();
            if rates.is_empty() {
                return Err(max.err("every step is above max_rate"));
            }
            return Ok(rates);
        }
        return Ok(list.value.clone());
    }
    let (start, increment) = match (&p.start, &p.increment) {
        (Some(s), Some(i)) => (s, i),
        (Some(s), None) => return Err(s.err("needs an increment too (start, increment, and count or max_rate)")),
        (None, Some(i)) => return Err(i.err("needs a start rate too (start, increment, and count or max_rate)")),
        (None, None) if demo && kind == ProfileKind::Step => return Ok(DEMO_STEPS.to_vec()),
        (None, None) => {
            return Err(raw.missing(
                "profile",
                "steps",
                "--steps",
                &format!(
                    "required with the {} profile: a list like 100,200,300, or a start and an increment",
                    kind.as_str()
                ),
            ));
        }
    };
    let first = rate(start)?;
    let inc = increment.value;
    if !inc.is_finite() || inc.abs() > super::values::MAX_RATE {
        return Err(increment.err(format!("increment must be a finite rate, got {inc}")));
    }
    let count = p.count.as_ref().map(|g| count(g, 1, MAX_STEPS as i64)).transpose()?;
    let max = p.max_rate.as_ref().map(rate).transpose()?;
    if kind == ProfileKind::Breakpoint && inc <= 0.0 {
        return Err(increment.err("a breakpoint run steps up: the increment must be above 0"));
    }
    if count.is_none() && max.is_none() {
        return Err(increment.err("needs a step count or a max_rate to know where to stop"));
    }
    if max.is_some() && inc <= 0.0 {
        return Err(increment.err("must be above 0 to reach max_rate"));
    }
    if let (Some(m), Some(g)) = (max, &p.max_rate)
        && m < first
    {
        return Err(g.err(format!("max_rate {m} is below the start rate {first}")));
    }
    let mut rates = Vec::new();
    for k in 0.. {
        if count.is_some_and(|c| k >= c) {
            break;
        }
        let r = first + inc * k as f64;
        // A hair of tolerance so 0.1 increments still reach a max like 1.0.
        if max.is_some_and(|m| r > m * (1.0 + 1e-9)) {
            break;
        }
        if rates.len() == MAX_STEPS {
            return Err(
                increment.err(format!("makes more than {MAX_STEPS} steps; raise the increment or lower max_rate"))
            );
        }
        rate_of(increment, r, false).map_err(|e| InputError::new(e.key, format!("step {}: {}", k + 1, e.problem)))?;
        rates.push(r);
    }
    Ok(rates)
}

/// A closed profile: `vus` (one count, for `duration`) or `vus_steps` (one per step, each for
/// `hold`), and the users' `think` time.
fn closed(raw: &Raw, demo: bool) -> Result<Profile, InputError> {
    let p = &raw.profile;
    if let Some(g) = p.warmup_rate.as_ref().or(p.rate.as_ref()) {
        return Err(
            g.err("the closed profile has no arrival rate: its users send as their answers come (--vus, --think)")
        );
    }
    if let Some(g) = &p.arrival {
        return Err(g.err("applies to an open profile; a closed run's users send as their answers come"));
    }
    if let Some(g) = &raw.flags.shard {
        return Err(g.err(
            "not with the closed profile yet: its users are not split across machines (give each machine its own --vus)",
        ));
    }
    let think = p.think.as_ref().map_or(Ok(Think::None), think)?;
    let seed = super::data::seed(raw)?;
    let flag_only = |g: &Option<Given<String>>| g.as_ref().filter(|g| g.is_flag()).cloned();
    match (&p.vus, &p.vus_steps) {
        (Some(a), Some(b)) => {
            let (a, b) = (a.origin.label(), b.origin.label());
            Err(InputError::new(a, format!("give either one count of users or a list of steps ({b}), not both")))
        }
        (Some(n), None) => {
            let users = count(n, 1, MAX_USERS)? as u32;
            let length = p.duration.clone().or_else(|| flag_only(&p.hold));
            let hold = length.as_ref().map_or(Ok(Duration::from_secs(10)), positive_duration)?;
            Ok(Profile::Closed { users: vec![users], hold, think, stepped: false, seed })
        }
        (None, Some(list)) => {
            if list.value.is_empty() {
                return Err(list.err("needs at least one count of users"));
            }
            if list.value.len() > MAX_STEPS {
                return Err(list.err(format!("{} steps; at most {MAX_STEPS}", list.value.len())));
            }
            let mut users = Vec::with_capacity(list.value.len());
            for (i, &n) in list.value.iter().enumerate() {
                if n.fract() != 0.0 || !(1.0..=MAX_USERS as f64).contains(&n) {
                    return Err(list.err(format!("step {}: {n} is not a count of users in 1..={MAX_USERS}", i + 1)));
                }
                users.push(n as u32);
            }
            let hold_given = p.hold.clone().or_else(|| flag_only(&p.duration));
            let default_hold = if demo { Duration::from_secs(3) } else { Duration::from_secs(20) };
            let hold = hold_given.as_ref().map_or(Ok(default_hold), positive_duration)?;
            Ok(Profile::Closed { users, hold, think, stepped: true, seed })
        }
        (None, None) => Err(raw.missing(
            "profile",
            "vus",
            "--vus",
            "required with the closed profile: the virtual users (or vus_steps, a list like 10,20,40)",
        )),
    }
}

/// A think time: a duration (constant), or `exp:MEAN` (exponential with that mean).
fn think(g: &Given<String>) -> Result<Think, InputError> {
    let text = g.value.trim();
    let (exp, rest) = match text.get(..4) {
        Some(head) if head.eq_ignore_ascii_case("exp:") => (true, &text[4..]),
        _ => (false, text),
    };
    let d = humantime::parse_duration(rest.trim()).map_err(|e| {
        g.err(format!("expected a think time like 200ms, or exp:200ms for exponential ones, got {text:?} ({e})"))
    })?;
    if d > Duration::from_secs(3600) {
        return Err(g.err(format!("{text} is above the 1 hour limit")));
    }
    let ns = d.as_nanos() as u64;
    Ok(match (exp, ns) {
        (_, 0) => Think::None,
        (true, _) => Think::Exponential(ns),
        (false, _) => Think::Constant(ns),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::RunArgs;
    use crate::scenario::{Plan, Spec};

    fn closed_args(f: impl FnOnce(&mut RunArgs)) -> RunArgs {
        let mut a = RunArgs { url: Some("http://127.0.0.1:1/".into()), ..Default::default() };
        f(&mut a);
        a
    }

    fn spec(f: impl FnOnce(&mut RunArgs)) -> Result<Spec, String> {
        Spec::from_run_args(&closed_args(f)).map_err(|e| e.to_string())
    }

    #[test]
    fn virtual_users_make_a_closed_run() {
        let s = spec(|a| {
            a.vus = Some(8);
            a.think = Some("exp:200ms".into());
            a.duration = Some("3s".into());
        })
        .unwrap();
        let Profile::Closed { users, hold, think, stepped, .. } = &s.profile else { panic!("{:?}", s.profile) };
        assert_eq!(
            (users.as_slice(), *hold, *think, *stepped),
            (&[8][..], Duration::from_secs(3), Think::Exponential(200_000_000), false)
        );
        assert_eq!(s.connections, 8, "one connection per user by default");
        let plan = Plan::resolve(&s, "http://127.0.0.1:1/").unwrap();
        assert_eq!(plan.phases.iter().map(|p| (p.name.as_str(), p.users)).collect::<Vec<_>>(), [("main", 8)]);

        let s = spec(|a| {
            a.vus_steps = Some(vec![10.0, 20.0, 40.0]);
            a.think = Some("190ms".into());
            a.hold = Some("2s".into());
            a.warmup = Some("1s".into());
            a.http2 = true;
        })
        .unwrap();
        assert_eq!(s.connections, 1, "HTTP/2: 40 users are streams of one connection");
        let plan = Plan::resolve(&s, "http://127.0.0.1:1/").unwrap();
        let phases: Vec<(&str, u32, f64)> =
            plan.phases.iter().map(|p| (p.name.as_str(), p.users, p.start.as_secs_f64())).collect();
        assert_eq!(phases, [("warmup", 10, 0.0), ("step 1", 10, 1.0), ("step 2", 20, 3.0), ("step 3", 40, 5.0)]);
        assert_eq!(plan.think(), Some(Think::Constant(190_000_000)));
        assert_eq!(plan.pace().ahead_ns, 0, "a user sends when its think time ends, not before");
        // --think 0 is wrk's and oha's loop.
        let s = spec(|a| (a.vus, a.think) = (Some(2), Some("0".into()))).unwrap();
        assert!(matches!(s.profile, Profile::Closed { think: Think::None, .. }));
    }

    #[test]
    fn a_file_can_be_closed_and_flags_can_close_it() {
        let text = "[target]\nurl = \"http://127.0.0.1:1/\"\n[profile]\nkind = \"closed\"\nvus_steps = [5, 10]\nthink = \"50ms\"\nhold = \"1s\"\n";
        let s = Spec::from_scenario_text("s.toml", text, &RunArgs::default()).unwrap();
        assert!(matches!(&s.profile, Profile::Closed { users, stepped: true, .. } if users == &[5, 10]));
        // --vus on a stepped open file makes it closed.
        let step = "[target]\nurl = \"http://127.0.0.1:1/\"\n[profile]\nkind = \"step\"\nsteps = [100, 200]\n";
        let flags = RunArgs { vus: Some(3), ..Default::default() };
        let s = Spec::from_scenario_text("s.toml", step, &flags).unwrap();
        assert!(matches!(&s.profile, Profile::Closed { users, .. } if users == &[3]));
    }

    #[test]
    fn closed_input_errors_name_their_flag() {
        type Case = (fn(&mut RunArgs), &'static str);
        let cases: [Case; 8] = [
            (|a| a.vus = Some(0), "--vus:"),
            (|a| (a.vus, a.rate) = (Some(2), Some(10.0)), "--rate: does not apply to the closed profile"),
            (|a| (a.vus, a.think) = (Some(2), Some("soon".into())), "--think: expected a think time"),
            (|a| (a.vus, a.think) = (Some(2), Some("exp:2h".into())), "--think: exp:2h is above the 1 hour limit"),
            (|a| a.vus_steps = Some(vec![10.0, 2.5]), "--vus-steps: step 2: 2.5 is not a count of users"),
            (|a| (a.vus, a.arrival) = (Some(2), Some("poisson".into())), "--arrival: applies to an open profile"),
            (|a| a.profile = Some("closed".into()), "--vus: required with the closed profile"),
            (|a| (a.vus, a.shard) = (Some(2), Some("0/2".into())), "--shard: not with the closed profile yet"),
        ];
        for (f, want) in cases {
            let e = spec(f).unwrap_err();
            assert!(e.starts_with(want), "{e}");
        }
        let both = "[target]\nurl = \"http://127.0.0.1:1/\"\n[profile]\nvus = 3\nvus_steps = [1, 2]\n";
        let e = Spec::from_scenario_text("s.toml", both, &RunArgs::default()).unwrap_err().to_string();
        assert!(e.contains("profile.vus: give either one count of users or a list of steps"), "{e}");
    }
}
