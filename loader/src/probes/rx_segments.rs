//! `rx_segments` (`tcp:tcp_probe`): the record of each data segment the run's HTTP/2
//! connections receive, handed to the engine as [`Segments`] so an answer read late keeps
//! the arrival of the segment that carried its last byte (`engine::segments`).
//!
//! Owns: attaching the program, the socket map (registrations from the shards) and the
//! memory mapping of the record. Not an entry of the availability map: without it the
//! engine stamps each read as before and wakes for answers where two share a connection.

use std::os::fd::{AsFd, AsRawFd};
use std::ptr::NonNull;
use std::sync::Arc;

use aya::Ebpf;
use aya::maps::{HashMap, Map, MapData};
use probes_ebpf::{RX_SEGMENT_SLOTS, SegmentRing, names};

use super::Unavailable;
use crate::engine::segments::Segments;

/// Attach `rx_segments` and map its record. The layout global was set before load.
pub(super) fn start(
    ebpf: &mut Ebpf,
    hook: impl FnOnce(&mut Ebpf) -> Result<(), Unavailable>,
) -> Result<Arc<Segments>, String> {
    let len = RX_SEGMENT_SLOTS as usize * size_of::<SegmentRing>();
    let fd = match ebpf.map(names::RX_SEGMENTS) {
        Some(Map::Array(data)) => data.fd().as_fd().as_raw_fd(),
        _ => return Err(format!("no array {} in the object", names::RX_SEGMENTS)),
    };
    // SAFETY: a shared read-write mapping of the whole array map (created BPF_F_MMAPABLE);
    // the kernel checks the length and the flags against the map.
    let mapped =
        unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0) };
    if mapped == libc::MAP_FAILED {
        return Err(format!("cannot map {}: {}", names::RX_SEGMENTS, std::io::Error::last_os_error()));
    }
    let Some(rings) = NonNull::new(mapped.cast::<SegmentRing>()) else {
        return Err(format!("cannot map {}: null", names::RX_SEGMENTS));
    };
    let map = ebpf.take_map(names::RX_SEGMENT_SOCKS).ok_or_else(|| format!("no map {}", names::RX_SEGMENT_SOCKS));
    let socks = map.and_then(|m| {
        HashMap::<MapData, u64, u32>::try_from(m).map_err(|e| format!("{}: {e}", names::RX_SEGMENT_SOCKS))
    });
    let attached = socks.and_then(|socks| hook(ebpf).map(|()| socks).map_err(|e| e.to_string()));
    let mut socks = match attached {
        Ok(socks) => socks,
        Err(why) => {
            // SAFETY: the mapping made above, not handed to anyone.
            unsafe { libc::munmap(mapped, len) };
            return Err(why);
        }
    };
    let register = Box::new(move |cookie: u64, slot: Option<u32>| match slot {
        Some(slot) => socks.insert(cookie, slot, 0).is_ok(),
        None => socks.remove(&cookie).is_ok(),
    });
    // SAFETY: `rings` is the live mapping of RX_SEGMENT_SLOTS rings made above, `len` bytes,
    // used only by the kernel program and the Segments value that now owns it.
    Ok(Arc::new(unsafe { Segments::new(rings, len, RX_SEGMENT_SLOTS, register) }))
}
