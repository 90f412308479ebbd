//! Fuzz the scenario path of `loader run`: a scenario file → [`Spec::from_run_args`] (read,
//! TOML, flags laid over it, validated) → [`Plan::resolve`], the calls `run` makes.
//!
//! Input: the file's bytes, written to a temporary file so the real reading path (size
//! limit, UTF-8 check) runs too. A first line `#! FLAGS…` (a TOML comment) is also given
//! to `loader run` as its command line, so flags and file are merged as in a real run; a
//! command line clap rejects leaves the file alone with no flags.
//!
//! Kept off the network and the file system: `--cacert`, `--data`, `--proto` and
//! `--proto-path` are dropped (they name files to read; a scenario's `[data]` file and
//! `[grpc]` .proto files are read bounded, and only regular files); a gRPC method left
//! without .proto files would ask the server's reflection, which `run` does between the two
//! calls, not `Plan::resolve` (it refuses a method with no descriptor); and
//! a URL whose host is a name, not an address, is planned against 127.0.0.1 with the same
//! scheme, port and path (resolving a name would ask DNS).
//!
//! Checked: no panic; an error says something; a plan keeps the promises `Plan` documents —
//! phases back to back from zero with finite rates in range, at least one shard and no
//! more shards than connections, the pool split over the shards without loss, and every
//! request encoded as one well-formed HTTP/1.1 request (method, path, headers, and the body
//! its `Content-Length` announces).

#![no_main]

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use clap::Parser as _;
use libfuzzer_sys::fuzz_target;
use loader::cli::{Cli, Command, RunArgs};
use loader::scenario::{Plan, Spec, Target};

/// Highest rate a plan may carry (docs/scenario.md: at most 10 000 000).
const MAX_RATE: f64 = 10_000_000.0;
/// The URL the built-in target would have (`run` starts it and plans against it).
const BUILT_IN: &str = "http://127.0.0.1:8080/";

static PATH: OnceLock<PathBuf> = OnceLock::new();

/// One scratch file per fuzzing process, removed after each input is read and, should
/// libFuzzer end the process between the two, when it exits.
fn scenario_path() -> &'static PathBuf {
    PATH.get_or_init(|| {
        extern "C" fn remove() {
            if let Some(path) = PATH.get() {
                let _ = std::fs::remove_file(path);
            }
        }
        // SAFETY: registers a plain function, run once at exit(3).
        unsafe { libc::atexit(remove) };
        let dir =
            if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        dir.join(format!("loader-fuzz-scenario-{}.toml", std::process::id()))
    })
}

/// `loader run`'s flags from a first line `#! FLAGS…`, or none.
fn flags(data: &[u8]) -> RunArgs {
    let Some(rest) = data.strip_prefix(b"#!") else {
        return RunArgs::default();
    };
    let line = rest.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let argv = ["loader", "run"].into_iter().chain(line.split_whitespace());
    match Cli::try_parse_from(argv) {
        Ok(Cli { command: Command::Run(args), .. }) => args,
        _ => RunArgs::default(),
    }
}

/// `url` with a host name replaced by 127.0.0.1 (an IP address stays), or `None` when it is
/// no URL `Plan::resolve` could accept anyway.
fn offline(url: &str) -> Option<String> {
    let uri: http::Uri = url.parse().ok()?;
    let authority = uri.authority()?;
    let host = authority.host().trim_start_matches('[').trim_end_matches(']');
    if host.parse::<IpAddr>().is_ok() {
        return Some(url.to_string());
    }
    let port = authority.port().map(|p| format!(":{p}")).unwrap_or_default();
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    Some(format!("{}://127.0.0.1{port}{path}", uri.scheme_str()?))
}

fn check_plan(plan: &Plan) {
    assert!(!plan.phases.is_empty(), "a plan without phases");
    let mut at = Duration::ZERO;
    for phase in &plan.phases {
        assert_eq!(phase.start, at, "phase {:?} is not back to back: {:?}", phase.name, plan.phases);
        assert!(!phase.duration.is_zero(), "phase {:?} lasts zero", phase.name);
        for rate in [phase.rate, phase.start_rate, phase.end_rate] {
            assert!(rate.is_finite() && (0.0..=MAX_RATE).contains(&rate), "phase {:?} rate {rate}", phase.name);
        }
        let _ = phase.window();
        at += phase.duration;
    }
    assert_eq!(plan.duration(), at);
    assert!(plan.peak_rate() > 0.0, "a plan that sends nothing: {:?}", plan.phases);
    let _ = plan.pace();
    assert!(
        plan.threads >= 1 && plan.threads <= plan.connections,
        "{} threads, {} connections",
        plan.threads,
        plan.connections
    );
    let pooled: usize = (0..plan.threads).map(|shard| plan.connections_of(shard)).sum();
    assert_eq!(pooled, plan.connections, "the pool split over {} shards", plan.threads);
    assert!(!plan.requests.is_empty(), "a plan without requests");
    for request in &plan.requests {
        assert!(request.weight >= 1);
        check_request(&request.bytes);
    }
}

/// One complete HTTP/1.1 request: a head httparse accepts, then exactly the body it announces.
fn check_request(bytes: &[u8]) {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    let head = match req.parse(bytes) {
        Ok(httparse::Status::Complete(n)) => n,
        other => {
            panic!("planned request is not a complete HTTP/1.1 head ({other:?}): {:?}", String::from_utf8_lossy(bytes))
        }
    };
    // loader adds Content-Length to a body (a user's own header is theirs to get right).
    let announced = req.headers.iter().any(|h| h.name.eq_ignore_ascii_case("content-length"));
    assert!(announced || head == bytes.len(), "a body without Content-Length: {:?}", String::from_utf8_lossy(bytes));
}

fuzz_target!(|data: &[u8]| {
    let mut args = flags(data);
    args.cacert = None;
    args.data = None;
    args.protos.clear();
    args.proto_paths.clear();
    let path = scenario_path();
    std::fs::write(path, data).expect("write the scenario file");
    args.scenario = Some(path.clone());
    let spec = Spec::from_run_args(&args);
    let _ = std::fs::remove_file(path);
    let spec = match spec {
        Ok(spec) => spec,
        Err(err) => {
            assert!(!err.key.is_empty() && !err.problem.is_empty(), "an error that says nothing: {err:?}");
            return;
        }
    };
    let url = match &spec.target {
        Target::Url(url) => offline(url),
        Target::BuiltIn => Some(BUILT_IN.to_string()),
    };
    let Some(url) = url else { return };
    if let Ok(plan) = Plan::resolve(&spec, &url) {
        check_plan(&plan);
    }
});
