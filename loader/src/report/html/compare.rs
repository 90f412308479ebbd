//! `loader compare --html FILE`: the comparison as one self-contained page — who A and B
//! are, the knees, the table of each compared step's figures and changes, and each step's two
//! latency spectra over each other (from the runs' `hgrm/` files). The same policy as
//! `report.html`: inline, inert, every string escaped. It neither compares nor judges: that
//! is [`crate::compare`]'s.

use std::fmt::Write as _;
use std::path::Path;

use super::escape::esc;
use super::spectrum::{self, PhaseSpectrum};
use super::{CSP, STYLE, charts};
use crate::compare::{Comparison, text};
use crate::error::OutputError;
use crate::summary::Summary;

/// The page: `spectra_a` and `spectra_b` are each run's spectra (empty when its `hgrm/`
/// files are not beside its summary; the page then says so).
pub fn render(c: &Comparison, spectra_a: &[PhaseSpectrum], spectra_b: &[PhaseSpectrum]) -> String {
    let mut page = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>loader compare</title><style>{STYLE}</style></head><body><h1>loader compare: B against A</h1>"
    );
    let _ = write!(page, "<pre class=\"findings\">{}</pre>", esc(&text::render(c)));
    let mut table = String::from(
        "<table class=\"steps\"><tr><th>phase</th><th>figure</th><th>A</th><th>B</th><th>change</th><th>noise</th></tr>",
    );
    for row in &c.steps {
        for f in &row.figures {
            let noise = match f.beyond_noise {
                Some(true) => "beyond",
                Some(false) => "within",
                None => "unknown",
            };
            // A compared change for the worse by over 5 %, not within the noise: marked.
            let worse = f.change_pct.is_some_and(|x| if f.higher_is_better { x < -5.0 } else { x > 5.0 });
            let class = if row.comparable && f.beyond_noise != Some(false) && worse { " class=\"fail\"" } else { "" };
            let _ = write!(
                table,
                "<tr{class}><td>{}</td><td>{}</td><td>{:.3} ({:.3}–{:.3}, {} runs)</td><td>{:.3} ({:.3}–{:.3}, {} runs)</td><td>{}</td><td>{noise}</td></tr>",
                esc(&row.phase),
                esc(f.name),
                f.a.median,
                f.a.min,
                f.a.max,
                f.a.n,
                f.b.median,
                f.b.min,
                f.b.max,
                f.b.n,
                f.change_pct.map_or("—".to_string(), |x| format!("{x:+.1} %")),
            );
        }
    }
    table.push_str("</table>");
    let _ = write!(page, "<section><h2>Every figure, with each side's range</h2>{table}</section>");
    page.push_str("<section><h2>Latency percentile spectra, step by step</h2>");
    let mut drawn = 0;
    for row in c.steps.iter().filter(|r| r.comparable) {
        let find = |s: &[PhaseSpectrum]| s.iter().find(|p| p.phase == row.phase).map(|p| p.latency.clone());
        if let (Some(a), Some(b)) = (find(spectra_a), find(spectra_b)) {
            page.push_str(&charts::spectra_against(&row.phase, &a, &b));
            drawn += 1;
        }
    }
    if drawn == 0 {
        page.push_str(
            "<p class=\"missing\">No spectra: no compared step has both runs' hgrm/ files beside their summaries.</p>",
        );
    }
    page.push_str("</section></body></html>\n");
    page
}

/// The spectra of a saved run: from its directory's `hgrm/`, else (a `--repeat` run) from
/// its last run's.
pub fn spectra_of(dir: &Path, s: &Summary) -> Vec<PhaseSpectrum> {
    let here = spectrum::read(dir, s);
    if !here.is_empty() {
        return here;
    }
    let last = s.capacity.as_ref().and_then(|c| c.runs.last()).map(std::path::PathBuf::from);
    let last = last.map(|l| if l.is_dir() { l } else { dir.join(l.file_name().unwrap_or_default()) });
    last.map(|l| spectrum::read(&l, s)).unwrap_or_default()
}

/// Write the page to `path`.
pub fn write(
    path: &Path,
    c: &Comparison,
    spectra_a: &[PhaseSpectrum],
    spectra_b: &[PhaseSpectrum],
) -> Result<(), OutputError> {
    std::fs::write(path, render(c, spectra_a, spectra_b)).map_err(|e| OutputError::new(path, e))
}
