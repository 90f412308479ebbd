//! A run spread over machines: `loader run --shard i/N --start-at T` on each, then
//! `loader merge`. Here the "machines" are local processes against the built-in target; the
//! truth is the one-machine run of the same plan and the union of the machines' histograms.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use loader_tests::common;

use common::{Hogs, Target, loader_bin, loader_run, out_dir, phase, wait_bounded};

const LIMIT: Duration = Duration::from_secs(60);
/// The kill switch's shared token.
const TOKEN: (&str, &str) = ("LOADER_CONTROL_TOKEN", "test-token-0123456789");

/// One sharded run at a time in this binary: four machines on a 2-core host are already
/// each other's neighbours.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `loader run ARGS --shard i/n --start-at at` as a child (`prefix` wraps it, e.g. taskset).
fn shard(prefix: &[&str], args: &[&str], i: usize, n: usize, at: &str, out: &Path) -> Child {
    let mut command = Command::new(prefix.first().copied().unwrap_or(loader_bin()));
    if !prefix.is_empty() {
        command.args(&prefix[1..]).arg(loader_bin());
    }
    command
        .env(TOKEN.0, TOKEN.1)
        .arg("run")
        .args(args)
        .args(["--shard", &format!("{i}/{n}"), "--start-at", at, "--preflight", "0s", "--plain", "--out"])
        .arg(out)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting loader run --shard")
}

/// A start instant `secs` from now, as `@UNIX_SECONDS`.
fn soon(secs: f64) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    format!("@{:.3}", now + secs)
}

fn merge(dirs: &[PathBuf], out: &Path) -> (Output, Option<serde_json::Value>) {
    let child = Command::new(loader_bin())
        .arg("merge")
        .args(dirs)
        .arg("--out")
        .arg(out)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting loader merge");
    let output = wait_bounded(child, LIMIT);
    let summary =
        std::fs::read_to_string(out.join("summary.json")).ok().map(|t| serde_json::from_str(&t).expect("JSON"));
    (output, summary)
}

/// A run or merge that went to its end: passed (0), untrusted (3) or gates failed (4). Which
/// of them is not what these tests are about (a 2-core host running four loaders is rarely
/// a clean one; the verdict may rightly say so).
fn complete(output: &Output) -> bool {
    matches!(output.status.code(), Some(0 | 3 | 4))
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

fn now_s() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

#[test]
fn loader_stop_silences_every_shard_within_200_ms() {
    let _turn = turn();
    let target = Target::start(&[]);
    let url = target.url();
    let dir = out_dir("distributed-stop");
    let ports: Vec<u16> =
        (0..4).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()).collect();
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let start = now_s() + 3.0;
    let at = format!("@{start:.3}");
    let children: Vec<(Child, PathBuf)> = addrs
        .iter()
        .enumerate()
        .map(|(i, addr)| {
            let out = dir.join(format!("shard-{i}"));
            let args = [
                "--url",
                &url,
                "--rate",
                "1000",
                "--duration",
                "30s",
                "--connections",
                "4",
                "--threads",
                "1",
                "--no-probes",
                "--control",
                addr,
            ];
            (shard(&[], &args, i, 4, &at, &out), out)
        })
        .collect();
    // Two seconds into the run, one command stops all four.
    std::thread::sleep(Duration::from_secs_f64((start + 2.0 - now_s()).max(0.0)));
    let asked = now_s();
    let stop = Command::new(loader_bin()).env(TOKEN.0, TOKEN.1).arg("stop").args(&addrs).output().expect("loader stop");
    assert_eq!(stop.status.code(), Some(0), "{}", common::show(&stop));
    assert_eq!(String::from_utf8_lossy(&stop.stdout).lines().filter(|l| l.contains(": stopping")).count(), 4);
    for (i, (child, out)) in children.into_iter().enumerate() {
        let output = wait_bounded(child, LIMIT);
        let text =
            std::fs::read_to_string(out.join("summary.json")).unwrap_or_else(|_| panic!("{}", common::show(&output)));
        let s: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(s["interrupted"], true, "shard {i}");
        assert_eq!(output.status.code(), Some(130), "shard {i}: interrupted exits 130: {}", common::show(&output));
        let last_send = s["run"]["zero_unix_s"].as_f64().unwrap() + s["run"]["last_send_s"].as_f64().unwrap();
        let silent_after_ms = (last_send - asked) * 1000.0;
        assert!(silent_after_ms < 200.0, "shard {i} sent {silent_after_ms:.0} ms after `loader stop`");
        let got = s["run"]["stop_requested_unix_s"].as_f64().expect("stop request recorded");
        assert!(got >= asked - 0.01 && got - asked < 0.2, "shard {i}: request at {got}, asked at {asked}");
        eprintln!("shard {i}: last send {silent_after_ms:.1} ms after the command");
    }
    // A wrong token stops nothing and says so.
    let wrong = Command::new(loader_bin())
        .env(TOKEN.0, "not-the-token-at-all")
        .args(["stop", "127.0.0.1:1"])
        .output()
        .expect("loader stop");
    assert_eq!(wrong.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&wrong.stderr).starts_with("loader: error: 127.0.0.1:1: cannot connect"));
}

fn run_shards(prefixes: &[&[&str]], args: &[&str], dir: &Path) -> Vec<PathBuf> {
    let at = soon(3.0);
    let count = prefixes.len();
    let dirs: Vec<PathBuf> = (0..count).map(|i| dir.join(format!("shard-{i}"))).collect();
    let children: Vec<Child> =
        prefixes.iter().enumerate().map(|(i, prefix)| shard(prefix, args, i, count, &at, &dirs[i])).collect();
    for (i, child) in children.into_iter().enumerate() {
        let output = wait_bounded(child, LIMIT);
        assert!(dirs[i].join("summary.json").exists(), "shard {i} wrote no summary: {}", common::show(&output));
    }
    dirs
}

#[test]
fn four_shards_send_the_one_machine_plan_and_merge_to_the_union() {
    let _turn = turn();
    let target = Target::start(&[]);
    let url = target.url();
    let dir = out_dir("distributed-four");
    let plan = [
        "--url",
        &url,
        "--profile",
        "step",
        "--steps",
        "800,1600",
        "--hold",
        "2s",
        "--connections",
        "8",
        "--threads",
        "1",
        "--no-probes",
    ];
    let dirs = run_shards(&[&[], &[], &[], &[]], &plan, &dir);
    let (output, merged) = merge(&dirs, &dir.join("merged"));
    assert!(complete(&output), "{}", common::show(&output));
    let merged = merged.expect("merged summary.json");
    // The one-machine run of the same plan.
    let (output, single) = loader_run(&plan, &dir.join("single"), LIMIT);
    assert!(complete(&output), "{}", common::show(&output));
    let single = single.expect("summary.json");

    let mut union_p99 = Vec::new();
    for name in ["step 1", "step 2"] {
        let (m, s) = (phase(&merged, name), phase(&single, name));
        // Planned and sent: the machines together are the one-machine plan, exactly.
        assert_eq!(n(&m["requests"]), n(&s["requests"]), "{name}");
        assert_eq!(n(&m["sent"]), n(&s["sent"]), "{name}");
        assert_eq!(m["offered_rps"], s["offered_rps"], "{name}");
        let shares: Vec<u64> = dirs
            .iter()
            .map(|d| {
                let text = std::fs::read_to_string(d.join("summary.json")).unwrap();
                n(&phase(&serde_json::from_str(&text).unwrap(), name)["requests"])
            })
            .collect();
        let whole = n(&s["requests"]);
        assert_eq!(shares.iter().sum::<u64>(), whole, "{name}: {shares:?}");
        assert!(shares.iter().all(|&k| k.abs_diff(whole / 4) <= 1), "{name}: {shares:?}");
        // The merged p99 is the union's: every machine's histogram added.
        let mut union: Option<_> = None;
        for d in &dirs {
            let hlog = loader::report::hdr::read(&d.join("latency.hlog")).expect("hlog");
            let h = hlog[&name.replace(' ', "_")].clone();
            match union.as_mut() {
                None => union = Some(h),
                Some(u) => u.add(&h).unwrap(),
            }
        }
        let union = union.unwrap();
        assert_eq!(union.len(), n(&m["latency_ms"]["count"]), "{name}");
        let p99 = union.value_at_quantile(0.99) as f64 / 1000.0;
        assert_eq!(m["latency_ms"]["p99"].as_f64().unwrap(), p99, "{name}");
        union_p99.push(p99);
    }
    // Per second, on the machines' shared clock: the offered counts are the one machine's.
    let offered = |s: &serde_json::Value| -> Vec<u64> {
        s["series"].as_array().unwrap().iter().map(|x| n(&x["offered"])).filter(|&o| o > 0).collect()
    };
    assert_eq!(offered(&merged), offered(&single));
    let shards = merged["merged"]["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 4);
    assert!(merged["merged"]["start_spread_ms"].as_f64().unwrap() < 1.0, "{}", merged["merged"]);
    // The merged interval log holds the union too.
    let hlog = loader::report::hdr::read(&dir.join("merged/latency.hlog")).expect("merged hlog");
    assert_eq!(hlog["step_2"].len(), n(&phase(&merged, "step 2")["latency_ms"]["count"]));
    eprintln!("union p99 per step: {union_p99:?}");
    // Three machines of four are not the run.
    let (output, partial) = merge(&dirs[..3], &dir.join("partial"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("shard 3/4 missing") && stderr.lines().count() == 1, "{stderr}");
    assert!(partial.is_none());
}

#[test]
fn a_starved_shard_makes_the_merge_untrusted_and_is_named() {
    // Busy loops at nice −10 need root (CI is root and never skips).
    if common::root_or_skip("a_starved_shard_makes_the_merge_untrusted_and_is_named").is_none() {
        return;
    }
    let _turn = turn();
    let target = common::target_via(&["taskset", "-c", "1"], "127.0.0.1:0", &[]);
    let url = target.url();
    let dir = out_dir("distributed-starved");
    // Shard 3 shares CPU 0 with two busy loops at nice −10 (ten times its CPU weight each);
    // the others have CPU 0 to themselves. Loops at nice 0 no longer starve it: its short
    // scheduler slice (engine/wakeup.rs) lets each wake-up preempt them, and at 500 req/s it
    // needs far less than its fair share — that run is rightly trusted.
    let mut hogs = Hogs::pinned(0, 2, -10);
    let plan = vec!["--url", &url, "--rate", "2000", "--duration", "3s", "--connections", "8", "--threads", "1"];
    let pin: &[&str] = &["taskset", "-c", "0"];
    let dirs = run_shards(&[&[], &[], &[], pin], &plan, &dir);
    assert!(hogs.alive(), "the busy loops died");
    drop(hogs);
    let (output, merged) = merge(&dirs, &dir.join("merged"));
    let merged = merged.expect("merged summary.json");
    assert_eq!(output.status.code(), Some(3), "untrusted exits 3: {}", common::show(&output));
    assert_eq!(merged["verdict"]["trusted"], false, "{}", merged["verdict"]);
    let named = merged["verdict"]["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["invalidates"] == true && r["detail"].as_str().unwrap().starts_with("shard 3/4:"));
    assert!(named, "no invalidating reason names shard 3/4: {}", merged["verdict"]);
    assert_eq!(merged["merged"]["shards"][3]["trusted"], false);
}

#[test]
fn shard_input_errors_are_one_line() {
    let _turn = turn();
    let dir = out_dir("distributed-errors");
    for (args, key) in [
        (["--shard", "4/4"], "--shard"),
        (["--shard", "1/0"], "--shard"),
        (["--shard", "a"], "--shard"),
        (["--start-at", "tomorrow"], "--start-at"),
    ] {
        let mut all = vec!["--url", "http://127.0.0.1:9/", "--rate", "10", "--duration", "1s", "--no-probes"];
        all.extend_from_slice(&args);
        common::assert_flag_error(&all, key, &dir.join("out"));
    }
    // A start instant already past is refused before anything is sent, in one line.
    let (output, summary) = loader_run(
        &[
            "--url",
            "http://127.0.0.1:9/",
            "--rate",
            "10",
            "--duration",
            "1s",
            "--no-probes",
            "--start-at",
            "@1000000000",
        ],
        &dir.join("past"),
        LIMIT,
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("loader: error: --start-at: 2001-09-09T01:46:40") && l.contains("had passed")),
        "{stderr}"
    );
    assert!(summary.is_none());
    // Merging what is not one sharded run.
    let lone = dir.join("lone");
    let target = Target::start(&[]);
    let url = target.url();
    let (output, _) = loader_run(&["--url", &url, "--rate", "50", "--duration", "1s", "--no-probes"], &lone, LIMIT);
    assert!(complete(&output), "{}", common::show(&output));
    let (output, merged) = merge(std::slice::from_ref(&lone), &dir.join("m"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("ran without --shard") && stderr.lines().count() == 1, "{stderr}");
    assert!(merged.is_none());
}
