//! This load machine's fingerprint: what makes two machines the "same" load machine for a
//! calibration certificate, and what a run's `summary.json` records about where it ran
//! (`machine`). Read from `/proc` and `sysconf`; it judges nothing.

use std::fs;

use serde::{Deserialize, Serialize};

/// What makes two machines the "same" load machine. Any field that differs means the
/// certificate may no longer hold: recalibrate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// `model name` of /proc/cpuinfo (or the closest field on other architectures).
    pub cpu_model: Option<String>,
    /// Online CPUs.
    pub cores: u64,
    /// Kernel release (`uname -r`).
    pub kernel: Option<String>,
    /// `net.ipv4.ip_local_port_range`, as `LOW HIGH`.
    pub ip_local_port_range: Option<String>,
    /// `net.ipv4.tcp_tw_reuse`.
    pub tcp_tw_reuse: Option<String>,
    /// `net.core.somaxconn`.
    pub somaxconn: Option<String>,
    /// Hard `RLIMIT_NOFILE` of the loader process (it raises its soft limit to this).
    pub nofile_limit: Option<u64>,
    /// Loader version.
    pub loader_version: String,
}

impl Fingerprint {
    /// This machine, now.
    pub fn of_this_machine() -> Fingerprint {
        let read =
            |path: &str| fs::read_to_string(path).ok().map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "));
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = ["model name", "Hardware", "cpu model", "Processor", "CPU part"].iter().find_map(|key| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == *key).then(|| v.trim().to_string())
            })
        });
        let online = nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN).ok().flatten().unwrap_or(1);
        let nofile =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).ok().map(|(_, hard)| hard);
        Fingerprint {
            cpu_model,
            cores: online.max(1) as u64,
            kernel: read("/proc/sys/kernel/osrelease"),
            ip_local_port_range: read("/proc/sys/net/ipv4/ip_local_port_range"),
            tcp_tw_reuse: read("/proc/sys/net/ipv4/tcp_tw_reuse"),
            somaxconn: read("/proc/sys/net/core/somaxconn"),
            nofile_limit: nofile,
            loader_version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    /// Names of the fields that differ from `other`.
    pub fn differences(&self, other: &Fingerprint) -> Vec<&'static str> {
        let mut d = Vec::new();
        let mut check = |name, same: bool| {
            if !same {
                d.push(name);
            }
        };
        check("cpu_model", self.cpu_model == other.cpu_model);
        check("cores", self.cores == other.cores);
        check("kernel", self.kernel == other.kernel);
        check("ip_local_port_range", self.ip_local_port_range == other.ip_local_port_range);
        check("tcp_tw_reuse", self.tcp_tw_reuse == other.tcp_tw_reuse);
        check("somaxconn", self.somaxconn == other.somaxconn);
        check("nofile_limit", self.nofile_limit == other.nofile_limit);
        check("loader_version", self.loader_version == other.loader_version);
        d
    }
}
