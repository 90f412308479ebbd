//! `loader target --sink`: the calibration responder — cheaper per request than the loader,
//! so that on a machine where the two share the cores the loader is the one that saturates.
//!
//! One io_uring per thread, nothing else: a multishot accept on the listener, a multishot
//! receive per connection into a ring of provided buffers (no receive is re-submitted per
//! request), and one precomputed response (the built-in target's bytes, without its `date`
//! header) sent from a static buffer of copies. The only parsing is finding the end of each
//! request head (`\r\n\r\n`), across chunk boundaries; pipelined requests are answered
//! together in one send. A connection has at most one send in flight: answers owed while it
//! is out leave with the next one, so they keep their order without links.
//!
//! It does not read request bodies (a request with one is answered once per head, its body
//! bytes scanned like a head), route, or measure anything; for shaping (delay, workers,
//! stalls), TLS or HTTP/2 use the full built-in target.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd as _, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use io_uring::{IoUring, cqueue, opcode, squeue, types};

use crate::engine::bufring::BufRing;

/// The one response: the built-in target's status, type and body.
pub fn response() -> Vec<u8> {
    let body = super::server::BODY;
    let mut r = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len())
        .into_bytes();
    r.extend_from_slice(body);
    r
}
/// Copies of the response in the send buffer: the most one send answers at once.
const COPIES: usize = 64;
/// Submission queue entries per ring.
const RING_ENTRIES: u32 = 4096;
/// Provided receive buffers per ring, and their size.
const BUFFERS: u16 = 1024;
const BUFFER_SIZE: usize = 4096;
/// Longest wait for completions before the stop flag is looked at again.
const STOP_POLL: Duration = Duration::from_millis(100);

const ACCEPT: u64 = 0;
const RECV: u64 = 1;
const SEND: u64 = 2;

fn user_data(kind: u64, fd: RawFd) -> u64 {
    kind << 32 | fd as u32 as u64
}

/// One connection's state.
#[derive(Default, Clone, Copy)]
struct Conn {
    open: bool,
    /// Bytes of `\r\n\r\n` matched at the end of what arrived so far.
    matched: u8,
    /// Answers owed and not yet in a send.
    owed: u32,
    /// Bytes of the send in flight, and how many of them already left (a short send).
    in_flight: u32,
    sent: u32,
    /// The peer closed or an operation failed: close once no send is in flight.
    closing: bool,
    /// The multishot receive is armed.
    receiving: bool,
}

/// Count the request heads that end in `bytes`, carrying the partial match in `matched`.
pub fn heads_ending(bytes: &[u8], matched: &mut u8) -> u32 {
    let mut n = 0;
    let mut m = *matched;
    for &b in bytes {
        m = match (m, b) {
            (0 | 2, b'\r') => m + 1,
            (1 | 3, b'\n') => m + 1,
            (_, b'\r') => 1,
            _ => 0,
        };
        if m == 4 {
            n += 1;
            m = 0;
        }
    }
    *matched = m;
    n
}

/// Serve on `listen` with `threads` rings until SIGINT/SIGTERM; prints the listening line
/// first, as the full target does.
pub fn serve(listen: SocketAddr, threads: usize) -> anyhow::Result<()> {
    let listener = bind(listen)?;
    let addr = listener.local_addr().context("reading the sink's bound address")?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("cannot install signal handler")?;
    }
    // The first ring runs on this thread: a process of one thread shares no descriptor table,
    // so its operations take no reference on each socket they use.
    let first = Sink::new(listener.as_raw_fd())?;
    let listener = Arc::new(listener);
    let mut handles = Vec::new();
    for i in 1..threads {
        let (listener, stop) = (Arc::clone(&listener), Arc::clone(&stop));
        let h = std::thread::Builder::new()
            .name(format!("loader-sink-{i}"))
            .spawn(move || Sink::new(listener.as_raw_fd())?.run(&stop))
            .context("starting a sink thread")?;
        handles.push(h);
    }
    {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        writeln!(out, "loader target listening on http://{addr}")
            .and_then(|()| out.flush())
            .context("printing the listening line")?;
    }
    let mut first_error = first.run(&stop).err();
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(_) => {
                first_error.get_or_insert(anyhow::anyhow!("a sink thread panicked"));
            }
        }
    }
    drop(listener);
    first_error.map_or(Ok(()), Err)
}

fn bind(listen: SocketAddr) -> anyhow::Result<TcpListener> {
    let socket = socket2::Socket::new(socket2::Domain::for_address(listen), socket2::Type::STREAM, None)
        .with_context(|| format!("cannot listen on {listen}"))?;
    socket.set_reuse_address(true).with_context(|| format!("cannot listen on {listen}"))?;
    socket.bind(&listen.into()).with_context(|| format!("cannot listen on {listen}"))?;
    socket.listen(4096).with_context(|| format!("cannot listen on {listen}"))?;
    Ok(socket.into())
}

/// One thread's ring and its connections (indexed by fd).
struct Sink {
    // Field order is drop order: the ring goes before the buffers it may still name.
    ring: IoUring,
    buffers: BufRing,
    copies: Vec<u8>,
    /// Bytes of one response.
    one: usize,
    listener: RawFd,
    conns: Vec<Conn>,
}

impl Sink {
    fn new(listener: RawFd) -> anyhow::Result<Sink> {
        let ring = IoUring::builder()
            .setup_cqsize(RING_ENTRIES * 4)
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(RING_ENTRIES)
            .context("cannot set up the sink's io_uring")?;
        let buffers = BufRing::new(&ring.submitter(), BUFFERS, BUFFER_SIZE, 0)
            .context("cannot register the sink's receive buffers")?;
        let one = response();
        Ok(Sink { ring, buffers, copies: one.repeat(COPIES), one: one.len(), listener, conns: Vec::new() })
    }

    fn push(&mut self, sqe: squeue::Entry) -> anyhow::Result<()> {
        // SAFETY: every buffer an entry names (the copies, the provided ring) lives in `self`,
        // which outlives the ring's operations (the ring is dropped first).
        while unsafe { self.ring.submission().push(&sqe) }.is_err() {
            self.ring.submit().context("io_uring submit")?;
        }
        Ok(())
    }

    fn arm_accept(&mut self) -> anyhow::Result<()> {
        let sqe = opcode::AcceptMulti::new(types::Fd(self.listener)).build().user_data(user_data(ACCEPT, 0));
        self.push(sqe)
    }

    fn arm_recv(&mut self, fd: RawFd) -> anyhow::Result<()> {
        self.conns[fd as usize].receiving = true;
        let sqe = opcode::RecvMulti::new(types::Fd(fd), self.buffers.group).build().user_data(user_data(RECV, fd));
        self.push(sqe)
    }

    /// Send what `fd` owes, when nothing is in flight.
    fn send(&mut self, fd: RawFd) -> anyhow::Result<()> {
        let one = self.one;
        let c = &mut self.conns[fd as usize];
        if c.in_flight > 0 || c.owed == 0 || c.closing {
            return Ok(());
        }
        let n = (c.owed as usize).min(COPIES);
        c.owed -= n as u32;
        c.in_flight = (n * one) as u32;
        c.sent = 0;
        self.submit_send(fd)
    }

    fn submit_send(&mut self, fd: RawFd) -> anyhow::Result<()> {
        let c = self.conns[fd as usize];
        let at = c.sent as usize;
        // SAFETY: `at < in_flight ≤ copies.len()`.
        let ptr = unsafe { self.copies.as_ptr().add(at) };
        let sqe = opcode::Send::new(types::Fd(fd), ptr, c.in_flight - c.sent)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(user_data(SEND, fd));
        self.push(sqe)
    }

    /// Close `fd` once neither its send nor its receive can complete any more.
    fn close_when_idle(&mut self, fd: RawFd) {
        let c = &mut self.conns[fd as usize];
        c.closing = true;
        if c.open && c.in_flight == 0 && !c.receiving {
            c.open = false;
            // SAFETY: our own accepted socket, closed once.
            unsafe { libc::close(fd) };
        } else if c.open && c.receiving {
            // Shut it down so the armed receive ends (with 0) and the close follows.
            // SAFETY: our own open socket.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
    }

    fn run(mut self, stop: &AtomicBool) -> anyhow::Result<()> {
        self.arm_accept()?;
        let ts = types::Timespec::from(STOP_POLL);
        let args = types::SubmitArgs::new().timespec(&ts);
        let mut cqes: Vec<(u64, i32, u32)> = Vec::with_capacity(RING_ENTRIES as usize);
        while !stop.load(Ordering::Relaxed) {
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY)) => {}
                Err(e) => return Err(e).context("io_uring wait"),
            }
            cqes.clear();
            cqes.extend(self.ring.completion().map(|c| (c.user_data(), c.result(), c.flags())));
            for &(data, res, flags) in &cqes {
                self.complete(data, res, flags)?;
            }
        }
        for fd in 0..self.conns.len() {
            if self.conns[fd].open {
                // SAFETY: our own open socket.
                unsafe { libc::close(fd as RawFd) };
            }
        }
        Ok(())
    }

    fn complete(&mut self, data: u64, res: i32, flags: u32) -> anyhow::Result<()> {
        let fd = (data & 0xffff_ffff) as RawFd;
        let more = cqueue::more(flags);
        match data >> 32 {
            ACCEPT => {
                if res >= 0 {
                    let fd = res;
                    let one: libc::c_int = 1;
                    // SAFETY: a fresh socket of ours; the option value is a live c_int.
                    unsafe {
                        libc::setsockopt(
                            fd,
                            libc::IPPROTO_TCP,
                            libc::TCP_NODELAY,
                            (&raw const one).cast(),
                            size_of::<libc::c_int>() as libc::socklen_t,
                        )
                    };
                    if self.conns.len() <= fd as usize {
                        self.conns.resize(fd as usize + 1, Conn::default());
                    }
                    self.conns[fd as usize] = Conn { open: true, ..Conn::default() };
                    self.arm_recv(fd)?;
                }
                if !more {
                    self.arm_accept()?;
                }
            }
            RECV => {
                if res > 0 {
                    if let Some(bid) = cqueue::buffer_select(flags) {
                        let c = &mut self.conns[fd as usize];
                        let n = heads_ending(self.buffers.get(bid, res as usize), &mut c.matched);
                        c.owed += n;
                        self.buffers.recycle(bid);
                        self.send(fd)?;
                    }
                    if !more {
                        self.conns[fd as usize].receiving = false;
                        if self.conns[fd as usize].closing {
                            self.close_when_idle(fd);
                        } else {
                            self.arm_recv(fd)?;
                        }
                    }
                } else if res == -libc::ENOBUFS {
                    // Every buffer was taken when data arrived: they are back now; re-arm.
                    self.conns[fd as usize].receiving = false;
                    if !self.conns[fd as usize].closing {
                        self.arm_recv(fd)?;
                    } else {
                        self.close_when_idle(fd);
                    }
                } else {
                    // End of stream or an error: the multishot receive is over.
                    if !more {
                        self.conns[fd as usize].receiving = false;
                    }
                    self.close_when_idle(fd);
                }
            }
            SEND => {
                let c = &mut self.conns[fd as usize];
                if res < 0 {
                    c.in_flight = 0;
                    self.close_when_idle(fd);
                } else {
                    c.sent += res as u32;
                    if c.sent < c.in_flight {
                        self.submit_send(fd)?;
                    } else {
                        c.in_flight = 0;
                        if c.closing {
                            self.close_when_idle(fd);
                        } else {
                            self.send(fd)?;
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_response_is_whole_http() {
        let r = response();
        let mut headers = [httparse::EMPTY_HEADER; 8];
        let mut parsed = httparse::Response::new(&mut headers);
        let head = match parsed.parse(&r).unwrap() {
            httparse::Status::Complete(n) => n,
            httparse::Status::Partial => panic!("partial head"),
        };
        assert_eq!(parsed.code, Some(200));
        let length = parsed.headers.iter().find(|h| h.name == "content-length").unwrap().value;
        assert_eq!(std::str::from_utf8(length).unwrap().parse::<usize>().unwrap(), r.len() - head);
    }

    #[test]
    fn heads_are_counted_across_chunks() {
        let mut m = 0;
        assert_eq!(heads_ending(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", &mut m), 1);
        assert_eq!(m, 0);
        // Pipelined, and a head split inside its terminator.
        assert_eq!(heads_ending(b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nH: x\r\n\r", &mut m), 1);
        assert_eq!(m, 3);
        assert_eq!(heads_ending(b"\n", &mut m), 1);
        // A lone CR inside a line restarts the match.
        let mut m = 0;
        assert_eq!(heads_ending(b"a\r\r\n\r\n", &mut m), 1);
        assert_eq!(heads_ending(b"\r\n\n\r\n", &mut m), 0);
    }
}
