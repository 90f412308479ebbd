//! Live TIME_WAIT and ephemeral-port use, sampled from `/proc` (the kernel side only counts
//! entries into TIME_WAIT: see `tcp_states.rs`).
//!
//! Sources, and why:
//!
//! - **Live TIME_WAIT**: the `tw` figure of `/proc/<tgid>/net/sockstat` — exact, one read,
//!   cheap at any count, but for the whole network namespace of the loader, not the loader
//!   alone. A timewait socket has no owner (no inode, no process), so "the loader's" TIME_WAIT
//!   can only be told apart by remembering 4-tuples; a BPF `iter/tcp` program would be exact
//!   for the namespace too and no better at ownership. The loader's own live count is
//!   therefore its entries into TIME_WAIT (counted exactly by the kernel probe) over the last
//!   60 s — Linux's fixed TIME_WAIT length — capped by the namespace's count: exact unless
//!   `tcp_tw_reuse` recycles some early, when it is an upper bound. The verdict judges that;
//!   the namespace's figure (neighbours, a local target) only annotates.
//! - **Ephemeral ports**: the loader's own share is its open sockets (each outbound connect
//!   holds one local port; the engine counts them) plus its own live TIME_WAIT, over the size
//!   of `ip_local_port_range`. The namespace's pressure is every TCP socket and TIME_WAIT of
//!   sockstat (`inuse + tw`), an upper bound (listening and inbound sockets count too).
//!   Why not scan `/proc/net/tcp` for local ports in the range: that file walks the whole
//!   established hash table, 1.5 ms per read on the development VM whatever the number of
//!   sockets — paid once a second on the loader's own CPU, it delayed sends by milliseconds.
//!
//! Does not: count sockets of other protocols, or per destination (Linux can reuse a local
//! port towards different destinations; the ratios are upper bounds of the pressure).

use std::{fs, io, ops::RangeInclusive};

use serde::Serialize;

/// Ephemeral-port use at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EphemeralPorts {
    /// Distinct local ports in the range held by the loader's sockets or TIME_WAIT sockets.
    pub in_use: u64,
    /// Of those, held by the loader's own open sockets.
    pub own_open: u64,
    /// Size of `ip_local_port_range`.
    pub range_size: u64,
    /// `in_use / range_size`.
    pub ratio: f64,
}

impl EphemeralPorts {
    /// The loader's own share of the range, given its live TIME_WAIT count (timewait
    /// sockets have no owner, so the probes' count stands in for them).
    pub fn own_ratio(&self, own_time_wait: u64) -> f64 {
        let tw_in_range = self.in_use.saturating_sub(self.own_open);
        (self.own_open + own_time_wait.min(tw_in_range)) as f64 / self.range_size.max(1) as f64
    }
}

/// The range `connect()` picks local ports from. `/proc/sys/net` shows the network namespace
/// of the reading process: the loader reads its own, the one its sockets live in.
const PORT_RANGE: &str = "/proc/sys/net/ipv4/ip_local_port_range";

/// The `tw` count of `/proc/<tgid>/net/sockstat`.
pub(crate) fn live_time_wait(tgid: u32) -> io::Result<u64> {
    let text = fs::read_to_string(format!("/proc/{tgid}/net/sockstat"))?;
    sockstat_tw(&text).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "sockstat: no `TCP: ... tw N`"))
}

/// Ephemeral-port use now: the namespace's (sockstat of the loader `tgid`) and the loader's
/// own open sockets, `own_open` (see the module doc).
pub(crate) fn ephemeral_ports(tgid: u32, own_open: u64) -> io::Result<EphemeralPorts> {
    let range = port_range(&fs::read_to_string(PORT_RANGE)?)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "ip_local_port_range: not two ports"))?;
    let text = fs::read_to_string(format!("/proc/{tgid}/net/sockstat"))?;
    let (inuse, tw) = sockstat_tcp(&text)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "sockstat: no `TCP: inuse N ... tw N`"))?;
    let range_size = u64::from(range.end() - range.start()) + 1;
    let in_use = (inuse + tw).max(own_open).min(range_size);
    Ok(EphemeralPorts { in_use, own_open: own_open.min(in_use), range_size, ratio: in_use as f64 / range_size as f64 })
}

/// `inuse` and `tw` from the `TCP:` line of sockstat.
fn sockstat_tcp(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find_map(|line| line.strip_prefix("TCP:"))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let get = |key: &str| words.iter().position(|w| *w == key).and_then(|i| words.get(i + 1)?.parse().ok());
    Some((get("inuse")?, get("tw")?))
}

/// `tw N` from the `TCP:` line of sockstat.
fn sockstat_tw(text: &str) -> Option<u64> {
    let line = text.lines().find_map(|line| line.strip_prefix("TCP:"))?;
    let mut words = line.split_whitespace();
    while let Some(word) = words.next() {
        if word == "tw" {
            return words.next()?.parse().ok();
        }
    }
    None
}

/// `ip_local_port_range`: two numbers, low and high.
fn port_range(text: &str) -> Option<RangeInclusive<u16>> {
    let mut numbers = text.split_whitespace().map(str::parse::<u16>);
    let (low, high) = (numbers.next()?.ok()?, numbers.next()?.ok()?);
    (low <= high).then_some(low..=high)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sockstat_tw() {
        let text = "sockets: used 145\nTCP: inuse 131 orphan 0 tw 517 alloc 131 mem 177\nUDP: inuse 0 mem 0\n";
        assert_eq!(sockstat_tw(text), Some(517));
        assert_eq!(sockstat_tw("sockets: used 1\n"), None);
    }

    #[test]
    fn reads_the_port_range() {
        assert_eq!(port_range("32768\t60999\n"), Some(32768..=60999));
        assert_eq!(port_range("60999 32768"), None);
    }

    #[test]
    fn ports_count_the_namespace_and_the_loaders_own() {
        assert_eq!(sockstat_tcp("TCP: inuse 131 orphan 0 tw 517 alloc 131 mem 177\n"), Some((131, 517)));
        let p = EphemeralPorts { in_use: 2, own_open: 1, range_size: 100, ratio: 0.02 };
        assert_eq!(p.own_ratio(0), 0.01, "someone else's TIME_WAIT is not the loader's");
        assert_eq!(p.own_ratio(1), 0.02);
        assert_eq!(p.own_ratio(50), 0.02, "never more TIME_WAIT than the namespace holds");
    }
}
