//! The fuzz target `http2_response`'s way in: one GET on a fresh HTTP/2 connection whose
//! server sends arbitrary bytes, read and classified as a run reads it.

use bytes::Bytes;

use super::exchange;

/// Whether the client's bytes (preface, then frames) hold a complete HEADERS frame.
fn has_headers(bytes: &[u8]) -> bool {
    let mut at = 24; // the connection preface
    while at + 9 <= bytes.len() {
        let len = usize::from(bytes[at]) << 16 | usize::from(bytes[at + 1]) << 8 | usize::from(bytes[at + 2]);
        if bytes[at + 3] == 1 && at + 9 + len <= bytes.len() {
            return true;
        }
        at += 9 + len;
    }
    false
}

/// The answer to one GET on a fresh HTTP/2 connection whose server sends `wire` (and then
/// closes), read and classified as a run reads it — for the fuzz target `http2_response`.
/// Bounded: 50 ms of runtime at most. Returns what it came to, as text.
pub fn answer_from_wire(wire: &[u8], max_body: u64, grpc: bool) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
        return "no runtime".into();
    };
    let wire = wire.to_vec();
    runtime.block_on(async move {
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let peer = tokio::spawn(async move {
            // The server's answer comes after the request: wait for the client's preface and
            // frames up to its first HEADERS (stream 1), then send the wire and close.
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                match server.read(&mut buf).await {
                    Ok(n) if n > 0 => seen.extend_from_slice(&buf[..n]),
                    _ => break,
                }
                if has_headers(&seen) {
                    break;
                }
            }
            let _ = server.write_all(&wire).await;
            let _ = server.shutdown().await;
            // Read what the client sends, so its writes never block.
            while matches!(server.read(&mut buf).await, Ok(n) if n > 0) {}
        });
        let run = async {
            let (mut send, connection) = match h2::client::Builder::new().handshake::<_, Bytes>(client).await {
                Ok(pair) => pair,
                Err(e) => return format!("handshake: {e}"),
            };
            tokio::spawn(async move {
                let _ = connection.await;
            });
            let request = http::Request::get("http://fuzz/").body(()).expect("a static request");
            match send.send_request(request, true) {
                Ok((response, _)) => exchange::outcome_of(response, max_body, grpc).await,
                Err(e) => format!("not sent: {e}"),
            }
        };
        let out = tokio::time::timeout(std::time::Duration::from_millis(50), run)
            .await
            .unwrap_or_else(|_| "no answer within 50 ms".into());
        peer.abort();
        out
    })
}

#[cfg(test)]
mod tests {
    use super::answer_from_wire;
    use crate::engine::http2::wire::tests::{frame, literal};

    #[test]
    fn answers_statuses_and_refusals_are_read_as_a_run_reads_them() {
        let settings = frame(4, 0, 0, &[]);
        let wire = |frames: &[Vec<u8>]| [&settings[..], &frames.concat()].concat();
        // :status 200 (static index 8), END_STREAM | END_HEADERS.
        assert_eq!(answer_from_wire(&wire(&[frame(1, 5, 1, &[0x88])]), u64::MAX, false), "status 200");
        let body = [frame(1, 4, 1, &[0x88]), frame(0, 1, 1, b"0123456789")];
        assert_eq!(answer_from_wire(&wire(&body), 4, false), "protocol: response body larger than --max-body");
        let trailers_only =
            [0x88].iter().copied().chain(literal(b"grpc-status", b"14")).chain(literal(b"grpc-message", b"down"));
        let trailers_only: Vec<u8> = trailers_only.collect();
        assert_eq!(
            answer_from_wire(&wire(&[frame(1, 5, 1, &trailers_only)]), u64::MAX, true),
            "status 200 grpc 14 down"
        );
        let with_trailers =
            [frame(1, 4, 1, &[0x88]), frame(0, 0, 1, &[0; 5]), frame(1, 5, 1, &literal(b"grpc-status", b"0"))];
        assert_eq!(answer_from_wire(&wire(&with_trailers), u64::MAX, true), "status 200 grpc 0 ");
        // RST_STREAM REFUSED_STREAM (7): not processed, sent again; CANCEL (8): a reset.
        assert_eq!(
            answer_from_wire(&wire(&[frame(3, 0, 1, &7u32.to_be_bytes())]), u64::MAX, false),
            "not processed: sent again"
        );
        let reset = answer_from_wire(&wire(&[frame(3, 0, 1, &8u32.to_be_bytes())]), u64::MAX, false);
        assert!(reset.starts_with("stream_reset: "), "{reset}");
        // GOAWAY, last stream 0, NO_ERROR: stream 1 was not processed.
        let goaway = [0u32.to_be_bytes(), 0u32.to_be_bytes()].concat();
        assert_eq!(answer_from_wire(&wire(&[frame(7, 0, 0, &goaway)]), u64::MAX, false), "not processed: sent again");
    }
}
