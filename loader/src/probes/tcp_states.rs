//! Reader of the `tcp_states` probe: per-CPU transition counters summed into
//! `"OLD->NEW" → count`.
//!
//! Owns: the typed handle on `TCP_STATE_COUNTS`, naming transitions, and the counts other
//! readings derive from transitions (failed connects: SYN_SENT → CLOSE; TIME_WAIT entries:
//! FIN_WAIT2 → CLOSE and CLOSING → CLOSE). Does not: load or attach (see [`super`]), judge the
//! counts (the verdict does), or follow TIME_WAIT sockets (the full socket leaves this
//! tracepoint at FIN_WAIT2 → CLOSE; the live count is `time_wait.rs`'s).

use std::collections::BTreeMap;

use aya::{
    Ebpf,
    maps::{MapData, MapError, PerCpuArray},
};
use probes_ebpf::{TRANSITION_SLOTS, names, state_name, tcp_state, transition_index, transition_of};

use super::ReadError;
use super::{
    Unavailable,
    counters::{read_sums, take_per_cpu_array},
};

/// Owned handle on the probe's counter map.
pub(crate) struct TcpStatesReader {
    counts: PerCpuArray<MapData, u64>,
}

impl std::fmt::Debug for TcpStatesReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpStatesReader").finish_non_exhaustive()
    }
}

/// Transition counts by `transition_index`, summed over CPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Transitions(Vec<u64>);

impl Transitions {
    /// Count of `old → new`.
    pub(crate) fn count(&self, old: u32, new: u32) -> u64 {
        transition_index(old, new).and_then(|i| self.0.get(i as usize)).copied().unwrap_or(0)
    }

    /// Connects the loader started (CLOSE → SYN_SENT).
    pub(crate) fn connects(&self) -> u64 {
        self.count(tcp_state::CLOSE, tcp_state::SYN_SENT)
    }

    /// Connects that failed: refused, timed out, reset or aborted (SYN_SENT → CLOSE).
    pub(crate) fn failed_connects(&self) -> u64 {
        self.count(tcp_state::SYN_SENT, tcp_state::CLOSE)
    }

    /// Active closes that end in a timewait socket (FIN_WAIT2 → CLOSE, CLOSING → CLOSE): the
    /// kernel hands the connection to a TIME_WAIT socket at exactly these transitions. (A
    /// reset received in FIN_WAIT2 also ends there without TIME_WAIT; rare, not told apart.)
    pub(crate) fn time_wait_entries(&self) -> u64 {
        self.count(tcp_state::FIN_WAIT2, tcp_state::CLOSE) + self.count(tcp_state::CLOSING, tcp_state::CLOSE)
    }

    /// Non-zero transitions keyed `"SYN_SENT->ESTABLISHED"`.
    pub(crate) fn named(&self) -> BTreeMap<String, u64> {
        (0u32..)
            .zip(&self.0)
            .filter(|&(_, &n)| n > 0)
            .map(|(index, &n)| {
                let (old, new) = transition_of(index);
                (transition_name(old, new), n)
            })
            .collect()
    }
}

impl TcpStatesReader {
    /// Take the probe's map out of `ebpf`.
    pub(crate) fn take(ebpf: &mut Ebpf) -> Result<Self, Unavailable> {
        Ok(TcpStatesReader { counts: take_per_cpu_array(ebpf, names::TCP_STATE_COUNTS)? })
    }

    /// Zero the counts (between the runs of `--repeat`).
    pub(crate) fn reset(&mut self) -> Result<(), ReadError> {
        super::counters::zero(&mut self.counts)?;
        Ok(())
    }

    /// Every transition count since start.
    pub(crate) fn read(&self) -> Result<Transitions, MapError> {
        Ok(Transitions(read_sums(&self.counts, TRANSITION_SLOTS)?))
    }

    /// Non-zero transition counts since start, keyed `"SYN_SENT->ESTABLISHED"`.
    pub(crate) fn transitions(&self) -> Result<BTreeMap<String, u64>, MapError> {
        Ok(self.read()?.named())
    }
}

/// `"OLD->NEW"` with the kernel's state names (`TCP_` dropped); numbers no kernel defines
/// yet show as `STATE_<n>`.
pub(crate) fn transition_name(old: u32, new: u32) -> String {
    let name = |state: u32| state_name(state).map_or_else(|| format!("STATE_{state}"), str::to_owned);
    format!("{}->{}", name(old), name(new))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_transitions_like_the_kernel() {
        assert_eq!(transition_name(tcp_state::CLOSE, tcp_state::SYN_SENT), "CLOSE->SYN_SENT");
        assert_eq!(transition_name(tcp_state::SYN_SENT, tcp_state::ESTABLISHED), "SYN_SENT->ESTABLISHED");
        assert_eq!(transition_name(15, tcp_state::CLOSE), "STATE_15->CLOSE");
    }

    #[test]
    fn derived_counts() {
        let mut slots = vec![0; TRANSITION_SLOTS as usize];
        let mut set = |old, new, n| slots[transition_index(old, new).unwrap() as usize] = n;
        set(tcp_state::CLOSE, tcp_state::SYN_SENT, 10);
        set(tcp_state::SYN_SENT, tcp_state::CLOSE, 2);
        set(tcp_state::FIN_WAIT2, tcp_state::CLOSE, 5);
        set(tcp_state::CLOSING, tcp_state::CLOSE, 1);
        let t = Transitions(slots);
        assert_eq!((t.connects(), t.failed_connects(), t.time_wait_entries()), (10, 2, 6));
        assert_eq!(t.named().len(), 4);
    }
}
