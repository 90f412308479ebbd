//! `report.html`: one self-contained page per run, written next to `summary.json` after every
//! `loader run` and again by `loader report DIR`. It reads the saved summary (and the
//! per-phase `hgrm/` files for the percentile spectrum) and nothing else, so a run renders
//! the same page on any machine, byte for byte.
//!
//! Offline and inert by construction: inline CSS, SVG drawn here (no chart library), two
//! tiny inline scripts (an error recorder and a layout check), and a Content-Security-Policy
//! that forbids fetching anything. Every string from the summary is escaped: a URL, a header
//! or an error message the target sent lands in the page as text.
//!
//! The order is the reader's: verdict first, then rates, latency over time, steps (knee and
//! cliff), the percentile spectrum, the loader's health, the certificate, the run's facts.
//!
//! | file | owns |
//! |---|---|
//! | `escape.rs` | escaping and number formats |
//! | `svg.rs` | axes, ticks, downsampling, the `<svg>` writer |
//! | `charts.rs` | the charts |
//! | `sections.rs` | verdict and step table |
//! | `facts.rs` | health, certificate, metadata tables |
//! | `spectrum.rs` | reading `hgrm/*.hgrm` back |
//! | `compare.rs` | `loader compare --html`: two runs' page |
//!
//! It neither judges nor measures: the verdict and the knee are the summary's.

mod charts;
pub mod compare;
pub(crate) mod escape;
mod facts;
mod sections;
mod spectrum;
mod svg;

use std::path::{Path, PathBuf};

pub use spectrum::PhaseSpectrum;

use crate::error::OutputError;
use crate::summary::Summary;

/// The report's file name, next to `summary.json`.
pub const FILE: &str = "report.html";

/// The policy that keeps the page from fetching anything.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:";

const STYLE: &str = "\
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:1100px;padding:8px 16px;color:#1d2330;background:#fff}\
h1{font-size:18px;margin:4px 0}h2{font-size:16px;margin:18px 0 6px}h3{font-size:13px;margin:4px 0;text-transform:uppercase;letter-spacing:.04em}\
.sub{color:#5a6270;margin:0 0 6px;overflow-wrap:anywhere}\
.verdict{border:2px solid;border-radius:6px;padding:6px 12px}.verdict h2{margin:2px 0 4px}\
.trusted{border-color:#2a9d4a;background:#eef8f0}.untrusted{border-color:#c62828;background:#fdeeee}.unjudged{border-color:#888;background:#f4f4f4}\
.alert{color:#c62828;font-weight:600;margin:2px 0}.gist,.floor{margin:3px 0}.floor{color:#444;font-size:12px}\
.sides{display:flex;gap:10px}.side{flex:1;min-width:0}.side ul{margin:0;padding-left:16px}.side li{margin:1px 0;font-size:12px;overflow-wrap:anywhere}\
.quiet{color:#5a6270;margin:0;font-size:12px}.tag{font-size:10px;border-radius:3px;padding:0 3px;background:#ddd}\
.invalidates .tag{background:#c62828;color:#fff}\
.entry{margin:2px 0 6px;font-size:12px;color:#3a4250}.entry summary{cursor:pointer;color:#5a6270}.entry dl{margin:4px 0 0 12px;display:grid;grid-template-columns:max-content 1fr;gap:2px 10px}.entry dt{font-weight:600}.entry dd{margin:0}\
svg.chart{width:100%;height:auto;display:block}.plot{fill:#fbfbfd;stroke:#c9ced8}\
.grid{stroke:#e3e6ec;stroke-width:1}.tick,.axis,.band-label,.mark-label{font-size:11px;fill:#4a5160}\
.band-hold{fill:#e2ecfb}.band-ramp{fill:#f3f0e4}.band-warmup{fill:#ededed}.band-hold,.band-ramp,.band-warmup{stroke:#fff;stroke-width:1}\
path{fill:none;stroke-width:1.8}.dash{stroke-dasharray:5 3}\
.s-offered{stroke:#7a7f8a;color:#7a7f8a;stroke-dasharray:6 3}.s-sent{stroke:#1f6fd1;color:#1f6fd1}.s-ok{stroke:#2a9d4a;color:#2a9d4a}\
.s-p50{stroke:#2a9d4a;color:#2a9d4a}.s-p99{stroke:#e07b00;color:#e07b00}.s-max{stroke:#c62828;color:#c62828}\
.s-cpu{stroke:#6a3fb5;color:#6a3fb5}.s-rq{stroke:#b5408a;color:#b5408a}\
.c0{stroke:#1f6fd1;color:#1f6fd1}.c1{stroke:#2a9d4a;color:#2a9d4a}.c2{stroke:#e07b00;color:#e07b00}.c3{stroke:#c62828;color:#c62828}\
.c4{stroke:#6a3fb5;color:#6a3fb5}.c5{stroke:#0f9a9a;color:#0f9a9a}.c6{stroke:#8a5a2b;color:#8a5a2b}.c7{stroke:#b5408a;color:#b5408a}\
.mark-knee{stroke:#2a9d4a;stroke-width:2;stroke-dasharray:4 2}.mark-cliff{stroke:#c62828;stroke-width:2;stroke-dasharray:4 2}.mark-limit{stroke:#c62828;stroke-width:1.5;stroke-dasharray:3 3}\
.legend{margin:2px 0 10px;font-size:12px}.key{font-weight:700}.note{color:#5a6270}.missing{color:#5a6270;font-style:italic}\
table{border-collapse:collapse;font-size:12px;margin:4px 0}th,td{border-bottom:1px solid #e3e6ec;padding:3px 6px;text-align:right}\
.facts th,.steps td:first-child,.steps th:first-child{text-align:left}.facts td{text-align:left}.facts th{font-weight:500;color:#4a5160}\
.knee-row{background:#e6f5ea}.cliff-row{background:#fbe3e3}.badge{font-size:10px;border-radius:3px;padding:0 4px;color:#fff}\
.badge.knee{background:#2a9d4a}.badge.cliff{background:#c62828}.badge.minor{background:#7a7f8a}.pass{color:#2a9d4a}.fail{color:#c62828}\
.findings{font-size:12px}.headroom{width:600px;max-width:100%}.track{fill:#e3e6ec}.under{fill:#2a9d4a}.over{fill:#c62828}\
code{font-size:12px;overflow-wrap:anywhere}";

/// Records script errors on the page (the end-to-end test reads them from the DOM).
const ON_ERROR: &str =
    "window.onerror=function(m){var d=document.documentElement.dataset;d.jsErrors=(d.jsErrors||'')+String(m)+';'};";
/// Runs last: where the verdict ends on first paint (it must fit the first screen) and that
/// the scripts ran at all.
const LAYOUT_CHECK: &str = "(function(){var v=document.getElementById('verdict');var d=document.body.dataset;d.verdictBottom=String(Math.round(v.getBoundingClientRect().bottom+window.scrollY));d.scriptsRan='yes';})();";

/// The page for `s`, with the spectra read from its `hgrm/` files.
pub fn render(s: &Summary, spectra: &[PhaseSpectrum]) -> String {
    let cpu_limit = crate::verdict::Limits::default().cpu_p95_pct;
    let title = format!("loader report: {}", s.run.url);
    let parts = [
        ("Offered, sent and ok per second", charts::rates(s)),
        ("Latency over time", charts::latency_over_time(s)),
        ("Steps", sections::steps(s)),
        ("Target resources", sections::watch(s)),
        ("Latency percentile spectrum: corrected latency vs service time", charts::spectrum(spectra, s)),
        ("Loader health", charts::health(s, cpu_limit) + &facts::health(s)),
        ("Certificate headroom", facts::certificate(s)),
        ("Run", facts::metadata(s)),
    ];
    let mut page = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><script>{ON_ERROR}</script><style>{STYLE}</style></head><body>\
         <h1>loader report</h1><p class=\"sub\">{} · {} profile · started {} · {} s</p>",
        escape::esc(&title),
        escape::esc(&s.run.url),
        escape::esc(&s.run.profile),
        escape::esc(&s.run.started_at),
        escape::num(s.run.elapsed_s),
    );
    page.push_str(&sections::verdict(s));
    // The watched resources only when something was watched.
    for (heading, body) in
        parts.into_iter().filter(|(heading, body)| *heading != "Target resources" || !body.is_empty())
    {
        page.push_str(&format!("<section><h2>{}</h2>{body}</section>", escape::esc(heading)));
    }
    page.push_str(&format!("<script>{LAYOUT_CHECK}</script></body></html>\n"));
    page
}

/// Render `s` into `dir/report.html`; the spectra come from `hgrm_dir/hgrm/` (the run's
/// own directory; for `--repeat`, the last run's).
pub fn write(dir: &Path, hgrm_dir: &Path, s: &Summary) -> Result<PathBuf, OutputError> {
    let spectra = spectrum::read(hgrm_dir, s);
    let path = dir.join(FILE);
    std::fs::write(&path, render(s, &spectra)).map_err(|e| OutputError::new(&path, e))?;
    Ok(path)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::summary::{Point, Reason};

    /// A three-step run as the engine would record it, judged: knee at step 2.
    pub(crate) fn summary() -> Summary {
        let mut s = crate::verdict::tests::clean();
        let base = s.phases[0].clone();
        s.phases = (1..=3)
            .map(|k| {
                let mut p = base.clone();
                p.name = format!("step {k}");
                p.start_s = (k - 1) as f64 * 2.0;
                p.duration_s = 2.0;
                p.offered_rps = 100.0 * k as f64;
                p.latency_ms.p99 = k as f64 * 3.0;
                p.passed = Some(k < 3);
                p
            })
            .collect();
        s.run.profile = "step".into();
        s.knee = Some(Point { rps: 200.0, step: "step 2".into() });
        s.verdict.trusted = Some(true);
        s
    }

    fn spectra() -> Vec<PhaseSpectrum> {
        let pts: Vec<(f64, f64)> = (0..50).map(|i| (1.0 - 0.8f64.powi(i), 1.0 + i as f64 / 10.0)).collect();
        vec![PhaseSpectrum { phase: "step 1".into(), latency: pts.clone(), service: pts }]
    }

    #[test]
    fn the_page_is_ordered_inert_and_complete() {
        let page = render(&summary(), &spectra());
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains(CSP));
        let at = |needle: &str| page.find(needle).unwrap_or_else(|| panic!("no {needle}"));
        assert!(at("id=\"verdict\"") < at("Offered, sent and ok"));
        assert!(at("Offered, sent and ok") < at("Latency over time"));
        assert!(at("Latency over time") < at("id=\"steps\""));
        assert!(at("id=\"steps\"") < at("percentile spectrum"));
        assert!(at("percentile spectrum") < at("id=\"health\""));
        assert!(at("id=\"health\"") < at("Certificate headroom"));
        assert!(at("Certificate headroom") < at("id=\"metadata\""));
        assert!(page.contains(r#"<span class="badge knee">knee</span>"#));
        assert!(page.contains("TRUSTED"));
        assert!(page.matches("<svg").count() >= 4, "rates, latency, spectrum, CPU");
        for fetch in ["src=\"http", "href=\"http", "src='http", "href='http", "@import", "url("] {
            assert!(!page.contains(fetch), "{fetch}");
        }
        assert!(page.contains("not measured"), "a run without probes says so");
    }

    #[test]
    fn each_reason_folds_its_entry_from_the_verdict_page() {
        let mut s = summary();
        s.verdict.reasons.push(Reason {
            code: "time_wait".into(),
            side: "loader".into(),
            invalidates: true,
            value: Some(9702.0),
            limit: Some(5000.0),
            detail: "the loader's own sockets held up to 9702 TIME_WAIT entries".into(),
        });
        let page = render(&s, &spectra());
        let at = page.find("<code>time_wait</code>").expect("the reason");
        let entry = &page[at..page[at..].find("</li>").map(|e| at + e).unwrap()];
        assert!(
            entry.contains(r#"<details class="entry"><summary>what it means — docs/verdict.md#reason-time_wait"#),
            "{entry}"
        );
        assert!(entry.contains("<dt>what to do</dt><dd>keep-alive, <code>tcp_tw_reuse</code>"), "{entry}");
        assert!(!entry.contains("**") && !entry.contains('`'), "Markdown left in: {entry}");
    }

    #[test]
    fn strings_from_the_summary_cannot_inject_markup() {
        let mut s = summary();
        let evil = r#"<script>alert(1)</script><img src="http://evil/x">"#;
        s.run.url = format!("http://127.0.0.1/{evil}");
        s.phases[0].name = evil.into();
        s.verdict.reasons.push(Reason {
            code: evil.into(),
            side: evil.into(),
            invalidates: true,
            value: None,
            limit: None,
            detail: evil.into(),
        });
        s.errors_detail.insert(evil.into(), vec![crate::summary::ErrorMessage { message: evil.into(), count: 1 }]);
        let page = render(&s, &spectra());
        assert!(!page.contains("<script>alert"), "{page}");
        assert!(!page.contains("<img"));
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert_eq!(page.matches("<script>").count(), 2, "only the page's own two scripts");
    }

    #[test]
    fn the_same_summary_renders_the_same_bytes() {
        assert_eq!(render(&summary(), &spectra()), render(&summary(), &spectra()));
    }

    #[test]
    fn an_hour_long_run_stays_well_under_a_megabyte() {
        let mut s = summary();
        let second = s.series[0].clone();
        s.series = (0..3600u64)
            .map(|t| {
                let mut x = second.clone();
                x.t = t;
                x.offered = 1000 + t % 7;
                x.sent = 1000 + t % 5;
                x.ok = 990 + t % 11;
                x.cpu = Some(40.0 + (t % 13) as f64);
                x
            })
            .collect();
        s.run.elapsed_s = 3600.0;
        let base = s.phases[0].clone();
        s.phases = (0..60)
            .map(|k| {
                let mut p = base.clone();
                p.name = format!("step {k}");
                p.start_s = k as f64 * 60.0;
                p.duration_s = 60.0;
                p
            })
            .collect();
        let mut spectra = Vec::new();
        for p in &s.phases {
            let pts: Vec<(f64, f64)> = (0..300).map(|i| (1.0 - 0.95f64.powi(i), 1.0 + i as f64)).collect();
            spectra.push(PhaseSpectrum { phase: p.name.clone(), latency: pts.clone(), service: pts });
        }
        let page = render(&s, &spectra);
        assert!(page.len() < 400_000, "{} bytes", page.len());
    }
}
