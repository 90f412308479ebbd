//! The built-in demo — `loader run` with neither URL nor file, what `cargo xtask demo` runs:
//! its target of known capacity (9 workers × 20 ms = 450 req/s) stepped past it (100 … 600
//! req/s), the knee found and explained by the watched pool, the cliff, the verdict and
//! where the rest is — in one screen.
//!
//! As root the probes load and judge it; otherwise it runs with `--no-probes` (the demo's own
//! fallback) and the same is asserted of its numbers.

use loader_tests::common;

use std::time::Duration;

use common::{loader_run, out_dir, phase};

/// Lines of a terminal the demo's report must fit in, progress lines aside (on a terminal
/// they are one line that rewrites itself).
const SCREEN: usize = 50;

#[test]
fn the_demo_finds_its_targets_knee_says_why_and_fits_one_screen() {
    let out = out_dir("demo");
    let args: &[&str] = if common::is_root() { &[] } else { &["--no-probes"] };
    let (output, summary) = loader_run(args, &out, Duration::from_secs(120));
    // Steps past the knee fail their SLO: the gates' exit (4), the demo's point.
    let s = common::complete_run("demo", &output, &summary, &[4]);
    let stdout = String::from_utf8_lossy(&output.stdout);

    // The plan: the target's capacity, the steps past it, the SLO and the watched pool.
    assert_eq!(s["run"]["profile"], "step");
    let offered: Vec<f64> = (1..=6).map(|k| phase(s, &format!("step {k}"))["offered_rps"].as_f64().unwrap()).collect();
    assert_eq!(offered, [100.0, 200.0, 300.0, 400.0, 500.0, 600.0]);
    let watch = &s["watch"];
    assert_eq!(watch["sources"][0]["name"], "workers", "{watch}");

    // Below its 450 req/s the target keeps up; above it, it cannot. The knee is 400 req/s —
    // or 300 when a spell of the host's spoiled step 4 (the verdict then says which steps).
    let knee = s["knee"]["rps"].as_f64().unwrap_or_else(|| panic!("no knee: {}", s["analysis"]));
    assert!(knee == 400.0 || knee == 300.0, "knee {knee}: {}", s["analysis"]);
    let ok5 = phase(s, "step 5")["ok_rps"].as_f64().unwrap();
    assert!(ok5 <= 450.0 * 1.05, "step 5 served {ok5}/s, above the target's 450/s");
    // The knee comes with its cause: the pool at its ceiling.
    assert_eq!(watch["knee_resource"], "workers", "{}", watch["knee"]);
    let why = watch["knee"].as_str().unwrap_or_default();
    assert!(why.contains("workers reached its ceiling"), "{why}");
    // And past it, the cliff: the queue outgrew the 1 s timeout.
    let cliff = s["cliff"]["rps"].as_f64();
    assert!(cliff.is_some_and(|c| c >= 500.0), "cliff {cliff:?}: {}", s["analysis"]);

    // One screen: the report after the progress lines, verdict first, the knee named with its
    // cause, the next step last.
    let report: Vec<&str> = stdout.lines().filter(|l| !l.starts_with('[')).collect();
    assert!(report.len() <= SCREEN, "{} lines, more than {SCREEN}:\n{stdout}", report.len());
    let at = |what: &str| report.iter().position(|l| l.starts_with(what));
    let verdict = at("VERDICT: ").unwrap_or_else(|| panic!("no verdict:\n{stdout}"));
    let knee_line = at("knee (SLO):").unwrap_or_else(|| panic!("no knee line:\n{stdout}"));
    assert!(verdict < knee_line, "the verdict comes first:\n{stdout}");
    assert!(report[knee_line].contains(&format!("{knee:.0} req/s")), "{}", report[knee_line]);
    assert!(report.iter().any(|l| l.contains("workers reached its ceiling")), "{stdout}");
    assert!(report.iter().any(|l| l.starts_with("cliff:") && !l.contains("none")), "{stdout}");
    assert!(report.last().is_some_and(|l| l.starts_with("next: ")), "{stdout}");
    // At a glance: no reason runs past one line of its own, and no alarm that says nothing.
    let reasons = report.iter().skip(verdict + 1).take_while(|l| l.starts_with("  ")).count();
    assert!(reasons <= 4, "at most 3 reasons and the pointer to the rest:\n{stdout}");
    for line in &report {
        assert!(line.chars().count() <= 300, "a line of {} characters: {line}", line.chars().count());
        assert!(!line.contains("LOST EVENTS") && !line.starts_with("few tail samples"), "{line}");
    }
}
