//! Outputs of a run: the terminal tables ([`text`]), the HDR interval log ([`hdr`]), the
//! per-phase percentile distributions ([`hgrm`]), the step judgement as JUnit XML ([`junit`]),
//! the self-contained HTML page ([`html`]), the JSON files ([`write_json`]) and the live
//! metrics endpoint ([`metrics`]). They read merged or copied data; none measures or judges.
//! The `summary.json` types themselves are the [`crate::summary`] module.

pub mod hdr;
pub mod hgrm;
pub mod html;
pub mod junit;
pub mod metrics;
pub mod text;

use std::path::Path;

/// Write `value` as pretty JSON (with a final newline) to `path`.
pub fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<(), crate::error::OutputError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| crate::error::OutputError::new(path, e))?;
    std::fs::write(path, text + "\n").map_err(|e| crate::error::OutputError::new(path, e))
}
