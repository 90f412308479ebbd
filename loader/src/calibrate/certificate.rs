//! The certificate file (`loader.certificate/v1`): its schema, this machine's fingerprint,
//! where certificates are stored, and how `loader run` finds the one that applies.
//!
//! Stored in `$LOADER_CERTIFICATE_DIR` when set; otherwise `/var/lib/loader/certificates/`
//! when written as root, else `$XDG_DATA_HOME/loader/certificates/` (`~/.local/share/…`).
//! `run` looks in all of those and takes the newest certificate whose fingerprint equals
//! this machine's. It does not measure anything (see `mod.rs`) nor judge steps (`judge.rs`).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::judge::{LimitedBy, StepCall};
use crate::summary::{CertificateRef, PhaseSummary};

/// Schema tag of the certificate file.
pub const SCHEMA: &str = "loader.certificate/v1";
/// Environment variable naming the certificate directory (both for writing and looking up).
pub const DIR_ENV: &str = "LOADER_CERTIFICATE_DIR";
/// Where root keeps certificates.
pub const SYSTEM_DIR: &str = "/var/lib/loader/certificates";

pub use crate::health::machine::Fingerprint;

/// Loader health at the certified step (the ceiling, or the lower bound's step).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AtCeiling {
    /// Step name.
    pub step: Option<String>,
    /// Offered rate of that step, req/s.
    pub offered_rps: Option<f64>,
    /// Achieved send rate, req/s.
    pub sent_rps: Option<f64>,
    /// Shard CPU p95, percent of one core per shard.
    pub loader_cpu_p95: Option<f64>,
    /// Run-queue delay p99 of loader threads, µs (null without probes).
    pub runqueue_p99_us: Option<f64>,
    /// Send lag p99, ms.
    pub send_lag_p99_ms: Option<f64>,
    /// Highest live TIME_WAIT (host-wide).
    pub time_wait_max: Option<u64>,
    /// Highest share of the ephemeral port range in use.
    pub ephemeral_ports_max_ratio: Option<f64>,
    /// The shards' CPU time per request at that step, µs (mean CPU × shards ÷ sent/s).
    #[serde(default)]
    pub cpu_us_per_request: Option<f64>,
    /// The loader process's CPU time per request over that probe's run, µs.
    #[serde(default)]
    pub loader_process_us_per_request: Option<f64>,
    /// The target process's CPU time per request over the same run, µs, measured alike.
    #[serde(default)]
    pub target_process_us_per_request: Option<f64>,
    /// The load machine NIC's busiest second at that step, Mb/s sent (the NIC throughput at
    /// the knee the field note asks the certificate for).
    #[serde(default)]
    pub nic_tx_mbps: Option<f64>,
    /// That NIC's device (`lo` for a calibration against the local sink).
    #[serde(default)]
    pub nic_device: Option<String>,
}

/// The request shape and pool the figure was measured with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    /// Keep-alive connections in the pool.
    pub connections: usize,
    /// Loader shard threads.
    pub threads: usize,
    /// CPUs the shards were pinned to (empty: not pinned).
    pub loader_cpus: Vec<usize>,
    /// The target calibrated against: `sink` (`loader target --sink`) or `builtin` (null in
    /// certificates before the sink).
    #[serde(default)]
    pub target: Option<String>,
    /// Threads of the target.
    pub target_threads: usize,
    /// CPU the built-in target was pinned to (null: not pinned).
    pub target_cpu: Option<usize>,
    /// Method, path, bytes on the wire per request, keep-alive.
    pub request: RequestShape,
    /// Step hold, seconds.
    pub step_hold_s: f64,
    /// First step rate and growth factor.
    pub start_rps: f64,
    /// Each step's rate ÷ the previous one.
    pub step_factor: f64,
    /// `--max-rate`.
    pub max_rps: f64,
    /// Each bisection's figure, req/s: the certified figure is their median.
    #[serde(default)]
    pub bisections_rps: Vec<f64>,
    /// Probes run again because the VM's host stole a loader core's time while they fell
    /// behind (`judge::spoiled_by_steal`), by name: not counted in their bisection.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rerun_for_steal: Vec<String>,
    /// Rates of the refining pass that certificates before the bisections ran; read, never
    /// written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refined_rps: Vec<f64>,
    /// Offered rate of the saturation holds that certificates before 2026-12 ran when the
    /// target saturated first, req/s; read, never written (the holds are gone: see
    /// docs/calibration.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saturation_rps: Option<f64>,
    /// Built-in target shaping used (a test hook; null in a real calibration).
    pub target_shaping: Option<String>,
    /// The eBPF probes ran (the run-queue figure needs them).
    pub probes: bool,
}

/// What each request looked like.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestShape {
    /// HTTP method.
    pub method: String,
    /// Path.
    pub path: String,
    /// Request bytes on the wire.
    pub bytes: usize,
    /// Connections reused.
    pub keepalive: bool,
}

/// The per-machine certificate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Certificate {
    /// [`SCHEMA`].
    pub schema: String,
    /// When it was measured, RFC 3339 UTC.
    pub date: String,
    /// Host name (informative; the fingerprint decides whether it applies).
    pub hostname: Option<String>,
    /// What stopped the stepping.
    pub limited_by: LimitedBy,
    /// The loader's own ceiling, req/s; null unless `limited_by` is `loader`.
    pub ceiling_rps: Option<f64>,
    /// What the loader provably reached when the limit was not its own, req/s.
    pub lower_bound_rps: Option<f64>,
    /// How far the bisections' figures lay from the certified one, percent (the largest
    /// distance); null when there were none.
    #[serde(default)]
    pub spread_pct: Option<f64>,
    /// One sentence: what the figure means.
    pub detail: String,
    /// Loader health at the certified step.
    pub at_ceiling: AtCeiling,
    /// How it was measured.
    pub setup: Setup,
    /// The machine it holds for.
    pub fingerprint: Fingerprint,
    /// Every step, judged.
    pub steps: Vec<StepCall>,
}

impl Certificate {
    /// Read and check one certificate file.
    pub fn load(path: &Path) -> anyhow::Result<Certificate> {
        let text = fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let c: Certificate =
            serde_json::from_str(&text).with_context(|| format!("{} is not a loader certificate", path.display()))?;
        if c.schema != SCHEMA {
            anyhow::bail!("{}: schema {:?}, expected {:?}", path.display(), c.schema, SCHEMA);
        }
        Ok(c)
    }
}

/// A certificate as `loader run` uses it: the certified figure to compare with.
#[derive(Debug, Clone, PartialEq)]
pub struct Certified {
    /// The certified figure, req/s: the ceiling, or (`lower_bound`) the rate the loader was
    /// shown to sustain when something else limited the calibration.
    pub ceiling_rps: f64,
    /// The figure is a lower bound of the ceiling, not the ceiling.
    pub lower_bound: bool,
    /// The shards' CPU per request at the certified step, µs (older certificates: none).
    pub cpu_us_per_request: Option<f64>,
    /// How far the calibration's bisections lay from the figure, percent.
    pub spread_pct: Option<f64>,
}

impl Certified {
    /// `achieved / ceiling` for the run: the highest measured (non-warm-up) phase's sent/s.
    pub fn compare(&self, phases: &[PhaseSummary]) -> Option<CertificateRef> {
        let top = phases
            .iter()
            .filter(|p| p.kind != "warmup")
            .map(|p| p.sent_rps)
            .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))))?;
        (self.ceiling_rps > 0.0).then(|| CertificateRef {
            ceiling_rps: self.ceiling_rps,
            ratio: (top / self.ceiling_rps * 10_000.0).round() / 10_000.0,
            lower_bound: self.lower_bound,
        })
    }
}

/// The directory a new certificate goes to by default.
pub fn default_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(DIR_ENV) {
        return PathBuf::from(d);
    }
    if nix::unistd::geteuid().is_root() { PathBuf::from(SYSTEM_DIR) } else { user_dir() }
}

/// `$XDG_DATA_HOME/loader/certificates`, or `~/.local/share/loader/certificates`.
fn user_dir() -> PathBuf {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| ".".into())).join(".local/share"));
    base.join("loader/certificates")
}

/// Directories `run` searches.
fn search_dirs() -> Vec<PathBuf> {
    match std::env::var_os(DIR_ENV) {
        Some(d) => vec![PathBuf::from(d)],
        None => vec![PathBuf::from(SYSTEM_DIR), user_dir()],
    }
}

/// `<hostname>-<date>.json` for a certificate measured at `date` (RFC 3339).
pub fn file_name(hostname: Option<&str>, date: &str) -> String {
    format!("{}-{}.json", hostname.unwrap_or("localhost"), date.replace(':', ""))
}

/// This host's name.
pub fn hostname() -> Option<String> {
    fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// What the lookup found.
#[derive(Debug)]
pub enum Found {
    /// The newest certificate whose fingerprint matches.
    Matching(PathBuf, Certificate),
    /// No match; the newest certificate of another fingerprint, and how it differs.
    Foreign(PathBuf, Certificate, Vec<&'static str>),
    /// No certificate at all.
    None,
}

/// Find the newest matching certificate in the search directories.
pub fn find(here: &Fingerprint) -> Found {
    let mut all: Vec<(PathBuf, Certificate)> = search_dirs()
        .iter()
        .filter_map(|d| fs::read_dir(d).ok())
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|p| Certificate::load(&p).ok().map(|c| (p, c)))
        .collect();
    // RFC 3339 UTC dates sort as text; the path breaks ties so the choice is stable.
    all.sort_by(|a, b| (&b.1.date, &b.0).cmp(&(&a.1.date, &a.0)));
    if let Some((p, c)) = all.iter().find(|(_, c)| c.fingerprint == *here) {
        return Found::Matching(p.clone(), c.clone());
    }
    match all.into_iter().next() {
        Some((p, c)) => {
            let d = here.differences(&c.fingerprint);
            Found::Foreign(p, c, d)
        }
        None => Found::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(kind: &str, sent: f64) -> PhaseSummary {
        serde_json::from_value(serde_json::json!({
            "name": "p", "kind": kind, "start_s": 0.0, "duration_s": 1.0, "offered_rps": sent,
            "sent_rps": sent, "ok_rps": sent, "requests": 1, "sent": 1, "ok": 1, "errors": {},
            "late": 0, "late_unpooled": 0, "waited_for_connection": 0,
            "latency_ms": {"p50":0.0,"p90":0.0,"p95":0.0,"p99":0.0,"p999":0.0,"max":0.0,"mean":0.0,"count":0},
            "service_ms": {"p50":0.0,"p90":0.0,"p95":0.0,"p99":0.0,"p999":0.0,"max":0.0,"mean":0.0,"count":0},
            "send_lag_ms": {"p50":0.0,"p99":0.0,"max":0.0}, "passed": null, "fail_reasons": []
        }))
        .expect("phase fixture")
    }

    #[test]
    fn the_ratio_is_the_highest_measured_step_over_the_ceiling() {
        let c = Certified { ceiling_rps: 10_000.0, lower_bound: false, cpu_us_per_request: None, spread_pct: None };
        let r = c.compare(&[phase("warmup", 9000.0), phase("hold", 4000.0), phase("hold", 8000.0)]).expect("ratio");
        assert_eq!(r.ratio, 0.8);
        assert_eq!(r.ceiling_rps, 10_000.0);
    }

    #[test]
    fn differences_name_the_fields() {
        let a = Fingerprint::of_this_machine();
        let mut b = a.clone();
        assert!(a.differences(&b).is_empty());
        b.kernel = Some("0.0.0".into());
        b.somaxconn = None;
        assert_eq!(a.differences(&b), vec!["kernel", "somaxconn"]);
    }

    #[test]
    fn file_names_carry_host_and_date() {
        assert_eq!(file_name(Some("box"), "2026-11-30T09:45:00Z"), "box-2026-11-30T094500Z.json");
    }
}
