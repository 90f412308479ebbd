//! The HTTP side of `--metrics ADDR`: `GET /metrics` on its own thread (`loader-metrics`)
//! with a current-thread tokio runtime and hyper, so a scrape never runs on a shard thread.
//!
//! The address is bound by [`Endpoint::bind`] on the caller's thread, before the run starts,
//! so a bad or busy address is one clear error and no run. The endpoint serves the latest
//! [`Exposition`] it was given ([`Endpoint::publish`]); it never reads the run's data.
//! Dropping it stops the thread.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::sync::watch;

use super::Exposition;

/// Pause after a failed `accept` (out of descriptors and the like).
const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointError {
    /// The flag's value is not `HOST:PORT` with an IP address.
    #[error("--metrics: not an address: {0:?} (expected IP:PORT, e.g. 127.0.0.1:9464)")]
    Address(String),
    /// The address could not be bound (in use, not local, not permitted).
    #[error("--metrics: cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The server thread or its runtime could not start.
    #[error("--metrics: cannot start the endpoint's thread: {0}")]
    Thread(std::io::Error),
}

/// A running metrics endpoint.
#[derive(Debug)]
pub struct Endpoint {
    addr: SocketAddr,
    current: Arc<RwLock<Arc<Exposition>>>,
    shutdown: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
}

impl Endpoint {
    /// Listen on `addr` and serve an empty exposition until the first [`Endpoint::publish`].
    pub fn bind(addr: &str) -> Result<Endpoint, EndpointError> {
        let parsed: SocketAddr = addr.parse().map_err(|_| EndpointError::Address(addr.to_string()))?;
        let listener =
            std::net::TcpListener::bind(parsed).map_err(|source| EndpointError::Bind { addr: parsed, source })?;
        let bound = listener.local_addr().map_err(|source| EndpointError::Bind { addr: parsed, source })?;
        listener.set_nonblocking(true).map_err(|source| EndpointError::Bind { addr: parsed, source })?;
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(EndpointError::Thread)?;
        let current = Arc::new(RwLock::new(Arc::new(Exposition::default())));
        let (shutdown, stopped) = watch::channel(false);
        let served = Arc::clone(&current);
        let thread = std::thread::Builder::new()
            .name("loader-metrics".to_string())
            .spawn(move || runtime.block_on(serve(listener, served, stopped)))
            .map_err(EndpointError::Thread)?;
        Ok(Endpoint { addr: bound, current, shutdown, thread: Some(thread) })
    }

    /// Where it listens (the port resolved when the flag said 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serve `exposition` from now on.
    pub fn publish(&self, exposition: Exposition) {
        if let Ok(mut current) = self.current.write() {
            *current = Arc::new(exposition);
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Accept until `stopped` turns true; each connection is served on the same runtime.
async fn serve(
    listener: std::net::TcpListener,
    current: Arc<RwLock<Arc<Exposition>>>,
    mut stopped: watch::Receiver<bool>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // EMFILE and the like: pause rather than spin, the next scrape tries again.
                Err(_) => {
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            _ = stopped.changed() => return,
        };
        let current = Arc::clone(&current);
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| answer(req, Arc::clone(&current)));
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = stopped.changed() => {}
            }
        });
    }
}

/// `GET /metrics` (or `HEAD`) in the format the `Accept` header prefers; 404 elsewhere.
async fn answer(
    req: Request<hyper::body::Incoming>,
    current: Arc<RwLock<Arc<Exposition>>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let plain = |status: StatusCode, text: &'static str| {
        let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
        *r.status_mut() = status;
        r
    };
    if req.uri().path() != "/metrics" {
        return Ok(plain(StatusCode::NOT_FOUND, "not found: the metrics are at /metrics\n"));
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(plain(StatusCode::METHOD_NOT_ALLOWED, "GET /metrics\n"));
    }
    let exposition = match current.read() {
        Ok(c) => Arc::clone(&c),
        Err(_) => return Ok(plain(StatusCode::INTERNAL_SERVER_ERROR, "metrics unavailable\n")),
    };
    let accept = req.headers().get(ACCEPT).and_then(|v| v.to_str().ok());
    let (body, content_type) = exposition.negotiate(accept);
    let body = if req.method() == Method::HEAD { Bytes::new() } else { Bytes::copy_from_slice(body.as_bytes()) };
    let mut response = Response::new(Full::new(body));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    Ok(response)
}
