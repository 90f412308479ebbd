//! Fuzz the HTTP/2 engine's reading of answers: whatever a server sends on a fresh
//! connection (its SETTINGS, HEADERS, DATA, trailers, RST_STREAM, GOAWAY, WINDOW_UPDATE, …
//! or garbage) goes to the engine's frames (`http2::wire`, the one HTTP/2 engine, h2c and
//! over TLS alike) with three streams open, fed in pieces: no panic, every stream ends once
//! at most, and the reading and classification of each (status, body with flow-control
//! credit returned, gRPC status from headers or trailers, error classes) holds.
//!
//! Input: 1 control byte, then the server's bytes.
//!
//! - byte 0: bit 0 — read the answers as gRPC calls; bits 1–2 — the body limit, one of
//!   [`MAX_BODIES`]; bits 3–7 — the piece size, 1 + that value × 7 bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;

/// Body limits to choose from: small ones reach the limit check with short inputs.
const MAX_BODIES: [u64; 4] = [0, 8, 1 << 16, u64::MAX];

fuzz_target!(|data: &[u8]| {
    let Some((&control, wire)) = data.split_first() else { return };
    let grpc = control & 1 == 1;
    let max_body = MAX_BODIES[usize::from((control >> 1) & 3)];
    let piece = 1 + usize::from(control >> 3) * 7;
    // Its invariants are asserted inside; the text is for reading a crash's input back.
    std::hint::black_box(loader::engine::http2::outcome_of_wire(wire, max_body, grpc, piece));
});
