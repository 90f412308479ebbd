//! Reader of connect latency: SYN_SENT → ESTABLISHED of the loader's sockets, measured in
//! the kernel by the `tcp_states` program (same tracepoint, one program) into the
//! `CONNECT_LATENCY` histogram.
//!
//! Owns: the handle on `CONNECT_LATENCY`. Does not: count failed connects (SYN_SENT → CLOSE
//! is a transition count, `tcp_states.rs`), or time what happens before `connect()` (DNS,
//! socket creation) — the clock starts at CLOSE → SYN_SENT, i.e. when the SYN is about to go.

use aya::{
    Ebpf,
    maps::{MapData, MapError, PerCpuArray},
};
use probes_ebpf::names;

use super::ReadError;
use super::{Unavailable, counters::take_per_cpu_array, histogram::LatencyHistogram};

/// Owned handle on the connect-latency histogram.
pub(crate) struct ConnectLatencyReader {
    histogram: PerCpuArray<MapData, u64>,
}

impl std::fmt::Debug for ConnectLatencyReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectLatencyReader").finish_non_exhaustive()
    }
}

impl ConnectLatencyReader {
    /// Take the map out of `ebpf`.
    pub(crate) fn take(ebpf: &mut Ebpf) -> Result<Self, Unavailable> {
        Ok(ConnectLatencyReader { histogram: take_per_cpu_array(ebpf, names::CONNECT_LATENCY)? })
    }

    /// Zero the counts (between the runs of `--repeat`).
    pub(crate) fn reset(&mut self) -> Result<(), ReadError> {
        super::counters::zero(&mut self.histogram)?;
        Ok(())
    }

    /// Connect latencies since start.
    pub(crate) fn read(&self) -> Result<LatencyHistogram, MapError> {
        LatencyHistogram::read(&self.histogram)
    }
}
