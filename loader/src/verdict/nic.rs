//! The load machine's NIC (`health.nic`): a loader whose own egress queue dropped or held
//! back its packets, or whose link ran near its speed, was limited by its machine's network
//! side — every latency it reports includes that queue. The loader's side, and it invalidates.

use super::{LOADER, Limits, reason};
use crate::summary::{Reason, Summary};

/// The busiest second's transmit rate at or above this share of the link speed is saturation.
pub const LINE_RATE_SHARE: f64 = 0.9;
/// A shaper that held packets back (`overlimits`) for at least this share of the packets it
/// sent was the bottleneck, not a momentary burst.
pub const OVERLIMIT_SHARE: f64 = 0.01;

/// The NIC rule: queue drops, a shaper holding back, or line rate.
pub fn judge(s: &Summary, limits: &Limits, reasons: &mut Vec<Reason>) {
    let Some(n) = &s.health.nic else { return };
    let qdisc = n.qdisc.as_deref().unwrap_or("?");
    // netem's drops and delays emulate a network on purpose (the verdict matrix's lossy
    // link): the network's story, which the retransmit and SYN rules tell.
    let emulated = qdisc == "netem";
    let mut found = Vec::new();
    if let Some(drops) = n.qdisc_drops.filter(|&d| d > 0 && !emulated) {
        found.push((drops as f64, 0.0, format!("its egress queue ({qdisc}) dropped {drops} packets")));
    }
    if let (Some(over), Some(sent)) = (n.qdisc_overlimits, n.qdisc_packets)
        && over > 0
        && !emulated
        && over as f64 >= OVERLIMIT_SHARE * sent.max(1) as f64
    {
        found.push((
            over as f64,
            OVERLIMIT_SHARE * sent as f64,
            format!("its egress queue ({qdisc}) held packets back over its rate {over} times for {sent} packets sent"),
        ));
    }
    // The capacity the user gave (a cloud instance's limit, a shaped link), else the link's.
    let capacity = limits.nic_capacity_mbps.map(|c| (c, "given")).or(n.speed_mbps.map(|c| (c, "link's")));
    if let Some((mbps, whose)) = capacity
        && let share = n.tx_bytes_max_per_s * 8.0 / (mbps * 1e6)
        && share >= LINE_RATE_SHARE
    {
        found.push((
            share,
            LINE_RATE_SHARE,
            format!(
                "it sent {:.1} Mb/s in its busiest second, {:.0} % of the {whose} {mbps:.0} Mb/s",
                n.tx_bytes_max_per_s * 8.0 / 1e6,
                share * 100.0
            ),
        ));
    }
    let Some((value, limit, _)) = found.first().cloned() else { return };
    let what: Vec<String> = found.into_iter().map(|f| f.2).collect();
    reasons.push(reason(
        "nic_saturated",
        LOADER,
        true,
        value,
        Some(limit),
        format!(
            "the load machine's NIC {} limited the loader: {} — requests waited in its own queue, so the latencies include the loader's network side; a faster link, no shaping, or more load machines",
            n.device,
            what.join("; ")
        ),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::nic::NicSummary;
    use crate::verdict::{Limits, judge as verdict};

    fn with_nic(n: NicSummary) -> Summary {
        let mut s = crate::verdict::tests::clean();
        s.health.nic = Some(n);
        s
    }

    #[test]
    fn a_shaped_or_dropping_nic_invalidates_on_the_loaders_side_and_a_quiet_one_says_nothing() {
        // A tbf of 400 kbit/s on the loader's veth at 1,000 req/s (measured here).
        let shaped = NicSummary {
            device: "veth0".into(),
            speed_mbps: Some(10_000.0),
            qdisc: Some("tbf".into()),
            qdisc_drops: Some(147),
            qdisc_overlimits: Some(4258),
            qdisc_packets: Some(1428),
            tx_utilization_max: Some(0.0),
            ..Default::default()
        };
        let v = verdict(&with_nic(shaped), &Limits::default());
        let r = v.reasons.iter().find(|r| r.code == "nic_saturated").expect("named");
        assert!(r.invalidates && r.side == LOADER && r.detail.contains("dropped 147 packets"), "{}", r.detail);
        assert_eq!(v.trusted, Some(false));
        // Loopback: no queue, no speed; a busy NIC below line rate with a few held packets.
        let quiet = NicSummary {
            device: "lo".into(),
            qdisc: Some("noqueue".into()),
            qdisc_drops: Some(0),
            qdisc_overlimits: Some(0),
            qdisc_packets: Some(0),
            ..Default::default()
        };
        assert!(verdict(&with_nic(quiet), &Limits::default()).reasons.is_empty());
        let busy = NicSummary {
            device: "eth0".into(),
            speed_mbps: Some(1000.0),
            tx_bytes_max_per_s: 100e6,
            tx_utilization_max: Some(0.8),
            qdisc_drops: Some(0),
            qdisc_overlimits: Some(3),
            qdisc_packets: Some(100_000),
            ..Default::default()
        };
        assert!(verdict(&with_nic(busy.clone()), &Limits::default()).reasons.is_empty());
        // netem's loss is an emulated network, not the load machine's queue.
        let netem = NicSummary {
            qdisc: Some("netem".into()),
            qdisc_drops: Some(40),
            qdisc_overlimits: Some(0),
            ..busy.clone()
        };
        assert!(verdict(&with_nic(netem), &Limits::default()).reasons.is_empty());
        // Loopback has no speed; a capacity given (`--nic-capacity 1`) judges it: 1.6 Mb/s.
        let lo = NicSummary { device: "lo".into(), tx_bytes_max_per_s: 200_000.0, ..Default::default() };
        assert!(verdict(&with_nic(lo.clone()), &Limits::default()).reasons.is_empty());
        let given = Limits { nic_capacity_mbps: Some(1.0), ..Limits::default() };
        let v = verdict(&with_nic(lo), &given);
        assert!(
            v.reasons.iter().any(|r| r.code == "nic_saturated" && r.detail.contains("160 % of the given 1 Mb/s")),
            "{:?}",
            v.reasons
        );
        // The same NIC at 95 % of its speed.
        let full = NicSummary { tx_bytes_max_per_s: 118.75e6, tx_utilization_max: Some(0.95), ..busy };
        let v = verdict(&with_nic(full), &Limits::default());
        assert!(
            v.reasons.iter().any(|r| r.code == "nic_saturated" && r.detail.contains("95 % of the link's 1000 Mb/s")),
            "{:?}",
            v.reasons
        );
    }
}
