//! What every kernel program shares: the loader's tgid, the lost counters, reading a
//! tracepoint field at an offset user space found, per-CPU counting and histograms.
//!
//! Rare conditions — an event that goes to `LOST`, or a map update that failed — are also
//! reported with `aya_log_ebpf::debug!`, with what the counter cannot say (which socket,
//! thread or offset). The counters stay the record the verdict reads; the log is for a person
//! finding out why. User space sets aya-log's `AYA_LOG_LEVEL` global (in `.rodata`, frozen at
//! load) to 0 unless the loader runs with `--log-level debug` or `trace`; the verifier then
//! knows every `debug!` branch is never taken and removes its code, so a disabled log costs
//! the programs nothing and writes nothing to the `AYA_LOGS` ring buffer.

use aya_ebpf::{
    Global,
    helpers::{bpf_get_current_pid_tgid, generated::bpf_ktime_get_ns},
    macros::map,
    maps::PerCpuArray,
    programs::TracePointContext,
};
use aya_log_ebpf::debug;
use probes_ebpf::{NO_FIELD, hist, lost, runs};

/// The loader's tgid (`names::TARGET_TGID`), set by user space before load. 0 follows nothing.
#[unsafe(no_mangle)]
static TARGET_TGID: Global<u32> = Global::new(0);

/// `names::LOST`: events seen but not counted, by `lost::*` reason (all programs).
#[map]
static LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(lost::SLOTS, 0);

/// `names::PROGRAM_RUNS`: runs of the busy programs, by `runs::*` slot.
#[map]
static PROGRAM_RUNS: PerCpuArray<u64> = PerCpuArray::with_max_entries(runs::SLOTS, 0);

/// What every tracepoint program returns. For a classic tracepoint the kernel ANDs the
/// return values of the BPF programs attached to it and, on 0, drops the event for every
/// other consumer of that tracepoint on the machine: `perf record -e sched:sched_switch`,
/// `perf sched`, `perf trace` would record nothing while the loader runs. 1 lets the event
/// through; the programs' own outcome is in their maps.
pub(crate) const PASS_ON: u32 = 1;

/// A classic tracepoint program that returns [`PASS_ON`]: aya's `#[tracepoint]` macro
/// (aya-ebpf-macros 0.2) always returns 0, which hides the tracepoint from `perf` and every
/// other tool for as long as the loader runs. The same section name and signature as the
/// macro's, so user space finds and attaches it the same way.
macro_rules! tracepoint_passing_on {
    ($(#[$doc:meta])* fn $name:ident($ctx:ident) $body:block) => {
        $(#[$doc])*
        #[unsafe(no_mangle)]
        #[unsafe(link_section = "tracepoint")]
        pub fn $name(ctx: *mut ::core::ffi::c_void) -> u32 {
            let $ctx = ::aya_ebpf::programs::TracePointContext::new(ctx);
            $body
            crate::common::PASS_ON
        }
    };
}

/// Count one run of the busy program `slot` (`runs::*`).
#[inline(always)]
pub(crate) fn ran(slot: u32) {
    bump(&PROGRAM_RUNS, slot);
}

/// True when the task running this program belongs to the loader.
#[inline(always)]
pub(crate) fn current_is_loader() -> bool {
    let target = TARGET_TGID.load();
    target != 0 && (bpf_get_current_pid_tgid() >> 32) as u32 == target
}

/// The loader's tgid (0: follow nothing).
#[inline(always)]
pub(crate) fn target_tgid() -> u32 {
    TARGET_TGID.load()
}

/// `bpf_ktime_get_ns()`: monotonic ns, the clock of every start timestamp.
#[inline(always)]
pub(crate) fn now_ns() -> u64 {
    // SAFETY: a helper without arguments or preconditions.
    unsafe { bpf_ktime_get_ns() }
}

/// Count one event that could not be accounted for.
#[inline(always)]
pub(crate) fn lost(reason: u32) {
    bump(&LOST, reason);
}

/// Read a `T` at `offset` bytes into the tracepoint record; a failure (or an offset marked
/// [`NO_FIELD`]) is counted as `lost::READ_FAILED` and ends the program.
#[inline(always)]
pub(crate) fn read<T>(ctx: &TracePointContext, offset: u32) -> Result<T, u32> {
    if offset == NO_FIELD {
        lost(lost::READ_FAILED);
        debug!(ctx, "lost read_failed: this kernel's tracepoint has no such field");
        return Err(0);
    }
    // SAFETY: `bpf_probe_read_kernel` copies into a local and reports a bad address as an
    // error instead of faulting; `T` is a plain integer, valid for every bit pattern.
    unsafe { ctx.read_at::<T>(offset as usize) }.map_err(|errno| {
        lost(lost::READ_FAILED);
        debug!(ctx, "lost read_failed: bpf_probe_read_kernel at offset {} of the record: {}", offset, errno);
        0
    })
}

/// Add one to this CPU's slot `index` of `counters`. A plain add is enough: the slot is this
/// CPU's own and tracing programs do not nest on one CPU (the kernel skips a nested run and
/// counts it in the program's `recursion_misses`, which user space adds to the lost count).
#[inline(always)]
pub(crate) fn bump(counters: &PerCpuArray<u64>, index: u32) {
    if let Some(slot) = counters.get_ptr_mut(index) {
        // SAFETY: the map returned a valid pointer to this CPU's `u64` for `index`.
        unsafe { *slot += 1 };
    }
}

/// Record `value` (ns) in a [`hist`]-layout histogram: its bucket, the sum and the max.
#[inline(always)]
pub(crate) fn record(histogram: &PerCpuArray<u64>, value: u64) {
    bump(histogram, hist::index(value));
    if let Some(sum) = histogram.get_ptr_mut(hist::SUM) {
        // SAFETY: as in `bump`: this CPU's own slot.
        unsafe { *sum = (*sum).wrapping_add(value) };
    }
    if let Some(max) = histogram.get_ptr_mut(hist::MAX) {
        // SAFETY: as in `bump`.
        unsafe {
            if value > *max {
                *max = value;
            }
        }
    }
}
