//! What the user asked for, in two stages (ripgrep's low-args → high-args):
//!
//! - [`Spec`]: the run as written — a TOML scenario file with the flags laid over it —
//!   validated value by value, each error naming the flag or the file's `path:line:column`
//!   and key at fault.
//! - [`Plan`]: everything resolved — the target's socket address, the pre-encoded requests,
//!   the phases (warm-up, ramps, holds) with absolute offsets and rates, the shard count.
//!
//! Inside: `file` reads TOML, `input` merges it with the flags keeping each value's origin,
//! `values`, `profile` and `limits` check values, `spec` assembles them, `plan`
//! resolves. Nothing past this module sees clap or serde types. It does not open sockets or
//! read clocks. The file format is documented in `docs/scenario.md`.

mod data;
mod file;
pub mod grpc;
mod input;
mod limits;
mod plan;
mod profile;
mod request;
mod spec;
mod target;
mod values;
mod watch;

pub use data::{DataSpec, MAX_ENCODED_BYTES};
pub use limits::{CapacitySpec, DEFAULT_MARGIN, SloSpec, VerdictLimits};
pub use plan::{Phase, PhaseKind, Plan, PlannedRequest, TargetAddr};
pub use profile::{MAX_STEPS, Profile, ProfileKind};
pub use request::RequestSpec;
pub use spec::{DEFAULT_CONNECTIONS, DEFAULT_TIMEOUT, Spec, Target, parse_duration};
pub use target::{TlsPlan, TlsSpec};
pub use watch::{WatchKind, WatchSpec};
