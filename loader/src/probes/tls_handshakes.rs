//! The `tls_handshakes` probe: uprobes on the loader's own handshake markers
//! (`loader::engine::tls::loader_tls_handshake_{start,end}`), attached to this process's
//! binary, and the reader of their maps (`TLS_COUNTS`, `TLS_HANDSHAKE_LATENCY`).
//!
//! Owns: attaching both uprobes (the end first, so no start is stored without an end) and
//! naming the count slots. Does not: compare the kernel's count with the engine's (the run
//! reports both: `probes.tls_handshakes` and `tls.handshakes`), or judge them (the verdict).

use std::{fs, num::NonZeroU32, path::Path};

use aya::{
    Ebpf,
    maps::{MapData, MapError, PerCpuArray},
    programs::{
        UProbe,
        uprobe::{UProbeAttachLocation, UProbeScope},
    },
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
    // Read once for both markers; nothing read (or the test hook) attaches them by name.
    let maps = if by_name_for_tests() { None } else { fs::read_to_string("/proc/self/maps").ok() };
    let markers = [
        (names::TLS_END_PROGRAM, names::TLS_END_SYMBOL, crate::engine::tls::loader_tls_handshake_end as *const ()),
        (
            names::TLS_START_PROGRAM,
            names::TLS_START_SYMBOL,
            crate::engine::tls::loader_tls_handshake_start as *const (),
        ),
    ];
    for (program, symbol, marker) in markers {
        let uprobe: &mut UProbe = ebpf
            .program_mut(program)
            .ok_or(Unavailable::MissingFromObject { item: program })?
            .try_into()
            .map_err(|source| Unavailable::Program { program, source })?;
        uprobe.load().map_err(|source| Unavailable::Program { program, source })?;
        let attached = match maps.as_deref().and_then(|maps| file_offset(maps, marker as u64)) {
            Some(offset) => uprobe.attach(UProbeAttachLocation::AbsoluteOffset(offset), Path::new(OWN_BINARY), scope),
            None => uprobe.attach(symbol, Path::new(OWN_BINARY), scope),
        };
        attached.map_err(|source| Unavailable::Program { program, source })?;
    }
    Ok(())
}

/// Test hook: `LOADER_TEST_UPROBES_BY_NAME=1` finds the markers by name, as where the maps
/// say nothing, so that a test sees that path fail on a stripped copy
/// (`tests/verdict_matrix.rs`). Unset in normal use.
fn by_name_for_tests() -> bool {
    std::env::var_os("LOADER_TEST_UPROBES_BY_NAME").is_some_and(|v| v == "1")
}

/// Where `address`, code of this process's own binary, lies in the executable file: the
/// uprobe's offset, from `maps` (the text of `/proc/self/maps`). Resolving the marker by name
/// instead makes aya map and walk the whole symbol table of this ~70 MB binary, ~2.5 ms of CPU
/// per marker at every start. `None` when no executable mapping holds the address (aya
/// resolves the name).
fn file_offset(maps: &str, address: u64) -> Option<u64> {
    maps.lines().find_map(|line| mapping_offset(line, address))
}

/// The file offset of `address` if the `/proc/PID/maps` line `line` is an executable file
/// mapping holding it (`start-end perms offset dev inode path`).
fn mapping_offset(line: &str, address: u64) -> Option<u64> {
    let mut fields = line.split_whitespace();
    let (range, perms, offset) = (fields.next()?, fields.next()?, fields.next()?);
    let (start, end) = range.split_once('-')?;
    let hex = |t: &str| u64::from_str_radix(t, 16).ok();
    let (start, end, offset) = (hex(start)?, hex(end)?, hex(offset)?);
    // An anonymous mapping (no path) or one not executable cannot hold the binary's code.
    let file = fields.nth(2).is_some_and(|path| path.starts_with('/'));
    (file && perms.contains('x') && (start..end).contains(&address)).then(|| address - start + offset)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom};

    #[test]
    fn a_maps_line_gives_the_file_offset_of_an_address_in_it() {
        let text = "55d0c4a00000-55d0c8e00000 r-xp 01200000 fd:01 131 /usr/local/bin/loader";
        assert_eq!(mapping_offset(text, 0x55d0_c4a0_0010), Some(0x0120_0010));
        assert_eq!(mapping_offset(text, 0x55d0_c8e0_0000), None, "end is exclusive");
        let data = "55d0c8e00000-55d0c9000000 r--p 05600000 fd:01 131 /usr/local/bin/loader";
        assert_eq!(mapping_offset(data, 0x55d0_c8e0_0010), None, "not executable");
        let anonymous = "7f0000000000-7f0000021000 rwxp 00000000 00:00 0";
        assert_eq!(mapping_offset(anonymous, 0x7f00_0000_0010), None);
        assert_eq!(mapping_offset("garbage", 1), None);
    }

    /// The offset the uprobe is attached at holds the marker's own code in the binary file.
    #[test]
    fn the_markers_offsets_hold_their_code_in_the_binary() {
        let maps = fs::read_to_string("/proc/self/maps").unwrap();
        for marker in [
            crate::engine::tls::loader_tls_handshake_start as *const () as u64,
            crate::engine::tls::loader_tls_handshake_end as *const () as u64,
        ] {
            let offset = file_offset(&maps, marker).expect("the marker is in an executable mapping");
            let mut in_file = [0u8; 6];
            let mut exe = fs::File::open(OWN_BINARY).unwrap();
            exe.seek(SeekFrom::Start(offset)).unwrap();
            exe.read_exact(&mut in_file).unwrap();
            // SAFETY: the marker's first 6 bytes are its code, mapped readable.
            let in_memory = unsafe { std::slice::from_raw_parts(marker as *const u8, 6) };
            assert_eq!(in_file, in_memory, "offset {offset:#x}");
        }
    }
}
