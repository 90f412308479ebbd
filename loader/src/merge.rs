//! `loader merge`: one run from the outputs of the machines that shared it (`--shard i/N`).
//!
//! Exact where it can be: each phase's latency, service-time and send-lag histograms are
//! added from the machines' interval logs (`latency.hlog`), so the merged percentiles are
//! those of the union of every sample, within HDR precision; counts and rates are summed;
//! the per-second series are aligned on the machines' wall clocks (`run.zero_unix_s`) and
//! summed — except a second's latency percentiles, which the summaries keep only as
//! percentiles: the merged second carries the highest of them (an upper bound; its max is
//! exact). Steps, knee and cliff are judged again on the merged phases.
//!
//! Trust is not averaged away: the merged run is untrusted when any machine's is, each
//! machine's reasons carried over under its name, and a machine whose tail departs from the
//! others' (seed 000's slow machine, which lifts the merged percentiles without showing in
//! them) is named (`shard_skew`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;

use crate::summary::{PhaseSummary, Reason, SecondLatencyMs, SecondSummary, Summary, latency, send_lag};

/// One machine's output: its summary and its phases' histograms.
pub struct Part {
    /// Where it was read from.
    pub dir: PathBuf,
    /// Its summary.
    pub summary: Summary,
    /// Per phase: corrected latency, service time, send lag.
    pub histograms: Vec<[Histogram<u64>; 3]>,
}

/// A machine's p99 above this multiple of the machines' median p99 (and by at least
/// [`SKEW_MIN_MS`]) in a judged phase is named.
pub const SKEW_RATIO: f64 = 2.0;
/// Below this difference, ms, p99s are too close to call one machine slow.
pub const SKEW_MIN_MS: f64 = 1.0;
/// Machines whose zero instants differ by more than this, ms, did not start together.
pub const START_SPREAD_NOTE_MS: f64 = 50.0;

/// Machines whose zeros are further apart than this, seconds, did not run one run.
pub const MAX_START_SPREAD_S: f64 = 3600.0;

/// Read `dir`'s summary.json and latency.hlog.
pub fn read(dir: &Path, summary: Summary) -> anyhow::Result<Part> {
    let hlog = dir.join("latency.hlog");
    let tags = crate::report::hdr::read(&hlog)?;
    let histograms = summary
        .phases
        .iter()
        .map(|p| {
            let tag = crate::report::hdr::tag_of(&p.name);
            let get = |suffix: &str| {
                tags.get(&format!("{tag}{suffix}"))
                    .cloned()
                    .ok_or_else(|| anyhow::anyhow!("{}: no interval {tag}{suffix}", hlog.display()))
            };
            Ok([get("")?, get(".service")?, get(".send_lag")?])
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Part { dir: dir.to_path_buf(), summary, histograms })
}

/// The parts must be the machines of one run: the same plan, each index once, all of them.
fn check(parts: &[Part]) -> anyhow::Result<u64> {
    let Some(first) = parts.first() else { anyhow::bail!("nothing to merge: give the machines' output directories") };
    let shard = |p: &Part| {
        p.summary.run.shard.ok_or_else(|| {
            anyhow::anyhow!("{}: not one machine's part of a run (it ran without --shard)", p.dir.display())
        })
    };
    let count = shard(first)?.count;
    if count == 0 || count > crate::schedule::MAX_MACHINES {
        anyhow::bail!("{}: shard count {count} is not one loader writes", first.dir.display());
    }
    let mut seen = vec![None::<&Path>; count as usize];
    for p in parts {
        let s = shard(p)?;
        if s.index >= s.count {
            anyhow::bail!("{}: shard {}/{} is not one loader writes", p.dir.display(), s.index, s.count);
        }
        if s.count != count {
            anyhow::bail!(
                "{}: shard {}/{}, but {} is shard of {count}",
                p.dir.display(),
                s.index,
                s.count,
                first.dir.display()
            );
        }
        if let Some(other) = seen[s.index as usize].replace(&p.dir) {
            anyhow::bail!("{} and {} are both shard {}/{count}", other.display(), p.dir.display(), s.index);
        }
        let plan = |s: &Summary| -> Vec<(String, String, f64, f64)> {
            s.phases.iter().map(|p| (p.name.clone(), p.kind.clone(), p.start_s, p.duration_s)).collect()
        };
        if plan(&p.summary) != plan(&first.summary) || p.summary.run.url != first.summary.run.url {
            anyhow::bail!("{}: not the same plan (phases or URL) as {}", p.dir.display(), first.dir.display());
        }
    }
    let missing: Vec<String> =
        seen.iter().enumerate().filter(|(_, d)| d.is_none()).map(|(i, _)| format!("{i}/{count}")).collect();
    if !missing.is_empty() {
        anyhow::bail!("shard {} missing: a merge needs every machine of the run", missing.join(", "));
    }
    Ok(count)
}

fn add(into: &mut Histogram<u64>, h: &Histogram<u64>) -> anyhow::Result<()> {
    into.add(h).map_err(|e| anyhow::anyhow!("cannot add histograms: {e:?}"))
}

/// Merge the machines' parts of one run into its summary and its phases' histograms.
pub fn merge(parts: &[Part]) -> anyhow::Result<(Summary, Vec<[Histogram<u64>; 3]>)> {
    let count = check(parts)?;
    let mut parts: Vec<&Part> = parts.iter().collect();
    parts.sort_by_key(|p| p.summary.run.shard.map_or(0, |s| s.index));
    let mut out = parts[0].summary.clone();
    let mut histograms = parts[0].histograms.clone();
    for p in &parts[1..] {
        for (into, h) in histograms.iter_mut().zip(&p.histograms) {
            for k in 0..3 {
                add(&mut into[k], &h[k])?;
            }
        }
    }
    for (i, phase) in out.phases.iter_mut().enumerate() {
        *phase = merge_phase(parts.iter().map(|p| &p.summary.phases[i]), &histograms[i]);
    }
    let zeros: Vec<f64> = parts.iter().filter_map(|p| p.summary.run.zero_unix_s).collect();
    let zero = zeros.iter().copied().fold(f64::INFINITY, f64::min);
    let spread_ms = zeros.iter().map(|z| (z - zero) * 1000.0).fold(0.0, f64::max);
    if !(spread_ms.is_finite() && spread_ms <= MAX_START_SPREAD_S * 1000.0) {
        anyhow::bail!(
            "the machines' run zeros (run.zero_unix_s) are {:.0} s apart: not one run (started with one --start-at)",
            spread_ms / 1000.0
        );
    }
    out.series = merge_series(&parts, zero);
    let r = &mut out.run;
    r.connections = parts.iter().map(|p| p.summary.run.connections).sum();
    r.threads = parts.iter().map(|p| p.summary.run.threads).sum();
    r.connections_opened = parts.iter().map(|p| p.summary.run.connections_opened).sum();
    r.connect_failures = parts.iter().map(|p| p.summary.run.connect_failures).sum();
    r.deadline_while_connecting = parts.iter().map(|p| p.summary.run.deadline_while_connecting).sum();
    r.retried_on_stale_connection = parts.iter().map(|p| p.summary.run.retried_on_stale_connection).sum();
    r.stamps_by_segment = parts.iter().map(|p| p.summary.run.stamps_by_segment).sum();
    r.segment_follow_lost = parts.iter().map(|p| p.summary.run.segment_follow_lost).sum();
    r.abandoned = parts.iter().map(|p| p.summary.run.abandoned).sum();
    r.connect_no_port = parts.iter().map(|p| p.summary.run.connect_no_port).sum();
    r.elapsed_s = parts.iter().map(|p| p.summary.run.elapsed_s).fold(0.0, f64::max);
    r.zero_unix_s = zero.is_finite().then_some(zero);
    r.shard = None;
    r.clock = None;
    r.command_line = std::env::args().collect();
    out.interrupted = parts.iter().any(|p| p.summary.interrupted);
    out.failure = parts
        .iter()
        .filter_map(|p| p.summary.failure.as_ref().map(|f| format!("{}: {f}", name(p, count))))
        .reduce(|a, b| format!("{a}; {b}"));
    out.errors_detail = merge_errors(&parts);
    out.machine = None;
    out.preflight = None;
    out.capacity = None;
    out.data = None;
    out.probes = Default::default();
    out.health = Default::default();
    // The busiest machine's shard CPU; the rest of the loader's health is each machine's own.
    out.loader.cpu_p95 = parts.iter().filter_map(|p| p.summary.loader.cpu_p95).reduce(f64::max);
    out.loader.cpu_max = parts.iter().filter_map(|p| p.summary.loader.cpu_max).reduce(f64::max);
    out.loader.cpu_p95_by_shard = parts.iter().flat_map(|p| p.summary.loader.cpu_p95_by_shard.clone()).collect();
    (out.loader.wake_late_us, out.loader.certificate) = (None, None);
    (out.loader.rss_mib_start, out.loader.rss_mib_end, out.loader.rss_mib_peak) = (None, None, None);
    out.verdict = verdict(&parts, count, spread_ms);
    out.merged = Some(crate::summary::MergedFrom {
        shards: parts
            .iter()
            .map(|p| crate::summary::MergedShard {
                index: p.summary.run.shard.map_or(0, |s| s.index),
                dir: p.dir.display().to_string(),
                trusted: p.summary.verdict.trusted,
                zero_unix_s: p.summary.run.zero_unix_s,
                p99_ms: p.summary.phases.iter().map(|ph| ph.latency_ms.p99).collect(),
            })
            .collect(),
        start_spread_ms: spread_ms,
    });
    Ok((out, histograms))
}

/// Machines that are not one host start together only as well as their clocks agree: say so
/// when a clock is not disciplined (NTP/PTP) or may be off by more than [`CLOCK_ERROR_NOTE_US`].
fn clocks(parts: &[&Part], reasons: &mut Vec<Reason>) {
    let hosts: Vec<_> = parts.iter().map(|p| p.summary.machine.as_ref().map(|m| format!("{m:?}"))).collect();
    if hosts.windows(2).all(|w| w[0] == w[1]) {
        return;
    }
    let worst = parts.iter().filter_map(|p| p.summary.run.clock).fold(None::<(bool, f64)>, |acc, c| {
        let (sync, err) = acc.unwrap_or((true, 0.0));
        Some((sync && c.synchronized, err.max(c.max_error_us)))
    });
    if let Some((sync, err)) = worst.filter(|&(sync, err)| !sync || err > CLOCK_ERROR_NOTE_US) {
        reasons.push(Reason {
            code: "shard_clocks".into(),
            side: "loader".into(),
            invalidates: false,
            value: Some(err),
            limit: Some(CLOCK_ERROR_NOTE_US),
            detail: format!(
                "the machines' clocks {} (max error up to {:.0} ms): --start-at starts them together only as well as their clocks agree — run chrony or another NTP/PTP client on each",
                if sync { "are synchronised" } else { "are not all synchronised" },
                err / 1000.0
            ),
        });
    }
}

/// A clock's maximum error above this, µs, is noted for machines started by `--start-at`.
pub const CLOCK_ERROR_NOTE_US: f64 = 10_000.0;

fn name(p: &Part, count: u64) -> String {
    format!("shard {}/{count}", p.summary.run.shard.map_or(0, |s| s.index))
}

fn merge_phase<'a>(phases: impl Iterator<Item = &'a PhaseSummary> + Clone, h: &[Histogram<u64>; 3]) -> PhaseSummary {
    let mut out = phases.clone().next().expect("at least one part").clone();
    let sum = |f: fn(&PhaseSummary) -> u64| phases.clone().map(f).sum::<u64>();
    let fsum = |f: fn(&PhaseSummary) -> f64| (phases.clone().map(f).sum::<f64>() * 1e6).round() / 1e6;
    out.offered_rps = fsum(|p| p.offered_rps);
    out.sent_rps = fsum(|p| p.sent_rps);
    out.ok_rps = fsum(|p| p.ok_rps);
    out.requests = sum(|p| p.requests);
    out.sent = sum(|p| p.sent);
    out.ok = sum(|p| p.ok);
    out.late = sum(|p| p.late);
    out.late_unpooled = sum(|p| p.late_unpooled);
    out.waited_for_connection = sum(|p| p.waited_for_connection);
    out.waited_on_loader = sum(|p| p.waited_on_loader);
    out.late_after_end = sum(|p| p.late_after_end);
    out.due_unsent = sum(|p| p.due_unsent);
    out.due_unsent_loader = sum(|p| p.due_unsent_loader);
    out.dropped_loader = sum(|p| p.dropped_loader);
    // Each machine's read lag stands for its own reads; the worst machine's is kept.
    out.read_lag_ms = phases.clone().filter_map(|p| p.read_lag_ms.clone()).max_by(|a, b| a.p99.total_cmp(&b.p99));
    out.sent_ahead = sum(|p| p.sent_ahead);
    out.late_unpooled_max_ms = phases.clone().filter_map(|p| p.late_unpooled_max_ms).reduce(f64::max);
    out.measured_s = phases.clone().filter_map(|p| p.measured_s).reduce(f64::min);
    out.errors = BTreeMap::new();
    out.grpc = BTreeMap::new();
    for p in phases {
        for (class, n) in &p.errors {
            *out.errors.entry(class.clone()).or_insert(0) += n;
        }
        for (code, n) in &p.grpc {
            *out.grpc.entry(code.clone()).or_insert(0) += n;
        }
    }
    out.latency_ms = latency(&h[0]);
    out.service_ms = latency(&h[1]);
    out.send_lag_ms = send_lag(&h[2]);
    out.own_lag_ms = None;
    out.passed = None;
    out.fail_reasons = Vec::new();
    out
}

/// The machines' seconds on one clock: second `t` of a machine whose zero was `d` seconds
/// after the earliest is second `t + round(d)` of the merged run.
fn merge_series(parts: &[&Part], zero: f64) -> Vec<SecondSummary> {
    let mut out: Vec<SecondSummary> = Vec::new();
    for p in parts {
        let shift = p.summary.run.zero_unix_s.filter(|_| zero.is_finite()).map_or(0, |z| (z - zero).round() as usize);
        for s in &p.summary.series {
            let t = s.t as usize + shift;
            while out.len() <= t {
                let mut blank = s.clone();
                (blank.t, blank.offered, blank.sent, blank.ok, blank.in_flight_max) = (out.len() as u64, 0, 0, 0, 0);
                (blank.errors, blank.cpu, blank.latency_ms) = (BTreeMap::new(), None, None);
                out.push(blank);
            }
            let m = &mut out[t];
            m.offered += s.offered;
            m.sent += s.sent;
            m.ok += s.ok;
            m.in_flight_max += s.in_flight_max;
            m.late_loader += s.late_loader;
            for (class, n) in &s.errors {
                *m.errors.entry(class.clone()).or_insert(0) += n;
            }
            m.cpu = max_opt(m.cpu, s.cpu);
            m.latency_ms = match (m.latency_ms.take(), &s.latency_ms) {
                (Some(a), Some(b)) => {
                    Some(SecondLatencyMs { p50: a.p50.max(b.p50), p99: a.p99.max(b.p99), max: a.max.max(b.max) })
                }
                (a, b) => a.or_else(|| b.clone()),
            };
        }
    }
    out
}

fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn merge_errors(parts: &[&Part]) -> BTreeMap<String, Vec<crate::summary::ErrorMessage>> {
    let mut out: BTreeMap<String, Vec<crate::summary::ErrorMessage>> = BTreeMap::new();
    for p in parts {
        for (class, messages) in &p.summary.errors_detail {
            let list = out.entry(class.clone()).or_default();
            for m in messages {
                match list.iter_mut().find(|x| x.message == m.message) {
                    Some(x) => x.count += m.count,
                    None => list.push(m.clone()),
                }
            }
        }
    }
    for list in out.values_mut() {
        list.sort_by_key(|e| std::cmp::Reverse(e.count));
    }
    out
}

/// Every machine's reasons under its name; the merged run is trusted only when every
/// machine's is; a slow machine and machines that did not start together are named.
fn verdict(parts: &[&Part], count: u64, spread_ms: f64) -> crate::summary::Verdict {
    // The same reason in the same words on several machines is said once, naming them all.
    let mut said: Vec<(Reason, Vec<u64>)> = Vec::new();
    for p in parts {
        let index = p.summary.run.shard.map_or(0, |s| s.index);
        for r in &p.summary.verdict.reasons {
            match said
                .iter_mut()
                .find(|(s, _)| s.code == r.code && s.detail == r.detail && s.invalidates == r.invalidates)
            {
                Some((_, machines)) => machines.push(index),
                None => said.push((r.clone(), vec![index])),
            }
        }
    }
    let mut reasons: Vec<Reason> = said
        .into_iter()
        .map(|(r, machines)| {
            let who = machines.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
            let who =
                if machines.len() == 1 { format!("shard {who}/{count}") } else { format!("shards {who} of {count}") };
            Reason { detail: format!("{who}: {}", r.detail), ..r }
        })
        .collect();
    clocks(parts, &mut reasons);
    let phases = parts[0].summary.phases.len();
    for i in 0..phases {
        let p99s: Vec<f64> = parts.iter().map(|p| p.summary.phases[i].latency_ms.p99).collect();
        let mut sorted = p99s.clone();
        sorted.sort_by(f64::total_cmp);
        let median = sorted[sorted.len() / 2];
        let phase = &parts[0].summary.phases[i];
        if parts.len() < 2 || phase.kind == "warmup" {
            continue;
        }
        for (p, &p99) in parts.iter().zip(&p99s) {
            if p99 > SKEW_RATIO * median && p99 - median >= SKEW_MIN_MS {
                reasons.push(Reason {
                    code: "shard_skew".into(),
                    side: "loader".into(),
                    invalidates: false,
                    value: Some(p99),
                    limit: Some(SKEW_RATIO * median),
                    detail: format!(
                        "{}: {}'s latency p99 was {p99:.2} ms against a median of {median:.2} ms over the {} machines: that machine (or its path to the target) differs from the others and lifts the merged tail — see its own verdict",
                        phase.name,
                        name(p, count),
                        parts.len()
                    ),
                });
            }
        }
    }
    if spread_ms > START_SPREAD_NOTE_MS {
        reasons.push(Reason {
            code: "shard_start_spread".into(),
            side: "loader".into(),
            invalidates: false,
            value: Some(spread_ms),
            limit: Some(START_SPREAD_NOTE_MS),
            detail: format!(
                "the machines' schedules started up to {spread_ms:.0} ms apart (their run zeros on their own clocks): the target saw the plan's arrivals shifted by that much — start them with one --start-at on synchronised clocks"
            ),
        });
    }
    let trusted = if parts.iter().any(|p| p.summary.verdict.trusted == Some(false)) {
        Some(false)
    } else if parts.iter().all(|p| p.summary.verdict.trusted == Some(true)) {
        Some(true)
    } else {
        None
    };
    crate::summary::Verdict { trusted, reasons, steps: Vec::new() }
}
