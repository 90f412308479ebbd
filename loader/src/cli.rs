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
    /// Join the outputs of the machines that shared one run (`loader run --shard i/N` on
    /// each) into one summary, interval log and report (see docs/distributed.md).
    Merge(MergeArgs),
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
}

/// Flags of `loader run`.
#[derive(Debug, Args, Clone, Default)]
pub struct RunArgs {
    /// Scenario file (TOML; see docs/scenario.md). Flags given on the command line override it.
    pub scenario: Option<PathBuf>,
    /// Target URL, e.g. http://127.0.0.1:8080/ . Without it (and without a scenario) loader
    /// starts its built-in target on this host and runs a short stepped demo against it.
    #[arg(long, help_heading = "Target")]
    pub url: Option<String>,
    /// Arrival rate in requests per second (open loop: independent of responses): the
    /// constant and soak rate, the spike's base rate, the rate a ramp reaches.
    #[arg(long, allow_negative_numbers = true, help_heading = "Schedule")]
    pub rate: Option<f64>,
    /// Length of the measured phase (constant, soak, ramp), of each step's hold (step,
    /// breakpoint), or of the base holds around a spike.
    #[arg(long, help_heading = "Schedule")]
    pub duration: Option<String>,
    /// Warm-up before measuring, at the first rate (or --warmup-rate); reported apart.
    #[arg(long, help_heading = "Schedule")]
    pub warmup: Option<String>,
    /// Rate of the warm-up (default: the profile's first non-zero rate).
    #[arg(long, allow_negative_numbers = true, help_heading = "Schedule")]
    pub warmup_rate: Option<f64>,
    /// Load profile: constant | step | ramp | spike | soak | breakpoint.
    #[arg(long, help_heading = "Schedule")]
    pub profile: Option<String>,
    /// Step rates for the step profile, e.g. 100,200,300 (or --step-start/--step-increment).
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true, help_heading = "Schedule")]
    pub steps: Option<Vec<f64>>,
    /// First step's rate, when the steps are start + k × increment (step, breakpoint).
    #[arg(long, allow_negative_numbers = true, help_heading = "Schedule")]
    pub step_start: Option<f64>,
    /// Rate added at each step (with --step-start).
    #[arg(long, allow_negative_numbers = true, help_heading = "Schedule")]
    pub step_increment: Option<f64>,
    /// Number of steps (with --step-start; a breakpoint run may give --max-rate instead).
    #[arg(long, allow_negative_numbers = true, help_heading = "Schedule")]
    pub step_count: Option<i64>,
    /// Highest step rate (step, breakpoint): stepping stops past it.
    #[arg(long, allow_negative_numbers = true, help_heading = "Schedule")]
    pub max_rate: Option<f64>,
    /// Hold time of each step (step, breakpoint) or of the spike's peak.
    #[arg(long, help_heading = "Schedule")]
    pub hold: Option<String>,
    /// Ramp before each step's hold, from the previous rate (step, breakpoint; default 0 =
    /// jump), or the spike's ramp up and down (default 5s).
    #[arg(long, help_heading = "Schedule")]
    pub ramp: Option<String>,
    /// Rate a ramp profile starts from (default 0).
    #[arg(long, allow_negative_numbers = true, help_heading = "Schedule")]
    pub from_rate: Option<f64>,
    /// Peak rate of a spike (default 4 × --rate).
    #[arg(long, allow_negative_numbers = true, help_heading = "Schedule")]
    pub peak_rate: Option<f64>,
    /// Send only this machine's part of the run: INDEX/COUNT (0-based), every request whose
    /// number is INDEX modulo COUNT, so COUNT machines together send the one-machine plan
    /// exactly (`loader merge` joins their outputs). Also read from a Kubernetes Indexed
    /// Job: JOB_COMPLETION_INDEX with JOB_COMPLETIONS. See docs/distributed.md.
    #[arg(long, value_name = "INDEX/COUNT", help_heading = "Schedule")]
    pub shard: Option<String>,
    /// Start the schedule at this wall-clock time (RFC 3339, or @UNIX_SECONDS), so every
    /// machine of a sharded run starts together.
    #[arg(long, value_name = "TIME", help_heading = "Schedule")]
    pub start_at: Option<String>,
    /// Client timeout per request (default 5s); timed-out requests are recorded at the deadline.
    #[arg(long, help_heading = "Request")]
    pub timeout: Option<String>,
    /// HTTP method.
    #[arg(long, help_heading = "Request")]
    pub method: Option<String>,
    /// Extra request header, `Name: value` (repeatable).
    #[arg(long = "header", short = 'H', help_heading = "Request")]
    pub headers: Vec<String>,
    /// Request body (sent with Content-Length).
    #[arg(long, help_heading = "Request")]
    pub body: Option<String>,
    /// Largest response head (status line and headers) accepted, e.g. 64KiB (default);
    /// a larger one fails its request as `protocol`.
    #[arg(long, help_heading = "Request")]
    pub max_header: Option<String>,
    /// Largest response body accepted, e.g. 256MiB (default); a larger one fails its
    /// request as `protocol`.
    #[arg(long, help_heading = "Request")]
    pub max_body: Option<String>,
    /// Send a non-idempotent request (POST, PATCH, …) again when the server closed its
    /// reused keep-alive connection before answering (idempotent ones always are, once).
    #[arg(long, help_heading = "Request")]
    pub retry_non_idempotent: bool,
    /// Data file (CSV with a header row, or NDJSON) whose columns fill `{{column}}`
    /// placeholders in the path, query, header values and body; see docs/scenario.md.
    #[arg(long, value_name = "FILE", help_heading = "Request")]
    pub data: Option<PathBuf>,
    /// How rows of --data are drawn: seq (default), uniform, or zipf:S (row 1 the hottest;
    /// e.g. zipf:1.1).
    #[arg(long, value_name = "DIST", help_heading = "Request")]
    pub key_dist: Option<String>,
    /// Seed of the --key-dist draws (default: chosen at start and reported in summary.json).
    #[arg(long, help_heading = "Request")]
    pub seed: Option<u64>,
    /// Close each connection after its response (from the loader's side) instead of reusing it.
    #[arg(long, help_heading = "Protocol")]
    pub no_keepalive: bool,
    /// Speak HTTP/2: prior knowledge (h2c) for http://, ALPN h2 for https://. Requests are
    /// multiplexed as streams, at most --max-streams per connection.
    #[arg(long, conflicts_with = "http1", help_heading = "Protocol")]
    pub http2: bool,
    /// Speak HTTP/1.1 (the default; overrides `http2 = true` in a scenario file).
    #[arg(long, help_heading = "Protocol")]
    pub http1: bool,
    /// HTTP/2: requests in flight per connection at most (default 100), never above the
    /// server's SETTINGS_MAX_CONCURRENT_STREAMS.
    #[arg(long, help_heading = "Protocol")]
    pub max_streams: Option<u32>,
    /// gRPC unary calls to this method (package.Service/Method), over HTTP/2. The request
    /// message is --body as JSON (default {}); -H headers are metadata.
    #[arg(long, help_heading = "Protocol")]
    pub grpc: Option<String>,
    /// gRPC: the .proto file defining the method (repeatable; imports resolved from
    /// --proto-path, by default each file's directory). Without it, the server's reflection.
    #[arg(long = "proto", value_name = "FILE", help_heading = "Protocol")]
    pub protos: Vec<PathBuf>,
    /// gRPC: a directory .proto imports are looked up in (repeatable).
    #[arg(long = "proto-path", value_name = "DIR", help_heading = "Protocol")]
    pub proto_paths: Vec<PathBuf>,
    /// gRPC: the call deadline sent as grpc-timeout, e.g. 500ms.
    #[arg(long, help_heading = "Protocol")]
    pub deadline: Option<String>,
    /// https: do not verify the server's certificate (for self-signed test targets only).
    #[arg(long, help_heading = "Protocol")]
    pub insecure: bool,
    /// https: trust the CA certificates in this PEM file instead of the Mozilla roots.
    #[arg(long, help_heading = "Protocol")]
    pub cacert: Option<PathBuf>,
    /// Directory for summary.json and the other outputs (default: ./out/<timestamp>).
    #[arg(long, help_heading = "Output")]
    pub out: Option<PathBuf>,
    /// Print one plain line per second instead of the live status line.
    #[arg(long, help_heading = "Output")]
    pub plain: bool,
    /// Also write the step judgement as JUnit XML to FILE (one test case per judged step,
    /// one for the verdict), for CI systems.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub junit: Option<PathBuf>,
    /// Stream one JSON object per second to FILE while the run goes (offered, sent, ok,
    /// errors, in flight, connections, busiest shard's CPU); the lines add up to the totals.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub json_lines: Option<PathBuf>,
    /// Serve live metrics at http://ADDR/metrics while the run goes (Prometheus text, or
    /// OpenMetrics when the scraper asks for it): counts, errors by class, latency and
    /// send-lag histograms, in flight, connections, shard CPU, probes, phase (docs/metrics.md).
    /// The last values equal summary.json's totals.
    #[arg(long, value_name = "ADDR", help_heading = "Output")]
    pub metrics: Option<String>,
    /// After the run, keep serving the final metrics this long so a scraper gets them
    /// (default 5s; a signal ends it early).
    #[arg(long, value_name = "DUR", requires = "metrics", help_heading = "Output")]
    pub metrics_linger: Option<String>,
    /// Keep-alive connections in the pool (all shards together).
    #[arg(long, help_heading = "Machine")]
    pub connections: Option<usize>,
    /// Shard threads, one io_uring ring each (default: the CPUs this process may use).
    #[arg(long, help_heading = "Machine")]
    pub threads: Option<usize>,
    /// How long after the first of them sends may gather before they leave together
    /// (default: 0 below 20,000 req/s per shard; above, the p99 of the shard's own wake-up
    /// lateness, 25–100 µs). Sends may leave up to this late (recorded as send lag); `0`
    /// wakes for every send at any rate, at a CPU cost.
    #[arg(long, help_heading = "Machine")]
    pub wake_window: Option<String>,
    /// How long before its intended time a send may leave with a wake-up that sends another
    /// (default 100us: at 10,000 req/s per shard two sends share a wake-up, neither late; at
    /// most 10ms, which sends in rounds as h2load's `--rps` does, for its CPU cost).
    /// Such a send is measured from when it left, never from its later intended time; `0`
    /// sends nothing before its time, at a CPU cost.
    #[arg(long, help_heading = "Machine")]
    pub send_ahead: Option<String>,
    /// Do not load the eBPF probes.
    #[arg(long, help_heading = "Machine")]
    pub no_probes: bool,
    /// Pre-flight noise check before each run: how late this host wakes sleeping threads
    /// (default 2s; 0 skips it).
    #[arg(long, help_heading = "Machine")]
    pub preflight: Option<String>,
    /// Hold /dev/cpu_dma_latency at this many µs for the run (needs root), or `off` to leave
    /// the machine's setting alone. Default: 0 µs below 20,000 req/s per shard (idle CPUs
    /// poll rather than halt, so each wake-up between sends costs less CPU and lands closer to
    /// its instant), not held above, nor on a machine without a cpuidle driver (nothing there
    /// reads it). See docs/performance.md.
    #[arg(long, value_name = "US|off", help_heading = "Machine")]
    pub cpu_dma_latency: Option<String>,
    /// Serve the kill switch on ADDR (IP:PORT): `loader stop ADDR` stops the run within a
    /// shard turn (≤ 50 ms), as SIGINT would. Needs LOADER_CONTROL_TOKEN (≥ 16 characters),
    /// the token `loader stop` must present.
    #[arg(long, value_name = "ADDR", help_heading = "Machine")]
    pub control: Option<String>,
    /// Latency SLO on each step's p95, e.g. 200ms.
    #[arg(long, help_heading = "Verdict and criteria")]
    pub slo_p95: Option<String>,
    /// Latency SLO on each step's p99, e.g. 500ms.
    #[arg(long, help_heading = "Verdict and criteria")]
    pub slo_p99: Option<String>,
    /// Error budget of each step: a fraction (0.01) or a percentage (1%).
    #[arg(long, allow_hyphen_values = true, help_heading = "Verdict and criteria")]
    pub error_budget: Option<String>,
    /// Run the plan N times; max sustainable = the lowest knee.
    #[arg(long, allow_negative_numbers = true, help_heading = "Verdict and criteria")]
    pub repeat: Option<i64>,
    /// Capacity plan: usable share of the max sustainable rate per node, in (0, 1] (default 0.7).
    #[arg(long, allow_negative_numbers = true, help_heading = "Verdict and criteria")]
    pub margin: Option<f64>,
    /// Capacity plan: peak demand to plan for, req/s (nodes = ceil(peak / usable) + 1).
    #[arg(long, allow_negative_numbers = true, help_heading = "Verdict and criteria")]
    pub peak: Option<f64>,
    /// Keep sending when the target collapses (by default the run stops once errors or lost
    /// goodput hold for 3 seconds after warm-up).
    #[arg(long, help_heading = "Verdict and criteria")]
    pub no_emergency_stop: bool,
    /// Certificate to compare the run with (default: the newest one of this machine; see
    /// docs/calibration.md).
    #[arg(long, help_heading = "Verdict and criteria")]
    pub certificate: Option<PathBuf>,
    /// Watch a target resource each second, NAME=SOURCE (repeatable): cgroup:PATH, pid:N,
    /// process:NAME, or prometheus:URL;metric=SERIES[;rate][;limit=N]; see docs/watch.md.
    #[arg(long = "watch", value_name = "NAME=SOURCE", help_heading = "Target resources")]
    pub watch: Vec<String>,
    /// The load machine NIC's capacity, Mb/s, where its link cannot say (a cloud instance's
    /// limit, a shaped link); default: the speed sysfs reports, if any.
    #[arg(long, value_name = "MBPS", allow_negative_numbers = true, help_heading = "Verdict and criteria")]
    pub nic_capacity: Option<f64>,
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
