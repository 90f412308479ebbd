//! Whether this process may load and attach tracing programs, decided from its effective
//! capabilities before any syscall fails with a bare `EPERM`.
//!
//! Owns: reading `CapEff` from `/proc/self/status`. Does not: raise or drop privileges.

use std::fs;

/// `CAP_SYS_ADMIN`: enough on its own, and the only way before Linux 5.8.
const CAP_SYS_ADMIN: u32 = 21;
/// `CAP_PERFMON` (5.8+): perf events, which classic tracepoints attach through.
const CAP_PERFMON: u32 = 38;
/// `CAP_BPF` (5.8+): `bpf()` program and map creation.
const CAP_BPF: u32 = 39;

/// `Ok` when the effective set holds `CAP_SYS_ADMIN`, or `CAP_BPF` and `CAP_PERFMON`;
/// otherwise what is missing. If `/proc` cannot tell, the answer is `Ok` and the load itself
/// will report what the kernel says.
pub(crate) fn check() -> Result<(), String> {
    let Ok(status) = fs::read_to_string("/proc/self/status") else {
        return Ok(());
    };
    let Some(effective) = cap_eff(&status) else {
        return Ok(());
    };
    check_caps(effective)
}

fn check_caps(effective: u64) -> Result<(), String> {
    let has = |cap: u32| effective & (1u64 << cap) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    Err(format!("euid {euid}, effective capabilities {effective:#x}"))
}

/// The `CapEff:` hex mask of a `/proc/<pid>/status` text.
fn cap_eff(status: &str) -> Option<u64> {
    let line = status.lines().find_map(|line| line.strip_prefix("CapEff:"))?;
    u64::from_str_radix(line.trim(), 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cap_eff() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(cap_eff(status), Some(0x1ff_ffff_ffff));
        assert_eq!(cap_eff("Name:\tx\n"), None);
    }

    #[test]
    fn root_or_bpf_plus_perfmon() {
        assert!(check_caps(0x1ff_ffff_ffff).is_ok());
        assert!(check_caps(1 << CAP_SYS_ADMIN).is_ok());
        assert!(check_caps((1 << CAP_BPF) | (1 << CAP_PERFMON)).is_ok());
        assert!(check_caps(1 << CAP_BPF).is_err());
        assert!(check_caps(0).is_err());
    }
}
