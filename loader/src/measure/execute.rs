//! One thread per shard, the once-a-second loop that watches them (progress, CPU, health,
//! probes, the emergency stop) and the merge of their records when they end.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;

use super::checkpoint::{Checkpoint, Known};
use super::live_log::{Line, LiveLog};
use super::meters::{CpuMeter, LiveTotals, proc_status_mib};
use super::metrics_feed::{self, MetricsFeed};
use super::progress::Progress;
use super::{Executed, POOL_OPEN_GRACE};
use crate::analysis::live::StopReason;
use crate::analysis::{CliffDetector, LiveSecond, StopRule};
use crate::engine::{self, Clock, Live, ShardConfig, ShardResult};
use crate::health::Sampler;
use crate::probes::Probes;
use crate::record::ShardRecord;
use crate::report::metrics::Endpoint;
use crate::scenario::{PhaseKind, Plan};
use crate::summary::{self, EmergencyStop, HealthSummary};

/// Where the once-a-second loop writes besides the progress line.
pub(super) struct Streams<'a, 'm> {
    /// `--json-lines`.
    pub live_log: &'a mut LiveLog,
    /// `--metrics`: the live endpoint.
    pub metrics: Option<&'m Endpoint>,
    /// The run's checkpoint (`summary.partial.json` in the output directory), and the run's
    /// start as the summary says it (RFC 3339).
    pub checkpoint: Option<(&'a std::path::Path, &'a str)>,
}

/// Start one thread per shard, show progress each second (and feed `metrics`, the live
/// endpoint, and the checkpoint, when given), merge when they end.
pub(super) fn execute<'m>(
    plan: &Plan,
    stop: &Arc<AtomicBool>,
    interrupted: &Arc<AtomicBool>,
    mut probes: Option<&mut Probes>,
    streams: Streams<'_, 'm>,
    run: usize,
) -> anyhow::Result<Executed<'m>> {
    let Streams { live_log, metrics, checkpoint } = streams;
    let windows: Vec<_> = plan.phases.iter().map(|p| p.window()).collect();
    let seconds = (plan.duration() + plan.timeout).as_secs() as usize + 2;
    let (clock, started) = zero(plan.start_at)?;
    let requests = Arc::new(request_table(plan, &windows));
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
    let http2 = match plan.http2 {
        Some(max_streams) => Some(Arc::new(http2_setup(&requests, max_streams, tls.is_some(), plan.grpc)?)),
        None => None,
    };
    // HTTP/2 over TLS offers ALPN `h2` only (the session cache is still the run's).
    let tls = match tls {
        Some(t) if http2.is_some() => Some(t.with_alpn(&[b"h2"])),
        t => t,
    };
    let pace = plan.pace();
    let mut feed = metrics.map(|endpoint| MetricsFeed::new(endpoint, plan, probes.is_some()));
    let mut checkpoint = checkpoint
        .map(|(dir, started_at)| Checkpoint::new(dir, plan.threads, started_at.to_string(), &plan.target.url, started));
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
            schedule: plan.schedule_of(shard, &windows),
            windows: windows.clone(),
            clock,
            stop: Arc::clone(stop),
            halt: Arc::clone(interrupted),
            live,
            live_copies: feed.as_ref().and_then(|f| f.copies_for(shard)),
            checkpoint: checkpoint.as_ref().and_then(|c| c.slot(shard)),
            seconds,
            pace,
            tls: tls.clone(),
            limits: plan.limits,
            retry_non_idempotent: plan.retry_non_idempotent,
            http2: http2.clone(),
            segments: probes.as_deref().and_then(Probes::segments),
        };
        let ended_tx = ended_tx.clone();
        let handle = thread::Builder::new()
            .name(format!("loader-shard-{shard}"))
            .spawn(move || {
                let tid = nix::unistd::gettid().as_raw();
                cfg.live.tid.store(tid as u64, Ordering::Relaxed);
                let result = engine::run_shard(cfg);
                let _ = ended_tx.send(());
                result
            })
            .context("cannot start shard thread")?;
        handles.push(handle);
    }

    // The CPU meter's baseline and the probes both need the shards' thread ids.
    let give_up = Instant::now() + Duration::from_millis(200);
    while lives.iter().any(|l| l.tid.load(Ordering::Relaxed) == 0) && Instant::now() < give_up {
        thread::sleep(Duration::from_millis(1));
    }
    // The shards' run-queue delay is kept apart from the other threads' (its delay moves
    // sends; the main thread's does not): tell the probes which threads they are.
    if let Some(p) = probes.as_deref_mut() {
        let tids: Vec<u32> = lives.iter().map(|l| l.tid.load(Ordering::Relaxed) as u32).filter(|&t| t != 0).collect();
        if let Err(e) = p.mark_shards(&tids) {
            eprintln!(
                "loader: warning: the probes cannot tell shard threads apart ({e}); run-queue delay covers every thread"
            );
        }
    }
    let progress = Progress::new(plan);
    let mut cpu = CpuMeter::new(&lives);
    // The target's resources, on a thread of their own (opened again: `loader run` checked
    // them before anything ran).
    let watching = match plan.watch.is_empty() {
        true => None,
        false => Some(
            crate::watch::Watcher::open(&plan.watch).map_err(|e| anyhow::anyhow!("--watch: {e}"))?.start(clock.start()),
        ),
    };
    let mut health = Sampler::new(clock.start());
    let mut nic = crate::health::nic::Nic::towards(plan.target.addr.ip());
    let mut tick = clock.start();
    let mut cpu_samples = Vec::new();
    let mut rss_start = None;
    // The emergency stop watches each second after warm-up (analysis::live decides).
    let judged_from = plan.phases.iter().find(|p| p.kind != PhaseKind::Warmup).map_or(Duration::MAX, |p| p.start);
    let mut detector = plan.emergency_stop.then(|| CliffDetector::new(StopRule::default()));
    let mut emergency: Option<(StopReason, u64)> = None;
    let mut last = LiveTotals::default();
    // The live metrics between seconds (`metrics_feed::REFRESH`), when an endpoint runs.
    let mut next_refresh = clock.start() + metrics_feed::REFRESH;
    drop(ended_tx);
    let mut running = handles.len();
    // This thread's work each second must not hold a shard sharing its core
    // (`engine::wakeup::behind_shards`); the shards, started above, keep their own nice.
    let standing_back = engine::wakeup::behind_shards();
    while running > 0 {
        let now = Instant::now();
        if now >= tick + Duration::from_secs(1) {
            tick += Duration::from_secs(1);
            let at = tick.saturating_duration_since(clock.start());
            let pct = cpu.sample();
            health.sample();
            if let Some(n) = nic.as_mut() {
                n.sample();
            }
            if let Some(p) = probes.as_deref_mut() {
                p.sample(lives.iter().map(|l| l.open_connections.load(Ordering::Relaxed)).sum(), at.as_secs());
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
            let busiest = pct.iter().copied().fold(0.0, f64::max);
            progress.line(at, &second, busiest);
            let t = at.as_secs();
            if live_log.is_on() && t >= 1 {
                let offered = summary::offered_in(plan, (t - 1) * 1_000_000_000, t * 1_000_000_000, second.sent);
                live_log.write(&Line::new(run, at, plan, offered, &second, Some(busiest)));
            }
            if let Some(d) = detector.as_mut()
                && t >= 1
                && Duration::from_secs(t - 1) >= judged_from
                && emergency.is_none()
            {
                let from = (t - 1) * 1_000_000_000;
                let offered = summary::offered_in(plan, from, from + 1_000_000_000, second.sent);
                let live = LiveSecond::new(t - 1, offered, second.sent, second.ok, &[second.errors])
                    .with_late_loader(second.late_loader);
                if d.observe(&live) {
                    stop.store(true, Ordering::Relaxed);
                    let reason = d.stopped().cloned().expect("a fired detector has a reason");
                    progress.note(&format!("EMERGENCY STOP at {t}s: {}", reason.detail));
                    emergency = Some((reason, clock.now_ns()));
                }
            }
            if let Some(f) = feed.as_mut() {
                f.second(plan, at, &totals, &pct, probes.as_deref(), emergency.is_some());
            }
            if let Some(c) = checkpoint.as_mut() {
                let known = Known {
                    at,
                    cpu: &cpu_samples,
                    rss_mib: (rss_start, proc_status_mib("VmRSS:"), proc_status_mib("VmHWM:")),
                    health: HealthSummary { peaks: health.peaks(), series: health.series.clone(), nic: None },
                    zero: started,
                };
                c.second(plan, known);
            }
        }
        if let Some(f) = feed.as_mut() {
            let now = Instant::now();
            if now >= next_refresh {
                while next_refresh <= now {
                    next_refresh += metrics_feed::REFRESH;
                }
                f.refresh(plan, now.saturating_duration_since(clock.start()), &LiveTotals::of(&lives));
            }
        }
        // Sleep to the next second, refresh or a shard's end: the main thread shares the
        // loader's CPUs and must not wake them for nothing. An interrupt needs no watching
        // here: the shards see the halt flag at their next turn and end, and their ends wake
        // this thread.
        let now = Instant::now();
        let mut next = (tick + Duration::from_secs(1)).saturating_duration_since(now);
        if feed.is_some() {
            next = next.min(next_refresh.saturating_duration_since(now));
        }
        match ended.recv_timeout(next) {
            Ok(()) => running -= 1,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => running = 0,
        }
    }
    drop(standing_back);
    progress.finish();
    let elapsed = clock.start().elapsed();
    if live_log.is_on() {
        // What finished after the last whole second, so the lines add up to the run's totals.
        let rest = LiveTotals::of(&lives).since(&last);
        let from = tick.saturating_duration_since(clock.start()).as_secs() * 1_000_000_000;
        let offered = summary::offered_in(plan, from, u64::MAX, rest.sent);
        let mut line = Line::new(run, elapsed, plan, offered, &rest, None);
        line.last = true;
        live_log.write(&line);
    }

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
    let plan_end_ns = plan.duration().as_nanos() as u64;
    let abandoned = merged.as_ref().map_or(0, |r| r.abandoned);
    let emergency_stop = emergency.map(|(r, raised_ns)| {
        // Met once every request of the plan was due: no new one was cut, only the wait of
        // those still queued or in flight.
        let after_last_send = raised_ns >= plan_end_ns;
        let detail = match (after_last_send, abandoned) {
            (false, _) => r.detail,
            (true, 0) => format!(
                "{}; met after the plan's last request was due (t={:.0} s): the run had already ended, and the stop cut nothing",
                r.detail,
                plan_end_ns as f64 / 1e9
            ),
            (true, n) => format!(
                "{}; met after the plan's last request was due (t={:.0} s): the run had already ended — the stop only ended the wait of {n} requests still queued or in flight",
                r.detail,
                plan_end_ns as f64 / 1e9
            ),
        };
        EmergencyStop {
            at_s: r.t + 1,
            since_s: r.since,
            cause: format!("{:?}", r.cause).to_lowercase(),
            loader_behind: r.loader_behind,
            detail,
            halted_within_ms: Some(last_send_ns.map_or(0.0, |l| l.saturating_sub(raised_ns) as f64 / 1e6)),
            after_last_send,
        }
    });
    let record = merged.expect("at least one shard");
    let watch = watching.and_then(crate::watch::Sampling::finish);
    let elapsed = elapsed.min(plan.duration() + plan.timeout);
    let rss_end = proc_status_mib("VmRSS:");
    let health =
        HealthSummary { peaks: health.peaks(), series: health.series, nic: nic.map(crate::health::nic::Nic::finish) };
    Ok(Executed {
        record,
        elapsed,
        cpu: cpu_samples,
        rss_mib: (rss_start, rss_end),
        started,
        health,
        emergency_stop,
        stopped_at_ns,
        last_send_ns,
        failure: (!failures.is_empty()).then(|| failures.join("; ")),
        metrics: feed.map(MetricsFeed::into_metrics),
        checkpoint: checkpoint.as_ref().map(|c| summary::CheckpointInfo {
            writes: c.writes,
            bytes: c.bytes,
            main_ms: round3(c.main_ns as f64 / 1e6),
            shard_ms: round3(c.shard_ms()),
            hlog_bytes: c.hlog.bytes,
            series_bytes: c.series_bytes(),
        }),
        hlog: checkpoint.map(|c| c.hlog),
        watch,
    })
}

/// The run's zero: as soon as the pool can open, or at `--start-at` on the wall clock (every
/// machine of a sharded run then starts at the same instant, to their clocks' agreement).
fn zero(start_at: Option<SystemTime>) -> anyhow::Result<(Clock, SystemTime)> {
    let (now, wall) = (Instant::now(), SystemTime::now());
    let Some(at) = start_at else {
        return Ok((Clock::new(now + POOL_OPEN_GRACE), wall + POOL_OPEN_GRACE));
    };
    match at.duration_since(wall + POOL_OPEN_GRACE) {
        Ok(wait) if wait <= Duration::from_secs(24 * 3600) => Ok((Clock::new(now + POOL_OPEN_GRACE + wait), at)),
        Ok(_) => anyhow::bail!("--start-at: {} is more than a day away", humantime::format_rfc3339_millis(at)),
        Err(_) => anyhow::bail!(
            "--start-at: {} had passed (or was within the {} ms the pool needs to open) when the run was ready at {}",
            humantime::format_rfc3339_millis(at),
            POOL_OPEN_GRACE.as_millis(),
            humantime::format_rfc3339_millis(wall)
        ),
    }
}

/// The plan's requests as the shards pick them: one entry per request, or per data row for
/// a request filled from a data file.
fn request_table(plan: &Plan, windows: &[crate::schedule::Window]) -> engine::RequestTable {
    let mut t = engine::RequestTable::plain(Vec::new(), Vec::new(), Vec::new(), plan.mix());
    for r in &plan.requests {
        t.first.push(t.bytes.len() as u32);
        t.keyed.push(!r.filled.is_empty());
        let entries = if r.filled.is_empty() { vec![Arc::from(r.bytes.as_slice())] } else { r.filled.clone() };
        t.head.extend(std::iter::repeat_n(r.head, entries.len()));
        t.idempotent.extend(std::iter::repeat_n(r.idempotent, entries.len()));
        t.bytes.extend(entries);
    }
    if let Some(d) = &plan.data {
        t.keys = Some(engine::keys::Keys::new(d.rows.len(), d.dist, d.seed));
        // Numbered over the whole run, all machines (`--shard`) included.
        t.phase_offsets = windows
            .iter()
            .scan(0u64, |before, w| {
                let at = *before;
                *before += w.planned_all();
                Some(at)
            })
            .collect();
    }
    t.share = windows.first().map(|w| w.share).unwrap_or_default();
    t
}

/// What the HTTP/2 shards share: the request table in HTTP/2 form (`:scheme` https when
/// `tls`).
fn http2_setup(
    requests: &engine::RequestTable,
    max_streams: u32,
    tls: bool,
    grpc: bool,
) -> anyhow::Result<engine::http2::Http2> {
    let scheme = if tls { "https" } else { "http" };
    let requests = engine::http2::Http2Requests::from_table(requests, scheme).map_err(|e| anyhow::anyhow!(e))?;
    Ok(engine::http2::Http2 { requests, max_streams, grpc })
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
