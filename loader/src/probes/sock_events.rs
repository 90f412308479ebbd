//! Reader of the `syn_retransmits`, `resets_received` and `resets_sent` probes, which count
//! into one per-CPU array, `SOCK_EVENTS` (slots `probes_ebpf::sock_event`).
//!
//! Owns: the handle on `SOCK_EVENTS` and naming its slots. Does not: attribute a SYN
//! retransmit to the network or the target (the verdict does, with the loader's own health).

use aya::{
    Ebpf,
    maps::{MapData, MapError, PerCpuArray},
};
use probes_ebpf::{names, sock_event};
use serde::Serialize;

use super::ReadError;
use super::{
    Unavailable,
    counters::{read_sums, take_per_cpu_array},
};

/// Retransmit and reset counts of the loader's sockets since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SockEvents {
    /// SYNs retransmitted (no SYN-ACK in time: dropped by the network or a full target backlog).
    pub syn_retransmits: u64,
    /// All retransmitted segments, SYNs included.
    pub retransmits: u64,
    /// Resets received (including the RST answering a SYN to a closed port).
    pub resets_received: u64,
    /// Resets the loader's sockets sent (abortive close, unread data at close, bad segment).
    pub resets_sent: u64,
}

/// Owned handle on `SOCK_EVENTS`.
pub(crate) struct SockEventsReader {
    counts: PerCpuArray<MapData, u64>,
}

impl std::fmt::Debug for SockEventsReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SockEventsReader").finish_non_exhaustive()
    }
}

impl SockEventsReader {
    /// Take the map out of `ebpf`.
    pub(crate) fn take(ebpf: &mut Ebpf) -> Result<Self, Unavailable> {
        Ok(SockEventsReader { counts: take_per_cpu_array(ebpf, names::SOCK_EVENTS)? })
    }

    /// Zero the counts (between the runs of `--repeat`).
    pub(crate) fn reset(&mut self) -> Result<(), ReadError> {
        super::counters::zero(&mut self.counts)?;
        Ok(())
    }

    /// Counts since start.
    pub(crate) fn read(&self) -> Result<SockEvents, MapError> {
        let slots = read_sums(&self.counts, sock_event::SLOTS)?;
        let slot = |index: u32| slots[index as usize];
        Ok(SockEvents {
            syn_retransmits: slot(sock_event::SYN_RETRANSMITS),
            retransmits: slot(sock_event::RETRANSMITS),
            resets_received: slot(sock_event::RESETS_RECEIVED),
            resets_sent: slot(sock_event::RESETS_SENT),
        })
    }
}
