//! The end-to-end harness shared by every suite in `tests/`: they drive the real `loader`
//! binary (built once per test process by [`common::loader_bin`]) against real servers on
//! loopback or in network namespaces the tests create.
//!
//! - [`common`]: the built-in target as a child killed on drop, bounded `loader run`
//!   invocations with their summary read back, root checks, busy loops, network namespaces.
//! - [`matrix`]: the verdict matrix's faults (each a guard undone on drop) and its table.
//! - [`nginx`]: nginx from apt with its own prefix, killed on drop.
//! - [`hostile`]: the hostile HTTP server (`hostile_server.py`) and runs against it.
//! - [`stack`]: nginx → PHP-FPM 8.2 → PostgreSQL 15 (and postgres_exporter) from apt, each
//!   with a private config on CPU 1, stopped on drop.
//! - [`watch`]: the watch suite's targets: the pool server, a quota cgroup, node_exporter, a
//!   spinner on one CPU.
//!
//! Every wait is bounded in count and time.

pub mod common;
pub mod hostile;
pub mod matrix;
pub mod nginx;
pub mod stack;
pub mod watch;
