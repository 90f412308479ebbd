//! Root tests of the probes, one per kernel program (a test and its program share a name).
//!
//! Each probe is fired deliberately from this process: it connects to listeners of its own,
//! so the expected counts are exact. This file is its own test binary, hence its own process
//! (tgid); its tests run one at a time (`SERIAL`), so nothing else in the process connects
//! while a test counts. A child process connecting to the same listener must not be counted:
//! that proves the in-kernel tgid filter.
//!
//! Traffic goes only to 127.0.0.0/8, or inside a network namespace a test creates and
//! deletes (also on failure, by a drop guard). Every wait is bounded.
//!
//! Needs root (or CAP_BPF + CAP_PERFMON) and a loader built with its eBPF object. Without
//! either the test says why and passes, except under CI (`CI=true`), which runs as root,
//! builds with `LOADER_EBPF=require` and must never skip it.

use loader_tests::common;

use std::{
    collections::BTreeMap,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use loader::probes::{LatencyHistogram, Probes, probe};
use support::{Netns, abort_on_close, start_probes, wait_until};

/// Connections this process opens.
const OWN_CONNECTIONS: u64 = 5;
/// Connections a child process opens (must not be counted).
const FOREIGN_CONNECTIONS: usize = 3;

#[test]
fn tcp_states() {
    let Some((_serial, probes)) = start_probes("tcp_states") else { return };

    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local_addr");
    assert_eq!(
        probes.tcp_states().expect("read counts"),
        BTreeMap::new(),
        "binding and listening are not connects: nothing may be counted yet"
    );

    // Another process connects and disconnects: not ours, not counted.
    for _ in 0..FOREIGN_CONNECTIONS {
        connect_from_child(addr);
        let (accepted, _) = listener.accept().expect("accept the child's connection");
        drop(accepted);
    }
    // Let the child sockets finish closing (their last transitions may run in softirq on
    // behalf of this very process): still nothing may be counted.
    thread::sleep(Duration::from_millis(200));
    assert_eq!(
        probes.tcp_states().expect("read counts"),
        BTreeMap::new(),
        "connections of another process must not be counted"
    );

    // This process connects: counted, exactly. The client closes first (active close).
    for _ in 0..OWN_CONNECTIONS {
        let client = TcpStream::connect(addr).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        drop(client);
        drop(server);
    }

    let states = wait_for_closes(&probes, OWN_CONNECTIONS);
    eprintln!("tcp_states: {states:?}");
    let count = |key: &str| states.get(key).copied().unwrap_or(0);

    assert_eq!(count("CLOSE->SYN_SENT"), OWN_CONNECTIONS, "one connect() per own connection");
    assert_eq!(count("SYN_SENT->ESTABLISHED"), OWN_CONNECTIONS, "every own connect succeeded");
    assert_eq!(count("ESTABLISHED->FIN_WAIT1"), OWN_CONNECTIONS, "the client closed first");
    assert_eq!(closes(&states), OWN_CONNECTIONS, "every own socket ended (and left LOADER_SOCKS)");
    for key in states.keys() {
        assert!(
            !key.contains("LISTEN") && !key.contains("SYN_RECV"),
            "server-side sockets are not the loader's connections: {key}"
        );
    }
    assert_nothing_lost(&probes);

    // Control: the same program pointed at a child's tgid counts that child's connect, and
    // the probes following this process do not. So the exclusion above is the filter at
    // work, not a program blind to other processes.
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(format!("read -r _ && exec 3<>/dev/tcp/{}/{}", addr.ip(), addr.port()))
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn bash");
    let child_probes = Probes::start(child.id()).expect("probes for the child's tgid");
    child.stdin.take().expect("stdin").write_all(b"go\n").expect("release the child");
    let (accepted, _) = listener.accept().expect("accept the child's connection");
    assert!(child.wait().expect("wait for bash").success(), "bash could not connect");
    drop(accepted);
    let child_states = wait_for_closes(&child_probes, 1);
    eprintln!("tcp_states of the child: {child_states:?}");
    assert_eq!(child_states.get("CLOSE->SYN_SENT"), Some(&1));
    assert_eq!(child_states.get("SYN_SENT->ESTABLISHED"), Some(&1));
    let own = probes.tcp_states().expect("read counts");
    assert_eq!(own.get("CLOSE->SYN_SENT"), Some(&OWN_CONNECTIONS), "own counts unchanged: {own:?}");
}

/// No event lost for a reason of ours (map full, read failure…). `recursion_misses` — a
/// tracepoint that fired while another BPF program ran on the same CPU, e.g. a wake-up
/// from an interrupt during `tcp_states` — are real losses the readings report, but they
/// are the kernel's timing, not a bug, and cannot be held at zero here.
fn assert_nothing_lost(probes: &Probes) {
    let by_reason = probes.lost_by_reason().expect("read lost");
    eprintln!("lost: {by_reason:?}");
    let ours: u64 = by_reason.iter().filter(|(reason, _)| **reason != "recursion_misses").map(|(_, n)| n).sum();
    assert_eq!(ours, 0, "{by_reason:?}");
    assert_ne!(probes.lost(), u64::MAX, "the lost counters must be readable");
}

/// `bash -c 'exec 3<>/dev/tcp/HOST/PORT'`: a connect() from another tgid, fully established
/// before bash exits.
fn connect_from_child(addr: SocketAddr) {
    let status = Command::new("bash")
        .arg("-c")
        .arg(format!("exec 3<>/dev/tcp/{}/{}", addr.ip(), addr.port()))
        .status()
        .expect("run bash");
    assert!(status.success(), "bash could not connect to {addr}: {status}");
}

/// Transitions into CLOSE, i.e. sockets whose lifetime ended.
fn closes(states: &BTreeMap<String, u64>) -> u64 {
    states.iter().filter(|(key, _)| key.ends_with("->CLOSE")).map(|(_, n)| n).sum()
}

/// The counts once `expected` sockets have reached CLOSE (the last FIN/ACK exchange on
/// loopback may still be in flight after close() returns), or after 5 s.
fn wait_for_closes(probes: &Probes, expected: u64) -> BTreeMap<String, u64> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let states = probes.tcp_states().expect("read counts");
        if closes(&states) >= expected || Instant::now() > deadline {
            return states;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Connects to a listener of this process: exactly `CONNECTS` completed connects in the
/// histogram, each well under the loopback bound; active closes enter TIME_WAIT.
#[test]
fn connect_latency() {
    const CONNECTS: u64 = 20;
    let Some((_serial, probes)) = start_probes("connect_latency") else { return };
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("local_addr");
    for _ in 0..CONNECTS {
        let client = TcpStream::connect(addr).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        drop(client);
        drop(server);
    }
    wait_for_closes(&probes, CONNECTS);
    let readings = probes.readings().expect("readings");
    eprintln!("connect_ms: {:?}\nhistogram: {:?}", readings.connect_ms, readings.connect_histogram);
    assert_eq!(readings.connect_ms.count, CONNECTS);
    assert_eq!(readings.connect_ms.failed, 0);
    let (p50, p99, max) =
        (readings.connect_ms.p50.unwrap(), readings.connect_ms.p99.unwrap(), readings.connect_ms.max.unwrap());
    assert!(0.0 < p50 && p50 <= p99 && p99 <= max * 1.125, "p50 {p50} p99 {p99} max {max}");
    assert!(max < 100.0, "a loopback connect took {max} ms");
    assert_eq!(readings.availability.get(probe::CONNECT_LATENCY).map(String::as_str), Some("ok"));
    assert_nothing_lost(&probes);
}

/// A connect to a closed loopback port: refused by a RST, so one failed connect, no
/// ESTABLISHED, and one reset received (the RST answering the SYN).
#[test]
fn connect_refused() {
    let Some((_serial, probes)) = start_probes("connect_refused") else { return };
    // A port nobody listens on: bind one, then close it.
    let addr = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("bind");
    let err = TcpStream::connect(addr).expect_err("connect to a closed port");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
    let states = wait_for_closes(&probes, 1);
    let readings = probes.readings().expect("readings");
    eprintln!("tcp_states: {states:?}\nconnect_ms: {:?}\nresets: {:?}", readings.connect_ms, readings.resets);
    assert_eq!(readings.connect_ms.failed, 1);
    assert_eq!(readings.connect_ms.count, 0);
    assert_eq!(states.get("SYN_SENT->ESTABLISHED"), None);
    assert_eq!(readings.resets.received, 1, "the RST that refused the SYN");
    assert_eq!(readings.resets.sent, 0);
}

/// Active closes from this process: each leaves a TIME_WAIT socket (FIN_WAIT2 → CLOSE),
/// live in sockstat and holding an ephemeral port.
#[test]
fn time_wait() {
    const CLOSES: u64 = 30;
    let Some((_serial, mut probes)) = start_probes("time_wait") else { return };
    probes.sample(0, 1);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("local_addr");
    for _ in 0..CLOSES {
        let client = TcpStream::connect(addr).expect("connect");
        let (mut server, _) = listener.accept().expect("accept");
        drop(client);
        // The server reads the FIN, then closes: the client (active closer) gets TIME_WAIT.
        server.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout");
        let n = server.read(&mut [0u8; 16]).expect("read EOF");
        assert_eq!(n, 0);
        drop(server);
    }
    let states = wait_until(Duration::from_secs(5), || {
        let states = probes.tcp_states().expect("read");
        let entered = states.get("FIN_WAIT2->CLOSE").copied().unwrap_or(0);
        (entered >= CLOSES).then_some(states)
    })
    .unwrap_or_else(|| probes.tcp_states().expect("read"));
    eprintln!("tcp_states: {states:?}");
    probes.sample(0, 2);
    let readings = probes.readings().expect("readings");
    let last = probes.series().last().cloned().expect("a sample");
    assert_eq!(last.t, Some(2), "a sample carries the run second it closes");
    eprintln!(
        "time_wait: {:?}, ports: {:?}\nlast sample: {last:?}",
        readings.time_wait, readings.ephemeral_ports_max_ratio
    );
    assert_eq!(readings.time_wait.entries, CLOSES);
    assert_eq!(last.time_wait_entries, CLOSES, "the interval's entries");
    assert!(readings.time_wait.max_live.unwrap() >= CLOSES, "ours, entries of the last 60 s (they live 60 s)");
    assert!(readings.time_wait.host_max_live.unwrap() >= CLOSES, "sockstat tw counts ours too");
    let in_use = last.ephemeral_ports_in_use.expect("ports read");
    assert!(in_use >= CLOSES, "{in_use} ports in use, expected our {CLOSES} TIME_WAIT ports at least");
    assert!(readings.ephemeral_ports_max_ratio.unwrap() > 0.0);
}

/// A connect inside a network namespace of this test, to an address routed into `lo` where
/// no host owns it: the SYN is dropped on arrival, so the socket retransmits it (first after
/// 1 s) and finally gives up — counted as SYN retransmits and a failed connect.
#[test]
fn syn_retransmits() {
    let Some((_serial, probes)) = start_probes("syn_retransmits") else { return };
    let netns = Netns::create("syn").expect("create a network namespace with `ip`");
    // 10.213.0.0/24 via lo in the namespace: packets leave and vanish (not a local address).
    netns.ip(&["link", "set", "lo", "up"]).expect("lo up");
    netns.ip(&["route", "add", "10.213.0.0/24", "dev", "lo"]).expect("route into lo");
    let black_hole: SocketAddr = "10.213.0.2:80".parse().unwrap();
    let result = netns.run_in(move || TcpStream::connect_timeout(&black_hole, Duration::from_millis(1_500)));
    let err = result.expect("the connect thread").expect_err("nobody answers");
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
    let readings = probes.readings().expect("readings");
    eprintln!(
        "syn_retransmits {} retransmits {} connect {:?}",
        readings.syn_retransmits, readings.retransmits, readings.connect_ms
    );
    assert!(readings.syn_retransmits >= 1, "the SYN was retransmitted at 1 s");
    assert_eq!(readings.retransmits, readings.syn_retransmits);
    assert_eq!(readings.connect_ms.failed, 1);
    assert_eq!(readings.connect_ms.count, 0);
}

/// The peer aborts (`SO_LINGER 0` close on the accepted socket, in this process): our client
/// socket receives the RST. The server socket is not the loader's: nothing counted as sent.
#[test]
fn resets_received() {
    let Some((_serial, probes)) = start_probes("resets_received") else { return };
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut client = TcpStream::connect(listener.local_addr().unwrap()).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    abort_on_close(&server);
    drop(server);
    client.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout");
    let err = client.read(&mut [0u8; 16]).expect_err("the peer reset");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");
    let readings = probes.readings().expect("readings");
    eprintln!("resets: {:?}", readings.resets);
    assert_eq!(readings.resets.received, 1);
    assert_eq!(readings.resets.sent, 0, "the server's reset is not the loader's");
}

/// Our client aborts (`SO_LINGER 0`): a reset sent, traced after the socket's CLOSE.
#[test]
fn resets_sent() {
    let Some((_serial, probes)) = start_probes("resets_sent") else { return };
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let client = TcpStream::connect(listener.local_addr().unwrap()).expect("connect");
    let (mut server, _) = listener.accept().expect("accept");
    abort_on_close(&client);
    drop(client);
    server.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout");
    let err = server.read(&mut [0u8; 16]).expect_err("the client reset");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");
    let readings = probes.readings().expect("readings");
    eprintln!("resets: {:?}", readings.resets);
    assert_eq!(readings.resets.sent, 1);
    assert_eq!(readings.resets.received, 0, "the server received it, not a loader socket");
}

/// Data arriving after our client closed: the kernel drops it (TCP_ABORT_ON_DATA) on our
/// socket and resets the connection.
///
/// The data must find the client's full socket in FIN_WAIT2. Whether it does is the kernel's
/// race: when the ACK of our FIN is processed while `close()` still owns the socket (the
/// usual case on loopback: it waits in the backlog), the orphan stays a full socket under
/// the FIN_WAIT2 timer; processed after, `tcp_rcv_state_process` turns the orphan into a
/// timewait socket at once, and the data meets that instead — its reset and drop belong to
/// another socket address, which no probe follows (a limit of `drops` and `resets_sent` for
/// data after close, said in docs/methodology.md). Once in CI (of some fifteen runs of this
/// suite) both counts were zero — what this race would give (read from the kernel's code, not
/// caught in the act); not reproduced in 12 runs here. So a second socket pair is tried when
/// the first shows neither, and said; the counts must then be exact.
#[test]
fn drops() {
    let Some((_serial, probes)) = start_probes("drops") else { return };
    assert!(probes.is_available(probe::DROPS), "{:?}", probes.availability());
    let mut drops = None;
    for attempt in 1..=2 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = TcpStream::connect(listener.local_addr().unwrap()).expect("connect");
        let (mut server, _) = listener.accept().expect("accept");
        drop(client);
        // Wait for the FIN, then send data the closed client can no longer take.
        server.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout");
        assert_eq!(server.read(&mut [0u8; 16]).expect("read EOF"), 0);
        let _ = server.write_all(b"data after close");
        drops = wait_until(Duration::from_secs(2), || {
            let drops = probes.readings().expect("readings").drops;
            (!drops.is_empty()).then_some(drops)
        });
        let resets = probes.readings().expect("readings").resets;
        if drops.is_some() || resets.sent > 0 {
            break;
        }
        eprintln!("drops: attempt {attempt}: neither a drop nor a reset seen on our socket; another pair");
    }
    let readings = probes.readings().expect("readings");
    eprintln!("drops: {drops:?} resets: {:?}", readings.resets);
    let drops = drops.expect("a drop on our socket");
    assert_eq!(drops.get("TCP_ABORT_ON_DATA"), Some(&1), "{drops:?}");
    assert_eq!(readings.resets.sent, 1, "the client answered the data with a reset");
}

/// A thread of this process that sleeps 1 ms at a time, pinned to one CPU: quiet, its
/// wake-ups run at once; with busy-looping child processes (nice -10) pinned to the same CPU, it waits
/// in the run queue, and the probe's p99 rises far above the quiet baseline. The hogs are
/// other processes, so the delay measured is the sleeper's (its wake-ups), not theirs. The
/// sleeper is not a shard thread: its delay is in the other threads' histogram, and the
/// shards' stays empty.
#[test]
fn runqueue() {
    let Some((_serial, probes)) = start_probes("runqueue") else { return };
    assert!(probes.is_available(probe::RUNQUEUE), "{:?}", probes.availability());
    let cpu = support::last_cpu();
    let show = |h: &LatencyHistogram| {
        format!("count {} p50 {:?} µs p99 {:?} µs max {:?} µs", h.count, h.p50_us(), h.p99_us(), h.max_us())
    };
    // A second of quiet, then a second beside two hogs. Whether the scheduler makes the
    // sleeper wait is the set-up, not the probe: a host that gave it the CPU at once or a
    // baseline that another process disturbed gets another try, up to 3; the last is judged.
    let mut attempt = 0;
    let (quiet, busy, readings) = loop {
        attempt += 1;
        let before = probes.readings().expect("readings").runqueue_other_histogram;
        support::sleeper_on(cpu, Duration::from_millis(1_000));
        let quiet_end = probes.readings().expect("readings").runqueue_other_histogram;
        let quiet = quiet_end.since(&before);
        let hogs = common::Hogs::spawn(cpu, 2);
        support::sleeper_on(cpu, Duration::from_millis(1_000));
        drop(hogs);
        let readings = probes.readings().expect("readings");
        let busy = readings.runqueue_other_histogram.since(&quiet_end);
        eprintln!(
            "run-queue delay on CPU {cpu}, try {attempt}: quiet {}\n  with 2 hogs at nice -10: {}",
            show(&quiet),
            show(&busy)
        );
        let (q, b) = (quiet.p99_us().unwrap_or(0.0), busy.max_us().unwrap_or(0.0));
        if (b >= 2_000.0 && b >= 3.0 * q) || attempt == 3 {
            break (quiet, busy, readings);
        }
    };
    assert_eq!(readings.runqueue_histogram.count, 0, "no shard thread in this test");
    assert!(quiet.count >= 200, "the sleeper woke ~1000 times: {}", quiet.count);
    assert!(busy.count >= 50, "{}", busy.count);
    // The hogs' waits show in the longest wait (exact), not always in the p99: the scheduler
    // may place the woken sleeper ahead of them most of the time (here: busy p99 6.7 µs with
    // a longest wait of 17.9 ms, in one try of three). The quiet baseline is not always quiet
    // (other work may share the CPU), hence a ratio and a floor rather than exact figures.
    let (quiet_p99, busy_max) = (quiet.p99_us().unwrap(), busy.max_us().unwrap());
    assert!(busy_max >= 2_000.0 && busy_max >= 3.0 * quiet_p99, "busy max {busy_max} µs vs quiet p99 {quiet_p99} µs");
}

/// With the probes attached, other tracers still see the tracepoints they use. The kernel ANDs
/// the return values of the BPF programs on a classic tracepoint and, on 0, drops the event
/// for every perf consumer of it — `perf record -e sched:sched_switch`, `perf sched`, `perf
/// trace` recorded nothing while a loader ran (aya's `#[tracepoint]` returns 0). Counted here
/// with perf counters on this thread: its sleeps (sched_switch) and a connect of its own
/// (inet_sock_set_state), both also seen by the probes.
#[test]
fn other_tracers_still_see_the_tracepoints() {
    let Some((_serial, probes)) = start_probes("other_tracers_still_see_the_tracepoints") else { return };
    assert!(probes.is_available(probe::RUNQUEUE), "{:?}", probes.availability());
    assert!(probes.is_available(probe::TCP_STATES), "{:?}", probes.availability());
    let switches = support::TracepointCounter::open("sched", "sched_switch");
    let states = support::TracepointCounter::open("sock", "inet_sock_set_state");
    const SLEEPS: u64 = 20;
    for _ in 0..SLEEPS {
        thread::sleep(Duration::from_millis(1));
    }
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let client = TcpStream::connect(listener.local_addr().expect("local_addr")).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    drop((client, server));
    let (switches, states) = (switches.count(), states.count());
    eprintln!("perf counters on this thread, probes attached: sched_switch {switches}, inet_sock_set_state {states}");
    assert!(switches >= SLEEPS, "{SLEEPS} sleeps, {switches} sched_switch events reached perf");
    assert!(states >= 1, "a connect, {states} inet_sock_set_state events reached perf");
}

/// The TLS uprobes fire on the markers themselves: this test calls them the way the engine
/// does (which also links them into this test binary, where the uprobes resolve them) and
/// checks the counts by outcome, the unmatched end, and the durations against a sleep.
#[test]
fn tls_uprobes_count_and_time_the_markers() {
    use loader::engine::tls::{loader_tls_handshake_end as end, loader_tls_handshake_start as start};
    use probes_ebpf::tls_outcome;

    let Some((_serial, probes)) = start_probes("tls_uprobes_count_and_time_the_markers") else { return };
    assert_eq!(probes.availability().get(probe::TLS_HANDSHAKES).map(String::as_str), Some("ok"));
    for i in 0..20u64 {
        start(i);
        std::thread::sleep(Duration::from_millis(2));
        end(i, if i % 4 == 0 { tls_outcome::RESUMED } else { tls_outcome::FULL });
    }
    start(100);
    end(100, tls_outcome::FAILED);
    start(101); // never ends: begun, still "under way"
    end(102, tls_outcome::FULL); // no start seen: counted, without a duration
    let tls = probes.readings().expect("readings").tls_handshakes;
    eprintln!("tls uprobes: {tls:?}");
    assert_eq!((tls.started, tls.full, tls.resumed, tls.failed, tls.unmatched), (22, 16, 5, 1, 1), "{tls:?}");
    assert_eq!(tls.histogram.count, 20, "durations of completed handshakes with a start only");
    let (p50, max) = (tls.histogram.p50_ms().unwrap(), tls.histogram.max_ms().unwrap());
    assert!((1.9..=3.0).contains(&p50), "2 ms sleeps: p50 {p50} ms");
    assert!(max >= 2.0, "max {max} ms");
}

/// `Probes::reset` (between the runs of `--repeat`): every count starts again from zero and
/// the followed sockets stay followed.
#[test]
fn reset_counts_from_zero() {
    let Some((_serial, mut probes)) = start_probes("reset_counts_from_zero") else { return };
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().expect("local_addr");
    let connect = |n: usize| -> Vec<(TcpStream, TcpStream)> {
        (0..n).map(|_| (TcpStream::connect(addr).expect("connect"), listener.accept().expect("accept").0)).collect()
    };
    let established = |probes: &Probes| probes.tcp_states().expect("counts").get("SYN_SENT->ESTABLISHED").copied();

    let kept = connect(3);
    assert_eq!(wait_until(Duration::from_secs(5), || (established(&probes) == Some(3)).then_some(())), Some(()));
    probes.sample(0, 1);
    probes.reset().expect("reset");
    let r = probes.readings().expect("readings");
    assert!(r.tcp_states.is_empty(), "{:?}", r.tcp_states);
    // Zero our own loss counters; the kernel's `recursion_misses` may grow meanwhile — a
    // scheduler event the kernel skipped because another BPF program was running on that CPU
    // (CI: one, between the reset and this read), host activity rather than the reset's.
    let own_lost: u64 = r.lost_by_reason.iter().filter(|(k, _)| k.as_str() != "recursion_misses").map(|(_, n)| n).sum();
    assert_eq!((r.connect_ms.count, own_lost), (0, 0), "{r:?}");
    assert_eq!(probes.series().len(), 0, "the series starts again");

    // Counting goes on from zero: two new connects, and the close of a socket connected
    // before the reset (still followed: its transition is counted).
    let _new = connect(2);
    drop(kept);
    let states = wait_until(Duration::from_secs(5), || {
        let s = probes.tcp_states().expect("counts");
        (s.get("ESTABLISHED->FIN_WAIT1").copied() == Some(3)).then_some(s)
    })
    .unwrap_or_else(|| panic!("the pre-reset sockets' closes: {:?}", probes.tcp_states()));
    assert_eq!(states.get("SYN_SENT->ESTABLISHED").copied(), Some(2), "{states:?}");
    assert_eq!(probes.readings().expect("readings").connect_ms.count, 2);
}

/// On this kernel family every probe starts.
#[test]
fn availability() {
    let Some((_serial, probes)) = start_probes("availability") else { return };
    eprintln!("availability: {:?}", probes.availability());
    for name in probe::ALL {
        assert_eq!(
            probes.availability().get(name).map(String::as_str),
            Some("ok"),
            "{name}: {:?}",
            probes.availability()
        );
    }
}

/// Setup shared by the tests: privilege and CI rules, serialisation, namespaces, hogs.
mod support {
    use std::{
        fs::File,
        os::fd::AsRawFd as _,
        process::Command,
        sync::{Mutex, MutexGuard},
        thread,
        time::{Duration, Instant},
    };

    use loader::probes::{Probes, Unavailable};

    /// A perf counter of one tracepoint's events in the calling thread (`perf_event_open`,
    /// counting mode), as `perf stat -e CATEGORY:NAME` keeps one.
    pub struct TracepointCounter {
        fd: File,
    }

    /// `struct perf_event_attr` up to `bp_len` (`PERF_ATTR_SIZE_VER0`, 64 bytes).
    #[repr(C)]
    #[derive(Default)]
    struct PerfEventAttr {
        kind: u32,
        size: u32,
        config: u64,
        sample_period: u64,
        sample_type: u64,
        read_format: u64,
        flags: u64,
        wakeup_events: u32,
        bp_type: u32,
        bp_addr: u64,
    }

    impl TracepointCounter {
        pub fn open(category: &str, name: &str) -> TracepointCounter {
            let id = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
                .iter()
                .find_map(|root| std::fs::read_to_string(format!("{root}/events/{category}/{name}/id")).ok())
                .unwrap_or_else(|| panic!("no tracefs id for {category}:{name}"));
            let attr = PerfEventAttr {
                kind: 2, // PERF_TYPE_TRACEPOINT
                size: std::mem::size_of::<PerfEventAttr>() as u32,
                config: id.trim().parse().expect("a tracepoint id is a number"),
                ..Default::default()
            };
            // SAFETY: `attr` is a valid perf_event_attr of the size it states; pid 0 and cpu -1
            // count the calling thread on any CPU; no group, no flags.
            let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, &attr as *const PerfEventAttr, 0, -1, -1, 0) };
            assert!(fd >= 0, "perf_event_open {category}:{name}: {}", std::io::Error::last_os_error());
            // SAFETY: a new descriptor this process owns from here on.
            TracepointCounter { fd: unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) } }
        }

        pub fn count(&self) -> u64 {
            let mut value = [0u8; 8];
            // SAFETY: reads at most 8 bytes into `value`.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), value.as_mut_ptr().cast(), value.len()) };
            assert_eq!(n, 8, "read a perf counter: {}", std::io::Error::last_os_error());
            u64::from_ne_bytes(value)
        }
    }

    /// One test at a time: the probes count everything this process connects.
    static SERIAL: Mutex<()> = Mutex::new(());

    /// The probes for this process, with the serial lock held; `None` (after saying why) when
    /// the test cannot run here — never under CI.
    pub fn start_probes(test: &str) -> Option<(MutexGuard<'static, ()>, Probes)> {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 {
            assert!(!ci, "CI=true but running as euid {euid}: the probe tests need root in CI");
            eprintln!("skipping {test}: needs root to load eBPF programs (euid {euid})");
            return None;
        }
        let serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match Probes::start(std::process::id()) {
            Ok(probes) => {
                eprintln!("{test}: probes attached (tracefs mounted by start-up: {})", probes.mounted_tracefs());
                Some((serial, probes))
            }
            // A build without bpf-linker (a warning at build time) cannot test the probes; CI
            // builds with LOADER_EBPF=require, so this never skips there.
            Err(err) if !ci && matches!(err, Unavailable::NoObject) => {
                eprintln!("skipping {test}: {err}");
                None
            }
            Err(err) => {
                let code = err.code();
                panic!("as root the probes must load; unavailable ({code}): {err:#}");
            }
        }
    }

    /// Poll `check` every 20 ms until it returns `Some`, for at most `limit`.
    pub fn wait_until<T>(limit: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(value) = check() {
                return Some(value);
            }
            if Instant::now() > deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// `SO_LINGER {on, 0}`: `close()` aborts the connection with a RST.
    pub fn abort_on_close(socket: &impl std::os::fd::AsRawFd) {
        let linger = libc::linger { l_onoff: 1, l_linger: 0 };
        // SAFETY: a valid socket fd and a correctly sized `linger` that outlives the call.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&raw const linger).cast(),
                size_of::<libc::linger>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "SO_LINGER: {}", std::io::Error::last_os_error());
    }

    /// A network namespace made with `ip netns add`, deleted on drop (also when the test
    /// fails).
    pub struct Netns {
        name: String,
    }

    impl Netns {
        /// `ip netns add loader-probes-<pid>-<tag>`.
        pub fn create(tag: &str) -> Result<Netns, String> {
            let name = format!("loader-probes-{}-{tag}", std::process::id());
            run_ip(&["netns", "add", &name])?;
            Ok(Netns { name })
        }

        /// `ip -n <ns> ARGS…`.
        pub fn ip(&self, args: &[&str]) -> Result<(), String> {
            let mut all = vec!["-n", self.name.as_str()];
            all.extend_from_slice(args);
            run_ip(&all)
        }

        /// Run `work` on a new thread of this process that has entered the namespace
        /// (`setns` changes only the calling thread; it stays in this tgid).
        pub fn run_in<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> thread::Result<T> {
            let path = format!("/run/netns/{}", self.name);
            let file = File::open(&path).unwrap_or_else(|err| panic!("{path}: {err}"));
            thread::spawn(move || {
                // SAFETY: a valid namespace fd; CLONE_NEWNET moves only this thread.
                let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
                work()
            })
            .join()
        }
    }

    impl Drop for Netns {
        fn drop(&mut self) {
            if let Err(err) = run_ip(&["netns", "del", &self.name]) {
                eprintln!("could not delete network namespace {}: {err}", self.name);
            }
        }
    }

    fn run_ip(args: &[&str]) -> Result<(), String> {
        let output = Command::new("ip").args(args).output().map_err(|err| format!("ip {args:?}: {err}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!("ip {args:?}: {}", String::from_utf8_lossy(&output.stderr).trim()))
        }
    }

    /// The highest-numbered CPU this process may run on.
    pub fn last_cpu() -> usize {
        let cpus = loader::health::affinity::allowed().unwrap_or_else(|e| panic!("sched_getaffinity: {e}"));
        *cpus.last().expect("some CPU")
    }

    /// Pin the calling thread to `cpu`.
    fn pin_to(cpu: usize) -> std::io::Result<()> {
        loader::health::affinity::current_thread(&[cpu])
    }

    /// A thread of this process pinned to `cpu`, sleeping 1 ms at a time for `length`.
    pub fn sleeper_on(cpu: usize, length: Duration) {
        thread::spawn(move || {
            pin_to(cpu).expect("pin the sleeper");
            let end = Instant::now() + length;
            while Instant::now() < end {
                thread::sleep(Duration::from_millis(1));
            }
        })
        .join()
        .expect("sleeper");
    }
}
