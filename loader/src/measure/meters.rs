//! What the main thread reads once a second: each shard thread's CPU, the process's memory,
//! and the sums of the shards' live counters.

use std::fs;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::engine::Live;

/// Sums of the shards' live counters.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct LiveTotals {
    pub sent: u64,
    pub ok: u64,
    pub errors: u64,
    pub in_flight: u64,
    pub open: u64,
    pub late_loader: u64,
}

impl LiveTotals {
    pub fn of(lives: &[Arc<Live>]) -> Self {
        let sum =
            |f: fn(&Live) -> &std::sync::atomic::AtomicU64| lives.iter().map(|l| f(l).load(Ordering::Relaxed)).sum();
        LiveTotals {
            sent: sum(|l| &l.sent),
            ok: sum(|l| &l.ok),
            errors: sum(|l| &l.errors),
            in_flight: sum(|l| &l.in_flight),
            open: sum(|l| &l.open_connections),
            late_loader: sum(|l| &l.late_loader),
        }
    }

    /// Counts since `before` (levels — in flight, open — as they are now).
    pub fn since(&self, before: &LiveTotals) -> LiveTotals {
        LiveTotals {
            sent: self.sent - before.sent,
            ok: self.ok - before.ok,
            errors: self.errors - before.errors,
            late_loader: self.late_loader.saturating_sub(before.late_loader),
            ..*self
        }
    }
}

/// Per-second CPU of each shard thread, from `/proc/self/task/TID/schedstat` (time on CPU in
/// ns; `stat`'s clock ticks as a fallback).
pub(super) struct CpuMeter {
    tids: Vec<Arc<Live>>,
    last: Option<(Instant, Vec<u64>)>,
    ticks_per_s: f64,
}

impl CpuMeter {
    /// A meter over the shards' threads, with its baseline taken now: the first sample is
    /// the CPU since this call, not a zero.
    pub fn new(lives: &[Arc<Live>]) -> Self {
        let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().unwrap_or(0);
        let mut meter =
            CpuMeter { tids: lives.to_vec(), last: None, ticks_per_s: if hz > 0 { hz as f64 } else { 100.0 } };
        meter.sample();
        meter
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
    pub fn sample(&mut self) -> Vec<f64> {
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

/// A memory figure of /proc/self/status (`VmRSS:`, `VmHWM:`), in MiB.
pub(super) fn proc_status_mib(key: &str) -> Option<f64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kib: f64 = line[key.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some((kib / 1024.0 * 100.0).round() / 100.0)
}
