//! CPU affinity of the calling thread (`sched_{get,set}affinity` with pid 0).

use std::io;

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

/// CPUs this thread may run on, ascending.
pub fn allowed() -> io::Result<Vec<usize>> {
    let set = sched_getaffinity(Pid::from_raw(0))?;
    Ok((0..CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false)).collect())
}

/// Restrict the calling thread (and the threads it starts from now on) to `cpus`.
pub fn current_thread(cpus: &[usize]) -> io::Result<()> {
    let mut set = CpuSet::new();
    for &c in cpus.iter().filter(|&&c| c < CpuSet::count()) {
        set.set(c)?;
    }
    Ok(sched_setaffinity(Pid::from_raw(0), &set)?)
}
