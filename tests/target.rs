//! `loader target` end to end: the real binary on 127.0.0.1, a plain std HTTP/1.1 client.
//!
//! Every wait is bounded; every child process is killed when its test ends, pass or fail.

use loader_tests::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::{PATIENCE, Target};

/// A plain client of the target's, for these tests.
trait Connect {
    fn connect(&self) -> Client;
}

impl Connect for Target {
    fn connect(&self) -> Client {
        let stream = TcpStream::connect(self.addr).expect("connecting to the target");
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        stream.set_write_timeout(Some(PATIENCE)).unwrap();
        Client { reader: BufReader::new(stream) }
    }
}

/// One keep-alive HTTP/1.1 connection.
struct Client {
    reader: BufReader<TcpStream>,
}

struct Response {
    status: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

impl Client {
    fn send(&mut self, method: &str, path: &str, body: &str) {
        let request =
            format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        self.reader.get_mut().write_all(request.as_bytes()).expect("sending a request");
    }

    fn receive(&mut self) -> Response {
        let mut status = String::new();
        self.reader.read_line(&mut status).expect("reading the status line");
        assert!(!status.is_empty(), "connection closed before a response");
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).expect("reading a header");
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').expect("a header line");
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
        let length: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .expect("a content-length framed response")
            .1
            .parse()
            .unwrap();
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).expect("reading the body");
        Response { status: status.trim_end().to_owned(), headers, body: String::from_utf8(body).unwrap() }
    }

    fn get(&mut self) -> Response {
        self.send("GET", "/", "");
        self.receive()
    }
}

/// Run the binary to completion (bounded) and return its output.
fn run_to_end(args: &[&str]) -> Output {
    let mut child = Command::new(common::loader_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("loader {args:?} did not exit within 10 s");
        }
        thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

fn assert_ok_json(res: &Response) {
    assert_eq!(res.status, "HTTP/1.1 200 OK");
    assert_eq!(res.header("content-type"), Some("application/json"));
    assert_eq!(res.body, r#"{"ok":true,"service":"loader-target"}"#);
    assert_ne!(res.header("connection"), Some("close"));
}

#[test]
fn any_request_gets_the_json_body_on_a_kept_alive_connection() {
    let target = Target::start(&[]);
    // The listening line shows the bound address, not the port 0 it was asked for.
    assert_eq!(target.addr.ip().to_string(), "127.0.0.1");
    assert_ne!(target.addr.port(), 0);
    let mut client = target.connect();
    client.send("GET", "/", "");
    assert_ok_json(&client.receive());
    // Same connection, another method, a path and a body to read and discard.
    client.send("POST", "/any/path?q=1", "some request body");
    assert_ok_json(&client.receive());
    client.send("DELETE", "/x", "");
    assert_ok_json(&client.receive());
}

#[test]
fn delay_holds_each_response() {
    let target = Target::start(&["--delay", "200ms"]);
    let mut client = target.connect();
    for _ in 0..2 {
        let sent = Instant::now();
        assert_ok_json(&client.get());
        let took = sent.elapsed();
        assert!(took >= Duration::from_millis(200), "answered after {took:?}, delay is 200ms");
        assert!(took < Duration::from_secs(5), "answered after {took:?}");
    }
}

#[test]
fn workers_queue_requests_beyond_their_number() {
    let target = Target::start(&["--workers", "1", "--delay", "50ms"]);
    let mut clients: Vec<Client> = (0..4).map(|_| target.connect()).collect();
    let sent = Instant::now();
    for client in &mut clients {
        client.send("GET", "/", "");
    }
    for client in &mut clients {
        assert_ok_json(&client.receive());
    }
    let took = sent.elapsed();
    // One worker, 50 ms each: capacity 20/s, so 4 requests need at least 200 ms.
    assert!(took >= Duration::from_millis(200), "4 requests took {took:?}");
    assert!(took < Duration::from_secs(5), "4 requests took {took:?}");
}

/// With `--workers`, `/metrics` tells the pool — busy, its size, waiting — at once, without
/// a worker: 2 workers held 1 s each by 3 requests read as 2 busy and 1 waiting.
#[test]
fn workers_tell_their_pool_at_metrics_without_taking_one() {
    let target = Target::start(&["--workers", "2", "--delay", "1s"]);
    let mut clients: Vec<Client> = (0..3).map(|_| target.connect()).collect();
    for client in &mut clients {
        client.send("GET", "/", "");
    }
    let gauge = |page: &str, name: &str| -> u64 {
        page.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in:\n{page}"))
    };
    let mut scrape = target.connect();
    // The three are read and queued within a moment; bounded at 20 tries 25 ms apart.
    let mut page = String::new();
    for _ in 0..20 {
        scrape.send("GET", "/metrics", "");
        let asked = Instant::now();
        let res = scrape.receive();
        assert!(asked.elapsed() < Duration::from_millis(500), "the page waited for a worker");
        assert!(res.status.starts_with("HTTP/1.1 200"), "{}", res.status);
        assert!(res.header("content-type").is_some_and(|t| t.starts_with("text/plain")), "{:?}", res.headers);
        page = res.body;
        if gauge(&page, "loader_target_waiting_requests") == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert_eq!(gauge(&page, "loader_target_workers"), 2, "{page}");
    assert_eq!(gauge(&page, "loader_target_busy_workers"), 2, "{page}");
    assert_eq!(gauge(&page, "loader_target_waiting_requests"), 1, "{page}");
    for client in &mut clients {
        assert_ok_json(&client.receive());
    }
    scrape.send("GET", "/metrics", "");
    let idle = scrape.receive().body;
    assert_eq!((gauge(&idle, "loader_target_busy_workers"), gauge(&idle, "loader_target_waiting_requests")), (0, 0));
    // Without --workers there is no pool to tell: /metrics is the endpoint's own answer.
    let plain = Target::start(&[]);
    let mut client = plain.connect();
    client.send("GET", "/metrics", "");
    assert_ok_json(&client.receive());
}

#[test]
fn stall_holds_responses_until_the_window_ends() {
    // Windows [2s, 2.5s), [4s, 4.5s), … from the target's start, which lies between
    // `spawned` and `listening`.
    let target = Target::start(&["--stall", "2s:500ms"]);
    let mut first = target.connect();
    let mut second = target.connect();

    // Before the first window: answered at once.
    thread::sleep(Duration::from_millis(1000).saturating_sub(target.listening.elapsed()));
    let sent = Instant::now();
    assert_ok_json(&first.get());
    assert!(sent.elapsed() < Duration::from_millis(400), "no stall yet, took {:?}", sent.elapsed());

    // Inside the first window (2.05 s after the line, so inside as long as start-up took
    // under 450 ms), on two connections: both held until the window's end.
    let startup = target.listening - target.spawned;
    assert!(startup < Duration::from_millis(400), "start-up took {startup:?}: too slow to aim");
    thread::sleep((target.listening + Duration::from_millis(2050)).saturating_duration_since(Instant::now()));
    first.send("GET", "/", "");
    second.send("GET", "/", "");
    for client in [&mut first, &mut second] {
        assert_ok_json(&client.receive());
        let answered = Instant::now();
        assert!(
            answered >= target.spawned + Duration::from_millis(2500),
            "answered {:?} after spawn, inside the stall window",
            answered - target.spawned
        );
        assert!(
            answered < target.listening + Duration::from_millis(3000),
            "held {:?} past the window's end",
            answered - (target.listening + Duration::from_millis(2500))
        );
    }

    // After the window: answered at once again.
    let sent = Instant::now();
    assert_ok_json(&first.get());
    assert!(sent.elapsed() < Duration::from_millis(400), "window over, took {:?}", sent.elapsed());
}

#[test]
fn sigterm_stops_it_cleanly() {
    let mut target = Target::start(&[]);
    let mut idle = target.connect();
    assert_ok_json(&idle.get());
    // `idle` stays open: a kept-alive connection must not hold the exit up.
    target.signal(libc::SIGTERM);
    let status = target.wait_exit(Duration::from_secs(2)).expect("still running 2 s after SIGTERM");
    assert!(status.success(), "exit status {status}");
}

#[test]
fn sigint_stops_it_cleanly() {
    let mut target = Target::start(&["--threads", "2"]);
    assert_ok_json(&target.connect().get());
    target.signal(libc::SIGINT);
    let status = target.wait_exit(Duration::from_secs(2)).expect("still running 2 s after SIGINT");
    assert!(status.success(), "exit status {status}");
}

#[test]
fn bad_flags_fail_with_one_line_naming_the_flag() {
    let out = run_to_end(&["target", "--listen", "127.0.0.1:0", "--stall", "abc"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr, "loader: error: --stall: expected EVERY:FOR like 10s:1s, got \"abc\"\n");
    assert!(out.stdout.is_empty());

    let out = run_to_end(&["target", "--listen", "127.0.0.1:0", "--workers", "0"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr).unwrap().contains("--workers: must be at least 1"));
}

#[test]
fn taken_address_fails_naming_it() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = run_to_end(&["target", "--listen", &addr]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.starts_with(&format!("loader: error: cannot listen on {addr}: ")), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// `--sink`, the calibration responder: the built-in target's answer to each request head, on
/// a kept-alive connection, for pipelined heads and for a head split across writes; a load run
/// against it gets every answer; SIGTERM stops it.
#[test]
fn the_sink_answers_every_request_head() {
    let mut sink = Target::start(&["--sink"]);
    let mut client = sink.connect();
    assert_ok_json(&client.get());
    // Three heads in one write: three answers, in order.
    let head = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    client.reader.get_mut().write_all(head.repeat(3).as_bytes()).unwrap();
    for _ in 0..3 {
        assert_ok_json(&client.receive());
    }
    // One head split inside its terminator, over two writes.
    let (a, b) = head.split_at(head.len() - 3);
    client.reader.get_mut().write_all(a.as_bytes()).unwrap();
    thread::sleep(Duration::from_millis(50));
    client.reader.get_mut().write_all(b.as_bytes()).unwrap();
    assert_ok_json(&client.receive());
    // The loader against it: every request answered.
    let (url, dir) = (sink.url(), common::out_dir("sink-run"));
    let out = run_to_end(&[
        "run",
        "--url",
        &url,
        "--rate",
        "2000",
        "--duration",
        "2s",
        "--connections",
        "16",
        "--no-probes",
        "--plain",
        "--out",
        &dir.display().to_string(),
    ]);
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("summary.json")).expect("summary.json")).unwrap();
    let main = s["phases"].as_array().unwrap().iter().find(|p| p["kind"] != "warmup").unwrap();
    assert_eq!(main["ok"], main["sent"], "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(main["sent"], 4000, "{main}");
    sink.signal(libc::SIGTERM);
    let status = sink.wait_exit(Duration::from_secs(2)).expect("still running 2 s after SIGTERM");
    assert!(status.success(), "exit status {status}");
}
