//! How a thread that must wake on time asks the kernel to let it: the shards, the pre-flight
//! that measures the host's wake-up jitter for the verdict, the built-in target's timer —
//! and how the main thread stands back for the shards while they run ([`behind_shards`]).
//!
//! Two settings, both for the calling thread only and neither needing privilege:
//!
//! - **Timer slack 1 ns** (`PR_SET_TIMERSLACK`): an hrtimer wait ends when asked, not up to
//!   50 µs later (the default slack).
//! - **A short scheduler slice** ([`SLICE_NS`], `sched_setattr` with `sched_runtime`, Linux
//!   6.12+). A timer wake-up does not preempt a task that is running its slice (EEVDF's
//!   run-to-parity) unless the woken task asks for a shorter slice. Without it, the loader's
//!   own sampler waking once a second — reading the probes' maps and `/proc`, ~1.5 ms of
//!   work — held a shard on the same core for that long: the shard's timer fired and it
//!   waited 1.2–1.6 ms every second, ~15 sends late at 10,000 req/s; with the host's own
//!   pauses, enough to push a clean run's send lag p99 to 0.4–1.1 ms and make the verdict cry
//!   wolf. The same held for any other task of the same priority sharing the core. A short
//!   slice changes when the thread runs, not how much: its weight (nice) is unchanged. Older
//!   kernels ignore the field.

/// The slice asked for: the shortest the kernel allows (100 µs).
pub const SLICE_NS: u64 = 100_000;

/// `struct sched_attr` up to `sched_period` (`SCHED_ATTR_SIZE_VER0`).
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// Ask for prompt wake-ups on the calling thread (see the module doc). Best effort: a kernel
/// or a policy that refuses either setting leaves the thread as it was.
pub fn on_time() {
    let _ = nix::sys::prctl::set_timerslack(1);
    // Only a thread under the ordinary policy: a real-time or idle one keeps what it was given.
    // SAFETY: `sched_getscheduler(0)` reads the calling thread's policy.
    if unsafe { libc::sched_getscheduler(0) } != libc::SCHED_OTHER {
        return;
    }
    // The thread's nice value, kept (on Linux, `PRIO_PROCESS` with 0 is the calling thread).
    // SAFETY: reads the calling thread's nice; -1 is a valid nice, and then what is kept.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: libc::SCHED_OTHER as u32,
        flags: 0,
        nice,
        priority: 0,
        runtime: SLICE_NS,
        deadline: 0,
        period: 0,
    };
    // SAFETY: pid 0 is the calling thread; `attr` is a valid `sched_attr` of the size it
    // states, read by the kernel during the call only.
    let _ = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
}

/// Nice steps the main thread stands below the shards while they run ([`behind_shards`]).
pub const BEHIND_SHARDS_NICE: i32 = 5;

/// The calling thread's nice lowered by [`BEHIND_SHARDS_NICE`] until dropped.
pub struct BehindShards {
    /// The nice to go back to, when it was changed.
    was: Option<i32>,
}

/// Lower the calling thread (the main thread, while the shards run) by [`BEHIND_SHARDS_NICE`]
/// nice steps, for as long as the guard lives. Its work each second (the checkpoint's copies,
/// the interval log, the samplers: ~4 ms of CPU at 61,000 req/s) ran at the shards' weight,
/// and a shard that had used most of the second was, under EEVDF, not yet eligible when that
/// work woke: sharing one core (`taskset`, or calibration's pinning), the shard waited
/// 0.3–3.2 ms behind it 4–12 times in an 8 s run (bpftrace on sched_waking/sched_switch),
/// every second's sends late by as much. At +5 steps (a third of the weight) 0–2 such waits,
/// at +10 none. A short slice on the main thread changed nothing, and `SCHED_IDLE` would
/// starve it beside busy neighbours, where its samplers and the emergency stop must still
/// run: +5 keeps a third of a normal thread's share. Only when the nice can come back on drop
/// (`CAP_SYS_NICE`, or `RLIMIT_NICE`; asked of the kernel by [`may_come_back`]): a thread
/// left lowered would hand its nice to the shards it starts next (a calibration's steps).
pub fn behind_shards() -> BehindShards {
    // SAFETY: reads the calling thread's nice (PRIO_PROCESS 0 is the thread on Linux); -1 is
    // a valid nice, and then what is kept.
    let was = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    let lowered = (was + BEHIND_SHARDS_NICE).min(19);
    // SAFETY: sets the calling thread's nice; raising it needs no privilege.
    let changed =
        lowered != was && may_come_back(was) && unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, lowered) } == 0;
    BehindShards { was: changed.then_some(was) }
}

/// Whether a thread of this process at nice `was` may go back to it after raising it: a
/// throwaway thread (which inherits `was`) tries, and the kernel's answer is the one that
/// counts (capabilities, `RLIMIT_NICE`, a container's limits).
fn may_come_back(was: i32) -> bool {
    std::thread::Builder::new()
        .name("loader-nice".into())
        .spawn(move || {
            // SAFETY: sets the calling (throwaway) thread's nice, up and back.
            unsafe {
                libc::setpriority(libc::PRIO_PROCESS, 0, (was + 1).min(19)) == 0
                    && libc::setpriority(libc::PRIO_PROCESS, 0, was) == 0
            }
        })
        .ok()
        .and_then(|t| t.join().ok())
        .unwrap_or(false)
}

impl Drop for BehindShards {
    fn drop(&mut self) {
        if let Some(was) = self.was {
            // SAFETY: sets the calling thread's nice back; refused without the privilege.
            let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, was) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attr_is_the_kernels_first_layout() {
        // SCHED_ATTR_SIZE_VER0: the kernel takes this size and zero-fills the rest.
        assert_eq!(std::mem::size_of::<SchedAttr>(), 48);
    }

    /// The kernel's own view of the thread afterwards: the slice asked for (on kernels that
    /// take custom slices), and the nice value the thread had.
    #[test]
    fn a_thread_gets_the_short_slice_and_keeps_its_nice() {
        let (slice, nice) = std::thread::spawn(|| {
            // Raising one's own nice needs no privilege.
            // SAFETY: sets the calling thread's nice (PRIO_PROCESS 0 is the thread on Linux).
            assert_eq!(unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 5) }, 0);
            on_time();
            let sched = std::fs::read_to_string("/proc/thread-self/sched").unwrap_or_default();
            let slice = sched
                .lines()
                .find(|l| l.starts_with("se.slice"))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.trim().parse::<u64>().ok());
            // SAFETY: reads the calling thread's nice.
            (slice, unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) })
        })
        .join()
        .expect("thread");
        assert_eq!(nice, 5, "the nice value is kept");
        let release =
            nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default();
        let mut parts = release.split(|c: char| !c.is_ascii_digit()).filter_map(|p| p.parse::<u32>().ok());
        let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        if version >= (6, 12) {
            assert_eq!(slice, Some(SLICE_NS), "kernel {release} takes custom slices");
        } else {
            eprintln!("kernel {release} predates custom slices (6.12): slice {slice:?} not checked");
        }
    }

    /// Behind the shards the thread's nice is 5 higher and comes back on drop — as root; a
    /// thread that could not come back is not lowered at all.
    #[test]
    fn the_main_thread_stands_back_while_the_shards_run_and_comes_back() {
        let (during, after) = std::thread::spawn(|| {
            // SAFETY: reads the calling thread's nice.
            let nice = || unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
            let before = nice();
            let guard = behind_shards();
            let during = nice() - before;
            drop(guard);
            (during, nice() - before)
        })
        .join()
        .expect("thread");
        assert_eq!(after, 0, "the nice comes back, or never left");
        if nix::unistd::geteuid().is_root() {
            assert_eq!(during, BEHIND_SHARDS_NICE, "lowered while the guard lives");
        } else {
            assert!(during == 0 || during == BEHIND_SHARDS_NICE, "lowered only if it can come back: {during}");
        }
    }
}
