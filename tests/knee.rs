//! Issue 4's acceptance: against targets of known capacity (`loader target --workers N
//! --delay D`, capacity N/D), a stepped run finds the knee within one step of that capacity,
//! in every one of 3 repeats, at several N/D pairs.

use loader_tests::common;

use std::time::Duration;

use common::{Target, loader_run, out_dir};

fn knee_of_three_repeats(workers: u32, delay_ms: u32, steps: &str, step: f64) {
    let capacity = f64::from(workers) * 1000.0 / f64::from(delay_ms);
    let target = Target::start(&["--workers", &workers.to_string(), "--delay", &format!("{delay_ms}ms")]);
    let name = format!("knee-{workers}x{delay_ms}");
    // A knee needs the steps below capacity to pass, and on this VM a spell of the host's
    // steal can starve the built-in target beside the loader (CI: latency p99 75 ms at half
    // its capacity, every repeat untrusted for send lag the host explained, no knee found).
    // The verdict says so; such a run is made once more after a quiet second of the host,
    // and the second is judged whatever it says. A trusted run that misses gets no retry.
    for attempt in 1..=2 {
        let out = out_dir(&name);
        let junit = out.with_extension("junit.xml");
        let _ = std::fs::remove_file(&junit);
        let (output, summary) = loader_run(
            &[
                "--url",
                &target.url(),
                "--profile",
                "step",
                "--steps",
                steps,
                "--hold",
                "3s",
                "--ramp",
                "500ms",
                "--warmup",
                "1s",
                "--timeout",
                "2s",
                "--repeat",
                "3",
                "--no-probes",
                "--junit",
                junit.to_str().expect("a UTF-8 path"),
            ],
            &out,
            Duration::from_secs(240),
        );
        // Steps above capacity fail their gates: exit 4 on trusted data. The subject here is
        // where the knee is, not trust: a repeat the verdict found untrusted (exit 3; on this
        // VM, the host's steal) still has to find it, and says why (an earlier repeat named
        // by run).
        let s = common::complete_run(&name, &output, &summary, &[4]);
        let knees = s["capacity"]["knees"].as_array().expect("three knees");
        assert_eq!(knees.len(), 3, "{}", s["capacity"]);
        let found = knees.iter().all(|k| k.as_f64().is_some_and(|k| (k - capacity).abs() <= step + 1e-9));
        if !found && attempt == 1 && s["verdict"]["trusted"] == false {
            let stolen = common::wait_for_a_quiet_host();
            eprintln!(
                "{name}: knees {} with the run untrusted (above): once more (steal in the last second waited: {stolen} ms)",
                s["capacity"]["knees"]
            );
            continue;
        }
        for k in knees {
            let k = k.as_f64().unwrap_or_else(|| panic!("a run found no knee: {}", s["capacity"]));
            assert!(
                (k - capacity).abs() <= step + 1e-9,
                "knee {k} not within one step ({step}) of capacity {capacity}"
            );
        }
        // Five steps are too few for the USL (six needed): it says so rather than fit.
        let usl = s["analysis"]["usl"]["detail"].as_str().unwrap_or_default();
        assert!(usl.starts_with("USL not fitted:") && usl.contains("6 needed"), "{}", s["analysis"]["usl"]);
        let max = s["capacity"]["max_sustainable"].as_f64().unwrap();
        assert!((max - capacity).abs() <= step + 1e-9);
        junit_matches_the_steps(&junit, s);
        return;
    }
}

/// The JUnit export, read by a real XML parser: one test case per judged step of the (last)
/// run plus the verdict's, failures exactly where the summary's steps failed.
fn junit_matches_the_steps(junit: &std::path::Path, s: &serde_json::Value) {
    let script = "import sys, xml.etree.ElementTree as E\n\
        r = E.parse(sys.argv[1]).getroot()\n\
        for c in r.iter('testcase'):\n\
        \x20   print(c.get('classname'), 'FAIL' if c.find('failure') is not None else 'PASS', c.get('name'))";
    let out = std::process::Command::new("python3").args(["-c", script]).arg(junit).output().expect("python3 runs");
    assert!(out.status.success(), "junit.xml does not parse: {}", String::from_utf8_lossy(&out.stderr));
    let listed = String::from_utf8_lossy(&out.stdout);
    let expected: Vec<String> = s["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .filter(|p| !p["passed"].is_null())
        .map(|p| {
            let verdict = if p["passed"] == true { "PASS" } else { "FAIL" };
            format!(
                "loader.steps {verdict} {} @ {:.0}/s",
                p["name"].as_str().unwrap(),
                p["offered_rps"].as_f64().unwrap()
            )
        })
        .chain(std::iter::once(format!(
            "loader.verdict {} the numbers can be trusted",
            if s["verdict"]["trusted"] == true { "PASS" } else { "FAIL" }
        )))
        .collect();
    assert!(expected.iter().any(|l| l.contains(" FAIL ")), "a step above capacity failed: {expected:?}");
    assert_eq!(listed.lines().collect::<Vec<_>>(), expected, "{}", std::fs::read_to_string(junit).unwrap());
}

#[test]
fn knee_at_100_per_second_two_workers_20ms() {
    knee_of_three_repeats(2, 20, "50,75,100,125,150", 25.0);
}

#[test]
fn knee_at_800_per_second_eight_workers_10ms() {
    knee_of_three_repeats(8, 10, "400,600,800,1000,1200", 200.0);
}

/// A spike past capacity (4 × 10 ms = 400/s) leaves a backlog; the recovery phase reports
/// when the target served the base rate cleanly again — after the backlog drained, not at
/// once.
#[test]
fn spike_reports_time_to_recover() {
    let target = Target::start(&["--workers", "4", "--delay", "10ms"]);
    let out = out_dir("spike");
    let (output, summary) = loader_run(
        &[
            "--url",
            &target.url(),
            "--profile",
            "spike",
            "--rate",
            "100",
            "--peak-rate",
            "700",
            "--duration",
            "8s",
            "--hold",
            "2s",
            "--ramp",
            "500ms",
            "--no-emergency-stop",
            "--no-probes",
            "--preflight",
            "0s",
        ],
        &out,
        Duration::from_secs(60),
    );
    let s = common::complete_run("spike", &output, &summary, &[0, 4]);
    let spike = &s["analysis"]["spike"];
    let t = spike["time_to_recover_s"].as_u64().unwrap_or_else(|| panic!("never recovered: {spike}"));
    assert!((1..=6).contains(&t), "recovered after {t} s: {spike}");
    assert!(spike["peak_p99_ms"].as_f64().unwrap() > 10.0 * spike["base_p99_ms"].as_f64().unwrap(), "{spike}");
}
