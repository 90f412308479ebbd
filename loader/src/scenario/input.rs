//! The run as written, before validation: every value with where it came from.
//!
//! [`Raw`] is filled from the scenario file first (see [`super::file`]) and then overlaid by
//! the flags, so a flag always wins. Each value is a [`Given`], which remembers its
//! [`Origin`] — a flag's name, or the file's `path:line:column` and dotted key — so that
//! validation ([`super::spec`]) can say exactly where a bad value was written. This module
//! checks nothing.

use std::path::PathBuf;

use crate::cli::RunArgs;
use crate::error::InputError;

/// Where a value was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A command-line flag (`--hold`).
    Flag(&'static str),
    /// A key of the scenario file: `at` is `path:line:column`, `key` the dotted key
    /// (`profile.hold`, `request[2].weight`).
    File {
        /// `path:line:column`.
        at: String,
        /// Dotted key.
        key: String,
    },
}

impl Origin {
    /// The label an error starts with: `--hold` or `scenario.toml:7:8: profile.hold`.
    pub(crate) fn label(&self) -> String {
        match self {
            Origin::Flag(flag) => (*flag).to_string(),
            Origin::File { at, key } => format!("{at}: {key}"),
        }
    }
}

/// A value and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Given<T> {
    /// The value as written (typed only as far as TOML or clap typed it).
    pub value: T,
    /// Where.
    pub origin: Origin,
}

impl<T> Given<T> {
    /// A value from flag `flag`.
    pub(crate) fn flag(flag: &'static str, value: T) -> Self {
        Given { value, origin: Origin::Flag(flag) }
    }

    /// An error about this value.
    pub(crate) fn err(&self, problem: impl Into<String>) -> InputError {
        InputError::new(self.origin.label(), problem)
    }

    /// It came from a flag.
    pub(crate) fn is_flag(&self) -> bool {
        matches!(self.origin, Origin::Flag(_))
    }
}

/// A value that is optional; `set` keeps the first and lets a later source override.
pub(crate) type Opt<T> = Option<Given<T>>;

/// A fraction as written: a number (`0.01`) or a percent string (`"1%"`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FractionText {
    /// `0.01`.
    Number(f64),
    /// `"1%"` (or a number in a string, from a flag).
    Text(String),
}

/// One `[[request]]` entry.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawRequest {
    /// Where the entry starts (for errors about the entry as a whole).
    pub at: Option<Origin>,
    pub name: Opt<String>,
    pub method: Opt<String>,
    pub path: Opt<String>,
    /// `(name, value)` pairs; the origin is that of the `headers` key.
    pub headers: Opt<Vec<(String, String)>>,
    pub body: Opt<String>,
    pub weight: Opt<i64>,
}

/// One `[[watch]]` entry, or one `--watch` (whose whole text is in `source`).
#[derive(Debug, Clone)]
pub(crate) struct RawWatch {
    /// Where the entry starts (for errors about the entry as a whole).
    pub at: Origin,
    pub name: Opt<String>,
    pub source: Opt<String>,
    pub metric: Opt<String>,
    pub rate: Opt<bool>,
    pub limit: Opt<f64>,
}

/// `[profile]` and the profile flags.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawProfile {
    pub kind: Opt<String>,
    pub rate: Opt<f64>,
    pub duration: Opt<String>,
    pub steps: Opt<Vec<f64>>,
    pub start: Opt<f64>,
    pub increment: Opt<f64>,
    pub count: Opt<i64>,
    pub max_rate: Opt<f64>,
    pub hold: Opt<String>,
    pub ramp: Opt<String>,
    pub ramp_down: Opt<String>,
    pub base_hold: Opt<String>,
    pub recovery: Opt<String>,
    pub peak_rate: Opt<f64>,
    pub from: Opt<f64>,
    pub warmup: Opt<String>,
    pub warmup_rate: Opt<f64>,
    pub repeat: Opt<i64>,
}

impl RawProfile {
    /// The keys that are set, by their file name, with their origin (for "does not apply").
    pub(crate) fn present(&self) -> Vec<(&'static str, &Origin)> {
        let mut out = Vec::new();
        macro_rules! each {
            ($($field:ident),*) => {$(
                if let Some(g) = &self.$field {
                    out.push((stringify!($field), &g.origin));
                }
            )*};
        }
        each!(
            rate, duration, steps, start, increment, count, max_rate, hold, ramp, ramp_down, base_hold, recovery,
            peak_rate, from
        );
        out
    }
}

/// `[slo]` and the SLO flags.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawSlo {
    pub p95: Opt<String>,
    pub p99: Opt<String>,
    pub error_budget: Opt<FractionText>,
    pub goodput_min: Opt<FractionText>,
    pub late_max: Opt<FractionText>,
    pub dropped_max: Opt<i64>,
}

/// `[verdict]` limits (file only).
#[derive(Debug, Clone, Default)]
pub(crate) struct RawVerdict {
    pub cpu_p95_pct: Opt<f64>,
    pub runqueue_p99_ms: Opt<f64>,
    pub send_lag_p99_ms: Opt<f64>,
    pub read_lag_p99_ms: Opt<f64>,
    pub time_wait: Opt<i64>,
    pub ephemeral_ports_pct: Opt<f64>,
    pub fds_pct: Opt<f64>,
    pub cert_ceiling_pct: Opt<f64>,
    pub nic_capacity_mbps: Opt<f64>,
    pub min_tail_samples: Opt<i64>,
    pub loader_delay_pct: Opt<f64>,
}

/// Everything the user wrote, file and flags merged (flags win).
#[derive(Debug, Clone, Default)]
pub(crate) struct Raw {
    /// The scenario file's path, when there is one.
    pub file: Option<PathBuf>,
    /// Where each section of the file starts (`path:line:column`), for "required" errors;
    /// a section that is absent points at the file's start.
    pub sections: Vec<(&'static str, String)>,
    pub url: Opt<String>,
    pub connections: Opt<i64>,
    pub threads: Opt<i64>,
    pub timeout: Opt<String>,
    pub keepalive: Opt<bool>,
    pub wake_window: Opt<String>,
    pub send_ahead: Opt<String>,
    pub max_header: Opt<String>,
    pub max_body: Opt<String>,
    pub retry_non_idempotent: Opt<bool>,
    /// `--http2` / `--http1`, `target.http2`; `--max-streams`, `target.max_streams`.
    pub http2: Opt<bool>,
    pub max_streams: Opt<i64>,
    /// `--grpc`, `--proto`, `--proto-path`, `--deadline` (flags only).
    pub grpc: Opt<String>,
    pub protos: Vec<Given<PathBuf>>,
    pub proto_paths: Vec<Given<PathBuf>>,
    pub deadline: Opt<String>,
    pub requests: Vec<RawRequest>,
    /// `--method`, `--header`, `--body`: applied to every request.
    pub method: Opt<String>,
    pub headers: Vec<Given<String>>,
    pub body: Opt<String>,
    pub profile: RawProfile,
    /// `--profile` replaced the file's `profile.kind`: the file's keys of other kinds are
    /// then ignored instead of rejected.
    pub kind_overridden: bool,
    pub slo: RawSlo,
    pub verdict: RawVerdict,
    pub probes: Opt<bool>,
    pub margin: Opt<f64>,
    pub peak: Opt<f64>,
    pub out: Opt<PathBuf>,
    pub plain: Opt<bool>,
    /// `[data]`: the file whose rows fill `{{column}}` placeholders, how rows are drawn.
    pub data: Opt<PathBuf>,
    pub key_dist: Opt<String>,
    pub seed: Opt<i64>,
    /// `--shard INDEX/COUNT` (or a Kubernetes Indexed Job's `JOB_COMPLETION_INDEX` with
    /// `JOB_COMPLETIONS`), `--start-at` (flags and environment only).
    pub shard: Opt<String>,
    pub start_at: Opt<String>,
    /// `[[watch]]` and `--watch`: the target's resources to sample each second.
    pub watch: Vec<RawWatch>,
}

impl Raw {
    /// An error for a required value that is missing: at the file's section when there is
    /// a file, else naming `flag`.
    pub(crate) fn missing(&self, section: &str, key: &str, flag: &'static str, problem: &str) -> InputError {
        match &self.file {
            None => InputError::new(flag, problem),
            Some(path) => {
                let at = self
                    .sections
                    .iter()
                    .find(|(s, _)| *s == section)
                    .map(|(_, at)| at.clone())
                    .unwrap_or_else(|| format!("{}:1:1", path.display()));
                InputError::new(format!("{at}: {section}.{key}"), format!("{problem} (or give {flag})"))
            }
        }
    }

    /// Lay the flags over what the file gave.
    pub(crate) fn overlay_flags(&mut self, a: &RunArgs) {
        fn put<T>(slot: &mut Opt<T>, flag: &'static str, v: Option<T>) {
            if let Some(v) = v {
                *slot = Some(Given::flag(flag, v));
            }
        }
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        put(&mut self.url, "--url", a.url.clone());
        put(&mut self.connections, "--connections", a.connections.map(count));
        put(&mut self.threads, "--threads", a.threads.map(count));
        put(&mut self.timeout, "--timeout", a.timeout.clone());
        if a.no_keepalive {
            self.keepalive = Some(Given::flag("--no-keepalive", false));
        }
        put(&mut self.wake_window, "--wake-window", a.wake_window.clone());
        put(&mut self.send_ahead, "--send-ahead", a.send_ahead.clone());
        put(&mut self.max_header, "--max-header", a.max_header.clone());
        put(&mut self.max_body, "--max-body", a.max_body.clone());
        if a.retry_non_idempotent {
            self.retry_non_idempotent = Some(Given::flag("--retry-non-idempotent", true));
        }
        if a.http2 {
            self.http2 = Some(Given::flag("--http2", true));
        } else if a.http1 {
            self.http2 = Some(Given::flag("--http1", false));
        }
        put(&mut self.max_streams, "--max-streams", a.max_streams.map(i64::from));
        put(&mut self.grpc, "--grpc", a.grpc.clone());
        if !a.protos.is_empty() {
            self.protos = a.protos.iter().map(|p| Given::flag("--proto", p.clone())).collect();
        }
        if !a.proto_paths.is_empty() {
            self.proto_paths = a.proto_paths.iter().map(|p| Given::flag("--proto-path", p.clone())).collect();
        }
        put(&mut self.deadline, "--deadline", a.deadline.clone());
        for w in &a.watch {
            let at = Origin::Flag("--watch");
            self.watch.push(RawWatch {
                at: at.clone(),
                name: None,
                source: Some(Given::flag("--watch", w.clone())),
                metric: None,
                rate: None,
                limit: None,
            });
        }
        put(&mut self.verdict.nic_capacity_mbps, "--nic-capacity", a.nic_capacity);
        put(&mut self.method, "--method", a.method.clone());
        self.headers = a.headers.iter().map(|h| Given::flag("--header", h.clone())).collect();
        put(&mut self.body, "--body", a.body.clone());

        let p = &mut self.profile;
        if let Some(kind) = &a.profile {
            if p.kind.as_ref().is_some_and(|k| !k.value.eq_ignore_ascii_case(kind)) {
                self.kind_overridden = true;
            }
            p.kind = Some(Given::flag("--profile", kind.clone()));
        }
        put(&mut p.rate, "--rate", a.rate);
        put(&mut p.duration, "--duration", a.duration.clone());
        if a.steps.is_some() || a.step_start.is_some() || a.step_increment.is_some() || a.step_count.is_some() {
            // The flags give the whole sequence: the file's form of it no longer counts.
            (p.steps, p.start, p.increment, p.count) = (None, None, None, None);
        }
        put(&mut p.steps, "--steps", a.steps.clone());
        put(&mut p.start, "--step-start", a.step_start);
        put(&mut p.increment, "--step-increment", a.step_increment);
        put(&mut p.count, "--step-count", a.step_count);
        put(&mut p.max_rate, "--max-rate", a.max_rate);
        put(&mut p.hold, "--hold", a.hold.clone());
        put(&mut p.ramp, "--ramp", a.ramp.clone());
        put(&mut p.peak_rate, "--peak-rate", a.peak_rate);
        put(&mut p.from, "--from-rate", a.from_rate);
        put(&mut p.warmup, "--warmup", a.warmup.clone());
        put(&mut p.warmup_rate, "--warmup-rate", a.warmup_rate);
        put(&mut p.repeat, "--repeat", a.repeat);

        put(&mut self.slo.p95, "--slo-p95", a.slo_p95.clone());
        put(&mut self.slo.p99, "--slo-p99", a.slo_p99.clone());
        put(&mut self.slo.error_budget, "--error-budget", a.error_budget.clone().map(FractionText::Text));
        if a.no_probes {
            self.probes = Some(Given::flag("--no-probes", false));
        }
        put(&mut self.margin, "--margin", a.margin);
        put(&mut self.peak, "--peak", a.peak);
        put(&mut self.out, "--out", a.out.clone());
        if a.plain {
            self.plain = Some(Given::flag("--plain", true));
        }
        put(&mut self.data, "--data", a.data.clone());
        put(&mut self.shard, "--shard", a.shard.clone());
        if self.shard.is_none()
            && let (Ok(index), Ok(count)) = (std::env::var("JOB_COMPLETION_INDEX"), std::env::var("JOB_COMPLETIONS"))
        {
            self.shard = Some(Given::flag("JOB_COMPLETION_INDEX/JOB_COMPLETIONS", format!("{index}/{count}")));
        }
        put(&mut self.start_at, "--start-at", a.start_at.clone());
        put(&mut self.key_dist, "--key-dist", a.key_dist.clone());
        put(&mut self.seed, "--seed", a.seed.map(|s| i64::try_from(s).unwrap_or(i64::MAX)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_label_errors() {
        let g = Given { value: 1, origin: Origin::File { at: "s.toml:3:8".into(), key: "profile.hold".into() } };
        assert_eq!(g.err("bad").to_string(), "s.toml:3:8: profile.hold: bad");
        assert_eq!(Given::flag("--hold", 1).err("bad").to_string(), "--hold: bad");
    }
}
