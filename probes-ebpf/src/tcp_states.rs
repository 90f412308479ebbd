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
//! counted goes to `TCP_STATE_LOST[reason]`: nothing is dropped silently.
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
    helpers::{bpf_get_current_pid_tgid, generated::bpf_ktime_get_ns},
    macros::{map, tracepoint},
    maps::{HashMap, PerCpuArray},
    programs::TracePointContext,
};
use probes_ebpf::{
    IPPROTO_TCP, LOADER_SOCKS_CAPACITY, SetStateLayout, TRANSITION_SLOTS, lost, tcp_state,
    transition_index,
};

/// The loader's tgid (`names::TARGET_TGID`), set by user space before load. 0 follows nothing.
#[unsafe(no_mangle)]
static TARGET_TGID: Global<u32> = Global::new(0);

/// Where the tracepoint's fields are (`names::SET_STATE_LAYOUT`), set by user space from the
/// running kernel's format file before load.
#[unsafe(no_mangle)]
static SET_STATE_LAYOUT: Global<SetStateLayout> = Global::new(SetStateLayout::LINUX_5_1);

/// `names::LOADER_SOCKS`: socket kernel address → `bpf_ktime_get_ns()` at connect (kept for
/// the connect-latency reader).
#[map]
static LOADER_SOCKS: HashMap<u64, u64> = HashMap::with_max_entries(LOADER_SOCKS_CAPACITY, 0);

/// `names::TCP_STATE_COUNTS`: transitions of loader sockets by `transition_index(old, new)`.
#[map]
static TCP_STATE_COUNTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(TRANSITION_SLOTS, 0);

/// `names::TCP_STATE_LOST`: events seen but not counted, by `lost::*` reason.
#[map]
static TCP_STATE_LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(lost::SLOTS, 0);

/// `names::TCP_STATES_PROGRAM`, attached to `sock:inet_sock_set_state`.
#[tracepoint]
pub fn tcp_states(ctx: TracePointContext) -> u32 {
    match try_tcp_states(&ctx) {
        Ok(ret) | Err(ret) => ret,
    }
}

/// The tracepoint's return value is ignored for programs attached through perf events
/// (it only gates recording into a trace buffer we do not have); 0 everywhere.
fn try_tcp_states(ctx: &TracePointContext) -> Result<u32, u32> {
    let layout = SET_STATE_LAYOUT.load();

    let protocol = if layout.protocol_size == 1 {
        u16::from(read::<u8>(ctx, layout.protocol)?)
    } else {
        read::<u16>(ctx, layout.protocol)?
    };
    if protocol != IPPROTO_TCP {
        return Ok(0);
    }

    let skaddr = read::<u64>(ctx, layout.skaddr)?;
    // States are `int` in the record; a negative one becomes huge and lands in
    // `lost::STATE_OUT_OF_RANGE` below.
    let old = read::<i32>(ctx, layout.oldstate)? as u32;
    let new = read::<i32>(ctx, layout.newstate)? as u32;

    if old == tcp_state::CLOSE && new == tcp_state::SYN_SENT {
        let target = TARGET_TGID.load();
        let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
        if target == 0 || tgid != target {
            return Ok(0);
        }
        // SAFETY: a helper without arguments or preconditions.
        let now = unsafe { bpf_ktime_get_ns() };
        // BPF_ANY: a freed socket's address may be reused before we saw its CLOSE.
        if LOADER_SOCKS
            .insert(skaddr, now, u64::from(BPF_ANY))
            .is_err()
        {
            // The connect is still counted below; its later transitions will be missing.
            bump(&TCP_STATE_LOST, lost::SOCK_MAP_FULL);
        }
    } else if LOADER_SOCKS.get_ptr(skaddr).is_none() {
        return Ok(0);
    }

    if new == tcp_state::CLOSE {
        // Err means "not present": only possible if the insert above failed. Ignoring it
        // hides nothing; that insert failure was already counted.
        let _ = LOADER_SOCKS.remove(skaddr);
    }

    match transition_index(old, new) {
        Some(index) => bump(&TCP_STATE_COUNTS, index),
        None => bump(&TCP_STATE_LOST, lost::STATE_OUT_OF_RANGE),
    }
    Ok(0)
}

/// Read a `T` at `offset` bytes into the tracepoint record; a failure is counted as
/// `lost::READ_FAILED` and ends the program.
#[inline(always)]
fn read<T>(ctx: &TracePointContext, offset: u32) -> Result<T, u32> {
    // SAFETY: `bpf_probe_read_kernel` copies into a local and reports a bad address as an
    // error instead of faulting; `T` is a plain integer, valid for every bit pattern.
    unsafe { ctx.read_at::<T>(offset as usize) }.map_err(|_| {
        bump(&TCP_STATE_LOST, lost::READ_FAILED);
        0
    })
}

/// Add one to this CPU's slot `index` of `counters`. A plain add is enough: the slot is this
/// CPU's own and tracing programs do not nest on one CPU (the kernel skips a nested run and
/// counts it in the program's `recursion_misses`, which user space adds to the lost count).
#[inline(always)]
fn bump(counters: &PerCpuArray<u64>, index: u32) {
    if let Some(slot) = counters.get_ptr_mut(index) {
        // SAFETY: the map returned a valid pointer to this CPU's `u64` for `index`.
        unsafe { *slot += 1 };
    }
}
