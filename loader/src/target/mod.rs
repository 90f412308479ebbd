//! The built-in target: any request → `200`, `content-type: application/json`, a small fixed
//! JSON body, HTTP/1.1 keep-alive. Demos, calibration and tests aim the loader at it.
//!
//! It owns the trivial endpoint and three ways to make it behave like a real service of known
//! shape:
//!
//! - `--delay D`: every response waits `D` (service time);
//! - `--workers N`: at most `N` requests in service at once, the rest queue FIFO, so with a
//!   delay the capacity is exactly `N / D` per second; the pool is told at `/metrics`
//!   (Prometheus text: busy workers, the pool's size, requests waiting), answered outside it;
//! - `--stall EVERY:FOR`: nothing is answered, on any connection, during the windows
//!   `[k·EVERY, k·EVERY + FOR)` (k ≥ 1, from the target's start); responses due inside a window
//!   leave when it ends.
//!
//! Two ways to run it: [`serve`] (the `loader target` command: prints one listening line,
//! serves until SIGINT/SIGTERM) and [`spawn`] (on its own thread inside this process, stopped
//! with [`TargetHandle::stop`]).
//!
//! `--tls` serves HTTPS (rustls, a self-signed certificate unless `--cert`/`--key`; see
//! `tls.rs`); the listening line then says `https://`.
//!
//! It does not do: routing (but `/metrics` with `--workers`), echoing the request, error responses, or any
//! measuring of its own — the numbers are the loader's. It is built to be cheap (a static body,
//! no per-request allocation of its own, TCP_NODELAY) so that calibration measures the loader,
//! not this endpoint.
//!
//! Files: `config.rs` (flags → [`TargetConfig`]), `stall.rs` (pure window arithmetic),
//! `server.rs` (runtime, accept loop, hyper connection, the response), `sink.rs` (`--sink`:
//! the calibration responder on io_uring, no hyper, no shaping — cheaper per request than the
//! loader, which is what `loader calibrate` runs against by default).

pub mod child;
mod config;
mod grpc;
mod precise;
mod server;
pub mod sink;
mod stall;
mod tls;

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context as _;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::oneshot;
use tokio::time::Instant;

pub use config::{Stall, TargetConfig};
pub use tls::TargetTls;

/// After the drain, how long runtime threads get to wind down before being left behind.
const RUNTIME_SHUTDOWN: Duration = Duration::from_millis(200);

/// A target running inside this process (see [`spawn`]). Dropping it stops it too.
#[derive(Debug)]
pub struct TargetHandle {
    /// Where it listens (the real port when the configuration asked for port 0).
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TargetHandle {
    /// Stop serving and join its threads: no new connections; requests in service get up to
    /// one second to finish.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            // A panic in the target thread was already printed; stopping must not add another.
            let _ = thread.join();
        }
    }
}

impl Drop for TargetHandle {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// Start the target on its own thread(s) inside this process. Returns once it listens, with
/// the bound address; a bind failure is returned here, naming the address.
pub fn spawn(cfg: TargetConfig) -> anyhow::Result<TargetHandle> {
    let rt = server::runtime(cfg.threads)?;
    let listener = rt.block_on(server::bind(cfg.listen))?;
    let addr = listener.local_addr().context("reading the target's bound address")?;
    let shaping = server::Shaping::new(&cfg, Instant::now());
    let tls = cfg.tls.map(|t| tokio_rustls::TlsAcceptor::from(t.config));
    let proto = server::Proto::of(cfg.http2, cfg.grpc.clone());
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("loader-target".into())
        .spawn(move || {
            // A dropped handle also closes the channel: either way, stop.
            rt.block_on(server::serve_spawned(listener, shaping, tls, proto, async move {
                let _ = stop_rx.await;
            }));
            rt.shutdown_timeout(RUNTIME_SHUTDOWN);
        })
        .context("starting the target's thread")?;
    Ok(TargetHandle { addr, stop: Some(stop_tx), thread: Some(thread) })
}

/// Serve until SIGINT/SIGTERM (the `loader target` command).
///
/// Prints exactly one line to stdout once listening, `loader target listening on
/// http://ADDR` (`https://` with `--tls`) with the bound address, so scripts and tests can wait for it. On a signal it
/// stops accepting, lets requests in service finish (at most one second) and returns `Ok`.
pub fn serve(cfg: TargetConfig) -> anyhow::Result<()> {
    if cfg.sink {
        return sink::serve(cfg.listen, cfg.threads);
    }
    let rt = server::runtime(cfg.threads)?;
    rt.block_on(async {
        // Signal handlers go in before the listening line: whoever waits for the line may
        // signal right after it, and must not hit the default (kill) action.
        let mut terminate = signal(SignalKind::terminate()).context("handling SIGTERM")?;
        let mut interrupt = signal(SignalKind::interrupt()).context("handling SIGINT")?;
        let listener = server::bind(cfg.listen).await?;
        let addr = listener.local_addr().context("reading the target's bound address")?;
        let shaping = server::Shaping::new(&cfg, Instant::now());
        if let Some(t) = &cfg.tls {
            t.write_out()?;
        }
        let scheme = if cfg.tls.is_some() { "https" } else { "http" };
        let tls = cfg.tls.as_ref().map(|t| tokio_rustls::TlsAcceptor::from(Arc::clone(&t.config)));
        let mut out = std::io::stdout().lock();
        writeln!(out, "loader target listening on {scheme}://{addr}")
            .and_then(|()| out.flush())
            .context("printing the listening line")?;
        drop(out);
        server::serve_spawned(listener, shaping, tls, server::Proto::of(cfg.http2, cfg.grpc.clone()), async move {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = interrupt.recv() => {}
            }
        })
        .await;
        anyhow::Ok(())
    })?;
    rt.shutdown_timeout(RUNTIME_SHUTDOWN);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead as _, BufReader, Read as _, Write as _};
    use std::net::TcpStream;

    use super::*;

    fn cfg() -> TargetConfig {
        TargetConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            delay: Duration::ZERO,
            workers: None,
            stall: None,
            threads: 1,
            tls: None,
            http2: false,
            grpc: None,
            sink: false,
        }
    }

    /// One GET on `stream`; returns the status line and the body.
    fn get(stream: &mut TcpStream) -> (String, String) {
        stream.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let mut reader = BufReader::new(stream);
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        (status.trim_end().to_owned(), String::from_utf8(body).unwrap())
    }

    #[test]
    fn spawned_target_answers_on_its_real_port_and_stops() {
        let handle = spawn(cfg()).unwrap();
        assert_ne!(handle.addr.port(), 0);
        let mut stream = TcpStream::connect(handle.addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        for _ in 0..2 {
            let (status, body) = get(&mut stream);
            assert_eq!(status, "HTTP/1.1 200 OK");
            assert_eq!(body, r#"{"ok":true,"service":"loader-target"}"#);
        }
        let addr = handle.addr;
        let t0 = std::time::Instant::now();
        handle.stop();
        assert!(t0.elapsed() < Duration::from_secs(2), "stop took {:?}", t0.elapsed());
        assert!(TcpStream::connect(addr).is_err(), "still accepting after stop");
    }

    #[test]
    fn spawn_on_a_taken_port_names_the_address() {
        let first = spawn(cfg()).unwrap();
        let err = spawn(TargetConfig { listen: first.addr, ..cfg() }).unwrap_err();
        let text = crate::error::one_line(&*err);
        assert!(text.starts_with(&format!("cannot listen on {}: ", first.addr)), "{text}");
        first.stop();
    }

    #[test]
    fn multi_threaded_target_answers() {
        let handle = spawn(TargetConfig { threads: 2, ..cfg() }).unwrap();
        let mut stream = TcpStream::connect(handle.addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(get(&mut stream).0, "HTTP/1.1 200 OK");
        handle.stop();
    }
}
