//! Frames in: what the server sent, frame by frame, into stream ends and the replies the
//! protocol asks for (SETTINGS ACK, PING ACK, credit).

use std::borrow::Cow;

use super::*;

impl Wire {
    /// Take the bytes the socket received; each stream that ended is pushed to `events`.
    /// `Err`: the connection broke the protocol; the streams still open are the caller's to
    /// fail ([`Wire::take_all`]).
    pub fn feed(&mut self, data: &[u8], events: &mut Vec<Event>) -> Result<(), ConnError> {
        self.fed += data.len() as u64;
        self.ends.clear();
        let pushed = events.len();
        if self.carry.is_empty() {
            let used = self.frames(data, events, pushed)?;
            self.carry.extend_from_slice(&data[used..]);
            return Ok(());
        }
        let mut carry = std::mem::take(&mut self.carry);
        carry.extend_from_slice(data);
        let used = self.frames(&carry, events, pushed)?;
        carry.drain(..used);
        self.carry = carry;
        Ok(())
    }

    /// Bytes fed so far: every byte the connection received.
    pub fn fed(&self) -> u64 {
        self.fed
    }

    /// Handle the whole frames at the front of `data` (which ends with the last byte fed);
    /// how many bytes they took. Events from `pushed` on are this feed's.
    fn frames(&mut self, data: &[u8], events: &mut Vec<Event>, pushed: usize) -> Result<usize, ConnError> {
        // The byte count received at the start of `data`.
        let base = self.fed - data.len() as u64;
        let mut at = 0;
        while data.len() - at >= 9 {
            let h = &data[at..at + 9];
            let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
            if len > MAX_FRAME {
                return Err(conn_error(
                    FRAME_SIZE_ERROR,
                    &format!("a frame of {len} bytes, above the {MAX_FRAME} the loader allows"),
                ));
            }
            if data.len() - at < 9 + len {
                break;
            }
            let (kind, flags) = (h[3], h[4]);
            let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & MAX_STREAM_ID;
            let payload = &data[at + 9..at + 9 + len];
            at += 9 + len;
            self.on_frame(kind, flags, stream, payload, events)?;
            let end = base + at as u64;
            self.ends.resize(events.len() - pushed, end);
        }
        Ok(at)
    }

    fn on_frame(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        payload: &[u8],
        events: &mut Vec<Event>,
    ) -> Result<(), ConnError> {
        if self.block.is_some() && kind != CONTINUATION {
            return Err(conn_error(PROTOCOL_ERROR, "a header block interrupted by another frame"));
        }
        match kind {
            DATA => self.on_data(flags, stream, payload, events),
            HEADERS => {
                if stream == 0 {
                    return Err(conn_error(PROTOCOL_ERROR, "HEADERS on stream 0"));
                }
                let mut fragment = unpad(flags, payload)?;
                if flags & PRIORITY_FLAG != 0 {
                    fragment = fragment.get(5..).ok_or_else(|| conn_error(FRAME_SIZE_ERROR, "HEADERS too short"))?;
                }
                self.block_bytes.clear();
                self.gather(fragment)?;
                self.block = Some((stream, flags & END_STREAM != 0));
                if flags & END_HEADERS != 0 {
                    self.end_block(events)?;
                }
                Ok(())
            }
            CONTINUATION => {
                match self.block {
                    Some((s, _)) if s == stream => {}
                    _ => return Err(conn_error(PROTOCOL_ERROR, "CONTINUATION without its HEADERS")),
                }
                self.gather(payload)?;
                if flags & END_HEADERS != 0 {
                    self.end_block(events)?;
                }
                Ok(())
            }
            RST_STREAM => {
                let code = word(payload, "RST_STREAM")?;
                if let Some(s) = self.remove(stream) {
                    events.push(if code == REFUSED_STREAM {
                        Event::Unprocessed { f: s.f }
                    } else {
                        Event::Failed {
                            f: s.f,
                            class: ErrorClass::StreamReset,
                            message: Cow::Owned(format!(
                                "the server reset the stream (RST_STREAM {})",
                                code_name(code)
                            )),
                        }
                    });
                }
                Ok(())
            }
            SETTINGS => self.on_settings(flags, stream, payload),
            PUSH_PROMISE => Err(conn_error(PROTOCOL_ERROR, "the server pushed a stream though push is off")),
            PING => {
                if payload.len() != 8 {
                    return Err(conn_error(FRAME_SIZE_ERROR, "a PING that is not 8 bytes"));
                }
                if flags & ACK == 0 {
                    self.frame(PING, ACK, 0, payload);
                }
                Ok(())
            }
            GOAWAY => {
                if payload.len() < 8 {
                    return Err(conn_error(FRAME_SIZE_ERROR, "a GOAWAY shorter than 8 bytes"));
                }
                let last = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & MAX_STREAM_ID;
                let code = u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]);
                // A second GOAWAY may only lower the last stream id.
                let last = self.goaway.map_or(last, |(before, _)| before.min(last));
                self.goaway = Some((last, code));
                let mut i = 0;
                while i < self.streams.len() {
                    if self.streams[i].id > last {
                        let s = self.streams.swap_remove(i);
                        events.push(if code == NO_ERROR {
                            Event::Unprocessed { f: s.f }
                        } else {
                            Event::Failed {
                                f: s.f,
                                class: ErrorClass::ConnectionError,
                                message: Cow::Owned(format!(
                                    "the server ended the connection (GOAWAY {})",
                                    code_name(code)
                                )),
                            }
                        });
                    } else {
                        i += 1;
                    }
                }
                Ok(())
            }
            WINDOW_UPDATE => {
                let increment = i64::from(word(payload, "WINDOW_UPDATE")? & MAX_STREAM_ID);
                if stream == 0 {
                    if increment == 0 {
                        return Err(conn_error(PROTOCOL_ERROR, "a WINDOW_UPDATE of 0"));
                    }
                    self.conn_send_window += increment;
                    if self.conn_send_window > MAX_WINDOW {
                        return Err(conn_error(FLOW_CONTROL_ERROR, "the connection window passed 2^31-1"));
                    }
                } else if let Some(s) = self.streams.iter_mut().find(|s| s.id == stream) {
                    s.send_window += increment;
                }
                self.send_bodies();
                Ok(())
            }
            // PRIORITY, and frame types this end does not know, are ignored (RFC 9113 §4.1).
            _ => Ok(()),
        }
    }

    fn on_data(&mut self, flags: u8, stream: u32, payload: &[u8], events: &mut Vec<Event>) -> Result<(), ConnError> {
        if stream == 0 {
            return Err(conn_error(PROTOCOL_ERROR, "DATA on stream 0"));
        }
        let body = unpad(flags, payload)?;
        // The whole frame counts against the windows, padding included.
        let counted = payload.len() as u32;
        self.conn_unacked += counted;
        if self.conn_unacked >= CONN_WINDOW / 2 {
            let credit = std::mem::take(&mut self.conn_unacked);
            self.frame(WINDOW_UPDATE, 0, 0, &credit.to_be_bytes());
        }
        let end = flags & END_STREAM != 0;
        let max_body = self.limits.max_body;
        let Some(i) = self.streams.iter().position(|s| s.id == stream) else { return Ok(()) };
        let s = &mut self.streams[i];
        s.body += body.len() as u64;
        if s.body > max_body {
            let s = self.streams.swap_remove(i);
            if !end {
                self.frame(RST_STREAM, 0, s.id, &CANCEL.to_be_bytes());
            }
            events.push(Event::Failed {
                f: s.f,
                class: ErrorClass::Protocol,
                message: Cow::Borrowed("response body larger than --max-body"),
            });
            return Ok(());
        }
        if end {
            let s = self.streams.swap_remove(i);
            events.push(self.ended(s));
            return Ok(());
        }
        s.unacked += counted;
        if s.unacked >= STREAM_WINDOW / 2 {
            let credit = std::mem::take(&mut s.unacked);
            self.frame(WINDOW_UPDATE, 0, stream, &credit.to_be_bytes());
        }
        Ok(())
    }

    fn on_settings(&mut self, flags: u8, stream: u32, payload: &[u8]) -> Result<(), ConnError> {
        if stream != 0 {
            return Err(conn_error(PROTOCOL_ERROR, "SETTINGS on a stream"));
        }
        if flags & ACK != 0 {
            return Ok(());
        }
        if !payload.len().is_multiple_of(6) {
            return Err(conn_error(FRAME_SIZE_ERROR, "a SETTINGS frame not made of 6-byte settings"));
        }
        for setting in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([setting[0], setting[1]]);
            let value = u32::from_be_bytes([setting[2], setting[3], setting[4], setting[5]]);
            match id {
                3 => self.peer_max_streams = value,
                4 => {
                    if i64::from(value) > MAX_WINDOW {
                        return Err(conn_error(FLOW_CONTROL_ERROR, "an initial window above 2^31-1"));
                    }
                    let delta = i64::from(value) - self.peer_window;
                    self.peer_window = i64::from(value);
                    for s in &mut self.streams {
                        s.send_window += delta;
                    }
                }
                5 => {
                    if !(16_384..=16_777_215).contains(&value) {
                        return Err(conn_error(PROTOCOL_ERROR, "a SETTINGS_MAX_FRAME_SIZE out of range"));
                    }
                    self.peer_max_frame = value as usize;
                }
                _ => {}
            }
        }
        self.frame(SETTINGS, ACK, 0, &[]);
        self.send_bodies();
        Ok(())
    }

    /// Add a header block fragment, within `--max-header`.
    fn gather(&mut self, fragment: &[u8]) -> Result<(), ConnError> {
        if self.block_bytes.len() + fragment.len() > self.limits.max_head {
            return Err(ConnError {
                class: ErrorClass::Protocol,
                message: Cow::Owned(format!(
                    "response header block larger than the {} byte limit (--max-header)",
                    self.limits.max_head
                )),
            });
        }
        self.block_bytes.extend_from_slice(fragment);
        Ok(())
    }

    /// A header block is complete: decode it (always — the table must stay in step) and
    /// apply it to its stream, if that is still ours.
    fn end_block(&mut self, events: &mut Vec<Event>) -> Result<(), ConnError> {
        let Some((stream, end_stream)) = self.block.take() else { return Ok(()) };
        let (mut status, mut grpc_status, mut grpc_message) = (None, None, None);
        let grpc = self.grpc;
        let wanted = |name: &[u8]| name == b":status" || (grpc && name.starts_with(b"grpc-"));
        let decoded = self.decoder.decode_some(&self.block_bytes, wanted, |name, value| match name {
            b":status" => status = std::str::from_utf8(value).ok().and_then(|v| v.parse::<u16>().ok()),
            b"grpc-status" if grpc => {
                grpc_status = Some(std::str::from_utf8(value).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(2))
            }
            b"grpc-message" if grpc => grpc_message = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {}
        });
        if let Err(e) = decoded {
            return Err(conn_error(COMPRESSION_ERROR, &format!("a header block HPACK cannot decode: {}", e.0)));
        }
        let Some(i) = self.streams.iter().position(|s| s.id == stream) else { return Ok(()) };
        let s = &mut self.streams[i];
        if s.status == 0 {
            match status {
                // An interim answer (100 Continue, 103 Early Hints): the real one follows.
                Some(100..=199) if !end_stream => return Ok(()),
                Some(code) if (100..=999).contains(&code) => s.status = code,
                _ => {
                    let s = self.streams.swap_remove(i);
                    self.frame(RST_STREAM, 0, s.id, &PROTOCOL_ERROR.to_be_bytes());
                    events.push(Event::Failed {
                        f: s.f,
                        class: ErrorClass::Protocol,
                        message: Cow::Borrowed("a response head without a valid :status"),
                    });
                    return Ok(());
                }
            }
        }
        if let Some(code) = grpc_status
            && s.grpc.is_none()
        {
            s.grpc = Some((code, grpc_message.unwrap_or_default()));
        }
        if end_stream {
            let s = self.streams.swap_remove(i);
            events.push(self.ended(s));
        }
        Ok(())
    }

    /// The stream's answer ended (END_STREAM).
    fn ended(&self, s: Stream) -> Event {
        let grpc = self.grpc.then(|| s.grpc.unwrap_or_else(|| (2, "no grpc-status in the answer".into())));
        Event::Answered { f: s.f, status: s.status, grpc }
    }
}

/// A payload without its padding (PADDED).
fn unpad(flags: u8, payload: &[u8]) -> Result<&[u8], ConnError> {
    if flags & PADDED == 0 {
        return Ok(payload);
    }
    let pad =
        usize::from(*payload.first().ok_or_else(|| conn_error(FRAME_SIZE_ERROR, "a padded frame without its length"))?);
    payload
        .get(1..payload.len().saturating_sub(pad).max(1))
        .filter(|_| pad < payload.len())
        .ok_or_else(|| conn_error(PROTOCOL_ERROR, "padding longer than the frame"))
}

/// The 4-byte payload of a RST_STREAM or WINDOW_UPDATE.
fn word(payload: &[u8], what: &str) -> Result<u32, ConnError> {
    match payload {
        &[a, b, c, d] => Ok(u32::from_be_bytes([a, b, c, d])),
        _ => Err(conn_error(FRAME_SIZE_ERROR, &format!("a {what} that is not 4 bytes"))),
    }
}
