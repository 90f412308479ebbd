//! When a response arrived, from the kernel: each received chunk carries its receive
//! timestamp (`SO_TIMESTAMPNS`, taken as the packet entered the loader's network stack), so
//! a response's completion time does not depend on when the shard got around to reading it.
//! That is what lets a shard sleep through responses (see `pace.rs`) without moving any
//! latency, and it removes the shard's own wake-up lateness from every latency it records.
//!
//! Receives are multishot `recvmsg` into the provided buffers; the kernel lays each buffer
//! out as `io_uring_recvmsg_out`, the (empty) name, the control messages, then the payload.
//! The timestamp is `CLOCK_REALTIME`; [`Realtime`] turns it into the run's monotonic
//! nanoseconds with the offset between the two clocks read at each wake-up (the offset moves
//! only when the wall clock is stepped; a stamp that lands outside the request's life is
//! clamped into it).

use io_uring::types::RecvMsgOut;

/// Bytes of control space for one `SCM_TIMESTAMPNS` message (`CMSG_SPACE(sizeof timespec)`).
const CONTROL_LEN: usize = 32;

/// The `msghdr` every multishot receive of a shard names: no name, room for the timestamp.
/// Boxed by the shard, so its address stays valid while receives are armed.
pub fn header() -> libc::msghdr {
    // SAFETY: an all-zero msghdr is valid (no name, no iovec, no control).
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    h.msg_controllen = CONTROL_LEN as _;
    h
}

/// Ask the kernel to stamp what `socket` receives. Best effort: without it responses are
/// stamped when the shard reads them, as before.
pub fn enable(socket: &impl std::os::fd::AsFd) {
    let _ = nix::sys::socket::setsockopt(socket, nix::sys::socket::sockopt::ReceiveTimestampns, &true);
}

/// One received chunk: its payload and, when the kernel stamped it, the receive time
/// (`CLOCK_REALTIME` ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk<'a> {
    /// The bytes received.
    pub payload: &'a [u8],
    /// Receive time, `CLOCK_REALTIME` nanoseconds.
    pub stamp_ns: Option<u64>,
}

/// Split a provided buffer filled by multishot `recvmsg` (`buffer` holds exactly the bytes
/// the completion reported). `None` if the layout does not parse.
pub fn parse<'a>(buffer: &'a [u8], header: &libc::msghdr) -> Option<Chunk<'a>> {
    let out = RecvMsgOut::parse(buffer, header).ok()?;
    let stamp_ns = timestamp(out.control_data());
    // The payload lies inside `buffer`; re-slice it there so it outlives the parse.
    let payload = out.payload_data();
    let start = payload.as_ptr() as usize - buffer.as_ptr() as usize;
    Some(Chunk { payload: &buffer[start..start + payload.len()], stamp_ns })
}

/// The `SCM_TIMESTAMPNS` value among control messages, in ns.
fn timestamp(mut control: &[u8]) -> Option<u64> {
    const HDR: usize = size_of::<libc::cmsghdr>();
    while control.len() >= HDR {
        // SAFETY: at least HDR bytes; read_unaligned copes with any alignment.
        let cmsg: libc::cmsghdr = unsafe { std::ptr::read_unaligned(control.as_ptr().cast()) };
        let len = cmsg.cmsg_len as usize;
        if len < HDR || len > control.len() {
            return None;
        }
        if cmsg.cmsg_level == libc::SOL_SOCKET
            && cmsg.cmsg_type == libc::SCM_TIMESTAMPNS
            && len >= HDR + size_of::<libc::timespec>()
        {
            // SAFETY: the message holds a timespec right after its header.
            let ts: libc::timespec = unsafe { std::ptr::read_unaligned(control[HDR..].as_ptr().cast()) };
            return u64::try_from(ts.tv_sec).ok()?.checked_mul(1_000_000_000)?.checked_add(ts.tv_nsec as u64);
        }
        // Next message: aligned to the size of a word.
        let step = len.next_multiple_of(size_of::<usize>());
        control = control.get(step..)?;
    }
    None
}

/// Converts kernel receive stamps (`CLOCK_REALTIME`) into the run's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct Realtime {
    /// `CLOCK_REALTIME` minus the run's clock (ns since start) at the last [`Realtime::sync`].
    offset: i128,
}

impl Realtime {
    /// Read the offset between the wall clock and the run's clock, given the run's clock now
    /// (`now_ns`, read right before).
    #[inline]
    pub fn sync(&mut self, now_ns: u64) {
        self.offset = i128::from(realtime_ns()) - i128::from(now_ns);
    }

    /// A receive stamp as ns since the run's start, clamped into `[lo, hi]` (the request's
    /// send and the moment it was read).
    #[inline]
    pub fn run_time(&self, stamp_ns: u64, lo: u64, hi: u64) -> u64 {
        let t = i128::from(stamp_ns) - self.offset;
        t.clamp(i128::from(lo), i128::from(hi.max(lo))) as u64
    }
}

fn realtime_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes a timespec; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer as the kernel fills it: recvmsg_out header, control, payload.
    fn filled(stamp: Option<(i64, i64)>, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        let controllen: u32 = if stamp.is_some() { 32 } else { 0 };
        b.extend_from_slice(&0u32.to_ne_bytes()); // namelen
        b.extend_from_slice(&controllen.to_ne_bytes());
        b.extend_from_slice(&(payload.len() as u32).to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes()); // flags
        let mut control = vec![0u8; CONTROL_LEN];
        if let Some((sec, nsec)) = stamp {
            control[..8].copy_from_slice(&32u64.to_ne_bytes());
            control[8..12].copy_from_slice(&libc::SOL_SOCKET.to_ne_bytes());
            control[12..16].copy_from_slice(&libc::SCM_TIMESTAMPNS.to_ne_bytes());
            control[16..24].copy_from_slice(&sec.to_ne_bytes());
            control[24..32].copy_from_slice(&nsec.to_ne_bytes());
        }
        b.extend_from_slice(&control);
        b.extend_from_slice(payload);
        b
    }

    #[test]
    fn reads_payload_and_stamp() {
        let h = header();
        let buf = filled(Some((1_700_000_000, 123)), b"HTTP/1.1 200 OK\r\n");
        let chunk = parse(&buf, &h).unwrap();
        assert_eq!(chunk.payload, b"HTTP/1.1 200 OK\r\n");
        assert_eq!(chunk.stamp_ns, Some(1_700_000_000_000_000_123));
        let buf = filled(None, b"x");
        assert_eq!(parse(&buf, &h).unwrap(), Chunk { payload: b"x", stamp_ns: None });
        assert_eq!(parse(&buf[..10], &h), None, "shorter than the layout");
    }

    /// A plain `recvmsg` of the stream socket `fd` with the kernel's receive stamp of the
    /// newest bytes read (what the shard's multishot receives parse out of their buffers).
    fn recv(fd: std::os::fd::RawFd, buf: &mut [std::mem::MaybeUninit<u8>]) -> std::io::Result<(usize, Option<u64>)> {
        let mut control = [0u64; CONTROL_LEN / 8];
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let mut h = header();
        h.msg_iov = &mut iov;
        h.msg_iovlen = 1;
        h.msg_control = control.as_mut_ptr().cast();
        // SAFETY: the iovec names `buf` (written, never read, by the kernel) and the control
        // buffer is CONTROL_LEN bytes, aligned for cmsghdr; both outlive the call.
        let n = unsafe { libc::recvmsg(fd, &mut h, 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let len = h.msg_controllen.min(CONTROL_LEN);
        // SAFETY: the kernel wrote `len` bytes of control messages into `control`.
        let control = unsafe { std::slice::from_raw_parts(control.as_ptr().cast::<u8>(), len) };
        Ok((n as usize, timestamp(control)))
    }

    #[test]
    fn a_socket_read_carries_the_kernels_receive_stamp() {
        use std::io::Write as _;
        use std::os::fd::AsRawFd as _;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        enable(&server);
        server.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 64];
        // The kernel turns receive stamping on for the whole host asynchronously (a work item
        // flips a static key) when the first socket asks: the first packets may come
        // unstamped (CI: the very first read), so the test sends until one is, 200 at most.
        let mut stamped = None;
        for _ in 0..200 {
            let before = realtime_ns();
            client.write_all(b"HTTP/2 frames").unwrap();
            let (n, stamp) = recv(server.as_raw_fd(), &mut buf).unwrap();
            let after = realtime_ns();
            assert_eq!(n, 13);
            if let Some(stamp) = stamp {
                stamped = Some((before, stamp, after));
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let (before, stamp, after) = stamped.expect("a read stamped within 200 tries (1 s)");
        assert!((before..=after).contains(&stamp), "{before} <= {stamp} <= {after}");
        // Without stamping asked for, a read has none.
        let mut plain = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (other, _) = listener.accept().unwrap();
        plain.write_all(b"y").unwrap();
        other.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        assert_eq!(recv(other.as_raw_fd(), &mut buf).unwrap(), (1, None));
    }

    #[test]
    fn stamps_convert_to_the_run_clock_and_stay_inside_the_request() {
        let mut rt = Realtime::default();
        rt.sync(5_000);
        let now_rt = realtime_ns();
        // A stamp taken ~now maps to about 5 µs after start (within the read's jitter).
        let t = rt.run_time(now_rt, 0, u64::MAX);
        assert!((5_000..5_000 + 50_000_000).contains(&t), "{t}");
        // Clamped into the request's life.
        assert_eq!(rt.run_time(0, 1_000, 9_000), 1_000);
        assert_eq!(rt.run_time(u64::MAX / 2, 1_000, 9_000), 9_000);
    }
}
