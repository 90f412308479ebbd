//! One watched source, opened: its reader (cgroup, process tree, host cores, Prometheus
//! series), its ceiling and the CPUs that ceiling is made of, and one second of it from its
//! reading now against its last.
//!
//! Owns: what each kind's second is (CPU as cores from cumulative counters, a counter as its
//! rate, idle seconds as busy cores, a gauge less the scrape's own worker) and the ceiling
//! each kind has. Does not: schedule the seconds or share a page between sources
//! (`sampler.rs`), judge a step (`steps.rs`).
//!
//! A CPU source's ceiling is the cores its work may run on — a cgroup's or a process tree's
//! quota (the tightest `cpu.max` up its cgroups) when below its CPUs, else those CPUs (a
//! cgroup's cpuset, a tree's affinity); the listed cores; the cores an idle counter covers —
//! never the loader's own CPUs: the watched target is elsewhere (`taskset -c 1`, a pinned
//! container) more often than not.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::cgroup::{Cgroup, CgroupReading};
use super::cpus::{Cores, CoresReading};
use super::process::{ProcessReading, ProcessTree, Selector};
use super::prometheus::{Endpoint, Page, Unreached};
use crate::scenario::{WatchKind as Kind, WatchSpec, cpu_list};
use crate::summary::{WatchSource, WatchValues};

/// A scrape of a gauge that counts its own worker (`self`) which took this long waited for
/// one: the pool had none free (its own scrape answers in a millisecond or two).
pub const SCRAPE_QUEUED: Duration = Duration::from_millis(100);

/// Pages fetched this second, by URL: sources on one page share its scrape.
pub type Pages = HashMap<String, Result<Page, Unreached>>;

/// What reads a source.
enum Reader {
    Cgroup(Cgroup),
    Process(ProcessTree),
    Cores(Cores),
    Prometheus(Endpoint),
}

/// A source's last reading.
#[derive(Clone, Copy)]
enum Reading {
    Cgroup(CgroupReading),
    Process(ProcessReading),
    Cores(CoresReading),
    Value(f64),
}

/// Why a source could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenError {
    /// The reason, one line, without the source's name.
    pub why: String,
    /// It may answer later (a Prometheus endpoint refused or timed out): a warning unless
    /// the source is strict.
    pub transient: bool,
}

/// One watched source.
pub struct Source {
    spec: WatchSpec,
    reader: Reader,
    /// The last reading that succeeded, and when.
    last: Option<(Instant, Reading)>,
    /// Its ceiling (see the module's doc).
    limit: Option<f64>,
    /// The CPUs its CPU runs on, when known.
    cpus: Option<Vec<usize>>,
    /// Why it could not be read before the run.
    unreached: Option<String>,
    /// Seconds missing, and the last reason.
    missing_s: u64,
    last_error: Option<String>,
    /// Seconds whose scrape waited for a worker (`self`).
    queued_s: u64,
}

impl Source {
    /// Open `spec` and read it once. With `reach` false, a Prometheus source is not fetched
    /// (it was found unreachable moments ago) and starts unreached.
    pub fn open(spec: &WatchSpec, reach: bool) -> Result<Source, OpenError> {
        let fail = |why: String| OpenError { why, transient: false };
        let now = Instant::now();
        let host = super::cpus::host_cpus();
        let count = |cpus: &[usize]| (!cpus.is_empty()).then_some(cpus.len() as f64);
        let (reader, last, limit, cpus) = match &spec.kind {
            Kind::Cgroup(path) => {
                let c = Cgroup::open(path).map_err(fail)?;
                let r = c.read().map_err(fail)?;
                let cpus = c.cpuset().or_else(|| host.clone());
                let cores = tighter(r.cpu_limit_cores, cpus.as_deref().and_then(count));
                (Reader::Cgroup(c), Some(Reading::Cgroup(r)), cores, cpus)
            }
            Kind::Pid(_) | Kind::Process(_) => {
                let selector = match &spec.kind {
                    Kind::Pid(pid) => Selector::Pid(*pid),
                    other => Selector::Name(other.argument()),
                };
                let t = ProcessTree::open(selector).map_err(fail)?;
                let r = t.read().map_err(fail)?;
                let cpus = Some(t.cpus()).filter(|c| !c.is_empty()).or_else(|| host.clone());
                let cores = tighter(t.quota_cores(), cpus.as_deref().and_then(count));
                (Reader::Process(t), Some(Reading::Process(r)), cores, cpus)
            }
            Kind::Cpu(list) => {
                let c = Cores::open(list).map_err(fail)?;
                let r = c.read().map_err(fail)?;
                (Reader::Cores(c), Some(Reading::Cores(r)), Some(list.len() as f64), Some(list.clone()))
            }
            Kind::Prometheus(url) => {
                let e = Endpoint::new(url, spec.metric.as_deref().unwrap_or_default()).map_err(fail)?;
                let mut source = Source::new(spec.clone(), Reader::Prometheus(e), None, spec.limit, None);
                if reach {
                    source.first_scrape()?;
                } else {
                    source.unreached = Some("did not answer when `loader run` checked it".into());
                }
                return Ok(source);
            }
        };
        Ok(Source::new(spec.clone(), reader, last.map(|r| (now, r)), spec.limit.or(limit), cpus))
    }

    fn new(
        spec: WatchSpec,
        reader: Reader,
        last: Option<(Instant, Reading)>,
        limit: Option<f64>,
        cpus: Option<Vec<usize>>,
    ) -> Source {
        Source { spec, reader, last, limit, cpus, unreached: None, missing_s: 0, last_error: None, queued_s: 0 }
    }

    /// A Prometheus source's first scrape: its series must be on the page; an endpoint that
    /// does not answer in time leaves it unreached (transient) — for now.
    fn first_scrape(&mut self) -> Result<(), OpenError> {
        let Reader::Prometheus(e) = &self.reader else { return Ok(()) };
        let page = e.fetch().map_err(|u| OpenError { why: u.why, transient: u.transient })?;
        let picked = e.pick(&page).map_err(|why| OpenError { why, transient: false })?;
        self.learn(e.is_local(), &picked);
        Ok(())
    }

    /// What an idle counter's first page says: the cores it covers (one series each), and
    /// which they are when the exporter is on this host.
    fn learn(&mut self, local: bool, picked: &super::prometheus::Picked) {
        // A page whose every matching series is NaN says nothing of the cores yet.
        if self.spec.idle && picked.series > 0 {
            self.limit = self.spec.limit.or(Some(picked.series as f64));
            if local && picked.cpus.len() == picked.series {
                self.cpus = Some(picked.cpus.clone());
            }
        }
    }

    /// Mark it unreached before the run, with why.
    pub fn set_unreached(&mut self, why: String) {
        self.unreached = Some(why);
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The baseline of the first second: read, nothing reported.
    pub fn baseline(&mut self, pages: &mut Pages) {
        let _ = self.second(pages);
    }

    /// One second: `Ok(None)` for a rate's first reading after a gap; an error is a missing
    /// second (counted, its reason kept).
    pub fn second(&mut self, pages: &mut Pages) -> Option<WatchValues> {
        match self.read(pages) {
            Ok(v) => v,
            Err(e) => {
                self.missing_s += 1;
                self.last_error = Some(e);
                None
            }
        }
    }

    fn read(&mut self, pages: &mut Pages) -> Result<Option<WatchValues>, String> {
        let now = Instant::now();
        let per_s = |last: Instant| now.duration_since(last).as_secs_f64().max(1e-3);
        let delta = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| a.saturating_sub(b) as f64);
        let last = self.last.take();
        let (reading, values) = match &self.reader {
            Reader::Cgroup(c) => {
                let r = c.read()?;
                let v = last.and_then(|(at, l)| match l {
                    Reading::Cgroup(l) => Some((per_s(at), l)),
                    _ => None,
                });
                let v = v.map(|(s, l)| WatchValues {
                    cpu_cores: Some(r.usage_us.saturating_sub(l.usage_us) as f64 / 1e6 / s),
                    cpu_some_pct: delta(r.cpu_some_us, l.cpu_some_us).map(|us| us / 1e4 / s),
                    cpu_full_pct: delta(r.cpu_full_us, l.cpu_full_us).map(|us| us / 1e4 / s),
                    throttled_ms: delta(r.throttled_us, l.throttled_us).map(|us| us / 1e3 / s),
                    memory_mib: r.memory_bytes.map(|b| b as f64 / 1048576.0),
                    memory_some_pct: delta(r.mem_some_us, l.mem_some_us).map(|us| us / 1e4 / s),
                    ..Default::default()
                });
                (Reading::Cgroup(r), v)
            }
            Reader::Process(t) => {
                let r = t.read()?;
                let v = last.and_then(|(at, l)| match l {
                    // A worker that exited takes its CPU with it: never a negative second.
                    Reading::Process(l) => Some(WatchValues {
                        cpu_cores: Some(r.cpu_ns.saturating_sub(l.cpu_ns) as f64 / 1e9 / per_s(at)),
                        memory_mib: Some(r.rss_bytes as f64 / 1048576.0),
                        fds: Some(r.fds as f64),
                        ..Default::default()
                    }),
                    _ => None,
                });
                (Reading::Process(r), v)
            }
            Reader::Cores(c) => {
                let r = c.read()?;
                let v = last.and_then(|(at, l)| match l {
                    Reading::Cores(l) => Some(WatchValues {
                        cpu_cores: Some(c.seconds(r.busy.saturating_sub(l.busy)) / per_s(at)),
                        cpu_steal_cores: Some(c.seconds(r.steal.saturating_sub(l.steal)) / per_s(at)),
                        ..Default::default()
                    }),
                    _ => None,
                });
                (Reading::Cores(r), v)
            }
            Reader::Prometheus(e) => {
                let fetched = pages.entry(e.url().to_string()).or_insert_with(|| e.fetch());
                let (value, queued) = match fetched {
                    Ok(page) => {
                        let picked = e.pick(page)?;
                        if self.limit.is_none() || (self.spec.idle && self.cpus.is_none()) {
                            self.learn(e.is_local(), &picked);
                        }
                        (picked.value, page.took >= SCRAPE_QUEUED)
                    }
                    // A scrape that counts itself and got no worker in time: the pool had
                    // none free. Read as at its limit when it has one.
                    Err(u) if self.spec.scrape_self.is_some() && u.why.starts_with("timed out") => match self.limit {
                        Some(limit) => {
                            self.queued_s += 1;
                            self.last = last;
                            return Ok(Some(WatchValues { value: Some(limit), ..Default::default() }));
                        }
                        None => return Err(u.why.clone()),
                    },
                    Err(u) => return Err(u.why.clone()),
                };
                let v = if let Some(own) = self.spec.scrape_self {
                    // Its own worker is taken off, unless it waited for one: then every
                    // worker was the pool's when it came, and the reading stands whole.
                    if queued {
                        self.queued_s += 1;
                        Some(value)
                    } else {
                        Some((value - own).max(0.0))
                    }
                } else if self.spec.rate {
                    // A counter reset (the exporter restarted) is a missing second, not a
                    // negative rate.
                    last.and_then(|(at, l)| match l {
                        Reading::Value(l) if value >= l => Some((value - l) / per_s(at)),
                        _ => None,
                    })
                } else {
                    Some(value)
                };
                let values = v.map(|v| match (self.spec.idle, self.limit) {
                    // Idle seconds a second → the cores that were not idle.
                    (true, Some(cores)) => WatchValues { cpu_cores: Some((cores - v).max(0.0)), ..Default::default() },
                    _ => WatchValues { value: Some(v), ..Default::default() },
                });
                (Reading::Value(value), values)
            }
        };
        self.last = Some((now, reading));
        Ok(values)
    }

    /// What the summary says of it.
    pub fn describe(&self) -> WatchSource {
        WatchSource {
            name: self.spec.name.clone(),
            source: self.spec.source.clone(),
            kind: self.spec.kind.label().to_string(),
            metric: self.spec.metric.clone(),
            rate: self.spec.rate,
            limit: self.limit,
            cpus: self.cpus.as_deref().map(cpu_list),
            idle: self.spec.idle,
            scrape_self: self.spec.scrape_self,
            queued_s: self.queued_s,
            unreached_at_start: self.unreached.clone(),
            missing_s: self.missing_s,
            last_error: self.last_error.clone(),
        }
    }
}

/// The tighter of a quota and a count of CPUs, cores: a quota of 4 cores on 2 CPUs is 2.
fn tighter(quota: Option<f64>, cpus: Option<f64>) -> Option<f64> {
    match (quota, cpus) {
        (Some(q), Some(c)) => Some(q.min(c)),
        (q, c) => q.or(c),
    }
}
