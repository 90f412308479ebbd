//! [`Plan`]: a [`Spec`] with everything resolved — address, encoded requests, phase windows.
//! The settings that need no resolving stay the spec's: the plan holds its spec and reads as
//! it, rather than copying each option across.
//!
//! Phases are data: every profile becomes a list of back-to-back [`Phase`]s, each a
//! warm-up, a ramp (rate changing linearly) or a hold (one rate, judged). Names are stable
//! and readable: `warmup`, `main`, `soak`, `ramp`, `ramp to step 3`, `step 3`, and for a
//! spike `base`, `spike` (ramp up), `peak`, `ramp down`, `recovery`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::profile::{Profile, ProfileKind};
use super::request::RequestSpec;
use super::spec::Spec;
use super::target::{TlsPlan, resolve_url, tls_plan};
use crate::error::InputError;
use crate::schedule::{Arrival, ShardSchedule, Share, Step, Think, Users, Window};

/// What a phase is for; only `Hold` phases are judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhaseKind {
    /// Warm-up: connections and caches get hot; reported apart, never judged.
    Warmup,
    /// A rate change in progress (tagged apart from the hold it leads to).
    Ramp,
    /// A steady window whose requests are judged.
    Hold,
}

impl PhaseKind {
    /// The name used in `summary.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            PhaseKind::Warmup => "warmup",
            PhaseKind::Ramp => "ramp",
            PhaseKind::Hold => "hold",
        }
    }
}

/// One phase of the run: a window at one rate, or a ramp between two.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    /// Human name (`warmup`, `main`, `ramp to step 3`, `step 3`, `peak`, …).
    pub name: String,
    /// What it is for.
    pub kind: PhaseKind,
    /// Offset from the run's start.
    pub start: Duration,
    /// Length.
    pub duration: Duration,
    /// Offered rate, requests per second: the phase's rate, or for a ramp its planned
    /// requests ÷ its duration.
    pub rate: f64,
    /// Rate at the phase's start (equal to `rate` unless a ramp).
    pub start_rate: f64,
    /// Rate at the phase's end (equal to `rate` unless a ramp).
    pub end_rate: f64,
    /// This machine's part of it (`--shard`; the whole phase by default). The rates above
    /// are the whole run's; [`Phase::offered`] is this machine's.
    pub share: Share,
    /// How its requests arrive (evenly spaced unless `--arrival poisson`).
    pub arrival: Arrival,
    /// A closed run's virtual users in this phase (the whole run's); 0 in an open run, whose
    /// rates above are then its load.
    pub users: u32,
}

impl Phase {
    /// A phase at one rate.
    pub fn constant(name: impl Into<String>, kind: PhaseKind, start: Duration, duration: Duration, rate: f64) -> Phase {
        Phase {
            name: name.into(),
            kind,
            start,
            duration,
            rate,
            start_rate: rate,
            end_rate: rate,
            share: Share::default(),
            arrival: Arrival::Uniform,
            users: 0,
        }
    }

    /// A closed phase of `users` virtual users (no arrival rate: the users send as their
    /// answers come).
    pub fn closed(name: impl Into<String>, kind: PhaseKind, start: Duration, duration: Duration, users: u32) -> Phase {
        Phase { users, ..Phase::constant(name, kind, start, duration, 0.0) }
    }

    /// A ramp from `from` to `to`; its offered rate is what it plans to send ÷ its length.
    pub fn ramp(name: impl Into<String>, start: Duration, duration: Duration, from: f64, to: f64) -> Phase {
        let mut p = Phase {
            name: name.into(),
            kind: PhaseKind::Ramp,
            start,
            duration,
            rate: 0.0,
            start_rate: from,
            end_rate: to,
            share: Share::default(),
            arrival: Arrival::Uniform,
            users: 0,
        };
        let secs = duration.as_secs_f64();
        p.rate = if secs > 0.0 { p.window().planned() as f64 / secs } else { 0.0 };
        p
    }

    /// The schedule window of this phase (this machine's share of it).
    pub fn window(&self) -> Window {
        let (start_ns, end_ns) = (self.start.as_nanos() as u64, (self.start + self.duration).as_nanos() as u64);
        let w = if self.kind == PhaseKind::Ramp {
            Window::ramp(start_ns, end_ns, self.start_rate, self.end_rate)
        } else {
            Window::constant(start_ns, end_ns, self.rate)
        };
        w.with_share(self.share).with_arrival(self.arrival)
    }

    /// The rate this machine offers: the phase's rate, or its share of it (`--shard`).
    pub fn offered(&self) -> f64 {
        self.rate / self.share.count.max(1) as f64
    }
}

/// The resolved target.
#[derive(Debug, Clone)]
pub struct TargetAddr {
    /// The URL as given.
    pub url: String,
    /// Socket address connections go to.
    pub addr: SocketAddr,
    /// TLS settings of an https URL; `None` for http.
    pub tls: Option<TlsPlan>,
}

/// One request of the mix, encoded.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedRequest {
    /// Name in reports.
    pub name: String,
    /// The whole request as sent.
    pub bytes: Vec<u8>,
    /// It is a HEAD request (responses carry no body).
    pub head: bool,
    /// Its method is idempotent (may be sent again after a stale connection).
    pub idempotent: bool,
    /// Share of the mix.
    pub weight: u32,
    /// One encoding per data row when the request has `{{column}}` placeholders (`bytes`
    /// is then the first row's); empty otherwise.
    pub filled: Vec<Arc<[u8]>>,
}

/// A run with every value resolved: the [`Spec`] it was made from, and what resolving it
/// gave — the target's address, the encoded requests, the phases, the shard count.
///
/// The settings that need no resolving (timeout, pool, limits, criteria, outputs, …) are the
/// spec's, read through the plan (`plan.timeout` is `plan.spec.timeout`), so an option reaches
/// the engine without being copied from one struct to the other. Where resolving changes a
/// value, the plan's own field stands before the spec's of the same name: `target` (the
/// resolved address), `requests` (encoded), `threads` (a count), `grpc` (whether the requests
/// are calls).
#[derive(Debug, Clone)]
pub struct Plan {
    /// The validated run this plan resolves.
    pub spec: Spec,
    /// Where the load goes.
    pub target: TargetAddr,
    /// The requests, each encoded once as HTTP/1.1 bytes.
    pub requests: Vec<PlannedRequest>,
    /// Phases in time order, back to back from offset zero.
    pub phases: Vec<Phase>,
    /// Shard threads.
    pub threads: usize,
    /// The requests are gRPC calls: the answer's `grpc-status` decides each outcome.
    pub grpc: bool,
    /// The profile's shape.
    pub kind: ProfileKind,
}

/// The plan reads as its spec for every setting it does not resolve (see [`Plan`]).
impl std::ops::Deref for Plan {
    type Target = Spec;

    fn deref(&self) -> &Spec {
        &self.spec
    }
}

impl Plan {
    /// Resolve `spec` against `url` (the user's, or the built-in target's).
    pub fn resolve(spec: &Spec, url: &str) -> Result<Plan, InputError> {
        let (addr, host, path, https) = resolve_url(url, &spec.url_key)?;
        let tls = match https {
            Some(name) => Some(tls_plan(name, &spec.tls)?),
            None => {
                let flag =
                    if spec.tls.insecure { Some("--insecure") } else { spec.tls.cacert.as_ref().map(|_| "--cacert") };
                if let Some(flag) = flag {
                    return Err(InputError::new(flag, format!("applies to https URLs only; {url} is http")));
                }
                None
            }
        };
        let mut budget = super::data::MAX_ENCODED_BYTES;
        let mut requests = Vec::with_capacity(spec.requests.len());
        for r in &spec.requests {
            let path = r.path.as_deref().unwrap_or(&path);
            let encode = |r: &RequestSpec, path: &str| encode_request(r, &host, path, spec.grpc.as_ref());
            let filled = match &spec.data {
                Some(data) => super::data::expand(data, r, path, &mut budget, encode)?.unwrap_or_default(),
                None => Vec::new(),
            };
            let bytes = match filled.first() {
                Some(b) => b.to_vec(),
                None => encode(r, path).map_err(|e| InputError::new(format!("request {:?}", r.name), e))?,
            };
            requests.push(PlannedRequest {
                name: r.name.clone(),
                bytes,
                head: r.method == "HEAD",
                idempotent: crate::engine::is_idempotent(&r.method),
                weight: r.weight.max(1),
                filled,
            });
        }
        if let Some(data) = &spec.data
            && requests.iter().all(|r| r.filled.is_empty())
        {
            return Err(InputError::new(
                data.path.display().to_string(),
                format!("no request uses a {{{{column}}}} placeholder (columns: {})", data.columns.join(", ")),
            ));
        }
        let mut phases = phases(spec);
        for p in &mut phases {
            (p.share, p.arrival) = (spec.share, spec.arrival);
        }
        let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        // Every shard needs at least one connection of its own.
        let threads = spec.threads.unwrap_or(cpus).min(spec.connections);
        Ok(Plan {
            spec: spec.clone(),
            target: TargetAddr { url: url.to_string(), addr, tls },
            requests,
            phases,
            threads,
            grpc: spec.grpc.is_some(),
            kind: spec.profile.kind(),
        })
    }

    /// The profile's shape (a soak run is tagged here; its phases are a plain hold).
    pub fn profile_kind(&self) -> ProfileKind {
        self.kind
    }

    /// Highest rate any phase reaches on this machine.
    pub fn peak_rate(&self) -> f64 {
        let whole = self.phases.iter().map(|p| p.start_rate.max(p.end_rate)).fold(0.0, f64::max);
        whole / self.share.count.max(1) as f64
    }

    /// How each shard sleeps: from its share of the peak rate, or the `--wake-window` given.
    /// A closed run's users send when their think time ends, none ahead of it.
    pub fn pace(&self) -> crate::engine::pace::Pace {
        let ahead = match self.send_ahead {
            Some(w) => Some(w.as_nanos() as u64),
            None => self.think().map(|_| 0),
        };
        crate::engine::pace::Pace::for_rate(
            self.peak_rate() / self.threads.max(1) as f64,
            self.wake_window.map(|w| w.as_nanos() as u64),
            ahead,
        )
    }

    /// Total planned length of the run.
    pub fn duration(&self) -> Duration {
        self.phases.last().map(|p| p.start + p.duration).unwrap_or_default()
    }

    /// The phase a second ending `at` after the run's zero belongs to: phase `p` covers
    /// `(start, start + duration]`. `None` before the first second and once the last phase
    /// has ended (the run drains).
    pub fn phase_at(&self, at: Duration) -> Option<&Phase> {
        self.phase_index_at(at).map(|i| &self.phases[i])
    }

    /// The index of [`Plan::phase_at`]'s phase.
    pub fn phase_index_at(&self, at: Duration) -> Option<usize> {
        self.phases.iter().position(|p| at > p.start && at <= p.start + p.duration)
    }

    /// The request mix as a cycle of request indices: request `i` of a phase is
    /// `mix[i % mix.len()]`. Smooth weighted round-robin (nginx's), so each request's share
    /// holds over any window, not only over the whole cycle.
    pub fn mix(&self) -> Vec<u16> {
        let mut weights: Vec<i64> = self.requests.iter().map(|r| i64::from(r.weight)).collect();
        let g = weights.iter().copied().fold(0, gcd).max(1);
        weights.iter_mut().for_each(|w| *w /= g);
        // Keep the cycle small; very uneven weights are rounded (each keeps at least 1).
        let total: i64 = weights.iter().sum();
        if total > MAX_MIX {
            weights.iter_mut().for_each(|w| *w = (*w * MAX_MIX / total).max(1));
        }
        let total: i64 = weights.iter().sum();
        let mut current = vec![0i64; weights.len()];
        (0..total)
            .map(|_| {
                for (c, w) in current.iter_mut().zip(&weights) {
                    *c += w;
                }
                let best = (0..current.len()).max_by_key(|&i| (current[i], std::cmp::Reverse(i))).unwrap_or(0);
                current[best] -= total;
                best as u16
            })
            .collect()
    }

    /// Shard `shard`'s schedule over `windows` (its phases' windows): its share of the
    /// requests of an open run, its share of the users of a closed one.
    pub fn schedule_of(&self, shard: usize, windows: &[Window]) -> ShardSchedule {
        let Profile::Closed { think, seed, .. } = self.profile else {
            return ShardSchedule::new(windows.to_vec(), shard, self.threads);
        };
        let steps: Vec<Step> = self
            .phases
            .iter()
            .zip(windows)
            .map(|(p, w)| Step { start_ns: w.start_ns, end_ns: w.end_ns, users: p.users })
            .collect();
        ShardSchedule::closed(Users::new(&steps, think, seed, shard, self.threads))
    }

    /// The closed run's think time (`None`: an open run).
    pub fn think(&self) -> Option<Think> {
        match self.profile {
            Profile::Closed { think, .. } => Some(think),
            _ => None,
        }
    }

    /// Connections of shard `shard` (the pool split evenly, remainder to the first shards).
    pub fn connections_of(&self, shard: usize) -> usize {
        self.connections / self.threads + usize::from(shard < self.connections % self.threads)
    }
}

/// Longest request-mix cycle.
const MAX_MIX: i64 = 65_536;

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The phases of `spec`, back to back from offset zero: warm-up (if any), then the profile.
fn phases(spec: &Spec) -> Vec<Phase> {
    let mut b = Phases::default();
    if let Profile::Closed { users, hold, stepped, .. } = &spec.profile {
        // The warm-up runs the first step's users; each step holds its own.
        let mut at = Duration::ZERO;
        let mut out = Vec::new();
        let mut push = |name: String, kind, length: Duration, n: u32| {
            out.push(Phase::closed(name, kind, at, length, n));
            at += length;
        };
        if !spec.warmup.is_zero() {
            push("warmup".into(), PhaseKind::Warmup, spec.warmup, users[0]);
        }
        for (i, &n) in users.iter().enumerate() {
            let name = if *stepped { format!("step {}", i + 1) } else { "main".into() };
            push(name, PhaseKind::Hold, *hold, n);
        }
        return out;
    }
    if !spec.warmup.is_zero() {
        let rate = spec.warmup_rate.unwrap_or_else(|| spec.profile.first_rate());
        b.hold("warmup", PhaseKind::Warmup, spec.warmup, rate);
    }
    match &spec.profile {
        Profile::Constant { rate, duration } => b.hold("main", PhaseKind::Hold, *duration, *rate),
        Profile::Soak { rate, duration } => b.hold("soak", PhaseKind::Hold, *duration, *rate),
        Profile::Ramp { from, to, duration } => {
            b.ramp("ramp", *duration, *from, *to);
        }
        Profile::Step { rates, hold, ramp } | Profile::Breakpoint { rates, hold, ramp } => {
            for (i, &rate) in rates.iter().enumerate() {
                // Each step: a ramp from the previous phase's rate (0 at the run's start),
                // tagged apart, then the hold that is judged.
                b.ramp(&format!("ramp to step {}", i + 1), *ramp, b.rate, rate);
                b.hold(&format!("step {}", i + 1), PhaseKind::Hold, *hold, rate);
            }
        }
        Profile::Closed { .. } => {}
        Profile::Spike { base, peak, base_hold, ramp_up, peak_hold, ramp_down, recovery } => {
            b.hold("base", PhaseKind::Hold, *base_hold, *base);
            b.ramp("spike", *ramp_up, *base, *peak);
            b.hold("peak", PhaseKind::Hold, *peak_hold, *peak);
            b.ramp("ramp down", *ramp_down, *peak, *base);
            b.hold("recovery", PhaseKind::Hold, *recovery, *base);
        }
    }
    b.out
}

/// Lays phases end to end.
#[derive(Default)]
struct Phases {
    out: Vec<Phase>,
    at: Duration,
    /// Rate at the end of the last phase.
    rate: f64,
}

impl Phases {
    fn hold(&mut self, name: &str, kind: PhaseKind, duration: Duration, rate: f64) {
        self.out.push(Phase::constant(name, kind, self.at, duration, rate));
        self.at += duration;
        self.rate = rate;
    }

    /// A ramp to `to`; none when `duration` is zero (the rate jumps).
    fn ramp(&mut self, name: &str, duration: Duration, from: f64, to: f64) {
        if !duration.is_zero() {
            self.out.push(Phase::ramp(name, self.at, duration, from, to));
            self.at += duration;
        }
        self.rate = to;
    }
}

/// `r` as HTTP/1.1 bytes (the engine's form; HTTP/2 reads it back). A gRPC call's body is
/// its JSON message, encoded here into a length-prefixed protobuf message.
fn encode_request(
    r: &RequestSpec,
    host: &str,
    path: &str,
    grpc: Option<&super::grpc::GrpcSpec>,
) -> Result<Vec<u8>, String> {
    let framed;
    let r = match (grpc, &r.body) {
        (Some(g), Some(json)) => {
            framed = RequestSpec { body: Some(g.frame(json)?), ..r.clone() };
            &framed
        }
        _ => r,
    };
    let mut out = format!("{} {} HTTP/1.1\r\n", r.method, path);
    let has = |name: &str| r.headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    if !has("host") {
        out.push_str(&format!("Host: {host}\r\n"));
    }
    if !has("user-agent") {
        out.push_str(concat!("User-Agent: loader/", env!("CARGO_PKG_VERSION"), "\r\n"));
    }
    for (name, value) in &r.headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(body) = &r.body
        && !has("content-length")
    {
        out.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    if let Some(body) = &r.body {
        bytes.extend_from_slice(body);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::RunArgs;
    use crate::engine::tls::Verify;
    use rustls::pki_types::ServerName;

    fn plan(f: impl FnOnce(&mut RunArgs)) -> Result<Plan, InputError> {
        let mut a =
            RunArgs { url: Some("http://127.0.0.1:8080/x?y=1".into()), rate: Some(100.0), ..Default::default() };
        f(&mut a);
        let spec = Spec::from_run_args(&a)?;
        let url = a.url.clone().unwrap();
        Plan::resolve(&spec, &url)
    }

    #[test]
    fn the_phase_of_a_second_is_the_one_it_ends_in() {
        let p = plan(|a| {
            a.rate = None;
            a.profile = Some("step".into());
            a.steps = Some(vec![100.0, 200.0]);
            a.hold = Some("2s".into());
            a.warmup = Some("1s".into());
        })
        .unwrap();
        let name = |s: u64| p.phase_at(Duration::from_secs(s)).map(|ph| ph.name.clone());
        assert_eq!(name(0), None, "nothing has run at the zero");
        assert_eq!(name(1).as_deref(), Some("warmup"));
        assert_eq!(name(2).as_deref(), Some("step 1"));
        assert_eq!(name(3).as_deref(), Some("step 1"), "a phase covers the second ending at its end");
        assert_eq!(name(4).as_deref(), Some("step 2"));
        assert_eq!(name(5).as_deref(), Some("step 2"));
        assert_eq!(name(6), None, "after the last phase the run drains");
    }

    #[test]
    fn request_is_encoded_once_with_host_and_length() {
        let p = plan(|a| {
            a.method = Some("post".into());
            a.body = Some("{}".into());
            a.headers = vec!["X-A: 1".into()];
        })
        .unwrap();
        let text = String::from_utf8(p.requests[0].bytes.clone()).unwrap();
        assert!(text.starts_with("POST /x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n"), "{text}");
        assert!(text.contains("X-A: 1\r\n") && text.ends_with("Content-Length: 2\r\n\r\n{}"), "{text}");
        assert_eq!(p.target.addr, "127.0.0.1:8080".parse().unwrap());
    }

    #[test]
    fn mix_is_smooth_and_exact() {
        let mut p = plan(|_| {}).unwrap();
        let template = p.requests[0].clone();
        p.requests = [5, 1, 1].iter().map(|&weight| PlannedRequest { weight, ..template.clone() }).collect();
        let mix = p.mix();
        assert_eq!(mix.len(), 7);
        assert_eq!(mix.iter().filter(|&&i| i == 0).count(), 5);
        // nginx's smooth order for 5:1:1 spreads the light requests apart.
        assert_eq!(mix, vec![0, 0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn warmup_then_steps_back_to_back() {
        let p = plan(|a| {
            a.rate = None;
            a.steps = Some(vec![10.0, 20.0]);
            a.hold = Some("3s".into());
            a.warmup = Some("1s".into());
        })
        .unwrap();
        let got: Vec<_> = p.phases.iter().map(|ph| (ph.kind, ph.start.as_secs(), ph.rate)).collect();
        assert_eq!(got, vec![(PhaseKind::Warmup, 0, 10.0), (PhaseKind::Hold, 1, 10.0), (PhaseKind::Hold, 4, 20.0)]);
        assert_eq!(p.duration(), Duration::from_secs(7));
    }

    #[test]
    fn pool_splits_across_shards() {
        let p = plan(|a| {
            a.connections = Some(5);
            a.threads = Some(2);
        })
        .unwrap();
        assert_eq!((p.connections_of(0), p.connections_of(1)), (3, 2));
        let p = plan(|a| {
            a.connections = Some(1);
            a.threads = Some(4);
        })
        .unwrap();
        assert_eq!(p.threads, 1);
    }

    #[test]
    fn bad_urls_are_named() {
        for url in ["127.0.0.1:80", "ftp://x/", "http://"] {
            let e = plan(|a| a.url = Some(url.into())).unwrap_err();
            assert_eq!(e.key, "--url", "{url}: {e}");
        }
    }

    #[test]
    fn https_urls_default_to_443_and_name_their_host() {
        let p = plan(|a| a.url = Some("https://127.0.0.1/x".into())).unwrap();
        assert_eq!(p.target.addr.port(), 443);
        let tls = p.target.tls.as_ref().expect("https has TLS settings");
        assert!(matches!(tls.server_name, ServerName::IpAddress(_)));
        assert_eq!(tls.verify, Verify::WebPki, "verification is on by default");
        let p = plan(|a| {
            a.url = Some("https://localhost:8443/".into());
            a.insecure = true;
        })
        .unwrap();
        let tls = p.target.tls.expect("https");
        assert_eq!(tls.server_name, ServerName::try_from("localhost").unwrap());
        assert_eq!(tls.verify, Verify::Insecure);
        assert!(plan(|a| a.url = Some("http://127.0.0.1/".into())).unwrap().target.tls.is_none());
    }

    #[test]
    fn tls_flags_on_http_urls_are_named() {
        let e = plan(|a| a.insecure = true).unwrap_err();
        assert_eq!(e.key, "--insecure", "{e}");
        let e = plan(|a| a.cacert = Some("/dev/null".into())).unwrap_err();
        assert_eq!(e.key, "--cacert", "{e}");
        let e = plan(|a| {
            a.url = Some("https://127.0.0.1/".into());
            a.cacert = Some("/dev/null".into());
        })
        .unwrap_err();
        assert!(e.key == "--cacert" && e.to_string().contains("no PEM certificate"), "{e}");
    }

    fn shape(p: &Plan) -> Vec<(String, PhaseKind, u64, f64, f64)> {
        p.phases
            .iter()
            .map(|ph| (ph.name.clone(), ph.kind, ph.start.as_millis() as u64, ph.start_rate, ph.end_rate))
            .collect()
    }

    fn named(v: &[(&str, PhaseKind, u64, f64, f64)]) -> Vec<(String, PhaseKind, u64, f64, f64)> {
        v.iter().map(|&(n, k, s, a, b)| (n.to_string(), k, s, a, b)).collect()
    }

    use PhaseKind::{Hold, Ramp, Warmup};

    #[test]
    fn steps_with_ramps_are_ramp_then_hold() {
        let p = plan(|a| {
            a.rate = None;
            a.steps = Some(vec![100.0, 200.0]);
            a.hold = Some("1s".into());
            a.ramp = Some("500ms".into());
            a.warmup = Some("2s".into());
            a.warmup_rate = Some(20.0);
        })
        .unwrap();
        assert_eq!(
            shape(&p),
            named(&[
                ("warmup", Warmup, 0, 20.0, 20.0),
                ("ramp to step 1", Ramp, 2000, 20.0, 100.0),
                ("step 1", Hold, 2500, 100.0, 100.0),
                ("ramp to step 2", Ramp, 3500, 100.0, 200.0),
                ("step 2", Hold, 4000, 200.0, 200.0),
            ])
        );
        // A ramp's offered rate is what it plans ÷ its length: (20 + 100)/2 = 60/s.
        assert_eq!(p.phases[1].rate, 60.0);
        assert_eq!(p.phases[1].window().planned(), 30);
        assert_eq!(p.duration(), Duration::from_secs(5));
        assert_eq!(p.profile_kind(), ProfileKind::Step);
        assert_eq!(p.peak_rate(), 200.0);
    }

    #[test]
    fn first_ramp_starts_from_zero_without_warmup() {
        let p = plan(|a| {
            a.rate = None;
            a.profile = Some("breakpoint".into());
            a.step_start = Some(100.0);
            a.step_increment = Some(100.0);
            a.step_count = Some(3);
            a.hold = Some("2s".into());
            a.ramp = Some("1s".into());
        })
        .unwrap();
        let s = shape(&p);
        assert_eq!(s[0], ("ramp to step 1".to_string(), Ramp, 0, 0.0, 100.0));
        assert_eq!(s.len(), 6);
        assert_eq!(s[5], ("step 3".to_string(), Hold, 7000, 300.0, 300.0));
        assert_eq!(p.profile_kind(), ProfileKind::Breakpoint);
    }

    #[test]
    fn spike_phases_are_named_for_the_analysis() {
        let p = plan(|a| {
            a.profile = Some("spike".into());
            a.peak_rate = Some(500.0);
            a.duration = Some("10s".into());
            a.ramp = Some("2s".into());
            a.hold = Some("5s".into());
        })
        .unwrap();
        assert_eq!(
            shape(&p),
            named(&[
                ("base", Hold, 0, 100.0, 100.0),
                ("spike", Ramp, 10_000, 100.0, 500.0),
                ("peak", Hold, 12_000, 500.0, 500.0),
                ("ramp down", Ramp, 17_000, 500.0, 100.0),
                ("recovery", Hold, 19_000, 100.0, 100.0),
            ])
        );
        assert_eq!(p.duration(), Duration::from_secs(29));
        assert_eq!(p.phases[1].rate, 300.0);
    }

    #[test]
    fn ramp_soak_and_constant_are_one_phase() {
        let p = plan(|a| {
            a.profile = Some("ramp".into());
            a.from_rate = Some(10.0);
            a.duration = Some("4s".into());
        })
        .unwrap();
        assert_eq!(shape(&p), named(&[("ramp", Ramp, 0, 10.0, 100.0)]));
        assert_eq!(p.phases[0].window().planned(), 220);
        assert_eq!(p.phases[0].rate, 55.0);
        let p = plan(|a| {
            a.profile = Some("soak".into());
            a.duration = Some("2h".into());
            a.warmup = Some("1m".into());
        })
        .unwrap();
        assert_eq!(shape(&p), named(&[("warmup", Warmup, 0, 100.0, 100.0), ("soak", Hold, 60_000, 100.0, 100.0)]));
        assert_eq!(p.profile_kind(), ProfileKind::Soak);
        let p = plan(|_| {}).unwrap();
        assert_eq!(shape(&p), named(&[("main", Hold, 0, 100.0, 100.0)]));
        assert_eq!(p.profile_kind(), ProfileKind::Constant);
    }

    #[test]
    fn zero_ramps_are_left_out() {
        let p = plan(|a| {
            a.rate = None;
            a.steps = Some(vec![100.0, 200.0]);
            a.ramp = Some("0s".into());
        })
        .unwrap();
        assert!(p.phases.iter().all(|ph| ph.kind == Hold));
    }

    #[test]
    fn the_demo_plan_is_unchanged() {
        let spec = Spec::from_run_args(&RunArgs::default()).unwrap();
        let p = Plan::resolve(&spec, "http://127.0.0.1:9/").unwrap();
        assert_eq!(
            shape(&p),
            named(&[
                ("warmup", Warmup, 0, 100.0, 100.0),
                ("step 1", Hold, 2000, 100.0, 100.0),
                ("step 2", Hold, 5000, 200.0, 200.0),
                ("step 3", Hold, 8000, 300.0, 300.0),
                ("step 4", Hold, 11_000, 400.0, 400.0),
                ("step 5", Hold, 14_000, 500.0, 500.0),
                ("step 6", Hold, 17_000, 600.0, 600.0),
            ])
        );
    }
}
