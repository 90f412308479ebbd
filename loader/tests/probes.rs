//! Root test of the `tcp_states` probe (the kernel program and this test share the name).
//!
//! The probe is fired deliberately from this process: it connects to a listener of its own,
//! so the expected counts are exact. This file is its own test binary, hence its own process
//! (tgid), and holds one test, so nothing else in the process connects meanwhile. A child
//! process connecting to the same listener must not be counted: that proves the in-kernel
//! tgid filter.
//!
//! Needs root (or CAP_BPF + CAP_PERFMON) and a loader built with its eBPF object. Without
//! either the test says why and passes, except under CI (`CI=true`), which runs as root,
//! builds with `LOADER_EBPF=require` and must never skip it.

use std::{
    collections::BTreeMap,
    io::Write as _,
    net::{SocketAddr, TcpListener, TcpStream},
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use loader::probes::{Probes, Unavailable};

/// Connections this process opens.
const OWN_CONNECTIONS: u64 = 5;
/// Connections a child process opens (must not be counted).
const FOREIGN_CONNECTIONS: usize = 3;

#[test]
fn tcp_states() {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        assert!(!ci, "CI=true but running as euid {euid}: the probe test needs root in CI");
        eprintln!("skipping tcp_states: needs root to load eBPF programs (euid {euid})");
        return;
    }

    let probes = match Probes::start(std::process::id()) {
        Ok(probes) => probes,
        // A build without bpf-linker (a warning at build time) cannot test the probes; CI
        // builds with LOADER_EBPF=require, so this never skips there.
        Err(err) if !ci && matches!(err.downcast_ref(), Some(Unavailable::NoObject)) => {
            eprintln!("skipping tcp_states: {err}");
            return;
        }
        Err(err) => {
            let code = err.downcast_ref::<Unavailable>().map_or("?", Unavailable::code);
            panic!("as root the probes must load; unavailable ({code}): {err:#}");
        }
    };
    eprintln!("probes attached (tracefs mounted by start-up: {})", probes.mounted_tracefs());

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
    assert_eq!(probes.lost_by_reason().expect("read lost").values().sum::<u64>(), 0);
    assert_eq!(probes.lost(), 0);

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
