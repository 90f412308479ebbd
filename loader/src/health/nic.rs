//! The load machine's NIC — the interface the loader's traffic to the target leaves by (seed
//! 000 asks for "CPU, memory, NIC throughput, ephemeral ports, TIME_WAIT, fds" beside every
//! run): bytes and packets a second each way against the link's capacity, and what its egress
//! queue (qdisc) held back or dropped.
//!
//! Owns: finding the interface (`ip -o route get ADDR`), reading its counters
//! (`/sys/class/net/DEV/statistics`, `/sys/class/net/DEV/speed`) each second and its qdisc's
//! counters (`tc -s qdisc show dev DEV`) at the start and the end. Does not: judge (the
//! verdict's `nic` rule does), or see a NIC behind a hypervisor's own shaping.

use std::fs;
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// What the NIC carried and held back over the run (`health.nic`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NicSummary {
    /// The interface (`eth0`, `lo`, `veth0`).
    pub device: String,
    /// Its link speed from sysfs, Mb/s (null: the link cannot say — `lo`, some virtual NICs).
    pub speed_mbps: Option<f64>,
    /// Busiest second's transmit rate, bytes/s.
    pub tx_bytes_max_per_s: f64,
    /// Busiest second's receive rate, bytes/s.
    pub rx_bytes_max_per_s: f64,
    /// Busiest second's packets sent.
    pub tx_packets_max_per_s: f64,
    /// Busiest second's transmit rate as a share of the link speed (null without one).
    pub tx_utilization_max: Option<f64>,
    /// Packets the egress qdisc dropped during the run (null: `tc` unavailable).
    pub qdisc_drops: Option<u64>,
    /// Times the egress qdisc held packets back over its rate (a shaper's `overlimits`).
    pub qdisc_overlimits: Option<u64>,
    /// Packets the qdisc sent during the run.
    pub qdisc_packets: Option<u64>,
    /// The root qdisc's kind (`noqueue`, `fq_codel`, `tbf`).
    pub qdisc: Option<String>,
}

/// One interface's counters at one instant.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    tx_bytes: u64,
    rx_bytes: u64,
    tx_packets: u64,
}

/// The qdisc's counters, summed over its lines.
#[derive(Debug, Clone, Default, PartialEq)]
struct Qdisc {
    kind: Option<String>,
    sent_packets: u64,
    dropped: u64,
    overlimits: u64,
}

/// The interface the loader's traffic leaves by, sampled each second.
pub struct Nic {
    device: String,
    last: Option<(Instant, Counters)>,
    start: Option<Qdisc>,
    summary: NicSummary,
}

impl Nic {
    /// The interface that routes to `target`; `None` when it cannot be found.
    pub fn towards(target: IpAddr) -> Option<Nic> {
        // 127.0.0.0/8 and ::1 leave by `lo` on every Linux, without asking `ip` (a process
        // start, ~2 ms of the loader's CPU).
        let device = match target.is_loopback() {
            true => "lo".to_string(),
            false => {
                let out = Command::new("ip")
                    .args(["-o", "route", "get", &target.to_string()])
                    .stdin(Stdio::null())
                    .stderr(Stdio::null())
                    .output()
                    .ok()?;
                route_device(&String::from_utf8_lossy(&out.stdout))?
            }
        };
        let speed_mbps = fs::read_to_string(format!("/sys/class/net/{device}/speed"))
            .ok()
            .and_then(|t| t.trim().parse::<f64>().ok())
            .filter(|&s| s > 0.0);
        let start = qdisc(&device);
        let mut nic = Nic {
            summary: NicSummary {
                device: device.clone(),
                speed_mbps,
                qdisc: start.as_ref().and_then(|q| q.kind.clone()),
                ..Default::default()
            },
            device,
            last: None,
            start,
        };
        nic.last = nic.counters().map(|c| (Instant::now(), c));
        Some(nic)
    }

    fn counters(&self) -> Option<Counters> {
        let read = |name: &str| {
            fs::read_to_string(format!("/sys/class/net/{}/statistics/{name}", self.device))
                .ok()?
                .trim()
                .parse::<u64>()
                .ok()
        };
        Some(Counters { tx_bytes: read("tx_bytes")?, rx_bytes: read("rx_bytes")?, tx_packets: read("tx_packets")? })
    }

    /// Take one second's reading (call once a second).
    pub fn sample(&mut self) {
        let now = Instant::now();
        let Some(c) = self.counters() else { return };
        if let Some((at, before)) = self.last {
            let s = now.duration_since(at).as_secs_f64().max(1e-3);
            let rate = |a: u64, b: u64| a.saturating_sub(b) as f64 / s;
            let m = &mut self.summary;
            m.tx_bytes_max_per_s = m.tx_bytes_max_per_s.max(rate(c.tx_bytes, before.tx_bytes).round());
            m.rx_bytes_max_per_s = m.rx_bytes_max_per_s.max(rate(c.rx_bytes, before.rx_bytes).round());
            m.tx_packets_max_per_s = m.tx_packets_max_per_s.max(rate(c.tx_packets, before.tx_packets).round());
        }
        self.last = Some((now, c));
    }

    /// What the run carried and held back.
    pub fn finish(mut self) -> NicSummary {
        if let (Some(start), Some(end)) = (self.start.take(), qdisc(&self.device)) {
            self.summary.qdisc_drops = Some(end.dropped.saturating_sub(start.dropped));
            self.summary.qdisc_overlimits = Some(end.overlimits.saturating_sub(start.overlimits));
            self.summary.qdisc_packets = Some(end.sent_packets.saturating_sub(start.sent_packets));
        }
        self.summary.tx_utilization_max = self
            .summary
            .speed_mbps
            .map(|mbps| (self.summary.tx_bytes_max_per_s * 8.0 / (mbps * 1e6) * 10_000.0).round() / 10_000.0);
        self.summary
    }
}

/// `dev NAME` of `ip -o route get` output (`10.0.0.2 dev veth0 src 10.0.0.1 uid 0`,
/// `local 127.0.0.1 dev lo table local src 127.0.0.1`).
fn route_device(text: &str) -> Option<String> {
    let mut words = text.split_whitespace();
    while let Some(w) = words.next() {
        if w == "dev" {
            return words.next().map(str::to_string);
        }
    }
    None
}

/// `tc -s qdisc show dev DEV`, its root qdisc's kind and every qdisc's counters summed.
fn qdisc(device: &str) -> Option<Qdisc> {
    let out = Command::new("tc")
        .args(["-s", "qdisc", "show", "dev", device])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status.success().then(|| parse_qdisc(&String::from_utf8_lossy(&out.stdout)))
}

/// `tc -s qdisc show` text → kind of the first (root) qdisc and the summed `Sent … pkt
/// (dropped N, overlimits M …)` counters.
fn parse_qdisc(text: &str) -> Qdisc {
    let mut q = Qdisc::default();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"qdisc") && q.kind.is_none() {
            q.kind = words.get(1).map(|k| (*k).to_string());
        }
        if words.first() == Some(&"Sent") {
            let after = |key: &str| {
                words
                    .iter()
                    .position(|w| w.trim_start_matches('(') == key)
                    .and_then(|i| words.get(i + 1))
                    .and_then(|v| v.trim_end_matches(',').trim_end_matches(')').parse::<u64>().ok())
            };
            let before = |key: &str| {
                words
                    .iter()
                    .position(|w| *w == key)
                    .and_then(|i| i.checked_sub(1))
                    .and_then(|i| words[i].parse::<u64>().ok())
            };
            q.sent_packets += before("pkt").unwrap_or(0);
            q.dropped += after("dropped").unwrap_or(0);
            q.overlimits += after("overlimits").unwrap_or(0);
        }
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_route_names_the_device() {
        assert_eq!(route_device("10.231.0.2 dev veth0 src 10.231.0.1 uid 0 \\    cache"), Some("veth0".into()));
        assert_eq!(route_device("local 127.0.0.1 dev lo table local src 127.0.0.1 uid 0"), Some("lo".into()));
        assert_eq!(route_device("RTNETLINK answers: Network is unreachable"), None);
    }

    #[test]
    fn a_shapers_counters() {
        let text = "qdisc tbf 8001: root refcnt 2 rate 200Kbit burst 1600b lat 50ms \n Sent 123456 bytes 789 pkt (dropped 12, overlimits 345 requeues 0) \n backlog 0b 0p requeues 0\n";
        assert_eq!(
            parse_qdisc(text),
            Qdisc { kind: Some("tbf".into()), sent_packets: 789, dropped: 12, overlimits: 345 }
        );
        let none = "qdisc noqueue 0: root refcnt 2 \n Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n";
        assert_eq!(parse_qdisc(none).kind.as_deref(), Some("noqueue"));
        assert_eq!(parse_qdisc("garbage"), Qdisc::default());
    }
}
