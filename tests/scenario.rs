//! Scenario files end to end: every example in docs/examples parses and plans; bad files
//! give exit 1 and one line naming `file:line:column` and the key; a small stepped file runs
//! against `loader target` with its ramp and hold phases tagged apart.

use loader_tests::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Target, loader_run, out_dir, phase, wait_bounded};
use loader::cli::RunArgs;
use loader::scenario::{Plan, Spec};

fn examples() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_documented_example_parses_and_plans() {
    let files = examples();
    assert!(files.len() >= 6, "one example per profile: {files:?}");
    let mut kinds = Vec::new();
    for path in files {
        let args = RunArgs { scenario: Some(path.clone()), ..Default::default() };
        let spec = Spec::from_run_args(&args).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let plan = Plan::resolve(&spec, "http://127.0.0.1:8080/").unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!plan.phases.is_empty(), "{}", path.display());
        kinds.push(plan.profile_kind().as_str());
    }
    for kind in ["constant", "step", "ramp", "spike", "soak", "breakpoint"] {
        assert!(kinds.contains(&kind), "no example of the {kind} profile");
    }
}

/// Run `loader run FILE` on a bad file: exit 1, one stderr line.
fn bad_file(name: &str, text: &str) -> String {
    let dir = PathBuf::from(common::tmp_dir()).join("bad-scenarios");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write scenario");
    let child = Command::new(common::loader_bin())
        .arg("run")
        .arg(&path)
        .args(["--no-probes", "--plain"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting loader run");
    let output = wait_bounded(child, Duration::from_secs(20));
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert_eq!(output.status.code(), Some(1), "{name}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{name}: one line: {stderr}");
    let prefix = format!("loader: error: {}:", path.display());
    assert!(stderr.starts_with(&prefix), "{name}: {stderr}");
    stderr[prefix.len()..].trim_end().to_string()
}

#[test]
fn bad_files_get_one_line_with_position_and_key() {
    let cases = [
        ("unknown_key.toml", "[profile]\nkind = \"step\"\nstepz = [1]\n", "3:1: profile.stepz: unknown field `stepz`"),
        ("unknown_section.toml", "[target]\nurl = \"http://127.0.0.1:1/\"\n[limits]\n", "3:2: limits: unknown field"),
        (
            "wrong_type.toml",
            "[profile]\nrate = 100\nduration = 10\n",
            "3:12: profile.duration: invalid type: integer `10`",
        ),
        ("truncated.toml", "[profile]\nkind = \"st", "2:11: invalid basic string"),
        ("negative_rate.toml", "[profile]\nrate = -100\n", "2:8: profile.rate: rate must be a positive number"),
        (
            "huge.toml",
            "[target]\nconnections = 123456789012\n[profile]\nrate = 1\n",
            "2:15: target.connections: 123456789012 is above",
        ),
        ("empty_steps.toml", "[profile]\nkind = \"step\"\nsteps = []\n", "3:9: profile.steps: needs at least one rate"),
        (
            "weight0.toml",
            "[[request]]\nweight = 0\n[profile]\nrate = 1\n",
            "2:10: request[1].weight: must be at least 1",
        ),
        (
            "duplicate.toml",
            "[[request]]\nname = \"a\"\n[[request]]\nname = \"a\"\n[profile]\nrate = 1\n",
            "4:8: request[2].name: duplicate request name",
        ),
        (
            "bad_budget.toml",
            "[slo]\nerror_budget = \"lots\"\n[profile]\nrate = 1\n",
            "2:16: slo.error_budget: expected a fraction",
        ),
        ("no_rate.toml", "[profile]\nkind = \"constant\"\n", "1:1: profile.rate: required"),
        (
            "send_ahead.toml",
            "[target]\nsend_ahead = \"11ms\"\n[profile]\nrate = 1\n",
            "2:14: target.send_ahead: 11ms is above the 10 ms limit",
        ),
        ("dup_key.toml", "[profile]\nrate = 1\nrate = 2\n", "3:1"),
    ];
    for (name, text, want) in cases {
        let got = bad_file(name, text);
        assert!(got.starts_with(want), "{name}:\n got: {got}\nwant: {want}");
    }
}

#[test]
fn a_missing_file_is_one_line() {
    let out = out_dir("scenario-missing");
    let (output, summary) = loader_run(&["/nonexistent/scenario.toml"], &out, Duration::from_secs(10));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("loader: error: /nonexistent/scenario.toml: cannot read"), "{stderr}");
    assert!(summary.is_none());
}

#[test]
fn a_stepped_file_runs_with_ramps_tagged_apart() {
    let target = Target::start(&[]);
    let out = out_dir("scenario-stepped");
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/tiny.toml");
    let (output, summary) =
        loader_run(&[file.to_str().expect("utf-8 path"), "--url", &target.url()], &out, Duration::from_secs(30));
    let s = common::complete_run("scenario-stepped", &output, &summary, &[0]);
    let names: Vec<&str> = s["phases"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["ramp to step 1", "step 1", "ramp to step 2", "step 2"]);
    for (name, kind, requests, offered) in [
        ("ramp to step 1", "ramp", 25, 50.0),
        ("step 1", "hold", 100, 100.0),
        ("ramp to step 2", "ramp", 75, 150.0),
        ("step 2", "hold", 200, 200.0),
    ] {
        let p = phase(s, name);
        assert_eq!(p["kind"], kind, "{name}");
        assert_eq!(p["requests"].as_u64(), Some(requests), "{name}: {p}");
        assert_eq!(p["offered_rps"].as_f64(), Some(offered), "{name}");
        assert_eq!(p["sent"].as_u64(), Some(requests), "{name}: every planned request is sent");
    }
    // The per-second offered series follows the ramps exactly: 400 in all.
    let offered: u64 = s["series"].as_array().unwrap().iter().map(|x| x["offered"].as_u64().unwrap()).sum();
    assert_eq!(offered, 400);
}
