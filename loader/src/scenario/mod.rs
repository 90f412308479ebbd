//! What the user asked for, in two stages (ripgrep's low-args → high-args):
//!
//! - [`Spec`]: the run as written — a TOML scenario file with the flags laid over it —
//!   validated value by value, each error naming the flag or the file's `path:line:column`
//!   and key at fault.
//! - [`Plan`]: everything resolved — the target's socket address, the pre-encoded requests,
//!   the phases (warm-up, ramps, holds) with absolute offsets and rates, the shard count.
//!
//! Inside: `options` declares every option once — its flags and its scenario key — and
//! `declare` expands those rows into clap's [`RunArgs`], the TOML tables, the merge and the
//! docs' key tables (`key_table`); `input` is a value as written with its origin, `file`
//! reads TOML, `raw` merges it with the flags, `values`, `profile` and `limits` check
//! values, `spec` assembles them, `plan` resolves. Nothing past this module sees serde types,
//! nor clap's but `RunArgs` (defined here from the rows, re-exported by `cli`). It does not
//! open sockets or read clocks. The file format is documented in `docs/scenario.md`.

mod data;
mod declare;
mod file;
pub mod grpc;
mod input;
mod key_table;
mod limits;
mod options;
mod plan;
mod profile;
mod raw;
mod request;
mod spec;
mod target;
mod values;
mod watch;

pub use data::{DataSpec, MAX_ENCODED_BYTES};
pub use key_table::with_key_tables;
pub use limits::{CapacitySpec, DEFAULT_MARGIN, SloSpec, VerdictLimits};
pub use options::RunArgs;
pub use plan::{Phase, PhaseKind, Plan, PlannedRequest, TargetAddr};
pub use profile::{MAX_STEPS, Profile, ProfileKind};
pub use request::RequestSpec;
pub use spec::{DEFAULT_CONNECTIONS, DEFAULT_TIMEOUT, Spec, StdoutMode, Target, parse_duration};
pub use target::{TlsPlan, TlsSpec};
pub use watch::{WatchKind, WatchOptions, WatchSpec, cpu_list, parse_cpu_list};
