//! The target's resources, watched once a second beside the run (`--watch NAME=SOURCE`,
//! `[[watch]]`): a local cgroup, a process tree, a Prometheus endpoint — so a step table can
//! say which server resource hit its ceiling, not only that latency rose.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`Watcher`] (the sources of `scenario::WatchSpec` opened before the run) and its sampler thread |
//! | `cgroup.rs` | reading a cgroup v2: CPU, throttling, PSI, memory |
//! | `cgroup_v1.rs` | the same cgroup's v1 controllers on a hybrid host (quota, throttling) |
//! | `process.rs` | reading a process tree from `/proc`: CPU, RSS, descriptors |
//! | `prometheus.rs` | scraping a Prometheus text endpoint and picking one series |
//! | `steps.rs` | each step's means and maxima, CPU per ok answer, the ceiling it implies, the knee explained |
//!
//! Sampling runs on its own thread, never on a shard's: a slow scrape delays the next sample,
//! not a send. A source that cannot be read before the run fails the run in one line; one
//! that stops answering mid-run is `null` for those seconds, never zero, and the run goes on.

pub mod cgroup;
pub mod cgroup_v1;
pub mod process;
pub mod prometheus;
pub mod steps;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::scenario::{WatchKind as Kind, WatchSpec};
use crate::summary::{WatchSecond, WatchSource, WatchSummary, WatchValues};

/// An opened source and its last reading.
enum Open {
    Cgroup(cgroup::Cgroup, Option<(Instant, cgroup::CgroupReading)>),
    Process(process::ProcessTree, Option<(Instant, process::ProcessReading)>),
    Prometheus(prometheus::Endpoint, Option<(Instant, f64)>),
}

/// The sources, opened and read once before the run.
pub struct Watcher {
    specs: Vec<WatchSpec>,
    open: Vec<Open>,
    limits: Vec<Option<f64>>,
}

impl Watcher {
    /// Open every source and read it once: the first that cannot be read fails the run
    /// before it starts, in one line naming it.
    pub fn open(specs: &[WatchSpec]) -> Result<Watcher, String> {
        let host_cores = std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64);
        let mut open = Vec::new();
        let mut limits = Vec::new();
        for w in specs {
            let fail = |e: String| format!("{}={}: {e}", w.name, w.source);
            let now = Instant::now();
            let (o, limit) = match &w.kind {
                Kind::Cgroup(path) => {
                    let c = cgroup::Cgroup::open(path).map_err(fail)?;
                    let r = c.read().map_err(fail)?;
                    (Open::Cgroup(c, Some((now, r))), w.limit.or(r.cpu_limit_cores).or(Some(host_cores)))
                }
                Kind::Pid(_) | Kind::Process(_) => {
                    let selector = match &w.kind {
                        Kind::Pid(pid) => process::Selector::Pid(*pid),
                        other => process::Selector::Name(other.argument()),
                    };
                    let t = process::ProcessTree::open(selector).map_err(fail)?;
                    let r = t.read().map_err(fail)?;
                    (Open::Process(t, Some((now, r))), w.limit.or(Some(host_cores)))
                }
                Kind::Prometheus(url) => {
                    let e = prometheus::Endpoint::new(url, w.metric.as_deref().unwrap_or_default()).map_err(fail)?;
                    let v = e.scrape().map_err(fail)?;
                    (Open::Prometheus(e, Some((now, v))), w.limit)
                }
            };
            open.push(o);
            limits.push(limit);
        }
        Ok(Watcher { specs: specs.to_vec(), open, limits })
    }

    /// Sample every second from `zero` (the run's start) on a thread of its own until
    /// [`Sampling::finish`] (or its drop) ends it.
    pub fn start(self, zero: Instant) -> Sampling {
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&done);
        let handle = std::thread::Builder::new().name("loader-watch".into()).spawn(move || self.run(zero, &flag));
        match handle {
            Ok(h) => Sampling { handle: Some(h), done },
            Err(e) => {
                eprintln!("loader: warning: the watch sampler did not start ({e}): nothing is watched");
                Sampling { handle: None, done }
            }
        }
    }

    fn run(mut self, zero: Instant, done: &AtomicBool) -> WatchSummary {
        let cpu_start = thread_cpu();
        let mut sources: Vec<WatchSource> = self
            .specs
            .iter()
            .zip(&self.limits)
            .map(|(w, limit)| WatchSource {
                name: w.name.clone(),
                source: w.source.clone(),
                kind: w.kind.label().to_string(),
                metric: w.metric.clone(),
                rate: w.rate,
                limit: *limit,
                ..Default::default()
            })
            .collect();
        // The baselines of the first second, read at the run's zero.
        while Instant::now() < zero && !done.load(Ordering::Relaxed) {
            std::thread::sleep((zero - Instant::now()).min(Duration::from_millis(50)));
        }
        for (o, w) in self.open.iter_mut().zip(&self.specs) {
            let _ = sample(o, w.rate);
        }
        let mut seconds = Vec::new();
        for t in 0u64.. {
            let due = zero + Duration::from_secs(t + 1);
            // Sleep in short slices so the end of the run is seen within 50 ms.
            while Instant::now() < due {
                if done.load(Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep((due - Instant::now()).min(Duration::from_millis(50)));
            }
            if done.load(Ordering::Relaxed) && Instant::now() < due {
                break;
            }
            let mut values = BTreeMap::new();
            for ((o, w), src) in self.open.iter_mut().zip(&self.specs).zip(sources.iter_mut()) {
                let v = match sample(o, w.rate) {
                    Ok(v) => v,
                    Err(e) => {
                        src.missing_s += 1;
                        src.last_error = Some(e);
                        None
                    }
                };
                values.insert(w.name.clone(), v);
            }
            seconds.push(WatchSecond { t, values });
        }
        let elapsed = zero.elapsed().as_secs_f64().max(1.0);
        let sampler_cpu_ms_per_s = thread_cpu().zip(cpu_start).map(|(end, start)| (end - start) * 1000.0 / elapsed);
        WatchSummary { sources, seconds, sampler_cpu_ms_per_s, ..Default::default() }
    }
}

/// The sampler thread; [`finish`](Sampling::finish) ends and joins it, and so does a drop
/// (a run that fails part-way leaves no thread behind).
pub struct Sampling {
    handle: Option<JoinHandle<WatchSummary>>,
    done: Arc<AtomicBool>,
}

impl Sampling {
    /// End the sampling (within 50 ms) and give what it saw; `None` if its thread did not
    /// start or failed.
    pub fn finish(mut self) -> Option<WatchSummary> {
        self.done.store(true, Ordering::Relaxed);
        self.handle.take()?.join().ok()
    }
}

impl Drop for Sampling {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// One second of a source: its reading now against the last one that succeeded. `Ok(None)`
/// for a counter's first reading after a gap (no rate yet).
fn sample(o: &mut Open, rate: bool) -> Result<Option<WatchValues>, String> {
    let now = Instant::now();
    let per_s = |last: Instant| now.duration_since(last).as_secs_f64().max(1e-3);
    let delta = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| a.saturating_sub(b) as f64);
    match o {
        Open::Cgroup(c, last) => {
            let r = c.read()?;
            let v = last.map(|(at, l)| {
                let s = per_s(at);
                WatchValues {
                    cpu_cores: Some(r.usage_us.saturating_sub(l.usage_us) as f64 / 1e6 / s),
                    cpu_some_pct: delta(r.cpu_some_us, l.cpu_some_us).map(|us| us / 1e4 / s),
                    cpu_full_pct: delta(r.cpu_full_us, l.cpu_full_us).map(|us| us / 1e4 / s),
                    throttled_ms: delta(r.throttled_us, l.throttled_us).map(|us| us / 1e3 / s),
                    memory_mib: r.memory_bytes.map(|b| b as f64 / 1048576.0),
                    memory_some_pct: delta(r.mem_some_us, l.mem_some_us).map(|us| us / 1e4 / s),
                    ..Default::default()
                }
            });
            *last = Some((now, r));
            Ok(v)
        }
        Open::Process(t, last) => {
            let r = t.read()?;
            let v = last.map(|(at, l)| WatchValues {
                // A worker that exited takes its CPU with it: never a negative second.
                cpu_cores: Some(r.cpu_ns.saturating_sub(l.cpu_ns) as f64 / 1e9 / per_s(at)),
                memory_mib: Some(r.rss_bytes as f64 / 1048576.0),
                fds: Some(r.fds as f64),
                ..Default::default()
            });
            *last = Some((now, r));
            Ok(v)
        }
        Open::Prometheus(e, last) => {
            let value = e.scrape()?;
            let v = if rate {
                // A counter reset (the exporter restarted) is a missing second, not a negative rate.
                last.filter(|&(_, l)| value >= l).map(|(at, l)| (value - l) / per_s(at))
            } else {
                Some(value)
            };
            *last = Some((now, value));
            Ok(v.map(|value| WatchValues { value: Some(value), ..Default::default() }))
        }
    }
}

/// This thread's CPU time, seconds.
fn thread_cpu() -> Option<f64> {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .ok()
        .map(|t| t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9)
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
