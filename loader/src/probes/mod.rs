//! eBPF probes on the loader's own process: loading, attaching, falling back per probe, and
//! one reader per probe.
//!
//! [`Probes::start`] loads the object that `build.rs` embedded (the kernel programs of the
//! `probes-ebpf` package), sets the loader's tgid and the running kernel's tracepoint layouts
//! as globals, and attaches every program it can; dropping [`Probes`] detaches. A probe whose
//! tracepoint is missing or whose program the kernel refuses is recorded as unavailable (with
//! the reason, see [`Probes::availability`]) and the others run. `start` fails only when
//! nothing can run; its error's [`Unavailable`] value says why (with a stable
//! [`Unavailable::code`]), and the run goes on without probes.
//!
//! Probes (kernel program → reader):
//!
//! - `tcp_states` (`sock:inet_sock_set_state`): TCP state transitions of sockets the loader
//!   connected; also connect latency (SYN_SENT → ESTABLISHED) and the `LOADER_SOCKS` map every
//!   socket probe filters on. Readers: `tcp_states.rs`, `connect_latency.rs`. TIME_WAIT
//!   entries and failed connects are transition counts.
//! - `syn_retransmits` (`tcp:tcp_retransmit_skb`), `resets_received` (`tcp:tcp_receive_reset`),
//!   `resets_sent` (`tcp:tcp_send_reset`): reader `sock_events.rs`.
//! - `drops` (`skb:kfree_skb`, Linux 6.11+ for `rx_sk`): reader `drops.rs`.
//! - `runqueue` (`sched:sched_wakeup`, `sched_wakeup_new`, `sched_switch`): reader
//!   `runqueue.rs`.
//! - `tls_handshakes` (uprobes on the loader's own `loader_tls_handshake_{start,end}`
//!   markers): count and duration of the loader's TLS handshakes; `tls_handshakes.rs`.
//! - live TIME_WAIT and ephemeral ports: `/proc`, sampled by [`Probes::sample`]
//!   (`time_wait.rs`).
//!
//! Histograms are in-kernel, log2-linear with four buckets per power of two of ns
//! (`histogram.rs`). [`Probes::readings`] gives everything cumulative as [`ProbeReadings`];
//! [`Probes::sample`], called once a second by the run, adds one [`ProbeSample`] to a bounded
//! per-second series.
//!
//! What start-up does to the host: when tracefs is not mounted it mounts it on
//! `/sys/kernel/tracing` and leaves it mounted. Nothing else.
//!
//! Not here: the `/proc` and cgroup samplers that stand in when probes are unavailable
//! (the health module), judging the numbers (the verdict), and dropping root after start
//! (the run does that; readers keep working, map reads through an open fd need no privilege).

mod connect_latency;
mod counters;
mod drops;
mod histogram;
mod privilege;
mod readings;
mod runqueue;
mod sock_events;
mod tcp_states;
mod time_wait;
mod tls_handshakes;
mod tracefs;

use std::{
    collections::{BTreeMap, VecDeque},
    fs, io,
    os::fd::{AsFd as _, AsRawFd as _},
    path::Path,
    time::Instant,
};

use aya::{
    Ebpf, EbpfLoader,
    maps::MapError,
    programs::{ProgramError, TracePoint},
};
use probes_ebpf::{lost as lost_reason, names};

use self::{
    connect_latency::ConnectLatencyReader, counters::read_sums, drops::DropsReader, runqueue::RunqueueReader,
    sock_events::SockEventsReader, tcp_states::TcpStatesReader, tls_handshakes::TlsHandshakesReader, tracefs::Tracefs,
};
pub use self::{
    histogram::LatencyHistogram,
    readings::{ConnectMs, LossShare, ProbeReadings, ProbeSample, Resets, RunqueueUs, TimeWait},
    sock_events::SockEvents,
    time_wait::EphemeralPorts,
    tls_handshakes::TlsHandshakes,
};

/// The eBPF object built by `build.rs`; empty when the build had no bpf-linker (or
/// `LOADER_EBPF=skip`).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/probes"));

/// Why the probes cannot run on this host or this build. [`Probes::start`]'s error
/// downcasts to it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Unavailable {
    /// This binary was built without the eBPF object (no bpf-linker at build time, or
    /// `LOADER_EBPF=skip`).
    #[error("built without eBPF objects (bpf-linker was missing or LOADER_EBPF=skip when loader was built)")]
    NoObject,
    /// The process lacks root / `CAP_SYS_ADMIN`, or `CAP_BPF` with `CAP_PERFMON`.
    #[error("not privileged: probes need root (or CAP_BPF and CAP_PERFMON); {detail}")]
    NotPrivileged {
        /// The effective user and capabilities found.
        detail: String,
    },
    /// tracefs is neither mounted nor mountable.
    #[error("no tracefs: {detail}")]
    NoTracefs {
        /// What was tried and what failed.
        detail: String,
    },
    /// The running kernel does not have a tracepoint a probe needs.
    #[error("tracepoint {tracepoint} is missing from this kernel ({detail})")]
    TracepointMissing {
        /// `category:name`.
        tracepoint: &'static str,
        /// The file that could not be read and why.
        detail: String,
    },
    /// A tracepoint's record does not have the fields a probe reads.
    #[error("tracepoint {tracepoint} has an unexpected layout: {detail}")]
    TracepointLayout {
        /// `category:name`.
        tracepoint: &'static str,
        /// The field at fault.
        detail: String,
    },
    /// The kernel refused the object: maps, BTF or relocation.
    #[error("the kernel refused the eBPF object: {0}")]
    Load(#[source] aya::EbpfError),
    /// A program failed to load (verifier) or attach.
    #[error("program {program}: {source}")]
    Program {
        /// The program's name.
        program: &'static str,
        /// What aya / the kernel said, including the verifier log when there is one.
        #[source]
        source: ProgramError,
    },
    /// The embedded object lacks a program or map user space expects (a build mismatch).
    #[error("the eBPF object has no {item}")]
    MissingFromObject {
        /// The missing program or map.
        item: &'static str,
    },
    /// A probe needs another probe that could not start.
    #[error("needs the {probe} probe, which is unavailable: {detail}")]
    Dependency {
        /// The probe needed.
        probe: &'static str,
        /// Why that one is unavailable.
        detail: String,
    },
    /// A map in the object has another type than its reader expects.
    #[error("map {name}: {source}")]
    Map {
        /// The map's name.
        name: &'static str,
        /// aya's complaint.
        #[source]
        source: MapError,
    },
}

impl Unavailable {
    /// A stable, machine-readable code for reports (`probes_unavailable.reason`).
    pub fn code(&self) -> &'static str {
        match self {
            Unavailable::NoObject => "no_ebpf_object",
            Unavailable::NotPrivileged { .. } => "not_privileged",
            Unavailable::NoTracefs { .. } => "no_tracefs",
            Unavailable::TracepointMissing { .. } => "tracepoint_missing",
            Unavailable::TracepointLayout { .. } => "tracepoint_layout",
            Unavailable::Load(_) => "load_failed",
            Unavailable::Program { .. } => "program_failed",
            Unavailable::Dependency { .. } => "dependency_unavailable",
            Unavailable::MissingFromObject { .. } | Unavailable::Map { .. } => "object_mismatch",
        }
    }
}

/// Probe names in [`Probes::availability`] and [`ProbeReadings::availability`].
pub mod probe {
    /// TCP state transitions.
    pub const TCP_STATES: &str = "tcp_states";
    /// Connect latency and failed connects.
    pub const CONNECT_LATENCY: &str = "connect_latency";
    /// TIME_WAIT entries (kernel) and live count (`/proc/net/sockstat`).
    pub const TIME_WAIT: &str = "time_wait";
    /// SYN retransmits.
    pub const SYN_RETRANSMITS: &str = "syn_retransmits";
    /// Resets received.
    pub const RESETS_RECEIVED: &str = "resets_received";
    /// Resets sent.
    pub const RESETS_SENT: &str = "resets_sent";
    /// Drops by reason.
    pub const DROPS: &str = "drops";
    /// Run-queue delay.
    pub const RUNQUEUE: &str = "runqueue";
    /// TLS handshakes (uprobes).
    pub const TLS_HANDSHAKES: &str = "tls_handshakes";
    /// Every probe.
    pub const ALL: [&str; 9] = [
        TCP_STATES,
        CONNECT_LATENCY,
        TIME_WAIT,
        SYN_RETRANSMITS,
        RESETS_RECEIVED,
        RESETS_SENT,
        DROPS,
        RUNQUEUE,
        TLS_HANDSHAKES,
    ];
}

/// The value of an available probe in [`Probes::availability`].
pub const AVAILABLE: &str = "ok";

/// Samples kept by [`Probes::sample`]: an hour at one per second; older ones are dropped
/// (and counted in [`Probes::samples_dropped`]).
pub const SERIES_CAPACITY: usize = 3_600;

/// A tracepoint a program attaches to.
#[derive(Debug, Clone, Copy)]
struct Hook {
    program: &'static str,
    category: &'static str,
    name: &'static str,
    /// `category:name`, for messages.
    full: &'static str,
}

const TCP_STATES: Hook = Hook {
    program: names::TCP_STATES_PROGRAM,
    category: names::TCP_STATES_CATEGORY,
    name: names::TCP_STATES_TRACEPOINT,
    full: "sock:inet_sock_set_state",
};
const RETRANSMIT: Hook = Hook {
    program: names::SYN_RETRANSMITS_PROGRAM,
    category: "tcp",
    name: "tcp_retransmit_skb",
    full: "tcp:tcp_retransmit_skb",
};
const RECEIVE_RESET: Hook = Hook {
    program: names::RESETS_RECEIVED_PROGRAM,
    category: "tcp",
    name: "tcp_receive_reset",
    full: "tcp:tcp_receive_reset",
};
const SEND_RESET: Hook =
    Hook { program: names::RESETS_SENT_PROGRAM, category: "tcp", name: "tcp_send_reset", full: "tcp:tcp_send_reset" };
const KFREE_SKB: Hook =
    Hook { program: names::DROPS_PROGRAM, category: "skb", name: "kfree_skb", full: "skb:kfree_skb" };
const WAKEUP: Hook =
    Hook { program: names::RUNQ_WAKEUP_PROGRAM, category: "sched", name: "sched_wakeup", full: "sched:sched_wakeup" };
const WAKEUP_NEW: Hook = Hook {
    program: names::RUNQ_WAKEUP_NEW_PROGRAM,
    category: "sched",
    name: "sched_wakeup_new",
    full: "sched:sched_wakeup_new",
};
const SWITCH: Hook =
    Hook { program: names::RUNQ_SWITCH_PROGRAM, category: "sched", name: "sched_switch", full: "sched:sched_switch" };

impl Hook {
    /// The tracepoint's format file text.
    fn format(&self, tracefs: &Path) -> Result<String, Unavailable> {
        let path = tracefs::format_path(tracefs, self.category, self.name);
        fs::read_to_string(&path).map_err(|err| {
            let detail = format!("{}: {err}", path.display());
            if err.kind() == io::ErrorKind::NotFound {
                Unavailable::TracepointMissing { tracepoint: self.full, detail }
            } else {
                Unavailable::NoTracefs { detail }
            }
        })
    }

    /// The layout `parse` finds in the format file.
    fn layout<T>(&self, tracefs: &Path, parse: impl FnOnce(&str) -> Result<T, String>) -> Result<T, Unavailable> {
        parse(&self.format(tracefs)?).map_err(|detail| Unavailable::TracepointLayout { tracepoint: self.full, detail })
    }

    /// Load (verify) and attach the program.
    fn attach(&self, ebpf: &mut Ebpf) -> Result<(), Unavailable> {
        let program = self.program;
        let tracepoint: &mut TracePoint = ebpf
            .program_mut(program)
            .ok_or(Unavailable::MissingFromObject { item: program })?
            .try_into()
            .map_err(|source| Unavailable::Program { program, source })?;
        tracepoint.load().map_err(|source| Unavailable::Program { program, source })?;
        tracepoint.attach(self.category, self.name).map_err(|source| Unavailable::Program { program, source })?;
        Ok(())
    }
}

/// Loaded and attached probes; dropping detaches them and frees their maps.
#[derive(Debug)]
pub struct Probes {
    /// Owns the programs and their links (attachment lives as long as this).
    ebpf: Ebpf,
    /// The loader's process, for `/proc/<tgid>/…`.
    tgid: u32,
    /// Programs loaded and attached (their `recursion_misses` count as lost).
    attached: Vec<&'static str>,
    /// Probe name → `"ok"` or why not.
    availability: BTreeMap<String, String>,
    tcp_states: TcpStatesReader,
    connect_latency: ConnectLatencyReader,
    sock_events: SockEventsReader,
    drops: DropsReader,
    runqueue: RunqueueReader,
    tls_handshakes: TlsHandshakesReader,
    lost: counters::LostCounters,
    /// Runs of the busy programs (`runs::*`), the denominator of their recursion misses.
    runs: counters::LostCounters,
    /// Each attached program's `recursion_misses` at the last [`Probes::reset`] (the kernel's
    /// counter cannot be zeroed).
    misses_at_reset: BTreeMap<&'static str, u64>,
    series: Series,
    /// True when start-up found tracefs unmounted and mounted it.
    mounted_tracefs: bool,
}

/// The per-second series and what it needs to compute deltas.
#[derive(Debug)]
struct Series {
    started: Instant,
    samples: VecDeque<ProbeSample>,
    dropped: u64,
    previous: Option<Cumulative>,
    max_live_time_wait: Option<u64>,
    max_port_ratio: Option<f64>,
    /// The loader's entries into TIME_WAIT of the last [`TIME_WAIT_SECONDS`] samples.
    recent_entries: VecDeque<u64>,
    max_own_time_wait: Option<u64>,
    max_own_port_ratio: Option<f64>,
}

/// Linux keeps a socket in TIME_WAIT for 60 s (`TCP_TIMEWAIT_LEN`, not tunable).
const TIME_WAIT_SECONDS: usize = 60;

impl Series {
    fn new() -> Series {
        Series {
            started: Instant::now(),
            samples: VecDeque::new(),
            dropped: 0,
            previous: None,
            max_live_time_wait: None,
            max_port_ratio: None,
            recent_entries: VecDeque::with_capacity(TIME_WAIT_SECONDS),
            max_own_time_wait: None,
            max_own_port_ratio: None,
        }
    }

    /// The loader's own live TIME_WAIT now: its entries of the last 60 s (plus `since_last`,
    /// not sampled yet), at most the namespace's `live` count.
    fn own_time_wait(&self, since_last: u64, live: Option<u64>) -> u64 {
        let entries = self.recent_entries.iter().sum::<u64>() + since_last;
        live.map_or(entries, |live| entries.min(live))
    }
}

/// Cumulative counters at one sample.
#[derive(Debug, Clone, Default)]
struct Cumulative {
    connects: u64,
    failed_connects: u64,
    time_wait_entries: u64,
    sock_events: SockEvents,
    drops: u64,
    runqueue: LatencyHistogram,
    tls_handshakes: u64,
    lost: u64,
}

impl Probes {
    /// Load and attach the probes, filtered to process `tgid` (the loader's
    /// `std::process::id()`; all its threads share it). Fails only when no probe can run;
    /// the error is then always an [`Unavailable`]: `err.downcast_ref::<Unavailable>()`
    /// gives the reason. Probes that could not start are in [`Probes::availability`].
    pub fn start(tgid: u32) -> anyhow::Result<Probes> {
        Ok(Self::try_start(tgid)?)
    }

    /// [`Probes::start`] with the typed error.
    pub fn try_start(tgid: u32) -> Result<Probes, Unavailable> {
        if OBJECT.is_empty() {
            return Err(Unavailable::NoObject);
        }
        privilege::check().map_err(|detail| Unavailable::NotPrivileged { detail })?;
        let Tracefs { root, mounted_now } =
            tracefs::find_or_mount().map_err(|detail| Unavailable::NoTracefs { detail })?;

        // Each tracepoint's layout from the running kernel; a failure disables its probe only.
        let set_state = TCP_STATES.layout(&root, tracefs::set_state_layout);
        let retransmit = RETRANSMIT.layout(&root, |f| tracefs::sock_event_layout(f, true));
        let receive_reset = RECEIVE_RESET.layout(&root, |f| tracefs::sock_event_layout(f, false));
        let send_reset = SEND_RESET.layout(&root, |f| tracefs::sock_event_layout(f, false));
        let kfree_skb_format = KFREE_SKB.format(&root);
        let kfree_skb = KFREE_SKB.layout(&root, tracefs::kfree_skb_layout);
        let wakeup = WAKEUP.layout(&root, tracefs::sched_wakeup_layout);
        let switch = SWITCH.layout(&root, tracefs::sched_switch_layout);

        let mut loader = EbpfLoader::new();
        loader.override_global(names::TARGET_TGID, &tgid, true);
        if let Ok(layout) = &set_state {
            loader.override_global(names::SET_STATE_LAYOUT, layout, true);
        }
        if let Ok(layout) = &retransmit {
            loader.override_global(names::RETRANSMIT_LAYOUT, layout, true);
        }
        if let Ok(layout) = &receive_reset {
            loader.override_global(names::RECEIVE_RESET_LAYOUT, layout, true);
        }
        if let Ok(layout) = &send_reset {
            loader.override_global(names::SEND_RESET_LAYOUT, layout, true);
        }
        if let Ok(layout) = &kfree_skb {
            loader.override_global(names::KFREE_SKB_LAYOUT, layout, true);
        }
        if let Ok(layout) = &wakeup {
            loader.override_global(names::WAKEUP_LAYOUT, layout, true);
        }
        if let Ok(layout) = &switch {
            loader.override_global(names::SWITCH_LAYOUT, layout, true);
        }
        let mut ebpf = loader.load(OBJECT).map_err(Unavailable::Load)?;

        let mut availability = BTreeMap::new();
        let mut attached = Vec::new();
        let mut first_error = None;
        let record = |availability: &mut BTreeMap<String, String>,
                      probe: &str,
                      result: Result<(), Unavailable>,
                      first_error: &mut Option<Unavailable>| {
            let state = match result {
                Ok(()) => AVAILABLE.to_owned(),
                Err(err) => {
                    let text = err.to_string();
                    first_error.get_or_insert(err);
                    text
                }
            };
            availability.insert(probe.to_owned(), state);
        };

        // tcp_states first: every socket probe filters on the sockets it registers.
        let tcp_states = set_state.and_then(|_| TCP_STATES.attach(&mut ebpf));
        let sockets_followed: Result<(), String> = tcp_states.as_ref().map(|_| ()).map_err(ToString::to_string);
        if tcp_states.is_ok() {
            attached.push(TCP_STATES.program);
        }
        let needs_tcp_states = |why: &String| Unavailable::Dependency { probe: probe::TCP_STATES, detail: why.clone() };
        for probe in [probe::CONNECT_LATENCY, probe::TIME_WAIT] {
            let result = sockets_followed.as_ref().map(|_| ()).map_err(needs_tcp_states);
            record(&mut availability, probe, result, &mut first_error);
        }
        record(&mut availability, probe::TCP_STATES, tcp_states, &mut first_error);

        let socket_probes = [
            (probe::SYN_RETRANSMITS, RETRANSMIT, retransmit.map(drop)),
            (probe::RESETS_RECEIVED, RECEIVE_RESET, receive_reset.map(drop)),
            (probe::RESETS_SENT, SEND_RESET, send_reset.map(drop)),
            (probe::DROPS, KFREE_SKB, kfree_skb.map(drop)),
        ];
        for (probe, hook, layout) in socket_probes {
            let result = match &sockets_followed {
                Err(why) => Err(needs_tcp_states(why)),
                Ok(()) => layout.and_then(|()| hook.attach(&mut ebpf)),
            };
            if result.is_ok() {
                attached.push(hook.program);
            }
            record(&mut availability, probe, result, &mut first_error);
        }

        // Run-queue delay: the end hook first, so a start is never stored without an end.
        let runqueue = switch.map(drop).and_then(|()| SWITCH.attach(&mut ebpf)).and_then(|()| {
            attached.push(SWITCH.program);
            wakeup.map(drop).and_then(|()| WAKEUP.attach(&mut ebpf))
        });
        if runqueue.is_ok() {
            attached.push(WAKEUP.program);
            // Optional: without it a new thread's first run waits are missed, nothing else.
            match WAKEUP_NEW.attach(&mut ebpf) {
                Ok(()) => attached.push(WAKEUP_NEW.program),
                Err(err) => {
                    availability.insert(format!("{}.sched_wakeup_new", probe::RUNQUEUE), err.to_string());
                }
            }
            if let Err(detail) = runqueue::seed_threads(&mut ebpf, tgid) {
                availability.insert(format!("{}.seed_threads", probe::RUNQUEUE), detail);
            }
        }
        record(&mut availability, probe::RUNQUEUE, runqueue, &mut first_error);

        // TLS handshakes: uprobes on this binary, independent of every tracepoint.
        let tls = tls_handshakes::attach(&mut ebpf, tgid);
        if tls.is_ok() {
            attached.extend([names::TLS_END_PROGRAM, names::TLS_START_PROGRAM]);
        }
        record(&mut availability, probe::TLS_HANDSHAKES, tls, &mut first_error);

        if attached.is_empty() {
            return Err(first_error.unwrap_or(Unavailable::MissingFromObject { item: "any program" }));
        }

        let reason_names = kfree_skb_format.map(|f| tracefs::symbolic_names(&f, "reason")).unwrap_or_default();
        Ok(Probes {
            tcp_states: TcpStatesReader::take(&mut ebpf)?,
            connect_latency: ConnectLatencyReader::take(&mut ebpf)?,
            sock_events: SockEventsReader::take(&mut ebpf)?,
            drops: DropsReader::take(&mut ebpf, reason_names)?,
            runqueue: RunqueueReader::take(&mut ebpf)?,
            tls_handshakes: TlsHandshakesReader::take(&mut ebpf)?,
            lost: counters::LostCounters(counters::take_per_cpu_array(&mut ebpf, names::LOST)?),
            runs: counters::LostCounters(counters::take_per_cpu_array(&mut ebpf, names::PROGRAM_RUNS)?),
            ebpf,
            tgid,
            attached,
            availability,
            misses_at_reset: BTreeMap::new(),
            series: Series::new(),
            mounted_tracefs: mounted_now,
        })
    }

    /// Start counting again from zero, as if just loaded — for the runs of `--repeat`, which
    /// keep one set of probes (loaded while root) instead of loading again per run. Zeroes
    /// every count and histogram and the lost counters, takes the programs'
    /// `recursion_misses` as the new baseline and empties the series; the followed sockets
    /// and threads (state, not counts) stay.
    pub fn reset(&mut self) -> anyhow::Result<()> {
        self.tcp_states.reset()?;
        self.connect_latency.reset()?;
        self.sock_events.reset()?;
        self.drops.reset()?;
        self.runqueue.reset()?;
        self.tls_handshakes.reset()?;
        counters::zero(&mut self.lost.0)?;
        counters::zero(&mut self.runs.0)?;
        let mut misses = BTreeMap::new();
        for &program in &self.attached {
            misses.insert(program, self.recursion_misses(program)?);
        }
        self.misses_at_reset = misses;
        self.series = Series::new();
        Ok(())
    }

    /// Mark `tids` as the run's shard threads: their run-queue delay is kept apart from the
    /// other threads' from now on. A failure leaves them counted with the others.
    pub fn mark_shards(&mut self, tids: &[u32]) -> Result<(), String> {
        runqueue::mark_shards(&mut self.ebpf, tids)
    }

    /// Whether start-up had to mount tracefs (it stays mounted), for the run's notes.
    pub fn mounted_tracefs(&self) -> bool {
        self.mounted_tracefs
    }

    /// Each probe's state (names in [`probe`]): [`AVAILABLE`] or why it is not running.
    /// Extra keys `runqueue.sched_wakeup_new` / `runqueue.seed_threads` note partial losses.
    pub fn availability(&self) -> &BTreeMap<String, String> {
        &self.availability
    }

    /// Whether `probe` (a name in [`probe`]) is running.
    pub fn is_available(&self, probe: &str) -> bool {
        self.availability.get(probe).is_some_and(|state| state == AVAILABLE)
    }

    /// TCP state transitions of the loader's sockets since start, `"OLD->NEW" → count`
    /// (only non-zero entries; names as in the kernel without `TCP_`: `"SYN_SENT->ESTABLISHED"`).
    pub fn tcp_states(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        Ok(self.tcp_states.transitions()?)
    }

    /// Everything the probes measured since start (see [`ProbeReadings`]). Reads every map
    /// and, for the live TIME_WAIT and port figures, `/proc` once more (so the maxima include
    /// this instant even if [`Probes::sample`] was never called).
    pub fn readings(&self) -> anyhow::Result<ProbeReadings> {
        let transitions = self.tcp_states.read()?;
        let connect = self.connect_latency.read()?;
        let events = self.sock_events.read()?;
        let runqueue = self.runqueue.read()?;
        let runqueue_other = self.runqueue.read_other()?;
        let tls_handshakes = self.tls_handshakes.read()?;
        let lost_by_reason = self.lost_by_reason()?;
        let live_now = time_wait::live_time_wait(self.tgid).ok();
        // At the end of a run the loader has no socket open: its share is its TIME_WAIT.
        let ports_now = time_wait::ephemeral_ports(self.tgid, 0).ok();
        let since_last = transitions
            .time_wait_entries()
            .saturating_sub(self.series.previous.as_ref().map_or(0, |p| p.time_wait_entries));
        let own_now = self.series.own_time_wait(since_last, live_now);
        Ok(ProbeReadings {
            connect_ms: ConnectMs::new(&connect, transitions.failed_connects()),
            syn_retransmits: events.syn_retransmits,
            retransmits: events.retransmits,
            resets: Resets { sent: events.resets_sent, received: events.resets_received },
            time_wait: TimeWait {
                entries: transitions.time_wait_entries(),
                max_live: max_option(self.series.max_own_time_wait, Some(own_now)),
                host_max_live: max_option(self.series.max_live_time_wait, live_now),
            },
            ephemeral_ports_max_ratio: max_option(
                self.series.max_own_port_ratio,
                ports_now.map(|p| p.own_ratio(own_now)),
            ),
            host_ephemeral_ports_max_ratio: max_option(self.series.max_port_ratio, ports_now.map(|p| p.ratio)),
            runqueue_us: RunqueueUs::new(&runqueue),
            runqueue_other_us: RunqueueUs::new(&runqueue_other),
            drops: self.drops.read()?,
            tls_handshakes,
            tcp_states: transitions.named(),
            lost: lost_by_reason.values().fold(0u64, |total, &n| total.saturating_add(n)),
            loss_share: self.loss_share(&lost_by_reason, runqueue.count + runqueue_other.count, &transitions)?,
            lost_by_reason: lost_by_reason.into_iter().map(|(reason, n)| (reason.to_owned(), n)).collect(),
            availability: self.availability.clone(),
            connect_histogram: connect,
            runqueue_histogram: runqueue,
            runqueue_other_histogram: runqueue_other,
        })
    }

    /// Take one sample of the per-second series: what the counters did since the previous
    /// call, live TIME_WAIT and ephemeral-port use now, given the loader's open sockets now
    /// (`own_open`). Call once a second from the run loop; costs a few map reads and two small
    /// `/proc` files. Never fails: a figure that cannot be read is `None` (or 0 for a counter)
    /// in the sample.
    pub fn sample(&mut self, own_open: u64) {
        let now = self.cumulative();
        let previous = self.series.previous.take().unwrap_or_default();
        let live = time_wait::live_time_wait(self.tgid).ok();
        let ports = time_wait::ephemeral_ports(self.tgid, own_open).ok();
        let interval_runqueue = now.runqueue.since(&previous.runqueue);
        let entries = now.time_wait_entries.saturating_sub(previous.time_wait_entries);
        let own_time_wait = self.series.own_time_wait(entries, live);
        let own_ports = ports.map(|p| p.own_ratio(own_time_wait));
        let sample = ProbeSample {
            elapsed_s: self.series.started.elapsed().as_secs_f64(),
            connects: now.connects.saturating_sub(previous.connects),
            failed_connects: now.failed_connects.saturating_sub(previous.failed_connects),
            time_wait_entries: entries,
            time_wait_live: live,
            time_wait_own: Some(own_time_wait),
            ephemeral_ports_in_use: ports.map(|p| p.in_use),
            ephemeral_ports_ratio: ports.map(|p| p.ratio),
            own_ports_ratio: own_ports,
            syn_retransmits: now.sock_events.syn_retransmits.saturating_sub(previous.sock_events.syn_retransmits),
            resets_sent: now.sock_events.resets_sent.saturating_sub(previous.sock_events.resets_sent),
            resets_received: now.sock_events.resets_received.saturating_sub(previous.sock_events.resets_received),
            drops: now.drops.saturating_sub(previous.drops),
            runqueue_count: interval_runqueue.count,
            runqueue_p99_us: interval_runqueue.p99_us(),
            runqueue_max_us: interval_runqueue.max_us(),
            tls_handshakes: now.tls_handshakes.saturating_sub(previous.tls_handshakes),
            lost: now.lost.saturating_sub(previous.lost),
        };
        self.series.max_live_time_wait = max_option(self.series.max_live_time_wait, live);
        self.series.max_port_ratio = max_option(self.series.max_port_ratio, ports.map(|p| p.ratio));
        self.series.max_own_time_wait = max_option(self.series.max_own_time_wait, Some(own_time_wait));
        self.series.max_own_port_ratio = max_option(self.series.max_own_port_ratio, own_ports);
        if self.series.recent_entries.len() == TIME_WAIT_SECONDS {
            self.series.recent_entries.pop_front();
        }
        self.series.recent_entries.push_back(entries);
        if self.series.samples.len() == SERIES_CAPACITY {
            self.series.samples.pop_front();
            self.series.dropped += 1;
        }
        self.series.samples.push_back(sample);
        self.series.previous = Some(now);
    }

    /// The per-second series recorded by [`Probes::sample`], oldest first (at most
    /// [`SERIES_CAPACITY`]).
    pub fn series(&self) -> impl ExactSizeIterator<Item = &ProbeSample> {
        self.series.samples.iter()
    }

    /// Samples dropped from the front of the series because it was full.
    pub fn samples_dropped(&self) -> u64 {
        self.series.dropped
    }

    /// Cumulative counters now; a map that cannot be read leaves its fields at 0.
    fn cumulative(&self) -> Cumulative {
        let transitions = self.tcp_states.read().unwrap_or_default();
        Cumulative {
            connects: transitions.connects(),
            failed_connects: transitions.failed_connects(),
            time_wait_entries: transitions.time_wait_entries(),
            sock_events: self.sock_events.read().unwrap_or_default(),
            drops: self.drops.read().map(|d| d.values().sum()).unwrap_or(0),
            runqueue: self.runqueue.read().unwrap_or_default(),
            tls_handshakes: self.tls_handshakes.completed().unwrap_or(0),
            lost: self.lost(),
        }
    }

    /// Events the probes saw but could not count, by reason: the programs' own lost
    /// counters plus `recursion_misses`, runs the kernel skipped because another BPF
    /// program was already running on that CPU (from `/proc/self/fdinfo`, Linux 5.12+),
    /// summed over every attached program.
    pub fn lost_by_reason(&self) -> anyhow::Result<BTreeMap<&'static str, u64>> {
        let counts = read_sums(&self.lost.0, lost_reason::SLOTS)?;
        let mut by_reason: BTreeMap<_, _> = lost_reason::NAMES.into_iter().zip(counts).collect();
        let mut misses = 0u64;
        for program in &self.attached {
            let since_reset =
                self.recursion_misses(program)?.saturating_sub(self.misses_at_reset.get(program).copied().unwrap_or(0));
            misses = misses.saturating_add(since_reset);
        }
        by_reason.insert("recursion_misses", misses);
        Ok(by_reason)
    }

    /// How much of what the probes should have counted they lost, by what it hides: for the
    /// run-queue rule, the share of scheduler events the kernel skipped (`recursion_misses`
    /// of the scheduler programs over their runs) or of the loader's waits with no room in
    /// the thread maps; for the socket rules, the same for `sock:inet_sock_set_state`.
    fn loss_share(
        &self,
        by_reason: &BTreeMap<&'static str, u64>,
        runqueue_events: u64,
        transitions: &tcp_states::Transitions,
    ) -> anyhow::Result<LossShare> {
        let runs = read_sums(&self.runs.0, probes_ebpf::runs::SLOTS)?;
        let misses = |programs: &[&'static str]| -> anyhow::Result<u64> {
            let mut n = 0u64;
            for &p in programs.iter().filter(|p| self.attached.contains(p)) {
                n += self.recursion_misses(p)?.saturating_sub(self.misses_at_reset.get(p).copied().unwrap_or(0));
            }
            Ok(n)
        };
        let share = |lost: u64, seen: u64| if lost == 0 { 0.0 } else { lost as f64 / (seen + lost).max(1) as f64 };
        let sched_runs = runs[probes_ebpf::runs::RUNQ_WAKEUP as usize] + runs[probes_ebpf::runs::RUNQ_SWITCH as usize];
        let sched_missed =
            misses(&[names::RUNQ_WAKEUP_PROGRAM, names::RUNQ_WAKEUP_NEW_PROGRAM, names::RUNQ_SWITCH_PROGRAM])?;
        let tcp_missed = misses(&[names::TCP_STATES_PROGRAM])?;
        let get = |reason: &str| by_reason.get(reason).copied().unwrap_or(0);
        Ok(LossShare {
            runqueue: share(sched_missed, sched_runs).max(share(get("tid_map_full"), runqueue_events)),
            sockets: share(tcp_missed, runs[probes_ebpf::runs::TCP_STATES as usize])
                .max(share(get("sock_map_full"), transitions.named().values().sum())),
        })
    }

    /// Total of [`Probes::lost_by_reason`]; `u64::MAX` if the counters cannot be read, so a
    /// failure to read them can never pass for "nothing lost".
    pub fn lost(&self) -> u64 {
        self.lost_by_reason()
            .map(|by_reason| by_reason.values().fold(0u64, |total, &n| total.saturating_add(n)))
            .unwrap_or(u64::MAX)
    }

    /// The kernel's `recursion_misses` of a loaded program (from its fdinfo).
    fn recursion_misses(&self, program: &'static str) -> anyhow::Result<u64> {
        let fd = self
            .ebpf
            .program(program)
            .ok_or(Unavailable::MissingFromObject { item: program })?
            .fd()?
            .as_fd()
            .as_raw_fd();
        let fdinfo = fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))?;
        Ok(recursion_misses_of(&fdinfo))
    }
}

/// The larger of two optional values (`None` only if both are).
fn max_option<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b > a { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// The `recursion_misses:` line of a BPF program's `/proc/<pid>/fdinfo/<fd>`; 0 when the
/// kernel (before 5.12) does not print it.
fn recursion_misses_of(fdinfo: &str) -> u64 {
    fdinfo
        .lines()
        .find_map(|line| line.strip_prefix("recursion_misses:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_recursion_misses_from_fdinfo() {
        // A tracepoint program's fdinfo on Linux 6.18 (abridged).
        let fdinfo = "prog_type:\t5\nprog_tag:\t04350585e71ea4d3\nrun_cnt:\t0\n\
                      recursion_misses:\t7\nverified_insns:\t230\n";
        assert_eq!(recursion_misses_of(fdinfo), 7);
        assert_eq!(recursion_misses_of("prog_type:\t5\n"), 0);
    }
}
