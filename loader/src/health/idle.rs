//! How deep idle CPUs may sleep during a run: a PM QoS request on `/dev/cpu_dma_latency`,
//! held for as long as the file stays open — what `cyclictest` does by default and tuned's
//! `latency-performance` profile does for a whole machine.
//!
//! Why a load generator asks for it: at a fixed rate a shard sleeps between sends, and the
//! price of each sleep is set by how its idle CPU sleeps. On a KVM guest whose idle CPUs halt
//! (each halt and each wake is an exit to the hypervisor), measured on the development VM
//! with `bench/wake_cost.c`: a timer wake-up cost 23–30 µs of CPU and ended 32–53 µs late
//! (p50), 136–139 µs (p99); with the request held at 0 µs (idle CPUs poll instead of
//! halting), 12–13 µs of CPU and 13–14 µs late (p50), 25–39 µs (p99). Waking a target that
//! idles on the same machine gets as much cheaper. So a held request buys both halves of the
//! engine's trade: fewer CPU-seconds per request and sends closer to their instant.
//!
//! What it costs: idle CPUs of the whole machine poll rather than halt while the loader runs
//! (power, and on an over-committed host, CPU its neighbours could have had), and a CPU
//! polling beside a busy one takes from it: near a shard's ceiling the request costs more
//! than it saves, so `loader run` holds it by default only below the rate from which sends
//! share wake-ups (commands/run.rs). `--cpu-dma-latency off` leaves the setting alone.
//! Opening the file needs root (`sudo loader run`); the request ends when the loader exits.

use std::fs::{File, OpenOptions};
use std::io::Write;

/// The kernel's PM QoS interface for the CPU wake-up latency.
pub const PATH: &str = "/dev/cpu_dma_latency";

/// The request, held while this lives.
#[derive(Debug)]
pub struct CpuLatency {
    _file: File,
    /// The wake-up latency asked for, µs.
    pub us: u32,
}

/// Ask that no idle CPU sleep deeper than `us` µs takes to leave, until the result drops.
/// `Err`: why not (not root, no such device), in one line.
pub fn hold(us: u32) -> Result<CpuLatency, String> {
    let mut file = OpenOptions::new().write(true).open(PATH).map_err(|e| format!("cannot open {PATH}: {e}"))?;
    // The interface takes a native-endian 32-bit integer.
    let value = i32::try_from(us).map_err(|_| format!("{us} µs is out of range"))?;
    file.write_all(&value.to_ne_bytes()).map_err(|e| format!("cannot write {PATH}: {e}"))?;
    Ok(CpuLatency { _file: file, us })
}

/// `--cpu-dma-latency`: microseconds, or `off` (`None`).
pub fn parse(text: &str) -> Result<Option<u32>, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    match text.parse::<u32>() {
        Ok(us) if us <= MAX_US => Ok(Some(us)),
        Ok(_) => Err(format!("at most {MAX_US} µs, got {text}")),
        Err(_) => Err(format!("expected microseconds (0 keeps idle CPUs polling) or off, got {text:?}")),
    }
}

/// Largest value accepted: beyond a second no idle state is that deep.
const MAX_US: u32 = 1_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_off_parse_and_the_rest_is_refused() {
        assert_eq!(parse("0"), Ok(Some(0)));
        assert_eq!(parse(" 20 "), Ok(Some(20)));
        assert_eq!(parse("OFF"), Ok(None));
        assert!(parse("-1").unwrap_err().contains("microseconds"));
        assert!(parse("2000000").unwrap_err().contains("at most"));
        assert!(parse("5ms").is_err());
    }
}
