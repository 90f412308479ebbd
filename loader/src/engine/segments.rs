//! Per-answer receive stamps from the probes' record of each data segment (`rx_segments`).
//!
//! A receive reports the kernel's stamp of the last segment it read, so two HTTP/2 answers
//! read together share the later one's — which is why a shard wakes for every answer while a
//! connection carries two streams. With the probes loaded, the kernel program `rx_segments`
//! (on `tcp:tcp_probe`) keeps, for each connection registered here by socket cookie, the
//! cumulative byte count and arrival (CLOCK_MONOTONIC) of its last
//! [`SEGMENTS`](probes_ebpf::SEGMENTS) data segments in a memory-mapped array. An answer's
//! stamp is then the arrival of the segment that carried its last byte, whenever it is read.
//!
//! Each read checks the record against the kernel's stamp of that read (the same last
//! segment, seen twice): a connection whose record disagrees (a segment counted twice, a
//! registration that missed its first bytes) goes back to the read's stamp and to waking
//! for its answers, for as long as it lives. Nothing here wakes or sleeps; the shard asks.

use std::os::fd::RawFd;
use std::ptr::{NonNull, addr_of, addr_of_mut};
use std::sync::Mutex;

use probes_ebpf::{SEGMENTS, SegmentRing};

/// How far a read's kernel stamp and the record's arrival for the same segment may differ
/// and still be the same segment: the stamp is taken as the packet enters the stack, the
/// record as TCP takes it (later when the socket was busy and the segment waited in its
/// backlog), microseconds apart on a quiet host.
pub(crate) const AGREE_NS: u64 = 200_000;

/// Registers a socket cookie in the kernel's map under a slot (`Some`), or removes it
/// (`None`); false when the kernel refused.
pub type Register = Box<dyn FnMut(u64, Option<u32>) -> bool + Send>;

/// The memory-mapped record and the map of the connections it follows.
pub struct Segments {
    rings: NonNull<SegmentRing>,
    mapped_len: usize,
    free: Mutex<Vec<u32>>,
    register: Mutex<Register>,
}

// SAFETY: the mapping is shared memory the kernel writes; each slot is read and cleared only
// by the shard that registered it, and the slot list and the map sit behind mutexes.
unsafe impl Send for Segments {}
// SAFETY: as above.
unsafe impl Sync for Segments {}

/// A connection followed in slot `slot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Followed {
    slot: u32,
    cookie: u64,
}

impl std::fmt::Debug for Segments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segments").field("mapped_len", &self.mapped_len).finish_non_exhaustive()
    }
}

impl Segments {
    /// The record `rings` (`slots` of them, mapped read-write over `mapped_len` bytes, which
    /// this value unmaps when dropped) and the way to register sockets in the kernel's map.
    ///
    /// # Safety
    /// `rings` must be a live shared mapping of at least `slots` [`SegmentRing`]s that only
    /// the kernel program and this value use, `mapped_len` bytes long, from `mmap`.
    pub unsafe fn new(rings: NonNull<SegmentRing>, mapped_len: usize, slots: u32, register: Register) -> Self {
        let free = (0..slots).rev().collect();
        Segments { rings, mapped_len, free: Mutex::new(free), register: Mutex::new(register) }
    }

    /// Follow the socket `fd` from now: a free slot, cleared, registered under its cookie.
    /// `None` when every slot is taken or the socket or the kernel refuses.
    pub(crate) fn follow(&self, fd: RawFd) -> Option<Followed> {
        let cookie = socket_cookie(fd)?;
        let slot = self.free.lock().ok()?.pop()?;
        let ring = self.ring(slot);
        // SAFETY: the slot is ours and not yet in the kernel's map, so nothing writes it.
        unsafe {
            addr_of_mut!((*ring).count).write_volatile(0);
            addr_of_mut!((*ring).bytes).write_volatile(0);
        }
        let registered = self.register.lock().is_ok_and(|mut register| register(cookie, Some(slot)));
        if registered {
            Some(Followed { slot, cookie })
        } else {
            self.give_back(slot);
            None
        }
    }

    /// Stop following (the socket is closing): out of the kernel's map, the slot free again.
    pub(crate) fn release(&self, followed: Followed) {
        if let Ok(mut register) = self.register.lock() {
            register(followed.cookie, None);
        }
        self.give_back(followed.slot);
    }

    fn give_back(&self, slot: u32) {
        if let Ok(mut free) = self.free.lock() {
            free.push(slot);
        }
    }

    fn ring(&self, slot: u32) -> *mut SegmentRing {
        // SAFETY: slots handed out are below the count the mapping holds.
        unsafe { self.rings.as_ptr().add(slot as usize) }
    }

    /// When the segment that carried byte `byte` (1-based, counted from when the connection
    /// was followed) arrived, CLOCK_MONOTONIC ns; `None` when the record no longer holds it
    /// (more than `SEGMENTS` segments came after it) or never did.
    pub(crate) fn arrival(&self, followed: Followed, byte: u64) -> Option<u64> {
        let ring = self.ring(followed.slot);
        // SAFETY: a live slot of the mapping; volatile, as the kernel writes it meanwhile.
        let count = unsafe { addr_of!((*ring).count).read_volatile() };
        let entry = |n: u64| {
            let i = (n as usize) & (SEGMENTS - 1);
            // SAFETY: as above; `i` is within the arrays.
            unsafe { (addr_of!((*ring).end[i]).read_volatile(), addr_of!((*ring).at[i]).read_volatile()) }
        };
        let found = find(count, byte, entry)?;
        // Entries overwritten while they were read would be another segment's.
        // SAFETY: as above.
        let after = unsafe { addr_of!((*ring).count).read_volatile() };
        (after.saturating_sub(found.0) < SEGMENTS as u64).then_some(found.1)
    }
}

impl Drop for Segments {
    fn drop(&mut self) {
        // SAFETY: the mapping this value was given, unmapped once.
        unsafe { libc::munmap(self.rings.as_ptr().cast(), self.mapped_len) };
    }
}

/// Among the last `SEGMENTS` of `count` entries (`entry(n)` = (cumulative end, arrival) of
/// the `n`-th), the first whose end reaches `byte`: (its number, its arrival). `None` when
/// none does yet, or when the oldest one kept already does and older ones are gone (the
/// segment wanted may be among them).
fn find(count: u64, byte: u64, entry: impl Fn(u64) -> (u64, u64)) -> Option<(u64, u64)> {
    let oldest = count.saturating_sub(SEGMENTS as u64);
    let mut found = None;
    for n in (oldest..count).rev() {
        let (end, at) = entry(n);
        if end < byte {
            return found;
        }
        found = Some((n, at));
    }
    // Every kept entry reaches `byte`: the first segment of all, or one no longer kept.
    found.filter(|&(n, _)| n == 0)
}

/// The kernel's cookie of a socket (`SO_COOKIE`), the key `tcp:tcp_probe` reports.
fn socket_cookie(fd: RawFd) -> Option<u64> {
    let mut cookie: u64 = 0;
    let mut len = size_of::<u64>() as libc::socklen_t;
    // SAFETY: `cookie` and `len` are valid for writes of the sizes given.
    let r = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_COOKIE, (&raw mut cookie).cast(), &mut len) };
    (r == 0 && cookie != 0).then_some(cookie)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries as the kernel program writes them: segment `n` of `sizes` ends at the running
    /// sum and arrived at `1000 * (n + 1)`.
    fn record(sizes: &[u64]) -> (u64, Vec<(u64, u64)>) {
        let mut ring = vec![(0, 0); SEGMENTS];
        let mut bytes = 0;
        for (n, size) in sizes.iter().enumerate() {
            bytes += size;
            ring[n & (SEGMENTS - 1)] = (bytes, 1000 * (n as u64 + 1));
        }
        (sizes.len() as u64, ring)
    }

    fn lookup(sizes: &[u64], byte: u64) -> Option<(u64, u64)> {
        let (count, ring) = record(sizes);
        find(count, byte, |n| ring[(n as usize) & (SEGMENTS - 1)])
    }

    #[test]
    fn an_answer_gets_the_arrival_of_the_segment_with_its_last_byte() {
        // Two answers, each a HEADERS segment (30 bytes) and a DATA segment (20 bytes).
        let sizes = [30, 20, 30, 20];
        assert_eq!(lookup(&sizes, 50), Some((1, 2000)), "the first answer ends with segment 1");
        assert_eq!(lookup(&sizes, 100), Some((3, 4000)), "the second with segment 3");
        assert_eq!(lookup(&sizes, 31), Some((1, 2000)), "a byte inside a segment is that segment's");
        assert_eq!(lookup(&sizes, 1), Some((0, 1000)), "the very first byte");
        assert_eq!(lookup(&sizes, 101), None, "not arrived yet");
        assert_eq!(lookup(&[], 1), None, "nothing recorded");
    }

    #[test]
    fn a_segment_no_longer_kept_has_no_arrival() {
        let sizes = vec![10; SEGMENTS + 5];
        // Segments 0..5 were overwritten: byte 30 (segment 2) is gone, the oldest kept
        // (segment 5, ending at 60) cannot stand in for it.
        assert_eq!(lookup(&sizes, 30), None);
        assert_eq!(lookup(&sizes, 60), None, "the oldest kept reaches it, but an older one might");
        assert_eq!(lookup(&sizes, 61), Some((6, 7000)));
        assert_eq!(
            lookup(&sizes, 10 * (SEGMENTS as u64 + 5)),
            Some((SEGMENTS as u64 + 4, 1000 * (SEGMENTS as u64 + 5)))
        );
    }
}
