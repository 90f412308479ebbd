//! Command-line flags, as the user wrote them (clap types only).
//!
//! Nothing past `scenario` sees these types: `scenario::Spec::from_run_args` validates them
//! and `scenario::Plan` resolves them. Durations are humantime strings (`10s`, `1m30s`,
//! `250ms`); parsing them is left to the scenario module so errors name the flag.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// loader — open-loop HTTP load generator that proves whether its own numbers can be trusted.
#[derive(Debug, Parser)]
#[command(name = "loader", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands of DESIGN.md's command contract.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a load test (a scenario file, flags, or — with neither — the built-in demo).
    Run(RunArgs),
    /// Serve the built-in trivial endpoint (fixed small JSON, keep-alive).
    Target(TargetArgs),
}

/// Flags of `loader run`.
#[derive(Debug, Args, Clone, Default)]
pub struct RunArgs {
    /// Scenario file (TOML). Flags given on the command line override it.
    pub scenario: Option<PathBuf>,
    /// Target URL, e.g. http://127.0.0.1:8080/ . Without it (and without a scenario) loader
    /// starts its built-in target on this host and runs a short stepped demo against it.
    #[arg(long)]
    pub url: Option<String>,
    /// Arrival rate in requests per second (open loop: independent of responses).
    #[arg(long, allow_negative_numbers = true)]
    pub rate: Option<f64>,
    /// Length of the measured phase (constant profile) or of each step's hold (step profile).
    #[arg(long)]
    pub duration: Option<String>,
    /// Warm-up before measuring, at the first rate; reported apart, never mixed in.
    #[arg(long)]
    pub warmup: Option<String>,
    /// Load profile: constant | step.
    #[arg(long)]
    pub profile: Option<String>,
    /// Step rates for the step profile, e.g. 100,200,300.
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    pub steps: Option<Vec<f64>>,
    /// Hold time of each step (step profile).
    #[arg(long)]
    pub hold: Option<String>,
    /// Keep-alive connections in the pool (all shards together).
    #[arg(long)]
    pub connections: Option<usize>,
    /// Shard threads, one io_uring ring each (default: the CPUs this process may use).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Client timeout per request (default 5s); timed-out requests are recorded at the deadline.
    #[arg(long)]
    pub timeout: Option<String>,
    /// HTTP method.
    #[arg(long)]
    pub method: Option<String>,
    /// Extra request header, `Name: value` (repeatable).
    #[arg(long = "header", short = 'H')]
    pub headers: Vec<String>,
    /// Request body (sent with Content-Length).
    #[arg(long)]
    pub body: Option<String>,
    /// How long a busy shard may gather sends and completions before waking (default: 0
    /// below 2000 req/s per shard, 50us above). Sends may leave and completions may be read
    /// up to this late; `0` makes every wake-up exact at any rate, at a CPU cost.
    #[arg(long)]
    pub wake_window: Option<String>,
    /// Close each connection after its response (from the loader's side) instead of reusing it.
    #[arg(long)]
    pub no_keepalive: bool,
    /// Do not load the eBPF probes.
    #[arg(long)]
    pub no_probes: bool,
    /// Directory for summary.json and the other outputs (default: ./out/<timestamp>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print one plain line per second instead of the live status line.
    #[arg(long)]
    pub plain: bool,
}

/// Flags of `loader target`.
#[derive(Debug, Args, Clone)]
pub struct TargetArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// Each response waits this long before it is sent (e.g. 10ms).
    #[arg(long)]
    pub delay: Option<String>,
    /// At most N requests in service at once; the rest queue (capacity = N / delay).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Answer nothing on any connection for FOR, once every EVERY (e.g. 10s:1s).
    #[arg(long)]
    pub stall: Option<String>,
    /// Runtime threads serving connections (default 1).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
}
