//! What loader's kernel programs and its user space agree on: map, global and program names,
//! TCP state numbers and names, the layout of the transition counters, and the
//! `#[repr(C)]` values that cross the boundary.
//!
//! The kernel programs live in the `probes` binary of this package (`src/main.rs`, built for
//! `bpfel-unknown-none` by `loader/build.rs`); their reader lives in `loader::probes`. This
//! crate holds no logic beyond index arithmetic, so both sides can depend on it: it is
//! `no_std`, and the [`aya::Pod`] impls user space needs come only with the `user` feature.
//!
//! Layout rule for shared values: `#[repr(C)]`, fields ordered so there is no implicit
//! padding (the verifier rejects reads of uninitialised padding on the stack, and user space
//! must see the same bytes).

#![cfg_attr(not(test), no_std)]
#![deny(missing_docs)]

/// Names of the objects in the eBPF ELF, as user space looks them up.
///
/// The kernel side cannot use these constants (the `#[map]` and `#[tracepoint]` macros take
/// the static's / function's own name), so each kernel item carries the same identifier and
/// a comment pointing here; `tests/probes.rs` proves they match by loading the object.
pub mod names {
    /// The TCP state-transition program (`sock:inet_sock_set_state`); also records connect
    /// latency (SYN_SENT → ESTABLISHED) and keeps [`LOADER_SOCKS`] for every other socket probe.
    pub const TCP_STATES_PROGRAM: &str = "tcp_states";
    /// Tracepoint category of [`TCP_STATES_PROGRAM`].
    pub const TCP_STATES_CATEGORY: &str = "sock";
    /// Tracepoint name of [`TCP_STATES_PROGRAM`].
    pub const TCP_STATES_TRACEPOINT: &str = "inet_sock_set_state";
    /// Global (`u32`): the loader's tgid; only sockets it connects are followed.
    pub const TARGET_TGID: &str = "TARGET_TGID";
    /// Global ([`SetStateLayout`](crate::SetStateLayout)): where the tracepoint's fields are.
    pub const SET_STATE_LAYOUT: &str = "SET_STATE_LAYOUT";
    /// Hash map `skaddr (u64) → connect start (u64, ns of bpf_ktime_get_ns)`: the loader's
    /// own sockets, inserted on CLOSE → SYN_SENT in the loader's tgid, removed on → CLOSE.
    pub const LOADER_SOCKS: &str = "LOADER_SOCKS";
    /// LRU hash map `skaddr (u64) → 0u8`: loader sockets that reached CLOSE recently. A reset
    /// the loader sends on `close()`/`SO_LINGER 0` is traced *after* the socket went to CLOSE
    /// (so after it left [`LOADER_SOCKS`]); this map still knows it. LRU: never needs cleanup.
    pub const CLOSED_SOCKS: &str = "CLOSED_SOCKS";
    /// Per-CPU array of `u64`, [`TRANSITION_SLOTS`](crate::TRANSITION_SLOTS) entries indexed by
    /// [`transition_index`](crate::transition_index): transition counts of loader sockets.
    pub const TCP_STATE_COUNTS: &str = "TCP_STATE_COUNTS";
    /// Per-CPU array of `u64`, [`hist::SLOTS`](crate::hist::SLOTS) entries: connect latency
    /// (SYN_SENT → ESTABLISHED) of loader sockets in ns, laid out as [`hist`](crate::hist).
    pub const CONNECT_LATENCY: &str = "CONNECT_LATENCY";
    /// Per-CPU array of `u64`, [`lost::SLOTS`](crate::lost::SLOTS) entries: events any
    /// program saw but could not account for, by [`lost`](crate::lost) reason.
    pub const LOST: &str = "LOST";
    /// Per-CPU array of `u64`, [`runs::SLOTS`](crate::runs::SLOTS) entries: how often each
    /// busy program ran (every event of its tracepoint, the loader's or not) — the
    /// denominator of the kernel's `recursion_misses` of that program.
    pub const PROGRAM_RUNS: &str = "PROGRAM_RUNS";

    /// `tcp:tcp_retransmit_skb` program: retransmits of loader sockets, SYNs apart.
    pub const SYN_RETRANSMITS_PROGRAM: &str = "syn_retransmits";
    /// Global ([`SockEventLayout`](crate::SockEventLayout)) of `tcp:tcp_retransmit_skb`.
    pub const RETRANSMIT_LAYOUT: &str = "RETRANSMIT_LAYOUT";
    /// `tcp:tcp_receive_reset` program: resets received on loader sockets.
    pub const RESETS_RECEIVED_PROGRAM: &str = "resets_received";
    /// Global ([`SockEventLayout`](crate::SockEventLayout)) of `tcp:tcp_receive_reset`.
    pub const RECEIVE_RESET_LAYOUT: &str = "RECEIVE_RESET_LAYOUT";
    /// `tcp:tcp_send_reset` program: resets the loader's sockets sent.
    pub const RESETS_SENT_PROGRAM: &str = "resets_sent";
    /// Global ([`SockEventLayout`](crate::SockEventLayout)) of `tcp:tcp_send_reset`.
    pub const SEND_RESET_LAYOUT: &str = "SEND_RESET_LAYOUT";
    /// Per-CPU array of `u64`, [`sock_event::SLOTS`](crate::sock_event::SLOTS) entries:
    /// retransmit and reset counts of loader sockets.
    pub const SOCK_EVENTS: &str = "SOCK_EVENTS";

    /// `skb:kfree_skb` program: packets dropped on loader sockets, by drop reason.
    pub const DROPS_PROGRAM: &str = "drops";
    /// Global ([`KfreeSkbLayout`](crate::KfreeSkbLayout)) of `skb:kfree_skb`.
    pub const KFREE_SKB_LAYOUT: &str = "KFREE_SKB_LAYOUT";
    /// Per-CPU array of `u64`, [`DROP_REASON_SLOTS`](crate::DROP_REASON_SLOTS) entries indexed
    /// by `enum skb_drop_reason`.
    pub const DROP_COUNTS: &str = "DROP_COUNTS";

    /// `tcp:tcp_probe` program: the arrival of every data segment on the connections user
    /// space registered in [`RX_SEGMENT_SOCKS`], for per-answer receive stamps.
    pub const RX_SEGMENTS_PROGRAM: &str = "rx_segments";
    /// Global ([`TcpProbeLayout`](crate::TcpProbeLayout)) of `tcp:tcp_probe`.
    pub const TCP_PROBE_LAYOUT: &str = "TCP_PROBE_LAYOUT";
    /// Hash map `socket cookie (u64) → slot (u32)` of [`RX_SEGMENTS`], kept by user space.
    pub const RX_SEGMENT_SOCKS: &str = "RX_SEGMENT_SOCKS";
    /// Memory-mapped array of [`SegmentRing`](crate::SegmentRing), one per registered
    /// connection ([`RX_SEGMENT_SLOTS`](crate::RX_SEGMENT_SLOTS) of them).
    pub const RX_SEGMENTS: &str = "RX_SEGMENTS";

    /// `sched:sched_wakeup` program: wake-up time of loader threads.
    pub const RUNQ_WAKEUP_PROGRAM: &str = "runq_wakeup";
    /// `sched:sched_wakeup_new` program: first wake-up of threads the loader creates.
    pub const RUNQ_WAKEUP_NEW_PROGRAM: &str = "runq_wakeup_new";
    /// `sched:sched_switch` program: run-queue delay of loader threads switched in; learns
    /// loader thread ids from the task switched out.
    pub const RUNQ_SWITCH_PROGRAM: &str = "runq_switch";
    /// Global ([`SchedWakeupLayout`](crate::SchedWakeupLayout)) of `sched:sched_wakeup` and
    /// `sched:sched_wakeup_new` (one format).
    pub const WAKEUP_LAYOUT: &str = "WAKEUP_LAYOUT";
    /// Global ([`SchedSwitchLayout`](crate::SchedSwitchLayout)) of `sched:sched_switch`.
    pub const SWITCH_LAYOUT: &str = "SWITCH_LAYOUT";
    /// Hash map `tid (u32) → role (u8)`: the loader's threads (seeded from
    /// `/proc/<tgid>/task` by user space, learned in the kernel at every switch-out of a
    /// loader thread) and their [`thread_role`](crate::thread_role), which user space sets for
    /// the shards.
    pub const LOADER_TIDS: &str = "LOADER_TIDS";
    /// Hash map `tid (u32) → ns`: when a loader thread became runnable.
    pub const RUNQ_START: &str = "RUNQ_START";
    /// Per-CPU array of `u64`, [`hist::SLOTS`](crate::hist::SLOTS) entries: run-queue delay
    /// of the loader's shard threads in ns, laid out as [`hist`](crate::hist).
    pub const RUNQ_LATENCY: &str = "RUNQ_LATENCY";
    /// The same for every other loader thread (the main thread, samplers, helpers).
    pub const RUNQ_LATENCY_OTHER: &str = "RUNQ_LATENCY_OTHER";

    /// uprobe on [`TLS_START_SYMBOL`]: a TLS handshake of the loader begins.
    pub const TLS_START_PROGRAM: &str = "tls_handshake_start";
    /// uprobe on [`TLS_END_SYMBOL`]: a TLS handshake of the loader ended (done or failed).
    pub const TLS_END_PROGRAM: &str = "tls_handshake_end";
    /// The loader's marker function called when a handshake begins, `extern "C"
    /// fn(handshake: u64)`; `handshake` identifies it until its end (`loader::engine::tls`).
    pub const TLS_START_SYMBOL: &str = "loader_tls_handshake_start";
    /// The marker called when a handshake ends, `extern "C" fn(handshake: u64, outcome: u32)`,
    /// `outcome` one of [`tls_outcome`](crate::tls_outcome).
    pub const TLS_END_SYMBOL: &str = "loader_tls_handshake_end";
    /// LRU hash map `handshake (u64) → ns`: handshakes begun and not ended yet. LRU, so one
    /// abandoned without an end (a connection closed at shutdown) never fills it.
    pub const TLS_STARTS: &str = "TLS_STARTS";
    /// Per-CPU array of `u64`, [`tls_event::SLOTS`](crate::tls_event::SLOTS) entries:
    /// handshakes begun, ended by outcome, ends without a start.
    pub const TLS_COUNTS: &str = "TLS_COUNTS";
    /// Per-CPU array of `u64`, [`hist::SLOTS`](crate::hist::SLOTS) entries: duration of the
    /// loader's completed handshakes (full and resumed) in ns, laid out as [`hist`](crate::hist).
    pub const TLS_HANDSHAKE_LATENCY: &str = "TLS_HANDSHAKE_LATENCY";
}

/// How a TLS handshake ended: the second argument of [`names::TLS_END_SYMBOL`].
pub mod tls_outcome {
    /// Completed with a full handshake (certificate exchanged and verified).
    pub const FULL: u32 = 0;
    /// Completed by resuming an earlier session (ticket or session id).
    pub const RESUMED: u32 = 1;
    /// Failed: refused certificate, alert, server closed or reset, timed out.
    pub const FAILED: u32 = 2;
}

/// Slots of [`names::TLS_COUNTS`].
pub mod tls_event {
    /// Handshakes begun.
    pub const STARTED: u32 = 0;
    /// Completed full handshakes.
    pub const FULL: u32 = 1;
    /// Completed resumed handshakes.
    pub const RESUMED: u32 = 2;
    /// Failed handshakes.
    pub const FAILED: u32 = 3;
    /// Ends whose start was not seen (began before the probe attached, or evicted from the
    /// LRU map): counted by outcome above, but without a duration.
    pub const UNMATCHED: u32 = 4;
    /// Number of slots.
    pub const SLOTS: u32 = 5;
}

/// Capacity of [`names::TLS_STARTS`]: handshakes in flight at once (one per connection).
pub const TLS_STARTS_CAPACITY: u32 = 65_536;

/// Kernel TCP states (`include/net/tcp_states.h`), as the tracepoint reports them.
pub mod tcp_state {
    /// `TCP_ESTABLISHED`
    pub const ESTABLISHED: u32 = 1;
    /// `TCP_SYN_SENT`
    pub const SYN_SENT: u32 = 2;
    /// `TCP_SYN_RECV`
    pub const SYN_RECV: u32 = 3;
    /// `TCP_FIN_WAIT1`
    pub const FIN_WAIT1: u32 = 4;
    /// `TCP_FIN_WAIT2`
    pub const FIN_WAIT2: u32 = 5;
    /// `TCP_TIME_WAIT` (only timewait sockets; a full socket goes FIN_WAIT2 → CLOSE)
    pub const TIME_WAIT: u32 = 6;
    /// `TCP_CLOSE`
    pub const CLOSE: u32 = 7;
    /// `TCP_CLOSE_WAIT`
    pub const CLOSE_WAIT: u32 = 8;
    /// `TCP_LAST_ACK`
    pub const LAST_ACK: u32 = 9;
    /// `TCP_LISTEN`
    pub const LISTEN: u32 = 10;
    /// `TCP_CLOSING`
    pub const CLOSING: u32 = 11;
    /// `TCP_NEW_SYN_RECV`
    pub const NEW_SYN_RECV: u32 = 12;
    /// `TCP_BOUND_INACTIVE` (Linux 6.7+)
    pub const BOUND_INACTIVE: u32 = 13;
}

/// Number of state slots per side of a transition; states at or above it are not counted
/// but reported as [`lost::STATE_OUT_OF_RANGE`]. Kernels define states up to 13.
pub const STATE_SLOTS: u32 = 16;

/// Entries of the transition counter array: one per `(old, new)` pair.
pub const TRANSITION_SLOTS: u32 = STATE_SLOTS * STATE_SLOTS;

/// Capacity of the loader-socket map. A loader holds its pool plus sockets still closing;
/// a full map is counted as [`lost::SOCK_MAP_FULL`], never silently ignored.
pub const LOADER_SOCKS_CAPACITY: u32 = 65_536;

/// `IPPROTO_TCP`: the only protocol counted (the tracepoint also fires for SCTP and MPTCP).
pub const IPPROTO_TCP: u16 = 6;

/// Slot of the counter array for the transition `old → new`, or `None` if either state is
/// outside `0..STATE_SLOTS`. Layout: `old * STATE_SLOTS + new`.
#[inline(always)]
pub const fn transition_index(old: u32, new: u32) -> Option<u32> {
    if old < STATE_SLOTS && new < STATE_SLOTS { Some(old * STATE_SLOTS + new) } else { None }
}

/// The `(old, new)` states of a counter slot; inverse of [`transition_index`].
pub const fn transition_of(index: u32) -> (u32, u32) {
    (index / STATE_SLOTS, index % STATE_SLOTS)
}

/// The kernel's name of a TCP state without the `TCP_` prefix (`"SYN_SENT"`), or `None`
/// for a number no kernel uses.
pub const fn state_name(state: u32) -> Option<&'static str> {
    Some(match state {
        tcp_state::ESTABLISHED => "ESTABLISHED",
        tcp_state::SYN_SENT => "SYN_SENT",
        tcp_state::SYN_RECV => "SYN_RECV",
        tcp_state::FIN_WAIT1 => "FIN_WAIT1",
        tcp_state::FIN_WAIT2 => "FIN_WAIT2",
        tcp_state::TIME_WAIT => "TIME_WAIT",
        tcp_state::CLOSE => "CLOSE",
        tcp_state::CLOSE_WAIT => "CLOSE_WAIT",
        tcp_state::LAST_ACK => "LAST_ACK",
        tcp_state::LISTEN => "LISTEN",
        tcp_state::CLOSING => "CLOSING",
        tcp_state::NEW_SYN_RECV => "NEW_SYN_RECV",
        tcp_state::BOUND_INACTIVE => "BOUND_INACTIVE",
        _ => return None,
    })
}

/// Capacity of [`names::CLOSED_SOCKS`]: recently closed loader sockets (LRU), enough for
/// every close of about a second at the highest connection rates seen here.
pub const CLOSED_SOCKS_CAPACITY: u32 = 16_384;

/// What a loader thread does, as [`names::LOADER_TIDS`] records it: the run-queue delay of
/// each role is kept apart (a shard's delay moves sends; the main thread's does not).
pub mod thread_role {
    /// Any loader thread not known to be a shard.
    pub const OTHER: u8 = 0;
    /// A shard thread (sends and receives the load).
    pub const SHARD: u8 = 1;
}

/// Capacity of the thread maps ([`names::LOADER_TIDS`], [`names::RUNQ_START`]).
pub const TIDS_CAPACITY: u32 = 16_384;

/// Entries of [`names::DROP_COUNTS`]: `enum skb_drop_reason` values below it are counted
/// (Linux 6.18 defines 128); a larger one is [`lost::DROP_REASON_OUT_OF_RANGE`].
pub const DROP_REASON_SLOTS: u32 = 256;

/// Marks a layout field the running kernel's tracepoint does not have.
pub const NO_FIELD: u32 = u32::MAX;

/// Reasons an event was seen but not counted: slots of the [`names::LOST`] array.
pub mod lost {
    /// A loader socket could not be inserted into `LOADER_SOCKS` (map full or kernel error);
    /// its later transitions are missing from the counts.
    pub const SOCK_MAP_FULL: u32 = 0;
    /// A transition of a loader socket involved a state `>= STATE_SLOTS`.
    pub const STATE_OUT_OF_RANGE: u32 = 1;
    /// Reading a tracepoint field failed.
    pub const READ_FAILED: u32 = 2;
    /// A loader thread could not be inserted into `LOADER_TIDS` or `RUNQ_START`; a
    /// run-queue delay is missing.
    pub const TID_MAP_FULL: u32 = 3;
    /// A dropped packet's reason was `>= DROP_REASON_SLOTS`.
    pub const DROP_REASON_OUT_OF_RANGE: u32 = 4;
    /// A TLS handshake's start could not be stored (a kernel error); its duration is missing.
    pub const TLS_START_FAILED: u32 = 5;
    /// Number of reasons (entries of the array).
    pub const SLOTS: u32 = 6;
    /// Name of each reason, by slot.
    pub const NAMES: [&str; SLOTS as usize] = [
        "sock_map_full",
        "state_out_of_range",
        "read_failed",
        "tid_map_full",
        "drop_reason_out_of_range",
        "tls_start_failed",
    ];
}

/// Slots of [`names::PROGRAM_RUNS`]: the programs that fire on every event of a busy
/// tracepoint, whose runs the kernel may skip when another BPF program is running on the CPU.
pub mod runs {
    /// `tcp_states` (`sock:inet_sock_set_state`).
    pub const TCP_STATES: u32 = 0;
    /// `runq_wakeup` and `runq_wakeup_new`.
    pub const RUNQ_WAKEUP: u32 = 1;
    /// `runq_switch`.
    pub const RUNQ_SWITCH: u32 = 2;
    /// Number of slots.
    pub const SLOTS: u32 = 3;
}

/// Slots of [`names::SOCK_EVENTS`]: per-socket TCP events of loader sockets.
pub mod sock_event {
    /// SYN retransmits (`tcp_retransmit_skb` with the socket in SYN_SENT).
    pub const SYN_RETRANSMITS: u32 = 0;
    /// All retransmits of loader sockets, SYNs included.
    pub const RETRANSMITS: u32 = 1;
    /// Resets received (`tcp_receive_reset`).
    pub const RESETS_RECEIVED: u32 = 2;
    /// Resets sent (`tcp_send_reset`) by a loader socket.
    pub const RESETS_SENT: u32 = 3;
    /// Number of slots.
    pub const SLOTS: u32 = 4;
}

/// In-kernel latency histograms: log2-linear buckets of nanoseconds, four sub-buckets per
/// power of two (as HdrHistogram with 2 bits of sub-bucket precision), so a bucket's width
/// is at most 25 % of its lower bound (bcc's log2 histograms: 100 %).
///
/// Layout of the per-CPU array (`SLOTS` `u64`s): `BUCKETS` counts, then the sum of all values
/// (`SUM`) and the largest value (`MAX`, exact; per CPU, user space takes the max).
///
/// Buckets: values 0..=3 each have their own; for `v >= 4` with `e = floor(log2 v)` the index
/// is `4 * (e - 1) + ((v >> (e - 2)) & 3)`. The last bucket (`2^40 * 1.75 ns`, about 32 min)
/// also takes everything larger.
pub mod hist {
    /// Sub-buckets per power of two.
    pub const SUB_BUCKETS: u32 = 4;
    /// Largest power of two with its own buckets.
    pub const MAX_EXP: u32 = 40;
    /// Number of bucket counters.
    pub const BUCKETS: u32 = SUB_BUCKETS * MAX_EXP;
    /// Slot of the sum of values (ns).
    pub const SUM: u32 = BUCKETS;
    /// Slot of the largest value (ns).
    pub const MAX: u32 = BUCKETS + 1;
    /// Entries of the array.
    pub const SLOTS: u32 = BUCKETS + 2;

    /// `floor(log2 v)` without loops or a count-leading-zeros instruction (the bpf target
    /// has none), as bcc's `log2l`; 0 for 0 and 1.
    #[inline(always)]
    pub const fn log2(v: u64) -> u32 {
        let hi = (v >> 32) as u32;
        if hi != 0 { log2_u32(hi) + 32 } else { log2_u32(v as u32) }
    }

    #[inline(always)]
    const fn log2_u32(v: u32) -> u32 {
        let mut v = v;
        let mut r = ((v > 0xFFFF) as u32) << 4;
        v >>= r;
        let mut shift = ((v > 0xFF) as u32) << 3;
        v >>= shift;
        r |= shift;
        shift = ((v > 0xF) as u32) << 2;
        v >>= shift;
        r |= shift;
        shift = ((v > 0x3) as u32) << 1;
        v >>= shift;
        r |= shift;
        r | (v >> 1)
    }

    /// The bucket of value `v`.
    #[inline(always)]
    pub const fn index(v: u64) -> u32 {
        if v < 4 {
            return v as u32;
        }
        let e = log2(v);
        if e > MAX_EXP {
            return BUCKETS - 1;
        }
        4 * (e - 1) + ((v >> (e - 2)) & 3) as u32
    }

    /// `[low, high)` of bucket `index` (`index < BUCKETS`).
    pub const fn bounds(index: u32) -> (u64, u64) {
        if index < 4 {
            return (index as u64, index as u64 + 1);
        }
        let e = index / 4 + 1;
        let sub = (index % 4) as u64;
        ((4 + sub) << (e - 2), (5 + sub) << (e - 2))
    }
}

/// Where a socket tracepoint's fields are (`tcp:tcp_retransmit_skb`, `tcp:tcp_receive_reset`,
/// `tcp:tcp_send_reset`), in bytes from the start of the record; from the running kernel's
/// format file, set as a global before load.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockEventLayout {
    /// Offset of `const void *skaddr` (8 bytes).
    pub skaddr: u32,
    /// Offset of `int state` (4 bytes), or [`NO_FIELD`].
    pub state: u32,
}

impl SockEventLayout {
    /// `tcp:tcp_retransmit_skb` on Linux 6.18.
    pub const RETRANSMIT_6_18: Self = Self { skaddr: 16, state: 24 };
    /// `tcp:tcp_receive_reset` on Linux 6.18.
    pub const RECEIVE_RESET_6_18: Self = Self { skaddr: 8, state: NO_FIELD };
    /// `tcp:tcp_send_reset` on Linux 6.18.
    pub const SEND_RESET_6_18: Self = Self { skaddr: 16, state: 24 };
}

/// Where `tcp:tcp_probe`'s fields are.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpProbeLayout {
    /// Offset of `__u16 data_len` (the segment's payload bytes).
    pub data_len: u32,
    /// Offset of `__u64 sock_cookie`.
    pub sock_cookie: u32,
}

impl TcpProbeLayout {
    /// Linux 6.18.
    pub const LINUX_6_18: Self = Self { data_len: 76, sock_cookie: 112 };
}

/// Data segments a [`SegmentRing`] remembers (a power of two).
pub const SEGMENTS: usize = 64;

/// Connections whose segments can be recorded at once (entries of `RX_SEGMENTS`).
pub const RX_SEGMENT_SLOTS: u32 = 1024;

/// The last [`SEGMENTS`] data segments one connection received, as `tcp:tcp_probe` saw them:
/// `end[i]` is the byte count received on the connection up to and including the segment,
/// `at[i]` its arrival (`bpf_ktime_get_ns`, CLOCK_MONOTONIC), at index `n % SEGMENTS` for the
/// `n`-th segment. `count` is written last; user space reads it first.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentRing {
    /// Segments recorded since the slot was cleared.
    pub count: u64,
    /// Payload bytes received since then.
    pub bytes: u64,
    /// Cumulative byte count at each segment's end.
    pub end: [u64; SEGMENTS],
    /// Each segment's arrival, ns.
    pub at: [u64; SEGMENTS],
}

/// Where `skb:kfree_skb`'s fields are.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KfreeSkbLayout {
    /// Offset of `void *rx_sk` (8 bytes; Linux 6.11+): the socket the packet was for.
    pub rx_sk: u32,
    /// Offset of `enum skb_drop_reason reason` (4 bytes).
    pub reason: u32,
}

impl KfreeSkbLayout {
    /// Linux 6.18.
    pub const LINUX_6_18: Self = Self { rx_sk: 24, reason: 36 };
}

/// Where `sched:sched_wakeup`'s (and `sched_wakeup_new`'s) fields are.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedWakeupLayout {
    /// Offset of `pid_t pid` (4 bytes): the woken thread's id.
    pub pid: u32,
}

impl SchedWakeupLayout {
    /// Linux 6.18.
    pub const LINUX_6_18: Self = Self { pid: 24 };
}

/// Where `sched:sched_switch`'s fields are.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedSwitchLayout {
    /// Offset of `pid_t prev_pid` (4 bytes).
    pub prev_pid: u32,
    /// Offset of `long prev_state`.
    pub prev_state: u32,
    /// Size of `prev_state`: 8 (`long`) or 4.
    pub prev_state_size: u32,
    /// Offset of `pid_t next_pid` (4 bytes).
    pub next_pid: u32,
}

impl SchedSwitchLayout {
    /// Linux 6.18.
    pub const LINUX_6_18: Self = Self { prev_pid: 24, prev_state: 32, prev_state_size: 8, next_pid: 56 };
}

/// `prev_state` bits of `sched:sched_switch` that mean the task is not runnable (the
/// `TASK_REPORT` states S D T t X Z P I); a preempted task reports `TASK_REPORT_MAX` (0x100)
/// instead, and a running one 0 — both still runnable, so they are a new run-queue wait.
pub const TASK_REPORT_MASK: u64 = 0xff;

/// `prev_state` bits of a thread that exited (`X` EXIT_DEAD, `Z` EXIT_ZOMBIE).
pub const TASK_REPORT_EXITED: u64 = 0x10 | 0x20;

/// Where the fields of `sock:inet_sock_set_state` sit in the tracepoint record, in bytes
/// from the start of the record (common header included).
///
/// User space fills this from `<tracefs>/events/sock/inet_sock_set_state/format` and sets it
/// as the global [`names::SET_STATE_LAYOUT`] before load, because the layout differs between
/// kernels (before 5.1 there is no `family` and `protocol` is a `__u8` at 28; RT kernels have
/// a longer common header).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetStateLayout {
    /// Offset of `const void *skaddr` (8 bytes): the socket's kernel address, our key.
    pub skaddr: u32,
    /// Offset of `int oldstate` (4 bytes).
    pub oldstate: u32,
    /// Offset of `int newstate` (4 bytes).
    pub newstate: u32,
    /// Offset of `protocol` (`__u16` since Linux 5.1, `__u8` before).
    pub protocol: u32,
    /// Size in bytes of `protocol`: 1 or 2.
    pub protocol_size: u32,
}

impl SetStateLayout {
    /// The layout since Linux 5.1 on a non-RT kernel (checked on 6.18): the value compiled
    /// into the object, used only if user space does not override it.
    pub const LINUX_5_1: Self = Self { skaddr: 8, oldstate: 16, newstate: 20, protocol: 30, protocol_size: 2 };
}

// No implicit padding: five u32 fields, 20 bytes, alignment 4.
const _: () = assert!(core::mem::size_of::<SetStateLayout>() == 20);

// SAFETY: `SetStateLayout` is `#[repr(C)]`, `Copy`, made only of `u32`s and has no padding,
// so every bit pattern is valid and its bytes are fully initialised.
#[cfg(feature = "user")]
unsafe impl aya::Pod for SetStateLayout {}

// SAFETY: as for `SetStateLayout`: `#[repr(C)]`, `Copy`, only `u32`s, no padding.
#[cfg(feature = "user")]
unsafe impl aya::Pod for SockEventLayout {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for KfreeSkbLayout {}

#[cfg(feature = "user")]
unsafe impl aya::Pod for TcpProbeLayout {}

#[cfg(feature = "user")]
unsafe impl aya::Pod for SegmentRing {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for SchedWakeupLayout {}
// SAFETY: as above.
#[cfg(feature = "user")]
unsafe impl aya::Pod for SchedSwitchLayout {}

const _: () = assert!(core::mem::size_of::<SockEventLayout>() == 8);
const _: () = assert!(core::mem::size_of::<KfreeSkbLayout>() == 8);
const _: () = assert!(core::mem::size_of::<SchedWakeupLayout>() == 4);
const _: () = assert!(core::mem::size_of::<SchedSwitchLayout>() == 16);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_index_round_trips() {
        for old in 0..STATE_SLOTS {
            for new in 0..STATE_SLOTS {
                let index = transition_index(old, new).unwrap();
                assert!(index < TRANSITION_SLOTS);
                assert_eq!(transition_of(index), (old, new));
            }
        }
        assert_eq!(transition_index(STATE_SLOTS, 1), None);
        assert_eq!(transition_index(1, STATE_SLOTS), None);
    }

    #[test]
    fn hist_log2_matches_leading_zeros() {
        for v in [1u64, 2, 3, 4, 7, 8, 1000, 65_535, 65_536, u32::MAX as u64, 1 << 32, 1 << 40, u64::MAX] {
            assert_eq!(hist::log2(v), 63 - v.leading_zeros(), "{v}");
        }
    }

    #[test]
    fn hist_buckets_are_contiguous_and_hold_their_values() {
        let mut expected_low = 0;
        for index in 0..hist::BUCKETS {
            let (low, high) = hist::bounds(index);
            assert_eq!(low, expected_low, "bucket {index}");
            assert!(high > low);
            assert_eq!(hist::index(low), index);
            assert_eq!(hist::index(high - 1), index);
            if index >= 4 {
                assert!((high - low) * 4 <= low, "bucket {index} is wider than 25 %: {low}..{high}");
            }
            expected_low = high;
        }
        assert_eq!(hist::index(u64::MAX), hist::BUCKETS - 1);
        assert_eq!(hist::bounds(hist::index(1_000)), (896, 1_024));
    }

    #[test]
    fn every_kernel_state_has_a_name() {
        for state in 1..=tcp_state::BOUND_INACTIVE {
            assert!(state_name(state).is_some(), "state {state}");
        }
        assert_eq!(state_name(0), None);
        assert_eq!(state_name(tcp_state::SYN_SENT), Some("SYN_SENT"));
    }
}
