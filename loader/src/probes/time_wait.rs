//! Live TIME_WAIT and ephemeral-port use, sampled from `/proc` (the kernel side only counts
//! entries into TIME_WAIT: see `tcp_states.rs`).
//!
//! Sources, and why:
//!
//! - **Live TIME_WAIT**: the `tw` figure of `/proc/<tgid>/net/sockstat` — exact, one read,
//!   cheap at any count, but for the whole network namespace of the loader, not the loader
//!   alone. A timewait socket has no owner (no inode, no process), so "the loader's" TIME_WAIT
//!   can only be told apart by remembering 4-tuples; a BPF `iter/tcp` program would be exact
//!   for the namespace too and no better at ownership. On a load host the namespace's
//!   TIME_WAIT is the loader's plus the target's if the target is local — the per-loader
//!   figure is the entries count (per interval) from the kernel probe.
//! - **Ephemeral ports**: distinct local ports inside `ip_local_port_range` held by TCP
//!   sockets of the namespace that are either the loader's (socket inode among
//!   `/proc/<tgid>/fd`) or in TIME_WAIT (ownerless, still holding the port), from
//!   `/proc/<tgid>/net/tcp` and `tcp6`, divided by the size of the range. Cost: the kernel
//!   formats one ~150-byte line per socket; at 30 000 sockets that is a few ms per sample,
//!   paid once a second by `Probes::sample`, never on the request path.
//!
//! Does not: count sockets of other protocols, or per destination (Linux can reuse a local
//! port towards different destinations; the ratio is an upper bound of the pressure).

use std::{collections::HashSet, fs, io, ops::RangeInclusive};

use serde::Serialize;

/// Ephemeral-port use at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EphemeralPorts {
    /// Distinct local ports in the range held by the loader's sockets or TIME_WAIT sockets.
    pub in_use: u64,
    /// Size of `ip_local_port_range`.
    pub range_size: u64,
    /// `in_use / range_size`.
    pub ratio: f64,
}

/// The range `connect()` picks local ports from. `/proc/sys/net` shows the network namespace
/// of the reading process: the loader reads its own, the one its sockets live in.
const PORT_RANGE: &str = "/proc/sys/net/ipv4/ip_local_port_range";

/// The `tw` count of `/proc/<tgid>/net/sockstat`.
pub(crate) fn live_time_wait(tgid: u32) -> io::Result<u64> {
    let text = fs::read_to_string(format!("/proc/{tgid}/net/sockstat"))?;
    sockstat_tw(&text).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "sockstat: no `TCP: ... tw N`"))
}

/// The ephemeral ports in use now by the loader `tgid` (see the module doc).
pub(crate) fn ephemeral_ports(tgid: u32) -> io::Result<EphemeralPorts> {
    let range = port_range(&fs::read_to_string(PORT_RANGE)?)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "ip_local_port_range: not two ports"))?;
    let inodes = socket_inodes(tgid)?;
    let mut ports = HashSet::new();
    for table in ["tcp", "tcp6"] {
        match fs::read_to_string(format!("/proc/{tgid}/net/{table}")) {
            Ok(text) => ports.extend(ports_held(&text, &inodes, &range)),
            // No IPv6 in this kernel: no tcp6 table.
            Err(err) if err.kind() == io::ErrorKind::NotFound && table == "tcp6" => {}
            Err(err) => return Err(err),
        }
    }
    let range_size = u64::from(range.end() - range.start()) + 1;
    let in_use = ports.len() as u64;
    Ok(EphemeralPorts { in_use, range_size, ratio: in_use as f64 / range_size as f64 })
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

/// Inodes of the sockets `/proc/<tgid>/fd` holds (`socket:[12345]`).
fn socket_inodes(tgid: u32) -> io::Result<HashSet<u64>> {
    let mut inodes = HashSet::new();
    for entry in fs::read_dir(format!("/proc/{tgid}/fd"))?.flatten() {
        // An fd closed between readdir and readlink is simply gone.
        if let Ok(target) = fs::read_link(entry.path())
            && let Some(inode) =
                target.to_str().and_then(|t| t.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok())
        {
            inodes.insert(inode);
        }
    }
    Ok(inodes)
}

/// TIME_WAIT state in `/proc/net/tcp` (hex `st`).
const ST_TIME_WAIT: u8 = 0x06;

/// Local ports in `range` of the `/proc/net/tcp{,6}` rows that are in TIME_WAIT or whose
/// inode is in `inodes`. Row: `sl local rem st queues timer retrnsmt uid timeout inode …`,
/// `local` = `HEXADDR:HEXPORT`.
fn ports_held<'a>(
    text: &'a str,
    inodes: &'a HashSet<u64>,
    range: &'a RangeInclusive<u16>,
) -> impl Iterator<Item = u16> + 'a {
    text.lines().skip(1).filter_map(move |line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let port = u16::from_str_radix(fields.get(1)?.rsplit(':').next()?, 16).ok()?;
        let state = u8::from_str_radix(fields.get(3)?, 16).ok()?;
        let inode: u64 = fields.get(9)?.parse().ok()?;
        (range.contains(&port) && (state == ST_TIME_WAIT || inodes.contains(&inode))).then_some(port)
    })
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
    fn counts_ports_of_own_and_time_wait_sockets() {
        // Abridged /proc/net/tcp: a listener (own, port 8080 outside the range), an own
        // established client (port 0x8001 = 32769), a TIME_WAIT (0x8002), someone else's
        // established client (0x8003).
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1
   1: 0100007F:8001 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 222 1
   2: 0100007F:8002 0100007F:1F90 06 00000000:00000000 03:00001770 00000000     0        0 0 3
   3: 0100007F:8003 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 333 1
";
        let inodes = HashSet::from([111, 222]);
        let range = 32768..=60999;
        let mut ports: Vec<u16> = ports_held(text, &inodes, &range).collect();
        ports.sort();
        assert_eq!(ports, [0x8001, 0x8002]);
    }
}
