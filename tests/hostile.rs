//! `loader run` against a hostile HTTP/1.1 server (`hostile_server.py`, one misbehaviour per
//! request path) on 127.0.0.1: the run must survive every one of them.
//!
//! For every mode, whatever the server does:
//! - the loader exits by itself within its wall-clock bound (no hang), with 0, 3 or 4 — never
//!   1, a signal, a panic or an abort — and writes `summary.json`;
//! - accounting is exact: every phase has `requests == ok + Σ errors`, and the plan
//!   (rate × duration) is all there;
//! - every error class that occurred is explained in `errors_detail`: messages whose counts
//!   add up to the class's total;
//! - the mode's own expectation holds (its row in [`MODES`]): how its requests may end,
//!   which outcomes must actually be seen, and for header bombs that they fail *fast*.
//!
//! Each failing test lists every violated expectation at once, plus a description of the
//! run (exit, counts, classes, send lag, loader stderr). Runs are short (2 s at ≤ 100 req/s)
//! and need no root (`--no-probes`).

use loader_tests::common;
use loader_tests::hostile;

use std::time::Duration;

use hostile::{HostileServer, Run};

/// Error classes a phase may report (`phases[].errors` keys).
const KNOWN_CLASSES: &[&str] = &[
    "http_429",
    "http_4xx",
    "http_5xx",
    "http_other",
    "timeout",
    "connect",
    "reset",
    "protocol",
    "io_error",
    "stream_reset",
    "connection_error",
    "grpc",
    "dropped",
    "aborted",
    "unsent",
];

/// `ends_in` entry meaning "answered with 2xx/3xx" (the phase's `ok` count).
const OK: &str = "ok";

/// Any outcome, as long as it is counted (accounting-only modes).
const ANY: &[&str] = &[
    OK,
    "http_429",
    "http_4xx",
    "http_5xx",
    "http_other",
    "timeout",
    "connect",
    "reset",
    "protocol",
    "io_error",
    "stream_reset",
    "connection_error",
    "dropped",
    "aborted",
    "unsent",
];

/// The connection broke under the response (clean close or reset mid-way): one of the
/// transport classes, never `ok`.
const CUT_SHORT: &[&str] = &["reset", "io_error", "protocol"];

/// Most distinct messages per class in `errors_detail`: 8, then up to 8 groups' overflow
/// ("NOT_FOUND: (other messages)"), then one "(other messages)".
const MAX_DETAIL_ENTRIES: usize = 17;

/// Largest send-lag p99 for a mode that must fail fast: the loader must not spend its time
/// chewing on a bad response while the schedule waits.
const FAST_LAG_P99_MS: f64 = 50.0;

/// Slack on top of duration + timeout before a run counts as hung (a debug build on a
/// shared 2-core machine).
const MARGIN: Duration = Duration::from_secs(20);

/// One misbehaviour and what the loader must make of it.
#[derive(Debug, Clone, Copy)]
struct Mode {
    /// Request path; the server picks its misbehaviour by it.
    path: &'static str,
    /// Requests per second, duration (s), client timeout (ms), connections.
    rate: u64,
    duration_s: u64,
    timeout_ms: u64,
    connections: u64,
    /// How every request may end: [`OK`] and/or error classes. Anything else is a failure.
    ends_in: &'static [&'static str],
    /// Outcomes that must actually occur (non-zero).
    must_see: &'static [&'static str],
    /// Fails on the response header limit: class `protocol`, a message naming the limit,
    /// and fast (every request sent, send lag p99 < [`FAST_LAG_P99_MS`]).
    header_limit: bool,
    /// Anything the row cannot say.
    extra: Option<fn(&Run, &HostileServer, &mut Vec<String>)>,
}

/// 100 req/s for 2 s over 4 connections, 1 s timeout: a request fails or succeeds well
/// inside the run, and the pool never runs dry unless the loader hangs on to connections.
const BASE: Mode = Mode {
    path: "",
    rate: 100,
    duration_s: 2,
    timeout_ms: 1000,
    connections: 4,
    ends_in: ANY,
    must_see: &[],
    header_limit: false,
    extra: None,
};

/// Modes where each request holds its connection until the client timeout: few requests,
/// a connection each, a short timeout — so they end as `timeout`, not as `dropped` for want
/// of a free connection.
const SLOW: Mode = Mode { rate: 10, timeout_ms: 500, connections: 16, ..BASE };

const MODES: &[Mode] = &[
    // The control case: if this fails, nothing else means anything.
    Mode { path: "/ok", ends_in: &[OK], must_see: &[OK], extra: Some(server_saw_every_request), ..BASE },
    // Transport failures.
    Mode { path: "/reset", ends_in: &["reset"], must_see: &["reset"], ..BASE },
    Mode { path: "/reset-mid", ends_in: &["reset"], must_see: &["reset"], ..BASE },
    Mode { path: "/half", ends_in: CUT_SHORT, ..BASE },
    Mode { path: "/half-head", ends_in: CUT_SHORT, ..BASE },
    Mode { path: "/close", ends_in: CUT_SHORT, ..BASE },
    Mode { path: "/idle-close", ends_in: ANY, must_see: &[OK], ..BASE },
    // The keep-alive race made certain: a reused connection is closed under a request
    // before any byte of its response. The engine sends such a request again, once, on a
    // fresh connection — so every request still succeeds.
    Mode {
        path: "/close-on-reuse",
        ends_in: &[OK],
        must_see: &[OK],
        extra: Some(retried_on_fresh_connections),
        ..BASE
    },
    // The same race seen as RST rather than FIN: a retry is as justified, a reset is
    // defensible; either way counted.
    Mode { path: "/rst-on-reuse", ends_in: &[OK, "reset"], must_see: &[OK], ..BASE },
    // Nothing (useful) ever arrives: the client timeout must end each request.
    Mode { path: "/silent", ends_in: &["timeout"], must_see: &["timeout"], ..SLOW },
    Mode { path: "/slow-body", ends_in: &["timeout"], must_see: &["timeout"], ..SLOW },
    Mode { path: "/slow-head", ends_in: &["timeout"], must_see: &["timeout"], ..SLOW },
    Mode { path: "/endless-1xx", ends_in: &["timeout"], must_see: &["timeout"], ..SLOW },
    // Not HTTP, or HTTP with broken framing.
    Mode { path: "/garbage", ends_in: &["protocol"], must_see: &["protocol"], ..BASE },
    Mode { path: "/bad-status", ends_in: &["protocol"], must_see: &["protocol"], ..BASE },
    Mode { path: "/dup-cl", ends_in: &["protocol"], must_see: &["protocol"], ..BASE },
    Mode { path: "/neg-cl", ends_in: &["protocol"], must_see: &["protocol"], ..BASE },
    Mode { path: "/huge-cl", ends_in: &["protocol"], must_see: &["protocol"], ..BASE },
    Mode { path: "/bad-chunk", ends_in: &["protocol"], must_see: &["protocol"], ..BASE },
    // Both Content-Length and chunked: RFC 9112 lets chunked win, or the client may refuse;
    // either way it must be counted.
    Mode { path: "/cl-te", ends_in: &[OK, "protocol"], ..BASE },
    // An unasked-for 101 is not a success, and certainly not a server error.
    Mode { path: "/switching", ends_in: &["http_other", "protocol"], ..BASE },
    // Header bombs: refused at the limit, at once.
    Mode { path: "/many-headers", ends_in: &["protocol"], must_see: &["protocol"], header_limit: true, ..BASE },
    Mode { path: "/huge-header", ends_in: &["protocol"], must_see: &["protocol"], header_limit: true, ..BASE },
    // Legal but unusual: all must succeed.
    Mode {
        path: "/big-body",
        rate: 5,
        timeout_ms: 10_000,
        ends_in: &[OK],
        must_see: &[OK],
        extra: Some(finishes_promptly),
        ..BASE
    },
    Mode { path: "/close-delimited", ends_in: &[OK], must_see: &[OK], ..BASE },
    Mode { path: "/http10", ends_in: &[OK], must_see: &[OK], ..BASE },
    Mode { path: "/lf-only", ends_in: &[OK], must_see: &[OK], ..BASE },
    Mode { path: "/1xx", ends_in: &[OK], must_see: &[OK], ..BASE },
    Mode { path: "/trailers", ends_in: &[OK], must_see: &[OK], ..BASE },
    // The same response 3 bytes per write: heads, chunk sizes and trailers split anywhere.
    Mode { path: "/dribble", rate: 50, connections: 16, ends_in: &[OK], must_see: &[OK], ..BASE },
    // Extra, unsolicited bytes after a response: never mistaken for a success of another
    // kind, always counted.
    Mode { path: "/desync", ends_in: &[OK, "protocol", "reset", "io_error"], must_see: &[OK], ..BASE },
    // Every status lands in its class; 600 and 999 are not server errors.
    Mode {
        path: "/status-mix",
        ends_in: &[OK, "http_4xx", "http_429", "http_5xx", "http_other"],
        must_see: &[OK, "http_4xx", "http_429", "http_5xx", "http_other"],
        extra: Some(statuses_match_the_server),
        ..BASE
    },
];

/// Start a fresh server, run the loader against `path`, and check everything.
fn check(path: &str) {
    let mode = *MODES.iter().find(|m| m.path == path).unwrap_or_else(|| panic!("no row for {path} in MODES"));
    let name = format!("hostile{}", path.replace('/', "-"));
    let out = common::out_dir(&name);
    let server = HostileServer::start(&out);
    let url = server.url(mode.path);
    let (rate, duration, timeout, connections) = (
        mode.rate.to_string(),
        format!("{}s", mode.duration_s),
        format!("{}ms", mode.timeout_ms),
        mode.connections.to_string(),
    );
    let limit = Duration::from_secs(mode.duration_s) + Duration::from_millis(mode.timeout_ms) + MARGIN;
    let args = [
        "--url",
        url.as_str(),
        "--rate",
        rate.as_str(),
        "--duration",
        duration.as_str(),
        "--warmup",
        "0s",
        "--connections",
        connections.as_str(),
        "--timeout",
        timeout.as_str(),
        "--no-probes",
    ];
    let run = Run::start(&args, &out, limit);
    // Kept in the test log (`--nocapture`) so a passing run still says what happened.
    eprintln!("{path}: {}", run.describe());

    let mut problems = Vec::new();
    survived(&run, &mut problems);
    if run.summary.is_some() {
        accounted(&run, &mode, &mut problems);
        explained(&run, &mut problems);
        behaved(&run, &mode, &mut problems);
        if let Some(extra) = mode.extra {
            extra(&run, &server, &mut problems);
        }
    }
    let server_stderr = server.stderr();
    if server_stderr.contains("Traceback") {
        problems.push(format!("the hostile server itself failed (not the loader's fault):\n{server_stderr}"));
    }
    assert!(
        problems.is_empty(),
        "{path}: {} problem(s):\n - {}\nrun: {}",
        problems.len(),
        problems.join("\n - "),
        run.describe()
    );
}

/// Exited by itself within the bound, with 0/3/4, no panic, and a summary.
fn survived(run: &Run, problems: &mut Vec<String>) {
    match run.output.status.code() {
        Some(0 | 3 | 4) => {}
        Some(code) => problems.push(format!("exit code {code}, want 0, 3 or 4")),
        None => problems.push(run.ending()),
    }
    let stderr = run.stderr();
    if stderr.contains("panicked") || stderr.contains("RUST_BACKTRACE") {
        problems.push("the loader panicked (see stderr)".into());
    }
    match &run.summary {
        None => problems.push("no summary.json written".into()),
        Some(s) if s["interrupted"] != false => problems.push(format!("interrupted = {}", s["interrupted"])),
        Some(_) => {}
    }
}

/// Every planned request is counted exactly once, as ok or in a known class.
fn accounted(run: &Run, mode: &Mode, problems: &mut Vec<String>) {
    for (phase, diff) in run.accounting() {
        if diff != 0 {
            problems.push(format!("phase {phase}: requests − (ok + Σ errors) = {diff}, want 0"));
        }
    }
    let planned = mode.rate * mode.duration_s;
    if run.total("requests") != planned {
        problems.push(format!("{} requests in the phases, the plan has {planned}", run.total("requests")));
    }
    // A request is sent at most once as far as `sent` goes: a retry on a fresh connection
    // is counted in `run.retried_on_stale_connection`, not as another planned send (else
    // sent/s would exceed the offered rate).
    for p in run.phases() {
        let (requests, sent) = (p["requests"].as_u64().unwrap_or(0), p["sent"].as_u64().unwrap_or(0));
        if sent > requests {
            problems.push(format!("phase {}: sent {sent} > requests {requests}", p["name"]));
        }
    }
    for (class, n) in run.classes_seen() {
        if !KNOWN_CLASSES.contains(&class.as_str()) {
            problems.push(format!("unknown error class {class:?} ({n})"));
        }
    }
}

/// `errors_detail[class]` lists messages whose counts add up to each class's total.
fn explained(run: &Run, problems: &mut Vec<String>) {
    let seen = run.classes_seen();
    let summary = run.summary.as_ref().expect("caller checked");
    let Some(detail) = summary.get("errors_detail") else {
        if !seen.is_empty() {
            problems.push(format!("no errors_detail in summary.json, but errors occurred: {seen:?}"));
        }
        return;
    };
    for (class, total) in &seen {
        let Some(entries) = detail[class].as_array().filter(|a| !a.is_empty()) else {
            problems.push(format!("errors_detail has no messages for {class} ({total} errors)"));
            continue;
        };
        if entries.len() > MAX_DETAIL_ENTRIES {
            problems.push(format!("errors_detail.{class}: {} entries, want ≤ {MAX_DETAIL_ENTRIES}", entries.len()));
        }
        let mut sum = 0;
        for e in entries {
            let message = e["message"].as_str().unwrap_or("");
            let count = e["count"].as_u64().unwrap_or(0);
            if message.trim().is_empty() || count == 0 {
                problems.push(format!("errors_detail.{class}: bad entry {e} (want a message and a count > 0)"));
            }
            sum += count;
        }
        if sum != *total {
            problems.push(format!("errors_detail.{class}: counts add up to {sum}, the phases have {total}"));
        }
    }
    for (class, entries) in detail.as_object().into_iter().flatten() {
        let listed = entries.as_array().is_some_and(|a| !a.is_empty());
        if listed && !seen.iter().any(|(c, _)| c == class) {
            problems.push(format!("errors_detail lists {class}, which has no errors"));
        }
    }
}

/// The mode's own row: allowed and required outcomes, header-limit failures.
fn behaved(run: &Run, mode: &Mode, problems: &mut Vec<String>) {
    let ok = run.total("ok");
    if ok > 0 && !mode.ends_in.contains(&OK) {
        problems.push(format!("{ok} requests ok, want none (allowed: {:?})", mode.ends_in));
    }
    for (class, n) in run.classes_seen() {
        if !mode.ends_in.contains(&class.as_str()) {
            problems.push(format!("{n} requests ended as {class}, allowed: {:?}", mode.ends_in));
        }
    }
    for &want in mode.must_see {
        let n = if want == OK { ok } else { run.errors(want) };
        if n == 0 {
            problems.push(format!("no request ended as {want}"));
        }
    }
    if mode.header_limit {
        fails_fast(run, problems);
        let summary = run.summary.as_ref().expect("caller checked");
        let messages: Vec<&str> = summary["errors_detail"]["protocol"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e["message"].as_str())
            .collect();
        if !messages.iter().any(|m| mentions_header_limit(m)) {
            problems.push(format!("no protocol message names the header limit: {messages:?}"));
        }
    }
}

/// A refused response costs the schedule nothing: every planned request was sent, on time.
fn fails_fast(run: &Run, problems: &mut Vec<String>) {
    for p in run.phases() {
        let (requests, sent) = (p["requests"].as_u64().unwrap_or(0), p["sent"].as_u64().unwrap_or(0));
        if sent != requests {
            problems.push(format!("phase {}: sent {sent} of {requests} requests (want all: fail fast)", p["name"]));
        }
        let lag = p["send_lag_ms"]["p99"].as_f64().unwrap_or(f64::INFINITY);
        if lag >= FAST_LAG_P99_MS {
            problems.push(format!("phase {}: send lag p99 {lag} ms, want < {FAST_LAG_P99_MS} ms", p["name"]));
        }
    }
}

/// "…header…" together with the limit: a number, or words saying a limit was passed.
fn mentions_header_limit(message: &str) -> bool {
    let m = message.to_lowercase();
    m.contains("head")
        && (m.contains("limit")
            || m.contains("too many")
            || m.contains("too large")
            || m.contains("larger than")
            || m.chars().any(|c| c.is_ascii_digit()))
}

/// `/ok`: the server answered exactly the requests the loader says it sent.
fn server_saw_every_request(run: &Run, server: &HostileServer, problems: &mut Vec<String>) {
    let served = server.stats()["requests"]["/ok"].as_u64().unwrap_or(0);
    let sent = run.total("sent");
    if served != sent {
        problems.push(format!("server answered {served} requests, loader sent {sent}"));
    }
}

/// `/close-on-reuse`: the stale-connection retry did the work.
fn retried_on_fresh_connections(run: &Run, _: &HostileServer, problems: &mut Vec<String>) {
    let retried = run.summary.as_ref().and_then(|s| s["run"]["retried_on_stale_connection"].as_u64()).unwrap_or(0);
    if retried == 0 {
        problems.push("run.retried_on_stale_connection is 0: no request was sent again".into());
    }
}

/// `/status-mix`: each class holds exactly the statuses the server sent for it.
fn statuses_match_the_server(run: &Run, server: &HostileServer, problems: &mut Vec<String>) {
    let stats = server.stats();
    let sent = |codes: &[&str]| -> u64 { codes.iter().map(|c| stats["statuses"][*c].as_u64().unwrap_or(0)).sum() };
    let expected = [
        (OK, sent(&["200", "204", "301"])),
        ("http_4xx", sent(&["404"])),
        ("http_429", sent(&["429"])),
        ("http_5xx", sent(&["500", "503"])),
        ("http_other", sent(&["600", "999"])),
    ];
    for (class, want) in expected {
        let got = if class == OK { run.total("ok") } else { run.errors(class) };
        if got != want {
            problems.push(format!("{class}: {got}, the server sent {want} such statuses ({})", stats["statuses"]));
        }
    }
}

/// `/big-body`: 64 MiB bodies take well under a second each on loopback, so the run ends
/// soon after its schedule, not at some timeout.
fn finishes_promptly(run: &Run, _: &HostileServer, problems: &mut Vec<String>) {
    let elapsed = run.summary.as_ref().and_then(|s| s["run"]["elapsed_s"].as_f64()).unwrap_or(f64::INFINITY);
    let planned: f64 = run.phases().iter().filter_map(|p| p["duration_s"].as_f64()).sum();
    let bound = planned + 3.0;
    if elapsed > bound {
        problems.push(format!("run.elapsed_s {elapsed}, want ≤ {bound}"));
    }
}

/// One `#[test]` per mode, named after it; `every_mode_has_a_test` keeps the two lists in step.
macro_rules! hostile_tests {
    ($($test:ident => $path:literal),* $(,)?) => {
        const TESTED: &[&str] = &[$($path),*];
        $(#[test] fn $test() { check($path) })*
    };
}

hostile_tests! {
    ok => "/ok",
    reset => "/reset",
    reset_mid => "/reset-mid",
    half => "/half",
    half_head => "/half-head",
    close => "/close",
    idle_close => "/idle-close",
    close_on_reuse => "/close-on-reuse",
    rst_on_reuse => "/rst-on-reuse",
    silent => "/silent",
    slow_body => "/slow-body",
    slow_head => "/slow-head",
    endless_1xx => "/endless-1xx",
    garbage => "/garbage",
    bad_status => "/bad-status",
    dup_cl => "/dup-cl",
    neg_cl => "/neg-cl",
    huge_cl => "/huge-cl",
    bad_chunk => "/bad-chunk",
    cl_te => "/cl-te",
    switching => "/switching",
    many_headers => "/many-headers",
    huge_header => "/huge-header",
    big_body => "/big-body",
    close_delimited => "/close-delimited",
    http10 => "/http10",
    lf_only => "/lf-only",
    interim_1xx => "/1xx",
    trailers => "/trailers",
    dribble => "/dribble",
    desync => "/desync",
    status_mix => "/status-mix",
}

#[test]
fn every_mode_has_a_test() {
    for mode in MODES {
        assert!(TESTED.contains(&mode.path), "{} has a row in MODES but no test", mode.path);
    }
    for path in TESTED {
        assert!(MODES.iter().any(|m| m.path == *path), "{path} has a test but no row in MODES");
    }
}
