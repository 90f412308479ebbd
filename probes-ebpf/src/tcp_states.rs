//! `tcp_states`: TCP state transitions of the loader's own sockets, counted in the kernel.
//!
//! Hook: the classic tracepoint `sock:inet_sock_set_state` (system-wide; fires for every
//! socket on the host, TCP, SCTP and MPTCP). Filtering is two-step, as in libbpf-tools'
//! tcpconnlat (a start map plus an end hook, always cleaned up):
//!
//! 1. CLOSE → SYN_SENT is the `connect()` path and runs in the connecting task's context, so
//!    `bpf_get_current_pid_tgid() >> 32` is the connecting process. When it is the loader
//!    (`TARGET_TGID`; io_uring workers are threads of the same tgid) the socket's kernel
//!    address goes into `LOADER_SOCKS`.
//! 2. Every later transition is matched by socket address, not by tgid: most of them run in
//!    softirq context on behalf of whatever task happens to be on the CPU.
//! 3. → CLOSE is a socket's last transition through this tracepoint (an actively closed
//!    socket goes FIN_WAIT2 → CLOSE while a separate timewait socket takes over), so the entry
//!    is removed there.
//!
//! Counts go to `TCP_STATE_COUNTS[old * 16 + new]` (per-CPU). Whatever is seen but cannot be
//! counted goes to `LOST[reason]`: nothing is dropped silently.
//!
//! Connect latency rides on the same hook (one program per tracepoint): `LOADER_SOCKS` holds
//! the CLOSE → SYN_SENT time, so SYN_SENT → ESTABLISHED records `now - start` into
//! `CONNECT_LATENCY` (ns, `hist` layout). A failed connect is SYN_SENT → CLOSE in the
//! transition counts. TIME_WAIT entries are FIN_WAIT2 → CLOSE and CLOSING → CLOSE there too.
//! On → CLOSE the socket moves to the LRU `CLOSED_SOCKS`, because a reset sent on close is
//! traced after the socket's CLOSE transition (`resets.rs`).
//!
//! Field offsets. On this machine (Linux 6.18) the format file
//! `/sys/kernel/tracing/events/sock/inet_sock_set_state/format` reads:
//!
//! ```text
//! common_type u16 @0, common_flags u8 @2, common_preempt_count u8 @3, common_pid i32 @4,
//! skaddr ptr @8 (8), oldstate int @16 (4), newstate int @20 (4), sport u16 @24, dport u16 @26,
//! family u16 @28, protocol u16 @30, saddr [u8;4] @32, daddr [u8;4] @36,
//! saddr_v6 [u8;16] @40, daddr_v6 [u8;16] @56
//! ```
//!
//! Those offsets are not fixed across kernels (4.16–5.0: no `family`, `protocol` is a `u8` at
//! 28; PREEMPT_RT kernels carry a longer common header), so user space parses the format file
//! of the running kernel and sets `SET_STATE_LAYOUT` before load; the compiled-in default is
//! the 6.18 layout above. Reading through `bpf_probe_read_kernel` is required for offsets that
//! are not compile-time constants (the verifier refuses loads through a moved ctx pointer);
//! it costs a few ns per field on an event that fires only on state changes.

use aya_ebpf::{
    Global,
    bindings::BPF_ANY,
    macros::map,
    maps::{HashMap, LruHashMap, PerCpuArray},
    programs::TracePointContext,
};
use aya_log_ebpf::debug;
use probes_ebpf::{
    CLOSED_SOCKS_CAPACITY, IPPROTO_TCP, LOADER_SOCKS_CAPACITY, SetStateLayout, TRANSITION_SLOTS, hist, lost, runs,
    tcp_state, transition_index,
};

use crate::common::{bump, current_is_loader, now_ns, read, record};

/// Where the tracepoint's fields are (`names::SET_STATE_LAYOUT`), set by user space from the
/// running kernel's format file before load.
#[unsafe(no_mangle)]
static SET_STATE_LAYOUT: Global<SetStateLayout> = Global::new(SetStateLayout::LINUX_5_1);

/// `names::LOADER_SOCKS`: socket kernel address → `bpf_ktime_get_ns()` at connect (kept for
/// the connect-latency reader).
#[map]
pub(crate) static LOADER_SOCKS: HashMap<u64, u64> = HashMap::with_max_entries(LOADER_SOCKS_CAPACITY, 0);

/// `names::CLOSED_SOCKS`: loader sockets that reached CLOSE lately (LRU, evicts by itself),
/// for the resets a socket sends after its CLOSE transition.
#[map]
pub(crate) static CLOSED_SOCKS: LruHashMap<u64, u8> = LruHashMap::with_max_entries(CLOSED_SOCKS_CAPACITY, 0);

/// `names::CONNECT_LATENCY`: SYN_SENT → ESTABLISHED of loader sockets, ns, `hist` layout.
#[map]
static CONNECT_LATENCY: PerCpuArray<u64> = PerCpuArray::with_max_entries(hist::SLOTS, 0);

/// `names::TCP_STATE_COUNTS`: transitions of loader sockets by `transition_index(old, new)`.
#[map]
static TCP_STATE_COUNTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(TRANSITION_SLOTS, 0);

tracepoint_passing_on! {
    /// `names::TCP_STATES_PROGRAM`, attached to `sock:inet_sock_set_state`.
    fn tcp_states(ctx) {
        let _ = try_tcp_states(&ctx);
    }
}

/// The tracepoint's return value is ignored for programs attached through perf events
/// (it only gates recording into a trace buffer we do not have); 0 everywhere.
fn try_tcp_states(ctx: &TracePointContext) -> Result<(), u32> {
    crate::common::ran(runs::TCP_STATES);
    let layout = SET_STATE_LAYOUT.load();

    let protocol = if layout.protocol_size == 1 {
        u16::from(read::<u8>(ctx, layout.protocol)?)
    } else {
        read::<u16>(ctx, layout.protocol)?
    };
    if protocol != IPPROTO_TCP {
        return Ok(());
    }

    let skaddr = read::<u64>(ctx, layout.skaddr)?;
    // States are `int` in the record; a negative one becomes huge and lands in
    // `lost::STATE_OUT_OF_RANGE` below.
    let old = read::<i32>(ctx, layout.oldstate)? as u32;
    let new = read::<i32>(ctx, layout.newstate)? as u32;

    if old == tcp_state::CLOSE && new == tcp_state::SYN_SENT {
        if !current_is_loader() {
            return Ok(());
        }
        // BPF_ANY: a freed socket's address may be reused before we saw its CLOSE.
        if let Err(errno) = LOADER_SOCKS.insert(skaddr, now_ns(), u64::from(BPF_ANY)) {
            // The connect is still counted below; its later transitions will be missing.
            crate::common::lost(lost::SOCK_MAP_FULL);
            debug!(
                ctx,
                "lost sock_map_full: socket {:x} not followed, LOADER_SOCKS insert failed ({}): \
                 its later transitions, connect latency, retransmits, resets and drops go uncounted",
                skaddr,
                errno
            );
        }
    } else {
        let Some(started) = LOADER_SOCKS.get_ptr(skaddr) else {
            return Ok(());
        };
        if old == tcp_state::SYN_SENT && new == tcp_state::ESTABLISHED {
            // SAFETY: the map returned a valid pointer to the entry's `u64`; a concurrent
            // delete of this socket's entry cannot happen while the socket changes state
            // under its own lock, and a torn read would only skew one sample.
            let started = unsafe { *started };
            record(&CONNECT_LATENCY, now_ns().saturating_sub(started));
        }
    }

    if new == tcp_state::CLOSE {
        // Err means "not present": only possible if the insert above failed. Ignoring it
        // hides nothing; that insert failure was already counted.
        let _ = LOADER_SOCKS.remove(skaddr);
        // An LRU insert only fails on a kernel error; the socket is gone, nothing is lost
        // unless it sends a reset now, which `resets_sent` would then miss. Not a lost
        // event (nothing was seen and not counted), so no counter: only the log says it.
        if let Err(errno) = CLOSED_SOCKS.insert(skaddr, 0, u64::from(BPF_ANY)) {
            debug!(
                ctx,
                "CLOSED_SOCKS insert failed ({}) for socket {:x}: a reset it sends on close would not be counted",
                errno,
                skaddr
            );
        }
    }

    match transition_index(old, new) {
        Some(index) => {
            bump(&TCP_STATE_COUNTS, index);
            if old > tcp_state::BOUND_INACTIVE || new > tcp_state::BOUND_INACTIVE {
                // Counted (user space shows the number), but no kernel this was written for
                // has such a state: the log says which socket, in case it matters.
                debug!(ctx, "unknown TCP state in {} -> {} of socket {:x} (counted by number)", old, new, skaddr);
            }
        }
        None => {
            crate::common::lost(lost::STATE_OUT_OF_RANGE);
            debug!(ctx, "lost state_out_of_range: TCP state {} -> {} of socket {:x} is not counted", old, new, skaddr);
        }
    }
    Ok(())
}
