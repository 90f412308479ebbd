//! Why the probes, or one of them, cannot run: [`Unavailable`], with a stable code per reason.
//!
//! Owns: the reasons and their codes. Does not: decide what to do about them ([`Probes::start`]
//! fails only when nothing can run; one probe's reason goes to [`Probes::availability`]).
//!
//! [`Probes::start`]: super::Probes::start
//! [`Probes::availability`]: super::Probes::availability

use aya::{maps::MapError, programs::ProgramError};

/// Why the probes cannot run on this host or this build. [`Probes::start`](super::Probes::start)'s
/// error downcasts to it.
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
    /// A probe needs another probe that could not start.
    #[error("needs the {probe} probe, which is unavailable: {detail}")]
    Dependency {
        /// The probe needed.
        probe: &'static str,
        /// Why that one is unavailable.
        detail: String,
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
            Unavailable::Dependency { .. } => "dependency_unavailable",
            Unavailable::MissingFromObject { .. } | Unavailable::Map { .. } => "object_mismatch",
        }
    }
}
