//! The closed model end to end (`--vus`, `--vus-steps`, `--think`): the real binary against
//! the built-in target of a known capacity (`--workers W --delay D`: at most `W ÷ D` answers
//! a second), with the probes loaded when root.
//!
//! - A worker pool: `N` users thinking `Z` against a target of capacity `C` send
//!   `min(N ÷ (D + Z), C)` a second, within 5 % — below the capacity and past it.
//! - Seed 002's third lab: the same nominal steps open and closed against a target of
//!   200 req/s, the last step past it. The open run queues and times out; the closed run's
//!   users slow down to the target's pace, its p95 stays low and it reports no error;
//!   `loader compare` of the two says which is which.
//!
//! Traffic stays on 127.0.0.1; every run is bounded.

use loader_tests::common;

use std::process::Command;
use std::time::Duration;

use common::{Target, is_root, loader_bin, loader_run, out_dir, show};
use serde_json::Value;

/// `--no-probes` unless root: the verdict then judges the closed run with its probes too.
fn probes() -> Vec<&'static str> {
    if is_root() { vec![] } else { vec!["--no-probes"] }
}

fn run(name: &str, args: &[&str]) -> Value {
    run_in(name, args).1
}

/// [`run`], with the run's output directory.
fn run_in(name: &str, args: &[&str]) -> (std::path::PathBuf, Value) {
    let out = out_dir(name);
    let mut all: Vec<&str> = args.to_vec();
    all.extend(probes());
    let (output, summary) = loader_run(&all, &out, Duration::from_secs(90));
    (out, summary.unwrap_or_else(|| panic!("no summary.json\n{}", show(&output))))
}

fn phase<'a>(s: &'a Value, name: &str) -> &'a Value {
    s["phases"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("no {name}: {s}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn errors(p: &Value) -> u64 {
    p["errors"].as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum()
}

fn within(what: &str, got: f64, want: f64, pct: f64) {
    assert!((got - want).abs() <= want * pct / 100.0, "{what}: {got:.1} is not within {pct} % of {want:.1}");
}

#[test]
fn a_worker_pool_runs_at_n_over_r_plus_z_up_to_the_targets_capacity() {
    // Capacity C = 4 workers ÷ 20 ms = 200/s. 2 users thinking 20 ms: 2 ÷ (20 + 20 ms) = 50/s;
    // 20 users: 20 ÷ 40 ms = 500/s wanted, 200/s served.
    let target = Target::start(&["--workers", "4", "--delay", "20ms"]);
    let s = run(
        "closed-pool",
        &["--url", &target.url(), "--vus-steps", "2,20", "--think", "20ms", "--hold", "4s", "--warmup", "1s"],
    );
    let (light, full) = (phase(&s, "step 1"), phase(&s, "step 2"));
    eprintln!("step 1 {light}\nstep 2 {full}");
    within("step 1 ok/s against N ÷ (D + Z)", f(&light["ok_rps"]), 50.0, 5.0);
    within("step 2 ok/s against C", f(&full["ok_rps"]), 200.0, 5.0);
    // The law holds in each step with its own R, and latency runs from the send: 20 ms of
    // service alone, then the queue of 20 users at 200/s, N ÷ C − Z = 80 ms.
    for p in [light, full] {
        within("ok/s against its own N ÷ (R + Z)", f(&p["ok_rps"]), f(&p["closed"]["law_rps"]), 5.0);
        assert_eq!(errors(p), 0, "{p}");
    }
    assert!((19.5..30.0).contains(&f(&light["latency_ms"]["p50"])), "{light}");
    assert!((70.0..100.0).contains(&f(&full["latency_ms"]["p50"])), "{full}");
    assert_eq!(light["closed"]["users"], 2);
    assert_eq!(s["run"]["profile"], "closed");
    assert_eq!(s["run"]["arrival"], "closed");
    assert_eq!(s["run"]["closed"]["users_max"], 20);
    assert_eq!(s["run"]["connections"], 20, "one connection per user");
    // Offered is what the users would send at the lightest step's pace: step 2 wanted 500.
    within("step 2 offered", f(&full["offered_rps"]), 500.0, 5.0);
    assert_eq!(s["knee"]["step"], "step 1", "ok/s stopped following the users: {}", s["knee"]);
    assert_eq!(s["verdict"]["trusted"], true, "{}", s["verdict"]);

    // Exponential think times: 4 users, mean 30 ms, 20 ms answers: 4 ÷ 50 ms = 80/s.
    let s = run(
        "closed-exp",
        &["--url", &target.url(), "--vus", "4", "--think", "exp:30ms", "--duration", "5s", "--seed", "7"],
    );
    let main = phase(&s, "main");
    within("exponential think: ok/s", f(&main["ok_rps"]), 80.0, 10.0);
    assert_eq!(s["run"]["closed"]["think"], "exponential");
    assert_eq!(s["run"]["closed"]["seed"], 7);
}

#[test]
fn open_against_closed_at_the_same_nominal_steps_seed_002s_lab() {
    // C = 2 workers ÷ 10 ms = 200/s. Nominal 100, 200, 300/s: open at those rates; closed with
    // N ÷ (D + Z) the same, Z = 190 ms: 20, 40, 60 users. Timeouts of 1 s, no emergency stop.
    let target = Target::start(&["--workers", "2", "--delay", "10ms"]);
    let common =
        ["--url", &target.url(), "--hold", "4s", "--timeout", "1s", "--no-emergency-stop", "--connections", "300"];
    let mut open_args = common.to_vec();
    open_args.extend(["--steps", "100,200,300"]);
    let mut closed_args = common.to_vec();
    closed_args.extend(["--vus-steps", "20,40,60", "--think", "190ms"]);
    let (open_dir, open) = run_in("lab-open", &open_args);
    let (closed_dir, closed) = run_in("lab-closed", &closed_args);
    let (o3, c3) = (phase(&open, "step 3"), phase(&closed, "step 3"));
    eprintln!("open step 3 {o3}\nclosed step 3 {c3}");

    // The open run shows the queue: its backlog outgrows the 1 s timeout.
    let timeouts = o3["errors"]["timeout"].as_u64().unwrap_or(0) + o3["errors"]["dropped"].as_u64().unwrap_or(0);
    assert!(timeouts as f64 > 0.10 * f(&o3["requests"]), "open step 3: {timeouts} timeouts of {}", o3["requests"]);
    assert!(f(&o3["latency_ms"]["p95"]) >= 900.0, "{o3}");
    // The closed run hides it: no error, p95 of the users' wait (N ÷ C − Z = 110 ms), ok/s
    // the capacity — and the step still fails against what its users would have sent.
    assert_eq!(errors(c3), 0, "{c3}");
    assert!(f(&c3["latency_ms"]["p95"]) < 400.0, "{c3}");
    within("closed step 3 ok/s", f(&c3["ok_rps"]), 200.0, 5.0);
    within("closed step 1 ok/s", f(&phase(&closed, "step 1")["ok_rps"]), 100.0, 5.0);
    assert_eq!(c3["passed"], false, "{c3}");
    for name in ["step 1", "step 2", "step 3"] {
        let p = phase(&closed, name);
        within(&format!("closed {name}: ok/s against N ÷ (R + Z)"), f(&p["ok_rps"]), f(&p["closed"]["law_rps"]), 5.0);
        within(
            &format!("{name}: the same nominal load"),
            f(&p["offered_rps"]),
            f(&phase(&open, name)["offered_rps"]),
            5.0,
        );
    }
    assert_eq!(closed["verdict"]["trusted"], true, "{}", closed["verdict"]);
    // Little's law with the users' sends as λ: nothing was due and unsent in the closed run.
    for l in closed["analysis"]["little"].as_array().unwrap() {
        assert_eq!(l["findings"], serde_json::json!([]), "{l}");
    }
    assert_eq!(phase(&open, "step 1")["passed"], true);

    let output =
        Command::new(loader_bin()).arg("compare").args([&open_dir, &closed_dir]).output().expect("loader compare runs");
    let text = String::from_utf8_lossy(&output.stdout);
    eprintln!("{text}");
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(text.contains("A is an open run, B a closed one"), "{text}");
    assert!(text.contains("up to 60 users, think 190 ms (constant)"), "{text}");
    let row = text.lines().find(|l| l.starts_with("step 3")).unwrap_or_else(|| panic!("{text}"));
    assert!(row.contains("→0.00 −100 %"), "the closed run's errors went to none: {row}");
}
