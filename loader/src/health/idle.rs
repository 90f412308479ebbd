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
//! (power, and on an over-committed host, CPU its neighbours could have had), a CPU polling
//! beside a busy one takes from it, and vCPUs that never halt draw more of the hypervisor's
//! steal — which, where sends share wake-ups, cost more precision than the CPU it saved. So
//! `loader run` holds it by default only below [`HOLD_BELOW_RATE`] per shard (commands/run.rs),
//! and never by default on a virtual machine ([`virtual_machine`]): there the polling vCPUs are
//! the host's CPU, and an over-committed host takes it back as steal — pauses of the whole
//! loader far longer than any wake-up it saves. `--cpu-dma-latency off` leaves the setting
//! alone; `--cpu-dma-latency 0` holds it on a virtual machine too.
//! Opening the file needs root (`sudo loader run`); the request ends when the loader exits.
//!
//! Only a cpuidle governor reads the request. A machine without a cpuidle driver
//! (`/sys/devices/system/cpu/cpuidle/current_driver` says `none`, or is missing: some
//! micro-VMs, Firecracker's among them) halts its idle CPUs whatever is asked, so there the
//! loader does not hold it by default and says so; asked for, it is held and the run is told
//! it changes nothing. (Measured on such a VM, 2026-12-03: 10,000 req/s on one shard against
//! nginx, 2 interleaved pairs, 32,700 requests per CPU-second held against 31,100 not, the
//! same send lag — the round-to-round noise.)

use std::fs::{File, OpenOptions};
use std::io::Write;

/// Per-shard rate (the busiest shard's peak, requests per second) below which `loader run`
/// holds the request by default: where each send is a wake-up of its own
/// ([`BATCH_FROM_RATE`](crate::engine::pace::BATCH_FROM_RATE)), the rates it was measured to
/// help in both CPU and precision (docs/performance.md).
///
/// Above it, tried on 2026-12-03 and not taken. For CPU it still pays at 40,000 req/s on one
/// HTTP/1.1 shard (nginx on the other core, 3 interleaved rounds: 91,500 requests per
/// CPU-second held against 82,400 not), is even at 60,000 and 80,000, and mixed near a shard's
/// ceiling (100,000: 121–156k held, 130–144k not; 93–122k against 112–125k on 2026-12-02). But
/// against the built-in target at 30,000 req/s (32 connections, 9 runs each way, interleaved)
/// the held runs' send lag p99 was 0.49–2.49 ms (median 1.31) against 0.18–1.20 ms (0.32),
/// with more of the host's steal (2–8 ticks a run against 0–3) and run-queue waits of up to
/// 25 ms (5 ms not held): two vCPUs that never halt look busy to the hypervisor, which then
/// takes them more often. Sends on schedule come first. An HTTP/2 shard above 20,000 req/s
/// wakes for its answers, and polling CPUs wake it for each: held, it cost more (nginx h2c,
/// 8 connections × 10 streams, 3 pairs: 25,000 req/s 35,100 requests per CPU-second against
/// 39,700, 40,000 req/s 47,100 against 56,400).
pub const HOLD_BELOW_RATE: f64 = crate::engine::pace::BATCH_FROM_RATE;

/// Whether `loader run` holds the request when not told: on a machine of its own (not a
/// virtual one, [`virtual_machine`]) whose busiest shard's peak rate is below
/// [`HOLD_BELOW_RATE`].
///
/// Why not on a virtual machine, measured on a 2-vCPU Firecracker guest with the `haltpoll`
/// driver (2026-12-07, nothing else running): the request held at 0 µs made the host take
/// 102 and 180 ms a second from the two idle vCPUs (steal; 0 not held), and a 1 ms sleep loop
/// on one of them woke up to 100.6 ms late (3.5 ms not held). Busy loops on both vCPUs drew
/// 122–142 ms/s; on one alone, none: the host steals when both vCPUs want to run, and polling
/// makes idle ones want to. In the test suites every run held it, and steal of 60–130 ms/s per
/// core spoiled clean runs at 1,000 req/s with send lag p99 of 88 ms.
pub fn held_by_default(shard_rate: f64, virtual_machine: bool) -> bool {
    !virtual_machine && shard_rate < HOLD_BELOW_RATE
}

/// Whether this machine is a virtual one: the CPU says it runs under a hypervisor (x86's
/// `hypervisor` flag in `/proc/cpuinfo`), or the kernel names one (`/sys/hypervisor/type`).
pub fn virtual_machine() -> bool {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let hypervisor = std::fs::read_to_string("/sys/hypervisor/type").unwrap_or_default();
    virtual_by(&cpuinfo, &hypervisor)
}

fn virtual_by(cpuinfo: &str, hypervisor_type: &str) -> bool {
    let flagged = cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_once(':').is_some_and(|(_, flags)| flags.split_whitespace().any(|f| f == "hypervisor")));
    flagged || !hypervisor_type.trim().is_empty()
}

/// The kernel's PM QoS interface for the CPU wake-up latency.
pub const PATH: &str = "/dev/cpu_dma_latency";

/// Where the kernel names the cpuidle driver in use.
const DRIVER_PATH: &str = "/sys/devices/system/cpu/cpuidle/current_driver";

/// The machine's cpuidle driver (`acpi_idle`, `intel_idle`, `haltpoll`, …), or [`NO_DRIVER`]
/// when it has none: then no governor chooses idle states and a held request changes nothing.
pub fn driver() -> String {
    driver_named(&std::fs::read_to_string(DRIVER_PATH).unwrap_or_default())
}

/// What [`driver`] says of a machine without a cpuidle driver (the kernel's own word for it).
pub const NO_DRIVER: &str = "none";

/// Whether `driver` ([`driver`]) reads the PM QoS request.
pub fn honours_request(driver: &str) -> bool {
    driver != NO_DRIVER
}

/// Whether a run's recorded driver (`run.cpuidle_driver`) reads the request; a summary that
/// did not record one (an older loader) is taken as it was written, for a machine that does.
pub fn recorded_honours_request(driver: Option<&str>) -> bool {
    driver.is_none_or(honours_request)
}

fn driver_named(text: &str) -> String {
    let name = text.trim();
    if name.is_empty() { NO_DRIVER } else { name }.to_string()
}

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
    fn a_machine_without_a_cpuidle_driver_has_none() {
        assert_eq!(driver_named("haltpoll\n"), "haltpoll");
        assert!(honours_request(&driver_named("acpi_idle\n")));
        assert!(!honours_request(&driver_named("none\n")));
        assert!(!honours_request(&driver_named("")), "no cpuidle directory at all");
    }

    #[test]
    fn held_by_default_where_each_send_is_a_wake_up_of_its_own() {
        assert!(held_by_default(500.0, false) && held_by_default(10_000.0, false) && held_by_default(19_999.0, false));
        assert!(!held_by_default(crate::engine::pace::BATCH_FROM_RATE, false) && !held_by_default(40_000.0, false));
        assert_eq!(HOLD_BELOW_RATE, crate::engine::pace::BATCH_FROM_RATE);
    }

    #[test]
    fn never_held_by_default_on_a_virtual_machine() {
        assert!(!held_by_default(500.0, true) && !held_by_default(10_000.0, true));
    }

    #[test]
    fn a_virtual_machine_is_known_by_its_cpu_flag_or_the_kernel() {
        let guest = "processor\t: 0\nflags\t\t: fpu vme sse2 hypervisor lahf_lm\n";
        let metal = "processor\t: 0\nflags\t\t: fpu vme sse2 lahf_lm\nmodel name\t: hypervisor-free\n";
        assert!(virtual_by(guest, ""));
        assert!(!virtual_by(metal, ""), "only the flags line counts");
        assert!(virtual_by(metal, "xen\n"), "the kernel names a hypervisor");
        assert!(!virtual_by("", ""));
    }
}
