//! `[[watch]]` and `--watch`: the target's resources to sample ([`WatchSpec`]), checked for
//! form (opening them is `crate::watch`'s, before the run starts). A later entry of the same name replaces an
//! earlier one, so `--watch app=…` overrides the file's `app`.

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
        return Err(at("needs source = \"cgroup:PATH\" (or pid:N, process:NAME, prometheus:URL)".into()));
    };
    let Some(name) = &w.name else {
        // `--watch NAME=SOURCE[;options]`: all in one text.
        return WatchSpec::parse_flag(&source.value).map_err(|e| source.err(e));
    };
    let metric = w.metric.as_ref().map(|g| g.value.clone());
    let err = |g: &Given<String>, e: String| g.err(e);
    WatchSpec::new(
        &name.value,
        &source.value,
        metric,
        w.rate.as_ref().is_some_and(|g| g.value),
        w.limit.as_ref().map(|g| g.value),
    )
    .map_err(|e| err(source, e))
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
    /// cannot say (a process tree on a host shared with the loader).
    pub limit: Option<f64>,
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
    /// `prometheus:URL`.
    Prometheus(String),
}

impl WatchKind {
    /// What follows the kind's colon (a pid as written is its number).
    pub fn argument(&self) -> String {
        match self {
            WatchKind::Cgroup(a) | WatchKind::Process(a) | WatchKind::Prometheus(a) => a.clone(),
            WatchKind::Pid(n) => n.to_string(),
        }
    }

    /// `cgroup`, `process` or `prometheus`.
    pub fn label(&self) -> &'static str {
        match self {
            WatchKind::Cgroup(_) => "cgroup",
            WatchKind::Pid(_) | WatchKind::Process(_) => "process",
            WatchKind::Prometheus(_) => "prometheus",
        }
    }
}

impl WatchSpec {
    /// A source from its parts, checked for form: the name (letters, digits, `_`, `-`, `.`),
    /// the source's kind and argument, a metric for (and only for) Prometheus, a positive
    /// limit. The error is the problem alone; the caller names where it was written.
    pub fn new(
        name: &str,
        source: &str,
        metric: Option<String>,
        rate: bool,
        limit: Option<f64>,
    ) -> Result<Self, String> {
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)) {
            return Err(format!("watch name {name:?}: use letters, digits, '_', '-' or '.'"));
        }
        let (kind, arg) = source.split_once(':').ok_or_else(|| {
            format!("{name}: source {source:?} must be cgroup:PATH, pid:N, process:NAME or prometheus:URL")
        })?;
        let kind = match (kind, arg) {
            (_, "") => return Err(format!("{name}: source {source:?} names nothing after {kind:?}")),
            ("cgroup", path) => WatchKind::Cgroup(path.to_string()),
            ("pid", n) => WatchKind::Pid(n.parse().map_err(|_| format!("{name}: pid {n:?} is not a process id"))?),
            ("process", comm) => WatchKind::Process(comm.to_string()),
            ("prometheus", url) => WatchKind::Prometheus(url.to_string()),
            _ => {
                return Err(format!(
                    "{name}: unknown source kind {kind:?} (cgroup:PATH, pid:N, process:NAME or prometheus:URL)"
                ));
            }
        };
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
            (_, Some(_)) => return Err(format!("{name}: metric applies to prometheus sources only")),
            (_, None) if rate => return Err(format!("{name}: rate applies to prometheus sources only")),
            _ => {}
        }
        if let Some(l) = limit
            && !(l.is_finite() && l > 0.0)
        {
            return Err(format!("{name}: limit {l} must be a positive number"));
        }
        Ok(WatchSpec { name: name.to_string(), source: source.to_string(), kind, metric, rate, limit })
    }

    /// `--watch NAME=SOURCE[;metric=SERIES][;rate][;limit=N]`.
    pub fn parse_flag(text: &str) -> Result<Self, String> {
        let (name, rest) = text
            .split_once('=')
            .ok_or_else(|| format!("{text:?}: expected NAME=SOURCE (app=cgroup:/sys/fs/cgroup/app)"))?;
        let mut parts = rest.split(';');
        let source = parts.next().unwrap_or_default();
        let (mut metric, mut rate, mut limit) = (None, false, None);
        for part in parts.map(str::trim).filter(|p| !p.is_empty()) {
            match part.split_once('=') {
                Some(("metric", m)) => metric = Some(m.to_string()),
                Some(("limit", n)) => {
                    limit = Some(n.parse::<f64>().map_err(|_| format!("{name}: limit {n:?} is not a number"))?);
                }
                None if part == "rate" => rate = true,
                _ => return Err(format!("{name}: unknown option {part:?} (metric=SERIES, rate, limit=N)")),
            }
        }
        WatchSpec::new(name, source, metric, rate, limit)
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
        ] {
            let e = super::WatchSpec::parse_flag(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
