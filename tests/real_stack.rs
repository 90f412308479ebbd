//! Issue 46, item 6: a real stack stepped past collapse. nginx → PHP-FPM 8.2 → PostgreSQL 15
//! from Debian's packages (tests/harness/stack.rs), all on CPU 1, the loader on CPU 0; three
//! endpoints whose ceiling is known — a pool of sleeping workers, php-fpm's CPU, and one core
//! shared by php-fpm and PostgreSQL — each stepped from half its capacity to four times it at
//! the default 5 s timeout, with the emergency stop on (the default) and off. And finding 1:
//! the built-in target of 200 req/s stepped to 1,200.
//!
//! What each run must show (the acceptance):
//! - the knee — by the SLO, by throughput and by the adaptive rule (when it fires) — within one
//!   step of the capacity measured before the run (the sleep's is also workers ÷ sleep; a
//!   measured one may also be what the target served once saturated in the run, within 30 % of
//!   it), and a cliff above it;
//! - a run that fails a check while the VM's host stole CPU, or whose capacity wrk measured,
//!   is made once more (the capacity measured again) and the second is judged whatever it says;
//! - every step up to the knee trusted (per-step trust, `verdict.steps[]`), and no invalidating
//!   reason on the loader's side: the collapse is the target's, and on its own idle core the
//!   loader has nothing else to answer for;
//! - the resource that limited it named by `--watch`: the pool; php-fpm's CPU; the shared core;
//! - Little's law never "disagreeing" when the answers time out; `connection_churn` saying
//!   who closed; the emergency stop, when it fires, the target's cliff and not the loader's.
//!
//! Every check of a run is made and printed before the test fails, with the run's step table
//! (also appended to `target/tmp/real-stack.txt`), so one run shows everything that is wrong.
//! Needs root (probes, `postgres` user); skips with the reason otherwise, never under CI.
//! Traffic stays on 127.0.0.1; every run and wait is bounded; the tests run one at a time.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::{Duration, Instant};

use loader_tests::common;
use loader_tests::matrix::{self, Outcome, Run, on_target_cpu};
use loader_tests::stack::{self, Stack, StackSpec};
use serde_json::Value;

/// The steps, as multiples of the capacity: two clean, one just under, one just over, then
/// collapse (at 4× the 5 s timeouts dominate within a second of the step).
const FACTORS: [f64; 6] = [0.5, 0.75, 0.9, 1.1, 2.0, 4.0];
/// Every step's hold; the warm-up before them.
const HOLD: &str = "5s";
const WARMUP: &str = "2s";
const SLO_P99: &str = "500ms";
const CONNECTIONS: &str = "256";
/// How far above a capacity known by construction a step's ok/s may read ([`Case::ceiling`]).
const EXACT: Option<f64> = Some(1.1);
const MEASURED: Option<f64> = None;

/// The sleeping endpoint: 8 workers of 40 ms, 200 req/s.
const SLEEP_WORKERS: u32 = 8;
const SLEEP_MS: u32 = 40;
/// The CPU-bound endpoint: 6–7 ms of php-fpm's CPU a request here (wrk: 118–154 req/s on the
/// shared 2-core VM, 142–154 when its neighbours were quiet).
const CPU_PATH: &str = "/cpu.php?rounds=50000";
/// The database endpoint: PostgreSQL about 60 % of the request's CPU, php-fpm 35 %, nginx
/// the rest (wrk: 230–340 req/s on the shared VM; PostgreSQL's CPU a request varied 1.3–2.3 ms).
const DB_PATH: &str = "/db.php?rounds=20";

/// One stepped run's settings and what it must find.
#[derive(Clone)]
struct Case<'a> {
    name: &'a str,
    url: String,
    /// The capacity it is judged against, req/s.
    capacity: f64,
    /// No step's ok/s may exceed this multiple of it — where the capacity is known by
    /// construction (workers ÷ service time). A capacity wrk measured on a shared VM varied
    /// by ±15 % between runs here (neighbours' CPU, the host's steal): not checked then.
    ceiling: Option<f64>,
    steps: Vec<f64>,
    emergency_stop: bool,
    watch: Vec<String>,
    /// The watched source that must explain the knee (`None`: not judged).
    resource: Option<(&'a str, &'a str)>,
}

/// The checks one run failed, each a line naming what it expected and what it got.
#[derive(Default)]
struct Failed(Vec<String>);

impl Failed {
    fn expect(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.0.push(what());
        }
    }
}

fn steps_at(capacity: f64) -> Vec<f64> {
    FACTORS.iter().map(|f| (f * capacity).round().max(1.0)).collect()
}

fn list(steps: &[f64]) -> String {
    steps.iter().map(|s| format!("{s:.0}")).collect::<Vec<_>>().join(",")
}

/// Run `case` (loader on CPU 0), check it, print its table. Returns the failed checks.
/// `settle` waits for the target to work off what the collapse queued (before a second
/// attempt: one started into php-fpm's backlog saw every request time out from its first
/// step); `remeasure` measures the capacity again (a capacity wrk measured, not one known by
/// construction).
fn run_case(case: &Case, settle: &dyn Fn(), remeasure: Option<&dyn Fn() -> f64>) -> Vec<String> {
    let mut again: Option<Case> = None;
    for attempt in 1..=2 {
        let case = again.as_ref().unwrap_or(case);
        let (failed, host) = run_once(case);
        if failed.is_empty() || attempt == 2 {
            return failed.into_iter().map(|f| format!("{}: {f}", case.name)).collect();
        }
        // Once more, judged whatever it says: the VM's host may explain what failed — it stole
        // the loader's or the stack's CPU during the run, moved the speed of a CPU whose
        // capacity wrk measured before the run (here: ±15 % between minutes), or woke the
        // loader's threads late with no steal to show for it (CI: sends 10 ms late with a
        // connection free at 8 % of a core). A fault of the loader's fails both runs.
        let knee_missed = failed.iter().any(|f| f.starts_with("knee"));
        let measured_again = remeasure.filter(|_| knee_missed);
        settle();
        let quiet = common::wait_for_a_quiet_host();
        let mut next = case.clone();
        if let Some(measure) = measured_again {
            let capacity = measure();
            // The host moves a CPU's speed by a sixth, not by half: a figure further off is a
            // bad measurement, and the first one stands.
            if (capacity / case.capacity - 1.0).abs() <= 0.5 {
                next.capacity = capacity;
                next.steps = steps_at(capacity);
            } else {
                eprintln!("{}: capacity measured again {capacity:.1}, kept {:.1}", case.name, case.capacity);
            }
        }
        eprintln!(
            "{}: {} check(s) failed ({}); once more at capacity {:.1} ({quiet} ms of steal in the last second waited)",
            case.name,
            failed.len(),
            host.unwrap_or_else(|| failed.join("; ")),
            next.capacity
        );
        again = Some(next);
    }
    unreachable!("the second attempt returns")
}

/// One run of `case`: the checks it failed, and what the VM's host did that may explain them
/// (`None`: nothing).
fn run_once(case: &Case) -> (Vec<String>, Option<String>) {
    let mut args: Vec<String> = [
        "--url",
        &case.url,
        "--profile",
        "step",
        "--steps",
        &list(&case.steps),
        "--hold",
        HOLD,
        "--warmup",
        WARMUP,
        "--slo-p99",
        SLO_P99,
        "--connections",
        CONNECTIONS,
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    if !case.emergency_stop {
        args.push("--no-emergency-stop".into());
    }
    for source in &case.watch {
        args.extend(["--watch".into(), source.clone()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = Instant::now();
    let outcome = Run::new(case.name).args(&args).limit(Duration::from_secs(150)).run();
    let took = started.elapsed();
    let failed = judge(case, &outcome);
    let table = describe(case, &outcome, took, &failed);
    eprintln!("{table}");
    let file = common::tmp_dir().join("real-stack.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&file) {
        let _ = writeln!(f, "{table}");
    }
    let host = outcome.summary.as_ref().and_then(|s| {
        let spoiled = common::spoiled_by_steal(s, &outcome.invalidating());
        let stolen = s["health"]["peaks"]["steal_ms"].as_f64().filter(|&ms| ms >= STEAL_EXPLAINS_MS);
        spoiled.or(stolen).map(|ms| format!("the host stole {ms:.0} ms of the CPUs during the run"))
    });
    (failed.0, host)
}

/// Steal during a run (all CPUs, ms) from which a failed check may be the host's doing: the
/// run is made once more. (Ticks of 10 ms: five of them, or one a 7-second stretch.)
const STEAL_EXPLAINS_MS: f64 = 50.0;

/// Whether `rps` is within one step of `capacity` among `steps`: the step it names at most
/// one from the last step at or below the capacity — the knee a perfect reading finds, the
/// ladder being the resolution. (An interpolated position was stricter than one step: the
/// shared core served 260 req/s at saturation, just above the 252 of step 2, and the knee at
/// step 1, 168, when step 2 kept 96.7 % of its offered rate, was called 1.16 steps off —
/// twice in a row, here and in CI.)
fn within_one_step(rps: f64, capacity: f64, steps: &[f64]) -> bool {
    let Some(k) = steps.iter().position(|&s| (s - rps).abs() < 0.5) else { return false };
    let at = steps.iter().rposition(|&s| s <= capacity).unwrap_or(0);
    k.abs_diff(at) <= 1
}

/// The steps (measured phases) in order.
fn steps_of(s: &Value) -> Vec<&Value> {
    s["phases"].as_array().map(|p| p.iter().filter(|p| p["kind"] != "warmup").collect()).unwrap_or_default()
}

/// A step's trust as the verdict judged it on its own evidence: `verdict.steps[]` (the
/// issue's per-step trust; an entry names its step by `step`, `name` or `phase`), else
/// `phases[].trusted`. `None` when the summary has neither (before issue 46's item 1).
fn step_trusted(s: &Value, step: &str) -> Option<bool> {
    let named = |e: &&Value| ["step", "name", "phase"].iter().any(|k| e[*k] == step);
    if let Some(entry) = s["verdict"]["steps"].as_array().and_then(|a| a.iter().find(named)) {
        return entry["trusted"].as_bool();
    }
    let phase = s["phases"].as_array()?.iter().find(|p| p["name"] == step)?;
    phase["trusted"].as_bool()
}

fn probes_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true") || std::env::var("LOADER_EBPF").is_ok_and(|v| v == "require")
}

fn judge(case: &Case, o: &Outcome) -> Failed {
    let mut f = Failed::default();
    let Some(s) = &o.summary else {
        f.0.push(format!("no summary.json\n{}", o.show()));
        return f;
    };
    f.expect(s["probes"]["available"] == true || !probes_required(), || {
        format!("probes unavailable as root: {}", s["probes"]["unavailable_reason"])
    });
    // Trusted numbers whose steps past the knee failed their SLO: exit 4.
    f.expect(o.code == Some(4), || format!("exit {:?}, want 4 (trusted; steps past the knee failed)", o.code));
    let steps = steps_of(s);

    // The knees, within one step of the capacity; the cliff above it.
    let knees = [
        ("knee (SLO)", &s["knee"]),
        ("knee (throughput)", &s["analysis"]["throughput_knee"]),
        ("knee (adaptive)", &s["analysis"]["adaptive_knee"]),
    ];
    // A capacity wrk measured is an estimate of a CPU's speed the minute before: the host moves
    // it (here the shared core served 230–250 req/s through a run right after wrk measured
    // 310–318). What the target served once saturated during the run — the best ok/s of the
    // steps that fell behind their offered rate — is the other estimate; the knees may stand
    // within one step of either, while the two agree within 30 %.
    let served = steps
        .iter()
        .filter_map(|p| Some((p["ok_rps"].as_f64()?, p["offered_rps"].as_f64()?)))
        .filter(|(ok, offered)| *ok < 0.97 * offered)
        .map(|(ok, _)| ok)
        .reduce(f64::max);
    let mut truths = vec![case.capacity];
    if case.ceiling.is_none()
        && let Some(served) = served
    {
        f.expect((served / case.capacity - 1.0).abs() <= 0.3, || {
            format!("served {served:.1} req/s at saturation, more than 30 % from wrk's {:.1}", case.capacity)
        });
        truths.push(served);
    }
    for (what, knee) in knees {
        let rps = knee["rps"].as_f64();
        // Seed 004's adaptive rule fires only where ok/s gains under 5 % while the p99 jumps
        // by a quarter: past a step that had not yet filled the target (ok/s still +7 % at
        // 2× here, the p99 already at the timeout) it may never fire. No knee by it is no
        // wrong knee; one it finds must be right.
        if what == "knee (adaptive)" && rps.is_none() {
            continue;
        }
        f.expect(rps.is_some_and(|r| truths.iter().any(|&t| within_one_step(r, t, &case.steps))), || {
            format!(
                "{what} {} not within one step of the capacity {:.0} req/s{}",
                show_point(knee),
                case.capacity,
                served.map_or(String::new(), |s| format!(" (served at saturation: {s:.0})"))
            )
        });
    }
    let lowest = truths.iter().copied().fold(f64::INFINITY, f64::min);
    f.expect(s["cliff"]["rps"].as_f64().is_some_and(|c| c > lowest), || {
        format!("cliff {} not above the capacity {:.0} req/s", show_point(&s["cliff"]), case.capacity)
    });

    // Trust: the steps up to the knee judged on their own evidence and trusted; nothing on the
    // loader's side invalidates, since the loader had its own idle core.
    // Up to the knee, and at least every step at or below the capacity.
    let knee_at = s["knee"]["step"].as_str().and_then(|k| steps.iter().position(|p| p["name"] == k));
    let below = case.steps.iter().rposition(|&r| r <= case.capacity);
    let judged_to = knee_at.max(below).unwrap_or(0).min(steps.len().saturating_sub(1));
    for p in steps.iter().take(judged_to + 1) {
        let name = p["name"].as_str().unwrap_or("?");
        match step_trusted(s, name) {
            Some(true) => {}
            Some(false) => f.0.push(format!("{name} (at or below the knee) untrusted")),
            None => f.0.push(format!("{name}: no per-step trust in the summary (verdict.steps[] or phases[].trusted)")),
        }
    }
    // The cliff is the collapse the run was meant to reach: the target's, never set aside as
    // the loader's.
    if let Some(cliff) = s["cliff"]["step"].as_str() {
        f.expect(step_trusted(s, cliff) != Some(false), || format!("the cliff ({cliff}) untrusted"));
    }
    // (The host's steal, named as such, is the VM's and not the collapse's.)
    let loader_side: Vec<String> = reasons(s)
        .filter(|r| r["invalidates"] == true && r["side"] == "loader" && !common::names_steal(r))
        .map(|r| format!("{}: {}", r["code"].as_str().unwrap_or("?"), r["detail"].as_str().unwrap_or("")))
        .collect();
    f.expect(loader_side.is_empty(), || {
        format!("the target's collapse invalidated on the loader's side: {}", loader_side.join(" | "))
    });
    // The conclusion stands: every step trusted, or the knee on the steps that were (a step
    // set aside past it by the host's steal changes nothing it concluded).
    f.expect(s["verdict"]["trusted"] == true || s["analysis"]["knee_on_trusted_steps"] == true, || {
        format!(
            "verdict trusted = {}, knee on trusted steps = {}",
            s["verdict"]["trusted"], s["analysis"]["knee_on_trusted_steps"]
        )
    });
    for p in &steps {
        let failed_on_trust = p["fail_reasons"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .any(|r| r.contains("loader untrusted"));
        f.expect(!failed_on_trust, || format!("{} failed as 'loader untrusted': {}", p["name"], p["fail_reasons"]));
    }

    // Every per-step figure stays meaningful when the answers time out or the stop cuts a
    // step short: no step answers faster than the target can. (A step's `ok` counts the
    // requests due in it that were answered, whenever; its ok/s the answers a second that
    // arrived in it: the two differ past the knee by design.)
    for p in &steps {
        let ok_rps = p["ok_rps"].as_f64().unwrap_or(0.0);
        f.expect(case.ceiling.is_none_or(|c| ok_rps <= c * case.capacity), || {
            format!(
                "{} ok/s {ok_rps:.1} above the capacity {:.0} (ok {} over {} s measured)",
                p["name"], case.capacity, p["ok"], p["measured_s"]
            )
        });
    }
    // Little's law holds when every answer timed out.
    for l in s["analysis"]["little"].as_array().into_iter().flatten() {
        let disagrees = l["findings"].as_array().into_iter().flatten().any(|x| x == "peak_below_mean");
        f.expect(!disagrees, || format!("Little's law 'accounting disagree' at {}: {l}", l["step"]));
    }
    let timeouts: u64 = steps.iter().filter_map(|p| p["errors"]["timeout"].as_u64()).sum();
    // Without the stop, the run must have gone where the 5 s timeouts are (with it, the stop
    // may well come first).
    f.expect(case.emergency_stop || timeouts > 0, || "no request timed out: the run never reached collapse".into());
    for r in reasons(s).filter(|r| r["code"] == "connection_churn") {
        let detail = r["detail"].as_str().unwrap_or("");
        f.expect(timeouts == 0 || detail.contains("timed out") || detail.contains("timeout"), || {
            format!("connection_churn does not say the loader closed on its {timeouts} timeouts: {detail}")
        });
    }

    // The emergency stop: fired on the target's cliff, never the loader's doing.
    let stop = &s["analysis"]["emergency_stop"];
    if case.emergency_stop {
        f.expect(stop.is_object(), || "the emergency stop did not fire past collapse".into());
        f.expect(stop["loader_behind"] != true, || format!("emergency stop blamed on the loader: {stop}"));
        for r in reasons(s).filter(|r| r["code"] == "emergency_stop") {
            let says_loader = r["detail"].as_str().is_some_and(|d| d.contains("the loader fell behind"));
            f.expect(says_loader == (stop["loader_behind"] == true), || {
                format!("emergency_stop reason and analysis.emergency_stop.loader_behind disagree: {r} vs {stop}")
            });
        }
    } else {
        f.expect(stop.is_null(), || format!("the emergency stop fired with --no-emergency-stop: {stop}"));
    }

    // The knee explained by the resource that limited it.
    if let Some((resource, why)) = case.resource {
        let watch = &s["watch"];
        f.expect(watch["knee_resource"] == resource, || {
            format!("watch named {} for the knee, want {resource} ({why}): {}", watch["knee_resource"], watch["knee"])
        });
    }
    f
}

fn reasons(s: &Value) -> impl Iterator<Item = &Value> {
    s["verdict"]["reasons"].as_array().into_iter().flatten()
}

fn show_point(p: &Value) -> String {
    match (p["rps"].as_f64(), p["step"].as_str()) {
        (Some(rps), Some(step)) => format!("{rps:.0} req/s ({step})"),
        _ => "none".into(),
    }
}

/// The run as the report needs it: its step table with the watched columns, knees, the watch
/// sentence, the verdict and what failed.
fn describe(case: &Case, o: &Outcome, took: Duration, failed: &Failed) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "REAL-STACK {} — capacity {:.0} req/s, steps {}, emergency stop {}, exit {:?}, {:.0} s, host load {:.2}",
        case.name,
        case.capacity,
        list(&case.steps),
        if case.emergency_stop { "on" } else { "off" },
        o.code,
        took.as_secs_f64(),
        o.load
    );
    let Some(s) = &o.summary else {
        let _ = writeln!(t, "  no summary.json\n{}", o.show());
        return t;
    };
    let sources: Vec<&str> =
        s["watch"]["sources"].as_array().into_iter().flatten().filter_map(|w| w["name"].as_str()).collect();
    let _ = write!(
        t,
        "  {:<7} {:>6} {:>7} {:>8} {:>8} {:>8} {:<5} {:<8}",
        "step", "rate", "ok/s", "p99 ms", "timeouts", "lag p99", "pass", "trusted"
    );
    for name in &sources {
        let _ = write!(t, " {name:>10}");
    }
    t.push('\n');
    for p in steps_of(s) {
        let name = p["name"].as_str().unwrap_or("?");
        let trusted = step_trusted(s, name).map_or("-".to_owned(), |b| b.to_string());
        let _ = write!(
            t,
            "  {:<7} {:>6.0} {:>7.1} {:>8.1} {:>8} {:>8.2} {:<5} {:<8}",
            name,
            p["offered_rps"].as_f64().unwrap_or(f64::NAN),
            p["ok_rps"].as_f64().unwrap_or(f64::NAN),
            p["latency_ms"]["p99"].as_f64().unwrap_or(f64::NAN),
            p["errors"]["timeout"].as_u64().unwrap_or(0),
            p["send_lag_ms"]["p99"].as_f64().unwrap_or(f64::NAN),
            p["passed"],
            trusted
        );
        for name in &sources {
            let w = &p["watch"][name];
            let mean = w["mean"]["cpu_cores"].as_f64().or(w["mean"]["value"].as_f64());
            let mark = if w["saturated"].is_string() { "*" } else { " " };
            let _ = write!(t, " {:>9}{mark}", mean.map_or("-".into(), |m| format!("{m:.2}")));
        }
        t.push('\n');
    }
    let _ = writeln!(
        t,
        "  knee (SLO) {}, throughput {}, adaptive {}, cliff {}",
        show_point(&s["knee"]),
        show_point(&s["analysis"]["throughput_knee"]),
        show_point(&s["analysis"]["adaptive_knee"]),
        show_point(&s["cliff"])
    );
    let _ = writeln!(t, "  watch: {}", s["watch"]["knee"].as_str().unwrap_or("-"));
    let stop = &s["analysis"]["emergency_stop"];
    if stop.is_object() {
        let _ = writeln!(
            t,
            "  emergency stop at {} s: {} (loader_behind {})",
            stop["at_s"], stop["detail"], stop["loader_behind"]
        );
    }
    let _ = writeln!(
        t,
        "  verdict: trusted {}; TIME_WAIT peak {} (loader's probe {}), ports {}",
        s["verdict"]["trusted"],
        s["health"]["peaks"]["time_wait_max"],
        s["probes"]["time_wait"]["max_live"],
        s["health"]["peaks"]["ephemeral_ports_max_ratio"]
    );
    for r in reasons(s) {
        let mark = if r["invalidates"] == true { "✗" } else { "·" };
        let _ = writeln!(
            t,
            "    {mark} [{}] {}: {}",
            r["side"].as_str().unwrap_or("?"),
            r["code"].as_str().unwrap_or("?"),
            r["detail"].as_str().unwrap_or("")
        );
    }
    let little: BTreeMap<String, String> = s["analysis"]["little"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l["findings"].as_array().is_some_and(|f| !f.is_empty()))
        .map(|l| (l["step"].as_str().unwrap_or("?").to_owned(), l["findings"].to_string()))
        .collect();
    if !little.is_empty() {
        let _ = writeln!(t, "  Little's law findings: {little:?}");
    }
    if failed.0.is_empty() {
        let _ = writeln!(t, "  checks: all passed");
    } else {
        let _ = writeln!(t, "  checks FAILED ({}):", failed.0.len());
        for line in &failed.0 {
            let _ = writeln!(t, "    - {line}");
        }
    }
    t
}

/// Whether this loader reads a `cpu:LIST` watch source (issue 46, item 5): a run that refuses
/// it fails at once on its `--watch` flag.
fn cpu_source_supported(url: &str) -> bool {
    let out = common::out_dir("real-stack-cpu-source");
    let (output, _) = common::loader_run(
        &["--url", url, "--rate", "1", "--duration", "1s", "--no-probes", "--watch", "core=cpu:1"],
        &out,
        Duration::from_secs(30),
    );
    let refused = output.status.code() == Some(1) && String::from_utf8_lossy(&output.stderr).contains("--watch");
    if refused {
        eprintln!("this loader refuses `--watch core=cpu:1`: {}", String::from_utf8_lossy(&output.stderr).trim());
    }
    !refused
}

/// Both runs of an endpoint (emergency stop on, then off), php-fpm drained between them and
/// before any second attempt; the test fails after both, on everything either found.
/// `measured`: the endpoint whose capacity wrk measured (measured again, once drained, before
/// a second attempt: one measured while php-fpm still worked off the backlog read 0 req/s).
fn both_runs(stack: &Stack, measured: Option<&str>, make: impl Fn(bool) -> Case<'static>) {
    let mut failed = Vec::new();
    let settle = || {
        stack.wait_idle(Duration::from_secs(30));
    };
    let remeasure = measured.map(|path| move || stack.capacity(path));
    for emergency_stop in [true, false] {
        failed.extend(run_case(&make(emergency_stop), &settle, remeasure.as_ref().map(|f| f as &dyn Fn() -> f64)));
        let drained = stack.wait_idle(Duration::from_secs(30));
        assert!(drained, "php-fpm still busy 30 s after the run: what the collapse queued did not drain");
    }
    assert!(failed.is_empty(), "{} checks failed:\n{}", failed.len(), failed.join("\n"));
}

/// 8 workers sleeping 40 ms: 200 req/s, the pool the ceiling (`phpfpm_active_processes` at 8).
#[test]
fn a_pool_of_sleeping_workers_is_the_knee() {
    let Some(_serial) = matrix::setup("a_pool_of_sleeping_workers_is_the_knee") else { return };
    if !stack::require() {
        return;
    }
    common::loader_bin();
    let started = Instant::now();
    let stack = Stack::start("sleep", StackSpec { workers: SLEEP_WORKERS, database: false });
    let path = format!("/sleep.php?ms={SLEEP_MS}");
    let capacity = f64::from(SLEEP_WORKERS) * 1000.0 / f64::from(SLEEP_MS);
    let measured = stack.capacity(&path);
    eprintln!("sleep.php: capacity {capacity:.0} req/s by workers ÷ sleep, {measured:.1} by wrk");
    // Each request also holds its worker for nginx's and php-fpm's own work (about 1 ms here),
    // and wrk waits for each answer before its next request: a few % below.
    assert!((measured / capacity - 1.0).abs() < 0.1, "wrk found {measured:.1} req/s, not {capacity:.0}");
    let (url, pool, fpm) = (stack.url(&path), stack.pool_source("pool"), format!("fpm=pid:{}", stack.fpm_pid()));
    both_runs(&stack, None, |emergency_stop| Case {
        name: if emergency_stop { "real-stack-sleep" } else { "real-stack-sleep-no-stop" },
        url: url.clone(),
        capacity,
        ceiling: EXACT,
        steps: steps_at(capacity),
        emergency_stop,
        watch: vec![pool.clone(), fpm.clone()],
        resource: Some(("pool", "the pool of sleeping workers")),
    });
    eprintln!("a_pool_of_sleeping_workers_is_the_knee: {:.0} s", started.elapsed().as_secs_f64());
}

/// A CPU-bound endpoint (50,000 chained MD5s) on php-fpm's one core: php-fpm's CPU the
/// ceiling, the pool of 8 far from it until the core is full.
#[test]
fn php_fpm_s_cpu_is_the_knee() {
    let Some(_serial) = matrix::setup("php_fpm_s_cpu_is_the_knee") else { return };
    if !stack::require() {
        return;
    }
    common::loader_bin();
    let started = Instant::now();
    let stack = Stack::start("cpu", StackSpec { workers: 8, database: false });
    let path = CPU_PATH;
    let capacity = stack.capacity(path);
    eprintln!("cpu.php: capacity {capacity:.1} req/s by wrk");
    let (url, pool, fpm) = (stack.url(path), stack.pool_source("pool"), format!("fpm=pid:{}", stack.fpm_pid()));
    both_runs(&stack, Some(path), |emergency_stop| Case {
        name: if emergency_stop { "real-stack-cpu" } else { "real-stack-cpu-no-stop" },
        url: url.clone(),
        capacity,
        ceiling: MEASURED,
        steps: steps_at(capacity),
        emergency_stop,
        watch: vec![fpm.clone(), pool.clone()],
        resource: Some(("fpm", "php-fpm's CPU")),
    });
    eprintln!("php_fpm_s_cpu_is_the_knee: {:.0} s", started.elapsed().as_secs_f64());
}

/// A query on PostgreSQL from php-fpm, both on CPU 1 (with nginx): the shared core the
/// ceiling, neither process alone near a core.
///
/// The shared core is watched by a `cpu:1` source (issue 46, item 5, being added beside this
/// suite). A loader that does not read it yet runs without it, and this test then fails on
/// the knee's explanation, saying so.
#[test]
fn a_core_shared_by_php_fpm_and_postgres_is_the_knee() {
    let Some(_serial) = matrix::setup("a_core_shared_by_php_fpm_and_postgres_is_the_knee") else { return };
    if !stack::require() {
        return;
    }
    common::loader_bin();
    let started = Instant::now();
    let stack = Stack::start("db", StackSpec { workers: 8, database: true });
    let capacity = stack.capacity(DB_PATH);
    eprintln!("db.php: capacity {capacity:.1} req/s by wrk");
    let mut watch = vec![
        stack.pool_source("pool"),
        format!("fpm=pid:{}", stack.fpm_pid()),
        format!("pg=pid:{}", stack.postgres_pid().expect("postgres")),
    ];
    let exporter = stack.exporter_url().expect("postgres_exporter");
    watch.push(format!("pg_active=prometheus:{exporter};metric=pg_stat_activity_count{{state=\"active\"}}"));
    // ISSUE 46 ITEM 5 (the `cpu:` source): without it the shared core is not watched at all.
    let core = cpu_source_supported(&stack.url("/fixed"));
    if core {
        watch.insert(0, "core1=cpu:1".into());
    }
    let url = stack.url(DB_PATH);
    both_runs(&stack, Some(DB_PATH), |emergency_stop| Case {
        name: if emergency_stop { "real-stack-db" } else { "real-stack-db-no-stop" },
        url: url.clone(),
        capacity,
        ceiling: MEASURED,
        steps: steps_at(capacity),
        emergency_stop,
        watch: watch.clone(),
        resource: Some((
            "core1",
            if core {
                "CPU 1, shared by php-fpm, postgres and nginx"
            } else {
                "CPU 1 — NOT WATCHED: this loader has no `cpu:LIST` source yet (issue 46, item 5)"
            },
        )),
    });
    eprintln!("a_core_shared_by_php_fpm_and_postgres_is_the_knee: {:.0} s", started.elapsed().as_secs_f64());
}

/// Finding 1, as the issue reproduced it: the built-in target of 2 workers × 10 ms (200 req/s)
/// on CPU 1, stepped to 1,200 req/s with 256 connections and no emergency stop.
#[test]
fn finding_1_the_built_in_target_stepped_into_collapse() {
    let Some(_serial) = matrix::setup("finding_1_the_built_in_target_stepped_into_collapse") else { return };
    common::loader_bin();
    let started = Instant::now();
    let target = common::target_via(
        &on_target_cpu().iter().map(String::as_str).collect::<Vec<_>>(),
        "127.0.0.1:0",
        &["--workers", "2", "--delay", "10ms"],
    );
    let steps = vec![100.0, 150.0, 200.0, 300.0, 600.0, 1200.0];
    let failed = run_case(
        &Case {
            name: "real-stack-finding-1",
            url: target.url(),
            capacity: 200.0,
            ceiling: EXACT,
            steps,
            emergency_stop: false,
            watch: Vec::new(),
            resource: None,
        },
        // The built-in target serves what it queued within the 5 s timeout.
        &|| std::thread::sleep(Duration::from_secs(6)),
        None,
    );
    eprintln!("finding_1_the_built_in_target_stepped_into_collapse: {:.0} s", started.elapsed().as_secs_f64());
    assert!(failed.is_empty(), "{} checks failed:\n{}", failed.len(), failed.join("\n"));
}

/// Issue 47: the closed model on the real stack — users instead of a rate against the pool of
/// 8 workers sleeping 40 ms (200 req/s), no think time (wrk's loop). 4 users send about 100 a
/// second; from 8 on the pool serves its 200 and the users wait in its queue: latency grows
/// to `N ÷ C` (32 users: 160 ms), and no request times out — the closed model's way of
/// hiding a saturated target. Every step is trusted, nothing on the loader's side invalidates,
/// each step's ok/s follows `N ÷ (R + Z)`, the knee is within one step of the pool, and the
/// watched pool is what reached its ceiling past it.
#[test]
fn a_closed_run_finds_the_sleeping_pool_and_times_nothing_out() {
    let Some(_serial) = matrix::setup("a_closed_run_finds_the_sleeping_pool_and_times_nothing_out") else { return };
    if !stack::require() {
        return;
    }
    common::loader_bin();
    let stack = Stack::start("closed", StackSpec { workers: SLEEP_WORKERS, database: false });
    let url = stack.url(&format!("/sleep.php?ms={SLEEP_MS}"));
    let capacity = f64::from(SLEEP_WORKERS) * 1000.0 / f64::from(SLEEP_MS);
    let pool = stack.pool_source("pool");
    let args = ["--url", &url, "--vus-steps", "4,8,16,32", "--think", "0", "--hold", "4s", "--warmup", WARMUP];
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--slo-p99", SLO_P99, "--watch", &pool]);
    let outcome = Run::new("real-stack-closed").args(&all).limit(Duration::from_secs(120)).run();
    if outcome.skip_without_ebpf() {
        return;
    }
    let s = outcome.summary();
    let steps = steps_of(s);
    let mut failed = Failed::default();
    let mut table = String::from("step     users    ok/s  law/s   p50 ms  errors  trusted  pool\n");
    for (i, p) in steps.iter().enumerate() {
        let name = p["name"].as_str().unwrap_or("?");
        let users = p["closed"]["users"].as_f64().unwrap_or(0.0);
        let ok = p["ok_rps"].as_f64().unwrap_or(0.0);
        let law = p["closed"]["law_rps"].as_f64().unwrap_or(0.0);
        let errors: u64 = p["errors"].as_object().map_or(0, |e| e.values().filter_map(Value::as_u64).sum());
        let pool_busy = p["watch"]["pool"]["mean"]["value"].as_f64();
        let _ = writeln!(
            table,
            "{name:<8} {users:>5} {ok:>7.1} {law:>6.1} {:>8.1} {errors:>7}  {:<7}  {}",
            p["latency_ms"]["p50"].as_f64().unwrap_or(0.0),
            format!("{:?}", step_trusted(s, name)),
            pool_busy.map_or("-".into(), |v| format!("{v:.2}")),
        );
        // Each worker also holds its request for nginx's and php-fpm's own work: a few % below.
        let want = (users * 1000.0 / f64::from(SLEEP_MS)).min(capacity);
        failed.expect((ok / want - 1.0).abs() < 0.12, || format!("{name}: ok/s {ok:.1}, expected about {want:.0}"));
        failed.expect(law > 0.0 && (ok / law - 1.0).abs() < 0.05, || {
            format!("{name}: ok/s {ok:.1} against its law {law:.1}")
        });
        failed.expect(errors == 0, || format!("{name}: {errors} errors — the users wait, nothing times out"));
        failed.expect(step_trusted(s, name) != Some(false), || format!("{name}: not trusted"));
        if i == 3 {
            let p50 = p["latency_ms"]["p50"].as_f64().unwrap_or(0.0);
            failed.expect((130.0..220.0).contains(&p50), || format!("{name}: p50 {p50} ms, not N ÷ C = 160 ms"));
        }
        if i >= 2 {
            let saturated = p["watch"]["pool"]["saturated"].as_str().unwrap_or("");
            failed.expect(!saturated.is_empty(), || format!("{name}: the watched pool did not reach its ceiling"));
        }
    }
    let knee = s["knee"]["step"].as_str().unwrap_or("none");
    failed.expect(["step 1", "step 2"].contains(&knee), || {
        format!("knee at {knee}, not within one step of the pool's 8")
    });
    let invalidating: Vec<String> = outcome.invalidating().iter().map(|r| r["code"].to_string()).collect();
    failed.expect(invalidating.is_empty(), || format!("invalidating reasons: {}", invalidating.join(", ")));
    failed.expect(steps.len() == 4, || format!("{} steps of 4", steps.len()));
    eprintln!("{table}knee {knee}\n{}", outcome.show());
    assert!(failed.0.is_empty(), "{}\n{table}", failed.0.join("\n"));
}
