//! What `loader run` prints on stdout for scripts and CI (issue 49): `--quiet`, the verdict's
//! headline and nothing else; `--json`, the summary document and nothing else; the exit code
//! and the files as without them. The real binary against the built-in target, no probes.

use loader_tests::common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Target, loader_run, out_dir, show};

/// A short run at a low rate on one shard against `url`, then `extra`.
fn short_run<'a>(url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args =
        vec!["--url", url, "--rate", "100", "--duration", "1s", "--connections", "4", "--threads", "1", "--no-probes"];
    args.extend_from_slice(extra);
    args
}

/// The exit code a summary of a constant-rate run calls for (README's exit codes), whatever
/// stdout held.
fn exit_for(s: &serde_json::Value) -> i32 {
    let untrusted = s["verdict"]["trusted"] == false && s["analysis"]["knee_on_trusted_steps"] != true;
    let failed = s["phases"].as_array().expect("phases").iter().any(|p| p["passed"] == false);
    if s["failure"].is_string() {
        1
    } else if s["interrupted"] == true {
        130
    } else if untrusted {
        3
    } else if failed {
        4
    } else {
        0
    }
}

/// The headline a summary's verdict calls for, as far as its first words go.
fn headline_start(s: &serde_json::Value) -> &'static str {
    match s["verdict"]["trusted"].as_bool() {
        Some(true) => "VERDICT: TRUSTED —",
        Some(false) => "VERDICT: ",
        None => "VERDICT: not judged",
    }
}

fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn issue_49_quiet_prints_the_verdict_headline_alone_and_exits_as_without() {
    let target = Target::start(&[]);
    let url = target.url();

    let loud_out = out_dir("stdout-loud");
    let (loud, loud_summary) = loader_run(&short_run(&url, &[]), &loud_out, Duration::from_secs(30));
    let loud_summary = loud_summary.unwrap_or_else(|| panic!("no summary.json\n{}", show(&loud)));
    assert_eq!(loud.status.code(), Some(exit_for(&loud_summary)), "{}", show(&loud));
    let loud_stdout = String::from_utf8_lossy(&loud.stdout);
    assert!(loud_stdout.lines().any(|l| l.starts_with("loader: constant profile")), "{loud_stdout}");
    assert!(loud_stdout.lines().any(|l| l.starts_with("summary: ")), "{loud_stdout}");

    let quiet_out = out_dir("stdout-quiet");
    let (quiet, quiet_summary) = loader_run(&short_run(&url, &["--quiet"]), &quiet_out, Duration::from_secs(30));
    let quiet_summary = quiet_summary.unwrap_or_else(|| panic!("no summary.json\n{}", show(&quiet)));
    let stdout = String::from_utf8_lossy(&quiet.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stdout: {stdout}");
    assert!(lines[0].starts_with(headline_start(&quiet_summary)), "{stdout}\n{}", quiet_summary["verdict"]);
    // The headline is the first line of the verdict block the full report prints.
    let loud_headline = loud_stdout.lines().find(|l| l.starts_with("VERDICT:")).expect("a verdict without --quiet");
    if loud_summary["verdict"]["trusted"] == true && quiet_summary["verdict"]["trusted"] == true {
        assert_eq!(lines[0], loud_headline);
    }
    // The exit code is the one its summary calls for, as without --quiet: the same code
    // whenever the two runs were judged alike (this VM's host may spoil either one).
    let code = quiet.status.code();
    assert_eq!(code, Some(exit_for(&quiet_summary)), "{}", show(&quiet));
    if exit_for(&quiet_summary) == exit_for(&loud_summary) {
        assert_eq!(code, loud.status.code());
    }
    assert!(quiet_out.join("report.html").is_file() && quiet_out.join("latency.hlog").is_file(), "files written");
}

#[test]
fn issue_49_json_prints_the_summary_document_alone() {
    let target = Target::start(&[]);
    let out = out_dir("stdout-json");
    let (output, summary) = loader_run(&short_run(&target.url(), &["--json"]), &out, Duration::from_secs(30));
    let written = summary.unwrap_or_else(|| panic!("no summary.json\n{}", show(&output)));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(stdout.lines().count(), 1, "one line of JSON: {stdout}");
    let printed: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(printed, written, "stdout holds what summary.json holds");
    assert_eq!(output.status.code(), Some(exit_for(&written)), "{}", show(&output));
    assert!(out.join("report.html").is_file());
}

/// With `--repeat`, one line per run: `--quiet` a headline each, `--json` each run's own
/// summary.json (JSON Lines).
#[test]
fn issue_49_repeated_runs_print_one_line_each() {
    let target = Target::start(&[]);
    let url = target.url();

    let out = out_dir("stdout-quiet-repeat");
    let (output, summary) = loader_run(&short_run(&url, &["--quiet", "--repeat", "2"]), &out, Duration::from_secs(40));
    let combined = summary.unwrap_or_else(|| panic!("no summary.json\n{}", show(&output)));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "a headline per run: {stdout}");
    for (k, line) in lines.iter().enumerate() {
        let run = read_json(&out.join(format!("run-{}/summary.json", k + 1)));
        assert!(line.starts_with(headline_start(&run)), "run {}: {line}\n{}", k + 1, run["verdict"]);
    }
    assert_eq!(output.status.code(), Some(exit_for(&combined)), "{}", show(&output));

    let out = out_dir("stdout-json-repeat");
    let (output, summary) = loader_run(&short_run(&url, &["--json", "--repeat", "2"]), &out, Duration::from_secs(40));
    let combined = summary.unwrap_or_else(|| panic!("no summary.json\n{}", show(&output)));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let printed: Vec<serde_json::Value> =
        stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    assert_eq!(printed.len(), 2, "a document per run: {stdout}");
    for (k, doc) in printed.iter().enumerate() {
        assert_eq!(*doc, read_json(&out.join(format!("run-{}/summary.json", k + 1))), "run {}", k + 1);
    }
    assert!(combined["capacity"].is_object(), "the combined summary stays in OUT/summary.json");
    assert_eq!(output.status.code(), Some(exit_for(&combined)), "{}", show(&output));
}

#[test]
fn issue_49_quiet_and_json_together_are_a_usage_error() {
    let out = out_dir("stdout-both");
    let (output, summary) = loader_run(
        &["--url", "http://127.0.0.1:1/", "--rate", "5", "--quiet", "--json"],
        &out,
        Duration::from_secs(10),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{}", show(&output));
    assert_eq!(
        stderr.trim_end(),
        "loader: error: the argument '--quiet' cannot be used with '--json' (see `loader run --help`)",
        "one line"
    );
    assert!(output.stdout.is_empty(), "{}", show(&output));
    assert!(summary.is_none());
    // Every usage error is one line, with clap's suggestion when it has one; help is whole.
    let loader = |args: &[&str]| {
        Command::new(common::loader_bin()).args(args).stdin(Stdio::null()).output().expect("start loader")
    };
    let typo = loader(&["run", "--rat", "5"]);
    assert_eq!(typo.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&typo.stderr).trim_end(),
        "loader: error: unexpected argument '--rat' found; a similar argument exists: '--rate' (see `loader run --help`)"
    );
    let missing = loader(&["verdict"]);
    assert_eq!(
        String::from_utf8_lossy(&missing.stderr).trim_end(),
        "loader: error: the following required arguments were not provided: <DIR> (see `loader verdict --help`)"
    );
    let help = loader(&["run", "--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).lines().count() > 50, "the whole help");
}
