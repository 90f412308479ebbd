//! Typed handles on the probes' maps and summing per-CPU counters.
//!
//! Owns: taking a map out of the [`Ebpf`] with the type its reader expects (a missing or
//! mistyped map is an object mismatch found at start, not at the first read), and summing
//! per-CPU slots. Does not: know what any slot means (the probe readers do).

use aya::{
    Ebpf,
    maps::{MapData, MapError, PerCpuArray, PerCpuValues},
};

use super::ReadError;
use super::Unavailable;
use super::batch::{self, PerCpuSlots};

/// The `LOST` array (`probes_ebpf::lost` slots), shared by every kernel program.
pub(crate) struct LostCounters(pub(crate) PerCpuArray<MapData, u64>);

impl std::fmt::Debug for LostCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LostCounters").finish_non_exhaustive()
    }
}

/// Take the per-CPU `u64` array `name` out of `ebpf`.
pub(crate) fn take_per_cpu_array(
    ebpf: &mut Ebpf,
    name: &'static str,
) -> Result<PerCpuArray<MapData, u64>, Unavailable> {
    let map = ebpf.take_map(name).ok_or(Unavailable::MissingFromObject { item: name })?;
    PerCpuArray::try_from(map).map_err(|source| Unavailable::Map { name, source })
}

/// Slots `0..slots` of a per-CPU `u64` array, each summed over CPUs (saturating).
pub(crate) fn read_sums(map: &PerCpuArray<MapData, u64>, slots: u32) -> Result<Vec<u64>, MapError> {
    let all = read_slots(map, slots)?;
    Ok((0..slots).map(|index| sum(all.slot(index))).collect())
}

/// Every CPU's value of slots `0..slots`: one batch call, or one lookup a slot where the
/// kernel cannot batch.
pub(crate) fn read_slots(map: &PerCpuArray<MapData, u64>, slots: u32) -> Result<PerCpuSlots, MapError> {
    batch::read_slots(map, slots).or_else(|_| batch::read_slots_one_by_one(map, slots))
}

/// Set every slot of a per-CPU `u64` array to zero on every CPU.
pub(crate) fn zero(map: &mut PerCpuArray<MapData, u64>) -> Result<(), ReadError> {
    let cpus = map.get(&0, 0)?.len();
    for index in 0..map.len() {
        map.set(index, PerCpuValues::try_from(vec![0u64; cpus])?, 0)?;
    }
    Ok(())
}

/// Saturating sum of one slot's per-CPU values.
pub(crate) fn sum(per_cpu: &[u64]) -> u64 {
    per_cpu.iter().fold(0u64, |total, &n| total.saturating_add(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_saturate() {
        assert_eq!(sum(&[1, 2, 3]), 6);
        assert_eq!(sum(&[u64::MAX, 1]), u64::MAX);
    }
}
