//! The two text formats a scraper may ask for, and the choice between them.
//!
//! `prometheus-client` writes OpenMetrics 1.0.0. The Prometheus text format 0.0.4 (what a
//! scraper gets unless its `Accept` header asks for OpenMetrics) is derived from it: a
//! counter's family takes its sample's `_total` name, `# UNIT` and `# EOF` go, `unknown`
//! is `untyped` and `info` a gauge named `_info`.

use prometheus_client::registry::Registry;

/// Content type of the OpenMetrics text.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Content type of the Prometheus text format.
pub const PROMETHEUS: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One rendering of the metrics in both formats.
#[derive(Debug, Clone, Default)]
pub struct Exposition {
    /// OpenMetrics 1.0.0 text.
    pub openmetrics: String,
    /// Prometheus text format 0.0.4.
    pub prometheus: String,
}

impl Exposition {
    /// Encode `registry` in both formats.
    pub fn of(registry: &Registry) -> Self {
        let mut openmetrics = String::new();
        // Writing into a String fails only if a metric's own encoding fails; the
        // SharedHistogram's does when its lock is poisoned (a panic elsewhere): serve what
        // was written.
        let _ = prometheus_client::encoding::text::encode(&mut openmetrics, registry);
        let prometheus = prometheus_text(&openmetrics);
        Exposition { openmetrics, prometheus }
    }

    /// The body and content type for a request with this `Accept` header.
    pub fn negotiate(&self, accept: Option<&str>) -> (&str, &'static str) {
        if accept.is_some_and(wants_openmetrics) {
            (&self.openmetrics, OPENMETRICS)
        } else {
            (&self.prometheus, PROMETHEUS)
        }
    }
}

/// Whether an `Accept` header prefers OpenMetrics text: it names
/// `application/openmetrics-text` with a quality above zero and at least that of any range
/// the Prometheus text also matches (`text/plain`, `text/*`, `*/*`).
pub fn wants_openmetrics(accept: &str) -> bool {
    let (mut om, mut plain) = (0.0_f64, 0.0_f64);
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
            .map_or(1.0, |(_, v)| v.trim().parse::<f64>().unwrap_or(0.0));
        match media.as_str() {
            "application/openmetrics-text" => om = om.max(q),
            "text/plain" | "text/*" | "*/*" => plain = plain.max(q),
            _ => {}
        }
    }
    om > 0.0 && om >= plain
}

/// The Prometheus 0.0.4 text of an OpenMetrics text (see the module's doc).
pub fn prometheus_text(openmetrics: &str) -> String {
    // Families whose name changes: counter → NAME_total, info → NAME_info.
    let types: std::collections::HashMap<&str, &str> =
        openmetrics.lines().filter_map(|l| l.strip_prefix("# TYPE ").and_then(|r| r.split_once(' '))).collect();
    let renamed = |name: &str| match types.get(name) {
        Some(&"counter") => Some(format!("{name}_total")),
        Some(&"info") => Some(format!("{name}_info")),
        _ => None,
    };
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some((keyword, rest)) = line
            .strip_prefix("# HELP ")
            .map(|r| ("HELP", r))
            .or_else(|| line.strip_prefix("# TYPE ").map(|r| ("TYPE", r)))
        {
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            let name = renamed(name).unwrap_or_else(|| name.to_string());
            let tail = match (keyword, tail) {
                ("TYPE", "unknown") => "untyped",
                ("TYPE", "info") => "gauge",
                _ => tail,
            };
            out.push_str(&format!("# {keyword} {name} {tail}\n"));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_asks_for_openmetrics_and_curl_gets_text() {
        // Prometheus 2.x's scrape header.
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(wants_openmetrics(prom));
        assert!(!wants_openmetrics("*/*"));
        assert!(!wants_openmetrics("text/plain;version=0.0.4"));
        assert!(!wants_openmetrics("text/plain, application/openmetrics-text;q=0.5"));
        assert!(!wants_openmetrics("application/openmetrics-text;q=0"));
        assert!(wants_openmetrics("application/openmetrics-text; version=1.0.0"));
    }

    #[test]
    fn counters_take_their_total_name_and_openmetrics_only_lines_go() {
        let om = "# HELP x_requests Requests.\n# TYPE x_requests counter\nx_requests_total 5\n\
                  # HELP x_lag Lag.\n# TYPE x_lag histogram\n# UNIT x_lag seconds\nx_lag_sum 0.5\n\
                  # HELP x_build Build.\n# TYPE x_build info\nx_build_info{v=\"1\"} 1\n# EOF\n";
        let text = prometheus_text(om);
        assert_eq!(
            text,
            "# HELP x_requests_total Requests.\n# TYPE x_requests_total counter\nx_requests_total 5\n\
             # HELP x_lag Lag.\n# TYPE x_lag histogram\nx_lag_sum 0.5\n\
             # HELP x_build_info Build.\n# TYPE x_build_info gauge\nx_build_info{v=\"1\"} 1\n"
        );
    }
}
