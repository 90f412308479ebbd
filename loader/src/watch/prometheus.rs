//! A Prometheus endpoint as a watch source: one blocking `GET http://host:port/path` per
//! call of [`Endpoint::scrape`] (the watcher calls it once a second), the page parsed as
//! Prometheus text (0.0.4) or OpenMetrics text, and one value picked from it by a
//! [`Selector`] such as `node_cpu_seconds_total{mode="idle"}`: the sum over every series
//! that has that name and at least those labels.
//!
//! What it owns: the URL's and the selector's syntax (checked without connecting), the
//! request (plain `http://` only, no proxy, at most 3 redirects, one deadline of 800 ms
//! from connect to the last byte of the body, a page of at most 8 MiB), the page's
//! parsing (the `prometheus-parse` crate, not a hand-written parser), the matching and
//! the sum, and a one-line error for each way a scrape can fail (the reason alone: the
//! watcher names the source once). A page is fetched ([`Endpoint::fetch`]) apart from
//! picking a series from it ([`Endpoint::pick`]), so sources on one page share its scrape.
//!
//! What it does not own: when to scrape and what to do with a failed scrape, turning a
//! counter into a rate (a `_seconds_total` is returned as the page gives it, a running
//! total), or judging whether a value is high: the caller does all of that.
//!
//! Matching rules, also written on [`value_of`]: a series matches when its name equals
//! the selector's and it carries every label of the selector with that value (extra
//! labels are allowed; `label=""` also matches a series without that label, as in
//! PromQL). When no series on the page has the selector's name exactly, a counter whose
//! name differs only by a `_total` suffix stands in (`foo` finds the counter
//! `foo_total`, and `foo_total` finds an old-style counter `foo`), so a selector works
//! against both the Prometheus text and the OpenMetrics form of one exporter. A
//! histogram's buckets are matched as `name_bucket{le="…"}` and a summary's quantiles as
//! `name{quantile="…"}`, with `le` and `quantile` compared as numbers (`le="1"` finds
//! `le="1.0"`). NaN series are left out of the sum; `+Inf` and `-Inf` are summed.
//!
//! Limits of the parser, accepted: a label value holding `,`, `=` or `}` is misread (such
//! a series only matches on its other labels), metric names with `:` (recording rules)
//! are not read, and escapes in label values are compared unescaped.

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::time::{Duration, Instant};

use prometheus_parse::{LineInfo, SampleType, Scrape, Value};
use ureq::http::Uri;

/// The whole budget of one scrape, from the connect to the last byte of the page.
const SCRAPE_TIMEOUT: Duration = Duration::from_millis(800);
/// The largest page read; a larger one fails the scrape.
const MAX_PAGE_BYTES: u64 = 8 * 1024 * 1024;
/// The Prometheus text format first (what the parser is for), anything else after it.
const ACCEPT: &str = "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1";

/// Which series of a page to read: a metric name and the labels a series must carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    /// The metric name (`node_cpu_seconds_total`), `_total` suffix or not for a counter.
    pub name: String,
    /// The `label="value"` matchers in the order written; all must hold (equality only).
    pub labels: Vec<(String, String)>,
}

impl fmt::Display for Selector {
    /// The selector in PromQL form: `name` or `name{label="value",…}`, values escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)?;
        if self.labels.is_empty() {
            return Ok(());
        }
        f.write_str("{")?;
        for (i, (key, value)) in self.labels.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let escaped = value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
            write!(f, "{key}=\"{escaped}\"")?;
        }
        f.write_str("}")
    }
}

/// A Prometheus endpoint and the series picked from it.
pub struct Endpoint {
    /// The URL as given (trimmed), for errors and reports.
    url: String,
    /// The same URL, checked, as the request's target.
    uri: Uri,
    /// The selector as written (trimmed).
    metric: String,
    /// The selector, parsed.
    selector: Selector,
    /// The HTTP client: deadline, no proxy, keeps the connection between scrapes.
    agent: ureq::Agent,
}

/// One page as fetched.
#[derive(Debug, Clone)]
pub struct Page {
    /// The page's text.
    body: String,
    /// Its `Content-Type`, for an error about a page that is not Prometheus text.
    content_type: String,
    /// How long the scrape took, connect to last byte.
    pub took: Duration,
}

/// Why a page could not be fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreached {
    /// The reason, one line, without the URL.
    pub why: String,
    /// Refused, timed out or a 5xx status: the endpoint may answer later.
    pub transient: bool,
}

/// The series a selector picked from one page.
#[derive(Debug, Clone, PartialEq)]
pub struct Picked {
    /// Their sum (NaN series left out).
    pub value: f64,
    /// How many series matched and were not NaN (node_exporter's idle counter: one a core).
    pub series: usize,
    /// Their `cpu` labels, ascending, when every one has a numeric one; else empty.
    pub cpus: Vec<usize>,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.url)
            .field("metric", &self.metric)
            .field("selector", &self.selector)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// `url` (`http://127.0.0.1:9100/metrics`), `metric` (the selector text). Validates both
    /// without connecting.
    pub fn new(url: &str, metric: &str) -> Result<Endpoint, String> {
        let url = url.trim();
        let uri = parse_url(url)?;
        let selector = parse_selector(metric)?;
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(SCRAPE_TIMEOUT))
            .http_status_as_error(false)
            .proxy(None)
            .max_redirects(3)
            .accept(ACCEPT)
            .user_agent(concat!("loader-watch/", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(Endpoint { url: url.to_owned(), uri, metric: metric.trim().to_owned(), selector, agent: config.into() })
    }

    /// Scrape once: the summed value of the matching series, or a one-line error (connect
    /// refused, timeout, HTTP status, parse error, no match) — the reason alone: the caller
    /// names the source. Blocks for at most about 800 ms.
    pub fn scrape(&self) -> Result<f64, String> {
        let page = self.fetch().map_err(|e| e.why)?;
        self.pick(&page).map(|picked| picked.value)
    }

    /// Fetch the page once (at most about 800 ms). An error that says the endpoint could not
    /// be reached in time — refused, timed out, a 5xx status — is [`Unreached::transient`]:
    /// it may answer later.
    pub fn fetch(&self) -> Result<Page, Unreached> {
        let started = Instant::now();
        let transient = |why: String| Unreached { why: one_line(&why), transient: true };
        let mut response = self.agent.get(self.uri.clone()).call().map_err(|e| {
            let permanent = matches!(e, ureq::Error::HostNotFound | ureq::Error::BadUri(_));
            Unreached { why: one_line(&describe(e)), transient: !permanent }
        })?;
        let status = response.status();
        if !status.is_success() {
            let why = format!("HTTP {status}");
            return Err(if status.is_server_error() { transient(why) } else { Unreached { why, transient: false } });
        }
        let content_type = response
            .headers()
            .get(ureq::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        // Bytes, then text once: ureq's lossy reader, decoding as it read, took a node_exporter
        // page's scrape from 0.6 to 1.4 ms of CPU (57 KB, this VM).
        let bytes = response
            .body_mut()
            .with_config()
            .limit(MAX_PAGE_BYTES)
            .read_to_vec()
            .map_err(|e| transient(describe(e)))?;
        let body = String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        Ok(Page { body, content_type, took: started.elapsed() })
    }

    /// The matching series of `page`: their sum, how many there were and, when each has a
    /// numeric `cpu` label (node_exporter's), those CPUs.
    pub fn pick(&self, page: &Page) -> Result<Picked, String> {
        pick(&page.body, &self.selector).map_err(|why| {
            let essence = page.content_type.split(';').next().unwrap_or("").trim();
            let text_like = essence.is_empty()
                || essence.eq_ignore_ascii_case("text/plain")
                || essence.eq_ignore_ascii_case("application/openmetrics-text");
            if text_like {
                one_line(&why)
            } else {
                one_line(&format!("{why}; the page is {essence}, not Prometheus text"))
            }
        })
    }

    /// Whether the URL's host is this machine (`127.0.0.0/8`, `::1`, `localhost`): then a
    /// node_exporter's `cpu` label numbers this host's CPUs.
    pub fn is_local(&self) -> bool {
        match self.uri.host() {
            Some("localhost") => true,
            Some(host) => host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback()),
            None => false,
        }
    }

    /// The selector as written (for reports).
    pub fn metric(&self) -> &str {
        &self.metric
    }

    /// The URL as given (for reports).
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// Checks `http://host[:port][/path][?query]` and returns it as a request target.
fn parse_url(url: &str) -> Result<Uri, String> {
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("https://") {
        return Err(format!("{url}: only http:// is supported for now, not https://"));
    }
    if !lower.starts_with("http://") {
        return Err(format!("{url}: expected http://host:port/path"));
    }
    let rest = &url["http://".len()..];
    if rest.contains('#') {
        return Err(format!("{url}: a #fragment has no place in a scrape URL"));
    }
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    if authority.contains('@') {
        return Err(format!("{url}: credentials in the URL are not supported"));
    }
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let Some((host, after)) = bracketed.split_once(']') else {
            return Err(format!("{url}: missing ] after the IPv6 address"));
        };
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(format!("{url}: expected :port after ]")),
            },
        }
    } else {
        match authority.split_once(':') {
            Some((_, port)) if port.contains(':') => {
                return Err(format!("{url}: an IPv6 address goes in brackets: [::1]"));
            }
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(format!("{url}: no host"));
    }
    if let Some(port) = port {
        match port.parse::<u16>() {
            Ok(p) if p > 0 => {}
            _ => return Err(format!("{url}: bad port {port:?}")),
        }
    }
    let path = if path.is_empty() || path.starts_with('?') { format!("/{path}") } else { path.to_owned() };
    format!("http://{authority}{path}").parse::<Uri>().map_err(|e| format!("{url}: {e}"))
}

/// A ureq error as the end of a one-line message.
fn describe(error: ureq::Error) -> String {
    let timed_out = || format!("timed out after {} ms", SCRAPE_TIMEOUT.as_millis());
    match error {
        ureq::Error::Timeout(_) => timed_out(),
        ureq::Error::Io(e) => match e.kind() {
            io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => timed_out(),
            _ => e.to_string(),
        },
        ureq::Error::HostNotFound => "host not found".to_owned(),
        ureq::Error::BodyExceedsLimit(_) => {
            format!("the page is larger than {} MiB", MAX_PAGE_BYTES >> 20)
        }
        other => other.to_string(),
    }
}

/// `text` with its line breaks turned into spaces.
fn one_line(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

/// Parse a selector: `name` or `name{label="value",other="w"}` (equality matchers only,
/// `\"`, `\\` and `\n` escapes in values, a trailing comma allowed). Public for reuse.
pub fn parse_selector(text: &str) -> Result<Selector, String> {
    let bad = |why: &str| format!("metric {text:?}: {why}");
    const EXPECTED: &str = r#"expected label="value""#;
    let is_name_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let t = text.trim();
    let name_end = t.find(|c: char| !is_name_char(c)).unwrap_or(t.len());
    let name = &t[..name_end];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(bad(r#"expected a metric name, as in node_load1 or name{label="value"}"#));
    }
    let rest = t[name_end..].trim_start();
    if rest.is_empty() {
        return Ok(Selector { name: name.to_owned(), labels: Vec::new() });
    }
    let Some(mut rest) = rest.strip_prefix('{') else {
        return Err(bad("expected { or the end after the metric name"));
    };
    let mut labels: Vec<(String, String)> = Vec::new();
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            if !after.trim().is_empty() {
                return Err(bad("unexpected text after }"));
            }
            break;
        }
        let key_end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
        let key = &rest[..key_end];
        if key.is_empty() || key.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(bad(EXPECTED));
        }
        rest = rest[key_end..].trim_start();
        if ["!=", "=~", "!~"].iter().any(|op| rest.starts_with(op)) {
            return Err(bad(r#"expected label="value" (only = matchers are supported)"#));
        }
        let Some(after_eq) = rest.strip_prefix('=') else {
            return Err(bad(EXPECTED));
        };
        let Some(quoted) = after_eq.trim_start().strip_prefix('"') else {
            return Err(bad(EXPECTED));
        };
        let mut value = String::new();
        let mut close = None;
        let mut chars = quoted.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    close = Some(i);
                    break;
                }
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    Some((_, c)) => {
                        value.push('\\');
                        value.push(c);
                    }
                    None => break,
                },
                c => value.push(c),
            }
        }
        let Some(close) = close else {
            return Err(bad("unterminated label value (a \" is missing)"));
        };
        if labels.iter().any(|(k, _)| k == key) {
            return Err(bad(&format!("label {key} is given twice")));
        }
        labels.push((key.to_owned(), value));
        rest = quoted[close + 1..].trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if !rest.starts_with('}') {
            return Err(bad(if rest.is_empty() {
                "missing } at the end"
            } else {
                r#"expected , or } after label="value""#
            }));
        }
    }
    Ok(Selector { name: name.to_owned(), labels })
}

/// One series as it stands on the page, histogram buckets and summary quantiles apart.
struct Series<'a> {
    /// Its name: a histogram bucket's is `base_bucket`.
    name: String,
    /// Its labels, without a histogram's `le` or a summary's `quantile`.
    labels: &'a prometheus_parse::Labels,
    /// `("le", bound)` for a histogram bucket, `("quantile", q)` for a summary quantile.
    bound: Option<(&'static str, f64)>,
    /// Its value.
    value: f64,
    /// Typed counter by the parser (Prometheus text counters).
    counter: bool,
}

/// The page's samples flattened into series.
fn flatten(scrape: &Scrape) -> Vec<Series<'_>> {
    let mut out = Vec::with_capacity(scrape.samples.len());
    for sample in &scrape.samples {
        let one = |value: f64, counter: bool| Series {
            name: sample.metric.clone(),
            labels: &sample.labels,
            bound: None,
            value,
            counter,
        };
        match &sample.value {
            Value::Counter(v) => out.push(one(*v, true)),
            Value::Gauge(v) | Value::Untyped(v) => out.push(one(*v, false)),
            Value::Histogram(buckets) => out.extend(buckets.iter().map(|b| Series {
                name: format!("{}_bucket", sample.metric),
                labels: &sample.labels,
                bound: Some(("le", b.less_than)),
                value: b.count,
                counter: false,
            })),
            Value::Summary(quantiles) => out.extend(quantiles.iter().map(|q| Series {
                name: sample.metric.clone(),
                labels: &sample.labels,
                bound: Some(("quantile", q.quantile)),
                value: q.count,
                counter: false,
            })),
        }
    }
    out
}

/// The names the page declares `# TYPE name counter` (OpenMetrics declares `foo` for the
/// series `foo_total`), read with the crate's own line parser.
fn declared_counters(body: &str) -> HashSet<String> {
    body.lines()
        .filter(|line| line.trim_start().starts_with('#'))
        .filter_map(|line| match LineInfo::parse(line) {
            LineInfo::Type { metric_name, sample_type: SampleType::Counter, .. } => Some(metric_name),
            _ => None,
        })
        .collect()
}

/// A label value as written on the page (between its quotes), unescaped.
fn unescape(raw: &str) -> String {
    if !raw.contains('\\') {
        return raw.to_owned();
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some(c @ ('\\' | '"')) => out.push(c),
            Some(c) => {
                out.push('\\');
                out.push(c);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// Whether `series` carries every label of `selector` with its value.
fn labels_match(series: &Series<'_>, selector: &Selector) -> bool {
    selector.labels.iter().all(|(key, wanted)| {
        if let Some((bound_key, bound)) = series.bound
            && bound_key == key
        {
            return wanted.trim().parse::<f64>().is_ok_and(|w| w == bound);
        }
        match series.labels.get(key) {
            Some(raw) => {
                let value = unescape(raw);
                value == *wanted
                    || ((key == "le" || key == "quantile")
                        && matches!(
                            (value.trim().parse::<f64>(), wanted.trim().parse::<f64>()),
                            (Ok(a), Ok(b)) if a == b
                        ))
            }
            None => wanted.is_empty(),
        }
    })
}

/// Sum of the matching series in an exposition body (Prometheus text or OpenMetrics text).
/// Pure, unit-tested.
///
/// A series matches when its name equals `selector.name` and it has every listed label
/// with that value (extra labels allowed; an empty value also matches an absent label).
/// If no series has that name exactly, a counter whose name differs by a `_total` suffix
/// stands in. NaN series are ignored (left out of the sum); `±Inf` values are summed.
/// Errors: no series matches (`no series matches name{…} (N series of M names on the
/// page)`), or every matching series is NaN.
pub fn value_of(body: &str, selector: &Selector) -> Result<f64, String> {
    pick(body, selector).map(|picked| picked.value)
}

/// [`value_of`] with how many series matched and their CPUs. Only the page's lines of the
/// selector's family are parsed — its name less a `_total`, `_bucket`, `_sum`, `_count` or
/// `_created` suffix begins theirs — so a node_exporter page of 2,000 series costs what its
/// dozen CPU lines do; when they hold no match the whole page is parsed for the error's
/// count of what it has.
pub fn pick(body: &str, selector: &Selector) -> Result<Picked, String> {
    let family = family_lines(body, stem(&selector.name));
    pick_parsed(&family, selector).or_else(|_| pick_parsed(body, selector))
}

/// The name a selector's family shares: `node_cpu_seconds_total` → `node_cpu_seconds`.
fn stem(name: &str) -> &str {
    ["_total", "_bucket", "_sum", "_count", "_created"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name)
}

/// The lines of `body` about metrics whose names begin with `stem` (samples, and their
/// `# TYPE`, `# HELP` and `# UNIT` lines), and `# EOF`.
fn family_lines(body: &str, stem: &str) -> String {
    let mut out = String::new();
    for line in body.lines() {
        let t = line.trim_start();
        let name = match t.strip_prefix('#') {
            Some(comment) => {
                let mut words = comment.split_whitespace();
                match words.next() {
                    Some("TYPE" | "HELP" | "UNIT") => words.next().unwrap_or(""),
                    Some("EOF") => stem,
                    _ => "",
                }
            }
            None => t.split(['{', ' ', '\t']).next().unwrap_or(""),
        };
        if !name.is_empty() && name.starts_with(stem) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The whole parse and match behind [`pick`].
fn pick_parsed(body: &str, selector: &Selector) -> Result<Picked, String> {
    let scrape = Scrape::parse(body.lines().map(|line| Ok(line.to_owned())))
        .map_err(|e| format!("the page does not parse: {e}"))?;
    let series = flatten(&scrape);
    let wanted = selector.name.as_str();
    let named: Vec<&Series<'_>> = if series.iter().any(|s| s.name == wanted) {
        series.iter().filter(|s| s.name == wanted).collect()
    } else {
        let counters = declared_counters(body);
        let is_counter = |s: &Series<'_>| {
            s.counter
                || counters.contains(&s.name)
                || s.name.strip_suffix("_total").is_some_and(|base| counters.contains(base))
        };
        let other = match wanted.strip_suffix("_total") {
            Some(base) => base.to_owned(),
            None => format!("{wanted}_total"),
        };
        series.iter().filter(|s| s.name == other && is_counter(s)).collect()
    };
    let mut matched = 0usize;
    let mut nan = 0usize;
    let mut sum = 0.0;
    let mut cpus = Some(Vec::new());
    for s in named.iter().filter(|s| labels_match(s, selector)) {
        matched += 1;
        if s.value.is_nan() {
            nan += 1;
        } else {
            sum += s.value;
            let cpu = s.labels.get("cpu").and_then(|c| c.parse::<usize>().ok());
            cpus = cpus.zip(cpu).map(|(mut all, c)| {
                all.push(c);
                all
            });
        }
    }
    if matched == 0 {
        let names: HashSet<&str> = series.iter().map(|s| s.name.as_str()).collect();
        let near = if named.is_empty() {
            String::new()
        } else {
            format!("; {} named {}, none with these labels", named.len(), named[0].name)
        };
        return Err(format!(
            "no series matches {selector} ({} series of {} names on the page{near})",
            series.len(),
            names.len()
        ));
    }
    if nan == matched {
        return Err(format!("every series that matches {selector} is NaN ({matched} series)"));
    }
    let mut cpus = cpus.unwrap_or_default();
    cpus.sort_unstable();
    cpus.dedup();
    Ok(Picked { value: sum, series: matched - nan, cpus })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::process::{Child, Command, Stdio};
    use std::thread;
    use std::time::Instant;

    /// A node_exporter-like page: HELP/TYPE lines, 2 CPUs, a gauge, a pressure counter,
    /// a histogram, a summary, a NaN and an +Inf.
    const NODE: &str = r#"# HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.
# TYPE node_cpu_seconds_total counter
node_cpu_seconds_total{cpu="0",mode="idle"} 123.4
node_cpu_seconds_total{cpu="0",mode="system"} 10.5
node_cpu_seconds_total{cpu="0",mode="user"} 20.25
node_cpu_seconds_total{cpu="1",mode="idle"} 100.1
node_cpu_seconds_total{cpu="1",mode="system"} 9.5
node_cpu_seconds_total{cpu="1",mode="user"} 30
# HELP node_load1 1m load average.
# TYPE node_load1 gauge
node_load1 0.5
# HELP node_pressure_cpu_waiting_seconds_total Total time in seconds that processes have waited for CPU time
# TYPE node_pressure_cpu_waiting_seconds_total counter
node_pressure_cpu_waiting_seconds_total 12.5
# HELP node_filesystem_avail_bytes Filesystem space available to non-root users in bytes.
# TYPE node_filesystem_avail_bytes gauge
node_filesystem_avail_bytes{device="/dev/sda1",fstype="ext4",mountpoint="/"} 1.0e+09
node_filesystem_avail_bytes{device="tmpfs",fstype="tmpfs",mountpoint="/run"} 2e6
# HELP go_gc_duration_seconds A summary of the pause duration of garbage collection cycles.
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0"} 2.1e-05
go_gc_duration_seconds{quantile="0.5"} 4.0e-05
go_gc_duration_seconds{quantile="1"} 0.0002
go_gc_duration_seconds_sum 0.0125
go_gc_duration_seconds_count 250
# HELP http_request_duration_seconds Request latency.
# TYPE http_request_duration_seconds histogram
http_request_duration_seconds_bucket{handler="/",le="0.1"} 7
http_request_duration_seconds_bucket{handler="/",le="1.0"} 9
http_request_duration_seconds_bucket{handler="/",le="+Inf"} 10
http_request_duration_seconds_sum{handler="/"} 2.5
http_request_duration_seconds_count{handler="/"} 10
# TYPE weird gauge
weird{kind="nan"} NaN
weird{kind="inf"} +Inf
weird{kind="one"} 1
node_textfile_scrape_error 0
"#;

    /// The same kind of page in OpenMetrics text: counters declared without `_total`,
    /// a `_created` series, an exemplar, a unit line and `# EOF`.
    const OPENMETRICS: &str = r#"# HELP node_cpu_seconds Seconds the CPUs spent in each mode.
# TYPE node_cpu_seconds counter
# UNIT node_cpu_seconds seconds
node_cpu_seconds_total{cpu="0",mode="idle"} 123.4
node_cpu_seconds_total{cpu="1",mode="idle"} 100.1 # {trace_id="abc"} 1.0 1520879607.789
node_cpu_seconds_created{cpu="0",mode="idle"} 1.7e9
# TYPE requests counter
requests_total{code="200"} 7
requests_total{code="500"} 1
# TYPE node_load1 gauge
node_load1 0.5 1520879607.789
# EOF
"#;

    fn sel(text: &str) -> Selector {
        parse_selector(text).unwrap()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn selector_good() {
        assert_eq!(sel("node_load1"), Selector { name: "node_load1".into(), labels: vec![] });
        assert_eq!(
            sel(r#"  node_cpu_seconds_total{mode="idle"} "#),
            Selector { name: "node_cpu_seconds_total".into(), labels: vec![("mode".into(), "idle".into())] }
        );
        let s = sel(r#"x{ a = "v" , b="w\"q\\z\n", }"#);
        assert_eq!(s.name, "x");
        assert_eq!(s.labels, vec![("a".into(), "v".into()), ("b".into(), "w\"q\\z\n".into())]);
        assert_eq!(s.to_string(), r#"x{a="v",b="w\"q\\z\n"}"#);
        assert_eq!(sel("x{}").labels, vec![]);
        assert_eq!(sel(r#"job:up:sum{a=""}"#).labels, vec![("a".into(), "".into())]);
        assert_eq!(sel(r#"x{a="1,2}"}"#).labels, vec![("a".into(), "1,2}".into())]);
    }

    #[test]
    fn selector_bad() {
        let err = |text: &str| parse_selector(text).unwrap_err();
        assert_eq!(err("foo{bar}"), r#"metric "foo{bar}": expected label="value""#);
        assert!(err("").contains("expected a metric name"));
        assert!(err("9lives").contains("expected a metric name"));
        assert!(err("{a=\"b\"}").contains("expected a metric name"));
        assert!(err("foo bar").contains("expected { or the end"));
        assert!(err(r#"foo{a!="b"}"#).contains("only = matchers"));
        assert!(err(r#"foo{a=~"b"}"#).contains("only = matchers"));
        assert!(err(r#"foo{a=b}"#).contains(r#"expected label="value""#));
        assert!(err(r#"foo{a="b"#).contains("unterminated"));
        assert!(err(r#"foo{a="b""#).contains("missing }"));
        assert!(err(r#"foo{a="b" c="d"}"#).contains("expected , or }"));
        assert!(err(r#"foo{a="b"} x"#).contains("after }"));
        assert!(err(r#"foo{a="b",a="c"}"#).contains("given twice"));
        assert!(err(r#"foo{,}"#).contains(r#"expected label="value""#));
        for text in ["foo{bar}", "", "foo{a=\"b"] {
            assert!(!err(text).contains('\n'), "{text}");
        }
    }

    #[test]
    fn node_exporter_page() {
        let v = |text: &str| value_of(NODE, &sel(text)).unwrap();
        assert!(close(v(r#"node_cpu_seconds_total{mode="idle"}"#), 223.5));
        assert!(close(v(r#"node_cpu_seconds_total{mode="idle",cpu="1"}"#), 100.1));
        assert!(close(v("node_cpu_seconds_total"), 293.75));
        assert!(close(v("node_load1"), 0.5));
        assert!(close(v("node_pressure_cpu_waiting_seconds_total"), 12.5));
        assert!(close(v(r#"node_filesystem_avail_bytes{mountpoint="/"}"#), 1e9));
        assert!(close(v("node_textfile_scrape_error"), 0.0));
        // Summaries and histograms, as they stand on the page.
        assert!(close(v(r#"go_gc_duration_seconds{quantile="0.5"}"#), 4e-5));
        assert!(close(v("go_gc_duration_seconds_count"), 250.0));
        assert!(close(v(r#"http_request_duration_seconds_bucket{le="1"}"#), 9.0));
        assert!(close(v(r#"http_request_duration_seconds_bucket{handler="/",le="+Inf"}"#), 10.0));
        assert!(close(v("http_request_duration_seconds_sum"), 2.5));
    }

    #[test]
    fn label_subset_and_empty_label() {
        let v = |text: &str| value_of(NODE, &sel(text));
        // Extra labels on the page are allowed; every selector label must hold.
        assert!(close(v(r#"node_cpu_seconds_total{cpu="0"}"#).unwrap(), 154.15));
        assert!(v(r#"node_cpu_seconds_total{cpu="0",mode="steal"}"#).is_err());
        // label="" matches a series without that label, as in PromQL.
        assert!(close(v(r#"node_load1{instance=""}"#).unwrap(), 0.5));
        assert!(v(r#"node_load1{instance="x"}"#).is_err());
    }

    #[test]
    fn total_suffix_equivalence() {
        let v = |body: &str, text: &str| value_of(body, &sel(text));
        // Prometheus text: the counter is named with _total; the selector may leave it off.
        assert!(close(v(NODE, r#"node_cpu_seconds{mode="idle"}"#).unwrap(), 223.5));
        assert!(close(v(NODE, "node_pressure_cpu_waiting_seconds").unwrap(), 12.5));
        // A gauge is no counter: no suffix games.
        assert!(v(NODE, "node_load1_total").is_err());
        // An old-style counter without _total is found by a selector with it.
        let old = "# TYPE hits counter\nhits 4\n";
        assert!(close(v(old, "hits_total").unwrap(), 4.0));
        // An exact name wins over the suffix twin.
        let both = "# TYPE foo gauge\nfoo 1\n# TYPE foo_total counter\nfoo_total 5\n";
        assert!(close(v(both, "foo").unwrap(), 1.0));
        assert!(close(v(both, "foo_total").unwrap(), 5.0));
        // Untyped series are not counters.
        assert!(v("bar_total 3\n", "bar").is_err());
    }

    #[test]
    fn openmetrics_page() {
        let v = |text: &str| value_of(OPENMETRICS, &sel(text)).unwrap();
        assert!(close(v(r#"node_cpu_seconds_total{mode="idle"}"#), 223.5));
        assert!(close(v(r#"node_cpu_seconds{mode="idle"}"#), 223.5));
        assert!(close(v("requests"), 8.0));
        assert!(close(v(r#"requests_total{code="500"}"#), 1.0));
        assert!(close(v("node_load1"), 0.5));
        assert!(close(v(r#"node_cpu_seconds_created{cpu="0"}"#), 1.7e9));
        // `# EOF` is no series.
        let err = value_of(OPENMETRICS, &sel("EOF")).unwrap_err();
        assert!(err.contains("no series matches EOF"), "{err}");
    }

    #[test]
    fn only_the_family_is_parsed_and_it_picks_what_the_whole_page_does() {
        let selectors = [
            r#"node_cpu_seconds_total{mode="idle"}"#,
            r#"node_cpu_seconds{cpu="1"}"#,
            "node_load1",
            "node_pressure_cpu_waiting_seconds",
            r#"go_gc_duration_seconds{quantile="0.5"}"#,
            "go_gc_duration_seconds_count",
            r#"http_request_duration_seconds_bucket{le="1"}"#,
            "http_request_duration_seconds_sum",
            "weird",
        ];
        for page in [NODE, OPENMETRICS] {
            for text in selectors {
                let whole = pick_parsed(page, &sel(text));
                assert_eq!(pick(page, &sel(text)), whole, "{text}");
            }
        }
        let family = family_lines(NODE, stem("node_cpu_seconds_total"));
        assert_eq!(family.lines().count(), 8, "six series, HELP and TYPE: {family}");
        // No match in the family: the error counts the whole page.
        let err = pick(NODE, &sel("node_cpu_seconds_total{mode=\"steal\"}")).unwrap_err();
        assert!(err.contains("series of") && err.contains("6 named node_cpu_seconds_total"), "{err}");
    }

    #[test]
    fn an_idle_counter_says_how_many_cores_and_which() {
        let p = pick(NODE, &sel(r#"node_cpu_seconds_total{mode="idle"}"#)).unwrap();
        assert_eq!((p.series, p.cpus.clone()), (2, vec![0, 1]));
        let p = pick(NODE, &sel(r#"node_cpu_seconds_total{cpu="1",mode="idle"}"#)).unwrap();
        assert_eq!((p.series, p.cpus.clone()), (1, vec![1]));
        // Series without a cpu label: counted, no CPUs named.
        let p = pick(NODE, &sel("node_load1")).unwrap();
        assert_eq!((p.series, p.cpus.len()), (1, 0));
    }

    #[test]
    fn no_match_error() {
        let err = value_of(NODE, &sel(r#"nope{a="b"}"#)).unwrap_err();
        assert!(err.starts_with(r#"no series matches nope{a="b"} ("#), "{err}");
        assert!(err.contains(" series of "), "{err}");
        assert!(err.contains(" names on the page"), "{err}");
        assert!(!err.contains('\n'));
        let err = value_of(NODE, &sel(r#"node_load1{cpu="7"}"#)).unwrap_err();
        assert!(err.contains("1 named node_load1, none with these labels"), "{err}");
        let err = value_of("", &sel("x")).unwrap_err();
        assert_eq!(err, "no series matches x (0 series of 0 names on the page)");
        let err = value_of("<html><body>hi</body></html>\n", &sel("x")).unwrap_err();
        assert!(err.contains("(0 series of 0 names"), "{err}");
    }

    #[test]
    fn nan_ignored_inf_kept() {
        let v = |text: &str| value_of(NODE, &sel(text));
        assert!(close(v(r#"weird{kind="one"}"#).unwrap(), 1.0));
        // NaN is left out of the sum, +Inf is kept.
        assert_eq!(v("weird").unwrap(), f64::INFINITY);
        let err = v(r#"weird{kind="nan"}"#).unwrap_err();
        assert!(err.contains("is NaN"), "{err}");
        assert_eq!(v(r#"weird{kind="inf"}"#).unwrap(), f64::INFINITY);
        let page = "a{x=\"1\"} NaN\na{x=\"2\"} 2\n";
        assert!(close(value_of(page, &sel("a")).unwrap(), 2.0));
    }

    #[test]
    fn url_checks() {
        let new = |url: &str| Endpoint::new(url, "up");
        assert!(new("http://127.0.0.1:9100/metrics").is_ok());
        assert!(new("http://localhost/metrics").is_ok());
        assert!(new("http://[::1]:9100/metrics").is_ok());
        assert!(new("http://127.0.0.1:9100").is_ok());
        assert!(new("HTTP://127.0.0.1:9100/m?x=1").is_ok());
        let err = new("https://127.0.0.1:9100/metrics").unwrap_err();
        assert!(err.contains("only http:// is supported for now"), "{err}");
        assert!(!err.contains('\n'));
        assert!(new("127.0.0.1:9100/metrics").unwrap_err().contains("expected http://"));
        assert!(new("http://:9100/metrics").unwrap_err().contains("no host"));
        assert!(new("http://h:0/").unwrap_err().contains("bad port"));
        assert!(new("http://h:99999/").unwrap_err().contains("bad port"));
        assert!(new("http://h:x/").unwrap_err().contains("bad port"));
        assert!(new("http://::1:9100/").unwrap_err().contains("brackets"));
        assert!(new("http://u:p@h/").unwrap_err().contains("credentials"));
        assert!(Endpoint::new("http://h/", "foo{bar}").is_err());
        let e = Endpoint::new(" http://127.0.0.1:1/m ", r#" x{a="b"} "#).unwrap();
        assert_eq!(e.metric(), r#"x{a="b"}"#);
        assert_eq!(e.url(), "http://127.0.0.1:1/m");
    }

    /// Serves `answers` requests on a fresh 127.0.0.1 port, each with `body` and
    /// `Connection: close`; returns the port and the server's thread.
    fn serve(body: &'static str, answers: usize) -> (u16, thread::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let handle = thread::spawn(move || {
            for _ in 0..answers {
                let (mut stream, _) = listener.accept().unwrap();
                stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match stream.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => break,
                    }
                }
                let text = String::from_utf8_lossy(&head);
                assert!(text.starts_with("GET /metrics HTTP/1.1\r\n"), "{text}");
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                stream.write_all(response.as_bytes()).unwrap();
            }
        });
        (port, handle)
    }

    #[test]
    fn live_scrape() {
        let (port, server) = serve(NODE, 2);
        let url = format!("http://127.0.0.1:{port}/metrics");
        let idle = Endpoint::new(&url, r#"node_cpu_seconds_total{mode="idle"}"#).unwrap();
        assert!(close(idle.scrape().unwrap(), 223.5));
        let missing = Endpoint::new(&url, "nope").unwrap();
        let err = missing.scrape().unwrap_err();
        assert!(err.starts_with("no series matches nope ("), "{err}");
        server.join().unwrap();
    }

    #[test]
    fn live_http_status() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            stream
                .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot found")
                .unwrap();
        });
        let e = Endpoint::new(&format!("http://127.0.0.1:{port}/metrics"), "up").unwrap();
        let err = e.scrape().unwrap_err();
        assert!(err.ends_with("HTTP 404 Not Found"), "{err}");
        server.join().unwrap();
    }

    #[test]
    fn live_refused() {
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let e = Endpoint::new(&format!("http://127.0.0.1:{port}/metrics"), "up").unwrap();
        let err = e.scrape().unwrap_err();
        assert!(err.contains("refused"), "{err}");
        assert!(!err.contains('\n'));
    }

    #[test]
    fn live_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // Accepts, reads, never answers; lets go after 3 s.
        let server = thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            stream.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            thread::sleep(Duration::from_millis(1500));
        });
        let e = Endpoint::new(&format!("http://127.0.0.1:{port}/metrics"), "up").unwrap();
        let start = Instant::now();
        let err = e.scrape().unwrap_err();
        let took = start.elapsed();
        assert!(err.contains("timed out after 800 ms"), "{err}");
        assert!(took < Duration::from_millis(1500), "{took:?}");
        assert!(took >= Duration::from_millis(700), "{took:?}");
        server.join().unwrap();
    }

    /// Kills the exporter however the test ends.
    struct Exporter(Child);

    impl Drop for Exporter {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn live_node_exporter() {
        const BINARY: &str = "/usr/bin/prometheus-node-exporter";
        if !std::path::Path::new(BINARY).exists() {
            eprintln!("live_node_exporter: skipped, {BINARY} is not installed");
            return;
        }
        let port = {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let child = Command::new(BINARY)
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(child) => Exporter(child),
            Err(e) => {
                eprintln!("live_node_exporter: skipped, {BINARY} does not start: {e}");
                return;
            }
        };
        let e = Endpoint::new(&format!("http://127.0.0.1:{port}/metrics"), r#"node_cpu_seconds_total{mode="idle"}"#)
            .unwrap();
        let start = Instant::now();
        let value = loop {
            match e.scrape() {
                Ok(v) => break v,
                Err(err) if start.elapsed() > Duration::from_secs(5) => {
                    panic!("node exporter did not answer within 5 s: {err}")
                }
                Err(_) => thread::sleep(Duration::from_millis(100)),
            }
        };
        assert!(value > 0.0, "{value}");
        let load = Endpoint::new(&format!("http://127.0.0.1:{port}/metrics"), "node_load1").unwrap().scrape().unwrap();
        assert!(load >= 0.0, "{load}");
        drop(child);
    }
}
