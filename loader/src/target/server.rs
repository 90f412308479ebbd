//! The serving side: runtime, listener, accept loop, one hyper HTTP/1 connection per socket,
//! and the one fixed response, shaped by `--delay`, `--workers` and `--stall`.
//!
//! Flag parsing is `config.rs`'s, the stall arithmetic `stall.rs`'s; how the server is started
//! and stopped (signals, threads) is decided in `mod.rs`.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Either, Full};
use hyper::body::{Body as _, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use super::grpc::{GrpcBody, GrpcReply};
use super::{Stall, TargetConfig, precise, stall};

/// The body of every response. Static, so each response's `Bytes` is a pointer, not a copy.
pub(super) const BODY: &[u8] = br#"{"ok":true,"service":"loader-target"}"#;

/// Pending connections the kernel may queue before `accept` (std's default of 128 is small
/// for a calibration run opening hundreds of connections at once).
const BACKLOG: u32 = 1024;

/// After shutdown, how long requests already in service may take to finish.
pub(super) const DRAIN: Duration = Duration::from_secs(1);

/// Pause after a failed `accept` (EMFILE and the like) so the loop does not spin on it.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(5);

/// The tokio runtime: single-threaded for one thread (the cheapest shape for calibration),
/// work-stealing otherwise.
pub(super) fn runtime(threads: usize) -> anyhow::Result<Runtime> {
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    builder.enable_all().thread_name("loader-target").build().context("starting the target's runtime")
}

/// Bind and listen on `addr` (inside a runtime). The error names the address.
pub(super) async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let listen = || -> std::io::Result<TcpListener> {
        let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(BACKLOG)
    };
    listen().with_context(|| format!("cannot listen on {addr}"))
}

/// What happens to a request between being read and being answered. `None` in [`serve`]
/// means none of it: the fast path clones nothing per request.
pub(super) struct Shaping {
    delay: Duration,
    workers: Option<Workers>,
    stall: Option<Stall>,
    /// The target's start, origin of the stall windows.
    start: Instant,
}

impl Shaping {
    /// The shaping `cfg` asks for, with stall windows counted from `start`; `None` if nothing.
    pub(super) fn new(cfg: &TargetConfig, start: Instant) -> Option<Arc<Shaping>> {
        if cfg.delay.is_zero() && cfg.workers.is_none() && cfg.stall.is_none() {
            return None;
        }
        let workers = cfg.workers.map(|n| Workers { count: n, free: Semaphore::new(n), waiting: AtomicUsize::new(0) });
        Some(Arc::new(Shaping { delay: cfg.delay, workers, stall: cfg.stall, start }))
    }

    /// Wait until this request may be answered.
    async fn hold(&self) {
        // The permit is held across the delay and any stall: N workers, each busy for D,
        // serve exactly N/D per second; tokio's semaphore queues waiters FIFO.
        let _permit = match &self.workers {
            Some(w) => {
                let _queued = Waiting::new(&w.waiting);
                Some(w.free.acquire().await.expect("the semaphore is never closed"))
            }
            None => None,
        };
        if !self.delay.is_zero() {
            precise::sleep_until(std::time::Instant::now() + self.delay).await;
        }
        if let Some(stall) = self.stall {
            let elapsed = Instant::now().saturating_duration_since(self.start);
            if let Some(end) = stall::window_end(elapsed, stall) {
                // Never before `end`: no response leaves inside the window.
                precise::sleep_until((self.start + end).into_std()).await;
            }
        }
    }
}

/// `--workers N`: the pool, and how many requests wait for it.
struct Workers {
    count: usize,
    free: Semaphore,
    waiting: AtomicUsize,
}

/// One request counted as waiting for a worker while this lives (also when the client goes
/// away and its future is dropped).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(n: &'a AtomicUsize) -> Self {
        n.fetch_add(1, Ordering::Relaxed);
        Waiting(n)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Where a target with `--workers` tells its pool, in Prometheus' text format — as php-fpm's
/// status page does — so that a run can watch it (`--watch`; the demo does). Answered at
/// once, outside the pool and its delay: reading it takes no worker.
pub(super) const METRICS_PATH: &str = "/metrics";

impl Workers {
    /// The page at [`METRICS_PATH`].
    fn metrics(&self) -> String {
        let busy = self.count - self.free.available_permits().min(self.count);
        let waiting = self.waiting.load(Ordering::Relaxed);
        format!(
            "# HELP loader_target_busy_workers Requests in service now, each holding one of the --workers.\n\
             # TYPE loader_target_busy_workers gauge\n\
             loader_target_busy_workers {busy}\n\
             # HELP loader_target_workers The pool's size (--workers).\n\
             # TYPE loader_target_workers gauge\n\
             loader_target_workers {}\n\
             # HELP loader_target_waiting_requests Requests read and waiting for a worker now.\n\
             # TYPE loader_target_waiting_requests gauge\n\
             loader_target_waiting_requests {waiting}\n",
            self.count
        )
    }
}

/// Serve on the runtime's own threads until `shutdown` resolves (see [`serve`]).
///
/// The accept loop is spawned rather than run in place so that a multi-threaded runtime uses
/// exactly its `threads` workers; the caller's `block_on` only waits.
pub(super) async fn serve_spawned(
    listener: TcpListener,
    shaping: Option<Arc<Shaping>>,
    tls: Option<TlsAcceptor>,
    proto: Proto,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    // A panic in the accept loop was already printed; there is nothing left to serve.
    let _ = tokio::spawn(serve(listener, shaping, tls, proto, shutdown)).await;
}

/// Accept and serve until `shutdown` resolves; then stop accepting, let connections finish
/// the requests they are serving (at most [`DRAIN`]) and return.
async fn serve(
    listener: TcpListener,
    shaping: Option<Arc<Shaping>>,
    tls: Option<TlsAcceptor>,
    proto: Proto,
    shutdown: impl Future<Output = ()>,
) {
    let mut http = http1::Builder::new();
    // Keep-alive is hyper's default; said here because the calibration depends on it.
    // No header-read timeout: it would close idle pooled connections after 30 s and cost a
    // timer per request; a trivial test endpoint has no slow clients to defend against.
    http.keep_alive(true).header_read_timeout(None);

    let (stop_tx, stop_rx) = watch::channel(());
    // Every connection task holds a clone of `alive_tx`; `recv` returns None once all are gone.
    let (alive_tx, mut alive_rx) = mpsc::channel::<()>(1);
    let mut shutdown = pin!(shutdown);
    loop {
        let stream = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(_) => {
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let http = match &proto {
            Proto::Http1 => Http::One(http.clone()),
            Proto::Both(grpc) => Http::Both(grpc.clone()),
        };
        tokio::spawn(connection(stream, tls.clone(), http, shaping.clone(), stop_rx.clone(), alive_tx.clone()));
    }
    drop(listener);
    let _ = stop_tx.send(());
    drop(alive_tx);
    let _ = tokio::time::timeout(DRAIN, alive_rx.recv()).await;
}

/// Serve one connection until the client closes it or shutdown is asked for.
async fn connection(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    http: Http,
    shaping: Option<Arc<Shaping>>,
    stop: watch::Receiver<()>,
    alive: mpsc::Sender<()>,
) {
    // Small responses must not wait for Nagle.
    let _ = stream.set_nodelay(true);
    match tls {
        None => serve_http(TokioIo::new(stream), http, shaping, stop, alive).await,
        // A failed handshake (the client refused our certificate, say) ends the connection.
        Some(tls) => {
            if let Ok(stream) = tls.accept(stream).await {
                serve_http(TokioIo::new(stream), http, shaping, stop, alive).await;
            }
        }
    }
}

/// Which protocols the target speaks.
#[derive(Clone)]
pub(super) enum Proto {
    /// HTTP/1.1 only (the default: the cheapest path, what calibration measures).
    Http1,
    /// HTTP/1.1 or HTTP/2 (`--http2`), answering as a gRPC service with `--grpc`.
    Both(Option<Arc<GrpcReply>>),
}

impl Proto {
    pub(super) fn of(http2: bool, grpc: Option<Arc<GrpcReply>>) -> Proto {
        if http2 || grpc.is_some() { Proto::Both(grpc) } else { Proto::Http1 }
    }
}

/// Which protocols a connection speaks.
enum Http {
    One(http1::Builder),
    /// Told apart by the client's first bytes.
    Both(Option<Arc<GrpcReply>>),
}

/// HTTP over `io` (a TCP stream, or a TLS stream over one).
async fn serve_http<I>(
    io: TokioIo<I>,
    http: Http,
    shaping: Option<Arc<Shaping>>,
    stop: watch::Receiver<()>,
    alive: mpsc::Sender<()>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    match http {
        Http::One(http) => serve_http1(io, http, shaping, stop, alive).await,
        Http::Both(grpc) => serve_auto(io, shaping, grpc, stop, alive).await,
    }
}

/// HTTP/1.1 or HTTP/2 (hyper-util's automatic choice) until the client leaves or shutdown.
async fn serve_auto<I>(
    io: TokioIo<I>,
    shaping: Option<Arc<Shaping>>,
    grpc: Option<Arc<GrpcReply>>,
    mut stop: watch::Receiver<()>,
    _alive: mpsc::Sender<()>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    // As many streams as a client may want: --workers, not the protocol, limits the target.
    builder.http2().max_concurrent_streams(1024);
    let service = service_fn(move |req| answer(req, shaping.clone(), grpc.clone()));
    let mut conn = pin!(builder.serve_connection(io, service));
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = stop.changed() => {}
    }
    // HTTP/2: GOAWAY, then the streams in service finish; HTTP/1.1: close after the answer.
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// HTTP/1 over `io`.
async fn serve_http1<I>(
    io: TokioIo<I>,
    http: http1::Builder,
    shaping: Option<Arc<Shaping>>,
    mut stop: watch::Receiver<()>,
    _alive: mpsc::Sender<()>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| answer(req, shaping.clone(), None));
    let mut conn = pin!(http.serve_connection(io, service));
    tokio::select! {
        // Client errors (resets, malformed requests) end the connection; a load target has
        // no one to tell.
        _ = conn.as_mut() => return,
        _ = stop.changed() => {}
    }
    // Closes the connection once the request in service (if any) is answered.
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// Read and discard the request, wait as configured, answer 200 with [`BODY`].
async fn answer(
    req: Request<Incoming>,
    shaping: Option<Arc<Shaping>>,
    grpc: Option<Arc<GrpcReply>>,
) -> Result<Response<Either<Full<Bytes>, GrpcBody>>, Infallible> {
    let metrics = req.uri().path() == METRICS_PATH && grpc.is_none();
    discard(req.into_body()).await;
    if let Some(shaping) = shaping {
        if let Some(w) = shaping.workers.as_ref().filter(|_| metrics) {
            let mut res = Response::new(Either::Left(Full::new(Bytes::from(w.metrics()))));
            res.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
            return Ok(res);
        }
        shaping.hold().await;
    }
    if let Some(grpc) = grpc {
        let code = grpc.next();
        let body = if code == 0 { GrpcBody::ok() } else { GrpcBody::empty() };
        let mut res = Response::new(Either::Right(body));
        let h = res.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        if code != 0 {
            // Trailers-only: the status in the headers, no message.
            h.insert("grpc-status", HeaderValue::from(code));
            h.insert("grpc-message", HeaderValue::from_static("injected by loader target --grpc-status"));
        }
        return Ok(res);
    }
    let mut res = Response::new(Either::Left(Full::new(Bytes::from_static(BODY))));
    // hyper adds `content-length` from the body's exact size and `date` from its cache.
    res.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(res)
}

/// Read a request body to its end, keeping nothing, so the connection can be reused.
async fn discard(mut body: Incoming) {
    while !body.is_end_stream() {
        match body.frame().await {
            Some(Ok(_)) => {}
            // The client went away mid-body; hyper will notice when it writes.
            Some(Err(_)) | None => break,
        }
    }
}
