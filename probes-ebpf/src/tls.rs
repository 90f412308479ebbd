//! `tls_handshake_start`, `tls_handshake_end`: the loader's TLS handshakes, counted and timed
//! in the kernel by uprobes on two marker functions of the loader's own binary.
//!
//! Hooks: uprobes (no kprobe support needed; they work under lockdown) on
//! `loader_tls_handshake_start(handshake: u64)` and
//! `loader_tls_handshake_end(handshake: u64, outcome: u32)`, which the engine calls when a
//! connection's handshake begins (TCP is up, the ClientHello is about to go) and when it
//! completes or fails (`loader::engine::tls`). Attached with the loader's own pid as scope, and
//! filtered again by tgid here: the same binary also runs as `loader target`.
//!
//! The start stores `now` in `TLS_STARTS` under the handshake's id (the address of the
//! connection's TLS state, unique while it lives); the end counts the outcome in `TLS_COUNTS`
//! and, for a completed handshake with a known start, records `now - start` in
//! `TLS_HANDSHAKE_LATENCY` (ns, `hist` layout). `TLS_STARTS` is an LRU map, so a handshake
//! abandoned without an end (its connection closed at shutdown) is evicted by itself.
//!
//! Arguments are read from the registers of the x86-64 / aarch64 C calling convention
//! (`extern "C"` on the marker functions guarantees it).

use aya_ebpf::{
    bindings::BPF_ANY,
    macros::{map, uprobe},
    maps::{LruHashMap, PerCpuArray},
    programs::ProbeContext,
};
use aya_log_ebpf::debug;
use probes_ebpf::{TLS_STARTS_CAPACITY, hist, lost, tls_event, tls_outcome};

use crate::common::{bump, current_is_loader, now_ns, record};

/// `names::TLS_STARTS`: handshake id → ns when it began.
#[map]
static TLS_STARTS: LruHashMap<u64, u64> = LruHashMap::with_max_entries(TLS_STARTS_CAPACITY, 0);

/// `names::TLS_COUNTS`: `tls_event::*`.
#[map]
static TLS_COUNTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(tls_event::SLOTS, 0);

/// `names::TLS_HANDSHAKE_LATENCY`: completed handshakes, ns, `hist` layout.
#[map]
static TLS_HANDSHAKE_LATENCY: PerCpuArray<u64> = PerCpuArray::with_max_entries(hist::SLOTS, 0);

/// `names::TLS_START_PROGRAM`, a uprobe on `names::TLS_START_SYMBOL`.
#[uprobe]
pub fn tls_handshake_start(ctx: ProbeContext) -> u32 {
    if !current_is_loader() {
        return 0;
    }
    let Some(handshake) = ctx.arg::<u64>(0) else {
        crate::common::lost(lost::READ_FAILED);
        debug!(&ctx, "lost read_failed: the handshake argument of a TLS start marker");
        return 0;
    };
    bump(&TLS_COUNTS, tls_event::STARTED);
    if let Err(errno) = TLS_STARTS.insert(handshake, now_ns(), u64::from(BPF_ANY)) {
        // Only a kernel error: an LRU map evicts instead of filling up.
        crate::common::lost(lost::TLS_START_FAILED);
        debug!(&ctx, "lost tls_start_failed: TLS_STARTS insert failed ({}) for handshake {:x}", errno, handshake);
    }
    0
}

/// `names::TLS_END_PROGRAM`, a uprobe on `names::TLS_END_SYMBOL`.
#[uprobe]
pub fn tls_handshake_end(ctx: ProbeContext) -> u32 {
    if !current_is_loader() {
        return 0;
    }
    let (Some(handshake), Some(outcome)) = (ctx.arg::<u64>(0), ctx.arg::<u64>(1)) else {
        crate::common::lost(lost::READ_FAILED);
        debug!(&ctx, "lost read_failed: the arguments of a TLS end marker");
        return 0;
    };
    // The register holds a u32 argument in its low half; the high half is unspecified.
    let outcome = outcome as u32;
    let slot = match outcome {
        tls_outcome::FULL => tls_event::FULL,
        tls_outcome::RESUMED => tls_event::RESUMED,
        _ => tls_event::FAILED,
    };
    bump(&TLS_COUNTS, slot);
    match TLS_STARTS.get_ptr(handshake) {
        Some(started) => {
            // SAFETY: the map returned a valid pointer to the entry's `u64`; only this
            // handshake's own thread writes or removes it.
            let started = unsafe { *started };
            if outcome != tls_outcome::FAILED {
                record(&TLS_HANDSHAKE_LATENCY, now_ns().saturating_sub(started));
            }
            let _ = TLS_STARTS.remove(handshake);
        }
        None => {
            bump(&TLS_COUNTS, tls_event::UNMATCHED);
            // Counted as `unmatched`: begun before the probes attached, or evicted from the LRU.
            debug!(&ctx, "TLS handshake {:x} ended (outcome {}) with no start seen: no duration", handshake, outcome);
        }
    }
    0
}
