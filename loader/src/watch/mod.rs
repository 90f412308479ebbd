//! The target's resources, watched once a second beside the run (`--watch NAME=SOURCE`,
//! `[[watch]]`): a local cgroup, a process tree, host cores, a Prometheus endpoint — so a step
//! table can say which server resource hit its ceiling, not only that latency rose.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`Watcher`] (the sources of `scenario::WatchSpec` opened before the run, warnings for those not reached) |
//! | `source.rs` | one opened source: its ceiling, the CPUs it runs on, one second of it |
//! | `sampler.rs` | the sampler thread: where it runs, each second, what it cost |
//! | `cgroup.rs` | reading a cgroup v2: CPU, throttling, PSI, memory, cpuset |
//! | `cgroup_v1.rs` | the same cgroup's v1 controllers on a hybrid host (quota, throttling) |
//! | `process.rs` | reading a process tree from `/proc`: CPU, RSS, descriptors, affinity |
//! | `cpus.rs` | host cores from `/proc/stat`; a process's affinity, the host's CPUs |
//! | `prometheus.rs` | scraping a Prometheus text endpoint and picking one series |
//! | `steps.rs` | each step's means and maxima, CPU per ok answer, the ceiling it implies |
//! | `knee.rs` | the knee explained: the resource at its ceiling, the cores shared, a pool that waited |
//!
//! Sampling runs on its own thread, off the shards' CPUs when another is allowed: a slow
//! scrape delays the next sample, not a send. A source whose form is wrong, or that names
//! nothing (no such pid, cgroup, series), fails the run in one line; an endpoint that does
//! not answer before the run is a warning and its seconds are missing until it answers
//! (`strict` refuses the run instead); one that stops answering mid-run is `null` for those
//! seconds, never zero, and the run goes on.

pub mod cgroup;
pub mod cgroup_v1;
pub mod cpus;
pub mod knee;
pub mod process;
pub mod prometheus;
mod sampler;
pub mod source;
pub mod steps;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

pub use sampler::Sampling;

use crate::scenario::WatchSpec;
use source::{OpenError, Source};

/// The sources, opened and read once before the run.
pub struct Watcher {
    sources: Vec<Source>,
}

/// Sources found unreachable by an earlier [`Watcher::open`] of this process (`loader run`
/// checks them before anything runs, then the measurement opens them again): by
/// `name=source`, the reason. Not waited for a second time, nor warned of twice.
static UNREACHED: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

impl Watcher {
    /// Open every source and read it once. The first that cannot be opened fails the run
    /// before it starts, in one line naming it once (`pool=prometheus:URL: HTTP 404 Not
    /// Found`); an endpoint that does not answer in time is a warning on stderr, and the run
    /// goes on with its seconds missing until it answers — unless the source is strict.
    pub fn open(specs: &[WatchSpec]) -> Result<Watcher, String> {
        let mut sources = Vec::new();
        for w in specs {
            let key = format!("{}={}", w.name, w.source);
            let known = UNREACHED.lock().unwrap_or_else(|p| p.into_inner()).get(&key).cloned();
            match (Source::open(w, known.is_none() || w.strict), known) {
                (Ok(mut s), Some(why)) => {
                    s.set_unreached(why);
                    sources.push(s);
                }
                (Ok(s), None) => sources.push(s),
                (Err(OpenError { why, transient: true }), _) if !w.strict => {
                    let why = name_once(w, &why);
                    eprintln!(
                        "loader: warning: --watch {why}: the run goes on, its seconds missing until it answers \
                         (--watch-strict refuses the run instead)"
                    );
                    UNREACHED.lock().unwrap_or_else(|p| p.into_inner()).insert(key, why.clone());
                    let mut s = Source::open(w, false).map_err(|e| name_once(w, &e.why))?;
                    s.set_unreached(why);
                    sources.push(s);
                }
                (Err(e), _) => return Err(name_once(w, &e.why)),
            }
        }
        Ok(Watcher { sources })
    }

    /// Sample every second from `zero` (the run's start) on a thread of its own until
    /// [`Sampling::finish`] (or its drop) ends it.
    pub fn start(self, zero: Instant) -> Sampling {
        Sampling::start(self.sources, zero)
    }
}

/// `name=source: why`, the source named once: a reason that begins with the source as
/// written loses that beginning (`n=pid:9: no such process`, not `n=pid:9: pid:9: …`); one
/// that names where the source resolved to keeps that in brackets (`app=cgroup:x
/// (/sys/fs/cgroup/x): cannot read the directory`).
fn name_once(w: &WatchSpec, why: &str) -> String {
    let head = format!("{}={}", w.name, w.source);
    if let Some(rest) = why.strip_prefix(&format!("{}: ", w.source)) {
        return format!("{head}: {rest}");
    }
    let kind = format!("{}:", w.source.split(':').next().unwrap_or_default());
    match why.split_once(": ") {
        Some((resolved, rest)) if resolved.starts_with(&kind) => {
            format!("{head} ({}): {rest}", &resolved[kind.len()..])
        }
        _ => format!("{head}: {why}"),
    }
}

/// An I/O error's message without Rust's ` (os error N)` tail:
/// `No such file or directory`.
fn io_msg(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => nix::errno::Errno::from_raw(code).desc().to_string(),
        None => one_line(&e.to_string()),
    }
}

/// `s` with line breaks and other control characters escaped, so an error stays one line.
fn one_line(s: &str) -> String {
    if s.chars().any(char::is_control) { s.escape_debug().to_string() } else { s.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_names_its_source_once() {
        let w = |flag: &str| WatchSpec::parse_flag(flag).unwrap();
        let pool = w("pool=prometheus:http://127.0.0.1:9/m;metric=x");
        assert_eq!(
            name_once(&pool, "timed out after 800 ms"),
            "pool=prometheus:http://127.0.0.1:9/m: timed out after 800 ms"
        );
        let pid = w("n=pid:9");
        assert_eq!(name_once(&pid, "pid:9: no such process"), "n=pid:9: no such process");
        let group = w("app=cgroup:x");
        assert_eq!(
            name_once(&group, "cgroup:/sys/fs/cgroup/x: cannot read the directory: No such file or directory"),
            "app=cgroup:x (/sys/fs/cgroup/x): cannot read the directory: No such file or directory"
        );
    }

    #[test]
    fn an_unreachable_endpoint_is_a_warning_unless_strict_and_a_wrong_one_fails() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let source = format!("gone{port}=prometheus:http://127.0.0.1:{port}/metrics;metric=up");
        let lenient = WatchSpec::parse_flag(&source).unwrap();
        let watcher = Watcher::open(std::slice::from_ref(&lenient)).unwrap_or_else(|e| panic!("{e}"));
        let described = watcher.sources[0].describe();
        assert!(described.unreached_at_start.as_deref().is_some_and(|e| e.contains("refused")), "{described:?}");
        // Opened again (the measurement after `loader run`'s check): not waited for again.
        assert!(Watcher::open(std::slice::from_ref(&lenient)).is_ok());
        let strict = WatchSpec::parse_flag(&format!("{source};strict")).unwrap();
        let e = Watcher::open(&[strict]).err().unwrap();
        assert_eq!(e.matches(&format!("127.0.0.1:{port}")).count(), 1, "the URL once: {e}");
        assert!(e.ends_with("connection refused"), "{e}");
        let wrong = WatchSpec::parse_flag(&format!("w=prometheus:http://127.0.0.1:{port}/metrics;metric=9x")).unwrap();
        assert!(Watcher::open(&[wrong]).err().unwrap().contains("expected a metric name"));
    }
}
