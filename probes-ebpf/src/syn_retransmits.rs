//! `syn_retransmits`: retransmits of the loader's sockets, SYN retransmits apart.
//!
//! Hook: classic tracepoint `tcp:tcp_retransmit_skb` (system-wide). The record carries the
//! socket (`skaddr`) and its state, so the filter is a lookup in `LOADER_SOCKS` (filled by
//! `tcp_states` on the loader's connects). A retransmit while the socket is in SYN_SENT is a
//! SYN that got no answer: dropped by the network or by a full target backlog.
//!
//! Fields (6.18): `skaddr` ptr @16, `state` int @24; user space sets `RETRANSMIT_LAYOUT`
//! from the running kernel's format file.

use aya_ebpf::{Global, programs::TracePointContext};
use probes_ebpf::{SockEventLayout, sock_event, tcp_state};

use crate::{
    common::{bump, read},
    resets::SOCK_EVENTS,
    tcp_states::LOADER_SOCKS,
};

/// `names::RETRANSMIT_LAYOUT`.
#[unsafe(no_mangle)]
static RETRANSMIT_LAYOUT: Global<SockEventLayout> = Global::new(SockEventLayout::RETRANSMIT_6_18);

tracepoint_passing_on! {
    /// `names::SYN_RETRANSMITS_PROGRAM`, attached to `tcp:tcp_retransmit_skb`.
    fn syn_retransmits(ctx) {
        let _ = try_syn_retransmits(&ctx);
    }
}

fn try_syn_retransmits(ctx: &TracePointContext) -> Result<(), u32> {
    let layout = RETRANSMIT_LAYOUT.load();
    let skaddr = read::<u64>(ctx, layout.skaddr)?;
    if LOADER_SOCKS.get_ptr(skaddr).is_none() {
        return Ok(());
    }
    bump(&SOCK_EVENTS, sock_event::RETRANSMITS);
    if read::<i32>(ctx, layout.state)? as u32 == tcp_state::SYN_SENT {
        bump(&SOCK_EVENTS, sock_event::SYN_RETRANSMITS);
    }
    Ok(())
}
