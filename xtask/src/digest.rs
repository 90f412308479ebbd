//! The failures of a `cargo test` run, gathered from its output as it streams by and printed
//! again at the very end: on a CI whose log is cut to its head and tail, each failing test's
//! panic message is then in the tail, whatever ran after it (the fuzz targets).

/// Lines kept of one failure's panic message (the assertion and what it printed).
const LINES_EACH: usize = 24;
/// Characters kept of one line.
const CHARS_EACH: usize = 400;

/// One failing test: its binary, its name, and the head of its panic message.
struct Failure {
    binary: String,
    test: String,
    lines: Vec<String>,
    /// Inside the panic message (after `panicked at`, before the backtrace).
    open: bool,
}

/// Collects failures line by line ([`Digest::line`]), prints them ([`Digest::print`]).
#[derive(Default)]
pub struct Digest {
    binary: String,
    failures: Vec<Failure>,
    /// Inside a `---- NAME stdout ----` block.
    inside: bool,
}

impl Digest {
    pub fn line(&mut self, line: &str) {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("Running ") {
            self.binary = rest.split_whitespace().next().unwrap_or(rest).to_owned();
            self.inside = false;
            return;
        }
        if let Some(name) = trimmed.strip_prefix("---- ").and_then(|r| r.strip_suffix(" stdout ----")) {
            self.failures.push(Failure {
                binary: self.binary.clone(),
                test: name.to_owned(),
                lines: Vec::new(),
                open: false,
            });
            self.inside = true;
            return;
        }
        if !self.inside {
            return;
        }
        if trimmed == "failures:" || trimmed.starts_with("test result:") {
            self.inside = false;
            return;
        }
        let Some(f) = self.failures.last_mut() else { return };
        if line.starts_with("thread '") && line.contains("panicked at") {
            f.open = true;
        } else if line.starts_with("stack backtrace:") || line.starts_with("note: run with `RUST_BACKTRACE") {
            f.open = false;
        }
        if f.open && f.lines.len() < LINES_EACH {
            f.lines.push(line.chars().take(CHARS_EACH).collect());
        }
    }

    /// Prints every failure gathered (nothing when none).
    pub fn print(&self) {
        if self.failures.is_empty() {
            return;
        }
        println!();
        println!(
            "failure digest: {} failing test(s), each panic's first lines (the whole output is above)",
            self.failures.len()
        );
        for f in &self.failures {
            println!("== {} :: {}", f.binary, f.test);
            for l in &f.lines {
                println!("   {l}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_tests_panic_is_kept_without_its_backtrace() {
        let out = "     Running calibrate.rs (target/release/deps/calibrate-b8)\n\nrunning 2 tests\n\
                   test a ... FAILED\n\nfailures:\n\n---- a stdout ----\nwhat it printed\n\
                   thread 'a' (1) panicked at tests/calibrate.rs:337:9:\nassertion failed: x\n\
                   stack backtrace:\n   0: frame\n\n\nfailures:\n    a\n\ntest result: FAILED.\n";
        let mut d = Digest::default();
        out.lines().for_each(|l| d.line(l));
        assert_eq!(d.failures.len(), 1);
        let f = &d.failures[0];
        assert_eq!((f.binary.as_str(), f.test.as_str()), ("calibrate.rs", "a"));
        assert_eq!(f.lines, ["thread 'a' (1) panicked at tests/calibrate.rs:337:9:", "assertion failed: x"]);
    }
}
