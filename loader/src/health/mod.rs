//! Loader health from `/proc` and the cgroup filesystem: the user-space half of "was the
//! loader saturated?", and the whole of it when the eBPF probes cannot load.
//!
//! Once a second the run loop calls [`Sampler::sample`], which reads: the process's CPU
//! time, every core's busy share (`/proc/stat`), cgroup CPU throttling (`cpu.stat` of the
//! process's cgroup, v1 `cpu` hierarchy or v2), open descriptors against `RLIMIT_NOFILE`, and
//! `/proc/net/sockstat` (sockets in use, orphans, TIME_WAIT, memory; its TCP sockets and
//! TIME_WAIT over `ip_local_port_range` are the host's ephemeral-port use, an upper bound). Each read that fails leaves its field empty;
//! a sampler never fails the run.
//!
//! This module only observes; judging the figures is the verdict's job. The parsers are pure
//! functions with tests beside them.

pub mod affinity;
pub mod idle;
pub mod machine;
pub mod nic;
mod parse;
pub mod preflight;

use std::fs;
use std::time::Instant;

use serde::{Deserialize, Serialize};

pub use parse::{CgroupCpu, CpuTimes, SockStat};

/// One second of loader health.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HealthSample {
    /// Seconds since the run's start (the sample covers the second before it).
    pub t: u64,
    /// CPU of the whole loader process over the interval, percent of one core.
    pub process_cpu_pct: Option<f64>,
    /// Busy share of each core over the interval, percent (index = CPU number).
    pub core_busy_pct: Vec<f64>,
    /// Time the process's cgroup was throttled during the interval, milliseconds.
    pub cgroup_throttled_ms: Option<f64>,
    /// Time the hypervisor took from each (virtual) core during the interval (`steal` in
    /// `/proc/stat`, in clock ticks of 10 ms), milliseconds (index = CPU number).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub core_steal_ms: Vec<f64>,
    /// Open file descriptors of the process.
    pub fds: Option<u64>,
    /// Its soft `RLIMIT_NOFILE`.
    pub fd_limit: Option<u64>,
    /// TCP sockets (host-wide) whose local port lies in `ip_local_port_range`.
    pub ephemeral_ports: Option<u64>,
    /// Size of `ip_local_port_range`.
    pub ephemeral_range: Option<u64>,
    /// `/proc/net/sockstat` TCP figures.
    pub sockstat: Option<SockStat>,
}

/// Run-wide peaks of the health series, for the verdict and the summary.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HealthPeaks {
    /// Highest open-descriptor share of the limit, 0–1.
    pub fds_max_ratio: Option<f64>,
    /// Highest ephemeral-port share of the range, 0–1 (host-wide).
    pub ephemeral_ports_max_ratio: Option<f64>,
    /// Highest TIME_WAIT count (host-wide, from sockstat).
    pub time_wait_max: Option<u64>,
    /// Total cgroup throttling during the run, milliseconds.
    pub cgroup_throttled_ms: Option<f64>,
    /// Highest busy share of any core in any second, percent.
    pub core_busy_max_pct: Option<f64>,
    /// Time the hypervisor took from this machine's cores during the run, all cores summed,
    /// milliseconds (`steal`; 0 on bare metal or a quiet host; absent in older summaries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal_ms: Option<f64>,
    /// Most the hypervisor took from one core in one second, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal_max_ms_per_s: Option<f64>,
    /// What the hypervisor took from the cores the loader may run on (its CPU affinity),
    /// summed, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loader_steal_ms: Option<f64>,
    /// How many cores the loader may run on (its CPU affinity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loader_cores: Option<u32>,
    /// Which cores those are (so a step's own steal can be added up from the series).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loader_cpus: Vec<usize>,
}

/// Reads the sources each second and keeps the series (one small sample a second).
#[derive(Debug)]
pub struct Sampler {
    started: Instant,
    clk_tck: f64,
    last_process: Option<(Instant, u64)>,
    last_cores: Option<Vec<CpuTimes>>,
    cgroup_stat: Option<String>,
    last_throttled_us: Option<u64>,
    port_range: Option<(u16, u16)>,
    /// The cores the process may run on.
    own_cores: Vec<usize>,
    /// Samples so far, in order.
    pub series: Vec<HealthSample>,
}

/// CPU time (user + system) process `pid` has used, seconds; `None` when it cannot be read.
pub fn process_cpu_s(pid: u32) -> Option<f64> {
    let ticks = fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|t| parse::process_ticks(&t))?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten()?;
    (hz > 0).then(|| ticks as f64 / hz as f64)
}

impl Sampler {
    /// A sampler whose time zero is `started`; takes the baseline readings.
    pub fn new(started: Instant) -> Sampler {
        let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().unwrap_or(0);
        let cgroup_stat = fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|text| parse::cpu_stat_candidates(&text).into_iter().find(|p| std::path::Path::new(p).exists()));
        let port_range =
            fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok().and_then(|t| parse::port_range(&t));
        let mut s = Sampler {
            started,
            clk_tck: if hz > 0 { hz as f64 } else { 100.0 },
            last_process: None,
            last_cores: None,
            cgroup_stat,
            last_throttled_us: None,
            port_range,
            own_cores: affinity::allowed().unwrap_or_default(),
            series: Vec::new(),
        };
        s.sample_inner(false);
        s
    }

    /// Take one sample (call once a second).
    pub fn sample(&mut self) {
        self.sample_inner(true);
    }

    fn sample_inner(&mut self, keep: bool) {
        let now = Instant::now();
        let mut sample =
            HealthSample { t: now.saturating_duration_since(self.started).as_secs(), ..Default::default() };

        if let Some(ticks) = fs::read_to_string("/proc/self/stat").ok().and_then(|t| parse::process_ticks(&t)) {
            if let Some((at, before)) = self.last_process {
                let secs = now.duration_since(at).as_secs_f64().max(1e-3);
                sample.process_cpu_pct =
                    Some(round1(ticks.saturating_sub(before) as f64 / self.clk_tck / secs * 100.0));
            }
            self.last_process = Some((now, ticks));
        }
        if let Some(cores) = fs::read_to_string("/proc/stat").ok().map(|t| parse::per_core_times(&t)) {
            if let Some(before) = &self.last_cores {
                sample.core_busy_pct = cores.iter().zip(before).map(|(a, b)| round1(a.busy_pct_since(b))).collect();
                let tick_ms = 1000.0 / self.clk_tck;
                sample.core_steal_ms = cores
                    .iter()
                    .zip(before)
                    .map(|(a, b)| round1(a.steal.saturating_sub(b.steal) as f64 * tick_ms))
                    .collect();
            }
            self.last_cores = Some(cores);
        }
        if let Some(stat) = self.cgroup_stat.as_deref().and_then(|p| fs::read_to_string(p).ok()) {
            let cpu = parse::cgroup_cpu(&stat);
            if let (Some(now_us), Some(before)) = (cpu.throttled_usec, self.last_throttled_us) {
                sample.cgroup_throttled_ms = Some(round1(now_us.saturating_sub(before) as f64 / 1000.0));
            }
            self.last_throttled_us = cpu.throttled_usec;
        }
        sample.fds = fs::read_dir("/proc/self/fd").ok().map(|d| d.count() as u64);
        sample.fd_limit = nofile_limit();
        sample.sockstat = fs::read_to_string("/proc/net/sockstat").ok().and_then(|t| parse::sockstat(&t));
        // Ports: every TCP socket and TIME_WAIT of the namespace, an upper bound of the ports
        // taken from the range (scanning /proc/net/tcp for them costs 1.5 ms per read here,
        // on the loader's own CPU, every second).
        if let (Some((lo, hi)), Some(k)) = (self.port_range, &sample.sockstat) {
            let range = u64::from(hi - lo) + 1;
            sample.ephemeral_ports = Some((k.inuse + k.tw).min(range));
            sample.ephemeral_range = Some(range);
        }
        if keep {
            self.series.push(sample);
        }
    }

    /// Peaks over the series so far.
    pub fn peaks(&self) -> HealthPeaks {
        peaks_of(&self.series, &self.own_cores)
    }
}

/// Peaks over `s` (the whole run's series, or one step's seconds of it), the loader's CPU
/// affinity being `own_cores` (empty: not known).
pub fn peaks_of(s: &[HealthSample], own_cores: &[usize]) -> HealthPeaks {
    let max_f = |it: &mut dyn Iterator<Item = f64>| it.fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    // Steal over the seconds that measured it, each second's cores taken by `of`; `None`
    // when no second did (not measured is not zero).
    let steal_sum = |of: &dyn Fn(&[f64]) -> f64| {
        s.iter()
            .filter(|x| !x.core_steal_ms.is_empty())
            .fold(None, |acc: Option<f64>, x| Some(acc.unwrap_or(0.0) + of(&x.core_steal_ms)))
            .map(round1)
    };
    HealthPeaks {
        fds_max_ratio: max_f(&mut s.iter().filter_map(|x| Some(x.fds? as f64 / x.fd_limit?.max(1) as f64))).map(round4),
        ephemeral_ports_max_ratio: max_f(
            &mut s.iter().filter_map(|x| Some(x.ephemeral_ports? as f64 / x.ephemeral_range?.max(1) as f64)),
        )
        .map(round4),
        time_wait_max: s.iter().filter_map(|x| x.sockstat.as_ref().map(|k| k.tw)).max(),
        cgroup_throttled_ms: s
            .iter()
            .filter_map(|x| x.cgroup_throttled_ms)
            .fold(None, |acc: Option<f64>, v| Some(acc.unwrap_or(0.0) + v))
            .map(round1),
        core_busy_max_pct: max_f(&mut s.iter().flat_map(|x| x.core_busy_pct.iter().copied())),
        steal_ms: steal_sum(&|cores| cores.iter().sum()),
        steal_max_ms_per_s: max_f(&mut s.iter().flat_map(|x| x.core_steal_ms.iter().copied())),
        loader_steal_ms: if own_cores.is_empty() {
            None
        } else {
            steal_sum(&|cores| own_cores.iter().filter_map(|&c| cores.get(c)).sum())
        },
        loader_cores: (!own_cores.is_empty()).then_some(own_cores.len() as u32),
        loader_cpus: own_cores.to_vec(),
    }
}

fn nofile_limit() -> Option<u64> {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).ok().map(|(soft, _)| soft)
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampler_reads_this_process() {
        let mut s = Sampler::new(Instant::now());
        // Burn a little CPU so the process figure is measurable.
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        s.sample();
        let last = s.series.last().unwrap();
        assert!(last.fds.unwrap() >= 3, "stdin/out/err at least");
        assert!(last.fd_limit.unwrap() >= last.fds.unwrap());
        assert!(last.process_cpu_pct.is_some());
        assert!(!last.core_busy_pct.is_empty());
        assert!(last.sockstat.is_some());
        assert_eq!(last.core_steal_ms.len(), last.core_busy_pct.len(), "steal is read for every core");
        let peaks = s.peaks();
        assert!(peaks.fds_max_ratio.unwrap() > 0.0);
        assert!(peaks.steal_ms.is_some_and(|ms| ms >= 0.0));
    }

    #[test]
    fn steal_adds_up_over_cores_and_seconds() {
        let mut s = Sampler::new(Instant::now());
        s.series = vec![
            HealthSample { t: 1, core_steal_ms: vec![0.0, 10.0], ..Default::default() },
            HealthSample { t: 2, core_steal_ms: vec![20.0, 0.0], ..Default::default() },
            HealthSample { t: 3, ..Default::default() },
        ];
        s.own_cores = vec![1];
        let p = s.peaks();
        assert_eq!((p.steal_ms, p.steal_max_ms_per_s), (Some(30.0), Some(20.0)));
        assert_eq!((p.loader_steal_ms, p.loader_cores), (Some(10.0), Some(1)), "only the loader's own cores");
        s.series.clear();
        assert_eq!(s.peaks().steal_ms, None, "not measured is not zero");
    }
}
