//! `rx_segments`: when each data segment of a registered connection arrived.
//!
//! A `recvmsg` reports the kernel's stamp of the last segment it read; two HTTP/2 answers
//! read together would share it. This program keeps, per connection user space registered
//! (by socket cookie, in `RX_SEGMENT_SOCKS`), the byte count and arrival of its last
//! `SEGMENTS` data segments in a memory-mapped array, so the shard can stamp each answer
//! with the segment that carried its last byte without waking for every answer.
//!
//! Hook: classic tracepoint `tcp:tcp_probe`, which `tcp_rcv_established` fires for every
//! segment an ESTABLISHED socket receives (before it is queued; a segment processed from the
//! socket's backlog is seen when the owner releases the socket). Segments without payload
//! are skipped. Fields (6.18): `data_len` @76, `sock_cookie` @112.

use aya_ebpf::{
    Global,
    helpers::generated::bpf_ktime_get_ns,
    macros::map,
    maps::{Array, HashMap},
    programs::TracePointContext,
};
use probes_ebpf::{RX_SEGMENT_SLOTS, SEGMENTS, SegmentRing, TcpProbeLayout};

use crate::common::read;

/// `BPF_F_MMAPABLE`: user space maps the array and reads it without a system call.
const MMAPABLE: u32 = 1 << 10;

/// `names::TCP_PROBE_LAYOUT`.
#[unsafe(no_mangle)]
static TCP_PROBE_LAYOUT: Global<TcpProbeLayout> = Global::new(TcpProbeLayout::LINUX_6_18);

/// `names::RX_SEGMENT_SOCKS`: socket cookie → slot of `RX_SEGMENTS`, kept by user space.
#[map]
static RX_SEGMENT_SOCKS: HashMap<u64, u32> = HashMap::with_max_entries(RX_SEGMENT_SLOTS, 0);

/// `names::RX_SEGMENTS`: one ring per slot.
#[map]
static RX_SEGMENTS: Array<SegmentRing> = Array::with_max_entries(RX_SEGMENT_SLOTS, MMAPABLE);

tracepoint_passing_on! {
    /// `names::RX_SEGMENTS_PROGRAM`, attached to `tcp:tcp_probe`.
    fn rx_segments(ctx) {
        let _ = try_rx_segments(&ctx);
    }
}

fn try_rx_segments(ctx: &TracePointContext) -> Result<(), u32> {
    let layout = TCP_PROBE_LAYOUT.load();
    let len = read::<u16>(ctx, layout.data_len)?;
    if len == 0 {
        return Ok(());
    }
    let cookie = read::<u64>(ctx, layout.sock_cookie)?;
    // SAFETY: a plain u32 read out of the map's value.
    let Some(&slot) = (unsafe { RX_SEGMENT_SOCKS.get(&cookie) }) else { return Ok(()) };
    let Some(ring) = RX_SEGMENTS.get_ptr_mut(slot) else { return Ok(()) };
    // SAFETY: `bpf_ktime_get_ns` takes no argument.
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: `ring` points at a live map value; one socket's segments are processed one at a
    // time (under its lock), so this is the only writer of the slot. The count is stored
    // last so a reader that sees it sees the entry (x86's stores keep their order).
    unsafe {
        let n = (*ring).count;
        let bytes = (*ring).bytes + u64::from(len);
        let i = (n as usize) & (SEGMENTS - 1);
        (*ring).end[i] = bytes;
        (*ring).at[i] = now;
        (*ring).bytes = bytes;
        core::ptr::write_volatile(&mut (*ring).count, n + 1);
    }
    Ok(())
}
