//! Pure parsers of the `/proc` and cgroup files the sampler reads.

use serde::{Deserialize, Serialize};

/// Cumulative jiffies of one core from `/proc/stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// Time doing anything but idling or waiting for I/O.
    pub busy: u64,
    /// All time.
    pub total: u64,
    /// Time the hypervisor ran something else while this (virtual) CPU wanted to run
    /// (`steal`): 0 on bare metal.
    pub steal: u64,
}

impl CpuTimes {
    /// Busy share between `before` and `self`, percent.
    pub fn busy_pct_since(&self, before: &CpuTimes) -> f64 {
        let total = self.total.saturating_sub(before.total);
        if total == 0 { 0.0 } else { self.busy.saturating_sub(before.busy) as f64 / total as f64 * 100.0 }
    }
}

/// `/proc/stat` → one entry per `cpuN` line, in order.
pub fn per_core_times(text: &str) -> Vec<CpuTimes> {
    text.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .map(|l| {
            let v: Vec<u64> = l.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
            // user nice system idle iowait irq softirq steal ...
            let total: u64 = v.iter().take(8).sum();
            let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
            CpuTimes { busy: total.saturating_sub(idle), total, steal: v.get(7).copied().unwrap_or(0) }
        })
        .collect()
}

/// `/proc/PID/stat` → utime + stime in clock ticks.
pub fn process_ticks(text: &str) -> Option<u64> {
    // Fields after the ")" that closes the command name: utime is the 14th field, stime 15th.
    let rest = text.get(text.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// The cgroup v2 path of `/proc/self/cgroup` (`0::/path`).
pub fn cgroup_v2_path(text: &str) -> Option<String> {
    text.lines().find_map(|l| l.strip_prefix("0::")).map(|p| p.trim().trim_end_matches('/').to_string())
}

/// The cgroup v1 `cpu` controller's hierarchy and path of `/proc/self/cgroup`
/// (`4:cpu,cpuacct:/path` → `("cpu,cpuacct", "/path")`), on hosts that keep it on v1.
pub fn cgroup_v1_cpu(text: &str) -> Option<(String, String)> {
    text.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        controllers
            .split(',')
            .any(|c| c == "cpu")
            .then(|| (controllers.to_string(), path.trim().trim_end_matches('/').to_string()))
    })
}

/// Where the process's `cpu.stat` may be, most specific first: the v1 `cpu` hierarchy
/// (hybrid hosts keep the CPU controller there), then the v2 unified one.
pub fn cpu_stat_candidates(proc_self_cgroup: &str) -> Vec<String> {
    let mut paths = Vec::new();
    if let Some((controllers, path)) = cgroup_v1_cpu(proc_self_cgroup) {
        paths.push(format!("/sys/fs/cgroup/{controllers}{path}/cpu.stat"));
        paths.push(format!("/sys/fs/cgroup/cpu{path}/cpu.stat"));
    }
    if let Some(path) = cgroup_v2_path(proc_self_cgroup) {
        paths.push(format!("/sys/fs/cgroup{path}/cpu.stat"));
        paths.push(format!("/sys/fs/cgroup/unified{path}/cpu.stat"));
    }
    paths
}

/// Throttling figures of a cgroup `cpu.stat` (v2 `throttled_usec`, v1 `throttled_time` ns).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupCpu {
    /// Periods in which the cgroup was throttled.
    pub nr_throttled: Option<u64>,
    /// Total throttled time, microseconds.
    pub throttled_usec: Option<u64>,
}

/// Parse `cpu.stat`.
pub fn cgroup_cpu(text: &str) -> CgroupCpu {
    let get = |key: &str| text.lines().find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse::<u64>().ok()));
    let throttled_usec = get("throttled_usec ").or_else(|| get("throttled_time ").map(|ns| ns / 1000));
    CgroupCpu { nr_throttled: get("nr_throttled "), throttled_usec }
}

/// `ip_local_port_range` → (low, high).
pub fn port_range(text: &str) -> Option<(u16, u16)> {
    let mut it = text.split_whitespace().map(|x| x.parse::<u16>().ok());
    let (lo, hi) = (it.next()??, it.next()??);
    (lo <= hi).then_some((lo, hi))
}

/// The TCP line of `/proc/net/sockstat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SockStat {
    /// TCP sockets in use.
    pub inuse: u64,
    /// Orphaned sockets.
    pub orphan: u64,
    /// Sockets in TIME_WAIT (host-wide, exact).
    pub tw: u64,
    /// Allocated sockets.
    pub alloc: u64,
    /// Pages of socket buffer memory.
    pub mem: u64,
}

/// Parse `/proc/net/sockstat`'s `TCP:` line.
pub fn sockstat(text: &str) -> Option<SockStat> {
    let line = text.lines().find(|l| l.starts_with("TCP:"))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let get = |key: &str| words.iter().position(|w| *w == key).and_then(|i| words.get(i + 1)?.parse().ok());
    Some(SockStat {
        inuse: get("inuse")?,
        orphan: get("orphan")?,
        tw: get("tw")?,
        alloc: get("alloc")?,
        mem: get("mem")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_per_core() {
        let text = "cpu  10 0 10 80 0 0 0 3 0 0\ncpu0 5 0 5 40 0 0 0 0 0 0\ncpu1 5 0 5 40 10 0 0 3 0 0\nintr 1\n";
        let cores = per_core_times(text);
        assert_eq!(cores.len(), 2);
        assert_eq!(cores[0], CpuTimes { busy: 10, total: 50, steal: 0 });
        assert_eq!(cores[1], CpuTimes { busy: 13, total: 63, steal: 3 });
        let later = CpuTimes { busy: 40, total: 110, steal: 0 };
        assert!((later.busy_pct_since(&cores[0]) - 50.0).abs() < 1e-9);
    }

    #[test]
    fn process_ticks_skip_the_command_name() {
        let text = "42 (my (odd) name) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 1 1 1";
        assert_eq!(process_ticks(text), Some(300));
    }

    #[test]
    fn cgroup_files() {
        assert_eq!(cgroup_v2_path("0::/system.slice/x.service\n").as_deref(), Some("/system.slice/x.service"));
        assert_eq!(cgroup_v2_path("0::/\n").as_deref(), Some(""));
        let cpu = cgroup_cpu("usage_usec 100\nnr_periods 5\nnr_throttled 2\nthrottled_usec 1500\n");
        assert_eq!(cpu, CgroupCpu { nr_throttled: Some(2), throttled_usec: Some(1500) });
    }

    #[test]
    fn ports_and_sockstat() {
        assert_eq!(port_range("32768\t60999\n"), Some((32768, 60999)));
        assert_eq!(port_range("9 1"), None);
        let ss = "sockets: used 10\nTCP: inuse 5 orphan 1 tw 7 alloc 9 mem 3\nUDP: inuse 1 mem 0\n";
        assert_eq!(sockstat(ss), Some(SockStat { inuse: 5, orphan: 1, tw: 7, alloc: 9, mem: 3 }));
    }

    #[test]
    fn finds_cpu_stat_on_hybrid_and_unified_hosts() {
        let hybrid = "9:name=systemd:/\n4:cpu,cpuacct:/loader-test\n0::/\n";
        assert_eq!(cgroup_v1_cpu(hybrid), Some(("cpu,cpuacct".into(), "/loader-test".into())));
        let c = cpu_stat_candidates(hybrid);
        assert_eq!(c[0], "/sys/fs/cgroup/cpu,cpuacct/loader-test/cpu.stat");
        assert_eq!(cpu_stat_candidates("0::/user.slice\n")[0], "/sys/fs/cgroup/user.slice/cpu.stat");
        let v1 = cgroup_cpu("nr_periods 83\nnr_throttled 83\nthrottled_time 3500000000\n");
        assert_eq!(v1, CgroupCpu { nr_throttled: Some(83), throttled_usec: Some(3_500_000) });
    }
}
