//! `[[watch]]` and `--watch`: the target's resources to sample ([`WatchSpec`]), checked for
//! form (opening them is `crate::watch`'s, before the run starts). A later entry of the same
//! name replaces an earlier one, so `--watch app=…` overrides the file's `app`; `--watch-strict`
//! makes every source strict.

use super::input::Given;
use super::raw::{Raw, RawWatch};
use crate::error::InputError;

/// The sources to watch, in order, each checked.
pub(crate) fn from_raw(raw: &Raw) -> Result<Vec<WatchSpec>, InputError> {
    let mut out: Vec<WatchSpec> = Vec::new();
    for w in &raw.watch {
        let spec = one(w)?;
        match out.iter_mut().find(|o| o.name == spec.name) {
            Some(o) => *o = spec,
            None => out.push(spec),
        }
    }
    Ok(out)
}

fn one(w: &RawWatch) -> Result<WatchSpec, InputError> {
    let at = |problem: String| InputError::new(w.at.label(), problem);
    let Some(source) = &w.source else {
        return Err(at("needs source = \"cgroup:PATH\" (or pid:N, process:NAME, cpu:LIST, prometheus:URL)".into()));
    };
    let strict = w.strict.as_ref().is_some_and(|g| g.value);
    let Some(name) = &w.name else {
        // `--watch NAME=SOURCE[;options]`: all in one text.
        let mut spec = WatchSpec::parse_flag(&source.value).map_err(|e| source.err(e))?;
        spec.strict |= strict;
        return Ok(spec);
    };
    let options = WatchOptions {
        metric: w.metric.as_ref().map(|g| g.value.clone()),
        rate: w.rate.as_ref().is_some_and(|g| g.value),
        limit: w.limit.as_ref().map(|g| g.value),
        idle: w.idle.as_ref().is_some_and(|g| g.value),
        scrape_self: w.scrape_self.as_ref().map(|g| g.value),
        strict,
    };
    let err = |g: &Given<String>, e: String| g.err(e);
    WatchSpec::new(&name.value, &source.value, options).map_err(|e| err(source, e))
}

/// A watched source as the user wrote it, checked for form (not yet opened).
#[derive(Debug, Clone, PartialEq)]
pub struct WatchSpec {
    /// Its name in reports (`app`).
    pub name: String,
    /// The source as written (`cgroup:/sys/fs/cgroup/app`).
    pub source: String,
    /// What it is.
    pub kind: WatchKind,
    /// The Prometheus series (`metric = "name{label=\"v\"}"`).
    pub metric: Option<String>,
    /// The series is a counter: report its rate per second.
    pub rate: bool,
    /// The value's known ceiling (a pool size), or a CPU source's cores when the source
    /// cannot say.
    pub limit: Option<f64>,
    /// The series counts idle CPU seconds (node_exporter's `node_cpu_seconds_total{mode="idle"}`):
    /// watched as busy cores, the cores it covers less its rate (implies `rate`).
    pub idle: bool,
    /// How much of the gauge is the scrape itself (`self = 1`: php-fpm answers its status
    /// page with one of the pool's own workers), taken off each reading.
    pub scrape_self: Option<f64>,
    /// A source that cannot be reached before the run refuses the run, instead of a warning
    /// and its seconds missing until it answers (`strict`, `--watch-strict`).
    pub strict: bool,
}

/// The options of one source, as written (`;metric=…;rate;limit=N;idle;self=N;strict`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WatchOptions {
    /// `metric`.
    pub metric: Option<String>,
    /// `rate`.
    pub rate: bool,
    /// `limit`.
    pub limit: Option<f64>,
    /// `idle`.
    pub idle: bool,
    /// `self`.
    pub scrape_self: Option<f64>,
    /// `strict`.
    pub strict: bool,
}

/// The kinds of source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchKind {
    /// `cgroup:PATH`.
    Cgroup(String),
    /// `pid:N`.
    Pid(u32),
    /// `process:NAME`.
    Process(String),
    /// `cpu:LIST`: host CPUs by number (`1`, `2-3,5`), ascending, each once.
    Cpu(Vec<usize>),
    /// `prometheus:URL`.
    Prometheus(String),
}

impl WatchKind {
    /// What follows the kind's colon (a pid as written is its number, a CPU list in its
    /// shortest form).
    pub fn argument(&self) -> String {
        match self {
            WatchKind::Cgroup(a) | WatchKind::Process(a) | WatchKind::Prometheus(a) => a.clone(),
            WatchKind::Pid(n) => n.to_string(),
            WatchKind::Cpu(cpus) => cpu_list(cpus),
        }
    }

    /// `cgroup`, `process`, `cpu` or `prometheus`.
    pub fn label(&self) -> &'static str {
        match self {
            WatchKind::Cgroup(_) => "cgroup",
            WatchKind::Pid(_) | WatchKind::Process(_) => "process",
            WatchKind::Cpu(_) => "cpu",
            WatchKind::Prometheus(_) => "prometheus",
        }
    }
}

/// The most CPUs a list may name (the kernel's `CONFIG_NR_CPUS` ceiling).
const MAX_CPU: usize = 8191;

/// `1`, `2-3,5` → the CPUs, ascending, each once. The error is the problem alone.
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim) {
        let number = |s: &str| match s.trim().parse::<usize>() {
            Ok(n) if n <= MAX_CPU => Ok(n),
            _ => Err(format!("{s:?} in CPU list {text:?} is not a CPU number (0, 1, 2-3,5)")),
        };
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => (number(part)?, number(part)?),
        };
        if first > last {
            return Err(format!("{part:?} in CPU list {text:?} runs backwards"));
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// CPUs → their shortest list: `[1, 2, 3, 5]` → `1-3,5`.
pub fn cpu_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if j == i { cpus[i].to_string() } else { format!("{}-{}", cpus[i], cpus[j]) });
        i = j + 1;
    }
    out.join(",")
}

impl WatchSpec {
    /// A source from its parts, checked for form: the name (letters, digits, `_`, `-`, `.`),
    /// the source's kind and argument, a metric for (and only for) Prometheus, a positive
    /// limit, `idle` and `self` on Prometheus only. The error is the problem alone; the caller
    /// names where it was written.
    pub fn new(name: &str, source: &str, options: WatchOptions) -> Result<Self, String> {
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)) {
            return Err(format!("watch name {name:?}: use letters, digits, '_', '-' or '.'"));
        }
        let (kind, arg) = source.split_once(':').ok_or_else(|| {
            format!("{name}: source {source:?} must be cgroup:PATH, pid:N, process:NAME, cpu:LIST or prometheus:URL")
        })?;
        let kind = match (kind, arg) {
            (_, "") => return Err(format!("{name}: source {source:?} names nothing after {kind:?}")),
            ("cgroup", path) => WatchKind::Cgroup(path.to_string()),
            ("pid", n) => WatchKind::Pid(match n.trim().parse() {
                Ok(pid) if pid > 0 => pid,
                _ => return Err(format!("{name}: pid {n:?} is not a process id")),
            }),
            ("process", comm) => WatchKind::Process(comm.to_string()),
            ("cpu", list) => WatchKind::Cpu(parse_cpu_list(list).map_err(|e| format!("{name}: {e}"))?),
            ("prometheus", url) => WatchKind::Prometheus(url.to_string()),
            _ => {
                return Err(format!(
                    "{name}: unknown source kind {kind:?} (cgroup:PATH, pid:N, process:NAME, cpu:LIST or prometheus:URL)"
                ));
            }
        };
        let WatchOptions { metric, rate, limit, idle, scrape_self, strict } = options;
        let prometheus_only = |what: &str| Err(format!("{name}: {what} applies to prometheus sources only"));
        match (&kind, &metric) {
            (WatchKind::Prometheus(_), None) => {
                return Err(format!("{name}: a prometheus source needs metric = \"name{{label=\\\"v\\\"}}\""));
            }
            (WatchKind::Prometheus(url), Some(m)) => {
                // Its form only; the URL and the series are parsed when the run opens it.
                if !url.starts_with("http://") && !url.starts_with("https://") {
                    return Err(format!("{name}: {url:?} is not an http:// URL"));
                }
                if m.trim().is_empty() {
                    return Err(format!("{name}: metric is empty"));
                }
            }
            (_, Some(_)) => return prometheus_only("metric"),
            (_, None) if rate => return prometheus_only("rate"),
            (_, None) if idle => return prometheus_only("idle"),
            (_, None) if scrape_self.is_some() => return prometheus_only("self"),
            _ => {}
        }
        if let Some(l) = limit
            && !(l.is_finite() && l > 0.0)
        {
            return Err(format!("{name}: limit {l} must be a positive number"));
        }
        if let Some(n) = scrape_self {
            if !(n.is_finite() && n >= 0.0) {
                return Err(format!("{name}: self {n} must be a number of 0 or more"));
            }
            if rate || idle {
                return Err(format!("{name}: self applies to a gauge, not a counter read per second (rate, idle)"));
            }
        }
        let rate = rate || idle;
        let source = source.to_string();
        Ok(WatchSpec { name: name.to_string(), source, kind, metric, rate, limit, idle, scrape_self, strict })
    }

    /// `--watch NAME=SOURCE[;metric=SERIES][;rate][;limit=N][;idle][;self=N][;strict]`.
    pub fn parse_flag(text: &str) -> Result<Self, String> {
        let (name, rest) = text
            .split_once('=')
            .ok_or_else(|| format!("{text:?}: expected NAME=SOURCE (app=cgroup:/sys/fs/cgroup/app)"))?;
        let mut parts = rest.split(';');
        let source = parts.next().unwrap_or_default();
        let mut options = WatchOptions::default();
        let number =
            |key: &str, n: &str| n.trim().parse::<f64>().map_err(|_| format!("{name}: {key} {n:?} is not a number"));
        for part in parts.map(str::trim).filter(|p| !p.is_empty()) {
            match part.split_once('=') {
                Some(("metric", m)) => options.metric = Some(m.to_string()),
                Some(("limit", n)) => options.limit = Some(number("limit", n)?),
                Some(("self", n)) => options.scrape_self = Some(number("self", n)?),
                None if part == "rate" => options.rate = true,
                None if part == "idle" => options.idle = true,
                None if part == "strict" => options.strict = true,
                _ => {
                    return Err(format!(
                        "{name}: unknown option {part:?} (metric=SERIES, rate, limit=N, idle, self=N, strict)"
                    ));
                }
            }
        }
        WatchSpec::new(name, source, options)
    }
}

#[cfg(test)]
mod tests {
    use crate::cli::RunArgs;
    use crate::scenario::Spec;

    fn spec(text: &str, flags: &[&str]) -> Result<Spec, String> {
        let args = RunArgs { watch: flags.iter().map(|s| s.to_string()).collect(), ..Default::default() };
        Spec::from_scenario_text("s.toml", text, &args).map_err(|e| e.to_string())
    }

    const BASE: &str =
        "[target]\nurl = \"http://127.0.0.1:1/\"\n[profile]\nkind = \"constant\"\nrate = 10\nduration = \"1s\"\n";

    #[test]
    fn the_file_declares_and_a_flag_overrides_by_name() {
        let text = format!(
            "{BASE}[[watch]]\nname = \"app\"\nsource = \"cgroup:/sys/fs/cgroup/app\"\n[[watch]]\nname = \"pool\"\nsource = \"prometheus:http://127.0.0.1:9/metrics\"\nmetric = \"busy\"\nlimit = 20\n"
        );
        let s = spec(&text, &[]).unwrap();
        assert_eq!(s.watch.iter().map(|w| w.name.as_str()).collect::<Vec<_>>(), ["app", "pool"]);
        assert_eq!(s.watch[1].limit, Some(20.0));
        let s = spec(&text, &["app=pid:1", "web=process:nginx"]).unwrap();
        assert_eq!(
            s.watch.iter().map(|w| w.source.as_str()).collect::<Vec<_>>(),
            ["pid:1", "prometheus:http://127.0.0.1:9/metrics", "process:nginx"]
        );
    }

    #[test]
    fn cores_idle_counters_and_the_scrapes_own_worker() {
        let w = super::WatchSpec::parse_flag("core=cpu:2-3, 5,1").unwrap();
        assert_eq!((w.kind.label(), w.kind.argument()), ("cpu", "1-3,5".to_string()));
        assert_eq!(w.kind, super::WatchKind::Cpu(vec![1, 2, 3, 5]));
        let w = super::WatchSpec::parse_flag(
            "cpu1=prometheus:http://127.0.0.1:9/m;metric=node_cpu_seconds_total{cpu=\"1\",mode=\"idle\"};idle",
        )
        .unwrap();
        assert!(w.idle && w.rate, "idle implies a rate");
        let w = super::WatchSpec::parse_flag(
            "fpm=prometheus:http://127.0.0.1:9/s;metric=phpfpm_active_processes;limit=5;self=1;strict",
        )
        .unwrap();
        assert_eq!((w.scrape_self, w.limit, w.strict), (Some(1.0), Some(5.0), true));
        assert_eq!(super::cpu_list(&[0, 1, 2, 4, 6, 7]), "0-2,4,6-7");
        assert_eq!(super::cpu_list(&[]), "");
    }

    #[test]
    fn the_file_says_idle_self_and_strict_and_the_flag_makes_every_source_strict() {
        let text = format!(
            "{BASE}[[watch]]\nname = \"fpm\"\nsource = \"prometheus:http://127.0.0.1:9/status?openmetrics\"\nmetric = \"phpfpm_active_processes\"\nlimit = 5\nself = 1\n[[watch]]\nname = \"cpu1\"\nsource = \"prometheus:http://127.0.0.1:9/metrics\"\nmetric = \"node_cpu_seconds_total{{cpu=\\\"1\\\",mode=\\\"idle\\\"}}\"\nidle = true\nstrict = true\n"
        );
        let s = spec(&text, &["core=cpu:1"]).unwrap();
        assert_eq!(s.watch[0].scrape_self, Some(1.0));
        assert!(s.watch[1].idle && s.watch[1].strict && !s.watch[0].strict);
        let args = RunArgs { watch: vec!["core=cpu:1".into()], watch_strict: true, ..Default::default() };
        let s = Spec::from_scenario_text("s.toml", &text, &args).unwrap();
        assert!(s.watch.iter().all(|w| w.strict), "{:?}", s.watch);
    }

    #[test]
    fn mistakes_name_where_they_were_written() {
        let e = spec(&format!("{BASE}[[watch]]\nname = \"app\"\n"), &[]).unwrap_err();
        assert!(e.starts_with("s.toml:7:1: watch[1]") && e.contains("needs source"), "{e}");
        let e = spec(&format!("{BASE}[[watch]]\nname = \"p\"\nsource = \"prometheus:http://127.0.0.1:9/m\"\n"), &[])
            .unwrap_err();
        assert!(e.contains("watch[1].source") && e.contains("needs metric"), "{e}");
        let e = spec(&format!("{BASE}[[watch]]\nname = \"p\"\nsource = \"cgroup:/x\"\nevery = 1\n"), &[]).unwrap_err();
        assert!(e.contains("every"), "{e}");
        let e = spec(BASE, &["app"]).unwrap_err();
        assert!(e.starts_with("--watch") && e.contains("NAME=SOURCE"), "{e}");
    }

    #[test]
    fn flags_and_their_mistakes() {
        let w = super::WatchSpec::parse_flag("app=cgroup:/sys/fs/cgroup/app").unwrap();
        assert_eq!((w.name.as_str(), &w.kind), ("app", &super::WatchKind::Cgroup("/sys/fs/cgroup/app".into())));
        let w =
            super::WatchSpec::parse_flag("pool=prometheus:http://127.0.0.1:9/metrics;metric=busy{pool=\"a\"};limit=20")
                .unwrap();
        assert_eq!((w.metric.as_deref(), w.limit, w.rate), (Some("busy{pool=\"a\"}"), Some(20.0), false));
        assert!(
            super::WatchSpec::parse_flag("req=prometheus:http://127.0.0.1:9/m;metric=reqs_total;rate").unwrap().rate
        );
        assert_eq!(super::WatchSpec::parse_flag("n=pid:42").unwrap().kind, super::WatchKind::Pid(42));
        for (bad, says) in [
            ("app", "expected NAME=SOURCE"),
            ("app=cgroup", "must be cgroup:PATH"),
            ("app=cgroup:", "names nothing"),
            ("app=disk:/dev/sda", "unknown source kind"),
            ("n=pid:x", "not a process id"),
            ("p=prometheus:http://127.0.0.1:9/m", "needs metric"),
            ("c=cgroup:/x;metric=m", "prometheus sources only"),
            ("c=cgroup:/x;rate", "prometheus sources only"),
            ("c=cgroup:/x;limit=-1", "positive"),
            ("c=cgroup:/x;limit=lots", "not a number"),
            ("c=cgroup:/x;every=1s", "unknown option"),
            ("a b=cgroup:/x", "use letters"),
            ("c=cpu:x", "not a CPU number"),
            ("c=cpu:3-1", "runs backwards"),
            ("c=cpu:1,,2", "not a CPU number"),
            ("c=cpu:99999", "not a CPU number"),
            ("c=cpu:1;idle", "prometheus sources only"),
            ("c=pid:0", "not a process id"),
            ("p=prometheus:http://127.0.0.1:9/m;metric=x;self=-1", "0 or more"),
            ("p=prometheus:http://127.0.0.1:9/m;metric=x;self=one", "not a number"),
            ("p=prometheus:http://127.0.0.1:9/m;metric=x;rate;self=1", "applies to a gauge"),
            ("p=prometheus:http://127.0.0.1:9/m;metric=x;idle;self=1", "applies to a gauge"),
        ] {
            let e = super::WatchSpec::parse_flag(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
