//! [`Spec`]: a run as the user wrote it, each value checked on its own.

use std::path::PathBuf;
use std::time::Duration;

use crate::cli::RunArgs;
use crate::error::InputError;

/// Where the load goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// A URL the user gave.
    Url(String),
    /// The built-in target, started inside this process (the demo).
    BuiltIn,
}

/// The load shape.
#[derive(Debug, Clone, PartialEq)]
pub enum Profile {
    /// One rate for `duration`.
    Constant {
        /// Requests per second.
        rate: f64,
        /// Measured length.
        duration: Duration,
    },
    /// Several rates, each held for `hold`.
    Step {
        /// Requests per second of each step, in order.
        rates: Vec<f64>,
        /// Hold time of each step.
        hold: Duration,
    },
}

/// One kind of request to send; a run mixes them by weight.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestSpec {
    /// Name in reports (`GET /` when not given).
    pub name: String,
    /// Path and query; `None` = the target URL's.
    pub path: Option<String>,
    /// Share of the mix, relative to the other requests' weights (≥ 1).
    pub weight: u32,
    /// HTTP method, upper case.
    pub method: String,
    /// Extra headers in order.
    pub headers: Vec<(String, String)>,
    /// Body, if any.
    pub body: Option<Vec<u8>>,
}

/// A validated run request.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Where the load goes.
    pub target: Target,
    /// What is sent: one or more requests, mixed by weight.
    pub requests: Vec<RequestSpec>,
    /// Reuse connections (HTTP keep-alive); `false` closes after every response, from the
    /// loader's side (so TIME_WAIT builds up on the load machine, as without a pool).
    pub keepalive: bool,
    /// The load shape after warm-up.
    pub profile: Profile,
    /// Warm-up at the first rate, reported apart.
    pub warmup: Duration,
    /// Keep-alive connections across all shards.
    pub connections: usize,
    /// Shard threads; `None` = one per CPU this process may use.
    pub threads: Option<usize>,
    /// Client timeout per request.
    pub timeout: Duration,
    /// Wake-up window override (`None`: the engine's default for the rate).
    pub wake_window: Option<Duration>,
    /// Load the eBPF probes.
    pub probes: bool,
    /// Output directory.
    pub out: Option<PathBuf>,
    /// Line-per-second progress instead of a status line.
    pub plain: bool,
}

/// Default client timeout (DESIGN.md: explicit, 5 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default pool size.
pub const DEFAULT_CONNECTIONS: usize = 64;
/// Highest rate accepted, a guard against typos (10 M req/s is beyond any single host).
const MAX_RATE: f64 = 10_000_000.0;

/// Parse a humantime duration (`10s`, `1m30s`, `250ms`), naming `key` on error.
pub fn parse_duration(key: &str, text: &str) -> Result<Duration, InputError> {
    humantime::parse_duration(text.trim())
        .map_err(|e| InputError::new(key, format!("expected a duration like 10s or 250ms, got {text:?} ({e})")))
}

fn check_rate(key: &str, rate: f64) -> Result<f64, InputError> {
    if !rate.is_finite() || rate <= 0.0 {
        return Err(InputError::new(key, format!("rate must be a positive number, got {rate}")));
    }
    if rate > MAX_RATE {
        return Err(InputError::new(key, format!("rate {rate} is above the {MAX_RATE} req/s limit")));
    }
    Ok(rate)
}

fn positive(key: &str, d: Duration) -> Result<Duration, InputError> {
    if d.is_zero() {
        return Err(InputError::new(key, "must be longer than zero"));
    }
    Ok(d)
}

fn parse_header(text: &str) -> Result<(String, String), InputError> {
    let (name, value) = text
        .split_once(':')
        .ok_or_else(|| InputError::new("--header", format!("expected `Name: value`, got {text:?}")))?;
    let name = name.trim();
    let valid = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    if !valid {
        return Err(InputError::new("--header", format!("invalid header name {name:?}")));
    }
    let value = value.trim();
    if value.bytes().any(|b| b == b'\r' || b == b'\n') {
        return Err(InputError::new("--header", format!("header {name} has a line break in its value")));
    }
    Ok((name.to_string(), value.to_string()))
}

/// The path part of a URL, for naming (`/` when there is none).
fn url_path(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.find('/').map_or("/", |i| &rest[i..])
}

impl Spec {
    /// Validate `loader run` flags.
    pub fn from_run_args(args: &RunArgs) -> Result<Spec, InputError> {
        if let Some(path) = &args.scenario {
            return Err(InputError::new(
                path.display().to_string(),
                "scenario files are not supported yet; use flags (see `loader run --help`)",
            ));
        }
        let target = match &args.url {
            Some(url) => Target::Url(url.clone()),
            None => Target::BuiltIn,
        };
        let demo = target == Target::BuiltIn;

        let duration = args.duration.as_deref().map(|d| parse_duration("--duration", d)).transpose()?;
        let hold = args.hold.as_deref().map(|d| parse_duration("--hold", d)).transpose()?;
        let profile_name = match (&args.profile, &args.steps) {
            (Some(p), _) => p.to_ascii_lowercase(),
            (None, Some(_)) => "step".to_string(),
            (None, None) if demo && args.rate.is_none() => "step".to_string(),
            (None, None) => "constant".to_string(),
        };
        let profile = match profile_name.as_str() {
            "constant" => {
                if args.steps.is_some() {
                    return Err(InputError::new("--steps", "only applies to --profile step"));
                }
                let rate = match args.rate {
                    Some(r) => check_rate("--rate", r)?,
                    None => return Err(InputError::new("--rate", "required with --url (requests per second)")),
                };
                let duration = positive("--duration", duration.or(hold).unwrap_or(Duration::from_secs(10)))?;
                Profile::Constant { rate, duration }
            }
            "step" => {
                let rates = match &args.steps {
                    Some(r) if !r.is_empty() => r.clone(),
                    Some(_) => return Err(InputError::new("--steps", "needs at least one rate")),
                    None if demo => vec![500.0, 1000.0, 2000.0, 4000.0],
                    None => return Err(InputError::new("--steps", "required with --profile step, e.g. 100,200,300")),
                };
                for &r in &rates {
                    check_rate("--steps", r)?;
                }
                let default_hold = if demo { Duration::from_secs(3) } else { Duration::from_secs(20) };
                let hold = positive("--hold", hold.or(duration).unwrap_or(default_hold))?;
                Profile::Step { rates, hold }
            }
            other @ ("spike" | "soak" | "breakpoint" | "ramp") => {
                return Err(InputError::new("--profile", format!("{other} is not supported yet (constant, step)")));
            }
            other => {
                return Err(InputError::new(
                    "--profile",
                    format!("unknown profile {other:?}; expected constant or step"),
                ));
            }
        };

        let default_warmup = if demo { Duration::from_secs(2) } else { Duration::ZERO };
        let warmup =
            args.warmup.as_deref().map(|d| parse_duration("--warmup", d)).transpose()?.unwrap_or(default_warmup);

        let connections = args.connections.unwrap_or(DEFAULT_CONNECTIONS);
        if connections == 0 {
            return Err(InputError::new("--connections", "must be at least 1"));
        }
        if connections > 1_000_000 {
            return Err(InputError::new("--connections", format!("{connections} is above the 1000000 limit")));
        }
        if args.threads == Some(0) {
            return Err(InputError::new("--threads", "must be at least 1"));
        }
        let timeout =
            args.timeout.as_deref().map(|d| parse_duration("--timeout", d)).transpose()?.unwrap_or(DEFAULT_TIMEOUT);
        positive("--timeout", timeout)?;

        let method = args.method.as_deref().unwrap_or("GET").to_ascii_uppercase();
        if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(InputError::new("--method", format!("invalid method {method:?}")));
        }
        let headers = args.headers.iter().map(|h| parse_header(h)).collect::<Result<Vec<_>, _>>()?;

        Ok(Spec {
            target,
            requests: vec![RequestSpec {
                name: format!("{method} {}", args.url.as_deref().map(url_path).unwrap_or("/")),
                path: None,
                weight: 1,
                method,
                headers,
                body: args.body.clone().map(String::into_bytes),
            }],
            keepalive: !args.no_keepalive,
            profile,
            warmup,
            connections,
            threads: args.threads,
            timeout,
            wake_window: args.wake_window.as_deref().map(|d| parse_duration("--wake-window", d)).transpose()?,
            probes: !args.no_probes,
            out: args.out.clone(),
            plain: args.plain,
        })
    }
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
        assert!(matches!(s.profile, Profile::Step { ref rates, .. } if rates.len() == 4));
        assert_eq!(s.warmup, Duration::from_secs(2));
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
                a.profile = Some("step".into());
                a.steps = Some(vec![100.0, 0.0]);
            }))
            .starts_with("--steps:")
        );
    }

    #[test]
    fn headers_are_split_and_trimmed() {
        let s = Spec::from_run_args(&args(|a| a.headers = vec!["X-Test:  yes ".into()])).unwrap();
        assert_eq!(s.requests[0].headers, vec![("X-Test".to_string(), "yes".to_string())]);
    }
}
