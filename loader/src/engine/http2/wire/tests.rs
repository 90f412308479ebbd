use super::*;
use crate::engine::http2::hpack::encode_block;

fn flight(deadline_ns: u64) -> InFlight {
    InFlight {
        phase: 0,
        request: 0,
        intended_ns: 0,
        sent_ns: 0,
        deadline_ns,
        written: 0,
        retried: false,
        waited: false,
        free_ns: 0,
        taken_ns: 0,
    }
}

pub(in crate::engine::http2) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend([kind, flags]);
    f.extend(stream.to_be_bytes());
    f.extend(payload);
    f
}

/// A literal header without indexing, new name (HPACK §6.2.2).
pub(in crate::engine::http2) fn literal(name: &[u8], value: &[u8]) -> Vec<u8> {
    [&[0, name.len() as u8][..], name, &[value.len() as u8], value].concat()
}

fn wire(grpc: bool) -> Wire {
    let mut w = Wire::new(Limits::default(), grpc);
    w.out.clear();
    w
}

fn feed(w: &mut Wire, bytes: &[u8]) -> Vec<Event> {
    let mut events = Vec::new();
    w.feed(bytes, &mut events).unwrap();
    events
}

fn answered(e: &Event) -> (u16, Option<(u32, String)>) {
    match e {
        Event::Answered { status, grpc, .. } => (*status, grpc.clone()),
        other => panic!("not answered: {other:?}"),
    }
}

#[test]
fn the_preface_settings_and_window_open_the_connection() {
    let w = Wire::new(Limits::default(), false);
    assert!(w.out.starts_with(PREFACE));
    let rest = &w.out[PREFACE.len()..];
    assert_eq!(&rest[..9], &frame(SETTINGS, 0, 0, &[0; 12])[..9]);
    assert_eq!(&rest[9..21], &[0, 2, 0, 0, 0, 0, 0, 4, 0, 0x40, 0, 0]);
    assert_eq!(&rest[21..], &frame(WINDOW_UPDATE, 0, 0, &(CONN_WINDOW - 65_535).to_be_bytes())[..]);
}

#[test]
fn the_request_block_decodes_to_the_request() {
    let block = encode_block(
        "PUT",
        "http",
        "127.0.0.1:8080",
        "/items?id=7",
        [("content-type", &b"application/json"[..]), ("x-long", &[b'a'; 300][..])].into_iter(),
    );
    let mut got: Vec<(String, String)> = Vec::new();
    super::super::hpack::Decoder::default()
        .decode(&block, |n, v| {
            got.push((String::from_utf8(n.to_vec()).unwrap(), String::from_utf8(v.to_vec()).unwrap()))
        })
        .unwrap();
    assert_eq!(got[0], (":method".into(), "PUT".into()));
    assert_eq!(got[1], (":scheme".into(), "http".into()));
    assert_eq!(got[2], (":path".into(), "/items?id=7".into()));
    assert_eq!(got[3], (":authority".into(), "127.0.0.1:8080".into()));
    assert_eq!(got[4], ("content-type".into(), "application/json".into()));
    assert_eq!(got[5].1.len(), 300);
    let get = encode_block("GET", "https", "a", "/", std::iter::empty());
    assert_eq!(&get[..3], &[0x82, 0x87, 0x84]);
}

#[test]
fn streams_answer_in_any_order_and_frames_may_be_cut_anywhere() {
    let mut w = wire(false);
    w.open(flight(10), &[0x82], &Bytes::new());
    w.open(flight(10), &[0x82], &Bytes::new());
    assert_eq!(w.active(), 2);
    assert_eq!(&w.out[..9], &frame(HEADERS, END_STREAM | END_HEADERS, 1, &[0x82])[..9]);
    // Stream 3 answered 404 (static :status 404 is index 13), then stream 1 200 with a body.
    let wire_bytes = [
        frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 50]),
        frame(HEADERS, END_STREAM | END_HEADERS, 3, &[0x8d]),
        frame(HEADERS, END_HEADERS, 1, &[0x88]),
        frame(DATA, 0, 1, b"hello"),
        frame(DATA, END_STREAM, 1, b" world"),
    ]
    .concat();
    for step in [1, 2, 7, 9, 10, wire_bytes.len()] {
        let mut w2 = wire(false);
        w2.open(flight(10), &[0x82], &Bytes::new());
        w2.open(flight(10), &[0x82], &Bytes::new());
        let mut events = Vec::new();
        for piece in wire_bytes.chunks(step) {
            w2.feed(piece, &mut events).unwrap();
        }
        assert_eq!(events.len(), 2, "step {step}");
        assert_eq!(answered(&events[0]).0, 404);
        assert_eq!(answered(&events[1]).0, 200);
        assert_eq!(w2.active(), 0);
        assert!(!w2.busy_reading());
        assert_eq!(w2.free(100), 50, "the server's SETTINGS_MAX_CONCURRENT_STREAMS");
        // The SETTINGS was acknowledged.
        assert!(w2.out.windows(9).any(|f| f == &frame(SETTINGS, ACK, 0, &[])[..]));
    }
    let events = feed(&mut w, &wire_bytes);
    assert_eq!(events.len(), 2);
}

#[test]
fn each_ended_stream_says_where_on_the_connection_its_last_frame_ended() {
    let answers = [
        frame(SETTINGS, 0, 0, &[]),
        frame(HEADERS, END_STREAM | END_HEADERS, 3, &[0x8d]),
        frame(HEADERS, END_HEADERS, 1, &[0x88]),
        frame(DATA, END_STREAM, 1, b"hello"),
    ];
    let sizes: Vec<u64> = answers.iter().map(|f| f.len() as u64).collect();
    let wire_bytes = answers.concat();
    // Whole, and cut so that the second answer's last frame ends in a later chunk.
    for step in [wire_bytes.len(), 20, 7] {
        let mut w = wire(false);
        w.open(flight(10), &[0x82], &Bytes::new());
        w.open(flight(10), &[0x82], &Bytes::new());
        let mut ends = Vec::new();
        for piece in wire_bytes.chunks(step) {
            let mut events = Vec::new();
            w.feed(piece, &mut events).unwrap();
            assert_eq!(w.ends.len(), events.len(), "step {step}: an end per event");
            ends.extend_from_slice(&w.ends);
        }
        assert_eq!(w.fed(), wire_bytes.len() as u64);
        assert_eq!(ends, [sizes[0] + sizes[1], sizes.iter().sum::<u64>()], "step {step}");
    }
}

#[test]
fn grpc_status_comes_from_trailers_or_a_trailers_only_head() {
    let mut w = wire(true);
    for _ in 0..3 {
        w.open(flight(10), &[0x83], &Bytes::from_static(&[0, 0, 0, 0, 0]));
    }
    let trailers_only: Vec<u8> =
        [vec![0x88], literal(b"grpc-status", b"14"), literal(b"grpc-message", b"down")].concat();
    let events = feed(
        &mut w,
        &[
            frame(HEADERS, END_STREAM | END_HEADERS, 1, &trailers_only),
            frame(HEADERS, END_HEADERS, 3, &[0x88]),
            frame(DATA, 0, 3, &[0; 5]),
            frame(HEADERS, END_STREAM | END_HEADERS, 3, &literal(b"grpc-status", b"0")),
            frame(HEADERS, END_HEADERS, 5, &[0x88]),
            frame(DATA, END_STREAM, 5, &[0; 5]),
        ]
        .concat(),
    );
    assert_eq!(answered(&events[0]), (200, Some((14, "down".into()))));
    assert_eq!(answered(&events[1]), (200, Some((0, String::new()))));
    assert_eq!(answered(&events[2]), (200, Some((2, "no grpc-status in the answer".into()))));
}

#[test]
fn refusals_and_a_graceful_goaway_are_unprocessed_other_resets_are_named() {
    let mut w = wire(false);
    for _ in 0..4 {
        w.open(flight(10), &[0x82], &Bytes::new());
    }
    let goaway = [3u32.to_be_bytes(), NO_ERROR.to_be_bytes()].concat();
    let events = feed(
        &mut w,
        &[
            frame(RST_STREAM, 0, 1, &REFUSED_STREAM.to_be_bytes()),
            frame(RST_STREAM, 0, 3, &2u32.to_be_bytes()),
            frame(GOAWAY, 0, 0, &goaway),
        ]
        .concat(),
    );
    assert!(matches!(events[0], Event::Unprocessed { .. }));
    match &events[1] {
        Event::Failed { class, message, .. } => {
            assert_eq!(*class, ErrorClass::StreamReset);
            assert_eq!(message, "the server reset the stream (RST_STREAM INTERNAL_ERROR)");
        }
        other => panic!("{other:?}"),
    }
    // Streams 5 and 7 are above the GOAWAY's last stream (3): not processed.
    assert_eq!(events.len(), 4);
    assert!(events[2..].iter().all(|e| matches!(e, Event::Unprocessed { .. })));
    assert!(w.retiring() && w.free(100) == 0);
    // A GOAWAY with an error fails what it cuts off, named.
    let mut w = wire(false);
    w.open(flight(10), &[0x82], &Bytes::new());
    let events = feed(&mut w, &frame(GOAWAY, 0, 0, &[0, 0, 0, 0, 0, 0, 0, 11]));
    match &events[0] {
        Event::Failed { class, message, .. } => {
            assert_eq!(*class, ErrorClass::ConnectionError);
            assert!(message.contains("ENHANCE_YOUR_CALM"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn bodies_wait_for_window_and_credit_is_returned() {
    let mut w = wire(false);
    // The server allows 10 bytes a stream.
    feed(&mut w, &frame(SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 10]));
    w.out.clear();
    w.open(flight(10), &[0x83], &Bytes::from(vec![7u8; 25]));
    // HEADERS, then one DATA of 10 bytes.
    assert_eq!(w.out.len(), 9 + 1 + 9 + 10);
    assert!(w.busy_reading(), "a body waits for window");
    w.out.clear();
    feed(&mut w, &frame(WINDOW_UPDATE, 0, 1, &20u32.to_be_bytes()));
    // 15 bytes left, all allowed now: END_STREAM on the last.
    assert_eq!(w.out.len(), 9 + 15);
    assert_eq!(w.out[4], END_STREAM);
    // A large answer returns stream credit once half the window is used.
    w.out.clear();
    feed(&mut w, &frame(HEADERS, END_HEADERS, 1, &[0x88]));
    let chunk = vec![0u8; MAX_FRAME];
    for _ in 0..(STREAM_WINDOW as usize / 2 / MAX_FRAME) {
        feed(&mut w, &frame(DATA, 0, 1, &chunk));
    }
    assert!(w.out.windows(9).any(|f| f == &frame(WINDOW_UPDATE, 0, 1, &[0; 4])[..9]));
    assert!(w.busy_reading(), "a large body is read as it comes");
    // An answer whose head came and whose body has not is read as it comes; a frame cut
    // in two is too; a stream that ended is not.
    let mut w = wire(false);
    w.open(flight(10), &[0x82], &Bytes::new());
    feed(&mut w, &frame(HEADERS, END_HEADERS, 1, &[0x88]));
    assert!(w.busy_reading(), "a head without its body");
    assert_eq!(feed(&mut w, &frame(DATA, END_STREAM, 1, &[0; 10])).len(), 1);
    assert!(!w.busy_reading());
    w.open(flight(10), &[0x82], &Bytes::new());
    feed(&mut w, &frame(DATA, 0, 3, &[0; 10])[..12]);
    assert!(w.busy_reading(), "a frame cut in two");
}

#[test]
fn deadlines_cancel_their_streams() {
    let mut w = wire(false);
    w.open(flight(5), &[0x82], &Bytes::new());
    w.open(flight(9), &[0x82], &Bytes::new());
    assert_eq!(w.next_deadline(), 5);
    w.out.clear();
    let mut expired = Vec::new();
    w.expire(6, &mut expired);
    assert_eq!(expired.len(), 1);
    assert_eq!(w.out, frame(RST_STREAM, 0, 1, &CANCEL.to_be_bytes()));
    // Its late answer still goes through HPACK and changes nothing.
    let events = feed(&mut w, &frame(HEADERS, END_STREAM | END_HEADERS, 1, &[0x88]));
    assert!(events.is_empty());
    assert_eq!(w.active(), 1);
}

#[test]
fn hostile_frames_are_connection_errors_not_panics() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (frame(PUSH_PROMISE, END_HEADERS, 1, &[0, 0, 0, 2]), "push"),
        (frame(PING, 0, 0, &[1, 2, 3]), "PING"),
        (frame(SETTINGS, 0, 0, &[0, 5, 0, 0, 0, 1]), "MAX_FRAME_SIZE"),
        (frame(HEADERS, END_HEADERS, 1, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff]), "HPACK"),
        (frame(HEADERS, PADDED | END_HEADERS, 1, &[9, 0x88]), "padding"),
        (frame(DATA, 0, 0, b"x"), "stream 0"),
        ([frame(HEADERS, 0, 1, &[0x88]), frame(DATA, 0, 1, b"x")].concat(), "interrupted"),
        (vec![0x01, 0, 0, 0, 0, 0, 0, 0, 1], "frame of 65536 bytes"),
        (frame(WINDOW_UPDATE, 0, 0, &[0x7f, 0xff, 0xff, 0xff]), "2^31-1"),
    ];
    for (bytes, needle) in cases {
        let mut w = wire(false);
        w.open(flight(10), &[0x82], &Bytes::new());
        let mut events = Vec::new();
        let err = w.feed(&bytes, &mut events).unwrap_err();
        assert!(err.message.contains(needle), "{needle}: {}", err.message);
    }
    // A head past --max-header.
    let mut w = Wire::new(Limits { max_head: 8, max_body: 1 }, false);
    w.open(flight(10), &[0x82], &Bytes::new());
    let err = w.feed(&frame(HEADERS, END_HEADERS, 1, &literal(b"x", b"0123456789")), &mut Vec::new()).unwrap_err();
    assert!(err.message.contains("--max-header"), "{}", err.message);
    // A body past --max-body fails its stream only.
    let mut w = Wire::new(Limits { max_head: 1024, max_body: 4 }, false);
    w.open(flight(10), &[0x82], &Bytes::new());
    let events = feed(&mut w, &[frame(HEADERS, END_HEADERS, 1, &[0x88]), frame(DATA, 0, 1, b"0123456789")].concat());
    assert!(matches!(&events[0], Event::Failed { class: ErrorClass::Protocol, .. }));
}

#[test]
fn pings_are_answered_and_interim_heads_skipped() {
    let mut w = wire(false);
    w.open(flight(10), &[0x82], &Bytes::new());
    w.out.clear();
    let events = feed(
        &mut w,
        &[
            frame(PING, 0, 0, &[1; 8]),
            frame(HEADERS, END_HEADERS, 1, &[0x08, 3, b'1', b'0', b'3']),
            frame(HEADERS, END_STREAM | END_HEADERS, 1, &[0x89]),
        ]
        .concat(),
    );
    assert_eq!(w.out, frame(PING, ACK, 0, &[1; 8]));
    assert_eq!(answered(&events[0]).0, 204);
}
