//! What the user asked for, in two stages (ripgrep's low-args → high-args):
//!
//! - [`Spec`]: the run as written (flags today, TOML scenarios later), validated value by
//!   value, errors naming the flag at fault.
//! - [`Plan`]: everything resolved — the target's socket address, the pre-encoded request,
//!   the phases with absolute offsets and rates, the shard count.
//!
//! Nothing past this module sees clap types. It does not open sockets or read clocks.

mod plan;
mod spec;

pub use plan::{Phase, PhaseKind, Plan, PlannedRequest, TargetAddr};
pub use spec::{Profile, RequestSpec, Spec, Target, parse_duration};
