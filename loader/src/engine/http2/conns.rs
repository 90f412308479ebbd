//! The HTTP/2 shard's connections: connect (and TLS with ALPN `h2`), the HTTP/2 handshake,
//! the task that drives each connection, and choosing one for a request.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::Ctx;
use super::stamped::Stamped;

/// Initial stream window (SETTINGS_INITIAL_WINDOW_SIZE) offered to the server: bodies up to
/// this size need no WINDOW_UPDATE round trip (h2load's default is 1 GiB; 64 KiB, the
/// protocol's default, throttles responses over one round trip).
const STREAM_WINDOW: u32 = 4 << 20;
/// Initial connection window: many streams' bodies in flight at once.
const CONNECTION_WINDOW: u32 = 64 << 20;

/// Why a connection could not be opened.
struct Failed {
    message: String,
    /// `EADDRNOTAVAIL`: no local port left.
    no_port: bool,
    /// The TLS handshake failed (after the TCP connect).
    tls: bool,
}

impl Failed {
    fn io(what: &str, e: &std::io::Error) -> Failed {
        Failed {
            message: format!("{what}: {e}"),
            no_port: e.raw_os_error() == Some(libc::EADDRNOTAVAIL),
            tls: what.starts_with("TLS"),
        }
    }
}

/// Open connection `c` (in the background) unless it is open or opening.
pub(super) fn open(ctx: &Rc<Ctx>, c: usize) {
    let generation = {
        let mut st = ctx.state.borrow_mut();
        let slot = &mut st.slots[c];
        if slot.connecting || slot.send.is_some() {
            return;
        }
        slot.connecting = true;
        slot.generation = slot.generation.wrapping_add(1);
        slot.active = 0;
        slot.generation
    };
    tokio::task::spawn_local(connect(Rc::clone(ctx), c, generation));
}

/// No stream is free: open one closed connection, unless one is opening already.
pub(super) fn reopen_one(ctx: &Rc<Ctx>) {
    let closed = {
        let st = ctx.state.borrow();
        if st.slots.iter().any(|s| s.connecting) {
            return;
        }
        st.slots.iter().position(|s| s.send.is_none())
    };
    if let Some(c) = closed {
        open(ctx, c);
    }
}

/// The connection for the next stream: `prefer` (the one the same wake-up's last send went
/// on) while it has a stream free, so the requests due together leave in one write and their
/// answers come back together — one system call each way instead of one per request, as
/// h2load sends `-m` streams at once; else the open connection with the fewest of our
/// streams. Free: below `min(--max-streams, the server's SETTINGS_MAX_CONCURRENT_STREAMS)`.
/// A connection the server has sent GOAWAY on (it refuses new streams) is replaced at once:
/// its streams in flight finish on it, new ones go to the new connection.
pub(super) fn pick(ctx: &Rc<Ctx>, prefer: Option<usize>) -> Option<usize> {
    let mut st = ctx.state.borrow_mut();
    let mut best: Option<(usize, u32)> = None;
    let mut gone = Vec::new();
    let mut cx = Context::from_waker(Waker::noop());
    let order = prefer.into_iter().chain(0..st.slots.len());
    for c in order {
        let slot = &mut st.slots[c];
        let Some(send) = slot.send.as_mut() else { continue };
        let limit = (send.current_max_send_streams() as u32).min(ctx.h2.max_streams);
        let preferred = prefer == Some(c) && best.is_none();
        if slot.active >= limit || (!preferred && best.is_some_and(|(_, n)| n <= slot.active)) {
            continue;
        }
        match send.poll_ready(&mut cx) {
            Poll::Ready(Ok(())) if preferred => {
                best = Some((c, slot.active));
                break;
            }
            Poll::Ready(Ok(())) => best = Some((c, slot.active)),
            Poll::Pending => {}
            Poll::Ready(Err(_)) => {
                slot.send = None;
                gone.push(c);
            }
        }
    }
    st.open -= gone.len() as u32;
    drop(st);
    for c in gone {
        open(ctx, c);
    }
    best.map(|(c, _)| c)
}

/// Connect, handshake, and install the connection in slot `c` (if it is still that slot's
/// `generation`); a failure is counted and reported to the loop.
async fn connect(ctx: Rc<Ctx>, c: usize, generation: u32) {
    let limit = Duration::from_nanos(ctx.timeout_ns);
    let result = match tokio::time::timeout(limit, handshake(&ctx, c, generation)).await {
        Ok(r) => r,
        Err(_) => {
            Err(Failed { message: "the connection did not open within the timeout".into(), no_port: false, tls: false })
        }
    };
    let now = ctx.cfg.clock.now_ns();
    let mut st = ctx.state.borrow_mut();
    if st.slots[c].generation != generation {
        return;
    }
    st.slots[c].connecting = false;
    match result {
        Ok((send, rx, tls)) => {
            st.slots[c].send = Some(send);
            st.slots[c].rx = rx;
            st.open += 1;
            st.record.connections_opened += 1;
            if let Some((resumed, ns)) = tls {
                st.record.tls.on_handshake(ns, resumed);
            }
        }
        Err(f) => {
            st.record.connect_failures += 1;
            st.record.connect_no_port += u64::from(f.no_port);
            if f.tls {
                st.record.tls.failures += 1;
                st.record.tls.note_error(|| f.message.clone());
            }
            st.connect_failed = Some((now, f.message));
        }
    }
    drop(st);
    ctx.wake.notify_one();
}

/// TCP (and TLS), then the HTTP/2 preface and SETTINGS; the connection task is spawned here.
/// Returns the stream handle, the cell its reads leave their receive stamps in
/// ([`Stamped`]), and, on TLS, whether the session was resumed and how long the
/// TLS handshake took (ns; timed with `Instant`, not the run's clock, which reads 0 before
/// the run's zero, when the pool opens).
async fn handshake(
    ctx: &Rc<Ctx>,
    c: usize,
    generation: u32,
) -> Result<(h2::client::SendRequest<Bytes>, Rc<Cell<u64>>, Option<(bool, u64)>), Failed> {
    let tcp = TcpStream::connect(ctx.cfg.addr).await.map_err(|e| Failed::io("connect", &e))?;
    // Small frames must not wait for Nagle.
    let _ = tcp.set_nodelay(true);
    let rx = Rc::new(Cell::new(0));
    let tcp = Stamped::new(tcp, Rc::clone(&rx));
    let Some((config, name)) = &ctx.h2.tls else {
        return Ok((start(ctx, tcp, c, generation).await?, rx, None));
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(config));
    let no_h2 = || Failed {
        message: "the server does not offer HTTP/2 in the TLS handshake (ALPN h2); drop --http2 for HTTP/1.1".into(),
        no_port: false,
        tls: true,
    };
    let tls_started = std::time::Instant::now();
    let tls = connector.connect(name.clone(), tcp).await.map_err(|e| {
        let refused = e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()).is_some_and(|r| {
            matches!(r, rustls::Error::AlertReceived(rustls::AlertDescription::NoApplicationProtocol))
        });
        if refused { no_h2() } else { Failed::io("TLS handshake", &e) }
    })?;
    let session = tls.get_ref().1;
    if session.alpn_protocol() != Some(b"h2") {
        return Err(no_h2());
    }
    let resumed = session.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    let tls_ns = tls_started.elapsed().as_nanos() as u64;
    Ok((start(ctx, tls, c, generation).await?, rx, Some((resumed, tls_ns))))
}

/// The HTTP/2 handshake on `io`, and the task that drives the connection until it ends.
async fn start<T>(ctx: &Rc<Ctx>, io: T, c: usize, generation: u32) -> Result<h2::client::SendRequest<Bytes>, Failed>
where
    T: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let (send, connection) = h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .initial_max_send_streams(ctx.h2.max_streams as usize)
        .enable_push(false)
        .handshake::<T, Bytes>(io)
        .await
        .map_err(|e| Failed { message: format!("HTTP/2 handshake: {e}"), no_port: false, tls: false })?;
    let ctx = Rc::clone(ctx);
    tokio::task::spawn_local(async move {
        // Its end (closed, GOAWAY done, error) reaches each open stream as that stream's error.
        let _ = connection.await;
        let mut st = ctx.state.borrow_mut();
        let replace = st.slots[c].generation == generation && st.slots[c].send.take().is_some();
        if replace {
            st.open -= 1;
        }
        drop(st);
        // Replaced at once, as HTTP/1.1 reopens a closed connection for the next request
        // (a connection that failed to open is retried only when a request needs it).
        if replace {
            open(&ctx, c);
        }
        ctx.wake.notify_one();
    });
    Ok(send)
}
