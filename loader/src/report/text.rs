//! The terminal table: one row per phase, the numbers a performance engineer reads first.

use std::fmt::Write as _;

use super::summary::{PhaseSummary, Summary};

fn errors_cell(p: &PhaseSummary) -> String {
    let parts: Vec<String> = p.errors.iter().filter(|(_, n)| **n > 0).map(|(k, n)| format!("{k}:{n}")).collect();
    if parts.is_empty() { "0".to_string() } else { parts.join(" ") }
}

fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Render the per-phase table and the run's footer lines.
pub fn render(s: &Summary) -> String {
    let mut out = String::new();
    let header = [
        "phase",
        "offered/s",
        "sent/s",
        "ok/s",
        "p50",
        "p90",
        "p95",
        "p99",
        "p99.9",
        "max",
        "lag p99",
        "late",
        "errors",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for p in &s.phases {
        let l = &p.latency_ms;
        let name = if p.kind == "hold" { p.name.clone() } else { format!("{} ({})", p.name, p.kind) };
        rows.push(vec![
            name,
            format!("{:.0}", p.offered_rps),
            format!("{:.1}", p.sent_rps),
            format!("{:.1}", p.ok_rps),
            ms(l.p50),
            ms(l.p90),
            ms(l.p95),
            ms(l.p99),
            ms(l.p999),
            ms(l.max),
            ms(p.send_lag_ms.p99),
            p.late.to_string(),
            errors_cell(p),
        ]);
    }
    let widths: Vec<usize> = (0..header.len()).map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0)).collect();
    for (n, row) in rows.iter().enumerate() {
        for (i, cell) in row.iter().enumerate() {
            if i == 0 {
                let _ = write!(out, "{cell:<w$}", w = widths[i]);
            } else {
                let _ = write!(out, "  {cell:>w$}", w = widths[i]);
            }
        }
        out.push('\n');
        if n == 0 {
            out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * (widths.len() - 1)));
            out.push('\n');
        }
    }
    let _ = writeln!(out, "latency in ms from each request's intended send time (coordinated omission corrected)");
    let r = &s.run;
    let _ = writeln!(
        out,
        "connections {} (opened {}, failed {}), threads {}, timeout {}s, elapsed {:.1}s{}",
        r.connections,
        r.connections_opened,
        r.connect_failures,
        r.threads,
        r.timeout_s,
        r.elapsed_s,
        if s.interrupted { " — INTERRUPTED, partial results" } else { "" }
    );
    if let (Some(p95), Some(max)) = (s.loader.cpu_p95, s.loader.cpu_max) {
        let _ = writeln!(out, "loader shard CPU p95 {p95:.0}% max {max:.0}% (per shard core)");
    }
    if let (Some(start), Some(end), Some(peak)) = (s.loader.rss_mib_start, s.loader.rss_mib_end, s.loader.rss_mib_peak) {
        let _ = writeln!(out, "loader memory: RSS {start:.1} MiB at 1 s, {end:.1} MiB at the end, peak {peak:.1} MiB");
    }
    let h = &s.health.peaks;
    let mut health = Vec::new();
    if let Some(r) = h.fds_max_ratio {
        health.push(format!("fds {:.0}% of limit", r * 100.0));
    }
    if let Some(r) = h.ephemeral_ports_max_ratio {
        health.push(format!("ephemeral ports {:.1}% (host)", r * 100.0));
    }
    if let Some(tw) = h.time_wait_max {
        health.push(format!("TIME_WAIT {tw} (host)"));
    }
    if let Some(ms) = h.cgroup_throttled_ms {
        health.push(format!("cgroup throttled {ms:.0} ms"));
    }
    if !health.is_empty() {
        let _ = writeln!(out, "load machine peaks: {}", health.join(", "));
    }
    match (&s.probes.available, &s.probes.unavailable_reason) {
        (true, _) => {
            if let Some(states) = &s.probes.tcp_states {
                let opened = states.get("SYN_SENT->ESTABLISHED").copied().unwrap_or(0);
                let _ = writeln!(out, "probes: on (kernel saw {opened} loader connects established)");
            }
        }
        (false, Some(why)) => {
            let _ = writeln!(out, "probes: unavailable ({why})");
        }
        (false, None) => {}
    }
    out
}
