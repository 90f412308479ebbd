//! The kill switch (`loader run --control ADDR`, `loader stop ADDR…`): every machine of a
//! sharded run serves `POST /stop`, guarded by a shared token (`LOADER_CONTROL_TOKEN`), and
//! a request raises the run's halt flag, which the shards read at their next turn (at most
//! `engine::pace::MAX_WAIT_NS`, 50 ms, away) — the same halt as SIGINT, so what was
//! measured until then is written and marked interrupted.
//!
//! Plain HTTP/1.1 on a thread of its own with blocking sockets: one small request per stop,
//! nothing a shard ever waits on. The token travels in clear: keep the address on the load
//! machines' own network (a Kubernetes pod network, a VPN).

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crate::error::InputError;

/// Environment variable holding the token `POST /stop` must present.
pub const TOKEN_ENV: &str = "LOADER_CONTROL_TOKEN";
/// Shortest token accepted.
pub const TOKEN_MIN_LEN: usize = 16;
/// Largest request head read.
const MAX_REQUEST: usize = 8192;
/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause between polls of a listener with nothing to accept (bounds shutdown on drop).
const ACCEPT_POLL: Duration = Duration::from_millis(10);

/// A running control endpoint.
#[derive(Debug)]
pub struct Control {
    addr: SocketAddr,
    requested: Arc<Mutex<Option<SystemTime>>>,
    shutdown: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// The token from the environment, checked.
pub fn token_from_env(flag: &str) -> Result<String, InputError> {
    match std::env::var(TOKEN_ENV) {
        Ok(t) if t.trim().len() >= TOKEN_MIN_LEN => Ok(t.trim().to_string()),
        Ok(_) => Err(InputError::new(flag, format!("{TOKEN_ENV} must hold at least {TOKEN_MIN_LEN} characters"))),
        Err(_) => Err(InputError::new(
            flag,
            format!("set {TOKEN_ENV} (at least {TOKEN_MIN_LEN} characters): the token `loader stop` must present"),
        )),
    }
}

impl Control {
    /// Listen on `addr`; a valid `POST /stop` raises `halt`.
    pub fn bind(addr: &str, token: String, halt: Arc<AtomicBool>) -> Result<Control, InputError> {
        let parsed: SocketAddr = addr
            .parse()
            .map_err(|_| InputError::new("--control", format!("not an address: {addr:?} (expected IP:PORT)")))?;
        let listener = TcpListener::bind(parsed)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| InputError::new("--control", format!("cannot listen on {parsed}: {e}")))?;
        let bound = listener.local_addr().map_err(|e| InputError::new("--control", e.to_string()))?;
        let requested = Arc::new(Mutex::new(None));
        let shutdown = Arc::new(AtomicBool::new(false));
        let (req, down) = (Arc::clone(&requested), Arc::clone(&shutdown));
        let thread = std::thread::Builder::new()
            .name("loader-control".into())
            .spawn(move || serve(&listener, &token, &halt, &req, &down))
            .map_err(|e| InputError::new("--control", format!("cannot start its thread: {e}")))?;
        Ok(Control { addr: bound, requested, shutdown, thread: Some(thread) })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// When the first stop request arrived, if one did.
    pub fn requested_at(&self) -> Option<SystemTime> {
        self.requested.lock().ok().and_then(|r| *r)
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(
    listener: &TcpListener,
    token: &str,
    halt: &AtomicBool,
    requested: &Mutex<Option<SystemTime>>,
    shutdown: &AtomicBool,
) {
    while !shutdown.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                let _ = answer(stream, token, halt, requested);
            }
            Err(_) => std::thread::sleep(ACCEPT_POLL),
        }
    }
}

fn answer(
    mut stream: TcpStream,
    token: &str,
    halt: &AtomicBool,
    requested: &Mutex<Option<SystemTime>>,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    let mut buf = vec![0u8; MAX_REQUEST];
    let mut len = 0;
    let (status, text) = loop {
        let n = stream.read(&mut buf[len..])?;
        if n == 0 {
            return Ok(());
        }
        len += n;
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf[..len]) {
            Ok(httparse::Status::Complete(_)) => break judge(&req, token),
            Ok(httparse::Status::Partial) if len < MAX_REQUEST => continue,
            _ => break ("400 Bad Request", "bad request\n"),
        }
    };
    if status.starts_with("200") {
        halt.store(true, Ordering::Relaxed);
        if let Ok(mut r) = requested.lock() {
            r.get_or_insert_with(SystemTime::now);
        }
    }
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    )
}

/// The answer to a parsed request: only `POST /stop` with the token stops.
fn judge(req: &httparse::Request<'_, '_>, token: &str) -> (&'static str, &'static str) {
    if req.path != Some("/stop") {
        return ("404 Not Found", "not found: POST /stop\n");
    }
    if req.method != Some("POST") {
        return ("405 Method Not Allowed", "POST /stop\n");
    }
    let given = req.headers.iter().find(|h| h.name.eq_ignore_ascii_case("authorization")).map(|h| h.value);
    let expected = format!("Bearer {token}");
    match given {
        Some(v) if same(v, expected.as_bytes()) => ("200 OK", "stopping\n"),
        _ => ("401 Unauthorized", "wrong or missing token\n"),
    }
}

/// Equal bytes, compared in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `loader stop`: send `POST /stop` to every address at once; per address, the answer and
/// how long it took. `Ok` only when every one acknowledged.
pub fn stop_all(addrs: &[String], token: &str, timeout: Duration) -> Vec<(String, Result<Duration, String>)> {
    let handles: Vec<_> = addrs
        .iter()
        .map(|a| {
            let (a, token) = (a.clone(), token.to_string());
            std::thread::spawn(move || {
                let r = stop_one(&a, &token, timeout);
                (a, r)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap_or_else(|_| (String::new(), Err("thread failed".into())))).collect()
}

fn stop_one(addr: &str, token: &str, timeout: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    // A name too (a Kubernetes pod's `loader-run-0.loader:9470`).
    let parsed = std::net::ToSocketAddrs::to_socket_addrs(addr)
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("not an address (expected HOST:PORT): {addr:?}"))?;
    let mut s = TcpStream::connect_timeout(&parsed, timeout).map_err(|e| format!("cannot connect: {e}"))?;
    s.set_read_timeout(Some(timeout)).and_then(|()| s.set_write_timeout(Some(timeout))).map_err(|e| e.to_string())?;
    write!(s, "POST /stop HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("cannot send: {e}"))?;
    let mut answer = Vec::new();
    let _ = s.take(4096).read_to_end(&mut answer);
    let line = String::from_utf8_lossy(&answer).lines().next().unwrap_or_default().to_string();
    if line.starts_with("HTTP/1.1 200") {
        Ok(started.elapsed())
    } else if line.is_empty() {
        Err("no answer".into())
    } else {
        Err(format!("refused: {}", line.trim_start_matches("HTTP/1.1 ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_post_with_the_token_stops_the_run() {
        let halt = Arc::new(AtomicBool::new(false));
        let token = "0123456789abcdef".to_string();
        let control = Control::bind("127.0.0.1:0", token.clone(), Arc::clone(&halt)).unwrap();
        let addr = control.addr().to_string();
        let wrong = stop_all(std::slice::from_ref(&addr), "fedcba9876543210", Duration::from_secs(2));
        assert!(matches!(&wrong[0].1, Err(e) if e.contains("401")), "{wrong:?}");
        assert!(!halt.load(Ordering::Relaxed) && control.requested_at().is_none());
        let right = stop_all(std::slice::from_ref(&addr), &token, Duration::from_secs(2));
        assert!(right[0].1.is_ok(), "{right:?}");
        assert!(halt.load(Ordering::Relaxed) && control.requested_at().is_some());
        let nobody = stop_all(&["127.0.0.1:1".to_string(), "x".to_string()], &token, Duration::from_secs(1));
        assert!(nobody.iter().all(|(_, r)| r.is_err()), "{nobody:?}");
        assert!(same(b"abc", b"abc") && !same(b"abc", b"abd") && !same(b"abc", b"ab"));
    }
}
