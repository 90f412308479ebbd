//! Reader of the `drops` probe: packets dropped on the loader's sockets, by the kernel's
//! drop reason (`enum skb_drop_reason`, named as `skb:kfree_skb`'s format file prints them).
//!
//! Owns: the handle on `DROP_COUNTS` and the reason names of the running kernel. Does not:
//! see drops that happen before a packet is matched to a socket (netfilter, routing,
//! NO_SOCKET) or on the send side — see the kernel program's doc.

use std::collections::BTreeMap;

use aya::{
    Ebpf,
    maps::{MapData, MapError, PerCpuArray},
};
use probes_ebpf::{DROP_REASON_SLOTS, names};

use super::ReadError;
use super::{
    Unavailable,
    counters::{read_sums, take_per_cpu_array},
};

/// Owned handle on `DROP_COUNTS` and the reason names.
pub(crate) struct DropsReader {
    counts: PerCpuArray<MapData, u64>,
    /// `enum skb_drop_reason` value → name (`"NO_SOCKET"`), from the format file.
    reason_names: BTreeMap<u32, String>,
}

impl std::fmt::Debug for DropsReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DropsReader").field("reasons", &self.reason_names.len()).finish_non_exhaustive()
    }
}

impl DropsReader {
    /// Take the map out of `ebpf`; `reason_names` from `tracefs::symbolic_names`.
    pub(crate) fn take(ebpf: &mut Ebpf, reason_names: BTreeMap<u32, String>) -> Result<Self, Unavailable> {
        Ok(DropsReader { counts: take_per_cpu_array(ebpf, names::DROP_COUNTS)?, reason_names })
    }

    /// Zero the counts (between the runs of `--repeat`).
    pub(crate) fn reset(&mut self) -> Result<(), ReadError> {
        super::counters::zero(&mut self.counts)?;
        Ok(())
    }

    /// Non-zero drop counts since start by reason name (`"reason_<n>"` for a value the format
    /// file does not name).
    pub(crate) fn read(&self) -> Result<BTreeMap<String, u64>, MapError> {
        let slots = read_sums(&self.counts, DROP_REASON_SLOTS)?;
        Ok((0u32..).zip(slots).filter(|&(_, n)| n > 0).map(|(reason, n)| (self.reason_name(reason), n)).collect())
    }

    fn reason_name(&self, reason: u32) -> String {
        self.reason_names.get(&reason).cloned().unwrap_or_else(|| format!("reason_{reason}"))
    }
}
