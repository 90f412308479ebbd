//! `summary.watch`: the target's resources as the run watched them (`--watch`, `[[watch]]`),
//! each second and over each step, and what they say about the knee.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What was watched and what it said.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct WatchSummary {
    /// The sources, in the order given.
    pub sources: Vec<WatchSource>,
    /// One entry per second of the run, aligned with `series[].t`: each source's values over
    /// that second, `null` when the source could not be read then (never zeros).
    pub seconds: Vec<WatchSecond>,
    /// The knee explained: the watched resource that reached its ceiling at or before the
    /// knee, with the CPU ceiling it implies, or that none did (null without a knee).
    #[serde(default)]
    pub knee: Option<String>,
    /// The source that reached its ceiling at or before the knee (its name), if one did.
    #[serde(default)]
    pub knee_resource: Option<String>,
    /// CPU the sampling itself took over the run, ms per second (the sampler thread).
    #[serde(default)]
    pub sampler_cpu_ms_per_s: Option<f64>,
    /// The CPUs the sampler thread ran on (`1`, `2-3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampler_cpus: Option<String>,
    /// Whether those CPUs were apart from every shard's (false: no other CPU was allowed,
    /// and the sampler ran beside the shards at the lowest priority, nice 19).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampler_apart: Option<bool>,
    /// When the knee is explained by cores that several watched processes share: each
    /// one's CPU on them at the step that reached the ceiling, the largest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub knee_shares: Vec<WatchShare>,
}

/// One watched source's share of cores that reached their ceiling.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct WatchShare {
    /// The source's name.
    pub name: String,
    /// Its CPU, cores (mean over the step's settled seconds).
    pub cores: f64,
    /// Whether it may also run on CPUs outside those cores (part of its CPU may be there).
    #[serde(default)]
    pub also_elsewhere: bool,
}

/// One watched source.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct WatchSource {
    /// The name it was given (`app` of `--watch app=cgroup:…`).
    pub name: String,
    /// The source as written (`cgroup:/sys/fs/cgroup/app`, `process:nginx`,
    /// `prometheus:http://…`).
    pub source: String,
    /// `cgroup`, `process`, `cpu` or `prometheus`.
    pub kind: String,
    /// The Prometheus series picked (`metric`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// The series is a counter, reported per second.
    #[serde(default)]
    pub rate: bool,
    /// The ceiling of its value: a gauge's `limit`, or a CPU source's cores (a cgroup's
    /// quota, else its cpuset's CPUs; a process tree's quota, else its allowed CPUs; a `cpu:` source's
    /// cores; the cores an idle counter covers).
    #[serde(default)]
    pub limit: Option<f64>,
    /// The host CPUs its CPU runs on, as a list (`1`, `0-1`): a `cpu:` source's cores, a
    /// process tree's affinity, a cgroup's cpuset, a local node_exporter's `cpu` labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    /// The series counts idle CPU seconds, watched as busy cores (`idle`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub idle: bool,
    /// How much of the gauge is the scrape itself, taken off each reading (`self`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrape_self: Option<f64>,
    /// Seconds whose scrape waited for a worker of the pool it counts (`self`: it took
    /// 100 ms or more, or timed out): the pool had none free, read as at its limit.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub queued_s: u64,
    /// Why it could not be read before the run (it was then missing until it answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreached_at_start: Option<String>,
    /// Seconds the source could not be read, and the last reason.
    #[serde(default)]
    pub missing_s: u64,
    /// Why it last could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// One second of every source.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct WatchSecond {
    /// Seconds since the run's start (as `series[].t`).
    pub t: u64,
    /// By source name; `None` when it could not be read that second.
    pub values: BTreeMap<String, Option<WatchValues>>,
}

/// What one source showed over one second (or, in a step, the mean of its seconds).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct WatchValues {
    /// CPU used, cores (cgroup, process tree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_cores: Option<f64>,
    /// `cpu.pressure` some: share of the time some task waited for a CPU, % (cgroup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_some_pct: Option<f64>,
    /// `cpu.pressure` full, % (cgroup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_full_pct: Option<f64>,
    /// Time the quota throttled the cgroup, ms per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttled_ms: Option<f64>,
    /// Memory in use, MiB (cgroup `memory.current`, a process tree's RSS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<f64>,
    /// `memory.pressure` some, % (cgroup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_some_pct: Option<f64>,
    /// CPU the hypervisor took from the watched cores, cores (`cpu:` sources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_steal_cores: Option<f64>,
    /// Open file descriptors (process tree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fds: Option<f64>,
    /// The Prometheus series' value (per second with `rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
}

/// One source over one step's settled seconds (`phases[].watch`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct WatchStep {
    /// Means over the seconds read.
    pub mean: WatchValues,
    /// Maxima over the seconds read.
    pub max: WatchValues,
    /// Seconds read, and seconds missing, of the step's settled seconds.
    pub seconds: u64,
    /// Seconds the source could not be read.
    #[serde(default)]
    pub missing: u64,
    /// CPU per ok answer, ms (CPU sources, steps with answers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ms_per_ok: Option<f64>,
    /// The rate that CPU would allow: `limit cores × 1000 / cpu_ms_per_ok`, req/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ceiling_rps: Option<f64>,
    /// What reached its ceiling in this step (`CPU 0.49 of 0.50 cores`), if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saturated: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
