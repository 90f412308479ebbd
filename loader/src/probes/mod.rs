//! eBPF probes on the loader's own process: loading, attaching, falling back, and one
//! reader per probe.
//!
//! [`Probes::start`] loads the object that `build.rs` embedded (the kernel programs of the
//! `probes-ebpf` package), sets the loader's tgid and the running kernel's tracepoint layout
//! as globals, and attaches; dropping [`Probes`] detaches. Probes that cannot run never make
//! the loader fail: `start` returns an error whose [`Unavailable`] value says why (and carries
//! a stable [`Unavailable::code`]), and the run goes on without them.
//!
//! Probes today:
//!
//! - `tcp_states` (`sock:inet_sock_set_state`): TCP state transitions of sockets the loader
//!   connected, counted in the kernel → [`Probes::tcp_states`]. Reader: `tcp_states.rs`.
//!
//! What start-up does to the host: when tracefs is not mounted it mounts it on
//! `/sys/kernel/tracing` and leaves it mounted. Nothing else.
//!
//! Not here: the `/proc` and cgroup samplers that stand in when probes are unavailable
//! (the health module), judging the numbers (the verdict), and dropping root after start
//! (the run does that; readers keep working, map reads through an open fd need no privilege).

mod privilege;
mod tcp_states;
mod tracefs;

use std::{
    collections::BTreeMap,
    fs, io,
    os::fd::{AsFd as _, AsRawFd as _},
};

use aya::{
    Ebpf, EbpfLoader,
    maps::MapError,
    programs::{ProgramError, TracePoint},
};
use probes_ebpf::names;

use self::tcp_states::TcpStatesReader;

/// The eBPF object built by `build.rs`; empty when the build had no bpf-linker (or
/// `LOADER_EBPF=skip`).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/probes"));

/// Why the probes cannot run on this host or this build. [`Probes::start`]'s error
/// downcasts to it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Unavailable {
    /// This binary was built without the eBPF object (no bpf-linker at build time, or
    /// `LOADER_EBPF=skip`).
    #[error("built without eBPF objects (bpf-linker was missing or LOADER_EBPF=skip when loader was built)")]
    NoObject,
    /// The process lacks root / `CAP_SYS_ADMIN`, or `CAP_BPF` with `CAP_PERFMON`.
    #[error("not privileged: probes need root (or CAP_BPF and CAP_PERFMON); {detail}")]
    NotPrivileged {
        /// The effective user and capabilities found.
        detail: String,
    },
    /// tracefs is neither mounted nor mountable.
    #[error("no tracefs: {detail}")]
    NoTracefs {
        /// What was tried and what failed.
        detail: String,
    },
    /// The running kernel does not have a tracepoint a probe needs.
    #[error("tracepoint {tracepoint} is missing from this kernel ({detail})")]
    TracepointMissing {
        /// `category:name`.
        tracepoint: &'static str,
        /// The file that could not be read and why.
        detail: String,
    },
    /// A tracepoint's record does not have the fields a probe reads.
    #[error("tracepoint {tracepoint} has an unexpected layout: {detail}")]
    TracepointLayout {
        /// `category:name`.
        tracepoint: &'static str,
        /// The field at fault.
        detail: String,
    },
    /// The kernel refused the object: maps, BTF or relocation.
    #[error("the kernel refused the eBPF object: {0}")]
    Load(#[source] aya::EbpfError),
    /// A program failed to load (verifier) or attach.
    #[error("program {program}: {source}")]
    Program {
        /// The program's name.
        program: &'static str,
        /// What aya / the kernel said, including the verifier log when there is one.
        #[source]
        source: ProgramError,
    },
    /// The embedded object lacks a program or map user space expects (a build mismatch).
    #[error("the eBPF object has no {item}")]
    MissingFromObject {
        /// The missing program or map.
        item: &'static str,
    },
    /// A map in the object has another type than its reader expects.
    #[error("map {name}: {source}")]
    Map {
        /// The map's name.
        name: &'static str,
        /// aya's complaint.
        #[source]
        source: MapError,
    },
}

impl Unavailable {
    /// A stable, machine-readable code for reports (`probes_unavailable.reason`).
    pub fn code(&self) -> &'static str {
        match self {
            Unavailable::NoObject => "no_ebpf_object",
            Unavailable::NotPrivileged { .. } => "not_privileged",
            Unavailable::NoTracefs { .. } => "no_tracefs",
            Unavailable::TracepointMissing { .. } => "tracepoint_missing",
            Unavailable::TracepointLayout { .. } => "tracepoint_layout",
            Unavailable::Load(_) => "load_failed",
            Unavailable::Program { .. } => "program_failed",
            Unavailable::MissingFromObject { .. } | Unavailable::Map { .. } => "object_mismatch",
        }
    }
}

/// `category:name` of the `tcp_states` tracepoint, for messages.
const TCP_STATES_TRACEPOINT: &str = "sock:inet_sock_set_state";

/// Loaded and attached probes; dropping detaches them and frees their maps.
#[derive(Debug)]
pub struct Probes {
    /// Owns the programs and their links (attachment lives as long as this).
    ebpf: Ebpf,
    tcp_states: TcpStatesReader,
    /// True when start-up found tracefs unmounted and mounted it.
    mounted_tracefs: bool,
}

impl Probes {
    /// Load and attach the probes, filtered to process `tgid` (the loader's
    /// `std::process::id()`; all its threads share it). The error is always an
    /// [`Unavailable`]: `err.downcast_ref::<Unavailable>()` gives the reason.
    pub fn start(tgid: u32) -> anyhow::Result<Probes> {
        Ok(Self::try_start(tgid)?)
    }

    /// [`Probes::start`] with the typed error.
    pub fn try_start(tgid: u32) -> Result<Probes, Unavailable> {
        if OBJECT.is_empty() {
            return Err(Unavailable::NoObject);
        }
        privilege::check().map_err(|detail| Unavailable::NotPrivileged { detail })?;
        let tracefs = tracefs::find_or_mount().map_err(|detail| Unavailable::NoTracefs { detail })?;

        let format_path = tracefs::format_path(&tracefs.root, names::TCP_STATES_CATEGORY, names::TCP_STATES_TRACEPOINT);
        let format = fs::read_to_string(&format_path).map_err(|err| {
            let detail = format!("{}: {err}", format_path.display());
            if err.kind() == io::ErrorKind::NotFound {
                Unavailable::TracepointMissing { tracepoint: TCP_STATES_TRACEPOINT, detail }
            } else {
                Unavailable::NoTracefs { detail }
            }
        })?;
        let layout = tracefs::set_state_layout(&format)
            .map_err(|detail| Unavailable::TracepointLayout { tracepoint: TCP_STATES_TRACEPOINT, detail })?;

        let mut ebpf = EbpfLoader::new()
            .override_global(names::TARGET_TGID, &tgid, true)
            .override_global(names::SET_STATE_LAYOUT, &layout, true)
            .load(OBJECT)
            .map_err(Unavailable::Load)?;

        let program = names::TCP_STATES_PROGRAM;
        let tracepoint: &mut TracePoint = ebpf
            .program_mut(program)
            .ok_or(Unavailable::MissingFromObject { item: program })?
            .try_into()
            .map_err(|source| Unavailable::Program { program, source })?;
        tracepoint.load().map_err(|source| Unavailable::Program { program, source })?;
        tracepoint
            .attach(names::TCP_STATES_CATEGORY, names::TCP_STATES_TRACEPOINT)
            .map_err(|source| Unavailable::Program { program, source })?;

        let tcp_states = TcpStatesReader::take(&mut ebpf)?;
        Ok(Probes { ebpf, tcp_states, mounted_tracefs: tracefs.mounted_now })
    }

    /// Whether start-up had to mount tracefs (it stays mounted), for the run's notes.
    pub fn mounted_tracefs(&self) -> bool {
        self.mounted_tracefs
    }

    /// TCP state transitions of the loader's sockets since start, `"OLD->NEW" → count`
    /// (only non-zero entries; names as in the kernel without `TCP_`: `"SYN_SENT->ESTABLISHED"`).
    pub fn tcp_states(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        Ok(self.tcp_states.transitions()?)
    }

    /// Events the probes saw but could not count, by reason: the programs' own lost
    /// counters plus `recursion_misses`, runs the kernel skipped because another BPF
    /// program was already running on that CPU (from `/proc/self/fdinfo`, Linux 5.12+).
    pub fn lost_by_reason(&self) -> anyhow::Result<BTreeMap<&'static str, u64>> {
        let mut by_reason: BTreeMap<_, _> = self.tcp_states.lost()?.into_iter().collect();
        by_reason.insert("recursion_misses", self.recursion_misses(names::TCP_STATES_PROGRAM)?);
        Ok(by_reason)
    }

    /// Total of [`Probes::lost_by_reason`]; `u64::MAX` if the counters cannot be read, so a
    /// failure to read them can never pass for "nothing lost".
    pub fn lost(&self) -> u64 {
        self.lost_by_reason()
            .map(|by_reason| by_reason.values().fold(0u64, |total, &n| total.saturating_add(n)))
            .unwrap_or(u64::MAX)
    }

    /// The kernel's `recursion_misses` of a loaded program (from its fdinfo).
    fn recursion_misses(&self, program: &'static str) -> anyhow::Result<u64> {
        let fd = self
            .ebpf
            .program(program)
            .ok_or(Unavailable::MissingFromObject { item: program })?
            .fd()?
            .as_fd()
            .as_raw_fd();
        let fdinfo = fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))?;
        Ok(recursion_misses_of(&fdinfo))
    }
}

/// The `recursion_misses:` line of a BPF program's `/proc/<pid>/fdinfo/<fd>`; 0 when the
/// kernel (before 5.12) does not print it.
fn recursion_misses_of(fdinfo: &str) -> u64 {
    fdinfo
        .lines()
        .find_map(|line| line.strip_prefix("recursion_misses:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_recursion_misses_from_fdinfo() {
        // A tracepoint program's fdinfo on Linux 6.18 (abridged).
        let fdinfo = "prog_type:\t5\nprog_tag:\t04350585e71ea4d3\nrun_cnt:\t0\n\
                      recursion_misses:\t7\nverified_insns:\t230\n";
        assert_eq!(recursion_misses_of(fdinfo), 7);
        assert_eq!(recursion_misses_of("prog_type:\t5\n"), 0);
    }
}
