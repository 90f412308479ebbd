//! What the probes saw but could not count: the programs' own `LOST` counters by reason, the
//! kernel's `recursion_misses` of each attached program, and the share of events lost per
//! verdict rule.
//!
//! Owns: summing those since start (or the last reset). Does not: judge whether the loss
//! matters (the verdict does).

use std::{
    collections::BTreeMap,
    fs,
    os::fd::{AsFd as _, AsRawFd as _},
};

use probes_ebpf::{lost as lost_reason, names};

use super::ReadError;
use super::{LossShare, Probes, Unavailable, counters::read_sums, tcp_states};

impl Probes {
    /// Events the probes saw but could not count, by reason: the programs' own lost
    /// counters plus `recursion_misses`, runs the kernel skipped because another BPF
    /// program was already running on that CPU (from `/proc/self/fdinfo`, Linux 5.12+),
    /// summed over every attached program.
    pub fn lost_by_reason(&self) -> Result<BTreeMap<&'static str, u64>, ReadError> {
        let counts = read_sums(&self.lost.0, lost_reason::SLOTS)?;
        let mut by_reason: BTreeMap<_, _> = lost_reason::NAMES.into_iter().zip(counts).collect();
        let mut misses = 0u64;
        for program in &self.attached {
            let since_reset =
                self.recursion_misses(program)?.saturating_sub(self.misses_at_reset.get(program).copied().unwrap_or(0));
            misses = misses.saturating_add(since_reset);
        }
        by_reason.insert("recursion_misses", misses);
        Ok(by_reason)
    }

    /// How much of what the probes should have counted they lost, by what it hides: for the
    /// run-queue rule, the share of scheduler events the kernel skipped (`recursion_misses`
    /// of the scheduler programs over their runs) or of the loader's waits with no room in
    /// the thread maps; for the socket rules, the same for `sock:inet_sock_set_state`.
    pub(super) fn loss_share(
        &self,
        by_reason: &BTreeMap<&'static str, u64>,
        runqueue_events: u64,
        transitions: &tcp_states::Transitions,
    ) -> Result<LossShare, ReadError> {
        let runs = read_sums(&self.runs.0, probes_ebpf::runs::SLOTS)?;
        let misses = |programs: &[&'static str]| -> Result<u64, ReadError> {
            let mut n = 0u64;
            for &p in programs.iter().filter(|p| self.attached.contains(p)) {
                n += self.recursion_misses(p)?.saturating_sub(self.misses_at_reset.get(p).copied().unwrap_or(0));
            }
            Ok(n)
        };
        let share = |lost: u64, seen: u64| if lost == 0 { 0.0 } else { lost as f64 / (seen + lost).max(1) as f64 };
        let sched_runs = runs[probes_ebpf::runs::RUNQ_WAKEUP as usize] + runs[probes_ebpf::runs::RUNQ_SWITCH as usize];
        let sched_missed =
            misses(&[names::RUNQ_WAKEUP_PROGRAM, names::RUNQ_WAKEUP_NEW_PROGRAM, names::RUNQ_SWITCH_PROGRAM])?;
        let tcp_missed = misses(&[names::TCP_STATES_PROGRAM])?;
        let get = |reason: &str| by_reason.get(reason).copied().unwrap_or(0);
        Ok(LossShare {
            runqueue: share(sched_missed, sched_runs).max(share(get("tid_map_full"), runqueue_events)),
            sockets: share(tcp_missed, runs[probes_ebpf::runs::TCP_STATES as usize])
                .max(share(get("sock_map_full"), transitions.named().values().sum())),
        })
    }

    /// Total of [`Probes::lost_by_reason`]; `u64::MAX` if the counters cannot be read, so a
    /// failure to read them can never pass for "nothing lost".
    pub fn lost(&self) -> u64 {
        self.lost_by_reason()
            .map(|by_reason| by_reason.values().fold(0u64, |total, &n| total.saturating_add(n)))
            .unwrap_or(u64::MAX)
    }

    /// The kernel's `recursion_misses` of a loaded program (from its `bpf_prog_info`, or its
    /// fdinfo where the kernel cannot say it that way).
    pub(super) fn recursion_misses(&self, program: &'static str) -> Result<u64, ReadError> {
        let fd = self.ebpf.program(program).ok_or(Unavailable::MissingFromObject { item: program })?.fd()?.as_fd();
        if let Ok(n) = super::batch::recursion_misses(fd) {
            return Ok(n);
        }
        let fdinfo = fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))?;
        Ok(recursion_misses_of(&fdinfo))
    }
}

/// The `recursion_misses:` line of a BPF program's `/proc/<pid>/fdinfo/<fd>`; 0 when the
/// kernel (before 5.12) does not print it.
fn recursion_misses_of(fdinfo: &str) -> u64 {
    fdinfo
        .lines()
        .find_map(|line| line.strip_prefix("recursion_misses:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_recursion_misses_from_fdinfo() {
        // A tracepoint program's fdinfo on Linux 6.18 (abridged).
        let fdinfo = "prog_type:\t5\nprog_tag:\t04350585e71ea4d3\nrun_cnt:\t0\n\
                      recursion_misses:\t7\nverified_insns:\t230\n";
        assert_eq!(recursion_misses_of(fdinfo), 7);
        assert_eq!(recursion_misses_of("prog_type:\t5\n"), 0);
    }
}
