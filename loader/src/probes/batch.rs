//! Whole-map reads in one `bpf(2)` call: every slot of a per-CPU `u64` array by
//! `BPF_MAP_LOOKUP_BATCH` (Linux 5.6+), and a program's `recursion_misses` by
//! `BPF_OBJ_GET_INFO_BY_FD` (5.12+).
//!
//! The per-second series reads ~700 slots (TCP transitions, drop reasons, the run-queue
//! histogram, …); one lookup each was ~700 system calls a second on the main thread, which
//! shares the loader's CPUs. aya 0.14 has no batch reads, so this calls the kernel with the
//! `bpf_attr` layout aya-obj generates from the kernel's headers.
//!
//! Owns: the two calls and checking what they returned. Does not: fall back (the callers do,
//! to aya's per-slot lookups and the program's fdinfo, on any error here), or know what a slot
//! means.

use std::io;
use std::mem;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use aya::maps::{IterableMap, MapData, PerCpuArray, PerCpuValues};
use aya_obj::generated::{bpf_attr, bpf_cmd, bpf_prog_info};

/// Every CPU's value of slots `0..slots`, as the kernel laid them out.
#[derive(Debug)]
pub(crate) struct PerCpuSlots {
    cpus: usize,
    values: Vec<u64>,
}

impl PerCpuSlots {
    /// Slot `index`'s value on each possible CPU.
    pub(crate) fn slot(&self, index: u32) -> &[u64] {
        let from = index as usize * self.cpus;
        &self.values[from..from + self.cpus]
    }
}

/// Slots `0..slots` of `map` in one call; an error when the kernel cannot batch (before 5.6)
/// or returned fewer slots than asked.
pub(crate) fn read_slots(map: &PerCpuArray<MapData, u64>, slots: u32) -> io::Result<PerCpuSlots> {
    let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)?;
    let map_fd = map.map().fd().as_fd().as_raw_fd() as u32;
    let mut keys = vec![0u32; slots as usize];
    // A per-CPU value takes round_up(value_size, 8) bytes per possible CPU: 8 for a u64.
    let mut values = vec![0u64; slots as usize * cpus];
    let mut next = 0u32;
    // SAFETY: bpf_attr is plain data; all zeroes is the "no field set" value.
    let mut attr: bpf_attr = unsafe { mem::zeroed() };
    attr.batch.in_batch = 0;
    attr.batch.out_batch = &raw mut next as u64;
    attr.batch.keys = keys.as_mut_ptr() as u64;
    attr.batch.values = values.as_mut_ptr() as u64;
    attr.batch.count = slots;
    attr.batch.map_fd = map_fd;
    let result = bpf(bpf_cmd::BPF_MAP_LOOKUP_BATCH, &mut attr);
    // ENOENT: the batch reached the map's end, with `count` slots filled.
    if let Err(e) = result
        && e.raw_os_error() != Some(libc::ENOENT)
    {
        return Err(e);
    }
    // SAFETY: the kernel wrote the count it filled back into the same union member.
    let filled = unsafe { attr.batch.count };
    if filled != slots || keys.iter().zip(0u32..).any(|(&key, index)| key != index) {
        return Err(io::Error::other(format!("the batch read {filled} of {slots} slots")));
    }
    Ok(PerCpuSlots { cpus, values })
}

/// The same slots as [`read_slots`] by one lookup each (aya's), for kernels without batches.
pub(crate) fn read_slots_one_by_one(
    map: &PerCpuArray<MapData, u64>,
    slots: u32,
) -> Result<PerCpuSlots, aya::maps::MapError> {
    let mut cpus = 0;
    let mut values = Vec::new();
    for index in 0..slots {
        let per_cpu: PerCpuValues<u64> = map.get(&index, 0)?;
        cpus = per_cpu.len();
        values.extend(per_cpu.iter().copied());
    }
    Ok(PerCpuSlots { cpus, values })
}

/// A loaded program's `recursion_misses` from the kernel's `bpf_prog_info`.
pub(crate) fn recursion_misses(program: BorrowedFd<'_>) -> io::Result<u64> {
    // SAFETY: bpf_prog_info is plain data; the kernel fills what it knows of it.
    let mut info: bpf_prog_info = unsafe { mem::zeroed() };
    // SAFETY: as above.
    let mut attr: bpf_attr = unsafe { mem::zeroed() };
    attr.info.bpf_fd = program.as_raw_fd() as u32;
    attr.info.info_len = mem::size_of::<bpf_prog_info>() as u32;
    attr.info.info = &raw mut info as u64;
    bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    // SAFETY: the kernel wrote back how much of the struct it knows.
    let known = unsafe { attr.info.info_len } as usize;
    if known < mem::offset_of!(bpf_prog_info, recursion_misses) + mem::size_of::<u64>() {
        return Err(io::Error::other("this kernel's bpf_prog_info has no recursion_misses"));
    }
    Ok(info.recursion_misses)
}

fn bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<()> {
    // SAFETY: `attr` is a valid bpf_attr whose pointers outlive the call.
    let r = unsafe {
        libc::syscall(libc::SYS_bpf, cmd as libc::c_int, attr as *mut bpf_attr, mem::size_of::<bpf_attr>() as u32)
    };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}
