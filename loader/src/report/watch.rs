//! The watched target resources in the terminal: per step, each source's CPU (mean/max
//! cores), pressure, CPU per ok answer and the ceiling it implies, a gauge against its limit;
//! the knee explained; and the seconds around the knee one by one (the breakpoint seed's
//! "persec" view: done/s, p50/p99, each source).

use std::fmt::Write as _;

use crate::analysis::render::Detail;
use crate::summary::{Summary, WatchSource, WatchStep, WatchSummary};

/// The section, or nothing when nothing was watched; at a glance without the seconds around
/// the knee one by one.
pub fn render(s: &Summary, detail: Detail) -> String {
    let Some(w) = &s.watch else { return String::new() };
    let mut out = String::new();
    let _ =
        writeln!(out, "\ntarget resources (watched each second; step figures over its settled seconds){}", sampling(w));
    for src in &w.sources {
        let on = src.cpus.as_ref().map_or(String::new(), |c| format!(" on CPU {c}"));
        let limit = src.limit.map_or(String::new(), |l| {
            if is_cpu(src) { format!(", ceiling {l:.2} cores{on}") } else { format!(", limit {l}") }
        });
        let missing = if src.missing_s > 0 {
            format!(", missing {} s ({})", src.missing_s, src.last_error.as_deref().unwrap_or("?"))
        } else {
            String::new()
        };
        let unreached =
            src.unreached_at_start.as_ref().map_or(String::new(), |_| ", not reached before the run".into());
        let queued = match src.queued_s {
            0 => String::new(),
            n => format!(", its scrape waited for a worker {n} s (read as the pool at its limit)"),
        };
        let metric = src.metric.as_ref().map_or(String::new(), |m| {
            let per = match (src.idle, src.rate) {
                (true, _) => " idle → busy cores",
                (false, true) => " /s",
                _ => "",
            };
            let own = src.scrape_self.map_or(String::new(), |n| format!(" less the scrape's own {n}"));
            format!(" {m}{per}{own}")
        });
        let _ = writeln!(out, "  {}: {}{metric}{limit}{missing}{unreached}{queued}", src.name, src.source);
    }
    let mut header = vec!["step".to_string(), "offered/s".into(), "ok/s".into()];
    for src in &w.sources {
        match src.kind.as_str() {
            _ if is_cpu(src) && src.kind != "cgroup" => {
                header.extend([format!("{} cores", src.name), "ms/ok".into(), "ceiling/s".into()])
            }
            "prometheus" => header.push(format!("{} mean/max", src.name)),
            "cgroup" => {
                header.extend([format!("{} cores", src.name), "psi some".into(), "ms/ok".into(), "ceiling/s".into()])
            }
            _ => header.extend([format!("{} cores", src.name), "ms/ok".into(), "ceiling/s".into()]),
        }
    }
    let mut rows = vec![header];
    for p in s.phases.iter().filter(|p| !p.watch.is_empty()) {
        let mut row = vec![p.name.clone(), format!("{:.0}", p.offered_rps), format!("{:.1}", p.ok_rps)];
        for src in &w.sources {
            let st = p.watch.get(&src.name);
            let mark = st.and_then(|st| st.saturated.as_ref()).map_or("", |_| " *");
            match src.kind.as_str() {
                _ if !is_cpu(src) => row.push(format!("{}{mark}", pair(st, |v| v.value, 1))),
                kind => {
                    row.push(format!("{}{mark}", pair(st, |v| v.cpu_cores, 2)));
                    if kind == "cgroup" {
                        row.push(num(st.and_then(|st| st.mean.cpu_some_pct), 0, " %"));
                    }
                    row.push(num(st.and_then(|st| st.cpu_ms_per_ok), 3, ""));
                    row.push(num(st.and_then(|st| st.ceiling_rps), 0, ""));
                }
            }
        }
        rows.push(row);
    }
    table(&mut out, &rows);
    if s.phases.iter().any(|p| p.watch.values().any(|st| st.saturated.is_some())) {
        let _ = writeln!(out, "  * reached its ceiling in that step");
    }
    for p in s.phases.iter().filter(|_| detail == Detail::All) {
        for (name, st) in &p.watch {
            if let Some(what) = &st.saturated {
                let _ = writeln!(out, "  {}: {name} — {what}", p.name);
            }
        }
    }
    if let Some(knee) = &w.knee {
        let _ = writeln!(out, "{knee}");
    }
    if detail == Detail::All {
        seconds_around_the_knee(&mut out, s, w);
    }
    out
}

/// The seconds of the knee step and the step after it, one line each.
fn seconds_around_the_knee(out: &mut String, s: &Summary, w: &WatchSummary) {
    let Some(k) = s.knee.as_ref().and_then(|k| s.phases.iter().position(|p| p.name == k.step)) else { return };
    let from = s.phases[k].start_s as u64;
    let last = &s.phases[(k + 1).min(s.phases.len() - 1)];
    let to = (last.start_s + last.duration_s) as u64;
    let mut header = vec!["second".to_string(), "ok/s".into(), "p50".into(), "p99".into()];
    header.extend(w.sources.iter().map(|src| match is_cpu(src) {
        false => src.name.clone(),
        true => format!("{} cores", src.name),
    }));
    let mut rows = vec![header];
    for sec in s.series.iter().filter(|sec| (from..to).contains(&sec.t)) {
        let mut row = vec![sec.t.to_string(), sec.ok.to_string()];
        let lat = sec.latency_ms.as_ref();
        row.push(lat.map_or("-".into(), |l| format!("{:.2}", l.p50)));
        row.push(lat.map_or("-".into(), |l| format!("{:.2}", l.p99)));
        let watched = w.seconds.iter().find(|x| x.t == sec.t);
        for src in &w.sources {
            let v = watched.and_then(|x| x.values.get(&src.name).copied().flatten());
            row.push(match v {
                None => "missing".into(),
                Some(v) if !is_cpu(src) => num(v.value, 1, ""),
                Some(v) => num(v.cpu_cores, 2, ""),
            });
        }
        rows.push(row);
    }
    if rows.len() > 1 {
        let _ = writeln!(out, "\nper second around the knee (ms):");
        table(out, &rows);
    }
}

/// Whether the source reads CPU (cores): every kind but a Prometheus series, and that too
/// when it is an idle counter read as busy cores.
fn is_cpu(src: &WatchSource) -> bool {
    src.kind != "prometheus" || src.idle
}

/// `; sampling took 0.4 ms CPU/s on CPU 1, apart from the shards`.
fn sampling(w: &WatchSummary) -> String {
    let Some(ms) = w.sampler_cpu_ms_per_s else { return String::new() };
    let place = match (&w.sampler_cpus, w.sampler_apart) {
        (Some(cpus), Some(true)) => format!(" on CPU {cpus}, apart from the shards"),
        (Some(cpus), Some(false)) => format!(" on CPU {cpus}, beside the shards at nice 19 (no other CPU allowed)"),
        _ => String::new(),
    };
    format!("; sampling took {ms:.1} ms CPU/s{place}")
}

/// `mean/max` of one field.
fn pair(st: Option<&WatchStep>, get: fn(&crate::summary::WatchValues) -> Option<f64>, digits: usize) -> String {
    match st.map(|st| (get(&st.mean), get(&st.max))) {
        Some((Some(mean), Some(max))) => format!("{mean:.digits$}/{max:.digits$}"),
        _ => "-".into(),
    }
}

fn num(v: Option<f64>, digits: usize, unit: &str) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}{unit}"))
}

/// Left-aligned first column, the rest right-aligned, two spaces apart, indented.
fn table(out: &mut String, rows: &[Vec<String>]) {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> =
        (0..n).map(|i| rows.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count()).max().unwrap_or(0)).collect();
    for row in rows {
        out.push_str("  ");
        for (i, cell) in row.iter().enumerate() {
            let pad = widths[i].saturating_sub(cell.chars().count());
            if i == 0 {
                let _ = write!(out, "{cell}{}", " ".repeat(pad));
            } else {
                let _ = write!(out, "  {}{cell}", " ".repeat(pad));
            }
        }
        out.push('\n');
    }
}
