//! The sampler thread: where it runs, one reading of every source each second from the run's
//! zero, and what that cost.
//!
//! Where: off the shards. The shard threads (`loader-shard-N`) already run when the sampler
//! starts; it reads their affinity from the kernel and, when the loader may use a CPU none of
//! them may, runs there. When every allowed CPU is a shard's (the default: as many shards as
//! CPUs, or the loader pinned to one core beside the target), it stays beside them at nice
//! 19, so a shard that wants its core has it: a reading waits, never a send.
//!
//! Cost: one `/proc/stat` for a `cpu:` source, the tree's own `/proc/PID/stat` for a process
//! source (`process.rs`), one fetch per Prometheus page a second however many sources read it
//! (`source::Pages`), only the selector's lines of the page parsed (`prometheus.rs`), and one
//! wake-up a second (parked between, woken early only by the end). The thread's CPU time over
//! the run is `sampler_cpu_ms_per_s`.
//!
//! Does not: decide what a second of a source is (`source.rs`) or judge it (`steps.rs`).

use std::collections::HashSet;
use std::fs;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::source::{Pages, Source};
use crate::scenario::cpu_list;
use crate::summary::{WatchSecond, WatchSummary};

/// The sampler thread; [`finish`](Sampling::finish) ends and joins it, and so does a drop
/// (a run that fails part-way leaves no thread behind).
pub struct Sampling {
    handle: Option<JoinHandle<WatchSummary>>,
    done: Arc<AtomicBool>,
}

impl Sampling {
    /// Start sampling `sources` each second from `zero` on a thread of its own.
    pub(super) fn start(sources: Vec<Source>, zero: Instant) -> Sampling {
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&done);
        let handle = std::thread::Builder::new().name("loader-watch".into()).spawn(move || run(sources, zero, &flag));
        match handle {
            Ok(h) => Sampling { handle: Some(h), done },
            Err(e) => {
                eprintln!("loader: warning: the watch sampler did not start ({e}): nothing is watched");
                Sampling { handle: None, done }
            }
        }
    }

    /// End the sampling (at once: the thread is woken) and give what it saw; `None` if its
    /// thread did not start or failed.
    pub fn finish(mut self) -> Option<WatchSummary> {
        self.stop();
        self.handle.take()?.join().ok()
    }

    fn stop(&mut self) {
        self.done.store(true, Ordering::Release);
        if let Some(h) = &self.handle {
            h.thread().unpark();
        }
    }
}

impl Drop for Sampling {
    fn drop(&mut self) {
        self.stop();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Park until `due` or the end; false when the run ended first.
fn wait_until(due: Instant, done: &AtomicBool) -> bool {
    // Bounded: each park returns by `due`, and a spurious wake-up only loops again.
    for _ in 0..1_000 {
        if done.load(Ordering::Acquire) {
            return false;
        }
        let now = Instant::now();
        if now >= due {
            return true;
        }
        std::thread::park_timeout(due - now);
    }
    !done.load(Ordering::Acquire)
}

fn run(mut sources: Vec<Source>, zero: Instant, done: &AtomicBool) -> WatchSummary {
    let placed = place();
    let cpu_start = thread_cpu();
    // The baselines of the first second, read at the run's zero.
    if wait_until(zero, done) {
        let mut pages = Pages::new();
        for s in &mut sources {
            s.baseline(&mut pages);
        }
    }
    let mut seconds = Vec::new();
    for t in 0u64.. {
        if !wait_until(zero + Duration::from_secs(t + 1), done) {
            break;
        }
        let mut pages = Pages::new();
        let values = sources.iter_mut().map(|s| (s.name().to_string(), s.second(&mut pages))).collect();
        seconds.push(WatchSecond { t, values });
    }
    let elapsed = zero.elapsed().as_secs_f64().max(1.0);
    let sampler_cpu_ms_per_s = thread_cpu().zip(cpu_start).map(|(end, start)| (end - start) * 1000.0 / elapsed);
    WatchSummary {
        sources: sources.iter().map(Source::describe).collect(),
        seconds,
        sampler_cpu_ms_per_s,
        sampler_cpus: placed.as_ref().map(|p| cpu_list(&p.cpus)),
        sampler_apart: placed.map(|p| p.apart),
        ..Default::default()
    }
}

/// Where the sampler runs.
struct Placement {
    /// Its CPUs.
    cpus: Vec<usize>,
    /// Apart from every shard's.
    apart: bool,
}

/// Move this thread off the shards' CPUs when the loader may use another; else lower it to
/// nice 19 beside them. `None` when its affinity cannot be read.
fn place() -> Option<Placement> {
    let me = nix::unistd::gettid().as_raw() as u32;
    let allowed = super::cpus::affinity(me);
    if allowed.is_empty() {
        return None;
    }
    let mut placed = choose(&allowed, &shard_cpus());
    if placed.apart && placed.cpus.len() < allowed.len() && !pin(&placed.cpus) {
        placed = Placement { cpus: allowed, apart: false };
    }
    if !placed.apart {
        // SAFETY: sets the calling thread's nice (PRIO_PROCESS 0 is the thread on Linux);
        // raising it needs no privilege, and this thread starts no other to hand it to.
        let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
    }
    Some(placed)
}

/// Where to run, given the CPUs this thread may use and those any shard may: the allowed
/// CPUs no shard may use, when there are some; else all of them, beside the shards.
fn choose(allowed: &[usize], shards: &HashSet<usize>) -> Placement {
    let free: Vec<usize> = allowed.iter().copied().filter(|c| !shards.contains(c)).collect();
    match free.is_empty() {
        false => Placement { cpus: free, apart: true },
        true => Placement { cpus: allowed.to_vec(), apart: false },
    }
}

/// The CPUs any shard thread of this process may run on (`/proc/self/task/*/comm` named
/// `loader-shard-N`, their affinity from the kernel).
fn shard_cpus() -> HashSet<usize> {
    let Ok(tasks) = fs::read_dir("/proc/self/task") else { return HashSet::new() };
    tasks
        .flatten()
        .filter_map(|t| {
            let tid = t.file_name().to_str()?.parse::<u32>().ok()?;
            let comm = fs::read_to_string(t.path().join("comm")).ok()?;
            comm.starts_with("loader-shard-").then_some(tid)
        })
        .flat_map(super::cpus::affinity)
        .collect()
}

/// Restrict this thread to `cpus`.
fn pin(cpus: &[usize]) -> bool {
    use nix::sched::{CpuSet, sched_setaffinity};
    let mut set = CpuSet::new();
    for &c in cpus {
        if set.set(c).is_err() {
            return false;
        }
    }
    sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).is_ok()
}

/// This thread's CPU time, seconds.
fn thread_cpu() -> Option<f64> {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .ok()
        .map(|t| t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sampler_goes_where_no_shard_may_run_and_else_stays_beside_them() {
        let shards = |cpus: &[usize]| cpus.iter().copied().collect::<HashSet<usize>>();
        // Shards pinned to 0 and 1 of four CPUs: the sampler on 2-3.
        let p = choose(&[0, 1, 2, 3], &shards(&[0, 1]));
        assert_eq!((p.cpus, p.apart), (vec![2, 3], true));
        // Shards free to run anywhere the loader may (the engine's default): beside them.
        let p = choose(&[0, 1], &shards(&[0, 1]));
        assert_eq!((p.cpus, p.apart), (vec![0, 1], false));
        // `taskset -c 0 loader run`: one CPU, one shard on it.
        let p = choose(&[0], &shards(&[0]));
        assert_eq!((p.cpus, p.apart), (vec![0], false));
        // No shard found (no run): nothing to stand apart from.
        let p = choose(&[0, 1], &shards(&[]));
        assert_eq!((p.cpus, p.apart), (vec![0, 1], true));
    }

    #[test]
    fn a_finished_sampling_returns_at_once_and_reports_its_place() {
        let zero = Instant::now();
        let sampling = Sampling::start(Vec::new(), zero);
        std::thread::sleep(Duration::from_millis(50));
        let started = Instant::now();
        let w = sampling.finish().expect("the sampler's summary");
        assert!(started.elapsed() < Duration::from_millis(500), "woken, not waited out: {:?}", started.elapsed());
        assert!(w.seconds.is_empty() && w.sampler_cpus.is_some(), "{w:?}");
    }
}
