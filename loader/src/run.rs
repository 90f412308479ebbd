//! `loader run` and `loader target`: wire the stages together and map the end to an
//! [`Outcome`]. The stages themselves live in their modules; this file only orders them:
//! spec → (built-in target) → plan → probes → shards → live progress → merge → outputs.

use std::fs;
use std::io::{IsTerminal, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;

use crate::Outcome;
use crate::analysis::live::StopReason;
use crate::analysis::{self, CliffDetector, Criteria, KneeRules, LiveSecond, StopRule};
use crate::cli::{Cli, Command, RunArgs, VerdictArgs};
use crate::engine::{self, Clock, Live, ShardConfig, ShardResult};
use crate::health::Sampler;
use crate::privilege::Privileges;
use crate::probes::Probes;
use crate::record::ShardRecord;
use crate::report::summary::{self, CapacitySummary, EmergencyStop, HealthSummary, ProbeSummary};
use crate::report::text;
use crate::scenario::{PhaseKind, Plan, Spec, Target};
use crate::schedule::ShardSchedule;
use crate::target::{self, TargetConfig};
use crate::verdict::{self, Limits};

/// Time between starting the shards and the run's zero: the pools connect meanwhile.
const POOL_OPEN_GRACE: Duration = Duration::from_millis(250);

/// Run one command of the CLI.
pub fn run(cli: Cli) -> anyhow::Result<Outcome> {
    match cli.command {
        Command::Target(args) => {
            let cfg = TargetConfig::from_args(&args)?;
            target::serve(cfg)?;
            Ok(Outcome::Passed)
        }
        Command::Run(args) => run_load(&args),
        Command::Verdict(args) => rejudge(&args),
        Command::Calibrate(args) => crate::calibrate::calibrate(&args),
    }
}

/// `loader verdict DIR`: judge a saved run again, with the given limits.
fn rejudge(args: &VerdictArgs) -> anyhow::Result<Outcome> {
    let path = args.dir.join("summary.json");
    let text = fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut summary: summary::Summary =
        serde_json::from_str(&text).with_context(|| format!("{} is not a loader summary", path.display()))?;
    if summary.schema != summary::SCHEMA {
        anyhow::bail!("{}: schema {:?}, expected {:?}", path.display(), summary.schema, summary::SCHEMA);
    }
    let mut limits = Limits::default();
    if let Some(v) = args.cpu_p95 {
        limits.cpu_p95_pct = v;
    }
    if let Some(v) = args.runqueue_p99_ms {
        limits.runqueue_p99_ms = v;
    }
    if let Some(v) = args.send_lag_p99_ms {
        limits.send_lag_p99_ms = v;
    }
    if let Some(v) = args.time_wait {
        limits.time_wait = v;
    }
    if let Some(v) = args.loader_delay_pct {
        if !(v > 0.0 && v <= 100.0) {
            return Err(crate::error::InputError::new("--loader-delay-pct", "must be in (0, 100]").into());
        }
        limits.loader_delay_pct = v;
    }
    summary.verdict = verdict::judge(&summary, &limits);
    // The steps are judged again against the criteria the run was judged with.
    let criteria = summary.analysis.criteria.clone().unwrap_or_default();
    let analysis = analysis::analyze(&summary, &criteria, &KneeRules::default())?;
    analysis::annotate(&mut summary, &analysis);
    summary.analysis.criteria = Some(criteria.clone());
    print!("{}\n{}", text::render_verdict(&summary.verdict), text::render(&summary));
    if !args.dry_run {
        write_json(&path, &summary)?;
        println!("summary: {} (verdict updated)", path.display());
    }
    Ok(outcome_of(&summary))
}

/// The exit outcome a finished summary calls for. A breakpoint run exists to find where
/// steps start failing, so one that found its knee has passed.
fn outcome_of(s: &summary::Summary) -> Outcome {
    if let Some(failure) = &s.failure {
        eprintln!("loader: error: the run failed part-way ({failure}); what it measured until then is in summary.json");
        Outcome::Error
    } else if s.interrupted {
        Outcome::Interrupted
    } else if s.verdict.trusted == Some(false) {
        Outcome::Untrusted
    } else if s.run.profile == "breakpoint" && s.knee.is_some() {
        Outcome::Passed
    } else if s.phases.iter().any(|p| p.passed == Some(false)) {
        Outcome::GatesFailed
    } else {
        Outcome::Passed
    }
}

fn run_load(args: &RunArgs) -> anyhow::Result<Outcome> {
    let spec = Spec::from_run_args(args)?;
    raise_nofile_limit();

    // The demo (no URL): the built-in target as a child process, so that its threads never
    // count as the loader's in the probes and the health figures.
    let builtin = match spec.target {
        Target::BuiltIn => Some(
            target::child::spawn(&["--threads".to_string(), "1".to_string()])
                .context("cannot start the built-in target")?,
        ),
        Target::Url(_) => None,
    };
    let url = match (&spec.target, &builtin) {
        (Target::Url(u), _) => u.clone(),
        (Target::BuiltIn, Some(t)) => format!("http://{}/", t.addr),
        (Target::BuiltIn, None) => unreachable!("built-in target started above"),
    };
    let plan = Plan::resolve(&spec, &url)?;
    let out_dir = plan.out.clone().unwrap_or_else(default_out_dir);
    // Under sudo, root is dropped after the last probe load; what it created goes to the user.
    let mut privileges = Privileges::from_env(&out_dir)?;
    privileges.create_dir_all(&out_dir)?;

    if builtin.is_some() {
        println!("loader: no --url given: running the built-in demo against the built-in target at {url}");
    }
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&interrupted)).context("cannot install signal handler")?;
    }

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
            println!("\nloader: run {k} of {repeat}");
        }
        let (summary, analysis) =
            run_once(&plan, &dir, &interrupted, preflight, &mut privileges, &mut probes, certified.certified.as_ref())?;
        let stop = summary.interrupted;
        runs.push((dir, summary, analysis));
        if stop {
            break;
        }
    }
    drop(probes);
    // Normally dropped long ago, after the first run loaded the probes; this is a safety net.
    privileges.drop_now("before writing the combined results")?;
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
        let r = analysis::capacity::repeats(&knees)?;
        let mut cap = CapacitySummary {
            knees: r.knees.clone(),
            runs: runs.iter().map(|(d, ..)| d.display().to_string()).collect(),
            max_sustainable: r.max_sustainable,
            range: r.range,
            relative_spread: r.relative_spread,
            steps_apart: r.steps_apart,
            settled: r.settled,
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
        print!("\n{}", text::render_capacity(&cap));
        combined.capacity = Some(cap);
        // Untrusted or interrupted in any run makes the whole untrusted or interrupted.
        if runs.iter().any(|(_, s, _)| s.verdict.trusted == Some(false)) {
            combined.verdict.trusted = Some(false);
        }
        combined.interrupted = runs.iter().any(|(_, s, _)| s.interrupted);
        let path = out_dir.join("summary.json");
        write_json(&path, &combined)?;
        println!("summary: {}", path.display());
    }
    Ok(outcome_of(&combined))
}

/// The probes across the runs of `--repeat`, loaded once, while root, by the first run:
/// `None` before it; then attached (each later run resets them) or why not (`--no-probes`,
/// not privileged, …).
type ProbeState = Option<Result<Box<Probes>, String>>;

/// One run of the plan: probes, shards, analysis, verdict, outputs in `dir`.
fn run_once(
    plan: &Plan,
    dir: &Path,
    interrupted: &Arc<AtomicBool>,
    preflight: Duration,
    privileges: &mut Privileges,
    probes: &mut ProbeState,
    certificate: Option<&crate::calibrate::Certified>,
) -> anyhow::Result<(summary::Summary, analysis::Analysis)> {
    // Before the probes attach, so these sleeping threads are not counted as the run's.
    let noise = (!preflight.is_zero()).then(|| {
        let slo_ms =
            [plan.slo.p95, plan.slo.p99].into_iter().flatten().map(|d| d.as_secs_f64() * 1000.0).reduce(f64::min);
        let p = crate::health::preflight::measure(preflight, plan.threads, slo_ms);
        println!(
            "loader: pre-flight: 1 ms sleeps woke {:.0}/{:.0}/{:.0} µs late (p50/p99/max) on {} thread(s)",
            p.late_p50_us, p.late_p99_us, p.late_max_us, p.threads
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
                Probes::start(std::process::id()).map(Box::new).map_err(|e| {
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
    println!(
        "loader: {} profile, {} phases, {:.0}s, {} connections on {} shard thread(s) → {}",
        plan.profile_kind().as_str(),
        plan.phases.len(),
        plan.duration().as_secs_f64(),
        plan.connections,
        plan.threads,
        plan.target.url
    );

    let (summary, analysis) = measure(plan, interrupted, attached, probe_reason, certificate, noise, Some(dir))?;
    print!("\n{}\n{}", text::render_verdict(&summary.verdict), text::render(&summary));
    if plan.phases.iter().filter(|p| p.kind == PhaseKind::Hold).count() > 1 {
        print!("\n{}", analysis::render_steps(&summary.phases, &summary.series, &analysis));
    }
    let path = dir.join("summary.json");
    write_json(&path, &summary)?;
    println!("summary: {}", path.display());
    Ok((summary, analysis))
}

/// The measuring core that `run` and `calibrate` share: shards, merge, summary, verdict and
/// analysis, printing only the live progress. `probes` (already attached, counting from zero)
/// are sampled and read here; `certificate` fills `summary.loader.certificate` and
/// `preflight` the host's noise floor before the verdict; the HDR interval log goes to
/// `hlog_dir` when given.
pub(crate) fn measure(
    plan: &Plan,
    interrupted: &Arc<AtomicBool>,
    mut probes: Option<&mut Probes>,
    probe_reason: Option<String>,
    certificate: Option<&crate::calibrate::Certified>,
    preflight: Option<crate::health::preflight::Preflight>,
    hlog_dir: Option<&Path>,
) -> anyhow::Result<(summary::Summary, analysis::Analysis)> {
    let stop = Arc::new(AtomicBool::new(false));
    let started_at = rfc3339(SystemTime::now());
    let run = execute(plan, &stop, interrupted, probes.as_deref_mut())?;
    let probes_summary = probe_summary(probes.as_deref(), probe_reason);

    let mut summary = summary::build(&summary::Inputs {
        plan,
        record: &run.record,
        interrupted: interrupted.load(Ordering::Relaxed),
        elapsed_s: run.elapsed.as_secs_f64(),
        started_at,
        probes: probes_summary,
        cpu: &run.cpu,
        rss_mib: (run.rss_mib.0, run.rss_mib.1, proc_status_mib("VmHWM:")),
        health: run.health.clone(),
        stopped_at_s: run.stopped_at_ns.map(|ns| ns as f64 / 1e9),
    });
    summary.failure = run.failure.clone();
    summary.preflight = preflight;
    summary.analysis.emergency_stop = run.emergency_stop.clone();
    summary.loader.certificate = certificate.and_then(|c| c.compare(&summary.phases));
    summary.verdict = verdict::judge(&summary, &plan.verdict);
    let criteria = Criteria { tail_samples_min: plan.verdict.min_tail_samples, ..Criteria::from(&plan.slo) };
    let analysis = analysis::analyze(&summary, &criteria, &KneeRules::default())?;
    analysis::annotate(&mut summary, &analysis);
    summary.analysis.criteria = Some(criteria.clone());
    summary.analysis.spike = analysis::profiles::spike(&summary.phases, &summary.series, criteria.goodput_min);
    if plan.profile_kind() == crate::scenario::ProfileKind::Soak {
        summary.analysis.soak = Some(analysis::profiles::soak(&summary));
    }
    if let Some(dir) = hlog_dir {
        crate::report::hdr::write(&dir.join("latency.hlog"), plan, &run.record, run.started)
            .context("cannot write the HDR interval log")?;
    }
    Ok((summary, analysis))
}

/// What the shards measured, merged, and the loader's CPU per second.
struct Executed {
    record: ShardRecord,
    elapsed: Duration,
    /// Per second, the CPU of each shard (percent of one core).
    cpu: Vec<Vec<f64>>,
    /// Resident memory at the first second and at the end.
    rss_mib: (Option<f64>, Option<f64>),
    /// Wall-clock time of the run's zero instant.
    started: SystemTime,
    /// `/proc` and cgroup health, per second.
    health: HealthSummary,
    /// The emergency stop, if it fired.
    emergency_stop: Option<EmergencyStop>,
    /// When the first shard saw the stop (ns since start), if the run was stopped.
    stopped_at_ns: Option<u64>,
    /// Why shards failed part-way, if any did.
    failure: Option<String>,
}

/// Sums of the shards' live counters.
#[derive(Debug, Default, Clone, Copy)]
struct LiveTotals {
    sent: u64,
    ok: u64,
    errors: u64,
    in_flight: u64,
    open: u64,
}

impl LiveTotals {
    fn of(lives: &[Arc<Live>]) -> Self {
        let sum =
            |f: fn(&Live) -> &std::sync::atomic::AtomicU64| lives.iter().map(|l| f(l).load(Ordering::Relaxed)).sum();
        LiveTotals {
            sent: sum(|l| &l.sent),
            ok: sum(|l| &l.ok),
            errors: sum(|l| &l.errors),
            in_flight: sum(|l| &l.in_flight),
            open: sum(|l| &l.open_connections),
        }
    }

    /// Counts since `before` (levels — in flight, open — as they are now).
    fn since(&self, before: &LiveTotals) -> LiveTotals {
        LiveTotals {
            sent: self.sent - before.sent,
            ok: self.ok - before.ok,
            errors: self.errors - before.errors,
            ..*self
        }
    }
}

/// Start one thread per shard, show progress each second, merge when they end.
fn execute(
    plan: &Plan,
    stop: &Arc<AtomicBool>,
    interrupted: &Arc<AtomicBool>,
    mut probes: Option<&mut Probes>,
) -> anyhow::Result<Executed> {
    let windows: Vec<_> = plan.phases.iter().map(|p| p.window()).collect();
    let seconds = (plan.duration() + plan.timeout).as_secs() as usize + 2;
    let clock = Clock::new(Instant::now() + POOL_OPEN_GRACE);
    let started = SystemTime::now() + POOL_OPEN_GRACE;
    let requests = Arc::new(engine::RequestTable {
        bytes: plan.requests.iter().map(|r| r.bytes.clone().into_boxed_slice()).collect(),
        head: plan.requests.iter().map(|r| r.head).collect(),
        idempotent: plan.requests.iter().map(|r| r.idempotent).collect(),
        mix: plan.mix(),
    });
    // One TLS client per run: its session cache is shared by every shard (resumption).
    let tls = match &plan.target.tls {
        Some(t) => {
            if t.verify == engine::tls::Verify::Insecure {
                eprintln!("loader: WARNING: --insecure: the server's certificate is NOT verified");
            }
            Some(engine::tls::TlsClient::new(t.server_name.clone(), &t.verify).context("--cacert")?)
        }
        None => None,
    };
    let pace = plan.pace();
    let mut lives = Vec::new();
    let mut handles = Vec::new();
    // Each shard says when it ends, so the main thread can sleep until the next second.
    let (ended_tx, ended) = std::sync::mpsc::channel::<()>();
    for shard in 0..plan.threads {
        let live = Arc::new(Live::default());
        lives.push(Arc::clone(&live));
        let cfg = ShardConfig {
            shard,
            addr: plan.target.addr,
            requests: Arc::clone(&requests),
            keepalive: plan.keepalive,
            connections: plan.connections_of(shard),
            timeout: plan.timeout,
            schedule: ShardSchedule::new(windows.clone(), shard, plan.threads),
            windows: windows.clone(),
            clock,
            stop: Arc::clone(stop),
            live,
            seconds,
            pace,
            tls: tls.clone(),
            limits: plan.limits,
            retry_non_idempotent: plan.retry_non_idempotent,
        };
        let ended_tx = ended_tx.clone();
        let handle = thread::Builder::new()
            .name(format!("loader-shard-{shard}"))
            .spawn(move || {
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() };
                cfg.live.tid.store(tid as u64, Ordering::Relaxed);
                let result = engine::run_shard(cfg);
                let _ = ended_tx.send(());
                result
            })
            .context("cannot start shard thread")?;
        handles.push(handle);
    }

    // The shards' run-queue delay is kept apart from the other threads' (its delay moves
    // sends; the main thread's does not): tell the probes which threads they are.
    if let Some(p) = probes.as_deref_mut() {
        let give_up = Instant::now() + Duration::from_millis(200);
        while lives.iter().any(|l| l.tid.load(Ordering::Relaxed) == 0) && Instant::now() < give_up {
            thread::sleep(Duration::from_millis(1));
        }
        let tids: Vec<u32> = lives.iter().map(|l| l.tid.load(Ordering::Relaxed) as u32).filter(|&t| t != 0).collect();
        if let Err(e) = p.mark_shards(&tids) {
            eprintln!(
                "loader: warning: the probes cannot tell shard threads apart ({e}); run-queue delay covers every thread"
            );
        }
    }
    let progress = Progress::new(plan);
    let mut cpu = CpuMeter::new(&lives);
    let mut health = Sampler::new(clock.start());
    let mut tick = clock.start();
    let mut cpu_samples = Vec::new();
    let mut rss_start = None;
    // The emergency stop watches each second after warm-up (analysis::live decides).
    let judged_from = plan.phases.iter().find(|p| p.kind != PhaseKind::Warmup).map_or(Duration::MAX, |p| p.start);
    let mut detector = plan.emergency_stop.then(|| CliffDetector::new(StopRule::default()));
    let mut emergency: Option<(StopReason, u64)> = None;
    let mut last = LiveTotals::default();
    drop(ended_tx);
    let mut running = handles.len();
    while running > 0 {
        if interrupted.load(Ordering::Relaxed) {
            stop.store(true, Ordering::Relaxed);
        }
        let now = Instant::now();
        if now >= tick + Duration::from_secs(1) {
            tick += Duration::from_secs(1);
            let at = tick.saturating_duration_since(clock.start());
            let pct = cpu.sample();
            health.sample();
            if let Some(p) = probes.as_deref_mut() {
                p.sample(lives.iter().map(|l| l.open_connections.load(Ordering::Relaxed)).sum());
            }
            if tick > clock.start() {
                cpu_samples.push(pct.clone());
                if rss_start.is_none() {
                    rss_start = proc_status_mib("VmRSS:");
                }
            }
            let totals = LiveTotals::of(&lives);
            let second = totals.since(&last);
            last = totals;
            progress.line(at, &second, pct.iter().copied().fold(0.0, f64::max));
            let t = at.as_secs();
            if let Some(d) = detector.as_mut()
                && t >= 1
                && Duration::from_secs(t - 1) >= judged_from
                && emergency.is_none()
            {
                let from = (t - 1) * 1_000_000_000;
                let offered = summary::offered_between(plan, from, from + 1_000_000_000);
                let live = LiveSecond::new(t - 1, offered, second.sent, second.ok, &[second.errors]);
                if d.observe(&live) {
                    stop.store(true, Ordering::Relaxed);
                    let reason = d.stopped().cloned().expect("a fired detector has a reason");
                    progress.note(&format!("EMERGENCY STOP at {t}s: {}", reason.detail));
                    emergency = Some((reason, clock.now_ns()));
                }
            }
        }
        // Sleep to the next second (or a shard's end), looking at the interrupt flag at least
        // every 100 ms: the main thread shares the loader's CPUs and must not wake them for
        // nothing.
        let next = (tick + Duration::from_secs(1)).saturating_duration_since(Instant::now());
        match ended.recv_timeout(next.min(Duration::from_millis(100))) {
            Ok(()) => running -= 1,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => running = 0,
        }
    }
    progress.finish();
    let elapsed = clock.start().elapsed();

    let mut merged: Option<ShardRecord> = None;
    let mut last_send_ns = None;
    let mut stopped_at_ns: Option<u64> = None;
    let mut failures = Vec::new();
    for (shard, h) in handles.into_iter().enumerate() {
        let ShardResult { record, error, stopped_at_ns: stopped, last_send_ns: last_send } =
            h.join().map_err(|_| engine::EngineError::Thread(shard))?.with_context(|| format!("shard {shard}"))?;
        last_send_ns = last_send_ns.max(last_send);
        if let Some(at) = stopped {
            stopped_at_ns = Some(stopped_at_ns.map_or(at, |s: u64| s.min(at)));
        }
        if let Some(e) = error {
            failures.push(format!("shard {shard}: {e}"));
        }
        match &mut merged {
            None => merged = Some(record),
            Some(m) => m.merge(&record),
        }
    }
    let emergency_stop = emergency.map(|(r, raised_ns)| EmergencyStop {
        at_s: r.t + 1,
        since_s: r.since,
        cause: format!("{:?}", r.cause).to_lowercase(),
        detail: r.detail,
        halted_within_ms: Some(last_send_ns.map_or(0.0, |l| l.saturating_sub(raised_ns) as f64 / 1e6)),
    });
    let record = merged.expect("at least one shard");
    let elapsed = elapsed.min(plan.duration() + plan.timeout);
    let rss_end = proc_status_mib("VmRSS:");
    let health = HealthSummary { peaks: health.peaks(), series: health.series };
    Ok(Executed {
        record,
        elapsed,
        cpu: cpu_samples,
        rss_mib: (rss_start, rss_end),
        started,
        health,
        emergency_stop,
        stopped_at_ns,
        failure: (!failures.is_empty()).then(|| failures.join("; ")),
    })
}

/// Per-second CPU of each shard thread, from `/proc/self/task/TID/schedstat` (time on CPU in
/// ns; `stat`'s clock ticks as a fallback).
struct CpuMeter {
    tids: Vec<Arc<Live>>,
    last: Option<(Instant, Vec<u64>)>,
    ticks_per_s: f64,
}

impl CpuMeter {
    fn new(lives: &[Arc<Live>]) -> Self {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        CpuMeter { tids: lives.to_vec(), last: None, ticks_per_s: if hz > 0 { hz as f64 } else { 100.0 } }
    }

    /// CPU time of one thread so far, ns.
    fn cpu_ns(&self, tid: u64) -> Option<u64> {
        if let Ok(text) = fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
            && let Some(ns) = text.split_whitespace().next().and_then(|n| n.parse().ok())
        {
            return Some(ns);
        }
        let stat = fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
        // Fields after the ")" that closes the command name: utime is 14th, stime 15th.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        Some((ticks as f64 / self.ticks_per_s * 1e9) as u64)
    }

    /// CPU of each shard since the previous sample, percent of one core.
    fn sample(&mut self) -> Vec<f64> {
        let now = Instant::now();
        let used: Vec<u64> =
            self.tids.iter().map(|l| self.cpu_ns(l.tid.load(Ordering::Relaxed)).unwrap_or(0)).collect();
        let pct = match &self.last {
            Some((at, before)) => {
                let secs = now.duration_since(*at).as_secs_f64().max(1e-3);
                used.iter().zip(before).map(|(u, b)| u.saturating_sub(*b) as f64 / 1e9 / secs * 100.0).collect()
            }
            None => vec![0.0; used.len()],
        };
        self.last = Some((now, used));
        pct
    }
}

/// The live progress display: a status line on a terminal, plain lines otherwise.
struct Progress {
    tty: bool,
    phases: Vec<(Duration, String, f64)>,
}

impl Progress {
    fn new(plan: &Plan) -> Self {
        Progress {
            tty: !plan.plain && std::io::stdout().is_terminal(),
            phases: plan.phases.iter().map(|p| (p.start, p.name.clone(), p.rate)).collect(),
        }
    }

    fn line(&self, at: Duration, second: &LiveTotals, cpu: f64) {
        let phase = self
            .phases
            .iter()
            .rev()
            .find(|(start, ..)| at > *start)
            .map(|(_, name, rate)| format!("{name} @ {rate:.0}/s"))
            .unwrap_or_else(|| "draining".to_string());
        let text = format!(
            "[{:>4}s] {phase:<20} sent {:>7}/s  ok {:>7}/s  errors {:>5}  in-flight {:>5}  conns {:>5}  cpu {:>3.0}%",
            at.as_secs(),
            second.sent,
            second.ok,
            second.errors,
            second.in_flight,
            second.open,
            cpu
        );
        let mut out = std::io::stdout().lock();
        if self.tty {
            let _ = write!(out, "\r{text}\x1b[K");
        } else {
            let _ = writeln!(out, "{text}");
        }
        let _ = out.flush();
    }

    /// A line that stays on screen (an event, not progress).
    fn note(&self, text: &str) {
        let mut out = std::io::stdout().lock();
        let _ = if self.tty { writeln!(out, "\r{text}\x1b[K") } else { writeln!(out, "{text}") };
        let _ = out.flush();
    }

    fn finish(&self) {
        if self.tty {
            println!();
        }
    }
}

fn probe_summary(probes: Option<&Probes>, reason: Option<String>) -> ProbeSummary {
    let Some(p) = probes else {
        return ProbeSummary { available: false, unavailable_reason: reason, ..Default::default() };
    };
    let r = match p.readings() {
        Ok(r) => r,
        Err(e) => {
            return ProbeSummary {
                available: false,
                unavailable_reason: Some(format!("reading probe maps failed: {}", crate::error::one_line(&e))),
                ..Default::default()
            };
        }
    };
    // A probe that did not run reads as null, never as a measured zero; `availability` says
    // why it did not.
    let ok = |name: &str| r.availability.get(name).is_some_and(|v| v == "ok");
    let run_queue = |h: &crate::probes::RunqueueUs| summary::RunQueueUs {
        p50: h.p50.unwrap_or(0.0),
        p99: h.p99.unwrap_or(0.0),
        max: h.max.unwrap_or(0.0),
        count: h.count,
    };
    ProbeSummary {
        available: true,
        unavailable_reason: None,
        connect_ms: ok("connect_latency").then(|| summary::ConnectMs {
            p50: r.connect_ms.p50.unwrap_or(0.0),
            p99: r.connect_ms.p99.unwrap_or(0.0),
            max: r.connect_ms.max.unwrap_or(0.0),
            count: r.connect_ms.count,
            failed: r.connect_ms.failed,
        }),
        syn_retransmits: ok("syn_retransmits").then_some(r.syn_retransmits),
        resets: (ok("resets_received") || ok("resets_sent"))
            .then_some(summary::Resets { sent: r.resets.sent, received: r.resets.received }),
        time_wait: ok("time_wait").then(|| summary::TimeWait {
            entries: r.time_wait.entries,
            max_live: r.time_wait.max_live.unwrap_or(0),
            host_max_live: r.time_wait.host_max_live,
        }),
        ephemeral_ports_max_ratio: ok("time_wait").then_some(r.ephemeral_ports_max_ratio).flatten(),
        host_ephemeral_ports_max_ratio: r.host_ephemeral_ports_max_ratio,
        tls_handshakes: ok("tls_handshakes").then(|| r.tls_handshakes.completed()),
        tls_handshake_ms: ok("tls_handshakes").then(|| {
            let t = &r.tls_handshakes;
            summary::ProbeHandshakeMs {
                p50: t.histogram.p50_ms().unwrap_or(0.0),
                p99: t.histogram.p99_ms().unwrap_or(0.0),
                max: t.histogram.max_ms().unwrap_or(0.0),
                count: t.completed(),
                resumed: t.resumed,
                failed: t.failed,
                started: t.started,
            }
        }),
        runqueue_us: ok("runqueue").then(|| run_queue(&r.runqueue_us)),
        runqueue_other_us: ok("runqueue").then(|| run_queue(&r.runqueue_other_us)),
        tcp_states: ok("tcp_states").then(|| r.tcp_states.clone()),
        lost: Some(r.lost),
        retransmits: ok("syn_retransmits").then_some(r.retransmits),
        drops: ok("drops").then(|| r.drops.clone()),
        lost_by_reason: Some(r.lost_by_reason.clone()),
        loss_share: Some(r.loss_share),
        availability: Some(r.availability.clone()),
        series: p.series().cloned().collect(),
    }
}

pub(crate) fn write_json(path: &Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value).context("cannot encode summary")?;
    fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

fn default_out_dir() -> PathBuf {
    let stamp = rfc3339(SystemTime::now()).replace(':', "");
    PathBuf::from("out").join(stamp)
}

/// UTC time as RFC 3339 (`2026-11-30T08:16:33Z`), without a date crate.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// A memory figure of /proc/self/status (`VmRSS:`, `VmHWM:`), in MiB.
fn proc_status_mib(key: &str) -> Option<f64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kib: f64 = line[key.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some((kib / 1024.0 * 100.0).round() / 100.0)
}

/// Let the pool use every descriptor the hard limit allows.
pub(crate) fn raise_nofile_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_utc() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_026_593);
        assert_eq!(rfc3339(t), "2026-11-30T08:16:33Z");
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00Z");
    }
}
