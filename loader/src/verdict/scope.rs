//! Each measured phase's own evidence: the summary as the seconds of that phase saw it, so a
//! step is judged on what happened while its requests were due (DESIGN.md, Verdict: per step,
//! not per run). A fault that begins in step 5 never fails step 1; a host spell in step 1
//! spoils step 1 alone.
//!
//! A phase's window runs from its start to the next measured phase's start; the first one
//! from the run's start (the warm-up leads into it, and its backlog is evidence there) and
//! the last one to the run's end (its answers, timeouts and closes drain after its last send).
//! Inside it, every figure the rules read that the run keeps per second is added up again:
//! the busiest shard's CPU, the shards' run-queue waits (their per-second buckets), steal and
//! throttling, descriptors, the loader's own TIME_WAIT and ports, SYN retransmits, resets,
//! failed connects, connects short of a port, closes by cause, lost probe events, the
//! emergency stop that fired in it, and the certificate ratio of its own rate. What the run
//! keeps only as a whole (connect latency, data retransmits, the NIC's counters) stays the
//! run's: the rules that read it are judged once, on the whole run ([`RUN_WIDE`]).
//!
//! Owns: the windows and the scoped summary. Does not: judge (the rules in the sibling files
//! read the scoped summary exactly as they read a whole one).

use crate::summary::{
    CertificateRef, PhaseSummary, ProbeSummary, Resets, RunQueueUs, SecondSummary, Summary, TimeWait,
};

/// Reason codes judged on the whole run only: their evidence has no per-second record, or
/// they describe the run rather than its seconds.
pub const RUN_WIDE: &[&str] =
    &["probes_unavailable", "probe_unavailable", "retransmits", "connection_churn", "nic_saturated"];

/// Seconds TIME_WAIT lasts on Linux (`TCP_TIMEWAIT_LEN`): a close counts towards the live
/// TIME_WAIT for this long.
const TIME_WAIT_S: u64 = 60;

/// A measured phase and the seconds judged as its own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// Index of the phase in `summary.phases`.
    pub phase: usize,
    /// Start, seconds of the run.
    pub from_s: f64,
    /// End, seconds of the run (exclusive).
    pub to_s: f64,
}

impl Window {
    /// Whether the second `[t, t + 1)` of the series (`series[].t`) lies in it: its larger part.
    fn holds_second(&self, t: u64) -> bool {
        let mid = t as f64 + 0.5;
        mid >= self.from_s && mid < self.to_s
    }

    /// Whether a sample that closes second `t` (`health.series[].t`, probe samples' `t`:
    /// covering `[t − 1, t)`) lies in it.
    fn holds_sample(&self, t: u64) -> bool {
        t >= 1 && self.holds_second(t - 1)
    }
}

/// Whether phase `p` is judged: measured (not the warm-up) and run.
fn judged(p: &PhaseSummary) -> bool {
    p.kind != "warmup" && p.measured_s.unwrap_or(p.duration_s) > 0.0 && p.requests > 0
}

/// The windows of the measured phases that ran, in order.
pub fn windows(s: &Summary) -> Vec<Window> {
    let phases: Vec<usize> = (0..s.phases.len()).filter(|&i| judged(&s.phases[i])).collect();
    let end = s.run.elapsed_s.max(s.phases.iter().map(|p| p.start_s + p.duration_s).fold(0.0, f64::max));
    phases
        .iter()
        .enumerate()
        .map(|(k, &i)| Window {
            phase: i,
            from_s: if k == 0 { 0.0 } else { s.phases[i].start_s },
            to_s: phases.get(k + 1).map_or(end + 1.0, |&next| s.phases[next].start_s),
        })
        .collect()
}

/// `s` as window `w`'s seconds saw it: the phase (with the warm-up before it, for the first),
/// and every per-second figure added up over the window.
pub fn scoped(s: &Summary, w: &Window) -> Summary {
    let mut out = s.clone();
    let first = windows(s).first().is_some_and(|f| f.phase == w.phase);
    out.phases = s
        .phases
        .iter()
        .enumerate()
        .filter(|&(i, p)| i == w.phase || (first && i < w.phase && p.kind == "warmup"))
        .map(|(_, p)| p.clone())
        .collect();
    out.series = s.series.iter().filter(|x| w.holds_second(x.t)).cloned().collect();
    out.run.elapsed_s = (w.to_s.min(s.run.elapsed_s.max(w.from_s)) - w.from_s).max(1.0);
    cpu(&mut out, &s.series);
    closes(&mut out.run, &out.series);
    health(&mut out, s, w);
    probes(&mut out.probes, s, w);
    out.analysis.emergency_stop =
        s.analysis.emergency_stop.clone().filter(|e| w.holds_second(e.at_s.saturating_sub(1)));
    out.loader.certificate = s.loader.certificate.as_ref().and_then(|c| certificate(c, &s.phases[w.phase]));
    out
}

/// The busiest shard's CPU p95 and max over the window's seconds (each second's busiest
/// shard: one saturated shard is saturation).
fn cpu(out: &mut Summary, all: &[SecondSummary]) {
    if all.iter().all(|x| x.cpu.is_none()) {
        return; // a summary without per-second CPU keeps the run's figures
    }
    let cpu: Vec<f64> = out.series.iter().filter_map(|x| x.cpu).collect();
    let (p95, max) = crate::summary::cpu_stats(&cpu);
    out.loader.cpu_p95 = p95;
    out.loader.cpu_max = max;
}

fn closes(run: &mut crate::summary::RunInfo, series: &[SecondSummary]) {
    run.closed_on_timeout = series.iter().map(|x| x.closed_on_timeout).sum();
    run.closed_by_target = series.iter().map(|x| x.closed_by_target).sum();
    run.connect_no_port = series.iter().map(|x| x.connect_no_port).sum();
}

fn health(out: &mut Summary, s: &Summary, w: &Window) {
    if s.health.series.is_empty() {
        return;
    }
    out.health.series = s.health.series.iter().filter(|x| w.holds_sample(x.t)).cloned().collect();
    out.health.peaks = crate::health::peaks_of(&out.health.series, &s.health.peaks.loader_cpus);
    // The affinity's size is known even where the cores were not (older summaries).
    out.health.peaks.loader_cores = out.health.peaks.loader_cores.or(s.health.peaks.loader_cores);
}

/// The probe figures over the window, from the per-second samples (those of summaries from
/// before the samples carried the run's second keep the run's figures).
fn probes(out: &mut ProbeSummary, s: &Summary, w: &Window) {
    let all = &s.probes.series;
    if !s.probes.available || all.is_empty() || all.iter().any(|x| x.t.is_none()) {
        return;
    }
    let inside: Vec<_> = all.iter().filter(|x| w.holds_sample(x.t.unwrap_or(0))).collect();
    let sum = |f: fn(&crate::probes::ProbeSample) -> u64| inside.iter().map(|x| f(x)).sum::<u64>();
    if out.syn_retransmits.is_some() {
        out.syn_retransmits = Some(sum(|x| x.syn_retransmits));
    }
    if out.resets.is_some() {
        out.resets = Some(Resets { sent: sum(|x| x.resets_sent), received: sum(|x| x.resets_received) });
    }
    if let Some(c) = out.connect_ms.as_mut() {
        c.failed = sum(|x| x.failed_connects);
    }
    if out.tls_handshakes.is_some() {
        out.tls_handshakes = Some(sum(|x| x.tls_handshakes));
    }
    if out.lost.is_some() {
        out.lost = Some(sum(|x| x.lost));
    }
    if let Some(tw) = out.time_wait.as_mut() {
        *tw = TimeWait {
            entries: sum(|x| x.time_wait_entries),
            max_live: inside.iter().filter_map(|x| x.time_wait_own).max().unwrap_or(0),
            host_max_live: inside.iter().filter_map(|x| x.time_wait_live).max(),
            own_choice_max: own_choice_time_wait(s, w),
        };
    }
    let max_ratio = |f: fn(&crate::probes::ProbeSample) -> Option<f64>| {
        inside.iter().filter_map(|x| f(x)).fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
    };
    if out.ephemeral_ports_max_ratio.is_some() {
        out.ephemeral_ports_max_ratio = max_ratio(|x| x.own_ports_ratio);
    }
    if out.host_ephemeral_ports_max_ratio.is_some() {
        out.host_ephemeral_ports_max_ratio = max_ratio(|x| x.ephemeral_ports_ratio);
    }
    if out.runqueue_us.is_some() && inside.iter().any(|x| !x.runqueue_buckets.is_empty() || x.runqueue_count == 0) {
        out.runqueue_us = Some(runqueue(&inside));
    }
    out.series = inside.into_iter().cloned().collect();
}

/// The shards' run-queue waits of the window's samples, added up bucket by bucket.
fn runqueue(samples: &[&crate::probes::ProbeSample]) -> RunQueueUs {
    let mut buckets: Vec<[f64; 3]> = Vec::new();
    for b in samples.iter().flat_map(|x| x.runqueue_buckets.iter()) {
        match buckets.iter_mut().find(|a| a[0] == b[0]) {
            Some(a) => a[2] += b[2],
            None => buckets.push(*b),
        }
    }
    buckets.sort_by(|a, b| a[0].total_cmp(&b[0]));
    let count = buckets.iter().map(|b| b[2]).sum::<f64>() as u64;
    let max = samples.iter().filter_map(|x| x.runqueue_max_us).fold(0.0, f64::max);
    let at = |q: f64| {
        let rank = ((q * count as f64).ceil() as u64).max(1) as f64;
        let mut seen = 0.0;
        for &[low, high, n] in &buckets {
            seen += n;
            if seen >= rank {
                return ((low + high) / 2.0).min(max).max(low);
            }
        }
        max
    };
    if count == 0 {
        return RunQueueUs::default();
    }
    RunQueueUs { p50: at(0.5), p99: at(0.99), max, count, buckets }
}

/// The highest live TIME_WAIT of the loader's own in the window that its own choices left —
/// its live count at each sample, less its closes on timeouts of the 60 s before (each leaves
/// at most one TIME_WAIT socket, for 60 s): what stays when the target's timeouts are taken
/// out. `None` without per-second samples. The run's own figure is [`own_choice_time_wait`]
/// over the whole run.
pub fn own_choice_time_wait(s: &Summary, w: &Window) -> Option<u64> {
    let samples = s.probes.series.iter().filter_map(|x| Some((x.t?, x.time_wait_own?)));
    samples
        .filter(|&(t, _)| w.holds_sample(t))
        .map(|(t, live)| {
            let from = t.saturating_sub(TIME_WAIT_S);
            let timeouts: u64 = s.series.iter().filter(|x| x.t >= from && x.t < t).map(|x| x.closed_on_timeout).sum();
            live.saturating_sub(timeouts)
        })
        .max()
}

/// The certificate ratio of phase `p`'s own rate.
fn certificate(c: &CertificateRef, p: &PhaseSummary) -> Option<CertificateRef> {
    (c.ceiling_rps > 0.0)
        .then(|| CertificateRef { ratio: (p.sent_rps / c.ceiling_rps * 10_000.0).round() / 10_000.0, ..c.clone() })
}

/// The whole run as one window (for `own_choice_time_wait` over all of it).
pub fn whole() -> Window {
    Window { phase: 0, from_s: 0.0, to_s: f64::INFINITY }
}
