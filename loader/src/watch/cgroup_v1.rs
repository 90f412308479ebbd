//! The cgroup v1 side of a watched cgroup, for hosts that keep the `cpu`, `cpuacct` or
//! `memory` controllers on v1 (a hybrid host: v2 at `/sys/fs/cgroup/unified`, the quota in
//! `/sys/fs/cgroup/cpu/NAME/cpu.cfs_quota_us`). The same cgroup path is looked up in each v1
//! hierarchy; what is found there fills what the v2 directory cannot say.
//!
//! Owns: finding the v1 hierarchies (`/proc/self/mounts`), the path of a directory below
//! one, and reading `cpuacct.usage`, `cpu.stat` (`nr_throttled`, `throttled_time`),
//! `cpu.cfs_quota_us` / `cpu.cfs_period_us`, `memory.usage_in_bytes` and
//! `memory.limit_in_bytes`. Does not: rates, judgement (the caller's).

use std::fs;
use std::path::{Path, PathBuf};

/// The v1 directories of one cgroup, where they exist.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct V1 {
    /// In the hierarchy holding `cpu` (quota, throttling).
    pub cpu: Option<PathBuf>,
    /// In the hierarchy holding `cpuacct` (CPU used).
    pub cpuacct: Option<PathBuf>,
    /// In the hierarchy holding `memory`.
    pub memory: Option<PathBuf>,
}

/// What the v1 files said; `None` where a file was absent or unreadable.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct V1Reading {
    /// `cpuacct.usage`, µs.
    pub usage_us: Option<u64>,
    /// `cpu.stat` `throttled_time`, µs.
    pub throttled_us: Option<u64>,
    /// `cpu.stat` `nr_throttled`.
    pub nr_throttled: Option<u64>,
    /// `cpu.cfs_quota_us / cpu.cfs_period_us`; `None` without a quota (−1).
    pub limit_cores: Option<f64>,
    /// `memory.usage_in_bytes`.
    pub memory_bytes: Option<u64>,
}

/// The v1 hierarchies of this host: (mount point, its controllers).
fn hierarchies() -> Vec<(PathBuf, Vec<String>)> {
    fs::read_to_string("/proc/self/mounts").map(|t| parse_mounts(&t)).unwrap_or_default()
}

/// `cgroup` (v1) lines of `/proc/self/mounts` text → (mount point, controllers among its
/// options).
fn parse_mounts(text: &str) -> Vec<(PathBuf, Vec<String>)> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (f.len() >= 4 && f[2] == "cgroup").then(|| {
                let controllers = f[3]
                    .split(',')
                    .filter(|o| matches!(*o, "cpu" | "cpuacct" | "memory" | "cpuset" | "pids"))
                    .map(str::to_string)
                    .collect();
                (PathBuf::from(f[1]), controllers)
            })
        })
        .collect()
}

impl V1 {
    /// The cgroup at `relative` (below a hierarchy's root; `""` is the root) in each v1
    /// hierarchy where that directory exists.
    pub fn find(relative: &Path) -> V1 {
        let mut v1 = V1::default();
        for (root, controllers) in hierarchies() {
            let dir = root.join(relative);
            if !dir.is_dir() {
                continue;
            }
            for c in &controllers {
                let slot = match c.as_str() {
                    "cpu" => &mut v1.cpu,
                    "cpuacct" => &mut v1.cpuacct,
                    "memory" => &mut v1.memory,
                    _ => continue,
                };
                slot.get_or_insert_with(|| dir.clone());
            }
        }
        v1
    }

    /// `dir`'s path below the v1 hierarchy that holds it, if one does.
    pub fn relative(dir: &Path) -> Option<PathBuf> {
        hierarchies().into_iter().find_map(|(root, _)| dir.strip_prefix(&root).ok().map(Path::to_path_buf))
    }

    /// Nothing found.
    pub fn is_empty(&self) -> bool {
        self.cpu.is_none() && self.cpuacct.is_none() && self.memory.is_none()
    }

    /// One reading of whatever the directories hold.
    pub fn read(&self) -> V1Reading {
        let file = |dir: &Option<PathBuf>, name: &str| dir.as_ref().and_then(|d| fs::read_to_string(d.join(name)).ok());
        let number = |dir: &Option<PathBuf>, name: &str| file(dir, name).and_then(|t| t.trim().parse::<i64>().ok());
        let stat = file(&self.cpu, "cpu.stat").map(|t| parse_cpu_stat(&t)).unwrap_or_default();
        let limit_cores = number(&self.cpu, "cpu.cfs_quota_us")
            .zip(number(&self.cpu, "cpu.cfs_period_us"))
            .filter(|&(q, p)| q > 0 && p > 0)
            .map(|(q, p)| q as f64 / p as f64);
        V1Reading {
            usage_us: number(&self.cpuacct, "cpuacct.usage").and_then(|ns| u64::try_from(ns).ok()).map(|ns| ns / 1000),
            throttled_us: stat.1.map(|ns| ns / 1000),
            nr_throttled: stat.0,
            limit_cores,
            memory_bytes: number(&self.memory, "memory.usage_in_bytes").and_then(|b| u64::try_from(b).ok()),
        }
    }
}

/// The tightest CFS quota over the v1 `cpu` cgroup a process's `/proc/PID/cgroup` text
/// names and those above it, cores, with that cgroup's directory; `None` when none has one
/// (or no v1 `cpu` is mounted).
pub fn quota_in(proc_cgroup: &str) -> Option<(PathBuf, f64)> {
    let relative = parse_proc_cgroup_cpu(proc_cgroup)?;
    let (root, _) = hierarchies().into_iter().find(|(_, c)| c.iter().any(|c| c == "cpu"))?;
    let dir = root.join(relative.trim_start_matches('/'));
    let number = |d: &Path, name: &str| fs::read_to_string(d.join(name)).ok()?.trim().parse::<i64>().ok();
    dir.ancestors()
        .take_while(|d| d.starts_with(&root))
        .filter_map(|d| {
            let (q, p) = (number(d, "cpu.cfs_quota_us")?, number(d, "cpu.cfs_period_us")?);
            (q > 0 && p > 0).then(|| q as f64 / p as f64)
        })
        .reduce(f64::min)
        .map(|q| (dir, q))
}

/// The path of the v1 hierarchy holding `cpu` in `/proc/PID/cgroup` text
/// (`1:cpu,cpuacct:/path`).
fn parse_proc_cgroup_cpu(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_id, controllers, path) = (f.next()?, f.next()?, f.next()?);
        controllers.split(',').any(|c| c == "cpu").then(|| path.trim().to_string())
    })
}

/// v1 `cpu.stat` text → (`nr_throttled`, `throttled_time` ns).
fn parse_cpu_stat(text: &str) -> (Option<u64>, Option<u64>) {
    let get = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
    };
    (get("nr_throttled"), get("throttled_time"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hybrid_hosts_mounts() {
        let text = "tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0\n\
                    cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n\
                    cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,cpu,cpuacct 0 0\n\
                    cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n\
                    cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0\n\
                    cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n";
        let m = parse_mounts(text);
        assert_eq!(m.len(), 4);
        assert_eq!(m[1], (PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"), vec!["cpu".to_string(), "cpuacct".to_string()]));
        assert!(m[3].1.is_empty());
    }

    #[test]
    fn the_cpu_line_of_proc_cgroup() {
        let text = "9:name=systemd:/\n2:cpuacct:/\n1:cpu:/loader-watch-7-quota\n0::/\n";
        assert_eq!(parse_proc_cgroup_cpu(text).as_deref(), Some("/loader-watch-7-quota"));
        assert_eq!(parse_proc_cgroup_cpu("4:cpu,cpuacct:/a/b\n").as_deref(), Some("/a/b"));
        assert_eq!(parse_proc_cgroup_cpu("2:cpuacct:/x\n3:cpuset:/\n0::/\n"), None);
    }

    #[test]
    fn throttling_in_v1_cpu_stat() {
        assert_eq!(
            parse_cpu_stat("nr_periods 120\nnr_throttled 37\nthrottled_time 912345678\n"),
            (Some(37), Some(912_345_678))
        );
        assert_eq!(parse_cpu_stat("garbage\nnr_throttled x\n"), (None, None));
    }
}
