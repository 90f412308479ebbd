//! `drops`: packets the kernel dropped on the loader's sockets, by `enum skb_drop_reason`.
//!
//! Hook: classic tracepoint `skb:kfree_skb` (system-wide, every dropped packet on the host).
//! Since Linux 6.11 its record carries `rx_sk`, the socket a received packet was for; a drop
//! counts when `rx_sk` is in `LOADER_SOCKS`, or in `CLOSED_SOCKS` (a socket the drop itself
//! just closed: data arriving after `close()` is dropped as TCP_ABORT_ON_DATA after the
//! socket went to CLOSE). Drops before a socket is looked up (netfilter,
//! no route, NO_SOCKET) and drops on the send side (`skb->sk`, which would need an
//! `sk_buff` offset from BTF) are not attributed to the loader. User space marks the probe
//! unavailable on kernels whose record has no `rx_sk`.
//!
//! Fields (6.18): `rx_sk` ptr @24, `reason` enum (4 bytes) @36. Reason names come from the
//! format file's `print fmt` (user space).

use aya_ebpf::{Global, macros::map, maps::PerCpuArray, programs::TracePointContext};
use aya_log_ebpf::debug;
use probes_ebpf::{DROP_REASON_SLOTS, KfreeSkbLayout, lost};

use crate::{
    common::{bump, read},
    tcp_states::{CLOSED_SOCKS, LOADER_SOCKS},
};

/// `names::KFREE_SKB_LAYOUT`.
#[unsafe(no_mangle)]
static KFREE_SKB_LAYOUT: Global<KfreeSkbLayout> = Global::new(KfreeSkbLayout::LINUX_6_18);

/// `names::DROP_COUNTS`: drops on loader sockets by reason.
#[map]
static DROP_COUNTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(DROP_REASON_SLOTS, 0);

tracepoint_passing_on! {
    /// `names::DROPS_PROGRAM`, attached to `skb:kfree_skb`.
    fn drops(ctx) {
        let _ = try_drops(&ctx);
    }
}

fn try_drops(ctx: &TracePointContext) -> Result<(), u32> {
    let layout = KFREE_SKB_LAYOUT.load();
    let rx_sk = read::<u64>(ctx, layout.rx_sk)?;
    if rx_sk == 0 || (LOADER_SOCKS.get_ptr(rx_sk).is_none() && CLOSED_SOCKS.get_ptr(rx_sk).is_none()) {
        return Ok(());
    }
    let reason = read::<u32>(ctx, layout.reason)?;
    if reason < DROP_REASON_SLOTS {
        bump(&DROP_COUNTS, reason);
    } else {
        crate::common::lost(lost::DROP_REASON_OUT_OF_RANGE);
        debug!(ctx, "lost drop_reason_out_of_range: drop reason {} on socket {:x} is not counted", reason, rx_sk);
    }
    Ok(())
}
