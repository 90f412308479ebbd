//! A ring of provided buffers (`IORING_REGISTER_PBUF_RING`) for multishot receives.
//!
//! Each connection keeps one multishot receive armed for its whole life; the kernel picks
//! a buffer from this ring for every chunk of data that arrives, so no receive is
//! re-submitted and no socket poll re-armed per response. The shard parses the chunk where
//! it landed and hands the buffer straight back. Only a response head split across chunks
//! is copied (into the connection's own buffer).
//!
//! The ring memory and the buffers must outlive every operation that may use them: the
//! shard drops its `IoUring` before this.

use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::Submitter;
use io_uring::types::BufRingEntry;

/// The provided-buffer ring of one shard.
pub struct BufRing {
    /// mmap'ed, page-aligned ring of `entries` descriptors.
    ring: *mut BufRingEntry,
    ring_bytes: usize,
    entries: u16,
    /// Local copy of the tail published to the kernel.
    tail: u16,
    /// The buffers, back to back.
    bufs: Vec<u8>,
    size: usize,
    /// Buffer group id the receives name.
    pub group: u16,
}

impl BufRing {
    /// Map a ring of `entries` (a power of two, ≤ 32768) buffers of `size` bytes, register it
    /// as buffer group `group` and fill it.
    pub fn new(submitter: &Submitter<'_>, entries: u16, size: usize, group: u16) -> io::Result<BufRing> {
        assert!(entries.is_power_of_two(), "ring entries must be a power of two");
        let ring_bytes = entries as usize * size_of::<BufRingEntry>();
        // SAFETY: anonymous private mapping; checked for failure below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut ring = BufRing {
            ring: ptr.cast(),
            ring_bytes,
            entries,
            tail: 0,
            bufs: vec![0; entries as usize * size],
            size,
            group,
        };
        // SAFETY: the mapping is page-aligned, zeroed (tail 0) and lives as long as `ring`.
        unsafe { submitter.register_buf_ring_with_flags(ring.ring as u64, entries, group, 0)? };
        for bid in 0..entries {
            ring.push(bid);
        }
        ring.publish();
        Ok(ring)
    }

    /// The first `len` bytes of buffer `bid`.
    #[inline]
    pub fn get(&self, bid: u16, len: usize) -> &[u8] {
        let start = bid as usize * self.size;
        &self.bufs[start..start + len.min(self.size)]
    }

    /// Give buffer `bid` back to the kernel.
    #[inline]
    pub fn recycle(&mut self, bid: u16) {
        self.push(bid);
        self.publish();
    }

    fn push(&mut self, bid: u16) {
        let index = (self.tail & (self.entries - 1)) as usize;
        // SAFETY: `index < entries`, inside the mapping; the kernel only reads entries
        // between its head and our published tail, and this one is past the tail.
        let entry = unsafe { &mut *self.ring.add(index) };
        // SAFETY: `bid < entries`, so the buffer lies inside `bufs`.
        entry.set_addr(unsafe { self.bufs.as_mut_ptr().add(bid as usize * self.size) } as u64);
        entry.set_len(self.size as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: the tail field of entry 0, per the io_uring ABI, read by the kernel with
        // acquire semantics; our release store orders the entry writes before it.
        unsafe {
            let tail = BufRingEntry::tail(self.ring) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping; the ring (and so any user of it) is gone.
        unsafe { libc::munmap(self.ring.cast(), self.ring_bytes) };
    }
}
