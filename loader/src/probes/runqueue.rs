//! Reader of the run-queue probe (`runq_wakeup`, `runq_wakeup_new`, `runq_switch`): how long
//! the loader's threads waited runnable before they ran, by role: the shard threads
//! (`RUNQ_LATENCY`: their delay moves sends) and every other thread (`RUNQ_LATENCY_OTHER`).
//!
//! Owns: the histogram handles, seeding `LOADER_TIDS` with the threads that exist at start
//! (the kernel learns later ones itself; see the kernel program's doc), and marking the shard
//! threads once they exist. Does not: break the delay down per thread or per CPU, or judge it.

use std::fs;

use aya::{
    Ebpf,
    maps::{HashMap, MapData, MapError, PerCpuArray},
};
use probes_ebpf::{names, thread_role};

use super::ReadError;
use super::{Unavailable, counters::take_per_cpu_array, histogram::LatencyHistogram};

/// Owned handles on the run-queue histograms.
pub(crate) struct RunqueueReader {
    histogram: PerCpuArray<MapData, u64>,
    other: PerCpuArray<MapData, u64>,
}

impl std::fmt::Debug for RunqueueReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunqueueReader").finish_non_exhaustive()
    }
}

impl RunqueueReader {
    /// Take the histogram out of `ebpf`.
    pub(crate) fn take(ebpf: &mut Ebpf) -> Result<Self, Unavailable> {
        Ok(RunqueueReader {
            histogram: take_per_cpu_array(ebpf, names::RUNQ_LATENCY)?,
            other: take_per_cpu_array(ebpf, names::RUNQ_LATENCY_OTHER)?,
        })
    }

    /// Zero the counts (between the runs of `--repeat`).
    pub(crate) fn reset(&mut self) -> Result<(), ReadError> {
        super::counters::zero(&mut self.histogram)?;
        super::counters::zero(&mut self.other)?;
        Ok(())
    }

    /// Run-queue delays of the shard threads since start.
    pub(crate) fn read(&self) -> Result<LatencyHistogram, MapError> {
        LatencyHistogram::read(&self.histogram)
    }

    /// Run-queue delays of the other loader threads since start.
    pub(crate) fn read_other(&self) -> Result<LatencyHistogram, MapError> {
        LatencyHistogram::read(&self.other)
    }
}

/// Record `tids` as shard threads in `LOADER_TIDS`, so their delays are kept apart.
pub(crate) fn mark_shards(ebpf: &mut Ebpf, tids: &[u32]) -> Result<(), String> {
    let map =
        ebpf.map_mut(names::LOADER_TIDS).ok_or_else(|| format!("the eBPF object has no {}", names::LOADER_TIDS))?;
    let mut map: HashMap<_, u32, u8> =
        HashMap::try_from(map).map_err(|err| format!("{}: {err}", names::LOADER_TIDS))?;
    for &tid in tids {
        map.insert(tid, thread_role::SHARD, 0).map_err(|err: MapError| format!("{}: {err}", names::LOADER_TIDS))?;
    }
    Ok(())
}

/// Put the threads of `tgid` alive now into `LOADER_TIDS`, so their first wake-up after
/// attach is already measured. Returns how many were added.
pub(crate) fn seed_threads(ebpf: &mut Ebpf, tgid: u32) -> Result<usize, String> {
    let map =
        ebpf.map_mut(names::LOADER_TIDS).ok_or_else(|| format!("the eBPF object has no {}", names::LOADER_TIDS))?;
    let mut tids: HashMap<_, u32, u8> =
        HashMap::try_from(map).map_err(|err| format!("{}: {err}", names::LOADER_TIDS))?;
    let dir = format!("/proc/{tgid}/task");
    let entries = fs::read_dir(&dir).map_err(|err| format!("{dir}: {err}"))?;
    let mut added = 0;
    for entry in entries.flatten() {
        if let Some(tid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) {
            // A thread that exited meanwhile is harmless: its tid is dropped at reuse.
            tids.insert(tid, thread_role::OTHER, 0)
                .map_err(|err: MapError| format!("{}: {err}", names::LOADER_TIDS))?;
            added += 1;
        }
    }
    Ok(added)
}
