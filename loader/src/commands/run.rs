//! `loader run`: spec → (built-in target) → plan → probes → measure → verdict and analysis →
//! outputs (summary.json, report.html), once per `--repeat`, then the capacity plan over the
//! runs' knees.
//!
//! What stdout carries is the [`StdoutMode`]: the full terminal report, or for scripts only
//! the verdict's headline (`--quiet`) or the summary document (`--json`). Every line of the
//! full report is printed with `say!`, which holds it back in the other two. Warnings and
//! errors go to stderr and the files are written in every mode.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;

use super::outcome_of;
use crate::Outcome;
use crate::analysis;
use crate::cli::RunArgs;
use crate::health::idle;
use crate::measure;
use crate::privilege::Privileges;
use crate::probes::Probes;
use crate::report::metrics::Endpoint;
use crate::report::text;
use crate::scenario::{Plan, Spec, StdoutMode, Target};
use crate::summary::{CapacitySummary, Reason, Summary, Verdict};
use crate::target;

/// `println!` when stdout carries the full report ([`StdoutMode::full`]); nothing with
/// `--quiet` or `--json`.
macro_rules! say {
    ($stdout:expr, $($line:tt)*) => {
        if $stdout.full() {
            println!($($line)*);
        }
    };
}

/// `loader run`: every repeat of the plan, then the capacity plan over their knees.
pub(super) fn run(args: &RunArgs) -> anyhow::Result<Outcome> {
    let mut spec = Spec::from_run_args(args)?;
    let stdout = spec.stdout;
    let cpu_dma_latency = match args.cpu_dma_latency.as_deref().map(idle::parse).transpose() {
        Ok(asked) => asked,
        Err(e) => return Err(crate::error::InputError::new("--cpu-dma-latency", e).into()),
    };
    let linger = match args.metrics_linger.as_deref() {
        Some(text) => crate::scenario::parse_duration("--metrics-linger", text)?,
        None => METRICS_LINGER,
    };
    // Bound before anything starts: a bad or busy address is an error, not a run.
    let endpoint = args.metrics.as_deref().map(Endpoint::bind).transpose()?;
    if let Some(e) = &endpoint {
        say!(stdout, "loader: metrics at http://{}/metrics", e.addr());
    }
    measure::raise_nofile_limit();

    // The demo (no URL): the built-in target as a child process, so that its threads never
    // count as the loader's in the probes and the health figures.
    let builtin = match spec.target {
        Target::BuiltIn => Some(spawn_demo_target(&mut spec)?),
        Target::Url(_) => None,
    };
    let url = match (&spec.target, &builtin) {
        (Target::Url(u), _) => u.clone(),
        (Target::BuiltIn, Some(t)) => format!("http://{}/", t.addr),
        (Target::BuiltIn, None) => unreachable!("built-in target started above"),
    };
    // --grpc without --proto: the method's descriptors from the server's reflection.
    if let Some(grpc) = spec.grpc.as_mut().filter(|g| g.needs_reflection()) {
        grpc.reflect(&url, &spec.tls, spec.timeout.clamp(REFLECTION_TIMEOUT_MIN, REFLECTION_TIMEOUT_MAX))?;
    }
    if builtin.is_some() && !spec.watch.iter().any(|w| w.name == DEMO_WATCH) {
        // The demo watches its target's pool, so that its knee comes with its cause.
        let source = format!(
            "{DEMO_WATCH}=prometheus:{}/metrics;metric=loader_target_busy_workers;limit={DEMO_WORKERS}",
            url.trim_end_matches('/')
        );
        spec.watch.push(crate::scenario::WatchSpec::parse_flag(&source).map_err(|e| anyhow::anyhow!(e))?);
    }
    let plan = Plan::resolve(&spec, &url)?;
    // A watched source that cannot be read fails now, before anything runs.
    if !plan.watch.is_empty() {
        crate::watch::Watcher::open(&plan.watch).map_err(|e| crate::error::InputError::new("--watch", e))?;
    }
    let out_dir = plan.out.clone().unwrap_or_else(default_out_dir);
    // Under sudo, root is dropped after the last probe load; what it created goes to the user.
    let mut privileges = Privileges::from_env(&out_dir)?.announcing(stdout.full());
    privileges.create_dir_all(&out_dir)?;
    crate::report::check_writable(&out_dir).map_err(|e| {
        crate::error::InputError::new("--out", format!("{}: cannot write there ({e})", out_dir.display()))
    })?;
    // While root: idle CPUs kept from deep sleep for the whole run (health/idle.rs).
    // Only a cpuidle governor reads the request: without a driver it changes nothing.
    let cpuidle_driver = idle::driver();
    let honoured = idle::honours_request(&cpuidle_driver);
    let virtual_machine = idle::virtual_machine();
    let shard_rate = plan.peak_rate() / plan.threads.max(1) as f64;
    let by_default = honoured && idle::held_by_default(shard_rate, virtual_machine);
    let cpu_latency = hold_cpu_latency(cpu_dma_latency, by_default);
    match (&cpu_latency, honoured) {
        (Some(held), true) if virtual_machine => say!(
            stdout,
            "loader: holding /dev/cpu_dma_latency at {} µs for the run on a virtual machine: its idle vCPUs poll, and a host short of CPU takes it back as steal (see the verdict's host_steal)",
            held.us
        ),
        (Some(held), true) => say!(
            stdout,
            "loader: holding /dev/cpu_dma_latency at {} µs for the run: idle CPUs poll rather than halt (--cpu-dma-latency off leaves them)",
            held.us
        ),
        (Some(held), false) => eprintln!(
            "loader: warning: --cpu-dma-latency {}: this machine has no cpuidle driver, so its idle CPUs halt whatever is asked; held, it changes nothing",
            held.us
        ),
        (None, _) => {}
    }

    if builtin.is_some() {
        say!(
            stdout,
            "loader: no --url given: the built-in demo — a target of {DEMO_WORKERS} workers × {DEMO_DELAY} (450 req/s at most) at {url}, stepped past it, its pool watched"
        );
    }
    let interrupted = crate::measure::signals::install()?;
    let control = match args.control.as_deref() {
        Some(addr) => {
            let token = measure::control::token_from_env("--control")?;
            let c = measure::control::Control::bind(addr, token, Arc::clone(&interrupted))?;
            say!(stdout, "loader: control at http://{}/stop (loader stop {})", c.addr(), c.addr());
            Some(c)
        }
        None => None,
    };

    // This machine's certificate (or --certificate): one stderr line when missing or foreign.
    let certified = crate::calibrate::for_run(args.certificate.as_deref())?;
    let preflight = match args.preflight.as_deref() {
        Some(text) => crate::scenario::parse_duration("--preflight", text)?,
        None => Duration::from_secs(2),
    };
    let repeat = plan.capacity.repeat.max(1) as usize;
    let mut runs = Vec::with_capacity(repeat);
    // Loaded by the first run (then root is dropped), reset for each later one.
    let mut probes: ProbeState = None;
    for k in 1..=repeat {
        let dir = if repeat > 1 { out_dir.join(format!("run-{k}")) } else { out_dir.clone() };
        privileges.create_dir_all(&dir)?;
        if repeat > 1 {
            say!(stdout, "\nloader: run {k} of {repeat}");
        }
        let outputs = Outputs {
            dir: &dir,
            json_lines: args.json_lines.as_deref().map(|p| (p, k)),
            metrics: endpoint.as_ref(),
            control: control.as_ref(),
        };
        let (summary, analysis) = run_once(
            &plan,
            outputs,
            &interrupted,
            Host {
                preflight,
                cpu_latency_us: cpu_latency.as_ref().map(|c| c.us),
                cpuidle_driver: cpuidle_driver.clone(),
                virtual_machine,
            },
            &mut privileges,
            &mut probes,
            certified.certified.as_ref(),
        )?;
        // JSON Lines over the repeats, each as its run ends (a single run's comes at the end:
        // with --peak its summary.json is the combined one).
        if stdout == StdoutMode::Json && repeat > 1 {
            print_json(&summary)?;
        }
        let stop = summary.interrupted;
        runs.push((dir, summary, analysis));
        if stop {
            break;
        }
    }
    drop(probes);
    // Normally dropped long ago, after the first run loaded the probes; this is a safety net.
    privileges.drop_now("before writing the combined results")?;
    let demo = builtin.is_some();
    if let Some(t) = builtin {
        t.stop();
    }

    if let Some(note) = &certified.note {
        eprintln!("{note}");
    }
    let (_, last, _) = runs.last().expect("at least one run");
    let mut combined = last.clone();
    if repeat > 1 || plan.capacity.peak.is_some() {
        let knees: Vec<_> = runs.iter().map(|(_, _, a)| a.knees.slo.clone()).collect();
        // A run whose knee may lie among steps its verdict set aside is not believed: the
        // others (its repeats) say what is sustainable.
        let vouched: Vec<bool> = runs.iter().map(|(_, s, _)| vouched_knee(s)).collect();
        let r = analysis::capacity::repeats_of_vouched(&knees, &vouched)?;
        let mut cap = CapacitySummary {
            knees: r.knees.clone(),
            runs: runs.iter().map(|(d, ..)| d.display().to_string()).collect(),
            max_sustainable: r.max_sustainable,
            range: r.range,
            relative_spread: r.relative_spread,
            steps_apart: r.steps_apart,
            settled: r.settled,
            spoiled_runs: (1..=runs.len()).filter(|k| !vouched[k - 1]).collect(),
            margin: plan.capacity.margin,
            peak_rps: plan.capacity.peak,
            usable_per_node: None,
            nodes: None,
        };
        if let (Some(max), Some(peak)) = (r.max_sustainable, plan.capacity.peak) {
            let p = analysis::capacity::capacity_plan(max, plan.capacity.margin, peak)?;
            cap.usable_per_node = Some(p.usable_per_node);
            cap.nodes = Some(p.nodes);
        }
        if stdout.full() {
            print!("\n{}", text::render_capacity(&cap));
        }
        combined.capacity = Some(cap);
        combined.verdict = combined_verdict(&runs.iter().map(|(_, s, _)| &s.verdict).collect::<Vec<_>>());
        // The combined conclusion is the max sustainable rate: it stands when some run's knee
        // stood on trusted steps and the spoiled runs were left out of it.
        if combined.verdict.trusted == Some(false) {
            combined.analysis.knee_on_trusted_steps = Some(r.max_sustainable.is_some() && vouched.iter().any(|&v| v));
        }
        combined.interrupted = runs.iter().any(|(_, s, _)| s.interrupted);
        let path = out_dir.join("summary.json");
        crate::report::write_json_or_stderr(&path, &combined)?;
        say!(stdout, "summary: {}", path.display());
        let (last_dir, ..) = runs.last().expect("at least one run");
        let page = crate::report::html::write(&out_dir, last_dir, &combined)?;
        say!(stdout, "report: {}", page.display());
    }
    if stdout == StdoutMode::Json && repeat == 1 {
        print_json(&combined)?;
    }
    if let Some(path) = &args.junit {
        std::fs::write(path, crate::report::junit::render(&combined))
            .map_err(|e| crate::error::OutputError::new(path, e))?;
        say!(stdout, "junit: {}", path.display());
    }
    if let Some(e) = endpoint {
        linger_for_scrapers(&e, linger, &interrupted, stdout);
    }
    if demo {
        say!(
            stdout,
            "next: your own service — loader run --url http://HOST:PORT/PATH --profile step --steps 100,200,400,800 --slo-p99 200ms; this machine's ceiling — loader calibrate"
        );
    }
    Ok(outcome_of(&combined))
}

/// Whether a run's knee is one to believe: its verdict trusted every step, or its knee stands
/// on the steps it did trust.
fn vouched_knee(s: &Summary) -> bool {
    s.verdict.trusted != Some(false) || s.analysis.knee_on_trusted_steps == Some(true)
}

/// The verdict over repeated runs: untrusted when any run was; the last run's reasons, and
/// an earlier run's invalidating ones named by run, so "untrusted" always says why.
fn combined_verdict(runs: &[&Verdict]) -> Verdict {
    let (last, earlier) = runs.split_last().expect("at least one run");
    let mut combined = (*last).clone();
    if runs.iter().any(|v| v.trusted == Some(false)) {
        combined.trusted = Some(false);
    }
    for (k, v) in earlier.iter().enumerate() {
        for r in v.reasons.iter().filter(|r| r.invalidates) {
            let detail = format!("run {} of {}: {}", k + 1, runs.len(), r.detail);
            combined.reasons.push(Reason { detail, ..r.clone() });
        }
    }
    combined
}

/// How long the final metrics stay served after the run by default: a few scrapes at the
/// usual 1–2 s interval.
const METRICS_LINGER: Duration = Duration::from_secs(5);
/// Bounds of the time server reflection may take before the run (the run's `--timeout`
/// within them).
const REFLECTION_TIMEOUT_MIN: Duration = Duration::from_secs(5);
const REFLECTION_TIMEOUT_MAX: Duration = Duration::from_secs(60);

/// `--json`: `summary` on stdout as one line of compact JSON, the document its summary.json
/// holds.
fn print_json(summary: &Summary) -> anyhow::Result<()> {
    let line = serde_json::to_string(summary).context("cannot print the summary as JSON")?;
    println!("{line}");
    Ok(())
}

/// Keep serving the final metrics for `linger`, or until a signal arrives meanwhile.
fn linger_for_scrapers(endpoint: &Endpoint, linger: Duration, interrupted: &AtomicBool, stdout: StdoutMode) {
    if linger.is_zero() {
        return;
    }
    say!(
        stdout,
        "loader: the final metrics stay at http://{}/metrics for {}",
        endpoint.addr(),
        humantime::format_duration(linger)
    );
    // A signal during the run was already acted on; only a new one cuts the linger short.
    interrupted.store(false, Ordering::Relaxed);
    let until = Instant::now() + linger;
    while Instant::now() < until && !interrupted.load(Ordering::Relaxed) {
        std::thread::sleep(until.saturating_duration_since(Instant::now()).min(Duration::from_millis(100)));
    }
}

/// The probes across the runs of `--repeat`, loaded once, while root, by the first run:
/// `None` before it; then attached (each later run resets them) or why not (`--no-probes`,
/// not privileged, …).
type ProbeState = Option<Result<Box<Probes>, String>>;

/// Where one run writes: its directory, with `--json-lines` the stream (file, run number),
/// with `--metrics` the live endpoint, with `--control` the kill switch (when it was used).
struct Outputs<'a> {
    dir: &'a Path,
    json_lines: Option<(&'a Path, usize)>,
    metrics: Option<&'a Endpoint>,
    control: Option<&'a measure::control::Control>,
}

/// The host as each run finds it: the pre-flight noise check's length (0: none) and the CPU
/// wake-up latency held for the whole of `loader run` (`None`: not held), and the cpuidle
/// driver that honours it ([`idle::NO_DRIVER`]: none, so idle CPUs halt whatever is held).
struct Host {
    preflight: Duration,
    cpu_latency_us: Option<u32>,
    cpuidle_driver: String,
    /// Whether the machine is a virtual one ([`idle::virtual_machine`]).
    virtual_machine: bool,
}

/// One run of the plan: probes, shards, analysis, verdict, outputs in `dir`.
fn run_once(
    plan: &Plan,
    outputs: Outputs<'_>,
    interrupted: &Arc<AtomicBool>,
    host: Host,
    privileges: &mut Privileges,
    probes: &mut ProbeState,
    certificate: Option<&crate::calibrate::Certified>,
) -> anyhow::Result<(Summary, analysis::Analysis)> {
    let Outputs { dir, json_lines, metrics, control } = outputs;
    let Host { preflight, cpu_latency_us, cpuidle_driver, virtual_machine } = host;
    let stdout = plan.stdout;
    // Before the probes attach, so these sleeping threads are not counted as the run's.
    let noise = (!preflight.is_zero()).then(|| {
        let slo_ms =
            [plan.slo.p95, plan.slo.p99].into_iter().flatten().map(|d| d.as_secs_f64() * 1000.0).reduce(f64::min);
        let p = crate::health::preflight::measure(preflight, plan.threads, slo_ms);
        say!(
            stdout,
            "loader: pre-flight: {} ms sleeps woke {:.0}/{:.0}/{:.0} µs late (p50/p99/max) on {} thread(s)",
            crate::health::preflight::SLEEP.as_millis(),
            p.late_p50_us,
            p.late_p99_us,
            p.late_max_us,
            p.threads
        );
        if let Some(w) = &p.warning {
            eprintln!("loader: warning: {w}");
        }
        p
    });
    let state = match probes.take() {
        None => {
            let loaded = if !plan.probes {
                Err("disabled with --no-probes".to_string())
            } else {
                // HTTP/2 answers are stamped by segment (see `engine::segments`).
                let segments = plan.http2.is_some();
                Probes::start_with_segments(std::process::id(), segments).map(Box::new).map_err(|e| {
                    let why = crate::error::one_line(&e);
                    eprintln!("loader: probes unavailable: {why}");
                    why
                })
            };
            // Root was needed only to load and attach: later runs reset, never load again.
            let when = match (&loaded, plan.probes) {
                (Ok(_), _) => "after loading probes",
                (Err(_), true) => "(probes unavailable)",
                (Err(_), false) => "(probes disabled)",
            };
            privileges.drop_now(when)?;
            loaded
        }
        Some(Ok(mut p)) => p.reset().map(|()| p).map_err(|e| {
            let why = format!("resetting the probes between runs failed: {}", crate::error::one_line(&e));
            eprintln!("loader: probes unavailable: {why}");
            why
        }),
        Some(Err(why)) => Err(why),
    };
    let (attached, probe_reason) = match probes.insert(state) {
        Ok(p) => (Some(&mut **p), None),
        Err(why) => (None, Some(why.clone())),
    };
    say!(
        stdout,
        "loader: {} profile{}, {} phases, {:.0}s, {} connections on {} shard thread(s) → {}",
        plan.profile_kind().as_str(),
        plan.spec.arrival.seed().map_or(String::new(), |seed| format!(" with Poisson arrivals (seed {seed})")),
        plan.phases.len(),
        plan.duration().as_secs_f64(),
        plan.connections,
        plan.threads,
        plan.target.url
    );

    let streams = measure::Outputs { hlog_dir: Some(dir), json_lines, metrics };
    let mut summary = measure::measure(plan, interrupted, attached, probe_reason, noise, streams)?;
    summary.loader.certificate = certificate.and_then(|c| c.compare(&summary.phases));
    summary.run.command_line = std::env::args().collect();
    summary.run.cpu_dma_latency_us = cpu_latency_us;
    summary.run.cpuidle_driver = Some(cpuidle_driver);
    summary.run.virtual_machine = Some(virtual_machine);
    summary.run.stop_requested_unix_s = control
        .and_then(|c| c.requested_at())
        .and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_micros() as f64 / 1e6);
    summary.machine = Some(crate::health::machine::Fingerprint::of_this_machine());
    let analysis = measure::conclude(&mut summary, plan)?;
    match stdout {
        StdoutMode::Full => {
            print!("\n{}", text::render_run(&summary, Some(&analysis), text::Detail::Glance, Some(dir)))
        }
        StdoutMode::Headline => println!("{}", text::headline(&summary.verdict)),
        // Printed by `run`, once the document is the one summary.json keeps.
        StdoutMode::Json => {}
    }
    let path = dir.join("summary.json");
    let written = crate::report::write_json_or_stderr(&path, &summary);
    if written.is_ok() {
        say!(stdout, "summary: {}", path.display());
        // The run ended and said so: its checkpoint has served.
        let _ = std::fs::remove_file(dir.join(measure::checkpoint::FILE));
        let _ = std::fs::remove_file(dir.join(measure::checkpoint::SERIES_FILE));
    }
    match crate::report::html::write(dir, dir, &summary) {
        Ok(page) => say!(stdout, "report: {}", page.display()),
        Err(e) => eprintln!("loader: warning: {}", crate::error::one_line(&e)),
    }
    // Every output tried: a summary that could not land is the command's error (exit 1).
    written?;
    Ok((summary, analysis))
}

/// `--cpu-dma-latency` held for the run, when this process may (root). Given: that value
/// (`Some(None)`: off). Not given: 0 µs when `by_default` ([`idle::held_by_default`]: the
/// busiest shard is slow enough to idle between its wake-ups, which polling idle CPUs make
/// cheaper and closer to their instant). Not permitted is silent by default (the summary says
/// `null`); asked for explicitly, the reason is one stderr line.
fn hold_cpu_latency(asked: Option<Option<u32>>, by_default: bool) -> Option<idle::CpuLatency> {
    let us = match asked {
        Some(None) => return None,
        Some(Some(us)) => us,
        None if by_default => 0,
        None => return None,
    };
    idle::hold(us)
        .map_err(|why| {
            if asked.is_some() {
                eprintln!("loader: warning: --cpu-dma-latency {us}: {why}; idle CPUs may halt between sends");
            }
        })
        .ok()
}

fn default_out_dir() -> PathBuf {
    let stamp = humantime::format_rfc3339_seconds(SystemTime::now()).to_string().replace(':', "");
    PathBuf::from("out").join(stamp)
}

/// The name of the demo's watched source (its target's worker pool).
const DEMO_WATCH: &str = "workers";

/// The demo's target: a pool of [`DEMO_WORKERS`] workers, each busy [`DEMO_DELAY`] per
/// request — a capacity of exactly 450 req/s, which the demo's steps (100–600 req/s) go past —
/// telling its pool at `/metrics`, which the demo watches.
const DEMO_WORKERS: usize = 9;
/// See [`DEMO_WORKERS`].
const DEMO_DELAY: &str = "20ms";

/// The demo's target on the last CPU this process may use and the loader on the others, one
/// shard each unless `--threads` says otherwise (as `loader calibrate` pins them): a target
/// beside the shards makes them wait for a CPU, and the demo would show the loader's waits
/// instead of the target's knee. New threads inherit the creating thread's CPU mask, so the
/// target is spawned while this thread sits on its CPU. On one CPU, nothing is pinned.
fn spawn_demo_target(spec: &mut Spec) -> anyhow::Result<target::child::Target> {
    let cpus = crate::health::affinity::allowed().unwrap_or_default();
    let split = match cpus.split_last() {
        Some((&last, rest)) if !rest.is_empty() => Some((last, rest.to_vec())),
        _ => None,
    };
    if let Some((cpu, _)) = &split {
        crate::health::affinity::current_thread(&[*cpu]).context("cannot pin the built-in target")?;
    }
    let spawned = target::child::spawn(&builtin_target_flags(spec));
    if let Some((_, loader)) = &split {
        crate::health::affinity::current_thread(loader).context("cannot pin the loader")?;
        spec.threads = spec.threads.or(Some(loader.len()));
    }
    spawned.context("cannot start the built-in target")
}

/// The built-in target's flags for a demo run: one thread, the demo's pool, speaking the
/// run's protocol.
fn builtin_target_flags(spec: &Spec) -> Vec<String> {
    let mut flags = vec!["--threads".to_string(), "1".to_string()];
    flags.extend(["--workers".to_string(), DEMO_WORKERS.to_string(), "--delay".into(), DEMO_DELAY.into()]);
    if spec.grpc.is_some() {
        flags.push("--grpc".into());
    } else if spec.http2.is_some() {
        flags.push("--http2".into());
    }
    flags
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(code: &str, invalidates: bool) -> Reason {
        let detail = format!("{code} said");
        Reason { code: code.into(), side: "loader".into(), invalidates, value: None, limit: None, detail }
    }

    #[test]
    fn an_earlier_untrusted_repeat_says_why_in_the_combined_verdict() {
        let first = Verdict {
            trusted: Some(false),
            reasons: vec![reason("runqueue_delay", true), reason("note", false)],
            ..Default::default()
        };
        let second = Verdict { trusted: Some(true), reasons: vec![reason("host_steal", false)], ..Default::default() };
        let v = combined_verdict(&[&first, &second]);
        assert_eq!(v.trusted, Some(false));
        let said: Vec<(&str, &str, bool)> =
            v.reasons.iter().map(|r| (r.code.as_str(), r.detail.as_str(), r.invalidates)).collect();
        assert_eq!(
            said,
            [("host_steal", "host_steal said", false), ("runqueue_delay", "run 1 of 2: runqueue_delay said", true)]
        );
        // All trusted: the last run's verdict as it is.
        let v = combined_verdict(&[&second, &second]);
        assert_eq!((v.trusted, v.reasons.len()), (Some(true), 1));
    }
}
