//! Every option of `loader run`, each declared once: its scenario key (section, key, TOML
//! form, the docs' type and default) and the flags that set it (name, help, heading, clap
//! attributes, and how the flag's value becomes the key's).
//!
//! From these rows [`super::declare`]'s `options!` makes clap's [`RunArgs`], each section's
//! TOML table and `Raw*` struct, the merge (file first, flags win, each value knowing where
//! it was written) and `docs/scenario.md`'s key tables. Adding an option is a row here, its
//! use (a check in `spec` or below, a field of the plan) and its test; nothing else.
//!
//! A key's doc comment is its meaning in the docs' table; a flag's is its `--help` text, and
//! the table's too when the key has none. The rows' order is `--help`'s: clap lists the
//! flags in it, and each heading where its first flag is. What each value may be, and what it does, is
//! checked and said where it is used (`spec.rs`, `profile.rs`, `limits.rs`, …).

use std::path::PathBuf;

use super::declare::options;
use super::input::{DurationText, Fraction, FractionText, PathList, PathText, SizeText};

/// A pool size or thread count as clap reads it, as the file gives it.
fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

options! {
    [target] RawTarget TargetTable {
        /// Target URL, `http://host:port/path` (or `https://`); its path is the default request
        /// path. Without it, the built-in target is started in-process (as in the demo).
        url: String, "string", "built-in target" {
            /// Target URL, e.g. http://127.0.0.1:8080/ . Without it (and without a scenario) loader
            /// starts its built-in target on this host and runs a short stepped demo against it.
            flag url: Option<String> = "--url", "Target";
        }
        timeout: DurationText, "duration (0, 1h]", "`\"5s\"`" {
            /// Client timeout per request (default 5s; the built-in demo 1s); timed-out requests are recorded at the deadline.
            flag timeout: Option<String> = "--timeout", "Request";
        }
        max_header: SizeText, "size 1KiB–64MiB", "`\"64KiB\"`" {
            /// Largest response head (status line and headers) accepted, e.g. 64KiB (default);
            /// a larger one fails its request as `protocol`.
            flag max_header: Option<String> = "--max-header", "Request";
        }
        max_body: SizeText, "size ≤ 1TiB", "`\"256MiB\"`" {
            /// Largest response body accepted, e.g. 256MiB (default); a larger one fails its
            /// request as `protocol`.
            flag max_body: Option<String> = "--max-body", "Request";
        }
        retry_non_idempotent: bool, "bool", "`false`" {
            /// Send a non-idempotent request (POST, PATCH, …) again when the server closed its
            /// reused keep-alive connection before answering (idempotent ones always are, once).
            flag retry_non_idempotent: bool = "--retry-non-idempotent", "Request";
        }
        user_agent: String, "string", "`loader/VERSION`" {
            /// The User-Agent header of every request (default loader/VERSION), e.g. the one
            /// the target's routing or rate limits expect; a request's own User-Agent header
            /// (-H, `[[request]].headers`) wins.
            flag user_agent: Option<String> = "--user-agent", "Request", [value_name = "TEXT"];
        }
        /// `false` closes each connection after its response, from the loader's side.
        keepalive: bool, "bool", "`true`" {
            /// Close each connection after its response (from the loader's side) instead of reusing it.
            flag no_keepalive: bool = "--no-keepalive", "Protocol", via |_| false;
        }
        /// HTTP/2: h2c with prior knowledge for `http://`, ALPN `h2` for `https://`
        /// ([http2.md](http2.md)).
        http2: bool, "bool", "`false`" {
            /// Speak HTTP/2: prior knowledge (h2c) for http://, ALPN h2 for https://. Requests are
            /// multiplexed as streams, at most --max-streams per connection.
            flag http2: bool = "--http2", "Protocol", [conflicts_with = "http1"];
            /// Speak HTTP/1.1 (the default; overrides `http2 = true` in a scenario file).
            flag http1: bool = "--http1", "Protocol", via |_| false;
        }
        max_streams: i64, "integer 1–10 000", "100" {
            /// HTTP/2: requests in flight per connection at most (default 100), never above the
            /// server's SETTINGS_MAX_CONCURRENT_STREAMS.
            flag max_streams: Option<u32> = "--max-streams", "Protocol", via i64::from;
        }
        connections: i64, "integer 1–1 000 000", "64" {
            /// Keep-alive connections in the pool (all shards together).
            flag connections: Option<usize> = "--connections", "Machine", via count;
        }
        threads: i64, "integer 1–4096", "CPUs available" {
            /// Shard threads, one io_uring ring each (default: the CPUs this process may use).
            flag threads: Option<usize> = "--threads", "Machine", via count;
        }
        wake_window: DurationText, "duration ≤ 1s", "by rate" {
            /// How long after the first of them sends may gather before they leave together
            /// (default: 0 below 20,000 req/s per shard; above, the p99 of the shard's own wake-up
            /// lateness, 25–100 µs). Sends may leave up to this late (recorded as send lag); `0`
            /// wakes for every send at any rate, at a CPU cost.
            flag wake_window: Option<String> = "--wake-window", "Machine";
        }
        /// How long before its intended time a send may leave — with a wake-up that sends another,
        /// or on a wake-up early for it (below the rate at which this window pairs sends);
        /// measured from when it left. From `"1ms"` the shard sends in rounds (`"10ms"`: h2load's
        /// `--rps` rounds, for the CPU they save). `"0s"` sends nothing early
        /// ([methodology.md](methodology.md#three-clocks-per-request)).
        send_ahead: DurationText, "duration ≤ 10ms", "`\"100us\"`" {
            /// How long before its intended time a send may leave with a wake-up that sends another
            /// (default 100us: at 10,000 req/s per shard two sends share a wake-up, neither late; at
            /// most 10ms, which sends in rounds as h2load's `--rps` does, for its CPU cost).
            /// Such a send is measured from when it left, never from its later intended time; `0`
            /// sends nothing before its time, at a CPU cost.
            flag send_ahead: Option<String> = "--send-ahead", "Machine";
        }
    }

    [profile] RawProfile ProfileTable {
        kind: String, "string", "`constant` (`step` when steps are given)" {
            /// Load profile: constant | step | ramp | spike | soak | breakpoint | closed.
            flag profile: Option<String> = "--profile", "Schedule";
        }
        rate: f64, "rate", "required" {
            /// Arrival rate in requests per second (open loop: independent of responses): the
            /// constant and soak rate, the spike's base rate, the rate a ramp reaches.
            flag rate: Option<f64> = "--rate", "Schedule", [allow_negative_numbers = true];
        }
        duration: DurationText, "duration > 0", "`\"10s\"` (ramp `\"60s\"`, soak `\"1h\"`)" {
            /// Length of the measured phase (constant, soak, ramp), of each step's hold (step,
            /// breakpoint), or of the base holds around a spike.
            flag duration: Option<String> = "--duration", "Schedule";
        }
        /// Warm-up phase before the profile, reported apart (`warmup`), never judged nor mixed
        /// into a step.
        warmup: DurationText, "duration", "`\"0s\"` (demo: `\"2s\"`)" {
            /// Warm-up before measuring, at the first rate (or --warmup-rate); reported apart.
            flag warmup: Option<String> = "--warmup", "Schedule";
        }
        warmup_rate: f64, "rate", "the profile's first non-zero rate" {
            /// Rate of the warm-up (default: the profile's first non-zero rate).
            flag warmup_rate: Option<f64> = "--warmup-rate", "Schedule", [allow_negative_numbers = true];
        }
        steps: Vec<f64>, "list of rates", "—" {
            /// Step rates for the step profile, e.g. 100,200,300 (or --step-start/--step-increment).
            flag steps: Option<Vec<f64>> = "--steps", "Schedule",
                [value_delimiter = ',', allow_negative_numbers = true];
        }
        start: f64, "rate", "—" {
            /// First step's rate, when the steps are start + k × increment (step, breakpoint).
            flag step_start: Option<f64> = "--step-start", "Schedule", [allow_negative_numbers = true];
        }
        increment: f64, "number", "—" {
            /// Rate added at each step (with --step-start).
            flag step_increment: Option<f64> = "--step-increment", "Schedule", [allow_negative_numbers = true];
        }
        count: i64, "integer 1–1000", "—" {
            /// Number of steps (with --step-start; a breakpoint run may give --max-rate instead).
            flag step_count: Option<i64> = "--step-count", "Schedule", [allow_negative_numbers = true];
        }
        max_rate: f64, "rate", "—" {
            /// Highest step rate (step, breakpoint): stepping stops past it.
            flag max_rate: Option<f64> = "--max-rate", "Schedule", [allow_negative_numbers = true];
        }
        hold: DurationText, "duration > 0", "`\"20s\"` (demo `\"3s\"`, spike `\"30s\"`)" {
            /// Hold time of each step (step, breakpoint) or of the spike's peak.
            flag hold: Option<String> = "--hold", "Schedule";
        }
        ramp: DurationText, "duration", "`\"0s\"` (spike `\"5s\"`)" {
            /// Ramp before each step's hold, from the previous rate (step, breakpoint; default 0 =
            /// jump), or the spike's ramp up and down (default 5s).
            flag ramp: Option<String> = "--ramp", "Schedule";
        }
        from: f64, "rate ≥ 0", "0" {
            /// Rate a ramp profile starts from (default 0).
            flag from_rate: Option<f64> = "--from-rate", "Schedule", [allow_negative_numbers = true];
        }
        peak_rate: f64, "rate > `rate`", "4 × `rate`" {
            /// Peak rate of a spike (default 4 × --rate).
            flag peak_rate: Option<f64> = "--peak-rate", "Schedule", [allow_negative_numbers = true];
        }
        /// Spike: the hold at base before the spike (`--duration` sets it and `recovery`).
        base_hold: DurationText, "duration > 0", "`\"30s\"`" {}
        /// Spike: the ramp from the peak back to base (0: drop).
        ramp_down: DurationText, "duration", "= `ramp`" {}
        /// Spike: the hold at base after the spike; time-to-recover is measured here.
        recovery: DurationText, "duration > 0", "`\"60s\"`" {}
        /// Closed model: this many virtual users, each sending, waiting for its answer (or its
        /// timeout), thinking (`think`) and sending again, for `duration`
        /// ([methodology.md](methodology.md#the-closed-model)).
        vus: i64, "integer 1–100 000", "—" {
            /// Closed model: N virtual users, each sending, waiting for its answer, thinking
            /// (--think) and sending again — the target sets the pace (wrk's and oha's loop with
            /// --think 0). For --duration.
            flag vus: Option<i64> = "--vus", "Schedule", [allow_negative_numbers = true];
        }
        /// Closed model, stepped: the users of each step, each held for `hold`.
        vus_steps: Vec<f64>, "list of integers", "—" {
            /// Closed model, stepped: the virtual users of each step, e.g. 10,20,40,60, each held
            /// for --hold (the warm-up runs the first step's).
            flag vus_steps: Option<Vec<f64>> = "--vus-steps", "Schedule",
                [value_delimiter = ',', allow_negative_numbers = true];
        }
        /// Closed model: each user's think time between an answer and its next send, constant
        /// (`"200ms"`) or exponential with that mean (`"exp:200ms"`).
        think: String, "duration, or `exp:`duration", "`\"0s\"`" {
            /// Closed model: think time between an answer and the user's next send, e.g. 200ms, or
            /// exp:200ms for exponential think times with that mean (default 0).
            flag think: Option<String> = "--think", "Schedule", [value_name = "DUR|exp:MEAN"];
        }
        /// How requests arrive: `uniform` (evenly spaced, wrk2's schedule) or `poisson`
        /// (at random instants with the same mean rate, as independent users arrive; the same
        /// `--seed`, the same instants).
        arrival: String, "string", "`uniform`" {
            /// How requests arrive: uniform (evenly spaced, the default) or poisson (random
            /// instants at the same mean rate; reproducible with --seed).
            flag arrival: Option<String> = "--arrival", "Schedule";
        }
        repeat: i64, "integer 1–100", "1" {
            /// Run the plan N times; max sustainable = the lowest knee.
            flag repeat: Option<i64> = "--repeat", "Verdict and criteria", [allow_negative_numbers = true];
        }
    }

    [slo] RawSlo SloTable {
        p95: DurationText, "duration (0, 1h]", "none" {
            /// Latency SLO on each step's p95, e.g. 200ms.
            flag slo_p95: Option<String> = "--slo-p95", "Verdict and criteria";
        }
        p99: DurationText, "duration (0, 1h]", "none" {
            /// Latency SLO on each step's p99, e.g. 500ms.
            flag slo_p99: Option<String> = "--slo-p99", "Verdict and criteria";
        }
        error_budget: Fraction, "fraction [0, 1)", "none" {
            /// Error budget of each step: a fraction (0.01) or a percentage (1%).
            flag error_budget: Option<String> = "--error-budget", "Verdict and criteria",
                [allow_hyphen_values = true], via FractionText::Text;
        }
        /// Lowest ok/s ÷ offered/s of a step.
        goodput_min: Fraction, "fraction (0, 1]", "none" {}
        /// Highest share of a step's sends that may leave late.
        late_max: Fraction, "fraction [0, 1]", "none" {}
        /// Highest number of dropped (never sent) requests in a step.
        dropped_max: i64, "integer ≥ 0", "none" {}
    }

    [verdict] RawVerdict VerdictTable {
        /// Load the eBPF probes that give the verdict its evidence.
        probes: bool, "bool", "`true`" {
            /// Do not load the eBPF probes.
            flag no_probes: bool = "--no-probes", "Machine", via |_| false;
        }
        /// Loader CPU p95 limit, percent.
        cpu_p95_pct: f64, "number (0, 100]", "70" {}
        /// Loader-thread run-queue delay p99 limit, ms.
        runqueue_p99_ms: f64, "number > 0", "1" {}
        /// Read lag p99 limit, ms: how long answers sat in the loader's sockets after the kernel
        /// stamped them; invalidates above it and above the read floor (2 ms of deliberate read
        /// deferral plus the host's wake-up jitter).
        read_lag_p99_ms: f64, "number > 0", "5" {}
        /// Send lag p99 limit, ms.
        send_lag_p99_ms: f64, "number > 0", "50" {}
        /// Live TIME_WAIT sockets limit.
        time_wait: i64, "integer ≥ 1", "5000" {}
        /// Ephemeral ports in use, percent of the range.
        ephemeral_ports_pct: f64, "number (0, 100]", "60" {}
        /// Open descriptors, percent of the limit.
        fds_pct: f64, "number (0, 100]", "80" {}
        /// Achieved rate, percent of the certified ceiling.
        cert_ceiling_pct: f64, "number (0, 100]", "70" {}
        /// Samples needed beyond a quoted percentile.
        min_tail_samples: i64, "integer ≥ 1", "100" {}
        /// The load machine NIC's capacity, Mb/s, where its link cannot say or is not the limit:
        /// its busiest second at 90 % of it invalidates (`nic_saturated`).
        nic_capacity_mbps: f64, "number > 0", "the link's speed from sysfs" {
            /// The load machine NIC's capacity, Mb/s, where its link cannot say (a cloud instance's
            /// limit, a shaped link); default: the speed sysfs reports, if any.
            flag nic_capacity: Option<f64> = "--nic-capacity", "Verdict and criteria",
                [value_name = "MBPS", allow_negative_numbers = true];
        }
        /// The loader's own delay p99 (a phase's send lag with connections free; run-queue delay)
        /// above this percent of the phase's latency p99, and above 0.25 ms, invalidates; 100
        /// turns it off.
        loader_delay_pct: f64, "number (0, 100]", "25" {}
    }

    [capacity] RawCapacity CapacityTable {
        /// Usable share of the max sustainable rate per node (DESIGN: 0.6–0.8).
        margin: f64, "number in [0.6, 0.8]", "0.7" {
            /// Capacity plan: usable share of the max sustainable rate per node, in [0.6, 0.8] (default 0.7).
            flag margin: Option<f64> = "--margin", "Verdict and criteria", [allow_negative_numbers = true];
        }
        peak: f64, "number > 0", "none" {
            /// Capacity plan: peak demand to plan for, req/s (nodes = ceil(peak / usable) + 1).
            flag peak: Option<f64> = "--peak", "Verdict and criteria", [allow_negative_numbers = true];
        }
    }

    [output] RawOutput OutputTable {
        /// Directory for `summary.json` and the other outputs.
        dir: PathText, "string", "`out/<timestamp>`" {
            /// Directory for summary.json and the other outputs (default: ./out/<timestamp>).
            flag out: Option<PathBuf> = "--out", "Output";
        }
        plain: bool, "bool", "`false`" {
            /// Print one plain line per second instead of the live status line.
            flag plain: bool = "--plain", "Output";
        }
    }

    [data] RawData DataTable {
        /// CSV with a header row (column names), or NDJSON (one JSON object per line; `.ndjson`,
        /// `.jsonl`, `.json`, or a first line starting `{`). Relative to the scenario file; a
        /// flag's, to the working directory.
        file: PathText, "string", "—" {
            /// Data file (CSV with a header row, or NDJSON) whose columns fill `{{column}}`
            /// placeholders in the path, query, header values and body; see docs/scenario.md.
            flag data: Option<PathBuf> = "--data", "Request", [value_name = "FILE"];
        }
        /// `seq` (rows in order, wrapping round), `uniform`, or `zipf:S` (row k with probability
        /// ∝ 1/k^S; row 1 the hottest — order the file by popularity).
        dist: String, "string", "`seq`" {
            /// How rows of --data are drawn: seq (default), uniform, or zipf:S (row 1 the hottest;
            /// e.g. zipf:1.1).
            flag key_dist: Option<String> = "--key-dist", "Request", [value_name = "DIST"];
        }
        /// Seed of the draws: the data rows, Poisson arrivals and exponential think times. The row and the instant of
        /// each request are functions of the seed and the request's number in the run, not of
        /// the shard that sends it: the same seed and plan send the same rows at the same
        /// instants with any `--threads`. The seed used is in `summary.json` (`data.seed`,
        /// `run.arrival_seed`).
        seed: i64, "integer ≥ 0", "chosen at start" {
            /// Seed of the --key-dist draws, of --arrival poisson and of --think exp:MEAN (default:
            /// chosen at start and reported in summary.json).
            flag seed: Option<u64> = "--seed", "Request", via |s: u64| i64::try_from(s).unwrap_or(i64::MAX);
        }
    }

    [grpc] RawGrpc GrpcTable {
        /// Every request is a call of this unary method, over HTTP/2.
        method: String, "text `package.Service/Method`", "—" {
            /// gRPC unary calls to this method (package.Service/Method), over HTTP/2. The request
            /// message is --body as JSON (default {}); -H headers are metadata.
            flag grpc: Option<String> = "--grpc", "Protocol";
        }
        /// The `.proto` files defining it (compiled in-process); none: the server's reflection
        /// gives them.
        proto: PathList, "list of paths", "—" {
            /// gRPC: the .proto file defining the method (repeatable; imports resolved from
            /// --proto-path, by default each file's directory). Without it, the server's reflection.
            flag protos: Vec<PathBuf> = "--proto", "Protocol", [value_name = "FILE"];
        }
        /// Where imports are looked up.
        import_paths: PathList, "list of paths", "each file's directory" {
            /// gRPC: a directory .proto imports are looked up in (repeatable).
            flag proto_paths: Vec<PathBuf> = "--proto-path", "Protocol", [value_name = "DIR"];
        }
        /// Sent as `grpc-timeout`.
        deadline: DurationText, "duration", "none" {
            /// gRPC: the call deadline sent as grpc-timeout, e.g. 500ms.
            flag deadline: Option<String> = "--deadline", "Protocol";
        }
    }

    flags RawFlags {
        /// HTTP method.
        flag method: Option<String> = "--method", "Request";
        /// Extra request header, `Name: value` (repeatable).
        flag headers: Vec<String> = "--header", "Request", [short = 'H'];
        /// Request body (sent with Content-Length).
        flag body: Option<String> = "--body", "Request";
        /// Send only this machine's part of the run: INDEX/COUNT (0-based), every request whose
        /// number is INDEX modulo COUNT, so COUNT machines together send the one-machine plan
        /// exactly (`loader merge` joins their outputs). Also read from a Kubernetes Indexed
        /// Job: JOB_COMPLETION_INDEX with JOB_COMPLETIONS. See docs/distributed.md.
        flag shard: Option<String> = "--shard", "Schedule", [value_name = "INDEX/COUNT"];
        /// Start the schedule at this wall-clock time (RFC 3339, or @UNIX_SECONDS), so every
        /// machine of a sharded run starts together.
        flag start_at: Option<String> = "--start-at", "Schedule", [value_name = "TIME"];
    }

    clap {
        /// https: do not verify the server's certificate (for self-signed test targets only).
        flag insecure: bool = "--insecure", "Protocol";
        /// https: trust the CA certificates in this PEM file instead of the Mozilla roots.
        flag cacert: Option<PathBuf> = "--cacert", "Protocol";
        /// Print nothing on stdout but the verdict's headline (`VERDICT: …`), one line per run
        /// of --repeat: no progress, no start-up lines, no table. Warnings and errors still go
        /// to stderr; summary.json, report.html and the other files are written and the exit
        /// code is the same as without it.
        flag quiet: bool = "--quiet", "Output", [conflicts_with = "json"];
        /// Print the run's summary.json document on stdout, compact on one line, and nothing
        /// else there (as --quiet otherwise); with --repeat one line per run (JSON Lines). Not
        /// --json-lines, which streams per-second records to a file during the run.
        flag json: bool = "--json", "Output";
        /// Also write the step judgement as JUnit XML to FILE (one test case per judged step,
        /// one for the verdict), for CI systems.
        flag junit: Option<PathBuf> = "--junit", "Output", [value_name = "FILE"];
        /// Stream one JSON object per second to FILE while the run goes (offered, sent, ok,
        /// errors, in flight, connections, busiest shard's CPU); the lines add up to the totals.
        /// Not --json, which prints the final summary on stdout.
        flag json_lines: Option<PathBuf> = "--json-lines", "Output", [value_name = "FILE"];
        /// Serve live metrics at http://ADDR/metrics while the run goes (Prometheus text, or
        /// OpenMetrics when the scraper asks for it): counts, errors by class, latency and
        /// send-lag histograms, in flight, connections, shard CPU, probes, phase (docs/metrics.md).
        /// The last values equal summary.json's totals.
        flag metrics: Option<String> = "--metrics", "Output", [value_name = "ADDR"];
        /// After the run, keep serving the final metrics this long so a scraper gets them
        /// (default 5s; a signal ends it early).
        flag metrics_linger: Option<String> = "--metrics-linger", "Output",
            [value_name = "DUR", requires = "metrics"];
        /// Pre-flight noise check before each run: how late this host wakes sleeping threads
        /// (default 2s; 0 skips it).
        flag preflight: Option<String> = "--preflight", "Machine";
        /// Hold /dev/cpu_dma_latency at this many µs for the run (needs root), or `off` to leave
        /// the machine's setting alone. Default: 0 µs below 20,000 req/s per shard (idle CPUs
        /// poll rather than halt, so each wake-up between sends costs less CPU and lands closer to
        /// its instant), not held above, nor on a machine without a cpuidle driver (nothing there
        /// reads it), nor on a virtual machine (polling vCPUs draw the host's steal). See
        /// docs/performance.md.
        flag cpu_dma_latency: Option<String> = "--cpu-dma-latency", "Machine", [value_name = "US|off"];
        /// Serve the kill switch on ADDR (IP:PORT): `loader stop ADDR` stops the run within a
        /// shard turn (≤ 50 ms), as SIGINT would. Needs LOADER_CONTROL_TOKEN (≥ 16 characters),
        /// the token `loader stop` must present.
        flag control: Option<String> = "--control", "Machine", [value_name = "ADDR"];
        /// Keep sending when the target collapses (by default the run stops once errors or lost
        /// goodput hold for 3 seconds after warm-up).
        flag no_emergency_stop: bool = "--no-emergency-stop", "Verdict and criteria";
        /// Certificate to compare the run with (default: the newest one of this machine; see
        /// docs/calibration.md).
        flag certificate: Option<PathBuf> = "--certificate", "Verdict and criteria";
        /// Watch a target resource each second, NAME=SOURCE (repeatable): cgroup:PATH, pid:N,
        /// process:NAME, cpu:LIST (host cores, e.g. cpu:1 or cpu:2-3,5), or
        /// prometheus:URL;metric=SERIES[;rate][;limit=N][;idle][;self=N]; see docs/watch.md.
        flag watch: Vec<String> = "--watch", "Target resources", [value_name = "NAME=SOURCE"];
        /// Refuse the run when a watched source cannot be reached before it starts (by
        /// default: a warning, and its seconds missing until it answers).
        flag watch_strict: bool = "--watch-strict", "Target resources";
    }

    hand {
        /// Scenario file (TOML; see docs/scenario.md). Flags given on the command line override it.
        pub scenario: Option<PathBuf>,
    }
}
