//! [`Spec`]: a run as the user wrote it — scenario file and flags merged, flags winning —
//! each value checked on its own and reported against where it was written.
//!
//! The file is read by [`super::file`], the flags laid over it by [`super::input`]; this
//! module turns that [`Raw`] into typed values. Profiles are checked in [`super::profile`],
//! the criteria and limits in [`super::limits`]. Nothing is resolved here (no DNS, no
//! phases): that is [`super::Plan`].

use std::path::PathBuf;
use std::time::Duration;

use hyper::Uri;

use super::file;
use super::input::{Given, Origin};
use super::limits::{CapacitySpec, SloSpec, VerdictLimits};
use super::options::RunArgs;
use super::profile::{self, Profile};
use super::raw::{Raw, RawRequest};
use super::request::RequestSpec;
use super::target::TlsSpec;
use super::values::{count, duration, duration_at_most, positive_duration, rate, size};
use crate::error::InputError;

/// Where the load goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// A URL the user gave.
    Url(String),
    /// The built-in target, started inside this process (the demo).
    BuiltIn,
}

/// What `loader run` prints on standard output (`--quiet`, `--json`); warnings and errors go
/// to stderr and the files are written whichever it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StdoutMode {
    /// The progress, the start-up lines, the verdict, the table and where the outputs went.
    #[default]
    Full,
    /// The verdict's headline only, one line per run (`--quiet`).
    Headline,
    /// The run's `summary.json` document only, one compact line per run (`--json`).
    Json,
}

impl StdoutMode {
    /// Whether stdout carries the full terminal report (neither `--quiet` nor `--json`).
    pub fn full(self) -> bool {
        self == StdoutMode::Full
    }
}

/// A validated run request.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The scenario file, when the run came from one.
    pub scenario: Option<PathBuf>,
    /// Where the load goes.
    pub target: Target,
    /// How to name the URL in a resolution error (`--url` or `file:line:col: target.url`).
    pub url_key: String,
    /// What is sent: one or more requests, mixed by weight.
    pub requests: Vec<RequestSpec>,
    /// Reuse connections (HTTP keep-alive); `false` closes after every response, from the
    /// loader's side (so TIME_WAIT builds up on the load machine, as without a pool).
    pub keepalive: bool,
    /// The load shape after warm-up.
    pub profile: Profile,
    /// Warm-up before the profile, reported apart.
    pub warmup: Duration,
    /// Rate of the warm-up (`None`: the profile's first non-zero rate).
    pub warmup_rate: Option<f64>,
    /// Keep-alive connections across all shards.
    pub connections: usize,
    /// Shard threads; `None` = one per CPU this process may use.
    pub threads: Option<usize>,
    /// Client timeout per request.
    pub timeout: Duration,
    /// Wake-up window override (`None`: the engine's default for the rate).
    pub wake_window: Option<Duration>,
    /// Send-ahead window override (`None`: the engine's default).
    pub send_ahead: Option<Duration>,
    /// Size limits on responses.
    pub limits: crate::engine::http1::Limits,
    /// Send non-idempotent requests again after a stale keep-alive connection.
    pub retry_non_idempotent: bool,
    /// HTTP/2 with at most this many streams per connection (`--http2`, `--max-streams`);
    /// `None`: HTTP/1.1.
    pub http2: Option<u32>,
    /// gRPC unary calls (`--grpc`): every request is a call of this method.
    pub grpc: Option<super::grpc::GrpcSpec>,
    /// Break criteria (`[slo]`).
    pub slo: SloSpec,
    /// Verdict limits (`[verdict]`).
    pub verdict: VerdictLimits,
    /// Repeats and the capacity plan.
    pub capacity: CapacitySpec,
    /// Load the eBPF probes.
    pub probes: bool,
    /// Stop sending when the target collapses.
    pub emergency_stop: bool,
    /// The target's resources to sample each second (`[[watch]]`, `--watch`).
    pub watch: Vec<super::WatchSpec>,
    /// Output directory.
    pub out: Option<PathBuf>,
    /// Line-per-second progress instead of a status line.
    pub plain: bool,
    /// What stdout carries (flags only).
    pub stdout: StdoutMode,
    /// How an https target's certificate is checked (flags only).
    pub tls: TlsSpec,
    /// Rows that fill the requests' `{{column}}` placeholders (`--data`, `[data]`).
    pub data: Option<super::data::DataSpec>,
    /// This machine's part of the run (`--shard`).
    pub share: crate::schedule::Share,
    /// How requests arrive (`--arrival`, `[profile] arrival`), with the seed of Poisson's.
    pub arrival: crate::schedule::Arrival,
    /// When the run's zero is on the wall clock (`--start-at`).
    pub start_at: Option<std::time::SystemTime>,
}

/// The demo's client timeout (no URL, no file, no `--timeout`): past its target's capacity
/// the queue outgrows it within a step, so the demo's last step shows the cliff.
const DEMO_TIMEOUT: Duration = Duration::from_secs(1);

/// The demo's latency SLO on each step's p99, unless one is given: 5 × its target's 20 ms
/// service time, which the steps below its capacity keep and the first above it does not.
const DEMO_SLO_P99: Duration = Duration::from_millis(100);

/// Default client timeout (DESIGN.md: explicit, 5 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default pool size.
pub const DEFAULT_CONNECTIONS: usize = 64;
/// Most requests in one mix.
const MAX_REQUESTS: usize = 1000;

pub use super::values::parse_duration;

fn check_header(g: &Given<impl Sized>, name: &str, value: &str) -> Result<(String, String), InputError> {
    let name = name.trim();
    let valid = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !valid {
        return Err(g.err(format!("invalid header name {name:?}")));
    }
    let value = value.trim();
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(g.err(format!("header {name} has a line break in its value")));
    }
    Ok((name.to_string(), value.to_string()))
}

fn parse_header(g: &Given<Vec<String>>, line: &str) -> Result<(String, String), InputError> {
    let (name, value) = line.split_once(':').ok_or_else(|| g.err(format!("expected `Name: value`, got {line:?}")))?;
    check_header(g, name, value)
}

/// The path part of a URL, for naming (`/` when there is none).
fn url_path(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.find('/').map_or("/", |i| &rest[i..])
}

fn method(g: Option<&Given<String>>) -> Result<String, InputError> {
    let Some(g) = g else { return Ok("GET".to_string()) };
    let m = g.value.trim().to_ascii_uppercase();
    if m.is_empty() || m.len() > 32 || !m.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(g.err(format!("invalid method {:?}", g.value)));
    }
    Ok(m)
}

/// Check the URL's shape (resolution waits for the plan).
fn check_url(g: &Given<String>) -> Result<(), InputError> {
    let uri: Uri = g.value.parse().map_err(|e| g.err(format!("{:?} is not a URL ({e})", g.value)))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => return Err(g.err(format!("unsupported scheme {other:?}; expected http or https"))),
        None => return Err(g.err(format!("{:?} has no scheme; write http://host:port/path", g.value))),
    }
    if uri.authority().is_none() {
        return Err(g.err(format!("{:?} has no host", g.value)));
    }
    Ok(())
}

impl Spec {
    /// Validate `loader run`: its scenario file (if any) with the flags laid over it.
    pub fn from_run_args(args: &RunArgs) -> Result<Spec, InputError> {
        let mut raw = match &args.scenario {
            Some(path) => file::load(path)?,
            None => Raw::default(),
        };
        raw.overlay_flags(args);
        let mut spec = Spec::from_raw(&raw)?;
        spec.emergency_stop = !args.no_emergency_stop;
        spec.stdout = match (args.quiet, args.json) {
            (_, true) => StdoutMode::Json,
            (true, false) => StdoutMode::Headline,
            (false, false) => StdoutMode::Full,
        };
        if args.insecure && args.cacert.is_some() {
            return Err(InputError::new("--cacert", "cannot be combined with --insecure (which verifies nothing)"));
        }
        spec.tls = TlsSpec { insecure: args.insecure, cacert: args.cacert.clone() };
        Ok(spec)
    }

    /// Validate scenario text as if it were a file named `name`, with `args` laid over it.
    pub fn from_scenario_text(name: &str, text: &str, args: &RunArgs) -> Result<Spec, InputError> {
        let mut raw = file::parse(name, text)?;
        raw.overlay_flags(args);
        Spec::from_raw(&raw)
    }

    fn from_raw(raw: &Raw) -> Result<Spec, InputError> {
        let t = &raw.target;
        if let Some(url) = &t.url {
            check_url(url)?;
        }
        let target = match &t.url {
            Some(url) => Target::Url(url.value.clone()),
            None => Target::BuiltIn,
        };
        let demo = t.url.is_none() && raw.file.is_none();

        let profile = profile::from_raw(raw, demo)?;
        let grpc = super::grpc::from_raw(raw)?;
        let p = &raw.profile;
        let default_warmup = if demo { Duration::from_secs(2) } else { Duration::ZERO };
        let warmup = p.warmup.as_ref().map_or(Ok(default_warmup), duration)?;
        let warmup_rate = p.warmup_rate.as_ref().map(rate).transpose()?;

        let http2 = http2(raw, grpc.is_some())?;
        // A closed run's users each hold a connection by default (HTTP/2: streams of as few).
        let default_connections = match (profile.max_users(), http2) {
            (0, _) => DEFAULT_CONNECTIONS as u64,
            (users, None) => u64::from(users),
            (users, Some(streams)) => u64::from(users.div_ceil(streams.max(1))),
        };
        let connections = t.connections.as_ref().map_or(Ok(default_connections), |g| count(g, 1, 1_000_000))?;
        let threads = t.threads.as_ref().map(|g| count(g, 1, 4096)).transpose()?;
        let default_timeout = if demo { DEMO_TIMEOUT } else { DEFAULT_TIMEOUT };
        let timeout = t.timeout.as_ref().map_or(Ok(default_timeout), |g| {
            positive_duration(g)?;
            duration_at_most(g, Duration::from_secs(3600), "1 hour")
        })?;
        let wake_window =
            t.wake_window.as_ref().map(|g| duration_at_most(g, Duration::from_secs(1), "1 second")).transpose()?;
        let send_ahead =
            t.send_ahead.as_ref().map(|g| duration_at_most(g, Duration::from_millis(10), "10 ms")).transpose()?;
        let defaults = crate::engine::http1::Limits::default();
        let limits = crate::engine::http1::Limits {
            max_head: t.max_header.as_ref().map_or(Ok(defaults.max_head as u64), |g| size(g, 1024, 64 << 20))? as usize,
            max_body: t.max_body.as_ref().map_or(Ok(defaults.max_body), |g| size(g, 0, 1 << 40))?,
        };

        Ok(Spec {
            scenario: raw.file.clone(),
            url_key: t.url.as_ref().map_or_else(|| "--url".to_string(), |g| g.origin.label()),
            requests: grpc_requests(requests(raw)?, grpc.as_ref()),
            target,
            keepalive: t.keepalive.as_ref().is_none_or(|g| g.value),
            profile,
            warmup,
            warmup_rate,
            connections: connections as usize,
            threads: threads.map(|t| t as usize),
            timeout,
            wake_window,
            send_ahead,
            limits,
            retry_non_idempotent: t.retry_non_idempotent.as_ref().is_some_and(|g| g.value),
            http2,
            grpc,
            slo: {
                let mut slo = SloSpec::from_raw(&raw.slo)?;
                if demo && slo.p95.is_none() && slo.p99.is_none() {
                    slo.p99 = Some(DEMO_SLO_P99);
                }
                slo
            },
            verdict: VerdictLimits::from_raw(&raw.verdict)?,
            capacity: CapacitySpec::from_raw(raw)?,
            probes: raw.verdict.probes.as_ref().is_none_or(|g| g.value),
            emergency_stop: true,
            watch: super::watch::from_raw(raw)?,
            out: raw.output.dir.as_ref().map(|g| g.value.clone()),
            plain: raw.output.plain.as_ref().is_some_and(|g| g.value),
            stdout: StdoutMode::Full,
            tls: TlsSpec::default(),
            data: super::data::from_raw(raw)?,
            share: raw.flags.shard.as_ref().map_or(Ok(Default::default()), super::values::share)?,
            arrival: arrival(raw)?,
            start_at: raw.flags.start_at.as_ref().map(super::values::instant).transpose()?,
        })
    }
}

/// `[profile] arrival` / `--arrival`: `uniform` (the default) or `poisson`, whose seed is
/// `--seed` (`[data] seed`) or the data's chosen one, else chosen now.
fn arrival(raw: &Raw) -> Result<crate::schedule::Arrival, InputError> {
    use crate::schedule::Arrival;
    let Some(g) = raw.profile.arrival.as_ref() else { return Ok(Arrival::Uniform) };
    match g.value.trim().to_ascii_lowercase().as_str() {
        "uniform" => Ok(Arrival::Uniform),
        "poisson" => Ok(Arrival::Poisson { seed: super::data::seed(raw)? }),
        other => Err(g.err(format!("expected uniform or poisson, got {other:?}"))),
    }
}

/// The request mix: the file's `[[request]]` entries (or one request from the flags), with
/// `--method`, `--body` and `--header` applied to every one.
fn requests(raw: &Raw) -> Result<Vec<RequestSpec>, InputError> {
    let entries = if raw.requests.is_empty() { vec![RawRequest::default()] } else { raw.requests.clone() };
    if entries.len() > MAX_REQUESTS {
        let at = entries[MAX_REQUESTS].at.as_ref().map(Origin::label).unwrap_or_default();
        return Err(InputError::new(at, format!("more than {MAX_REQUESTS} [[request]] entries")));
    }
    let flag_headers = match &raw.flags.headers {
        Some(g) => g.value.iter().map(|line| parse_header(g, line)).collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    let user_agent = match &raw.target.user_agent {
        Some(g) if g.value.trim().is_empty() => return Err(g.err("must not be empty")),
        Some(g) => Some(check_header(g, "User-Agent", &g.value)?),
        None => None,
    };
    let url_path = raw.target.url.as_ref().map(|g| url_path(&g.value)).unwrap_or("/");
    let mut out: Vec<RequestSpec> = Vec::with_capacity(entries.len());
    let mut names: Vec<(String, Option<&Origin>)> = Vec::new();
    for entry in &entries {
        let method = method(raw.flags.method.as_ref().or(entry.method.as_ref()))?;
        let path = match &entry.path {
            Some(g) => {
                let path = g.value.trim();
                if !path.starts_with('/') || path.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) {
                    return Err(g.err(format!("expected a path like /api/items?id=1, got {:?}", g.value)));
                }
                Some(path.to_string())
            }
            None => None,
        };
        let mut headers = match &entry.headers {
            Some(g) => g.value.iter().map(|(n, v)| check_header(g, n, v)).collect::<Result<Vec<_>, _>>()?,
            None => Vec::new(),
        };
        for (name, value) in &flag_headers {
            headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
            headers.push((name.clone(), value.clone()));
        }
        if let Some((name, value)) = &user_agent
            && !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
        {
            headers.push((name.clone(), value.clone()));
        }
        let weight = entry.weight.as_ref().map_or(Ok(1), |g| count(g, 1, 1_000_000))? as u32;
        let name = match &entry.name {
            Some(g) => {
                let n = g.value.trim();
                if n.is_empty() || n.chars().any(char::is_control) {
                    return Err(g.err("a request name must be non-empty text on one line"));
                }
                n.to_string()
            }
            None => format!("{method} {}", path.as_deref().unwrap_or(url_path)),
        };
        let origin = entry.name.as_ref().map(|g| &g.origin).or(entry.at.as_ref());
        if names.iter().any(|(n, _)| *n == name) {
            let at = origin.map(Origin::label).unwrap_or_else(|| "request".to_string());
            return Err(InputError::new(
                at,
                format!("duplicate request name {name:?}; give each request its own name"),
            ));
        }
        names.push((name.clone(), origin));
        let body = raw.flags.body.as_ref().or(entry.body.as_ref()).map(|g| g.value.clone().into_bytes());
        out.push(RequestSpec { name, path, weight, method, headers, body });
    }
    Ok(out)
}

/// With `--grpc`, every request becomes a call of the method: POST to its path, the gRPC
/// headers before the user's (metadata), the body (JSON, default `{}`) encoded at plan time.
fn grpc_requests(mut requests: Vec<RequestSpec>, grpc: Option<&super::grpc::GrpcSpec>) -> Vec<RequestSpec> {
    let Some(g) = grpc else { return requests };
    for r in &mut requests {
        r.method = "POST".into();
        r.path = Some(g.path.clone());
        if r.name.starts_with("GET ") {
            r.name = g.path.trim_start_matches('/').to_string();
        }
        let mut headers = g.headers();
        headers.extend(r.headers.drain(..).filter(|(n, _)| !n.eq_ignore_ascii_case("content-type")));
        r.headers = headers;
        r.body.get_or_insert_with(|| b"{}".to_vec());
    }
    requests
}

/// `--http2` / `target.http2` with `--max-streams`: the streams per connection, or `None`
/// for HTTP/1.1. Streams without HTTP/2, or HTTP/2 without keep-alive, are one-line errors.
fn http2(raw: &Raw, grpc: bool) -> Result<Option<u32>, InputError> {
    if let Some(g) = raw.target.http2.as_ref().filter(|g| grpc && !g.value) {
        return Err(InputError::new(g.origin.label(), "not with --grpc, which is HTTP/2"));
    }
    let on = grpc || raw.target.http2.as_ref().is_some_and(|g| g.value);
    let streams = raw.target.max_streams.as_ref();
    if !on {
        if let Some(g) = streams {
            return Err(InputError::new(
                g.origin.label(),
                "only with HTTP/2 (--http2): HTTP/1.1 sends one request per connection at a time",
            ));
        }
        return Ok(None);
    }
    if let Some(g) = raw.target.keepalive.as_ref().filter(|g| !g.value) {
        return Err(InputError::new(
            g.origin.label(),
            "not with HTTP/2, which multiplexes requests on kept connections",
        ));
    }
    let max = crate::engine::http2::MAX_MAX_STREAMS;
    let n = streams.map_or(Ok(u64::from(crate::engine::http2::DEFAULT_MAX_STREAMS)), |g| count(g, 1, max as i64))?;
    Ok(Some(n as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(f: impl FnOnce(&mut RunArgs)) -> RunArgs {
        let mut a = RunArgs { url: Some("http://127.0.0.1:1/".into()), rate: Some(100.0), ..Default::default() };
        f(&mut a);
        a
    }

    fn err(a: RunArgs) -> String {
        Spec::from_run_args(&a).unwrap_err().to_string()
    }

    #[test]
    fn flags_make_a_constant_run() {
        let s = Spec::from_run_args(&args(|a| a.duration = Some("2s".into()))).unwrap();
        assert_eq!(s.profile, Profile::Constant { rate: 100.0, duration: Duration::from_secs(2) });
        assert_eq!(s.timeout, DEFAULT_TIMEOUT);
        assert_eq!(s.requests[0].method, "GET");
    }

    #[test]
    fn no_url_is_the_stepped_demo() {
        let s = Spec::from_run_args(&RunArgs::default()).unwrap();
        assert_eq!(s.target, Target::BuiltIn);
        assert!(matches!(s.profile, Profile::Step { ref rates, .. } if rates.len() == 6));
        assert_eq!(s.warmup, Duration::from_secs(2));
        // Past its target's capacity within a step: an SLO to break and a timeout to meet.
        assert_eq!((s.slo.p99, s.timeout), (Some(DEMO_SLO_P99), DEMO_TIMEOUT));
        // A given SLO or timeout is kept, and a URL is no demo.
        let given = Spec::from_run_args(&args(|a| {
            a.url = None;
            a.rate = None;
            a.slo_p95 = Some("50ms".into());
            a.timeout = Some("3s".into());
        }))
        .unwrap();
        assert_eq!((given.slo.p99, given.timeout), (None, Duration::from_secs(3)));
        assert_eq!(Spec::from_run_args(&args(|_| {})).unwrap().slo.p99, None);
    }

    #[test]
    fn bad_values_name_their_flag() {
        assert!(err(args(|a| a.rate = Some(-3.0))).starts_with("--rate:"));
        assert!(err(args(|a| a.rate = None)).starts_with("--rate:"));
        assert!(err(args(|a| a.duration = Some("ten".into()))).starts_with("--duration:"));
        assert!(err(args(|a| a.duration = Some("0s".into()))).starts_with("--duration:"));
        assert!(err(args(|a| a.connections = Some(0))).starts_with("--connections:"));
        assert!(err(args(|a| a.threads = Some(0))).starts_with("--threads:"));
        assert!(err(args(|a| a.headers = vec!["NoColon".into()])).starts_with("--header:"));
        assert!(err(args(|a| a.headers = vec!["Bad Name: x".into()])).starts_with("--header:"));
        assert!(err(args(|a| a.profile = Some("zigzag".into()))).starts_with("--profile:"));
        assert!(err(args(|a| a.method = Some("GE T".into()))).starts_with("--method:"));
        assert!(
            err(args(|a| {
                a.rate = None;
                a.profile = Some("step".into());
                a.steps = Some(vec![100.0, 0.0]);
            }))
            .starts_with("--steps:")
        );
        assert!(err(args(|a| a.steps = Some(vec![100.0, 200.0]))).starts_with("--rate: does not apply to the step"));
        assert!(err(args(|a| a.repeat = Some(0))).starts_with("--repeat:"));
        assert!(err(args(|a| a.margin = Some(1.5))).starts_with("--margin:"));
        assert!(err(args(|a| a.peak = Some(-1.0))).starts_with("--peak:"));
        assert!(err(args(|a| a.error_budget = Some("120%".into()))).starts_with("--error-budget:"));
        assert!(err(args(|a| a.slo_p95 = Some("fast".into()))).starts_with("--slo-p95:"));
        assert!(err(args(|a| a.slo_p99 = Some("0ms".into()))).starts_with("--slo-p99:"));
        assert!(err(args(|a| a.ramp = Some("1s".into()))).starts_with("--ramp: does not apply to the constant"));
        assert!(err(args(|a| a.url = Some("ftp://x/".into()))).starts_with("--url:"));
        let step = |f: fn(&mut RunArgs)| {
            err(args(|a| {
                a.rate = None;
                a.profile = Some("breakpoint".into());
                f(a);
            }))
        };
        fn arith(a: &mut RunArgs, start: f64, inc: f64) {
            a.step_start = Some(start);
            a.step_increment = Some(inc);
        }
        assert!(step(|a| arith(a, 100.0, 0.0)).starts_with("--step-increment: a breakpoint run steps up"));
        assert!(step(|a| arith(a, 100.0, 10.0)).starts_with("--step-increment: needs a step count or a max_rate"));
        assert!(
            step(|a| {
                arith(a, 100.0, 1.0);
                a.step_count = Some(5000);
            })
            .starts_with("--step-count: 5000 is above")
        );
        assert!(step(|a| a.step_start = Some(100.0)).starts_with("--step-start: needs an increment too"));
        assert!(step(|a| a.max_rate = Some(100.0)).starts_with("--steps: required"));
        assert!(
            step(|a| {
                arith(a, 100.0, 100.0);
                a.max_rate = Some(50.0);
            })
            .starts_with("--max-rate: max_rate 50 is below")
        );
    }

    #[test]
    fn every_profile_from_flags() {
        let ok = |f: fn(&mut RunArgs)| Spec::from_run_args(&args(f)).unwrap().profile;
        assert_eq!(
            ok(|a| {
                a.rate = None;
                a.step_start = Some(100.0);
                a.step_increment = Some(50.0);
                a.step_count = Some(3);
                a.ramp = Some("500ms".into());
            }),
            Profile::Step {
                rates: vec![100.0, 150.0, 200.0],
                hold: Duration::from_secs(20),
                ramp: Duration::from_millis(500)
            }
        );
        assert_eq!(
            ok(|a| {
                a.rate = None;
                a.profile = Some("breakpoint".into());
                a.step_start = Some(100.0);
                a.step_increment = Some(100.0);
                a.max_rate = Some(450.0);
                a.hold = Some("5s".into());
            }),
            Profile::Breakpoint {
                rates: vec![100.0, 200.0, 300.0, 400.0],
                hold: Duration::from_secs(5),
                ramp: Duration::ZERO
            }
        );
        assert_eq!(
            ok(|a| {
                a.profile = Some("ramp".into());
                a.duration = Some("30s".into());
            }),
            Profile::Ramp { from: 0.0, to: 100.0, duration: Duration::from_secs(30) }
        );
        assert!(
            matches!(ok(|a| a.profile = Some("soak".into())), Profile::Soak { rate: 100.0, duration } if duration.as_secs() == 3600)
        );
        let Profile::Spike { base, peak, ramp_up, ramp_down, .. } = ok(|a| {
            a.profile = Some("spike".into());
            a.ramp = Some("2s".into());
        }) else {
            panic!("not a spike")
        };
        assert_eq!((base, peak, ramp_up, ramp_down), (100.0, 400.0, Duration::from_secs(2), Duration::from_secs(2)));
    }

    #[test]
    fn slo_repeat_and_capacity_flags_are_kept() {
        let s = Spec::from_run_args(&args(|a| {
            a.slo_p95 = Some("200ms".into());
            a.error_budget = Some("1%".into());
            a.repeat = Some(3);
            a.margin = Some(0.6);
            a.peak = Some(12000.0);
        }))
        .unwrap();
        assert_eq!(s.slo.p95, Some(Duration::from_millis(200)));
        assert_eq!(s.slo.error_budget, Some(0.01));
        assert_eq!(s.slo.p99, None);
        assert_eq!((s.capacity.repeat, s.capacity.margin, s.capacity.peak), (3, 0.6, Some(12000.0)));
        assert_eq!(s.verdict, VerdictLimits::default());
    }

    #[test]
    fn user_agent_is_every_requests_unless_a_request_writes_its_own() {
        let text = "[target]\nurl = \"http://127.0.0.1:1/\"\nuser_agent = \"probe/1\"\n[[request]]\npath = \"/a\"\n\
                    [[request]]\npath = \"/b\"\nheaders = { user-agent = \"mine\" }\n[profile]\nrate = 1\n";
        let s = file(text).unwrap();
        let ua = |name: &str, value: &str| vec![(name.to_string(), value.to_string())];
        assert_eq!(s.requests[0].headers, ua("User-Agent", "probe/1"));
        assert_eq!(s.requests[1].headers, ua("user-agent", "mine"));
        let flag = RunArgs { user_agent: Some("flag/2".into()), ..Default::default() };
        let s = Spec::from_scenario_text("s.toml", text, &flag).unwrap();
        assert_eq!(s.requests[0].headers, ua("User-Agent", "flag/2"), "the flag wins over the file");
        // On the wire it replaces loader's own.
        let plan = crate::scenario::Plan::resolve(&s, "http://127.0.0.1:1/").unwrap();
        let wire = String::from_utf8(plan.requests[0].bytes.clone()).unwrap();
        assert!(wire.contains("\r\nUser-Agent: flag/2\r\n") && !wire.contains("loader/"), "{wire}");
        let s = Spec::from_run_args(&args(|a| a.headers = vec!["User-Agent: h".into()])).unwrap();
        assert_eq!(s.requests[0].headers, ua("User-Agent", "h"), "without --user-agent, a request keeps only its own");
        assert!(
            err(args(|a| a.user_agent = Some("a\nb".into()))).starts_with("--user-agent: header User-Agent has a line")
        );
        assert!(err(args(|a| a.user_agent = Some(" ".into()))).starts_with("--user-agent: must not be empty"));
        let got = file_err("[target]\nuser_agent = \"\"\n[profile]\nrate = 1\n");
        assert!(got.starts_with("s.toml:2:14: target.user_agent: must not be empty"), "{got}");
    }

    #[test]
    fn quiet_and_json_choose_what_stdout_holds_and_refuse_each_other() {
        let stdout = |f: fn(&mut RunArgs)| Spec::from_run_args(&args(f)).unwrap().stdout;
        assert_eq!(stdout(|_| {}), StdoutMode::Full);
        assert_eq!(stdout(|a| a.quiet = true), StdoutMode::Headline);
        assert_eq!(stdout(|a| a.json = true), StdoutMode::Json);
        use clap::Parser as _;
        let both = crate::cli::Cli::try_parse_from(["loader", "run", "--quiet", "--json"]).unwrap_err();
        assert_eq!(both.kind(), clap::error::ErrorKind::ArgumentConflict, "{both}");
    }

    #[test]
    fn headers_are_split_and_trimmed() {
        let s = Spec::from_run_args(&args(|a| a.headers = vec!["X-Test:  yes ".into()])).unwrap();
        assert_eq!(s.requests[0].headers, vec![("X-Test".to_string(), "yes".to_string())]);
    }

    fn file(text: &str) -> Result<Spec, InputError> {
        Spec::from_scenario_text("s.toml", text, &RunArgs::default())
    }

    fn file_err(text: &str) -> String {
        file(text).unwrap_err().to_string()
    }

    const STEPPED: &str = "[target]\nurl = \"http://127.0.0.1:1/\"\nconnections = 8\n\n[profile]\nkind = \"step\"\nsteps = [100, 200]\nhold = \"1s\"\nramp = \"500ms\"\n";

    #[test]
    fn a_file_makes_a_spec_and_flags_override_it() {
        let s = file(STEPPED).unwrap();
        assert_eq!(s.target, Target::Url("http://127.0.0.1:1/".into()));
        assert_eq!(s.connections, 8);
        assert_eq!(
            s.profile,
            Profile::Step { rates: vec![100.0, 200.0], hold: Duration::from_secs(1), ramp: Duration::from_millis(500) }
        );
        assert_eq!(s.warmup, Duration::ZERO, "a file is never the demo");
        let flags = RunArgs {
            connections: Some(4),
            step_start: Some(10.0),
            step_increment: Some(10.0),
            step_count: Some(3),
            hold: Some("2s".into()),
            ..Default::default()
        };
        let s = Spec::from_scenario_text("s.toml", STEPPED, &flags).unwrap();
        assert_eq!(s.connections, 4);
        assert_eq!(
            s.profile,
            Profile::Step {
                rates: vec![10.0, 20.0, 30.0],
                hold: Duration::from_secs(2),
                ramp: Duration::from_millis(500)
            }
        );
        // --profile replaces the file's kind; the file's step keys are then set aside.
        let flags = RunArgs { profile: Some("constant".into()), rate: Some(50.0), ..Default::default() };
        let s = Spec::from_scenario_text("s.toml", STEPPED, &flags).unwrap();
        assert_eq!(s.profile, Profile::Constant { rate: 50.0, duration: Duration::from_secs(10) });
    }

    #[test]
    fn requests_from_the_file() {
        let s = file(
            "[[request]]\nname = \"list\"\npath = \"/items\"\nweight = 3\nheaders = { Accept = \"application/json\" }\n\
             [[request]]\nmethod = \"post\"\npath = \"/items\"\nbody = \"{}\"\n[profile]\nrate = 10\n",
        )
        .unwrap();
        assert_eq!(s.target, Target::BuiltIn);
        assert_eq!(s.requests.len(), 2);
        assert_eq!(s.requests[0].name, "list");
        assert_eq!(s.requests[0].weight, 3);
        assert_eq!(s.requests[0].headers, vec![("Accept".to_string(), "application/json".to_string())]);
        assert_eq!(s.requests[1].name, "POST /items");
        assert_eq!(s.requests[1].body.as_deref(), Some(&b"{}"[..]));
    }

    #[test]
    fn semantic_errors_point_at_the_value() {
        let cases = [
            ("[profile]\nrate = -5\n", "s.toml:2:8: profile.rate: rate must be a positive number"),
            ("[profile]\nrate = 10\nduration = \"ten\"\n", "s.toml:3:12: profile.duration: expected a duration"),
            ("[profile]\nkind = \"zigzag\"\n", "s.toml:2:8: profile.kind: unknown profile"),
            ("[profile]\nkind = \"step\"\nsteps = []\n", "s.toml:3:9: profile.steps: needs at least one rate"),
            ("[profile]\nkind = \"step\"\nsteps = [100, 0]\n", "s.toml:3:9: profile.steps: step 2: rate must be"),
            (
                "[profile]\nkind = \"step\"\nsteps = [1]\nrate = 3\n",
                "s.toml:4:8: profile.rate: does not apply to the step profile",
            ),
            ("[profile]\nkind = \"step\"\n", "s.toml:1:1: profile.steps: required"),
            ("[target]\nurl = \"http://x/\"\n", "s.toml:1:1: profile.rate: required"),
            (
                "[profile]\nkind = \"spike\"\nrate = 100\npeak_rate = 50\n",
                "s.toml:4:13: profile.peak_rate: the peak (50) must be above",
            ),
            ("[profile]\nkind = \"ramp\"\nrate = 0\n", "s.toml:3:8: profile.rate: a ramp from 0 to 0"),
            (
                "[profile]\nkind = \"soak\"\nrate = 1\nduration = \"40days\"\n",
                "s.toml:4:12: profile.duration: 40days is longer",
            ),
            (
                "[profile]\nkind = \"step\"\nsteps = [1]\nhold = \"0s\"\n",
                "s.toml:4:8: profile.hold: must be longer than zero",
            ),
            ("[profile]\nrate = 1\nrepeat = 0\n", "s.toml:3:10: profile.repeat: must be at least 1"),
            (
                "[target]\nurl = \"localhost:80\"\n[profile]\nrate = 1\n",
                "s.toml:2:7: target.url: \"localhost:80\" has no scheme",
            ),
            ("[target]\nconnections = 0\n[profile]\nrate = 1\n", "s.toml:2:15: target.connections: must be at least 1"),
            ("[target]\ntimeout = \"2h\"\n[profile]\nrate = 1\n", "s.toml:2:11: target.timeout: 2h is above"),
            ("[[request]]\nweight = 0\n[profile]\nrate = 1\n", "s.toml:2:10: request[1].weight: must be at least 1"),
            ("[[request]]\npath = \"x\"\n[profile]\nrate = 1\n", "s.toml:2:8: request[1].path: expected a path"),
            ("[[request]]\nmethod = \"G T\"\n[profile]\nrate = 1\n", "s.toml:2:10: request[1].method: invalid method"),
            (
                "[[request]]\nheaders = { \"Bad Name\" = \"x\" }\n[profile]\nrate = 1\n",
                "s.toml:2:11: request[1].headers: invalid header name",
            ),
            (
                "[[request]]\nname = \"a\"\n[[request]]\nname = \"a\"\n[profile]\nrate = 1\n",
                "s.toml:4:8: request[2].name: duplicate request name",
            ),
            (
                "[[request]]\n[[request]]\n[profile]\nrate = 1\n",
                "s.toml:2:1: request[2]: duplicate request name \"GET /\"",
            ),
            (
                "[slo]\nerror_budget = \"200%\"\n[profile]\nrate = 1\n",
                "s.toml:2:16: slo.error_budget: must be a fraction",
            ),
            ("[slo]\ngoodput_min = 0\n[profile]\nrate = 1\n", "s.toml:2:15: slo.goodput_min: must be above 0"),
            ("[slo]\np95 = \"0ms\"\n[profile]\nrate = 1\n", "s.toml:2:7: slo.p95: must be longer than zero"),
            ("[slo]\ndropped_max = -1\n[profile]\nrate = 1\n", "s.toml:2:15: slo.dropped_max: must be at least 0"),
            (
                "[verdict]\ncpu_p95_pct = 170\n[profile]\nrate = 1\n",
                "s.toml:2:15: verdict.cpu_p95_pct: must be a number in (0, 100]",
            ),
            ("[verdict]\ntime_wait = 0\n[profile]\nrate = 1\n", "s.toml:2:13: verdict.time_wait: must be at least 1"),
            (
                "[capacity]\nmargin = 0\n[profile]\nrate = 1\n",
                "s.toml:2:10: capacity.margin: must be a number in [0.6, 0.8]",
            ),
            (
                "[profile]\nkind = \"breakpoint\"\nstart = 100\nincrement = 1\nmax_rate = 1e9\n",
                "s.toml:5:12: profile.max_rate: rate 1000000000 is above",
            ),
            (
                "[profile]\nkind = \"breakpoint\"\nstart = 1\nincrement = 0.001\nmax_rate = 1000\n",
                "s.toml:4:13: profile.increment: makes more than 1000 steps",
            ),
            (
                "[profile]\nkind = \"step\"\nstart = 100\nincrement = -60\ncount = 3\n",
                "s.toml:4:13: profile.increment: step 3: rate must be",
            ),
            (
                "[profile]\nkind = \"step\"\nsteps = [1]\ncount = 3\n",
                "s.toml:4:9: profile.count: count goes with start/increment",
            ),
        ];
        for (text, want) in cases {
            let got = file_err(text);
            assert!(got.starts_with(want), "{text:?}\n got: {got}\nwant: {want}");
            assert!(!got.contains('\n'), "{got}");
        }
    }

    #[test]
    fn verdict_limits_default_to_the_design_and_can_be_overridden() {
        let s =
            file("[profile]\nrate = 1\n[verdict]\ncpu_p95_pct = 60\nmin_tail_samples = 200\nprobes = false\n").unwrap();
        assert_eq!(s.verdict.cpu_p95_pct, 60.0);
        assert_eq!(s.verdict.min_tail_samples, 200);
        assert_eq!(s.verdict.time_wait, 5000);
        assert!(!s.probes);
    }

    #[test]
    fn no_prefix_or_mutation_of_an_example_panics() {
        let texts = [
            include_str!("../../../docs/examples/step.toml"),
            include_str!("../../../docs/examples/spike.toml"),
            include_str!("../../../docs/examples/breakpoint.toml"),
        ];
        for text in texts {
            for cut in (0..=text.len()).filter(|&c| text.is_char_boundary(c)) {
                let _ = file(&text[..cut]);
            }
            for (from, to) in
                [("100", "-1e308"), ("\"", "'"), ("=", "= ["), ("s\"", "\""), ("0", "99999999999999999999")]
            {
                let _ = file(&text.replace(from, to));
            }
        }
    }
}
