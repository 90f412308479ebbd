//! Fuzz `loader::engine::http1::ResponseParser` the way the engine drives it: the bytes of
//! one keep-alive connection, several responses in a row, arriving in chunks of any size.
//!
//! Input: 4 control bytes, then the bytes the server sends.
//!
//! - byte 0: which of 8 responses in turn answer a HEAD request (bit i for response i % 8);
//! - byte 1: the body limit (`with_max_body`), one of [`MAX_BODIES`];
//! - bytes 2–3: the chunk boundaries: a seed and the largest chunk, so the same wire is cut
//!   differently as the fuzzer mutates them.
//!
//! The wire is parsed twice, in one chunk and in those chunks, carrying unconsumed bytes
//! over as the engine does (`feed` them again with what arrives next); after each complete
//! response the parser is `reset` and told whether the next one answers HEAD. Checked:
//!
//! - no panic (and no arithmetic overflow: the build turns debug assertions on);
//! - `feed` consumes at most what it was given, and a response is never complete without
//!   consuming its head;
//! - progress: when `feed` asks for more, it has consumed everything it could: feeding the
//!   unconsumed bytes again (to a copy) consumes nothing;
//! - a complete response has a final status (not an interim 1xx), and a 101 or a body
//!   framed by the close ends the connection;
//! - the framing does not depend on the chunk boundaries (the module's promise, "bytes go
//!   in as they arrive"): both parses complete the same responses — status, close, length
//!   on the wire — then both fail, or both wait with the same bytes unconsumed and agree
//!   on what the connection's close (`on_eof`) means.

#![no_main]

use libfuzzer_sys::fuzz_target;
use loader::engine::http1::{Limits, Progress, ResponseParser};

/// Body limits to choose from: small ones reach the limit checks with short inputs.
const MAX_BODIES: [u64; 6] = [0, 1, 16, 1024, 1 << 20, u64::MAX];
/// Largest chunk sizes to choose from (1 = byte by byte).
const MAX_CHUNKS: [usize; 8] = [1, 2, 3, 5, 8, 64, 512, 4096];

/// What happened to the connection, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    /// A complete response: status, close, and its length on the wire (head and body).
    Done { status: u16, close: bool, wire_len: usize },
    /// `feed` failed (the message may name what was seen so far, so it is not compared).
    Failed,
    /// All bytes fed, the parser waits: bytes left unconsumed, and what EOF would mean.
    Waiting { unconsumed: usize, eof: Option<Progress> },
}

struct Config {
    head_mask: u8,
    max_body: u64,
    seed: u8,
    max_chunk: usize,
}

impl Config {
    fn head(&self, response: usize) -> bool {
        self.head_mask & (1 << (response % 8)) != 0
    }

    fn parser(&self) -> ResponseParser {
        let max_body = if self.max_body == u64::MAX { Limits::default().max_body } else { self.max_body };
        ResponseParser::with_max_body(self.head(0), max_body)
    }

    /// Chunk lengths (each ≥ 1) covering `len` bytes, from a small xorshift seeded by the input.
    fn chunks(&self, len: usize) -> Vec<usize> {
        let mut state = u32::from(self.seed).wrapping_mul(0x9E37_79B9) | 1;
        let mut out = Vec::new();
        let mut left = len;
        while left > 0 {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let n = (state as usize % self.max_chunk + 1).min(left);
            out.push(n);
            left -= n;
        }
        out
    }
}

/// Feeds `buf` once; checks the per-call invariants.
fn feed(parser: &mut ResponseParser, buf: &[u8]) -> Result<(usize, Progress), ()> {
    let before = parser.clone();
    let Ok((n, progress)) = parser.feed(buf) else {
        return Err(());
    };
    assert!(n <= buf.len(), "consumed {n} of {} bytes", buf.len());
    match progress {
        Progress::Done { status, close } => {
            assert!(n > 0 || !before.at_start(), "a response completed without consuming a head");
            // Any three digits may come (the recorder files odd ones as `http_other`), but
            // never an interim response: the final one follows it.
            assert!(!(100..200).contains(&status) || status == 101, "completed with interim status {status}");
            if status == 101 {
                assert!(close, "a 101 must end the connection");
            }
        }
        Progress::More => {
            // Everything consumable was consumed: the rest waits for bytes to come.
            let mut again = parser.clone();
            match again.feed(&buf[n..]) {
                Ok((0, Progress::More)) => {}
                other => panic!("feed stopped early: {n} of {} consumed, then again {other:?}", buf.len()),
            }
        }
    }
    Ok((n, progress))
}

/// After a complete response: ready for the next one on the same connection.
fn next_response(
    parser: &mut ResponseParser,
    config: &Config,
    events: &mut Vec<Event>,
    wire_len: usize,
    done: Progress,
) {
    let Progress::Done { status, close } = done else { unreachable!() };
    events.push(Event::Done { status, close, wire_len });
    parser.reset();
    assert!(parser.at_start());
    parser.expect_head(config.head(events.len()));
}

fn waiting(parser: &mut ResponseParser, unconsumed: usize) -> Event {
    let eof = parser.on_eof();
    if let Some(done) = eof {
        assert!(matches!(done, Progress::Done { close: true, .. }), "a body framed by the close: {done:?}");
    }
    Event::Waiting { unconsumed, eof }
}

/// The whole wire in one `feed` per response.
fn in_one_chunk(config: &Config, wire: &[u8]) -> Vec<Event> {
    let mut parser = config.parser();
    let mut events = Vec::new();
    // Where the current response starts.
    let mut start = 0;
    loop {
        match feed(&mut parser, &wire[start..]) {
            Err(()) => events.push(Event::Failed),
            Ok((n, Progress::More)) => events.push(waiting(&mut parser, wire.len() - start - n)),
            Ok((n, done)) => {
                next_response(&mut parser, config, &mut events, n, done);
                start += n;
                continue;
            }
        }
        return events;
    }
}

/// The wire in chunks, unconsumed bytes carried over as the engine does.
fn in_chunks(config: &Config, wire: &[u8]) -> Vec<Event> {
    let mut parser = config.parser();
    let mut events = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    // Bytes of the current response consumed so far.
    let mut consumed = 0;
    let mut at = 0;
    for len in config.chunks(wire.len()) {
        pending.extend_from_slice(&wire[at..at + len]);
        at += len;
        loop {
            let Ok((n, progress)) = feed(&mut parser, &pending) else {
                events.push(Event::Failed);
                return events;
            };
            pending.drain(..n);
            consumed += n;
            if progress == Progress::More {
                break;
            }
            next_response(&mut parser, config, &mut events, consumed, progress);
            consumed = 0;
            if pending.is_empty() {
                break;
            }
        }
    }
    // Everything fed: what the parser still holds back, and what a close would mean now.
    events.push(waiting(&mut parser, pending.len()));
    events
}

fuzz_target!(|data: &[u8]| {
    let Some((control, wire)) = data.split_first_chunk::<4>() else {
        return;
    };
    let config = Config {
        head_mask: control[0],
        max_body: MAX_BODIES[usize::from(control[1]) % MAX_BODIES.len()],
        seed: control[2],
        max_chunk: MAX_CHUNKS[usize::from(control[3]) % MAX_CHUNKS.len()],
    };
    let whole = in_one_chunk(&config, wire);
    let split = in_chunks(&config, wire);
    assert_eq!(whole, split, "one chunk and chunks of 1..={} bytes (seed {}) disagree", config.max_chunk, config.seed);
});
