//! Issue 12's HTML report end to end: a short stepped run against a target of known
//! capacity writes `report.html` next to `summary.json`; `loader report DIR` renders the same
//! bytes again and refuses bad input in one line; and headless Chromium (the Debian
//! `chromium` package) opens the page offline: the verdict, the step table with its knee
//! and the charts are in the DOM, the verdict fits the first screen, no script failed,
//! nothing was fetched, and the screenshot is a drawn page, not a blank one.
//!
//! Chromium is required as root and under CI (`CI=true`; `cargo xtask setup` installs it);
//! elsewhere a missing `chromium` skips the browser checks with a printed reason. Every wait
//! is bounded; traffic stays on 127.0.0.1.

use loader_tests::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use common::{Target, loader_bin, loader_run, out_dir, tmp_dir, wait_bounded};

/// The first screen of the browser window the page is checked in.
const WINDOW: (u32, u32) = (1280, 900);

/// One stepped run shared by the tests: 200, 400 and 800 req/s against a target that serves
/// 500 (1 worker, 2 ms a request), so the knee lies inside the run. The knee is found only on
/// steps the verdict trusts, and the page's knee is a subject here: a run the verdict calls
/// untrusted (a busy host — CI once had sends 39 ms late at 200 req/s) is said, with its
/// reasons, and made again, [`RUN_ATTEMPTS`] times at most; the last one is kept either way.
fn run_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let target = Target::start(&["--workers", "1", "--delay", "2ms"]);
        let mut attempt = 1;
        loop {
            let out = out_dir(&format!("report-html-{attempt}"));
            let (output, summary) = loader_run(
                &[
                    "--url",
                    &target.url(),
                    "--profile",
                    "step",
                    "--steps",
                    "200,400,800",
                    "--hold",
                    "2s",
                    "--ramp",
                    "500ms",
                    "--warmup",
                    "1s",
                    "--timeout",
                    "2s",
                    "--no-probes",
                ],
                &out,
                Duration::from_secs(90),
            );
            let stdout = String::from_utf8_lossy(&output.stdout);
            let stderr = String::from_utf8_lossy(&output.stderr);
            // Trusted with failed gates (4) is expected; passed (0) or untrusted (3, a busy host)
            // still make a report. Anything else is a failed run.
            assert!(matches!(output.status.code(), Some(0 | 3 | 4)), "{:?}\n{stdout}\n{stderr}", output.status);
            let summary = summary.unwrap_or_else(|| panic!("no summary.json: {stdout}\n{stderr}"));
            assert!(stdout.contains(&format!("report: {}", out.join("report.html").display())), "{stdout}");
            if summary["verdict"]["trusted"] == true || attempt == RUN_ATTEMPTS {
                return out;
            }
            eprintln!("report-html run {attempt}: untrusted, made again:\n{}", common::invalidating_reasons(&summary));
            attempt += 1;
        }
    })
}

/// Runs made at most for [`run_dir`].
const RUN_ATTEMPTS: u32 = 3;

fn summary() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(run_dir().join("summary.json")).expect("summary.json"))
        .expect("summary.json is JSON")
}

fn report_bytes() -> Vec<u8> {
    std::fs::read(run_dir().join("report.html")).expect("report.html next to summary.json")
}

/// `loader report ARGS` (bounded): status, stdout, stderr.
fn loader_report(args: &[&str]) -> (Option<i32>, String, String) {
    let child = Command::new(loader_bin())
        .arg("report")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting loader report");
    let output = wait_bounded(child, Duration::from_secs(30));
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn every_run_writes_a_small_self_contained_report() {
    let bytes = report_bytes();
    println!("report.html: {} bytes", bytes.len());
    assert!(bytes.len() < 1_000_000, "{} bytes", bytes.len());
    let page = String::from_utf8(bytes).expect("UTF-8");
    assert!(page.contains(
        r#"<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">"#
    ));
    let lower = page.to_ascii_lowercase();
    for fetch in ["src=\"http", "href=\"http", "src='http", "href='http", "src=http", "href=http", "url(", "@import"] {
        assert!(!lower.contains(fetch), "the page refers to something outside itself: {fetch}");
    }
    let s = summary();
    let knee = s["knee"]["step"]
        .as_str()
        .unwrap_or_else(|| panic!("a 500 req/s target stepped to 800 has a knee: {}", s["phases"]));
    // The knee is marked on its own row of the step table.
    let row =
        page.split("<tr").find(|r| r.contains(r#"<span class="badge knee">knee</span>"#)).expect("a row marked knee");
    assert!(row.contains(&format!("<td>{knee} ")), "knee row {row}");
    // The per-second latency chart is drawn from the run's own series.
    assert!(s["series"].as_array().expect("series").iter().any(|x| x["latency_ms"]["p99"].is_number()));
    assert!(page.contains("completed each second"));
    // The metadata says how the run was started and where: the command line and the machine.
    let args: Vec<&str> =
        s["run"]["command_line"].as_array().expect("run.command_line").iter().filter_map(|a| a.as_str()).collect();
    assert!(args.get(1) == Some(&"run") && args.contains(&"--steps"), "{args:?}");
    assert!(page.contains("<code>") && page.contains(" run --url "), "the command line is shown");
    let kernel = s["machine"]["kernel"].as_str().expect("machine.kernel");
    assert!(s["machine"]["cores"].as_u64().is_some_and(|c| c >= 1), "{}", s["machine"]);
    assert!(page.contains(&format!("kernel {kernel}")), "the machine is shown");
}

#[test]
fn loader_report_renders_the_same_page_again() {
    let before = report_bytes();
    let copy = tmp_dir().join("runs/report-html-again");
    let _ = std::fs::remove_dir_all(&copy);
    std::fs::create_dir_all(copy.join("hgrm")).expect("mkdir");
    std::fs::copy(run_dir().join("summary.json"), copy.join("summary.json")).expect("copy summary");
    for entry in std::fs::read_dir(run_dir().join("hgrm")).expect("hgrm/ written by the run") {
        let path = entry.expect("entry").path();
        std::fs::copy(&path, copy.join("hgrm").join(path.file_name().expect("a name"))).expect("copy hgrm");
    }
    let (code, stdout, stderr) = loader_report(&[copy.to_str().expect("UTF-8")]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("report.html"), "{stdout}");
    let after = std::fs::read(copy.join("report.html")).expect("report.html rendered");
    assert!(before == after, "loader report DIR renders other bytes than the run wrote");
    // In place, too.
    let (code, _, stderr) = loader_report(&[run_dir().to_str().expect("UTF-8")]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(report_bytes() == before);
}

#[test]
fn bad_input_is_one_line_and_exit_1() {
    let base = tmp_dir().join("runs/report-html-bad");
    let _ = std::fs::remove_dir_all(&base);
    let empty = base.join("empty");
    let garbage = base.join("garbage");
    let foreign = base.join("foreign");
    for dir in [&empty, &garbage, &foreign] {
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    std::fs::write(garbage.join("summary.json"), "{ not json").expect("write");
    std::fs::write(foreign.join("summary.json"), r#"{"schema": "something/else"}"#).expect("write");
    let missing = base.join("no-such-dir");
    for (dir, says) in [
        (&missing, "no such directory"),
        (&empty, "cannot read"),
        (&garbage, "is not a loader summary"),
        (&foreign, "is not a loader summary"),
    ] {
        let (code, _, stderr) = loader_report(&[dir.to_str().expect("UTF-8")]);
        assert_eq!(code, Some(1), "{}: {stderr}", dir.display());
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(stderr.starts_with("loader: error: ") && stderr.contains(says), "{}: {stderr}", dir.display());
        assert!(!dir.join("report.html").exists());
    }
}

/// The `chromium` binary, or `None` (after saying why) where a skip is allowed: not root
/// and not CI.
fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("chromium"))
        .find(|p| p.is_file());
    if found.is_some() {
        return found;
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    assert!(
        !ci && !common::is_root(),
        "chromium is not installed (apt-get install chromium, or cargo xtask setup): the HTML report cannot be checked in a browser"
    );
    eprintln!("skipping the browser checks: no chromium on PATH (not root, not CI)");
    None
}

/// Headless Chromium on `page` with `extra` flags: (stdout, stderr), bounded.
fn headless(bin: &Path, page: &Path, profile: &str, extra: &[&str]) -> (String, String) {
    let profile = tmp_dir().join(format!("chromium-{profile}"));
    let _ = std::fs::remove_dir_all(&profile);
    let child = Command::new(bin)
        .args(["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars"])
        .arg(format!("--window-size={},{}", WINDOW.0, WINDOW.1))
        .args(["--virtual-time-budget=2000", "--enable-logging=stderr", "--v=0"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting chromium");
    let output = wait_bounded(child, Duration::from_secs(90));
    let (stdout, stderr) =
        (String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned());
    assert!(output.status.success(), "chromium failed: {:?}\n{stderr}", output.status);
    let _ = std::fs::remove_dir_all(&profile);
    (stdout, stderr)
}

/// Console errors, uncaught exceptions and refused loads in Chromium's log.
fn browser_errors(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| {
            l.contains("Uncaught")
                || l.contains("Refused to")
                || l.contains("Content Security Policy")
                || (l.contains(":CONSOLE") && l.contains("ERROR"))
                || l.contains("net::ERR_")
        })
        .collect()
}

/// The value of `data-NAME="…"` on the body in a dumped DOM.
fn data_attribute<'a>(dom: &'a str, name: &str) -> Option<&'a str> {
    let start = dom.find(&format!("data-{name}=\""))? + name.len() + 7;
    dom[start..].split('"').next()
}

#[test]
fn chromium_shows_the_verdict_first_and_runs_clean() {
    let Some(bin) = chromium() else { return };
    let page = run_dir().join("report.html");
    let (dom, stderr) = headless(&bin, &page, "dom", &["--dump-dom"]);
    assert!(dom.contains(r#"id="verdict""#) && dom.contains("Verdict:"), "{dom}");
    assert!(dom.contains(r#"id="steps""#), "step table");
    assert!(dom.contains(r#"class="badge knee""#), "knee marked");
    assert!(dom.matches("<svg").count() >= 4, "charts: {}", dom.matches("<svg").count());
    assert_eq!(data_attribute(&dom, "scripts-ran"), Some("yes"), "the page's scripts ran");
    assert_eq!(data_attribute(&dom, "js-errors"), None, "script errors recorded by window.onerror");
    let bottom: f64 = data_attribute(&dom, "verdict-bottom").expect("the layout check ran").parse().expect("a number");
    assert!(bottom > 0.0 && bottom <= f64::from(WINDOW.1), "the verdict ends at {bottom}px, below the first screen");
    let errors = browser_errors(&stderr);
    assert!(errors.is_empty(), "browser errors: {errors:#?}");
}

#[test]
fn chromium_screenshot_is_a_drawn_page() {
    let Some(bin) = chromium() else { return };
    let page = run_dir().join("report.html");
    let shot = tmp_dir().join("runs/report-html.png");
    let _ = std::fs::remove_file(&shot);
    let (_, stderr) = headless(&bin, &page, "shot", &[&format!("--screenshot={}", shot.display())]);
    let errors = browser_errors(&stderr);
    assert!(errors.is_empty(), "browser errors: {errors:#?}");
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).expect("the screenshot")));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("a bounded image")];
    let frame = reader.next_frame(&mut buf).expect("a frame");
    let (width, height) = (frame.width, frame.height);
    assert_eq!((width, height), WINDOW, "the window's size");
    let channels = frame.color_type.samples();
    assert!(channels >= 3 && frame.bit_depth == png::BitDepth::Eight, "{:?} {:?}", frame.color_type, frame.bit_depth);
    let pixels: Vec<&[u8]> = buf[..frame.buffer_size()].chunks(channels).map(|p| &p[..3]).collect();
    let background = pixels[0];
    let drawn = pixels.iter().filter(|p| **p != background).count();
    let colours: std::collections::BTreeSet<&[u8]> = pixels.iter().copied().collect();
    println!(
        "screenshot: {} distinct colours, {:.1}% of pixels off the background",
        colours.len(),
        100.0 * drawn as f64 / pixels.len() as f64
    );
    assert!(colours.len() >= 32, "{} distinct colours: a blank or near-blank page", colours.len());
    assert!(drawn * 20 >= pixels.len(), "only {drawn} of {} pixels drawn", pixels.len());
}
