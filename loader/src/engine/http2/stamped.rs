//! An HTTP/2 connection's socket: tokio's `TcpStream`, read with the kernel's receive stamps.
//!
//! Each read is a `recvmsg` that also returns when the newest bytes it read entered the
//! loader's network stack (`SO_TIMESTAMPNS`, as the io_uring shards' receives,
//! [`crate::engine::rxtime`]). The stamp of the connection's latest read is kept in a cell
//! the streams of that connection look at when they end: a stream ends while its
//! connection's task processes the bytes of a read, and the task reads until the socket is
//! empty before the loop that records the stream runs, so the stamp is that of the read
//! which carried the stream's last frame — that answer's own when the read held no other
//! answer (the loop sleeps through answers only while each connection has one stream in
//! flight), and never later than the newest packet it held. That lets the shard sleep
//! through answers and read them when it wakes to send (see `Shard::wait_quiet`) without
//! moving any latency.

use std::cell::Cell;
use std::io;
use std::os::fd::AsRawFd as _;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use crate::engine::rxtime;

/// The socket, and where its reads leave their stamps.
pub(super) struct Stamped {
    tcp: TcpStream,
    /// `CLOCK_REALTIME` ns of the latest read's newest bytes (0: that read was not stamped).
    rx: Rc<Cell<u64>>,
}

impl Stamped {
    /// Wrap `tcp`, asking the kernel to stamp what it receives; the stamps go to `rx`.
    pub(super) fn new(tcp: TcpStream, rx: Rc<Cell<u64>>) -> Stamped {
        rxtime::enable(&tcp);
        Stamped { tcp, rx }
    }
}

impl AsyncRead for Stamped {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let fd = me.tcp.as_raw_fd();
        loop {
            ready!(me.tcp.poll_read_ready(cx))?;
            // SAFETY: `recv` only writes into the unfilled part and says how many bytes; only
            // those are marked initialised below.
            let unfilled = unsafe { buf.unfilled_mut() };
            let room = unfilled.len();
            let mut read = None;
            let outcome = me.tcp.try_io(Interest::READABLE, || {
                let (n, stamp) = rxtime::recv(fd, unfilled)?;
                read = Some((n, stamp));
                // A TCP read that did not fill the buffer emptied the socket: tokio is told so
                // (a `WouldBlock` clears the readiness it saw before the read, never a newer
                // one), as its own `TcpStream` reads do, rather than learning it from one more
                // `recvmsg` that finds nothing (at 10,000 req/s, one per answer).
                if n > 0 && n < room { Err(io::ErrorKind::WouldBlock.into()) } else { Ok(()) }
            });
            if let Some((n, stamp)) = read {
                // SAFETY: the kernel wrote `n` bytes at the start of the unfilled part.
                unsafe { buf.assume_init(n) };
                buf.advance(n);
                if n > 0 {
                    me.rx.set(stamp.unwrap_or(0));
                }
                return Poll::Ready(Ok(()));
            }
            match outcome {
                // Readiness was stale: tokio cleared it; wait for the next.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
                // (A read that succeeded is in `read`.)
                Ok(()) => continue,
            }
        }
    }
}

impl AsyncWrite for Stamped {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}
