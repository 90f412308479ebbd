//! uring-proto: one loader shard written on tokio-uring, to measure against the engine.
//!
//! It does what a loader shard does at a fixed rate, and nothing else: request `i` is
//! intended at `start + i / rate`; when it is due it goes to the first idle keep-alive
//! connection (if none is idle it waits for one, and that is counted); its latency runs
//! from the intended time (coordinated omission corrected) and its send lag is the actual
//! send start minus the intended time. One tokio-uring runtime on one thread, pinned with
//! `--cpu`. How the dispatcher sleeps is `--pace` (see `pace.rs`); the connection tasks
//! and the response framing are `conn.rs`.
//!
//! Output: one JSON line on stdout. It does not retry, time out or classify errors beyond
//! ok / error: the target is the loader's own fixed endpoint on loopback.

mod conn;
mod pace;

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::sync::Notify;

use pace::Pace;

/// Time from connecting the pool to the first intended send.
const LEAD_NS: u64 = 20_000_000;
/// Longest wait for answers in flight once the schedule is done.
const DRAIN_NS: u64 = 1_000_000_000;

/// What the command line asked for.
struct Args {
    addr: SocketAddr,
    rate: f64,
    duration_s: f64,
    warmup_s: f64,
    connections: usize,
    pace: Pace,
    cpu: Option<usize>,
}

const USAGE: &str = "usage: uring-proto --addr 127.0.0.1:PORT --rate R --duration SECONDS \
                     [--warmup SECONDS (0)] [--connections C (64)] [--pace sleep|uring-timeout|spin (sleep)] \
                     [--cpu N]";

fn parse_args() -> Result<Args, String> {
    let mut addr = None;
    let (mut rate, mut duration_s, mut warmup_s, mut connections, mut pace, mut cpu) =
        (None, None, 0.0, 64, Pace::Sleep, None);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--addr" => addr = Some(value.parse::<SocketAddr>().map_err(|e| bad(&e))?),
            "--rate" => rate = Some(value.parse::<f64>().map_err(|e| bad(&e))?),
            "--duration" => duration_s = Some(value.parse::<f64>().map_err(|e| bad(&e))?),
            "--warmup" => warmup_s = value.parse::<f64>().map_err(|e| bad(&e))?,
            "--connections" => connections = value.parse().map_err(|e| bad(&e))?,
            "--pace" => pace = Pace::parse(&value).ok_or_else(|| bad(&"not sleep, uring-timeout or spin"))?,
            "--cpu" => cpu = Some(value.parse().map_err(|e| bad(&e))?),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    let addr = addr.ok_or("--addr is required")?;
    if !addr.ip().is_loopback() {
        return Err(format!("{addr}: only loopback targets"));
    }
    let rate = rate.filter(|r| *r > 0.0).ok_or("--rate must be > 0")?;
    let duration_s = duration_s.filter(|d| *d > 0.0).ok_or("--duration must be > 0")?;
    if warmup_s.is_nan() || warmup_s < 0.0 {
        return Err("--warmup must be >= 0".into());
    }
    if connections == 0 {
        return Err("--connections must be > 0".into());
    }
    Ok(Args { addr, rate, duration_s, warmup_s, connections, pace, cpu })
}

/// `CLOCK_MONOTONIC` now, ns: the clock of `Instant`, of tokio's timer and of io_uring timeouts.
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes a timespec; CLOCK_MONOTONIC always exists (vDSO).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What the run measured. Filled on the one runtime thread; never shared across threads.
/// The histograms and the counters but `ok_all` hold the requests intended from
/// `measured_from` on (after the warm-up), as the loader's `main` phase does.
pub struct Record {
    /// Monotonic ns from which requests are measured.
    pub measured_from: u64,
    /// Completion − intended send, ns.
    pub latency: Histogram<u64>,
    /// Actual send start − intended send, ns.
    pub send_lag: Histogram<u64>,
    /// Timer wake-up − the instant it was asked for, ns (timer waits only).
    pub wake_late: Histogram<u64>,
    pub sent: u64,
    pub ok: u64,
    pub errors: u64,
    /// Requests that were due with no idle connection and waited for one.
    pub waited_for_connection: u64,
    /// 2xx/3xx responses of the whole run, warm-up included (for requests per CPU-second).
    pub ok_all: u64,
}

impl Record {
    fn new() -> Record {
        let h = || Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("histogram bounds");
        Record {
            latency: h(),
            send_lag: h(),
            wake_late: h(),
            sent: 0,
            ok: 0,
            errors: 0,
            waited_for_connection: 0,
            measured_from: 0,
            ok_all: 0,
        }
    }
}

/// One connection's mailbox: the intended time of the request it is to send.
#[derive(Default)]
pub struct Slot {
    pub job: Cell<Option<u64>>,
    pub ready: Notify,
}

/// State shared by the dispatcher and the connection tasks (all on one thread).
pub struct Shared {
    /// Idle connections; the last one to become idle is taken first, as in the engine.
    pub idle: RefCell<Vec<usize>>,
    /// Signalled when a connection becomes idle.
    pub idle_ready: Notify,
    pub slots: Vec<Slot>,
    pub record: RefCell<Record>,
    /// Connections alive (a failed one is not reopened).
    pub alive: Cell<usize>,
    pub stop: Cell<bool>,
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("uring-proto: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Some(cpu) = args.cpu {
        pin_to(cpu);
    }
    match tokio_uring::builder().entries(256).start(run(&args)) {
        Ok(line) => {
            println!("{line}");
            // Leave without dropping the runtime: a read still in flight after the drain
            // bound would make tokio-uring's driver wait for it on drop.
            std::process::exit(0)
        }
        Err(e) => {
            eprintln!("uring-proto: {e}");
            ExitCode::from(1)
        }
    }
}

fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET and sched_setaffinity get valid pointers.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            eprintln!("uring-proto: cannot pin to CPU {cpu}: {}", std::io::Error::last_os_error());
        }
    }
}

async fn run(args: &Args) -> Result<String, String> {
    let host = format!("Host: {}\r\n", args.addr);
    let request: &'static [u8] =
        format!("GET / HTTP/1.1\r\n{host}User-Agent: uring-proto/0.1.0\r\n\r\n").into_bytes().leak();

    let shared = Rc::new(Shared {
        idle: RefCell::new(Vec::with_capacity(args.connections)),
        idle_ready: Notify::new(),
        slots: (0..args.connections).map(|_| Slot::default()).collect(),
        record: RefCell::new(Record::new()),
        alive: Cell::new(0),
        stop: Cell::new(false),
    });
    for id in 0..args.connections {
        let stream =
            tokio_uring::net::TcpStream::connect(args.addr).await.map_err(|e| format!("connect {}: {e}", args.addr))?;
        stream.set_nodelay(true).map_err(|e| format!("TCP_NODELAY: {e}"))?;
        shared.idle.borrow_mut().push(id);
        shared.alive.set(shared.alive.get() + 1);
        tokio_uring::spawn(conn::serve(id, stream, request, shared.clone()));
    }

    let cpu_before = cpu_seconds();
    let start = now_ns() + LEAD_NS;
    let total = (args.rate * (args.warmup_s + args.duration_s)).round() as u64;
    shared.record.borrow_mut().measured_from = start + (args.warmup_s * 1e9) as u64;
    let mut pacer = args.pace.pacer();
    for i in 0..total {
        let intended = start + (i as f64 * 1e9 / args.rate) as u64;
        if now_ns() < intended {
            let late = pacer.wait_until(intended).await;
            if let Some(late) = late {
                shared.record.borrow_mut().wake_late.saturating_record(late);
            }
        }
        let id = take_idle(&shared, intended).await.ok_or("every connection failed")?;
        shared.slots[id].job.set(Some(intended));
        shared.slots[id].ready.notify_one();
    }
    let end = start + (total as f64 * 1e9 / args.rate) as u64;
    drain(&shared, end.max(now_ns()) + DRAIN_NS).await;
    let cpu_s = cpu_seconds() - cpu_before;
    let process_cpu_s = cpu_seconds();

    let r = shared.record.borrow();
    let ms = |h: &Histogram<u64>, q: f64| if h.is_empty() { 0.0 } else { h.value_at_quantile(q) as f64 / 1e6 };
    let in_flight = r.sent - r.ok - r.errors;
    Ok(format!(
        concat!(
            "{{\"tool\":\"tokio-uring\",\"pace\":\"{}\",\"rate\":{},\"duration_s\":{},\"warmup_s\":{},",
            "\"connections\":{},\"sent\":{},\"ok\":{},\"ok_all\":{},\"errors\":{},\"unanswered\":{},\"waited_for_connection\":{},",
            "\"send_lag_ms\":{{\"p50\":{:.3},\"p99\":{:.3},\"p999\":{:.3},\"max\":{:.3}}},",
            "\"latency_ms\":{{\"p50\":{:.3},\"p99\":{:.3},\"p999\":{:.3},\"max\":{:.3}}},",
            "\"wake_late_ms\":{{\"p50\":{:.3},\"p99\":{:.3},\"count\":{}}},",
            "\"cpu_s\":{:.3},\"process_cpu_s\":{:.3},\"requests_per_cpu_s\":{:.0}}}"
        ),
        args.pace.name(),
        args.rate,
        args.duration_s,
        args.warmup_s,
        args.connections,
        r.sent,
        r.ok,
        r.ok_all,
        r.errors,
        in_flight,
        r.waited_for_connection,
        ms(&r.send_lag, 0.5),
        ms(&r.send_lag, 0.99),
        ms(&r.send_lag, 0.999),
        ms(&r.send_lag, 1.0),
        ms(&r.latency, 0.5),
        ms(&r.latency, 0.99),
        ms(&r.latency, 0.999),
        ms(&r.latency, 1.0),
        ms(&r.wake_late, 0.5),
        ms(&r.wake_late, 0.99),
        r.wake_late.len(),
        cpu_s,
        process_cpu_s,
        if process_cpu_s > 0.0 { r.ok_all as f64 / process_cpu_s } else { 0.0 },
    ))
}

/// The first idle connection; waits for one if none is (counted once per request).
async fn take_idle(shared: &Shared, intended: u64) -> Option<usize> {
    let mut waited = false;
    loop {
        if let Some(id) = shared.idle.borrow_mut().pop() {
            return Some(id);
        }
        if shared.alive.get() == 0 {
            return None;
        }
        if !waited {
            waited = true;
            let mut r = shared.record.borrow_mut();
            if intended >= r.measured_from {
                r.waited_for_connection += 1;
            }
        }
        shared.idle_ready.notified().await;
    }
}

/// Wait until every live connection is idle again, or `until` (ns, monotonic).
async fn drain(shared: &Shared, until: u64) {
    while shared.idle.borrow().len() < shared.alive.get() {
        let now = now_ns();
        if now >= until {
            break;
        }
        let _ = tokio::time::timeout(Duration::from_nanos(until - now), shared.idle_ready.notified()).await;
    }
    shared.stop.set(true);
    for slot in &shared.slots {
        slot.ready.notify_one();
    }
}

/// User + system CPU of this process so far, seconds (getrusage).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}
