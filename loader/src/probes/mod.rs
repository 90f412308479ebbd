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
//! The programs report their rare conditions (a lost event and what it was) through aya-log
//! at debug level; the loader shows them at `--log-level debug` only (`kernel_log.rs`).
//!
//! What start-up does to the host: when tracefs is not mounted it mounts it on
//! `/sys/kernel/tracing` and leaves it mounted. Nothing else.
//!
//! Not here: the `/proc` and cgroup samplers that stand in when probes are unavailable
//! (the health module), judging the numbers (the verdict), and dropping root after start
//! (the run does that; readers keep working, map reads through an open fd need no privilege).
//!
//! Files, by responsibility: `attach.rs` (start-up: layouts, globals, loading, attaching
//! with per-probe fallback), `unavailable.rs` (why not), `series.rs` (the per-second series
//! and the cumulative readings), `loss.rs` (lost events and their shares), `kernel_log.rs`
//! (the programs' own log), `counters.rs` (typed map handles), one reader per probe,
//! `histogram.rs`, `readings.rs` (the value types), `tracefs.rs` (format files),
//! `privilege.rs`, `time_wait.rs` (`/proc`).

mod attach;
mod batch;
mod connect_latency;
mod counters;
mod drops;
mod histogram;
mod kernel_log;
mod loss;
mod privilege;
mod readings;
mod runqueue;
mod rx_segments;
mod series;
mod sock_events;
mod tcp_states;
mod time_wait;
mod tls_handshakes;
mod tracefs;
mod unavailable;

use std::collections::BTreeMap;

use aya::Ebpf;

use self::{
    connect_latency::ConnectLatencyReader, drops::DropsReader, runqueue::RunqueueReader, series::Series,
    sock_events::SockEventsReader, tcp_states::TcpStatesReader, tls_handshakes::TlsHandshakesReader,
};
pub use self::{
    histogram::LatencyHistogram,
    readings::{ConnectMs, LossShare, ProbeReadings, ProbeSample, Resets, RunqueueUs, TimeWait},
    sock_events::SockEvents,
    time_wait::EphemeralPorts,
    tls_handshakes::TlsHandshakes,
    unavailable::Unavailable,
};

/// The eBPF object built by `build.rs`; empty when the build had no bpf-linker (or
/// `LOADER_EBPF=skip`).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/probes"));

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
    /// The record of each segment the run's h2c connections receive (`rx_segments.rs`).
    segments: Option<std::sync::Arc<crate::engine::segments::Segments>>,
    /// The programs' own log, forwarded to the `log` facade at debug and trace only. Last,
    /// so it is dropped (and drained) after the programs detach.
    #[expect(dead_code, reason = "held for its drop, which stops the reader thread")]
    kernel_log: Option<kernel_log::KernelLog>,
}

/// Reading or zeroing the probes' maps failed: the probes are loaded, their figures are not
/// readable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// A map could not be read or written.
    #[error("probe map: {0}")]
    Map(#[from] aya::maps::MapError),
    /// A program's descriptor could not be had.
    #[error("probe program: {0}")]
    Program(#[from] aya::programs::ProgramError),
    /// The object lacks a program or map the readings need.
    #[error(transparent)]
    Missing(#[from] Unavailable),
    /// `/proc` (a program's fdinfo) or the per-CPU value count.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Probes {
    /// The segment record for the engine's per-answer receive stamps, when it attached.
    pub fn segments(&self) -> Option<std::sync::Arc<crate::engine::segments::Segments>> {
        self.segments.clone()
    }

    /// Load and attach the probes, filtered to process `tgid` (the loader's
    /// `std::process::id()`; all its threads share it). Fails only when no probe can run;
    /// the [`Unavailable`] error says why. Probes that could not start are in
    /// [`Probes::availability`].
    pub fn start(tgid: u32) -> Result<Probes, Unavailable> {
        Self::try_start(tgid, false)
    }

    /// [`Probes::start`], and with `segments` also the record of each data segment the run's
    /// h2c connections receive ([`Probes::segments`]; it runs for every TCP segment on the
    /// host, so only runs that use it attach it).
    pub fn start_with_segments(tgid: u32, segments: bool) -> Result<Probes, Unavailable> {
        Self::try_start(tgid, segments)
    }

    /// Start counting again from zero, as if just loaded — for the runs of `--repeat`, which
    /// keep one set of probes (loaded while root) instead of loading again per run. Zeroes
    /// every count and histogram and the lost counters, takes the programs'
    /// `recursion_misses` as the new baseline and empties the series; the followed sockets
    /// and threads (state, not counts) stay.
    pub fn reset(&mut self) -> Result<(), ReadError> {
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
    pub fn tcp_states(&self) -> Result<BTreeMap<String, u64>, ReadError> {
        Ok(self.tcp_states.transitions()?)
    }
}
