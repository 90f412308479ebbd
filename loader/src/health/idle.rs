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
//! than it saves, so `loader run` holds it by default only below [`HOLD_BELOW_RATE`] per shard
//! ([`HOLD_BELOW_RATE_HTTP2`] for HTTP/2; commands/run.rs). `--cpu-dma-latency off` leaves the setting alone.
//! Opening the file needs root (`sudo loader run`); the request ends when the loader exits.

use std::fs::{File, OpenOptions};
use std::io::Write;

/// Per-shard rate (the busiest shard's peak, requests per second) below which `loader run`
/// holds the request by default. Below it a shard idles between wake-ups — one per send up
/// to 20,000 req/s, one per batching window above — and polling idle CPUs make each of them
/// cheaper: at 40,000 req/s on one shard (nginx on the other core, interleaved, 3 rounds)
/// 91,500 requests per CPU-second held against 82,400 not. From 60,000 req/s the shard seldom
/// idles and the gain is gone (60,000 and 80,000: within 1 %), and near a shard's ceiling a
/// CPU polling beside the busy one can cost it (100,000 req/s, 5 interleaved pairs on
/// 2026-12-02: 93–122k held, 112–125k not; on 2026-12-03, 3 pairs: 121–156k held, 130–144k
/// not), so it is not held there unless asked.
pub const HOLD_BELOW_RATE: f64 = 60_000.0;
/// The same for an HTTP/2 shard. From 20,000 req/s it has several streams in flight on a
/// connection and wakes for their answers; idle CPUs that halt gather a few answers per
/// wake-up, polling ones wake it for each: held, it cost more (nginx h2c, 8 connections × 10
/// streams, 3 interleaved pairs on 2026-12-03: 25,000 req/s 35,100 requests per CPU-second
/// held against 39,700 not, 40,000 req/s 47,100 against 56,400).
pub const HOLD_BELOW_RATE_HTTP2: f64 = 20_000.0;

/// Whether `loader run` holds the request when not told: its busiest shard's peak rate is
/// below [`HOLD_BELOW_RATE`] (HTTP/1.1) or [`HOLD_BELOW_RATE_HTTP2`].
pub fn held_by_default(shard_rate: f64, http2: bool) -> bool {
    shard_rate < if http2 { HOLD_BELOW_RATE_HTTP2 } else { HOLD_BELOW_RATE }
}

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

    #[test]
    fn held_by_default_where_a_shard_idles_between_wake_ups() {
        // HTTP/1.1: through the rates where sends share wake-ups, not near a shard's ceiling.
        assert!(held_by_default(10_000.0, false) && held_by_default(40_000.0, false));
        assert!(!held_by_default(60_000.0, false) && !held_by_default(100_000.0, false));
        // HTTP/2: only while each send has a wake-up of its own.
        assert!(held_by_default(10_000.0, true));
        assert!(!held_by_default(25_000.0, true) && !held_by_default(40_000.0, true));
    }
}
