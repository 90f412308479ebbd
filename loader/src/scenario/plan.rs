//! [`Plan`]: a [`Spec`] with everything resolved — address, encoded request, phase windows.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use hyper::Uri;

use super::spec::{Profile, RequestSpec, Spec};
use crate::error::InputError;
use crate::schedule::Window;

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

/// One phase of the run: a window at one rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    /// Human name (`warmup`, `main`, `step 3`).
    pub name: String,
    /// What it is for.
    pub kind: PhaseKind,
    /// Offset from the run's start.
    pub start: Duration,
    /// Length.
    pub duration: Duration,
    /// Requests per second.
    pub rate: f64,
}

impl Phase {
    /// The schedule window of this phase.
    pub fn window(&self) -> Window {
        Window {
            start_ns: self.start.as_nanos() as u64,
            end_ns: (self.start + self.duration).as_nanos() as u64,
            rate: self.rate,
        }
    }
}

/// The resolved target.
#[derive(Debug, Clone)]
pub struct TargetAddr {
    /// The URL as given.
    pub url: String,
    /// Socket address connections go to.
    pub addr: SocketAddr,
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
    /// Share of the mix.
    pub weight: u32,
}

/// A run with every value resolved.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Where the load goes.
    pub target: TargetAddr,
    /// The requests, each encoded once as HTTP/1.1 bytes.
    pub requests: Vec<PlannedRequest>,
    /// Reuse connections.
    pub keepalive: bool,
    /// Phases in time order, back to back from offset zero.
    pub phases: Vec<Phase>,
    /// Keep-alive connections across all shards.
    pub connections: usize,
    /// Shard threads.
    pub threads: usize,
    /// Client timeout per request.
    pub timeout: Duration,
    /// Wake-up window override.
    pub wake_window: Option<Duration>,
    /// Load the eBPF probes.
    pub probes: bool,
    /// Output directory.
    pub out: Option<PathBuf>,
    /// Line-per-second progress.
    pub plain: bool,
}

impl Plan {
    /// Resolve `spec` against `url` (the user's, or the built-in target's).
    pub fn resolve(spec: &Spec, url: &str) -> Result<Plan, InputError> {
        let (addr, host, path) = resolve_url(url)?;
        let requests = spec
            .requests
            .iter()
            .map(|r| PlannedRequest {
                name: r.name.clone(),
                bytes: encode_request(r, &host, r.path.as_deref().unwrap_or(&path)),
                head: r.method == "HEAD",
                weight: r.weight.max(1),
            })
            .collect();
        let phases = phases(spec);
        let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        // Every shard needs at least one connection of its own.
        let threads = spec.threads.unwrap_or(cpus).min(spec.connections);
        Ok(Plan {
            target: TargetAddr { url: url.to_string(), addr },
            requests,
            keepalive: spec.keepalive,
            phases,
            connections: spec.connections,
            threads,
            timeout: spec.timeout,
            wake_window: spec.wake_window,
            probes: spec.probes,
            out: spec.out.clone(),
            plain: spec.plain,
        })
    }

    /// Total planned length of the run.
    pub fn duration(&self) -> Duration {
        self.phases.last().map(|p| p.start + p.duration).unwrap_or_default()
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

fn phases(spec: &Spec) -> Vec<Phase> {
    let holds: Vec<(String, f64, Duration)> = match &spec.profile {
        Profile::Constant { rate, duration } => vec![("main".to_string(), *rate, *duration)],
        Profile::Step { rates, hold } => {
            rates.iter().enumerate().map(|(i, &r)| (format!("step {}", i + 1), r, *hold)).collect()
        }
    };
    let mut out = Vec::with_capacity(holds.len() + 1);
    let mut at = Duration::ZERO;
    if !spec.warmup.is_zero() {
        let rate = holds[0].1;
        out.push(Phase { name: "warmup".into(), kind: PhaseKind::Warmup, start: at, duration: spec.warmup, rate });
        at += spec.warmup;
    }
    for (name, rate, duration) in holds {
        out.push(Phase { name, kind: PhaseKind::Hold, start: at, duration, rate });
        at += duration;
    }
    out
}

fn resolve_url(url: &str) -> Result<(SocketAddr, String, String), InputError> {
    let bad = |problem: String| InputError::new("--url", problem);
    let uri: Uri = url.parse().map_err(|e| bad(format!("{url:?} is not a URL ({e})")))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => return Err(bad("https is not supported yet (plain http only)".into())),
        Some(other) => return Err(bad(format!("unsupported scheme {other:?}; expected http"))),
        None => return Err(bad(format!("{url:?} has no scheme; write http://host:port/path"))),
    }
    let authority = uri.authority().ok_or_else(|| bad(format!("{url:?} has no host")))?;
    let host = authority.host();
    let port = authority.port_u16().unwrap_or(80);
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addr = (bare, port)
        .to_socket_addrs()
        .map_err(|e| bad(format!("cannot resolve {host}: {e}")))?
        .next()
        .ok_or_else(|| bad(format!("{host} resolves to no address")))?;
    let path = uri.path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| "/".into());
    Ok((addr, authority.as_str().to_string(), path))
}

fn encode_request(r: &RequestSpec, host: &str, path: &str) -> Vec<u8> {
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
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::RunArgs;

    fn plan(f: impl FnOnce(&mut RunArgs)) -> Result<Plan, InputError> {
        let mut a =
            RunArgs { url: Some("http://127.0.0.1:8080/x?y=1".into()), rate: Some(100.0), ..Default::default() };
        f(&mut a);
        let spec = Spec::from_run_args(&a)?;
        let url = a.url.clone().unwrap();
        Plan::resolve(&spec, &url)
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
        p.requests = [5, 1, 1]
            .iter()
            .map(|&weight| PlannedRequest { weight, ..template.clone() })
            .collect();
        let mix = p.mix();
        assert_eq!(mix.len(), 7);
        assert_eq!(mix.iter().filter(|&&i| i == 0).count(), 5);
        // nginx's smooth order for 5:1:1 spreads the light requests apart.
        assert_eq!(mix, vec![0, 0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn warmup_then_steps_back_to_back() {
        let p = plan(|a| {
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
        for url in ["127.0.0.1:80", "ftp://x/", "https://127.0.0.1/", "http://"] {
            let e = plan(|a| a.url = Some(url.into())).unwrap_err();
            assert_eq!(e.key, "--url", "{url}: {e}");
        }
    }
}
