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
/// a comment pointing here; `loader/tests/probes.rs` proves they match by loading the object.
pub mod names {
    /// The TCP state-transition program (`sock:inet_sock_set_state`).
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
    /// Per-CPU array of `u64`, [`TRANSITION_SLOTS`](crate::TRANSITION_SLOTS) entries indexed by
    /// [`transition_index`](crate::transition_index): transition counts of loader sockets.
    pub const TCP_STATE_COUNTS: &str = "TCP_STATE_COUNTS";
    /// Per-CPU array of `u64`, [`lost::SLOTS`](crate::lost::SLOTS) entries: events the
    /// program saw but could not account for, by [`lost`](crate::lost) reason.
    pub const TCP_STATE_LOST: &str = "TCP_STATE_LOST";
}

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
    if old < STATE_SLOTS && new < STATE_SLOTS {
        Some(old * STATE_SLOTS + new)
    } else {
        None
    }
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

/// Reasons an event was seen but not counted: slots of the `TCP_STATE_LOST` array.
pub mod lost {
    /// A loader socket could not be inserted into `LOADER_SOCKS` (map full or kernel error);
    /// its later transitions are missing from the counts.
    pub const SOCK_MAP_FULL: u32 = 0;
    /// A transition of a loader socket involved a state `>= STATE_SLOTS`.
    pub const STATE_OUT_OF_RANGE: u32 = 1;
    /// Reading a tracepoint field failed.
    pub const READ_FAILED: u32 = 2;
    /// Number of reasons (entries of the array).
    pub const SLOTS: u32 = 3;
    /// Name of each reason, by slot.
    pub const NAMES: [&str; SLOTS as usize] =
        ["sock_map_full", "state_out_of_range", "read_failed"];
}

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
    pub const LINUX_5_1: Self = Self {
        skaddr: 8,
        oldstate: 16,
        newstate: 20,
        protocol: 30,
        protocol_size: 2,
    };
}

// No implicit padding: five u32 fields, 20 bytes, alignment 4.
const _: () = assert!(core::mem::size_of::<SetStateLayout>() == 20);

// SAFETY: `SetStateLayout` is `#[repr(C)]`, `Copy`, made only of `u32`s and has no padding,
// so every bit pattern is valid and its bytes are fully initialised.
#[cfg(feature = "user")]
unsafe impl aya::Pod for SetStateLayout {}

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
    fn every_kernel_state_has_a_name() {
        for state in 1..=tcp_state::BOUND_INACTIVE {
            assert!(state_name(state).is_some(), "state {state}");
        }
        assert_eq!(state_name(0), None);
        assert_eq!(state_name(tcp_state::SYN_SENT), Some("SYN_SENT"));
    }
}
