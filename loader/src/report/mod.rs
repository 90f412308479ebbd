//! Outputs of a run: the terminal tables ([`text`], with [`gates`]' pass/fail line), the HDR interval log ([`hdr`]), the
//! per-phase percentile distributions ([`hgrm`]), the step judgement as JUnit XML ([`junit`]),
//! the self-contained HTML page ([`html`]), the JSON files ([`write_json`]) and the live
//! metrics endpoint ([`metrics`]). They read merged or copied data; none measures or judges.
//! The `summary.json` types themselves are the [`crate::summary`] module.

pub mod gates;
pub mod hdr;
pub mod hgrm;
pub mod html;
pub mod junit;
pub mod metrics;
pub mod text;
pub mod watch;

use std::path::Path;

/// Write `value` as pretty JSON (with a final newline) to `path`.
pub fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<(), crate::error::OutputError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| crate::error::OutputError::new(path, e))?;
    std::fs::write(path, text + "\n").map_err(|e| crate::error::OutputError::new(path, e))
}

/// [`write_json`], and when the file cannot be written (a full or read-only disk) the same
/// JSON on standard error after one line saying so, so the measurement is not lost. The
/// error comes back for the caller's exit code.
pub fn write_json_or_stderr(path: &Path, value: &impl serde::Serialize) -> Result<(), crate::error::OutputError> {
    let err = match write_json(path, value) {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    // A half-written file would read as a broken summary: gone is clearer.
    let _ = std::fs::remove_file(path);
    eprintln!("loader: {}; it follows on standard error", crate::error::one_line(&err));
    if let Ok(text) = serde_json::to_string_pretty(value) {
        eprintln!("{text}");
    }
    Err(err)
}

/// Whether `dir` takes a file: one of 4 KiB written and removed, so a read-only or full
/// filesystem is one error line before a run rather than a run whose results cannot land.
pub fn check_writable(dir: &Path) -> std::io::Result<()> {
    use std::io::Write as _;
    let probe = dir.join(format!(".loader-write-check-{}", std::process::id()));
    let written = std::fs::File::create(&probe).and_then(|mut f| f.write_all(&[0u8; 4096]));
    let _ = std::fs::remove_file(&probe);
    written
}
