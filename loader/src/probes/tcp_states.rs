//! Reader of the `tcp_states` probe: per-CPU transition counters summed into
//! `"OLD->NEW" → count`, and the probe's lost counters.
//!
//! Owns: the typed handles on `TCP_STATE_COUNTS` and `TCP_STATE_LOST`, summing per-CPU
//! slots, naming transitions. Does not: load or attach (see [`super`]), judge the counts
//! (the verdict does), or follow TIME_WAIT sockets (the full socket leaves this tracepoint at
//! FIN_WAIT2 → CLOSE; live TIME_WAIT needs another source).

use std::collections::BTreeMap;

use aya::{
    Ebpf,
    maps::{MapData, MapError, PerCpuArray},
};
use probes_ebpf::{TRANSITION_SLOTS, lost, names, state_name, transition_of};

use super::Unavailable;

/// Owned handles on the probe's counter maps (taken out of the [`Ebpf`] at start, so a
/// missing or mistyped map is found then, not at the first read).
pub(crate) struct TcpStatesReader {
    counts: PerCpuArray<MapData, u64>,
    lost: PerCpuArray<MapData, u64>,
}

impl std::fmt::Debug for TcpStatesReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpStatesReader").finish_non_exhaustive()
    }
}

impl TcpStatesReader {
    /// Take the probe's maps out of `ebpf`.
    pub(crate) fn take(ebpf: &mut Ebpf) -> Result<Self, Unavailable> {
        Ok(TcpStatesReader {
            counts: take_per_cpu_array(ebpf, names::TCP_STATE_COUNTS)?,
            lost: take_per_cpu_array(ebpf, names::TCP_STATE_LOST)?,
        })
    }

    /// Non-zero transition counts since start, keyed `"SYN_SENT->ESTABLISHED"`.
    pub(crate) fn transitions(&self) -> Result<BTreeMap<String, u64>, MapError> {
        let mut transitions = BTreeMap::new();
        for index in 0..TRANSITION_SLOTS {
            let count = sum(&self.counts.get(&index, 0)?);
            if count > 0 {
                let (old, new) = transition_of(index);
                transitions.insert(transition_name(old, new), count);
            }
        }
        Ok(transitions)
    }

    /// Events the kernel program saw but could not count, by [`lost`] reason.
    pub(crate) fn lost(&self) -> Result<[(&'static str, u64); lost::SLOTS as usize], MapError> {
        let mut by_reason = lost::NAMES.map(|name| (name, 0));
        for (index, slot) in (0..lost::SLOTS).zip(by_reason.iter_mut()) {
            slot.1 = sum(&self.lost.get(&index, 0)?);
        }
        Ok(by_reason)
    }
}

fn take_per_cpu_array(ebpf: &mut Ebpf, name: &'static str) -> Result<PerCpuArray<MapData, u64>, Unavailable> {
    let map = ebpf.take_map(name).ok_or(Unavailable::MissingFromObject { item: name })?;
    PerCpuArray::try_from(map).map_err(|source| Unavailable::Map { name, source })
}

fn sum(per_cpu: &[u64]) -> u64 {
    per_cpu.iter().fold(0u64, |total, &n| total.saturating_add(n))
}

/// `"OLD->NEW"` with the kernel's state names (`TCP_` dropped); numbers no kernel defines
/// yet show as `STATE_<n>`.
pub(crate) fn transition_name(old: u32, new: u32) -> String {
    let name = |state: u32| state_name(state).map_or_else(|| format!("STATE_{state}"), str::to_owned);
    format!("{}->{}", name(old), name(new))
}

#[cfg(test)]
mod tests {
    use probes_ebpf::tcp_state;

    use super::*;

    #[test]
    fn names_transitions_like_the_kernel() {
        assert_eq!(transition_name(tcp_state::CLOSE, tcp_state::SYN_SENT), "CLOSE->SYN_SENT");
        assert_eq!(transition_name(tcp_state::SYN_SENT, tcp_state::ESTABLISHED), "SYN_SENT->ESTABLISHED");
        assert_eq!(transition_name(15, tcp_state::CLOSE), "STATE_15->CLOSE");
    }

    #[test]
    fn sums_saturate() {
        assert_eq!(sum(&[1, 2, 3]), 6);
        assert_eq!(sum(&[u64::MAX, 1]), u64::MAX);
    }
}
