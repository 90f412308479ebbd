//! The `tls_handshakes` probe: uprobes on the loader's own handshake markers
//! (`loader::engine::tls::loader_tls_handshake_{start,end}`), attached to this process's
//! binary, and the reader of their maps (`TLS_COUNTS`, `TLS_HANDSHAKE_LATENCY`).
//!
//! Owns: attaching both uprobes (the end first, so no start is stored without an end) and
//! naming the count slots. Does not: compare the kernel's count with the engine's (the run
//! reports both: `probes.tls_handshakes` and `tls.handshakes`), or judge them (the verdict).

use std::{num::NonZeroU32, path::Path};

use aya::{
    Ebpf,
    maps::{MapData, MapError, PerCpuArray},
    programs::{UProbe, uprobe::UProbeScope},
};
use probes_ebpf::{names, tls_event};

use super::ReadError;
use super::{
    Unavailable,
    counters::{read_sums, take_per_cpu_array},
    histogram::LatencyHistogram,
};

/// The binary the markers are in: this process's own executable. The kernel resolves the
/// link to the running inode, so it holds even if the file was replaced since start.
const OWN_BINARY: &str = "/proc/self/exe";

/// Handshakes the uprobes saw since start.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct TlsHandshakes {
    /// Handshakes begun.
    pub started: u64,
    /// Completed with a full handshake.
    pub full: u64,
    /// Completed by resumption.
    pub resumed: u64,
    /// Failed.
    pub failed: u64,
    /// Ends without a seen start (counted above, no duration).
    pub unmatched: u64,
    /// Durations of completed handshakes (start marker → end marker).
    pub histogram: LatencyHistogram,
}

impl TlsHandshakes {
    /// Handshakes completed, full or resumed.
    pub fn completed(&self) -> u64 {
        self.full.saturating_add(self.resumed)
    }
}

/// Load both programs and attach them to the markers of this binary, for process `tgid`.
pub(crate) fn attach(ebpf: &mut Ebpf, tgid: u32) -> Result<(), Unavailable> {
    let scope = NonZeroU32::new(tgid).map_or(UProbeScope::CallingProcess, UProbeScope::OneProcess);
    for (program, symbol) in
        [(names::TLS_END_PROGRAM, names::TLS_END_SYMBOL), (names::TLS_START_PROGRAM, names::TLS_START_SYMBOL)]
    {
        let uprobe: &mut UProbe = ebpf
            .program_mut(program)
            .ok_or(Unavailable::MissingFromObject { item: program })?
            .try_into()
            .map_err(|source| Unavailable::Program { program, source })?;
        uprobe.load().map_err(|source| Unavailable::Program { program, source })?;
        uprobe
            .attach(symbol, Path::new(OWN_BINARY), scope)
            .map_err(|source| Unavailable::Program { program, source })?;
    }
    Ok(())
}

/// Owned handles on the probe's maps.
pub(crate) struct TlsHandshakesReader {
    counts: PerCpuArray<MapData, u64>,
    histogram: PerCpuArray<MapData, u64>,
}

impl std::fmt::Debug for TlsHandshakesReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsHandshakesReader").finish_non_exhaustive()
    }
}

impl TlsHandshakesReader {
    /// Take the maps out of `ebpf`.
    pub(crate) fn take(ebpf: &mut Ebpf) -> Result<Self, Unavailable> {
        Ok(TlsHandshakesReader {
            counts: take_per_cpu_array(ebpf, names::TLS_COUNTS)?,
            histogram: take_per_cpu_array(ebpf, names::TLS_HANDSHAKE_LATENCY)?,
        })
    }

    /// Zero the counts (between the runs of `--repeat`).
    pub(crate) fn reset(&mut self) -> Result<(), ReadError> {
        super::counters::zero(&mut self.counts)?;
        super::counters::zero(&mut self.histogram)?;
        Ok(())
    }

    /// Handshakes completed since start, without reading the histogram (the per-second series).
    pub(crate) fn completed(&self) -> Result<u64, MapError> {
        let slots = read_sums(&self.counts, tls_event::SLOTS)?;
        Ok(slots[tls_event::FULL as usize].saturating_add(slots[tls_event::RESUMED as usize]))
    }

    /// Everything since start.
    pub(crate) fn read(&self) -> Result<TlsHandshakes, MapError> {
        let slots = read_sums(&self.counts, tls_event::SLOTS)?;
        let slot = |index: u32| slots[index as usize];
        Ok(TlsHandshakes {
            started: slot(tls_event::STARTED),
            full: slot(tls_event::FULL),
            resumed: slot(tls_event::RESUMED),
            failed: slot(tls_event::FAILED),
            unmatched: slot(tls_event::UNMATCHED),
            histogram: LatencyHistogram::read(&self.histogram)?,
        })
    }
}
