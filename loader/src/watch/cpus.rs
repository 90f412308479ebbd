//! Host cores as a watch source (`--watch NAME=cpu:LIST`): how busy cores 1, or 2-3 and 5,
//! were each second, from `/proc/stat` — the ceiling that processes sharing those cores meet
//! together while each of them alone looks far from its own. And the CPUs a process may run
//! on (its affinity), or the host has (`/sys/devices/system/cpu/online`), which are the
//! ceilings of the other CPU sources.
//!
//! What this module owns: parsing `/proc/stat`'s per-core lines (pure), one reading of the
//! listed cores' cumulative ticks ([`Cores::read`]), a process's affinity and the host's
//! online CPUs. What it does not: differences between readings (the sampler's), judging
//! them (`steps.rs`), or naming who shared the cores (`knee.rs`).
//!
//! Busy is user + nice + system + irq + softirq (guest time is inside user); idle and iowait
//! are idle; steal — time the hypervisor gave to another guest — is kept apart, as capacity
//! the cores did not have. Errors are one line naming the source (`cpu:7: no CPU 7 in
//! /proc/stat (this host has 0-1 online)`).

use std::fs;

use super::io_msg;
use crate::scenario::{cpu_list, parse_cpu_list};

/// Cumulative ticks of the listed cores at one instant (`USER_HZ`, 100 a second).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoresReading {
    /// Ticks the cores were busy.
    pub busy: u64,
    /// Ticks the hypervisor took from them.
    pub steal: u64,
}

/// Listed host cores, checked once and read each second.
#[derive(Debug, Clone)]
pub struct Cores {
    /// The cores, ascending.
    cpus: Vec<usize>,
    /// Clock ticks per second (`sysconf(_SC_CLK_TCK)`).
    clk_tck: u64,
}

impl Cores {
    /// The cores `cpus`; fails (one line) when `/proc/stat` cannot be read or lacks one.
    pub fn open(cpus: &[usize]) -> Result<Cores, String> {
        let clk_tck = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .filter(|&v| v > 0)
            .map_or(100, |v| v as u64);
        let cores = Cores { cpus: cpus.to_vec(), clk_tck };
        cores.read()?;
        Ok(cores)
    }

    /// The cores.
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// Ticks → seconds.
    pub fn seconds(&self, ticks: u64) -> f64 {
        ticks as f64 / self.clk_tck as f64
    }

    /// The listed cores' ticks now.
    pub fn read(&self) -> Result<CoresReading, String> {
        let text = fs::read_to_string("/proc/stat").map_err(|e| format!("cannot read /proc/stat: {}", io_msg(&e)))?;
        sum_cores(&text, &self.cpus)
    }
}

/// The listed cores' ticks in `/proc/stat`'s text; an error names a core it lacks.
fn sum_cores(text: &str, cpus: &[usize]) -> Result<CoresReading, String> {
    let mut sum = CoresReading::default();
    let mut found = Vec::with_capacity(cpus.len());
    for (cpu, reading) in text.lines().filter_map(parse_core_line) {
        if cpus.binary_search(&cpu).is_ok() {
            sum.busy = sum.busy.saturating_add(reading.busy);
            sum.steal = sum.steal.saturating_add(reading.steal);
            found.push(cpu);
        }
    }
    match cpus.iter().find(|c| !found.contains(c)) {
        None => Ok(sum),
        Some(missing) => Err(format!(
            "no CPU {missing} in /proc/stat (this host has {} online)",
            host_cpus().map_or("?".into(), |c| cpu_list(&c))
        )),
    }
}

/// `cpuN user nice system idle iowait irq softirq steal …` → (N, its ticks); `None` for the
/// all-CPU `cpu` line, other lines, or a malformed one.
fn parse_core_line(line: &str) -> Option<(usize, CoresReading)> {
    let mut fields = line.split_whitespace();
    let cpu = fields.next()?.strip_prefix("cpu")?.parse::<usize>().ok()?;
    let ticks: Vec<u64> = fields.take(8).map(|f| f.parse::<u64>()).collect::<Result<_, _>>().ok()?;
    let at = |i: usize| ticks.get(i).copied().unwrap_or(0);
    if ticks.len() < 4 {
        return None;
    }
    // user nice system [idle iowait] irq softirq [steal]
    let busy = at(0).saturating_add(at(1)).saturating_add(at(2)).saturating_add(at(5)).saturating_add(at(6));
    Some((cpu, CoresReading { busy, steal: at(7) }))
}

/// The CPUs process `pid` may run on (its affinity, kept by the kernel within its cpuset),
/// ascending; empty when it cannot be read (the process ended).
pub fn affinity(pid: u32) -> Vec<usize> {
    use nix::sched::{CpuSet, sched_getaffinity};
    let Ok(set) = sched_getaffinity(nix::unistd::Pid::from_raw(pid as i32)) else { return Vec::new() };
    (0..CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false)).collect()
}

/// The host's online CPUs (`/sys/devices/system/cpu/online`), ascending.
pub fn host_cpus() -> Option<Vec<usize>> {
    let text = fs::read_to_string("/sys/devices/system/cpu/online").ok()?;
    parse_cpu_list(text.trim()).ok().filter(|c| !c.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  300 10 100 5000 20 5 5 40 0 0\n\
                        cpu0 100 0 50 2500 10 2 3 20 0 0\n\
                        cpu1 200 10 50 2500 10 3 2 20 0 0\n\
                        intr 12345 0 0\nctxt 999\n";

    #[test]
    fn core_lines() {
        assert_eq!(
            parse_core_line("cpu1 200 10 50 2500 10 3 2 20 0 0"),
            Some((1, CoresReading { busy: 265, steal: 20 }))
        );
        assert_eq!(parse_core_line("cpu  300 10 100 5000 20 5 5 40 0 0"), None, "the all-CPU line");
        assert_eq!(parse_core_line("intr 12345 0 0"), None);
        assert_eq!(parse_core_line("cpu1 200 x 50 2500"), None);
        // An old kernel's four fields: no irq, softirq or steal.
        assert_eq!(parse_core_line("cpu3 1 2 3 4"), Some((3, CoresReading { busy: 6, steal: 0 })));
    }

    #[test]
    fn listed_cores_are_summed_and_a_missing_one_is_named() {
        assert_eq!(sum_cores(STAT, &[1]), Ok(CoresReading { busy: 265, steal: 20 }));
        assert_eq!(sum_cores(STAT, &[0, 1]), Ok(CoresReading { busy: 420, steal: 40 }));
        let e = sum_cores(STAT, &[1, 7]).unwrap_err();
        assert!(e.starts_with("no CPU 7 in /proc/stat") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn this_host() {
        let cpus = host_cpus().expect("/sys/devices/system/cpu/online");
        assert!(cpus.contains(&0), "{cpus:?}");
        let cores = Cores::open(&[0]).expect("cpu0");
        assert!(cores.read().unwrap().busy > 0);
        assert!(affinity(std::process::id()).contains(&cpus[0]) || !affinity(std::process::id()).is_empty());
        assert!(affinity(u32::MAX >> 1).is_empty(), "no such process");
    }
}
