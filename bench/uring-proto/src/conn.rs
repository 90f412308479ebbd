//! A connection task: wait for a request, send it, read its response, record, go idle.
//!
//! One task per keep-alive connection, one request at a time on it (no pipelining), the
//! way a tokio-uring program is naturally written: tokio-uring's reads and writes are
//! futures on one connection, so a connection is a task. Responses are framed by
//! `Content-Length` (the target's are); chunked bodies are not handled. A connection that
//! fails counts the request as an error and is not reopened.

use std::rc::Rc;

use tokio_uring::buf::BoundedBuf;
use tokio_uring::net::TcpStream;

use crate::{Shared, now_ns};

/// Receive buffer; the target's whole response is ~150 bytes.
const BUF: usize = 16 * 1024;

/// Serve requests on connection `id` until the run stops or the connection fails.
pub async fn serve(id: usize, stream: TcpStream, request: &'static [u8], shared: Rc<Shared>) {
    let slot = &shared.slots[id];
    let mut buf = Vec::with_capacity(BUF);
    loop {
        let intended = loop {
            if shared.stop.get() {
                return;
            }
            if let Some(at) = slot.job.take() {
                break at;
            }
            slot.ready.notified().await;
        };
        let sent_at = now_ns();
        let measured = {
            let mut r = shared.record.borrow_mut();
            let measured = intended >= r.measured_from;
            if measured {
                r.sent += 1;
                r.send_lag.saturating_record(sent_at.saturating_sub(intended));
            }
            measured
        };
        let (answer, back) = exchange(&stream, request, buf).await;
        buf = back;
        let done = now_ns();
        let mut r = shared.record.borrow_mut();
        let good = matches!(answer, Ok(status) if (200..400).contains(&status));
        r.ok_all += u64::from(good);
        if measured {
            r.latency.saturating_record(done.saturating_sub(intended));
            if good {
                r.ok += 1;
            } else {
                r.errors += 1;
            }
        }
        drop(r);
        if let Err(e) = answer {
            eprintln!("uring-proto: connection {id} failed: {e:?}");
            shared.alive.set(shared.alive.get() - 1);
            shared.idle_ready.notify_one();
            return;
        }
        shared.idle.borrow_mut().push(id);
        shared.idle_ready.notify_one();
    }
}

/// Why a connection stopped being usable.
#[derive(Debug)]
pub enum ConnError {
    Io(#[allow(dead_code, reason = "printed through Debug when a connection fails")] std::io::Error),
    /// The peer closed the connection before the response was complete.
    Closed,
    /// A write took only part of the request.
    ShortWrite,
    /// The response did not parse, or has no `Content-Length`, or is larger than the buffer.
    Framing,
}

/// Send `request` and read one response; the status code, and the buffer back.
async fn exchange(stream: &TcpStream, request: &'static [u8], mut buf: Vec<u8>) -> (Result<u16, ConnError>, Vec<u8>) {
    let (written, _) = stream.write(request).submit().await;
    match written {
        Ok(n) if n == request.len() => {}
        Ok(_) => return (Err(ConnError::ShortWrite), buf),
        Err(e) => return (Err(ConnError::Io(e)), buf),
    }
    buf.clear();
    loop {
        let filled = buf.len();
        if filled == buf.capacity() {
            return (Err(ConnError::Framing), buf);
        }
        // tokio-uring reads into the buffer from offset 0 unless given a slice past it.
        let (read, slice) = stream.read(buf.slice(filled..)).await;
        buf = slice.into_inner();
        match read {
            Ok(0) => return (Err(ConnError::Closed), buf),
            Ok(_) => {}
            Err(e) => return (Err(ConnError::Io(e)), buf),
        }
        match frame(&buf) {
            Ok(Some(status)) => return (Ok(status), buf),
            Ok(None) => continue,
            Err(e) => return (Err(e), buf),
        }
    }
}

/// The status of the complete response in `buf`, `None` if more bytes are needed.
fn frame(buf: &[u8]) -> Result<Option<u16>, ConnError> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let head = match response.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(ConnError::Framing),
    };
    let length = response
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse::<usize>().ok())
        .ok_or(ConnError::Framing)?;
    let status = response.code.ok_or(ConnError::Framing)?;
    Ok((buf.len() >= head + length).then_some(status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_is_complete_when_its_body_is() {
        let whole = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nabcd";
        assert_eq!(frame(whole).unwrap(), Some(200));
        assert_eq!(frame(&whole[..whole.len() - 1]).unwrap(), None);
        assert_eq!(frame(&whole[..10]).unwrap(), None);
        assert!(frame(b"HTTP/1.1 200 OK\r\n\r\n").is_err(), "no content-length");
    }
}
