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
use crate::cli::{Cli, Command, RunArgs};
use crate::engine::{self, Clock, Live, ShardConfig, ShardResult};
use crate::probes::Probes;
use crate::record::ShardRecord;
use crate::health::Sampler;
use crate::report::summary::{self, HealthSummary, ProbeSummary};
use crate::report::text;
use crate::scenario::{Plan, Spec, Target};
use crate::schedule::ShardSchedule;
use crate::target::{self, TargetConfig};

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
    }
}

fn run_load(args: &RunArgs) -> anyhow::Result<Outcome> {
    let spec = Spec::from_run_args(args)?;
    raise_nofile_limit();

    // The demo (no URL): the built-in target inside this process.
    let builtin = match spec.target {
        Target::BuiltIn => {
            let cfg = TargetConfig {
                listen: "127.0.0.1:0".parse().expect("static address"),
                delay: Duration::ZERO,
                workers: None,
                stall: None,
                threads: 1,
            };
            Some(target::spawn(cfg).context("cannot start the built-in target")?)
        }
        Target::Url(_) => None,
    };
    let url = match (&spec.target, &builtin) {
        (Target::Url(u), _) => u.clone(),
        (Target::BuiltIn, Some(t)) => format!("http://{}/", t.addr),
        (Target::BuiltIn, None) => unreachable!("built-in target started above"),
    };
    let plan = Plan::resolve(&spec, &url)?;
    let out_dir = plan.out.clone().unwrap_or_else(default_out_dir);
    fs::create_dir_all(&out_dir).with_context(|| format!("cannot create output directory {}", out_dir.display()))?;

    let (probes, probe_reason) = if plan.probes {
        match Probes::start(std::process::id()) {
            Ok(p) => (Some(p), None),
            Err(e) => {
                let why = crate::error::one_line(&e);
                eprintln!("loader: probes unavailable: {why}");
                (None, Some(why))
            }
        }
    } else {
        (None, Some("disabled with --no-probes".to_string()))
    };

    if builtin.is_some() {
        println!("loader: no --url given: running the built-in demo against the built-in target at {url}");
    }
    println!(
        "loader: {} phases, {:.0}s, {} connections on {} shard thread(s) → {}",
        plan.phases.len(),
        plan.duration().as_secs_f64(),
        plan.connections,
        plan.threads,
        plan.target.url
    );

    let stop = Arc::new(AtomicBool::new(false));
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&interrupted)).context("cannot install signal handler")?;
    }

    let started_at = rfc3339(SystemTime::now());
    let run = execute(&plan, &stop, &interrupted)?;

    let probes_summary = probe_summary(probes.as_ref(), probe_reason);
    drop(probes);
    if let Some(t) = builtin {
        t.stop();
    }

    let was_interrupted = interrupted.load(Ordering::Relaxed);
    let summary = summary::build(&summary::Inputs {
        plan: &plan,
        record: &run.record,
        interrupted: was_interrupted,
        elapsed_s: run.elapsed.as_secs_f64(),
        started_at,
        probes: probes_summary,
        cpu: &run.cpu,
        rss_mib: (run.rss_mib.0, run.rss_mib.1, proc_status_mib("VmHWM:")),
        health: run.health.clone(),
    });
    print!("\n{}", text::render(&summary));
    crate::report::hdr::write(&out_dir.join("latency.hlog"), &plan, &run.record, run.started)
        .context("cannot write the HDR interval log")?;
    let path = out_dir.join("summary.json");
    write_json(&path, &summary)?;
    println!("summary: {}", path.display());
    Ok(if was_interrupted { Outcome::Interrupted } else { Outcome::Passed })
}

/// What the shards measured, merged, and the loader's CPU per second.
struct Executed {
    record: ShardRecord,
    elapsed: Duration,
    cpu: Vec<f64>,
    /// Resident memory at the first second and at the end.
    rss_mib: (Option<f64>, Option<f64>),
    /// Wall-clock time of the run's zero instant.
    started: SystemTime,
    /// `/proc` and cgroup health, per second.
    health: HealthSummary,
}

/// Start one thread per shard, show progress each second, merge when they end.
fn execute(plan: &Plan, stop: &Arc<AtomicBool>, interrupted: &Arc<AtomicBool>) -> anyhow::Result<Executed> {
    let windows: Vec<_> = plan.phases.iter().map(|p| p.window()).collect();
    let seconds = (plan.duration() + plan.timeout).as_secs() as usize + 2;
    let clock = Clock::new(Instant::now() + POOL_OPEN_GRACE);
    let started = SystemTime::now() + POOL_OPEN_GRACE;
    let requests = Arc::new(engine::RequestTable {
        bytes: plan.requests.iter().map(|r| r.bytes.clone().into_boxed_slice()).collect(),
        head: plan.requests.iter().map(|r| r.head).collect(),
        mix: plan.mix(),
    });
    let peak_rate = plan.phases.iter().map(|p| p.rate).fold(0.0, f64::max);
    let mut lives = Vec::new();
    let mut handles = Vec::new();
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
            wake_window: plan.wake_window.unwrap_or_else(|| engine::wake_window(peak_rate / plan.threads as f64)),
        };
        let handle = thread::Builder::new()
            .name(format!("loader-shard-{shard}"))
            .spawn(move || {
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() };
                cfg.live.tid.store(tid as u64, Ordering::Relaxed);
                engine::run_shard(cfg)
            })
            .context("cannot start shard thread")?;
        handles.push(handle);
    }

    let progress = Progress::new(plan);
    let mut cpu = CpuMeter::new(&lives);
    let mut health = Sampler::new(clock.start());
    let mut tick = clock.start();
    let mut cpu_samples = Vec::new();
    let mut rss_start = None;
    while handles.iter().any(|h| !h.is_finished()) {
        if interrupted.load(Ordering::Relaxed) {
            stop.store(true, Ordering::Relaxed);
        }
        let now = Instant::now();
        if now >= tick + Duration::from_secs(1) {
            tick += Duration::from_secs(1);
            let pct = cpu.sample();
            health.sample();
            if tick > clock.start() {
                cpu_samples.push(pct);
                if rss_start.is_none() {
                    rss_start = proc_status_mib("VmRSS:");
                }
            }
            progress.line(&lives, tick.saturating_duration_since(clock.start()), pct);
        }
        thread::sleep(Duration::from_millis(20));
    }
    progress.finish();
    let elapsed = clock.start().elapsed();

    let mut merged: Option<ShardRecord> = None;
    for (shard, h) in handles.into_iter().enumerate() {
        let ShardResult { record, .. } =
            h.join().map_err(|_| engine::EngineError::Thread(shard))?.with_context(|| format!("shard {shard}"))?;
        match &mut merged {
            None => merged = Some(record),
            Some(m) => m.merge(&record),
        }
    }
    let record = merged.expect("at least one shard");
    let elapsed = elapsed.min(plan.duration() + plan.timeout);
    let rss_end = proc_status_mib("VmRSS:");
    let health = HealthSummary { peaks: health.peaks(), series: health.series };
    Ok(Executed { record, elapsed, cpu: cpu_samples, rss_mib: (rss_start, rss_end), started, health })
}

/// Per-second CPU of the shard threads, from /proc/self/task/TID/stat.
struct CpuMeter {
    tids: Vec<Arc<Live>>,
    last: Option<(Instant, u64)>,
    ticks_per_s: f64,
}

impl CpuMeter {
    fn new(lives: &[Arc<Live>]) -> Self {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        CpuMeter { tids: lives.to_vec(), last: None, ticks_per_s: if hz > 0 { hz as f64 } else { 100.0 } }
    }

    fn total_ticks(&self) -> u64 {
        self.tids
            .iter()
            .filter_map(|l| {
                let tid = l.tid.load(Ordering::Relaxed);
                let stat = fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
                // Fields after the ")" that closes the command name: utime is 14th, stime 15th.
                let rest = &stat[stat.rfind(')')? + 2..];
                let f: Vec<&str> = rest.split_whitespace().collect();
                Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
            })
            .sum()
    }

    /// CPU since the previous sample, percent of one core per shard.
    fn sample(&mut self) -> f64 {
        let now = Instant::now();
        let ticks = self.total_ticks();
        let pct = match self.last {
            Some((at, before)) => {
                let secs = now.duration_since(at).as_secs_f64().max(1e-3);
                (ticks.saturating_sub(before) as f64 / self.ticks_per_s) / secs / self.tids.len() as f64 * 100.0
            }
            None => 0.0,
        };
        self.last = Some((now, ticks));
        pct
    }
}

/// The live progress display: a status line on a terminal, plain lines otherwise.
struct Progress {
    tty: bool,
    phases: Vec<(Duration, String, f64)>,
    last: std::cell::Cell<(u64, u64, u64)>,
}

impl Progress {
    fn new(plan: &Plan) -> Self {
        Progress {
            tty: !plan.plain && std::io::stdout().is_terminal(),
            phases: plan.phases.iter().map(|p| (p.start, p.name.clone(), p.rate)).collect(),
            last: std::cell::Cell::new((0, 0, 0)),
        }
    }

    fn line(&self, lives: &[Arc<Live>], at: Duration, cpu: f64) {
        let sum = |f: fn(&Live) -> u64| lives.iter().map(|l| f(l)).sum::<u64>();
        let sent = sum(|l| l.sent.load(Ordering::Relaxed));
        let ok = sum(|l| l.ok.load(Ordering::Relaxed));
        let errors = sum(|l| l.errors.load(Ordering::Relaxed));
        let in_flight = sum(|l| l.in_flight.load(Ordering::Relaxed));
        let open = sum(|l| l.open_connections.load(Ordering::Relaxed));
        let (ps, po, pe) = self.last.replace((sent, ok, errors));
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
            sent - ps,
            ok - po,
            errors - pe,
            in_flight,
            open,
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
    match p.tcp_states() {
        Ok(states) => {
            ProbeSummary { available: true, tcp_states: Some(states), lost: Some(p.lost()), ..Default::default() }
        }
        Err(e) => ProbeSummary {
            available: false,
            unavailable_reason: Some(format!("reading probe maps failed: {}", crate::error::one_line(&e))),
            ..Default::default()
        },
    }
}

fn write_json(path: &Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value).context("cannot encode summary")?;
    fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

fn default_out_dir() -> PathBuf {
    let stamp = rfc3339(SystemTime::now()).replace(':', "");
    PathBuf::from("out").join(stamp)
}

/// UTC time as RFC 3339 (`2026-11-30T08:16:33Z`), without a date crate.
fn rfc3339(t: SystemTime) -> String {
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
fn raise_nofile_limit() {
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
