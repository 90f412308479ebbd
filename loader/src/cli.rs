//! Command-line flags, as the user wrote them (clap types only).
//!
//! Nothing past `scenario` sees these types: `scenario::Spec::from_run_args` validates them
//! and `scenario::Plan` resolves them. Durations are humantime strings (`10s`, `1m30s`,
//! `250ms`); parsing them is left to the scenario module so errors name the flag.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Flags of `loader run`: declared with their scenario keys, one row per option, in
/// `scenario/options.rs`.
pub use crate::scenario::RunArgs;

/// What `loader --version` prints after the name: the package's version and the commit it was
/// built from (`build.rs` sets `LOADER_GIT_COMMIT`; `unknown` when built outside a git checkout).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("LOADER_GIT_COMMIT"), ")");

/// loader — open-loop HTTP load generator that proves whether its own numbers can be trusted.
#[derive(Debug, Parser)]
#[command(name = "loader", version = VERSION, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// What loader logs on stderr: error | warn | info | debug | trace [default: warn, or as
    /// RUST_LOG says]. At debug and trace the eBPF probes report their rare conditions too (a
    /// lost event and which socket or thread it was). Libraries' records follow RUST_LOG.
    #[arg(long, global = true, value_enum, help_heading = "Output")]
    pub log_level: Option<LogLevel>,
}

/// Values of `--log-level`, most to least severe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Errors and warnings (the default).
    Warn,
    /// And progress notes.
    Info,
    /// And diagnostics, the eBPF programs' own included.
    Debug,
    /// Everything.
    Trace,
}

impl From<LogLevel> for log::LevelFilter {
    fn from(level: LogLevel) -> log::LevelFilter {
        match level {
            LogLevel::Error => log::LevelFilter::Error,
            LogLevel::Warn => log::LevelFilter::Warn,
            LogLevel::Info => log::LevelFilter::Info,
            LogLevel::Debug => log::LevelFilter::Debug,
            LogLevel::Trace => log::LevelFilter::Trace,
        }
    }
}

/// The subcommands of DESIGN.md's command contract.
// `RunArgs` is large, but the command is parsed once: boxing it would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a load test (a scenario file, flags, or — with neither — the built-in demo).
    Run(RunArgs),
    /// Serve the built-in trivial endpoint (fixed small JSON, keep-alive).
    Target(TargetArgs),
    /// Re-judge a saved run (its DIR/summary.json), e.g. with other limits.
    Verdict(VerdictArgs),
    /// Render a saved run's HTML report (DIR/report.html) from its DIR/summary.json.
    Report(ReportArgs),
    /// Measure this machine's own ceiling against the built-in target and write its
    /// certificate (see docs/calibration.md).
    Calibrate(CalibrateArgs),
    /// How many machines like this one (its certificate) a target rate needs, each at most
    /// 70 % of its certified ceiling.
    Plan(PlanArgs),
    /// Stop running loaders at once: POST /stop to each one's --control address, with the
    /// token in LOADER_CONTROL_TOKEN.
    Stop(StopArgs),
    /// Compare two saved runs step by step (B against the baseline A): ok/s and latency
    /// percentiles, each run's trust per step, and whether each change stands out of the
    /// runs' noise (their --repeat spread); exit 4 when --max-regression is broken.
    Compare(CompareArgs),
    /// Join the outputs of the machines that shared one run (`loader run --shard i/N` on
    /// each) into one summary, interval log and report (see docs/distributed.md).
    Merge(MergeArgs),
    /// Print loader's completion script for a shell (bash, zsh or fish) on stdout; `cargo
    /// xtask install` puts them where each shell looks.
    #[command(hide = true)]
    Completions(CompletionsArgs),
    /// Write loader's man pages (loader.1 and one per command, loader-run.1 …) into a
    /// directory, printing each page's path; `cargo xtask install` puts them under man1/.
    #[command(hide = true)]
    Man(ManArgs),
}

/// Flags of `loader completions`.
#[derive(Debug, Args, Clone)]
pub struct CompletionsArgs {
    /// bash, zsh or fish (checked by the command, so a wrong name is one line of error).
    #[arg(value_name = "SHELL")]
    pub shell: String,
}

/// Flags of `loader man`.
#[derive(Debug, Args, Clone)]
pub struct ManArgs {
    /// The directory to write the pages into (made if missing).
    #[arg(long)]
    pub out: PathBuf,
}

/// Flags of `loader plan`.
#[derive(Debug, Args, Clone)]
pub struct PlanArgs {
    /// The rate the target must be offered, req/s.
    #[arg(long)]
    pub rate: f64,
    /// The certificate to plan with (default: the newest one of this machine).
    #[arg(long)]
    pub certificate: Option<PathBuf>,
    /// Most of each machine's certified figure to use, percent.
    #[arg(long, default_value_t = 70.0)]
    pub headroom_pct: f64,
}

/// Flags of `loader stop`.
#[derive(Debug, Args, Clone)]
pub struct StopArgs {
    /// The loaders' --control addresses (IP:PORT, or HOST:PORT such as a pod's name).
    #[arg(required = true)]
    pub addrs: Vec<String>,
    /// How long to wait for each to acknowledge.
    #[arg(long, default_value = "2s")]
    pub timeout: String,
}

/// Flags of `loader merge`.
#[derive(Debug, Args, Clone)]
pub struct MergeArgs {
    /// The machines' output directories (each with summary.json and latency.hlog).
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// Where to write the merged summary.json, latency.hlog and report.html.
    #[arg(long)]
    pub out: PathBuf,
}

/// Flags of `loader calibrate`.
#[derive(Debug, Args, Clone)]
pub struct CalibrateArgs {
    /// Where to write the certificate (default: /var/lib/loader/certificates/ as root, else
    /// $XDG_DATA_HOME/loader/certificates/; $LOADER_CERTIFICATE_DIR overrides both).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Keep-alive connections in the pool.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Shard threads (default: the CPUs left after pinning the target to the last one).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Hold of each step.
    #[arg(long, default_value = "3s")]
    pub step_hold: String,
    /// Rate of the first step, req/s; each next step is 1.25 × the previous.
    #[arg(long, default_value_t = 5000.0)]
    pub start_rate: f64,
    /// Highest step rate: stepping stops past it (the result is then a lower bound).
    #[arg(long, default_value_t = 1_000_000.0)]
    pub max_rate: f64,
    /// Do not load the eBPF probes (the run-queue figure is then missing).
    #[arg(long)]
    pub no_probes: bool,
    /// Print one plain line per second instead of the live status line.
    #[arg(long)]
    pub plain: bool,
    /// Test hook: the built-in target serves at most N requests at once.
    #[arg(long, hide = true)]
    pub target_workers: Option<usize>,
    /// Test hook: the built-in target delays each response (e.g. 1ms).
    #[arg(long, hide = true)]
    pub target_delay: Option<String>,
    /// Runtime threads of the target (default 1; each one takes a core from the loader).
    #[arg(long, default_value_t = 1)]
    pub target_threads: usize,
    /// Calibrate against the full built-in target instead of the sink (`loader target
    /// --sink`): its figure is then likely the target's, a lower bound of the loader's.
    #[arg(long)]
    pub full_target: bool,
}

/// Flags of `loader compare`.
#[derive(Debug, Args, Clone)]
pub struct CompareArgs {
    /// The baseline run's output directory (holds summary.json).
    pub a: PathBuf,
    /// The run compared with it.
    pub b: PathBuf,
    /// Fail (exit 4) when B is worse than A by more than this many percent: ok/s lower, p95
    /// or p99 higher (and by at least 1 ms) on a step both runs trust, or the knee lower —
    /// beyond the noise when both runs have repeats, on this bound alone when not.
    #[arg(long, value_name = "PCT", allow_negative_numbers = true)]
    pub max_regression: Option<f64>,
    /// Print the comparison as JSON (what the text says, with every run's spread).
    #[arg(long)]
    pub json: bool,
    /// Also write the comparison as a self-contained HTML page, with each step's two latency
    /// spectra over each other.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

/// Flags of `loader report`.
#[derive(Debug, Args, Clone)]
pub struct ReportArgs {
    /// Directory of a saved run (holds summary.json; report.html is written there).
    pub dir: PathBuf,
}

/// Flags of `loader verdict`.
#[derive(Debug, Args, Clone)]
pub struct VerdictArgs {
    /// Directory of a saved run (holds summary.json).
    pub dir: PathBuf,
    /// Loader shard CPU p95 limit, percent (default 70).
    #[arg(long)]
    pub cpu_p95: Option<f64>,
    /// Run-queue delay p99 limit, milliseconds (default 1).
    #[arg(long)]
    pub runqueue_p99_ms: Option<f64>,
    /// Send-lag p99 limit, milliseconds (default 50).
    #[arg(long)]
    pub send_lag_p99_ms: Option<f64>,
    /// Live TIME_WAIT sockets limit (default 5000).
    #[arg(long)]
    pub time_wait: Option<u64>,
    /// The loader's own delay p99 (send lag, run-queue) as a percentage of a phase's
    /// latency p99 above which it invalidates (default 25; 100 turns the rule off).
    #[arg(long)]
    pub loader_delay_pct: Option<f64>,
    /// The load machine NIC's capacity, Mb/s, where its link cannot say (default: the speed
    /// sysfs reports, if any).
    #[arg(long, value_name = "MBPS")]
    pub nic_capacity: Option<f64>,
    /// Print the verdict only; leave summary.json as it is.
    #[arg(long)]
    pub dry_run: bool,
    /// Print every reason whole and every line of the report (the run prints them at a
    /// glance). Without a limit above, the saved verdict is read as it is: nothing is judged
    /// again or rewritten.
    #[arg(long)]
    pub all: bool,
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
    /// The calibration responder instead: io_uring, multishot accept and receive, one
    /// precomputed answer per request head, cheaper per request than the loader (what
    /// `loader calibrate` runs by default). Plain HTTP/1.1 only; no shaping.
    #[arg(long, conflicts_with_all = ["delay", "workers", "stall", "tls", "http2", "grpc"])]
    pub sink: bool,
    /// Serve HTTPS (TLS 1.2/1.3 by rustls), by default with a fresh self-signed certificate
    /// for localhost, 127.0.0.1 and ::1.
    #[arg(long)]
    pub tls: bool,
    /// Serve HTTP/2 too: prior knowledge (h2c) on plain connections, ALPN h2 with --tls;
    /// HTTP/1.1 clients are still served.
    #[arg(long)]
    pub http2: bool,
    /// Answer every call as a gRPC unary method (any path), over HTTP/2: an empty message and
    /// grpc-status OK, or the statuses of --grpc-status.
    #[arg(long)]
    pub grpc: bool,
    /// With --grpc: inject statuses by exact share, e.g. UNAVAILABLE=0.1,RESOURCE_EXHAUSTED=0.05.
    #[arg(long, requires = "grpc")]
    pub grpc_status: Option<String>,
    /// With --tls: the certificate chain to serve (PEM) instead of a self-signed one.
    #[arg(long, requires = "key")]
    pub cert: Option<PathBuf>,
    /// With --tls and --cert: the certificate's private key (PEM).
    #[arg(long, requires = "cert")]
    pub key: Option<PathBuf>,
    /// With --tls: write the served certificate (PEM) to this file before listening, for
    /// `loader run --cacert FILE`.
    #[arg(long)]
    pub write_cert: Option<PathBuf>,
}
