//! Data-driven requests (`--data`, `--key-dist`, `--seed`) against a real nginx (from apt)
//! whose access log is the truth: which rows reached the server, how often, and filled
//! where (path, query, header, body).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use loader_tests::{common, nginx};

use common::{assert_flag_error, loader_run, out_dir};

const LIMIT: Duration = Duration::from_secs(60);

/// An nginx whose access log (`keys.log`) has one line per request: `FORMAT`.
fn logging_nginx(dir: &Path, format: &str) -> nginx::Nginx {
    let d = dir.join("nginx");
    let http = format!("log_format keys '{format}';");
    // Inside the server: `access_log off` at the http level holds for that level only.
    let server = format!(
        "access_log {}/keys.log keys;\n    location / {{ default_type text/plain; return 200 'ok'; }}",
        d.display()
    );
    nginx::start(&d, 100_000, &http, &server)
}

/// The access log's lines, then empties it (nginx appends: the next run starts afresh).
fn take_log(dir: &Path) -> Vec<String> {
    let path = dir.join("nginx/keys.log");
    let text = std::fs::read_to_string(&path).expect("nginx access log");
    std::fs::OpenOptions::new().write(true).truncate(true).open(&path).expect("truncate the log");
    text.lines().map(str::to_string).collect()
}

fn counts(lines: &[String]) -> BTreeMap<String, u64> {
    let mut c = BTreeMap::new();
    for l in lines {
        *c.entry(l.clone()).or_insert(0) += 1;
    }
    c
}

/// A run that went to its end (passed, or untrusted: the trust of a run on a busy 2-core host
/// is not what these tests are about; the keys it sent are).
fn run_ok(args: &[&str], out: &Path) -> serde_json::Value {
    let (output, summary) = loader_run(args, out, LIMIT);
    assert!(matches!(output.status.code(), Some(0 | 3)), "{}", common::show(&output));
    summary.expect("summary.json written")
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn zipf_keys_reach_the_server_as_the_law_says() {
    if !nginx::require() {
        return;
    }
    let dir = out_dir("data-zipf");
    std::fs::create_dir_all(&dir).unwrap();
    let nginx = logging_nginx(&dir, "$arg_id $arg_n");
    let csv: String =
        std::iter::once("id,name\n".to_string()).chain((1..=100_000).map(|i| format!("{i},item{i}\n"))).collect();
    std::fs::write(dir.join("keys.csv"), csv).unwrap();
    let url = format!("http://127.0.0.1:{}/items/{{{{id}}}}?id={{{{id}}}}&n={{{{name}}}}", nginx.port);
    let data = dir.join("keys.csv");
    let s = run_ok(
        &[
            "--url",
            &url,
            "--data",
            data.to_str().unwrap(),
            "--key-dist",
            "zipf:1.1",
            "--seed",
            "11",
            "--rate",
            "5000",
            "--duration",
            "4s",
            "--connections",
            "16",
            "--no-probes",
        ],
        &dir.join("out"),
    );
    let lines = take_log(&dir);
    let d = &s["data"];
    // Every send reached nginx with its row's values, in the path's query and together.
    assert_eq!(lines.len() as u64, n(&d["sent"]), "{d}");
    assert_eq!(lines.len(), 20_000);
    assert!(lines.iter().all(|l| l.split_once(' ').is_some_and(|(id, name)| name == format!("item{id}"))));
    let ids = counts(&lines.iter().map(|l| l.split(' ').next().unwrap().to_string()).collect::<Vec<_>>());
    // The summary's figures are the server's.
    assert_eq!(ids.len() as u64, n(&d["distinct_sent"]), "{d}");
    let hottest = ids.iter().max_by_key(|&(_, c)| *c).unwrap();
    assert_eq!((hottest.0.as_str(), d["hottest_key"].as_str().unwrap()), ("1", "1"), "{d}");
    let share = *hottest.1 as f64 / lines.len() as f64;
    assert!((share - d["hottest_share"].as_f64().unwrap()).abs() < 1e-9, "{share} vs {d}");
    // The law: rank k's share is k^-1.1 / H(100000, 1.1), H ≈ 7.42 (the hottest ≈ 13.5 %).
    let h: f64 = (1..=100_000).map(|k| (k as f64).powf(-1.1)).sum();
    assert!((d["expected_hottest_share"].as_f64().unwrap() - 1.0 / h).abs() < 1e-9, "{d}");
    for rank in 1..=3u32 {
        let want = f64::from(rank).powf(-1.1) / h;
        let got = ids[&rank.to_string()] as f64 / lines.len() as f64;
        assert!((got / want - 1.0).abs() < 0.1, "rank {rank}: {got:.4} of sends, the law says {want:.4}");
    }
}

#[test]
fn the_same_seed_sends_the_same_keys_whatever_the_threads() {
    if !nginx::require() {
        return;
    }
    let dir = out_dir("data-seed");
    std::fs::create_dir_all(&dir).unwrap();
    let nginx = logging_nginx(&dir, "$uri");
    let csv: String = std::iter::once("k\n".to_string()).chain((0..1000).map(|i| format!("k{i}\n"))).collect();
    std::fs::write(dir.join("k.csv"), csv).unwrap();
    let url = format!("http://127.0.0.1:{}/{{{{k}}}}", nginx.port);
    let data = dir.join("k.csv");
    let mut sent = Vec::new();
    for (i, (threads, seed)) in [("1", "5"), ("2", "5"), ("2", "6")].into_iter().enumerate() {
        let s = run_ok(
            &[
                "--url",
                &url,
                "--data",
                data.to_str().unwrap(),
                "--key-dist",
                "uniform",
                "--seed",
                seed,
                "--rate",
                "2000",
                "--duration",
                "2s",
                "--threads",
                threads,
                "--connections",
                "8",
                "--no-probes",
            ],
            &dir.join(format!("out{i}")),
        );
        assert_eq!(n(&s["data"]["seed"]), seed.parse::<u64>().unwrap());
        sent.push(counts(&take_log(&dir)));
    }
    assert_eq!(sent[0].values().sum::<u64>(), 4000);
    assert_eq!(sent[0], sent[1], "seed 5 on one shard and on two sent different keys");
    assert_ne!(sent[1], sent[2], "seeds 5 and 6 sent the same keys");
    // Uniform over 1000 rows: 4000 sends reach most of them, none very often.
    assert!(sent[0].len() > 950 && sent[0].values().all(|&c| c < 20), "{} distinct", sent[0].len());
}

#[test]
fn ndjson_rows_fill_path_header_and_body_in_sequence_from_a_scenario_file() {
    if !nginx::require() {
        return;
    }
    let dir = out_dir("data-ndjson");
    std::fs::create_dir_all(dir.join("scn")).unwrap();
    let nginx = logging_nginx(&dir, "$uri $http_x_token $content_length");
    let rows: String =
        (1..=5).map(|i| format!("{{\"user\": \"u{i}\", \"token\": \"tok-{i}\", \"n\": {i}}}\n")).collect();
    std::fs::write(dir.join("scn/users.ndjson"), rows).unwrap();
    // The data file is named relative to the scenario file, not to the working directory.
    let scenario = format!(
        "[target]\nurl = \"http://127.0.0.1:{}/\"\nconnections = 4\n[profile]\nkind = \"constant\"\nrate = 500\nduration = \"1s\"\n\
         [data]\nfile = \"users.ndjson\"\ndist = \"seq\"\n\
         [[request]]\nmethod = \"POST\"\npath = \"/users/{{{{user}}}}\"\nheaders = {{ X-Token = \"{{{{token}}}}\" }}\nbody = '{{\"n\": {{{{n}}}}}}'\n",
        nginx.port
    );
    let file = dir.join("scn/s.toml");
    std::fs::write(&file, scenario).unwrap();
    let s = run_ok(&[file.to_str().unwrap(), "--no-probes"], &dir.join("out"));
    let lines = take_log(&dir);
    assert_eq!(lines.len(), 500, "{}", s["data"]);
    for l in &lines {
        let f: Vec<&str> = l.split(' ').collect();
        let i = f[0].strip_prefix("/users/u").unwrap_or_else(|| panic!("{l}"));
        assert_eq!(
            (f[1], f[2]),
            (format!("tok-{i}").as_str(), format!("{{\"n\": {i}}}").len().to_string().as_str()),
            "{l}"
        );
    }
    // In sequence: each of the 5 rows exactly a fifth of the sends.
    let users = counts(&lines.iter().map(|l| l.split(' ').next().unwrap().to_string()).collect::<Vec<_>>());
    assert_eq!(users.values().copied().collect::<Vec<_>>(), [100; 5], "{users:?}");
    assert_eq!((n(&s["data"]["distinct_sent"]), s["data"]["distribution"].as_str()), (5, Some("seq")));
}

#[test]
fn bad_data_input_is_one_line_naming_the_problem() {
    let dir = out_dir("data-errors");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("k.csv"), "id\n1\na b\n").unwrap();
    let data = dir.join("k.csv").to_str().unwrap().to_string();
    let absent = dir.join("absent.csv").to_str().unwrap().to_string();
    let check = |url: &str, extra: &[&str], key: &str| {
        let mut args = vec!["--url", url, "--rate", "10", "--duration", "1s", "--no-probes"];
        args.extend_from_slice(extra);
        assert_flag_error(&args, key, &dir.join("out"));
    };
    let url = "http://127.0.0.1:9/x/{{id}}";
    check(url, &["--key-dist", "zipf:1.1"], "--key-dist");
    check(url, &["--seed", "3"], "--seed");
    check(url, &["--data", &data, "--key-dist", "zipf:-1"], "--key-dist");
    check(url, &["--data", &absent], "--data");
    // Row 2 holds a space, which cannot go into a path.
    check(url, &["--data", &data], &format!("{data} row 2"));
    // A placeholder naming no column.
    check("http://127.0.0.1:9/x/{{sku}}", &["--data", &data], "request \"GET /x/{{sku}}\"");
    // A data file that no request uses.
    check("http://127.0.0.1:9/x", &["--data", &data], &data);
}
