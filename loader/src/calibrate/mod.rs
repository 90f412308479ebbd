//! `loader calibrate`: measure this machine's own ceiling and write its certificate; and the
//! lookup `loader run` does to compare a run with it.
//!
//! Calibration starts a target in a child process (`target::child` says why not a thread):
//! by default the sink (`loader target --sink`, `target/sink.rs`), a responder cheaper per
//! request than the loader, so that on a machine where both share the cores the loader is the
//! one that saturates and the figure is its ceiling, not the target's. The full built-in
//! target serves instead when its shaping hooks are asked for, or with `--full-target`.
//! It is pinned apart from the loader: the target on the last CPU this process may use, the
//! shards on the others (with one CPU nothing is pinned and the figure is of the pair).
//!
//! It then runs a coarse step plan — rates `start × 1.25^k` up to `--max-rate`, short holds,
//! probes on — through the same measuring core as `loader run` (`measure::measure`), and
//! judges each step (`judge.rs`): the loader failed when it stopped keeping its schedule or
//! ran out of CPU headroom, the target failed when goodput fell behind while the loader was on
//! time. Between the last good coarse step and the first confirmed failure it then runs
//! [`BISECTIONS`] bisections of [`PROBES`] probes each (`bisect.rs`), every probe a run of its
//! own at one rate; the figure is their median, `spread_pct` how far they scattered. The
//! certificate (`certificate.rs`) states a ceiling only when the loader was the limit of most
//! bisections; otherwise the figure is a lower bound, and it says what limited it. It records
//! the loader's CPU cost per request at the ceiling, and the target's, measured alike (process
//! CPU time over each probe's run ÷ its requests).
//!
//! It does not own the run machinery (measure/), the step verdicts' limits (`judge.rs`), or the
//! `cert_ceiling` verdict reason (verdict/).

mod bisect;
mod certificate;
mod for_run;
mod judge;
mod steps;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use anyhow::Context as _;

pub use bisect::{BISECTIONS, PROBES};
use bisect::{Bisection, median, spread_pct};
pub use certificate::{
    AtCeiling, Certificate, Certified, DIR_ENV, Fingerprint, Found, RequestShape, SCHEMA, SYSTEM_DIR, Setup,
};
pub use for_run::{ForRun, for_run, machines_for};
pub use judge::{LimitedBy, Side, StepCall, StepFigures};

use crate::Outcome;
use crate::cli::{CalibrateArgs, RunArgs};
use crate::health::{affinity, process_cpu_s};
use crate::probes::Probes;
use crate::scenario::{Plan, Spec};
use crate::verdict::Limits;

/// Each step's rate ÷ the previous one.
const STEP_FACTOR: f64 = 1.25;
/// Pause before each probe (the target drains what the run before left queued).
const PASS_PAUSE: std::time::Duration = std::time::Duration::from_millis(500);
/// Runs of one probe the host's steal may spoil before the next one counts whatever it says.
const STEAL_RERUNS_PER_PROBE: usize = 2;
/// Probes of one calibration the host's steal may send back, in all: on a host that steals
/// all the time, the calibration ends and says so rather than running three times as long.
const STEAL_RERUNS: usize = 6;
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
    // The sink unless the full target's shaping is asked for.
    let sink = !args.full_target && shaping.is_none();
    let mut flags = vec!["--threads".to_string(), args.target_threads.to_string()];
    if sink {
        flags.push("--sink".into());
    }
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

    let pass = Pass { url: &url, args, threads, target_pid: builtin.pid() };
    let plan = pass.plan(&rates, None)?;
    let hold_s = plan
        .phases
        .iter()
        .find(|p| p.kind == crate::scenario::PhaseKind::Hold)
        .map_or(0.0, |p| p.duration.as_secs_f64());

    println!(
        "loader calibrate: {} at {url} ({} thread(s){}), loader {threads} shard(s){}, {} connections",
        if sink { "sink target" } else { "built-in target" },
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

    let interrupted = crate::measure::signals::install()?;
    // Then bisect between the last good coarse step and its first confirmed failure, several
    // times over (`bisect.rs`): the figure is their median, and they say how well it repeats.
    // Probes spoiled by the host's steal, run again and not counted.
    let mut rerun: Vec<StepCall> = Vec::new();
    let measured = pass.run(&plan, &interrupted, None).and_then(|(coarse, probes_on)| {
        let finding = judge::find(&coarse);
        let mut bisections = Vec::new();
        let (Some(good), Some(bad)) = (finding.last_good, finding.failed) else {
            return Ok((coarse, bisections, probes_on));
        };
        // One coarse step past the failure (its rate is the first probe), within --max-rate.
        let failed_rps = coarse[bad].figures.offered_rps;
        let top = (failed_rps * STEP_FACTOR).min(args.max_rate.max(failed_rps));
        println!(
            "\nloader calibrate: {BISECTIONS} bisections between {:.0} and {top:.0} req/s, {PROBES} probes of {} each",
            coarse[good].figures.offered_rps, args.step_hold
        );
        for k in 1..=BISECTIONS {
            let mut b = Bisection::new(&coarse[good], top);
            'probe: while let Some(rate) = b.next_rate() {
                let name = format!("bisect {k}.{}", b.probes.len() + 1);
                // A probe the host's steal spoiled is run again, not counted (bounded).
                for attempt in 0..=STEAL_RERUNS_PER_PROBE {
                    if interrupted.load(Ordering::Relaxed) {
                        return Ok((coarse, bisections, probes_on));
                    }
                    // The previous run ended at or past saturation: let the target drain.
                    std::thread::sleep(PASS_PAUSE);
                    let (calls, _) = pass.run(&pass.plan(&[rate], Some(rate))?, &interrupted, Some(&name))?;
                    let Some(call) = calls.into_iter().next() else { break 'probe };
                    println!("{}", render_step(&call));
                    match judge::spoiled_by_steal(&call) {
                        Some(ms) if attempt < STEAL_RERUNS_PER_PROBE && rerun.len() < STEAL_RERUNS => {
                            println!(
                                "  (the host took {ms:.0} ms of a loader core in one second of it (steal): not counted; once more)"
                            );
                            rerun.push(call);
                        }
                        _ => {
                            b.record(call);
                            break;
                        }
                    }
                }
            }
            bisections.push(b);
        }
        Ok((coarse, bisections, probes_on))
    });
    builtin.stop();
    let (coarse, bisections, probes_on) = measured?;
    if interrupted.load(Ordering::Relaxed) {
        eprintln!("loader calibrate: interrupted; no certificate written");
        return Ok(Outcome::Interrupted);
    }

    let finding = judge::find(&coarse);
    let date = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let hostname = certificate::hostname();
    let figures: Vec<f64> = bisections.iter().map(Bisection::figure).collect();
    let median_rps = median(&figures);
    let median_one = median_rps.and_then(|m| bisections.iter().find(|b| b.figure() == m));
    let (limited_by, ceiling, mut lower_bound, mut at, spread) = match median_rps {
        Some(m) => {
            let coarse_side = finding.failed.map_or(Side::Loader, |i| coarse[i].side);
            let side = bisect::limiting_side(&bisections, coarse_side);
            // The certified step: the median bisection's best probe (its coarse floor when
            // none of its probes passed).
            let at = median_one
                .and_then(|b| b.best.as_ref())
                .map(|c| &c.figures)
                .or(finding.last_good.map(|i| &coarse[i].figures));
            let spread = Some(spread_pct(&figures, m));
            // A failure no higher step confirmed (the last step that ran), which most
            // bisections below it never met: a disturbance, and the figure only a lower bound.
            let unconfirmed = finding.failed == Some(coarse.len() - 1)
                && bisections.iter().filter(|b| b.failed_side.is_none()).count() * 2 > bisections.len();
            if unconfirmed {
                (LimitedBy::MaxRate, None, Some(m.round()), at, spread)
            } else if side == Side::Loader {
                (LimitedBy::Loader, Some(m.round()), None, at, spread)
            } else {
                (LimitedBy::Target, None, Some(m.round()), at, spread)
            }
        }
        None => (
            finding.limited_by,
            finding.ceiling_rps(&coarse),
            finding.lower_bound_rps(&coarse),
            finding.last_good.map(|i| &coarse[i].figures),
            None,
        ),
    };
    // Every probe that ran, in order: the table shows the blips and what came after a failure.
    let steps: Vec<StepCall> =
        coarse.iter().cloned().chain(bisections.iter().flat_map(|b| b.probes.iter().cloned())).collect();
    // Target-limited without a bisection (the first step already failed on the target's
    // side): the open-loop evidence of the steps that ran.
    if limited_by == LimitedBy::Target
        && bisections.is_empty()
        && let Some(best) = judge::highest_on_time(&steps)
    {
        lower_bound = Some(judge::on_schedule(best).round());
        at = Some(&best.figures);
    }
    let figure = ceiling.or(lower_bound);
    // The failure named: the median bisection's lowest failed probe, else the coarse one.
    let failed = median_one
        .and_then(|b| {
            b.probes
                .iter()
                .filter(|p| p.side != Side::Ok)
                .min_by(|a, b| a.figures.offered_rps.total_cmp(&b.figures.offered_rps))
        })
        .or(finding.failed.map(|i| &coarse[i]));
    let detail = describe(limited_by, failed, figure, at.map(|f| f.step.as_str()), &figures, spread);
    // Both ends' process CPU per request: measured over one-step runs (the probes), so when
    // the certified step is a coarse one, of the probe nearest its rate (one that failed just
    // above it, when none passed: the cost per request is measured all the same).
    let cost = at.filter(|f| f.loader_process_us_per_request.is_some()).or_else(|| {
        let rate = at.map_or(0.0, |f| f.offered_rps);
        bisections
            .iter()
            .flat_map(|b| &b.probes)
            .filter(|p| p.figures.loader_process_us_per_request.is_some())
            .map(|p| &p.figures)
            .min_by(|a, b| (a.offered_rps - rate).abs().total_cmp(&(b.offered_rps - rate).abs()))
    });
    let cert = Certificate {
        schema: SCHEMA.into(),
        date: date.clone(),
        hostname: hostname.clone(),
        limited_by,
        ceiling_rps: ceiling,
        lower_bound_rps: lower_bound,
        spread_pct: spread,
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
            cpu_us_per_request: at.and_then(|f| f.shard_us_per_request(plan.threads)),
            loader_process_us_per_request: cost.and_then(|f| f.loader_process_us_per_request),
            target_process_us_per_request: cost.and_then(|f| f.target_process_us_per_request),
            nic_tx_mbps: cost.and_then(|f| f.nic_tx_mbps),
            nic_device: cost.and_then(|f| f.nic_device.clone()),
        },
        setup: Setup {
            connections: plan.connections,
            threads: plan.threads,
            loader_cpus: loader_cpus.clone(),
            target: Some(if sink { "sink" } else { "builtin" }.into()),
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
            bisections_rps: figures.iter().map(|f| f.round()).collect(),
            rerun_for_steal: rerun.iter().map(|c| c.figures.step.clone()).collect(),
            refined_rps: Vec::new(),
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
    /// The target's process, whose CPU time a one-step run measures beside the loader's.
    target_pid: Option<u32>,
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

    /// Run `plan` with fresh probes and judge its steps (`step k`, or `name` for a plan of
    /// one step); also whether the probes ran.
    fn run(
        &self,
        plan: &Plan,
        interrupted: &Arc<AtomicBool>,
        name: Option<&str>,
    ) -> anyhow::Result<(Vec<StepCall>, bool)> {
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
        // Both processes' CPU time over the run itself (the probes' loading is not the run's).
        let cpu = || (process_cpu_s(std::process::id()), self.target_pid.and_then(process_cpu_s));
        let before = cpu();
        let mut summary =
            crate::measure::measure(plan, interrupted, probes.as_mut(), probe_reason, None, Default::default())?;
        let after = cpu();
        crate::measure::conclude(&mut summary, plan)?;
        let runqueue_limit = Limits::default().runqueue_p99_ms;
        let run_requests: u64 = summary.phases.iter().map(|p| p.sent).sum();
        let calls = steps::figures(&summary)
            .into_iter()
            .map(|mut f| {
                f.run_requests = run_requests;
                if let Some(n) = name {
                    // One step: the run's CPU is the step's.
                    f.step = n.to_string();
                    let per_request = |b: Option<f64>, a: Option<f64>| {
                        Some(((a? - b?) / run_requests.max(1) as f64 * 1e6 * 100.0).round() / 100.0)
                    };
                    f.loader_process_us_per_request = per_request(before.0, after.0);
                    if let Some(n) = &summary.health.nic {
                        f.nic_tx_mbps = Some((n.tx_bytes_max_per_s * 8.0 / 1e6 * 100.0).round() / 100.0);
                        f.nic_device = Some(n.device.clone());
                    }
                    f.target_process_us_per_request = per_request(before.1, after.1);
                }
                judge::judge_step(&f, runqueue_limit)
            })
            .collect();
        Ok((calls, probes_on))
    }
}

/// One sentence on what the certificate's figure means (`failed`: the coarse failure; `from`:
/// the step it came from; `figures`: the bisections' figures, `spread` their spread).
fn describe(
    limited_by: LimitedBy,
    failed: Option<&StepCall>,
    figure: Option<f64>,
    from: Option<&str>,
    figures: &[f64],
    spread: Option<f64>,
) -> String {
    let why = failed.map_or(String::new(), |c| {
        format!(" at {} ({:.0}/s): {}", c.figures.step, c.figures.offered_rps, c.why.join("; "))
    });
    let of = match spread {
        Some(sp) => format!(
            ", the median of {} bisections ({}; each within {sp:.1} % of it)",
            figures.len(),
            figures.iter().map(|f| format!("{f:.0}")).collect::<Vec<_>>().join(", ")
        ),
        None => String::new(),
    };
    match (limited_by, figure) {
        (LimitedBy::Loader, Some(r)) => {
            format!(
                "the loader kept its schedule up to {r:.0} req/s{of}, and fell behind above it ({}): {r:.0} req/s is its certified ceiling",
                why.trim_start()
            )
        }
        (LimitedBy::Target, Some(r)) => format!(
            "the target saturated first{why}; the loader sent {r:.0} req/s without falling behind itself (at {}{of}), so that is only a lower bound of the loader's ceiling, not a ceiling",
            from.unwrap_or("the last passing step")
        ),
        (LimitedBy::MaxRate, Some(r)) => match failed {
            Some(c) => format!(
                "the last step, {} ({:.0}/s), failed ({}) but no bisection below it did{of}: a disturbance, not a limit; {r:.0} req/s is a lower bound of the loader's ceiling, not a ceiling",
                c.figures.step,
                c.figures.offered_rps,
                c.why.join("; ")
            ),
            None => format!(
                "every step up to --max-rate passed; {r:.0} req/s is a lower bound of the loader's ceiling, not a ceiling"
            ),
        },
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
    let _ = writeln!(
        out,
        "{:<11} {:>10} {:>9} {:>9} {:>7} {:>9} {:>8} {:>16}  result",
        "step", "offered/s", "sent/s", "ok/s", "cpu p95", "runq p99", "lag p99", "late(free/busy)"
    );
    for s in &c.steps {
        let _ = writeln!(out, "{}", render_step(s));
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
    let a = &c.at_ceiling;
    if let Some(us) = a.cpu_us_per_request {
        let _ = write!(out, "loader CPU per request at that rate: {us:.2} µs (shards)");
        if let (Some(l), Some(t)) = (a.loader_process_us_per_request, a.target_process_us_per_request) {
            let _ = write!(
                out,
                "; process CPU per request: loader {l:.2} µs, target {t:.2} µs ({:.2}×)",
                t / l.max(f64::MIN_POSITIVE)
            );
        }
        let _ = writeln!(out);
    }
    if !c.setup.rerun_for_steal.is_empty() {
        let _ = writeln!(
            out,
            "run again, not counted (behind while the VM's host stole a loader core): {}; a host that steals this often is no place to certify a machine",
            c.setup.rerun_for_steal.join(", ")
        );
    }
    out
}

/// One step's row of the table.
fn render_step(s: &StepCall) -> String {
    let f = &s.figures;
    format!(
        "{:<11} {:>10.0} {:>9.0} {:>9.0} {:>7} {:>9} {:>8.2} {:>16}  {}",
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
    )
}

fn join(cpus: &[usize]) -> String {
    cpus.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
}
