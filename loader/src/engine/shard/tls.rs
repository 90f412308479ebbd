//! The shard loop's https side: handshakes after connect, requests through rustls, and
//! decrypted responses into the same HTTP/1 parser as a plain connection — or, on an
//! `--http2` run (ALPN `h2`), into the connection's HTTP/2 frames (`h2.rs`), whose queued
//! frames are encrypted and sent here.
//!
//! A connection handshakes in state `Handshaking` (a request that opened it waits in it);
//! its sends and receives go through its [`Tls`](super::tls::Tls). One TLS send is in flight
//! per connection, from `Tls::out`, which does not move while the kernel holds it. The
//! handshake markers the uprobes count are called here.

use std::borrow::Cow;
use std::io::{BufRead as _, Write as _};
use std::ops::Range;

use probes_ebpf::tls_outcome;
use rustls::HandshakeKind;

use super::connections::class_of_errno;
use super::requests::waited_for_connection;
use super::{Shard, send_op};
use crate::engine::conn::{Chunk, State};
use crate::engine::tls::{self, Tls};
use crate::record::ErrorClass;

/// Why an `--http2` connection over TLS failed when the server did not agree to ALPN `h2`.
const NO_H2: &str = "the server does not offer HTTP/2 in the TLS handshake (ALPN h2); drop --http2 for HTTP/1.1";

impl Shard {
    /// TCP is up on an https connection: start its TLS session and send the ClientHello.
    pub(super) fn start_handshake(&mut self, c: usize, now: u64) {
        self.conns[c].state = State::Handshaking;
        let Some(client) = self.tls.as_ref() else { return };
        let session = match client.connect() {
            Ok(session) => session,
            Err(e) => {
                self.tls_failed(c, now, &e);
                return;
            }
        };
        let conn = &mut self.conns[c];
        let tls = match conn.tls.as_mut() {
            Some(tls) => {
                tls.restart(session);
                tls
            }
            None => conn.tls.insert(Tls::new(session)),
        };
        tls::mark_handshake_start(tls);
        self.arm_recv(c);
        self.flush_tls(c);
    }

    /// Encrypt request `request` on connection `c` and send it.
    pub(super) fn send_tls_request(&mut self, c: usize, request: u32, now: u64) {
        let bytes = &self.requests.bytes[request as usize];
        let Some(tls) = self.conns[c].tls.as_mut() else { return };
        // rustls' send buffer is unbounded (`TlsClient::connect`): the whole request is
        // encrypted now and leaves with the next TLS send.
        if let Err(e) = tls.session.writer().write_all(bytes) {
            self.fail_request(c, ErrorClass::Protocol, Cow::Owned(format!("TLS write: {e}")), now);
            return;
        }
        self.flush_tls(c);
    }

    /// Send what rustls has queued, unless a send of this connection is still in flight
    /// (its completion calls this again).
    pub(super) fn flush_tls(&mut self, c: usize) {
        let conn = &mut self.conns[c];
        if conn.state == State::Closing {
            return;
        }
        let fd = conn.raw_fd();
        let Some(tls) = conn.tls.as_mut() else { return };
        if !tls.fill_out() {
            return;
        }
        // `tls.out` stays untouched until this send completes (`Tls::sending`), and the
        // boxed `Tls` lives as long as the connection has operations outstanding.
        let entry = send_op(fd, &tls.out, c, conn.generation);
        conn.ops += 1;
        self.push(entry);
    }

    pub(super) fn on_tls_sent(&mut self, c: usize, res: i32, now: u64) {
        let conn = &mut self.conns[c];
        let fd = conn.raw_fd();
        let Some(tls) = conn.tls.as_mut() else { return };
        if res < 0 {
            tls.sending = false;
            let (class, message) = class_of_errno(-res);
            self.fail_request(c, class, message, now);
            return;
        }
        tls.out_sent += res as usize;
        if tls.out_sent < tls.out.len() {
            // Short write: send the rest of the same buffer.
            let rest = &tls.out[tls.out_sent..];
            let entry = send_op(fd, rest, c, conn.generation);
            conn.ops += 1;
            self.push(entry);
            return;
        }
        tls.sending = false;
        self.flush_tls(c);
    }

    /// Ciphertext arrived (or the socket ended) on an https connection; `received` is where
    /// its bytes lie in buffer `bid` and the kernel's stamp.
    pub(super) fn on_tls_received(
        &mut self,
        c: usize,
        res: i32,
        bid: Option<u16>,
        received: Option<(Range<usize>, Option<u64>)>,
        now: u64,
    ) {
        let ended = res <= 0 || received.as_ref().is_some_and(|(r, _)| r.is_empty());
        if ended {
            let conn = &self.conns[c];
            if conn.state == State::Handshaking {
                // The server reset or closed during the handshake: it refused the connection.
                self.handshake_failed(c, || "the server closed the connection during the TLS handshake".into());
                self.fail_request(
                    c,
                    ErrorClass::Connect,
                    Cow::Borrowed("the server closed the connection during the TLS handshake"),
                    now,
                );
            } else if conn.h2.is_some() {
                match res {
                    0.. => self.h2_ended(c, now),
                    _ => {
                        let (class, message) = class_of_errno(-res);
                        self.fail_request(c, class, message, now);
                    }
                }
            } else if conn.inflight.is_none() {
                self.record.on_close(crate::record::CloseCause::Target, now);
                self.begin_close(c);
            } else if res < 0 {
                let (class, message) = class_of_errno(-res);
                self.fail_request(c, class, message, now);
            } else {
                self.on_eof(c, now);
            }
            return;
        }
        let (Some(bid), Some((range, stamp))) = (bid, received) else {
            self.fail_request(c, ErrorClass::Protocol, Cow::Borrowed("receive buffer without a readable layout"), now);
            return;
        };
        // A followed HTTP/2 connection's records go to rustls one at a time, so that each
        // answer is stamped with the arrival of its record's last byte (`stamps.rs`).
        let by_record = self.conns[c].followed.is_some();
        let read_end = self.conns[c].tls.as_ref().map_or(0, |tls| tls.received) + range.len() as u64;
        let agreed = by_record && self.conns[c].h2.is_some() && self.read_agrees(c, read_end, stamp, now);
        let mut off = range.start;
        while off < range.end {
            let Some(tls) = self.conns[c].tls.as_mut() else { return };
            let all = &self.bufs.get(bid, range.end)[off..];
            let mut wire = match by_record {
                true => &all[..{ tls.records }.take(all)],
                false => all,
            };
            match tls.session.read_tls(&mut wire) {
                Ok(n) if n > 0 => {
                    off += n;
                    tls.received += n as u64;
                    if by_record {
                        tls.records.take(&all[..n]);
                        tls.record_end = (agreed && tls.records.at_end()).then_some(tls.received);
                    }
                }
                _ => {
                    self.fail_request(c, ErrorClass::Protocol, Cow::Borrowed("TLS: could not take more records"), now);
                    return;
                }
            }
            if let Err(e) = tls.session.process_new_packets() {
                self.tls_failed(c, now, &e);
                return;
            }
            if tls.handshaking && !tls.session.is_handshaking() {
                self.on_handshake_done(c);
            }
            let open = if self.conns[c].h2.is_some() {
                self.drain_plaintext_h2(c, stamp, now)
            } else {
                self.drain_plaintext(c, stamp, now)
            };
            if !open {
                return;
            }
        }
        self.flush_tls(c);
    }

    fn on_handshake_done(&mut self, c: usize) {
        let h2 = self.h2.as_ref().map(|m| m.h2.grpc);
        let conn = &mut self.conns[c];
        let Some(tls) = conn.tls.as_mut() else { return };
        tls.handshaking = false;
        if h2.is_some() && tls.session.alpn_protocol() != Some(b"h2") {
            // The server agreed on no protocol: as one that refused `h2` (one handshake
            // counted, as failed).
            let now = self.clock.now_ns();
            self.refused_h2(c, now);
            return;
        }
        let resumed = tls.session.handshake_kind() == Some(HandshakeKind::Resumed);
        tls::mark_handshake_end(tls, if resumed { tls_outcome::RESUMED } else { tls_outcome::FULL });
        self.record.tls.on_handshake(tls.handshake_started.elapsed().as_nanos() as u64, resumed);
        if let Some(grpc) = h2 {
            self.connected_h2(c, grpc);
            return;
        }
        conn.state = State::Idle;
        match conn.inflight.take() {
            // Waited for connect and handshake: both are in its send lag.
            Some(f) => self.send_request(c, f, waited_for_connection(&f)),
            None => self.idle.push(c),
        }
    }

    /// Feed decrypted bytes to the response parser; false once the connection is closing.
    fn drain_plaintext(&mut self, c: usize, stamp: Option<u64>, now: u64) -> bool {
        loop {
            let conn = &mut self.conns[c];
            if conn.state == State::Closing {
                return false;
            }
            // Out of the connection for a moment, so the parser (also the connection's) can
            // read rustls' buffer in place.
            let Some(mut tls) = conn.tls.take() else { return false };
            let chunk = match tls.session.reader().into_first_chunk() {
                Ok(plain) if !plain.is_empty() => {
                    let n = plain.len();
                    let chunk = conn.inflight.is_some().then(|| conn.take_chunk(plain));
                    tls.session.reader().consume(n);
                    Some(chunk)
                }
                _ => None,
            };
            conn.tls = Some(tls);
            match chunk {
                None => return true,
                // Bytes nobody asked for: the connection is done (as on the plain path).
                Some(None) => {
                    self.begin_close(c);
                    return false;
                }
                Some(Some(Err(e))) => {
                    self.fail_request(c, ErrorClass::Protocol, e.0, now);
                    return false;
                }
                Some(Some(Ok(Chunk::More))) => self.streaming = true,
                Some(Some(Ok(Chunk::Done { status, close }))) => {
                    let done = self.completion_time(c, stamp, now);
                    self.note_read(c, stamp.map(|_| done), now);
                    self.conns[c].parser.reset();
                    self.finish_answered(c, status, done);
                    if close || !self.keepalive {
                        if close {
                            self.record.on_close(crate::record::CloseCause::Target, now);
                        }
                        self.begin_close(c);
                        return false;
                    }
                }
            }
        }
    }

    /// rustls rejected the session. During the handshake (certificate refused, alert,
    /// no common parameters) the connection could not be opened: class `connect`, counted
    /// as a TLS failure. After it (bad record, unexpected message): class `protocol`.
    fn tls_failed(&mut self, c: usize, now: u64, e: &rustls::Error) {
        let no_h2 = rustls::Error::AlertReceived(rustls::AlertDescription::NoApplicationProtocol);
        if self.h2.is_some() && *e == no_h2 {
            self.refused_h2(c, now);
            return;
        }
        let class = if self.conns[c].state == State::Handshaking {
            self.handshake_failed(c, || e.to_string());
            ErrorClass::Connect
        } else {
            ErrorClass::Protocol
        };
        self.fail_request(c, class, Cow::Owned(format!("TLS: {e}")), now);
    }

    /// The server did not agree to ALPN `h2` on an `--http2` run: the connection could not be
    /// opened (`connect`, a failed handshake), and the detail says what to do.
    fn refused_h2(&mut self, c: usize, now: u64) {
        self.handshake_failed(c, || NO_H2.into());
        self.fail_request(c, ErrorClass::Connect, Cow::Borrowed(NO_H2), now);
    }

    /// The handshake of connection `c` failed: count it, keep the first reason, and tell the
    /// kernel probe.
    pub(super) fn handshake_failed(&mut self, c: usize, reason: impl FnOnce() -> String) {
        self.record.tls.failures += 1;
        self.record.tls.note_error(reason);
        if let Some(tls) = self.conns[c].tls.as_deref() {
            tls::mark_handshake_end(tls, tls_outcome::FAILED);
        }
    }
}
