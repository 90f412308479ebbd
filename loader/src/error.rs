//! Errors at the library's edge and how they print: one line naming the problem.

use std::fmt;

/// Flatten an error and its causes into one line: `outer: inner: root`. Takes any error
/// (`&*anyhow_error` for an `anyhow::Error`).
pub fn one_line(err: &(dyn std::error::Error + 'static)) -> String {
    let mut line = String::new();
    for (i, cause) in std::iter::successors(Some(err), |e| e.source()).enumerate() {
        let text = cause.to_string();
        if i > 0 {
            // Skip a cause that the outer message already quotes.
            if line.contains(&text) {
                continue;
            }
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.replace('\n', " ")
}

/// A bad value the user gave, named by where it came from (`--rate`, `[profile] hold`, …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError {
    /// The flag or scenario key at fault.
    pub key: String,
    /// What is wrong with it.
    pub problem: String,
}

impl InputError {
    /// An error for `key` saying `problem`.
    pub fn new(key: impl Into<String>, problem: impl Into<String>) -> Self {
        InputError { key: key.into(), problem: problem.into() }
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.problem)
    }
}

impl std::error::Error for InputError {}

/// A file the run could not write (the summary, the HDR log, the certificate).
#[derive(Debug, thiserror::Error)]
#[error("cannot write {}: {source}", path.display())]
pub struct OutputError {
    /// The file.
    pub path: std::path::PathBuf,
    /// Why.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

impl OutputError {
    /// `path` could not be written because of `source`.
    pub fn new(path: &std::path::Path, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        OutputError { path: path.to_path_buf(), source: Box::new(source) }
    }
}
