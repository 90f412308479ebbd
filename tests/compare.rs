//! `loader compare A B` end to end: real runs against the built-in target of a known service
//! time, compared. A slower target (20 ms against 5 ms a request) is a regression the gate
//! catches (exit 4) and names; a run compared with a rerun of itself passes; with repeats on
//! both sides the changes are judged against the runs' own spread; bad input is one line.
//!
//! No root needed (`--no-probes`); traffic stays on 127.0.0.1; every run is bounded.

use loader_tests::common;

use std::process::Command;
use std::time::Duration;

use common::{Target, loader_bin, loader_run, out_dir, show};
use serde_json::Value;

/// A stepped run (50 and 100 req/s, 2 s each) against `target`, `repeat` times, into `name`.
fn stepped(target: &Target, name: &str, repeat: &str) -> std::path::PathBuf {
    let out = out_dir(name);
    let args = [
        "--url",
        &target.url(),
        "--steps",
        "50,100",
        "--hold",
        "2s",
        "--warmup",
        "1s",
        "--connections",
        "16",
        "--no-probes",
        "--repeat",
        repeat,
    ];
    let (output, summary) = loader_run(&args, &out, Duration::from_secs(60));
    assert!(summary.is_some(), "no summary.json\n{}", show(&output));
    out
}

fn compare(a: &std::path::Path, b: &std::path::Path, extra: &[&str]) -> (i32, String, String) {
    let output =
        Command::new(loader_bin()).arg("compare").arg(a).arg(b).args(extra).output().expect("loader compare runs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (output.status.code().unwrap_or(-1), text(&output.stdout), text(&output.stderr))
}

#[test]
fn a_slower_target_fails_the_gate_and_a_rerun_of_the_same_passes() {
    let fast = Target::start(&["--delay", "5ms"]);
    let slow = Target::start(&["--delay", "20ms"]);
    let a = stepped(&fast, "compare-fast", "1");
    let again = stepped(&fast, "compare-fast-again", "1");
    let b = stepped(&slow, "compare-slow", "1");

    let (code, text, err) = compare(&a, &b, &["--max-regression", "10"]);
    eprintln!("{text}{err}");
    assert_eq!(code, 4, "a regression over the bound is exit 4");
    assert!(text.contains("gate --max-regression 10 %: FAILED"), "{text}");
    assert!(text.contains("step 1: p99") && text.contains("step 2: p99"), "{text}");
    assert!(text.contains("noise: unknown"), "one run a side: {text}");

    let (code, text, _) = compare(&a, &again, &["--max-regression", "50"]);
    assert_eq!(code, 0, "a rerun of the same target is no regression\n{text}");
    assert!(text.contains("gate --max-regression 50 %: passed"), "{text}");

    // The document: p99 of step 2 went from about 5 ms to about 20 ms.
    let (_, json, _) = compare(&a, &b, &["--json"]);
    let c: Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    let p99 = c["steps"][1]["figures"].as_array().unwrap().iter().find(|f| f["name"] == "p99").unwrap().clone();
    let (pa, pb) = (p99["a"]["median"].as_f64().unwrap(), p99["b"]["median"].as_f64().unwrap());
    assert!((4.5..12.0).contains(&pa) && (19.5..40.0).contains(&pb), "{p99}");
    assert_eq!(p99["beyond_noise"], Value::Null, "one run a side cannot tell");

    // The page: every figure and both runs' spectra of each step.
    let page = out_dir("compare-page").with_extension("html");
    let (code, _, err) = compare(&a, &b, &["--html", page.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let html = std::fs::read_to_string(&page).expect("the page");
    assert_eq!(html.matches("latency percentile spectrum, A and B").count(), 2, "one chart per step");
}

#[test]
fn with_repeats_a_change_is_judged_against_the_runs_spread() {
    let fast = Target::start(&["--delay", "5ms"]);
    let slow = Target::start(&["--delay", "20ms"]);
    let a = stepped(&fast, "compare-fast-x2", "2");
    let b = stepped(&slow, "compare-slow-x2", "2");
    let (code, text, err) = compare(&a, &b, &["--max-regression", "10"]);
    eprintln!("{text}{err}");
    assert_eq!(code, 4, "{text}");
    assert!(text.contains("noise: from the repeats (2 runs of A, 2 of B)"), "{text}");
    assert!(text.contains("beyond the noise of 2 and 2 runs"), "{text}");
    // Compared with itself, every change lies within the noise: nothing is marked.
    let (code, text, _) = compare(&a, &a, &["--max-regression", "10"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.lines().filter(|l| l.starts_with("step")).all(|l| !l.contains('*')), "{text}");
}

#[test]
fn bad_input_is_one_line() {
    let (code, _, err) = compare(std::path::Path::new("/nonexistent-a"), std::path::Path::new("/nonexistent-b"), &[]);
    assert_eq!(code, 1);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("/nonexistent-a: no such directory"), "{err}");
    let dir = out_dir("compare-bad-bound");
    std::fs::create_dir_all(&dir).unwrap();
    let (code, _, err) = compare(&dir, &dir, &["--max-regression", "-5"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--max-regression: must be a percentage ≥ 0"), "{err}");
}
