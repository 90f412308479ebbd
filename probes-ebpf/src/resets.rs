//! `resets_received` and `resets_sent`: TCP resets on the loader's sockets, by side.
//!
//! Hooks: classic tracepoints `tcp:tcp_receive_reset` (fires in `tcp_reset()` before the
//! socket goes to CLOSE, so `LOADER_SOCKS` still has it; this also catches a refused connect:
//! the RST answering our SYN) and `tcp:tcp_send_reset`. A reset the loader sends on
//! `close()` with unread data or `SO_LINGER 0` is traced *after* the socket's CLOSE
//! transition (`__tcp_close` / `tcp_disconnect` set CLOSE first), so the sent side also looks
//! in `CLOSED_SOCKS`, the LRU of recently closed loader sockets. Resets sent without a socket
//! (`skaddr == NULL`: a packet for no socket) are nobody's and not counted.
//!
//! Fields (6.18): receive_reset `skaddr` @8; send_reset `skaddr` @16, `state` @24 (unused).

use aya_ebpf::{Global, macros::map, maps::PerCpuArray, programs::TracePointContext};
use probes_ebpf::{SockEventLayout, sock_event};

use crate::{
    common::{bump, read},
    tcp_states::{CLOSED_SOCKS, LOADER_SOCKS},
};

/// `names::SOCK_EVENTS`: retransmit and reset counters of loader sockets, `sock_event::*`.
#[map]
pub(crate) static SOCK_EVENTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(sock_event::SLOTS, 0);

/// `names::RECEIVE_RESET_LAYOUT`.
#[unsafe(no_mangle)]
static RECEIVE_RESET_LAYOUT: Global<SockEventLayout> = Global::new(SockEventLayout::RECEIVE_RESET_6_18);

/// `names::SEND_RESET_LAYOUT`.
#[unsafe(no_mangle)]
static SEND_RESET_LAYOUT: Global<SockEventLayout> = Global::new(SockEventLayout::SEND_RESET_6_18);

tracepoint_passing_on! {
    /// `names::RESETS_RECEIVED_PROGRAM`, attached to `tcp:tcp_receive_reset`.
    fn resets_received(ctx) {
        let _ = try_resets_received(&ctx);
    }
}

fn try_resets_received(ctx: &TracePointContext) -> Result<(), u32> {
    let skaddr = read::<u64>(ctx, RECEIVE_RESET_LAYOUT.load().skaddr)?;
    if LOADER_SOCKS.get_ptr(skaddr).is_some() {
        bump(&SOCK_EVENTS, sock_event::RESETS_RECEIVED);
    }
    Ok(())
}

tracepoint_passing_on! {
    /// `names::RESETS_SENT_PROGRAM`, attached to `tcp:tcp_send_reset`.
    fn resets_sent(ctx) {
        let _ = try_resets_sent(&ctx);
    }
}

fn try_resets_sent(ctx: &TracePointContext) -> Result<(), u32> {
    let skaddr = read::<u64>(ctx, SEND_RESET_LAYOUT.load().skaddr)?;
    if skaddr == 0 {
        return Ok(());
    }
    if LOADER_SOCKS.get_ptr(skaddr).is_some() || CLOSED_SOCKS.get_ptr(skaddr).is_some() {
        bump(&SOCK_EVENTS, sock_event::RESETS_SENT);
    }
    Ok(())
}
