//! `runq_wakeup`, `runq_wakeup_new`, `runq_switch`: run-queue delay of the loader's threads —
//! the time from becoming runnable to running — as an in-kernel histogram (bcc's runqlat,
//! restricted to one process).
//!
//! Hooks: classic tracepoints `sched:sched_wakeup`, `sched:sched_wakeup_new` (start) and
//! `sched:sched_switch` (end), which exist on every kernel and need no BTF.
//!
//! Which threads are the loader's. A wake-up runs in the waker's context and its record has
//! the woken thread's id (`pid`) but not its tgid, so threads are kept in `LOADER_TIDS`:
//!
//! - user space seeds it with `/proc/<tgid>/task` right after load;
//! - `sched_switch` runs in the context of the task switched out (`current == prev`), so
//!   every switch-out of a thread with the loader's tgid (re)registers `prev_pid` — a thread
//!   created later is known after its first switch-out;
//! - `sched_wakeup_new` in a loader thread registers the new task (a thread, or a child
//!   process: the child is unregistered at its first switch-out, whose tgid is not ours;
//!   its first run-queue delay may have been counted — one sample per fork);
//! - a thread that exits (prev_state X/Z) is removed, and so is a registered tid seen
//!   switching out under another tgid (a reused tid).
//!
//! The alternative, `tp_btf` reading `p->tgid`, is exact from the first wake-up but needs
//! BTF and the `task_struct` offset at start-up; the tid map needs neither and misses at
//! most the first wake-up of a thread created after start, before it ever ran.
//!
//! Start and end, as runqlat: a wake-up of a loader thread stores `now` in `RUNQ_START`; a
//! loader thread switched out while still runnable (preempted: `prev_state` has none of the
//! `TASK_REPORT` bits, 0 or `TASK_REPORT_MAX`) is a new start too; one switched out to sleep
//! has its start dropped (a wake-up that found it still running is no wait); a switch-in of a thread with
//! a start records `now - start` (ns, `hist` layout) into `RUNQ_LATENCY` for a shard thread,
//! `RUNQ_LATENCY_OTHER` for any other (the role is the thread's value in `LOADER_TIDS`, which
//! user space sets for the shards), and deletes it.
//!
//! Fields (6.18): wakeup `pid` @24; switch `prev_pid` @24, `prev_state` long @32,
//! `next_pid` @56.

use aya_ebpf::{
    Global,
    bindings::{BPF_ANY, BPF_NOEXIST},
    macros::map,
    maps::{HashMap, PerCpuArray},
    programs::TracePointContext,
};
use aya_log_ebpf::debug;
use probes_ebpf::{
    SchedSwitchLayout, SchedWakeupLayout, TASK_REPORT_EXITED, TASK_REPORT_MASK, TIDS_CAPACITY, hist, lost, runs,
    thread_role,
};

use crate::common::{current_is_loader, now_ns, read, record, target_tgid};

/// `names::WAKEUP_LAYOUT` (sched_wakeup and sched_wakeup_new share a format).
#[unsafe(no_mangle)]
static WAKEUP_LAYOUT: Global<SchedWakeupLayout> = Global::new(SchedWakeupLayout::LINUX_6_18);

/// `names::SWITCH_LAYOUT`.
#[unsafe(no_mangle)]
static SWITCH_LAYOUT: Global<SchedSwitchLayout> = Global::new(SchedSwitchLayout::LINUX_6_18);

/// `names::LOADER_TIDS`: thread id → its `thread_role`, the loader's threads.
#[map]
static LOADER_TIDS: HashMap<u32, u8> = HashMap::with_max_entries(TIDS_CAPACITY, 0);

/// `names::RUNQ_START`: thread id → ns when it became runnable.
#[map]
static RUNQ_START: HashMap<u32, u64> = HashMap::with_max_entries(TIDS_CAPACITY, 0);

/// `names::RUNQ_LATENCY`: run-queue delay of the shard threads, ns, `hist` layout.
#[map]
static RUNQ_LATENCY: PerCpuArray<u64> = PerCpuArray::with_max_entries(hist::SLOTS, 0);

/// `names::RUNQ_LATENCY_OTHER`: run-queue delay of the other loader threads.
#[map]
static RUNQ_LATENCY_OTHER: PerCpuArray<u64> = PerCpuArray::with_max_entries(hist::SLOTS, 0);

tracepoint_passing_on! {
    /// `names::RUNQ_WAKEUP_PROGRAM`, attached to `sched:sched_wakeup`.
    fn runq_wakeup(ctx) {
        let _ = try_runq_wakeup(&ctx, false);
    }
}

tracepoint_passing_on! {
    /// `names::RUNQ_WAKEUP_NEW_PROGRAM`, attached to `sched:sched_wakeup_new`.
    fn runq_wakeup_new(ctx) {
        let _ = try_runq_wakeup(&ctx, true);
    }
}

fn try_runq_wakeup(ctx: &TracePointContext, new_task: bool) -> Result<(), u32> {
    if target_tgid() == 0 {
        return Ok(());
    }
    crate::common::ran(runs::RUNQ_WAKEUP);
    let tid = read::<i32>(ctx, WAKEUP_LAYOUT.load().pid)? as u32;
    if new_task {
        // Created by a loader thread: a thread of ours or a child (see the module doc).
        if !current_is_loader() {
            return Ok(());
        }
        if let Err(errno) = LOADER_TIDS.insert(tid, thread_role::OTHER, u64::from(BPF_ANY)) {
            tid_map_full(ctx, "LOADER_TIDS", tid, errno);
        }
    } else if LOADER_TIDS.get_ptr(tid).is_none() {
        return Ok(());
    }
    start(ctx, tid);
    Ok(())
}

tracepoint_passing_on! {
    /// `names::RUNQ_SWITCH_PROGRAM`, attached to `sched:sched_switch`.
    fn runq_switch(ctx) {
        let _ = try_runq_switch(&ctx);
    }
}

fn try_runq_switch(ctx: &TracePointContext) -> Result<(), u32> {
    if target_tgid() == 0 {
        return Ok(());
    }
    crate::common::ran(runs::RUNQ_SWITCH);
    let layout = SWITCH_LAYOUT.load();
    let prev = read::<i32>(ctx, layout.prev_pid)? as u32;
    let next = read::<i32>(ctx, layout.next_pid)? as u32;

    // The task switched out: `current` is still `prev` here.
    if prev != 0 {
        if current_is_loader() {
            let prev_state = if layout.prev_state_size == 4 {
                read::<i32>(ctx, layout.prev_state)? as u32 as u64
            } else {
                read::<i64>(ctx, layout.prev_state)? as u64
            };
            if prev_state & TASK_REPORT_EXITED != 0 {
                let _ = LOADER_TIDS.remove(prev);
                let _ = RUNQ_START.remove(prev);
            } else {
                // BPF_NOEXIST: an update per switch is not needed once known; EEXIST is fine.
                if LOADER_TIDS.get_ptr(prev).is_none()
                    && let Err(errno) = LOADER_TIDS.insert(prev, thread_role::OTHER, u64::from(BPF_NOEXIST))
                {
                    tid_map_full(ctx, "LOADER_TIDS", prev, errno);
                }
                if prev_state & TASK_REPORT_MASK == 0 {
                    // Preempted, still runnable: waiting in the run queue from now.
                    start(ctx, prev);
                } else {
                    // Going to sleep. A wake-up that arrived while it was still running (it
                    // had set itself sleeping, say in io_uring's wait, and was woken before
                    // it switched out) left a start behind that no switch-in ended; kept, it
                    // would be read at the thread's next switch-in as one long wait.
                    let _ = RUNQ_START.remove(prev);
                }
            }
        } else if LOADER_TIDS.get_ptr(prev).is_some() {
            // Registered but not ours (a child process, or a reused tid): forget it.
            let _ = LOADER_TIDS.remove(prev);
            let _ = RUNQ_START.remove(prev);
        }
    }

    // The task switched in.
    if next != 0
        && let Some(started) = RUNQ_START.get_ptr(next)
    {
        // SAFETY: the map returned a valid pointer to the entry's `u64`; only this CPU
        // switches `next` in, so nothing deletes the entry concurrently.
        let started = unsafe { *started };
        // SAFETY: as above, a valid pointer to the entry's `u8`.
        let shard = LOADER_TIDS.get_ptr(next).is_some_and(|role| unsafe { *role } == thread_role::SHARD);
        let histogram = if shard { &RUNQ_LATENCY } else { &RUNQ_LATENCY_OTHER };
        record(histogram, now_ns().saturating_sub(started));
        let _ = RUNQ_START.remove(next);
    }
    Ok(())
}

/// Thread `tid` is runnable from now.
#[inline(always)]
fn start(ctx: &TracePointContext, tid: u32) {
    if let Err(errno) = RUNQ_START.insert(tid, now_ns(), u64::from(BPF_ANY)) {
        tid_map_full(ctx, "RUNQ_START", tid, errno);
    }
}

/// Count (`lost::TID_MAP_FULL`) and report a loader thread `map` had no room for.
#[inline(always)]
fn tid_map_full(ctx: &TracePointContext, map: &str, tid: u32, errno: i32) {
    crate::common::lost(lost::TID_MAP_FULL);
    debug!(
        ctx,
        "lost tid_map_full: {} insert failed ({}) for thread {}: a run-queue delay is missing", map, errno, tid
    );
}
