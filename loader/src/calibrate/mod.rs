//! `loader calibrate`: measure this machine's own ceiling and write its certificate; and the
//! lookup `loader run` does to compare a run with it.
//!
//! Calibration starts the built-in target (a child `loader target`; `child` below says why
//! not a thread) pinned apart from the loader: the target on the last CPU this process may
//! use, the shards on the others (with one CPU nothing is pinned and the figure is of the
//! pair). It then runs a step plan — rates `start × 1.25^k` up to `--max-rate`, short holds,
//! probes on — through the same measuring core as `loader run` (`measure::measure`), and judges
//! each step (`judge.rs`): the loader failed when it stopped keeping its schedule, the target
//! failed when goodput fell behind while the loader was on time. A second pass steps ×1.05
//! from the last good step to one coarse step past the failed one, so the figure is known to
//! 5 % and a failure that was only a hiccup is found out. The certificate (`certificate.rs`)
//! states a ceiling only when the loader was the limit. When the target failed first, the
//! figure is a lower bound: the highest rate the loader sent in either pass without being at
//! fault itself (`judge::highest_on_time`), and it says what limited it.
//!
//! On a 2-core machine the target gets one runtime thread on CPU 1 and the loader one shard on
//! CPU 0. Giving the target a second thread would put it on the loader's core, and then every
//! figure would measure the two fighting over it; so a fast loader on a small machine gets a
//! target-limited (lower-bound) certificate, and says so. `--target-threads` changes that
//! choice knowingly.
//!
//! It does not own the run machinery (measure/), the step verdicts' limits (`judge.rs`), or the
//! `cert_ceiling` verdict reason (verdict/).

mod certificate;
mod for_run;
mod judge;
mod steps;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use anyhow::Context as _;

pub use certificate::{
    AtCeiling, Certificate, Certified, DIR_ENV, Fingerprint, Found, RequestShape, SCHEMA, SYSTEM_DIR, Setup,
};
pub use for_run::{ForRun, for_run, machines_for};
pub use judge::{LimitedBy, Side, StepCall, StepFigures};

use crate::Outcome;
use crate::cli::{CalibrateArgs, RunArgs};
use crate::health::affinity;
use crate::probes::Probes;
use crate::scenario::{Plan, Spec};
use crate::verdict::Limits;

/// Each step's rate ÷ the previous one.
const STEP_FACTOR: f64 = 1.25;
/// Step factor of the refining pass between the last good and the first failed step.
const FINE_FACTOR: f64 = 1.05;
/// Pause between the passes (the target drains what the first pass left queued).
const PASS_PAUSE: std::time::Duration = std::time::Duration::from_secs(2);
/// Warm-up at the first rate before the first step (pools connect, caches warm).
const WARMUP: &str = "1s";

/// `loader calibrate`.
pub fn calibrate(args: &CalibrateArgs) -> anyhow::Result<Outcome> {
    if !(args.start_rate > 0.0 && args.start_rate.is_finite()) {
        return Err(crate::error::InputError::new("--start-rate", "must be a positive rate").into());
    }
    let rates = judge::step_rates(args.start_rate, STEP_FACTOR, args.max_rate);
    if rates.is_empty() {
        return Err(crate::error::InputError::new("--max-rate", "must be at least --start-rate").into());
    }
    if args.target_threads == 0 {
        return Err(crate::error::InputError::new("--target-threads", "must be at least 1").into());
    }
    crate::measure::raise_nofile_limit();
    let fingerprint = Fingerprint::of_this_machine();

    // Pin: new threads inherit the creating thread's CPU mask, so the target is spawned while
    // this thread sits on the target's CPU, and the shards after it moves to the loader's.
    let cpus = affinity::allowed().unwrap_or_default();
    let (target_cpu, loader_cpus) = match cpus.split_last() {
        Some((&last, rest)) if !rest.is_empty() => (Some(last), rest.to_vec()),
        _ => (None, Vec::new()),
    };
    let shaping = match (&args.target_delay, args.target_workers) {
        (None, None) => None,
        (d, w) => {
            Some(format!("delay {}, workers {}", d.as_deref().unwrap_or("0"), w.map_or("∞".into(), |w| w.to_string())))
        }
    };
    if let Some(d) = &args.target_delay {
        crate::scenario::parse_duration("--target-delay", d)?;
    }
    if let Some(cpu) = target_cpu {
        affinity::current_thread(&[cpu]).context("cannot pin the built-in target")?;
    }
    let mut flags = vec!["--threads".to_string(), args.target_threads.to_string()];
    if let Some(d) = &args.target_delay {
        flags.extend(["--delay".to_string(), d.clone()]);
    }
    if let Some(w) = args.target_workers {
        flags.extend(["--workers".to_string(), w.to_string()]);
    }
    let spawned = crate::target::child::spawn(&flags);
    if !loader_cpus.is_empty() {
        affinity::current_thread(&loader_cpus).context("cannot pin the loader")?;
    }
    let builtin = spawned.context("cannot start the built-in target")?;
    let url = format!("http://{}/", builtin.addr);
    let threads = args.threads.unwrap_or(loader_cpus.len().max(1));

    let pass = Pass { url: &url, args, threads };
    let plan = pass.plan(&rates, None)?;
    let hold_s = plan
        .phases
        .iter()
        .find(|p| p.kind == crate::scenario::PhaseKind::Hold)
        .map_or(0.0, |p| p.duration.as_secs_f64());

    println!(
        "loader calibrate: built-in target at {url} ({} thread(s){}), loader {threads} shard(s){}, {} connections",
        args.target_threads,
        target_cpu.map_or(String::new(), |c| format!(" on CPU {c}")),
        if loader_cpus.is_empty() {
            " (not pinned: one CPU)".to_string()
        } else {
            format!(" on CPU {}", join(&loader_cpus))
        },
        args.connections,
    );
    println!(
        "loader calibrate: {} steps from {:.0} to {:.0} req/s (×{STEP_FACTOR}), {} each",
        rates.len(),
        rates[0],
        rates[rates.len() - 1],
        args.step_hold
    );

    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&interrupted)).context("cannot install signal handler")?;
    }
    // Second pass: ×1.05 steps from the last good coarse step to one coarse step past the
    // failed one, so the figure is known to 5 % instead of 25 % (repeat calibrations then agree
    // to within that), and a coarse failure that was a hiccup is overruled by higher passes.
    let measured = pass.run(&plan, &interrupted, "step").and_then(|(coarse, probes_on)| {
        let fine_rates = judge::refine_rates(&coarse, FINE_FACTOR, STEP_FACTOR);
        if fine_rates.is_empty() || interrupted.load(Ordering::Relaxed) {
            return Ok((coarse, Vec::new(), fine_rates, probes_on));
        }
        let from = fine_rates[0] / FINE_FACTOR;
        println!("\nloader calibrate: refining from {from:.0} req/s (×{FINE_FACTOR}): {} steps", fine_rates.len());
        // The coarse pass ended past saturation: let the target drain its backlog, and warm
        // the fresh pool at the last good rate.
        std::thread::sleep(PASS_PAUSE);
        let (fine, _) = pass.run(&pass.plan(&fine_rates, Some(from))?, &interrupted, "fine")?;
        Ok((coarse, fine, fine_rates, probes_on))
    });
    builtin.stop();
    let (coarse, fine, fine_rates, probes_on) = measured?;
    if interrupted.load(Ordering::Relaxed) {
        eprintln!("loader calibrate: interrupted; no certificate written");
        return Ok(Outcome::Interrupted);
    }

    let calls = judge::splice(&coarse, &fine);
    let finding = judge::find(&calls);
    let date = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let hostname = certificate::hostname();
    let mut at = finding.last_good.map(|i| &calls[i].figures);
    let mut lower_bound = finding.lower_bound_rps(&calls);
    // Target-limited: the open-loop evidence of both passes, the steps after a refining
    // failure and the target's own failed steps included (the loader sent those on time).
    let stepped: Vec<StepCall> = coarse.iter().chain(&fine).cloned().collect();
    let open_loop = judge::highest_on_time(&stepped);
    // The last good step counts too unless most of its sends waited for a connection.
    if finding.limited_by == LimitedBy::Target
        && let Some(best) = open_loop
    {
        lower_bound = Some(judge::on_schedule(best).round());
        at = Some(&best.figures);
    }
    let figure = finding.ceiling_rps(&calls).or(lower_bound);
    let detail = describe(&finding, &calls, figure, at.map(|f| f.step.as_str()));
    // Every step that ran, in order: the table shows the blips and what came after a failure.
    let steps = stepped.clone();
    let cert = Certificate {
        schema: SCHEMA.into(),
        date: date.clone(),
        hostname: hostname.clone(),
        limited_by: finding.limited_by,
        ceiling_rps: finding.ceiling_rps(&calls),
        lower_bound_rps: lower_bound,
        detail,
        at_ceiling: AtCeiling {
            step: at.map(|f| f.step.clone()),
            offered_rps: at.map(|f| f.offered_rps),
            sent_rps: at.map(|f| f.sent_rps),
            loader_cpu_p95: at.and_then(|f| f.cpu_p95),
            runqueue_p99_us: at.and_then(|f| f.runqueue_p99_us),
            send_lag_p99_ms: at.map(|f| f.send_lag_p99_ms),
            time_wait_max: at.and_then(|f| f.time_wait_max),
            ephemeral_ports_max_ratio: at.and_then(|f| f.ephemeral_ports_max_ratio),
        },
        setup: Setup {
            connections: plan.connections,
            threads: plan.threads,
            loader_cpus: loader_cpus.clone(),
            target_threads: args.target_threads,
            target_cpu,
            request: RequestShape {
                method: plan
                    .requests
                    .first()
                    .and_then(|r| String::from_utf8_lossy(&r.bytes).split(' ').next().map(str::to_string))
                    .unwrap_or_default(),
                path: "/".into(),
                bytes: plan.requests.first().map_or(0, |r| r.bytes.len()),
                keepalive: plan.keepalive,
            },
            step_hold_s: hold_s,
            start_rps: rates[0],
            step_factor: STEP_FACTOR,
            refined_rps: fine_rates,
            saturation_rps: None,
            max_rps: args.max_rate,
            target_shaping: shaping,
            probes: probes_on,
        },
        fingerprint,
        steps,
    };
    print!("\n{}", render(&cert));
    let path = match &args.out {
        Some(p) => p.clone(),
        None => certificate::default_dir().join(certificate::file_name(hostname.as_deref(), &date)),
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    crate::report::write_json(&path, &cert)?;
    println!("certificate: {}", path.display());
    Ok(if figure.is_some() { Outcome::Passed } else { Outcome::Error })
}

/// One stepped run against the built-in target.
struct Pass<'a> {
    url: &'a str,
    args: &'a CalibrateArgs,
    threads: usize,
}

impl Pass<'_> {
    /// The step plan for `rates` (warm-up at `warmup_rate`, else the first rate): built as `loader run` flags would be, so it is the same plan.
    fn plan(&self, rates: &[f64], warmup_rate: Option<f64>) -> anyhow::Result<Plan> {
        let run_args = RunArgs {
            url: Some(self.url.to_string()),
            profile: Some("step".into()),
            steps: Some(rates.to_vec()),
            hold: Some(self.args.step_hold.clone()),
            warmup: Some(WARMUP.into()),
            warmup_rate,
            connections: Some(self.args.connections),
            threads: Some(self.threads),
            no_probes: self.args.no_probes,
            plain: self.args.plain,
            ..RunArgs::default()
        };
        let spec = Spec::from_run_args(&run_args)?;
        Ok(Plan::resolve(&spec, self.url)?)
    }

    /// Run `plan` with fresh probes and judge its steps (named `prefix k`); also whether the
    /// probes ran.
    fn run(&self, plan: &Plan, interrupted: &Arc<AtomicBool>, prefix: &str) -> anyhow::Result<(Vec<StepCall>, bool)> {
        let (mut probes, probe_reason) = if self.args.no_probes {
            (None, Some("disabled with --no-probes".to_string()))
        } else {
            match Probes::start(std::process::id()) {
                Ok(p) => (Some(p), None),
                Err(e) => {
                    let why = crate::error::one_line(&e);
                    eprintln!("loader: probes unavailable: {why} (the run-queue figure will be missing)");
                    (None, Some(why))
                }
            }
        };
        let probes_on = probes.is_some();
        let mut summary =
            crate::measure::measure(plan, interrupted, probes.as_mut(), probe_reason, None, Default::default())?;
        crate::measure::conclude(&mut summary, plan)?;
        let runqueue_limit = Limits::default().runqueue_p99_ms;
        let calls = steps::figures(&summary)
            .into_iter()
            .map(|mut f| {
                f.step = f.step.replacen("step", prefix, 1);
                judge::judge_step(&f, runqueue_limit)
            })
            .collect();
        Ok((calls, probes_on))
    }
}

/// One sentence on what the certificate's figure means (`from`: the step it came from).
fn describe(f: &judge::Finding, calls: &[StepCall], figure: Option<f64>, from: Option<&str>) -> String {
    let failed = f.failed.map(|i| &calls[i]);
    let why = failed.map_or(String::new(), |c| {
        format!(" at {} ({:.0}/s): {}", c.figures.step, c.figures.offered_rps, c.why.join("; "))
    });
    match (f.limited_by, figure) {
        (LimitedBy::Loader, Some(r)) => {
            format!(
                "the loader kept its schedule up to {r:.0} req/s and fell behind{why}: {r:.0} req/s is its certified ceiling"
            )
        }
        (LimitedBy::Target, Some(r)) => format!(
            "the built-in target saturated first{why}; the highest rate the loader sent without falling behind itself was {r:.0} req/s (at {}), so that is only a lower bound of the loader's ceiling, not a ceiling",
            from.unwrap_or("the last passing step")
        ),
        (LimitedBy::MaxRate, Some(r)) => {
            format!(
                "every step up to --max-rate passed; {r:.0} req/s is a lower bound of the loader's ceiling, not a ceiling"
            )
        }
        (side, None) => format!(
            "the first step already failed on the {} side{why}: lower --start-rate",
            if side == LimitedBy::Loader { "loader" } else { "target" }
        ),
    }
}

/// The step table and the finding, for the terminal.
fn render(c: &Certificate) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ =
        writeln!(out, "step       offered/s    sent/s      ok/s  cpu p95  runq p99  lag p99  late(free/busy)  result");
    for s in &c.steps {
        let f = &s.figures;
        let _ = writeln!(
            out,
            "{:<9} {:>10.0} {:>9.0} {:>9.0} {:>7} {:>9} {:>8.2} {:>16}  {}",
            f.step,
            f.offered_rps,
            f.sent_rps,
            f.ok_rps,
            f.cpu_p95.map_or("-".into(), |v| format!("{v:.0}%")),
            f.runqueue_p99_us.map_or("-".into(), |v| format!("{v:.0}µs")),
            f.send_lag_p99_ms,
            format!("{}/{}", f.late_unpooled, f.late_pooled),
            match s.side {
                Side::Ok => "ok".to_string(),
                Side::Loader => format!("LOADER: {}", s.why.join("; ")),
                Side::Target => format!("TARGET: {}", s.why.join("; ")),
            }
        );
    }
    let headline = match (c.ceiling_rps, c.lower_bound_rps) {
        (Some(r), _) => format!("CERTIFIED CEILING: {r:.0} req/s (limited by the loader)"),
        (None, Some(r)) => format!(
            "NO CEILING CERTIFIED: limited by the {}; the loader reached at least {r:.0} req/s (lower bound)",
            if c.limited_by == LimitedBy::Target { "target" } else { "--max-rate" }
        ),
        (None, None) => "NO FIGURE: the first step already failed".to_string(),
    };
    let _ = writeln!(out, "\n{headline}\n{}", c.detail);
    out
}

fn join(cpus: &[usize]) -> String {
    cpus.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
}
