//! The terminal report: the verdict, one row per phase (or the step table), and the lines
//! a performance engineer reads first.
//!
//! Two depths ([`Detail`]). At a glance — what `loader run` prints — the verdict keeps its
//! three most important reasons, one line each, a stepped run shows its step table and not
//! the phase table as well, and a line appears only when it says something to act on or to
//! doubt (the load machine's peaks when one neared a limit, lost probe events with their
//! share). `loader verdict DIR --all` prints everything, as do summary.json and report.html.

use std::fmt::Write as _;
use std::path::Path;

use crate::analysis::Analysis;
pub use crate::analysis::render::Detail;
pub use crate::analysis::render::phase_list;
use crate::analysis::render::short;
use crate::analysis::step::fmt_ms;
use crate::summary::{CapacitySummary, PhaseSummary, Reason, Summary, Verdict};
use crate::verdict::entries;

/// Reasons the verdict shows at a glance; the rest are counted, with where to read them.
const GLANCE_REASONS: usize = 3;

/// The whole terminal report of a run: the verdict, then the step table of a stepped run
/// (with its knees and cliff) or the phase table, then the lines under them. `dir` is where
/// the run was written, for the pointer to the rest.
pub fn render_run(s: &Summary, analysis: Option<&Analysis>, detail: Detail, dir: Option<&Path>) -> String {
    let mut out = render_verdict(&s.verdict, detail, dir);
    out.push('\n');
    let stepped = s.phases.iter().filter(|p| p.kind == "hold").count() > 1;
    match (analysis.filter(|_| stepped), detail) {
        (Some(a), Detail::Glance) => {
            out.push_str(&crate::analysis::render::render_steps_at(&s.phases, &s.series, a, detail));
            out.push_str(&render_footer(s, detail));
        }
        (Some(a), Detail::All) => {
            out.push_str(&render(s));
            out.push('\n');
            out.push_str(&crate::analysis::render::render_steps_at(&s.phases, &s.series, a, detail));
        }
        (None, _) => {
            out.push_str(&phase_table(s));
            if let Some(gates) = super::gates::line(s, detail) {
                let _ = writeln!(out, "{gates}");
            }
            out.push_str(&render_footer(s, detail));
        }
    }
    out
}

fn errors_cell(p: &PhaseSummary) -> String {
    let parts: Vec<String> = p.errors.iter().filter(|(_, n)| **n > 0).map(|(k, n)| format!("{k}:{n}")).collect();
    if parts.is_empty() { "0".to_string() } else { parts.join(" ") }
}

/// Sends that left before their intended time (the send-ahead window), and all sends.
pub fn sends_ahead(s: &Summary) -> (u64, u64) {
    s.phases.iter().fold((0, 0), |(a, n), p| (a + p.sent_ahead, n + p.sent))
}

/// How many sends left before their intended time (the send-ahead window), if any did.
pub fn ahead_line(s: &Summary) -> Option<String> {
    let (ahead, sent) = sends_ahead(s);
    (ahead > 0).then(|| {
        format!(
            "sent ahead: {ahead} of {sent} sends ({:.1} %) left up to {:.0} µs before their time, on a wake-up early for them or with one that sent another (--send-ahead); their latency runs from when they left",
            100.0 * ahead as f64 / sent.max(1) as f64,
            s.run.send_ahead_us
        )
    })
}

/// Render the per-phase table and the run's footer lines, everything said.
pub fn render(s: &Summary) -> String {
    let mut out = phase_table(s);
    out.push_str(&render_footer(s, Detail::All));
    out
}

/// The per-phase table with its legend.
fn phase_table(s: &Summary) -> String {
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
            fmt_ms(l.p50),
            fmt_ms(l.p90),
            fmt_ms(l.p95),
            fmt_ms(l.p99),
            fmt_ms(l.p999),
            fmt_ms(l.max),
            fmt_ms(p.send_lag_ms.p99),
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
    let arrivals = s.run.arrival_seed.map_or(String::new(), |seed| format!("; Poisson arrivals, seed {seed}"));
    let _ = writeln!(
        out,
        "latency in ms from each request's intended send time (coordinated omission corrected){arrivals}"
    );
    out
}

/// Share of the sends that left ahead of their time from which a glance mentions it.
const AHEAD_GLANCE_SHARE: f64 = 0.01;

/// The lines under the table: the connections, then what else the run has to say.
fn render_footer(s: &Summary, detail: Detail) -> String {
    let all = detail == Detail::All;
    let mut out = String::new();
    let r = &s.run;
    let _ = writeln!(
        out,
        "{}connections {} (opened {}, failed {}{}{}), threads {}, timeout {}s, elapsed {:.1}s{}",
        if r.protocol == "h2" {
            format!("HTTP/2, {} streams per connection at most, ", r.max_streams)
        } else {
            String::new()
        },
        r.connections,
        r.connections_opened,
        r.connect_failures,
        if r.closed_on_timeout + r.closed_by_target > 0 {
            format!("; closed by the loader on timeouts {}, by the target {}", r.closed_on_timeout, r.closed_by_target)
        } else {
            String::new()
        },
        if r.deadline_while_connecting > 0 {
            format!("; {} requests ran out of time while their connection opened", r.deadline_while_connecting)
        } else {
            String::new()
        },
        r.threads,
        r.timeout_s,
        r.elapsed_s,
        match (s.interrupted, s.interrupted_by.as_deref()) {
            (false, _) => String::new(),
            (true, Some(by)) => format!(" — INTERRUPTED ({by}), partial results"),
            (true, None) => " — INTERRUPTED, partial results".to_string(),
        }
    );
    let (ahead, sent) = sends_ahead(s);
    if all {
        if let Some(line) = ahead_line(s) {
            let _ = writeln!(out, "{line}");
        }
    } else if ahead as f64 >= AHEAD_GLANCE_SHARE * sent as f64 && ahead > 0 {
        let _ = writeln!(
            out,
            "sent ahead: {ahead} of {sent} sends ({:.1} %) up to {:.0} µs early (--send-ahead); their latency runs from when they left",
            100.0 * ahead as f64 / sent.max(1) as f64,
            s.run.send_ahead_us
        );
    }
    for p in s.phases.iter().filter(|p| !p.grpc.is_empty()) {
        let codes: Vec<String> = p.grpc.iter().map(|(code, n)| format!("{code} {n}")).collect();
        let _ = writeln!(out, "grpc-status {}: {}", p.name, codes.join(", "));
    }
    if let Some(t) = &s.tls {
        let _ = write!(
            out,
            "tls: {} handshakes ({} resumed, {} failed), handshake p50 {:.2} ms p99 {:.2} ms max {:.2} ms",
            t.handshakes, t.resumed, t.failures, t.handshake_ms.p50, t.handshake_ms.p99, t.handshake_ms.max
        );
        match &t.first_error {
            Some(e) => {
                let _ = writeln!(out, "; first failure: {e}");
            }
            None => out.push('\n'),
        }
    }
    if let Some(d) = &s.data {
        let _ = writeln!(out, "{}", d.line());
    }
    if let (Some(p95), Some(max)) = (s.loader.cpu_p95, s.loader.cpu_max) {
        let _ = writeln!(out, "loader shard CPU p95 {p95:.0}% max {max:.0}% (per shard core)");
    }
    if let Some(c) = &s.loader.certificate {
        let (rps, ratio) = (c.ceiling_rps, c.ratio);
        let of = if c.lower_bound {
            format!(
                "the {rps:.0} req/s this machine is certified for (a lower bound of its ceiling; achieved/certified {ratio:.2})"
            )
        } else {
            format!("this machine's certified ceiling of {rps:.0} req/s (achieved/ceiling {ratio:.2})")
        };
        let _ = writeln!(out, "certificate: the highest step sent {:.0}% of {of}", ratio * 100.0);
    }
    if let (true, Some(start), Some(end), Some(peak)) =
        (all, s.loader.rss_mib_start, s.loader.rss_mib_end, s.loader.rss_mib_peak)
    {
        let _ = writeln!(out, "loader memory: RSS {start:.1} MiB at 1 s, {end:.1} MiB at the end, peak {peak:.1} MiB");
    }
    if let Some(sp) = &s.analysis.spike {
        let rec = sp.time_to_recover_s.map_or("did not recover within the recovery phase".to_string(), |t| {
            format!("recovered {t} s into the recovery phase")
        });
        let p = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        let _ = writeln!(
            out,
            "spike: {rec}; p99 base/peak/recovery {}/{}/{} ms",
            p(sp.base_p99_ms),
            p(sp.peak_p99_ms),
            p(sp.recovery_p99_ms)
        );
    }
    if let Some(so) = &s.analysis.soak {
        let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        let n = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        let _ = writeln!(
            out,
            "soak: loader RSS {} → {} MiB, descriptors {} → {}, connections opened {}",
            f(so.rss_mib_start),
            f(so.rss_mib_end),
            n(so.fds_start),
            n(so.fds_end),
            so.connections_opened
        );
    }
    if let Some(w) = s.preflight.as_ref().and_then(|p| p.warning.as_ref()) {
        let _ = writeln!(out, "pre-flight warning: {w}");
    }
    let read: Vec<String> = s
        .phases
        .iter()
        .filter_map(|p| p.read_lag_ms.as_ref().map(|r| format!("{} {:.2}/{:.2}/{:.1}", p.name, r.p50, r.p99, r.max)))
        .collect();
    if all && !read.is_empty() {
        let _ = writeln!(out, "read lag ms (answer read − kernel receive stamp, p50/p99/max): {}", read.join(", "));
    }
    if let Some(w) = s.loader.wake_late_us.as_ref().filter(|_| all) {
        let _ = writeln!(
            out,
            "shard wake-ups: {:.0}/{:.0}/{:.0} µs late (p50/p99/max of {} timer wake-ups){}",
            w.p50,
            w.p99,
            w.max,
            w.count,
            match (
                s.run.cpu_dma_latency_us,
                crate::health::idle::recorded_honours_request(s.run.cpuidle_driver.as_deref())
            ) {
                (Some(us), false) =>
                    format!(", no cpuidle driver (cpu_dma_latency {us} µs held, but nothing reads it)"),
                (Some(0), true) => ", idle CPUs polling (cpu_dma_latency 0 µs held)".to_string(),
                (Some(us), true) => format!(", cpu_dma_latency {us} µs held"),
                (None, false) => ", no cpuidle driver (cpu_dma_latency would change nothing: not held)".to_string(),
                (None, true) if s.run.virtual_machine == Some(true) => {
                    ", idle CPUs left to halt (a virtual machine: polling vCPUs draw the host's steal)".to_string()
                }
                (None, true) => ", cpu_dma_latency not held by the loader".to_string(),
            }
        );
    }
    out.push_str(&render_errors(s));
    let h = &s.health.peaks;
    let mut health = Vec::new();
    let mut notable = false;
    if let Some(r) = h.fds_max_ratio {
        notable |= r >= NOTABLE_SHARE;
        health.push(format!("fds {:.0}% of limit", r * 100.0));
    }
    if let Some(r) = h.ephemeral_ports_max_ratio {
        notable |= r >= NOTABLE_SHARE;
        health.push(format!("ephemeral ports {:.1}% (host)", r * 100.0));
    }
    if let Some(tw) = h.time_wait_max {
        notable |= tw >= NOTABLE_TIME_WAIT;
        health.push(format!("TIME_WAIT {tw} (host)"));
    }
    if let Some(ms) = h.cgroup_throttled_ms {
        notable |= ms > 0.0;
        health.push(format!("cgroup throttled {ms:.0} ms"));
    }
    if let Some(ms) = h.steal_ms.filter(|&ms| ms > 0.0) {
        let most = h.steal_max_ms_per_s.unwrap_or(ms);
        notable |= most >= NOTABLE_STEAL_MS;
        health.push(format!("hypervisor steal {ms:.0} ms (up to {most:.0} ms in a second on one core)"));
    }
    if !health.is_empty() && (all || notable) {
        let _ = writeln!(out, "load machine peaks: {}", health.join(", "));
    }
    let nic_notable = |n: &crate::health::nic::NicSummary| {
        n.tx_utilization_max.is_some_and(|u| u >= NOTABLE_SHARE) || n.qdisc_drops.is_some_and(|d| d > 0)
    };
    if let Some(n) = s.health.nic.as_ref().filter(|n| all || nic_notable(n)) {
        let share = n
            .tx_utilization_max
            .zip(n.speed_mbps)
            .map_or(String::new(), |(u, mbps)| format!(" ({:.1} % of {mbps:.0} Mb/s)", u * 100.0));
        let queue = match (n.qdisc.as_deref(), n.qdisc_drops, n.qdisc_overlimits) {
            (Some(q), Some(d), Some(o)) => format!(", egress queue {q}: {d} dropped, {o} held back"),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "load machine NIC {}: busiest second sent {:.2} MB ({:.0} packets){share}, received {:.2} MB{queue}",
            n.device,
            n.tx_bytes_max_per_s / 1e6,
            n.tx_packets_max_per_s,
            n.rx_bytes_max_per_s / 1e6
        );
    }
    match (&s.probes.available, &s.probes.unavailable_reason) {
        (true, _) => {
            let p = &s.probes;
            let mut parts = Vec::new();
            if let Some(c) = &p.connect_ms {
                parts.push(format!(
                    "connect p50/p99 {:.3}/{:.3} ms over {} ({} failed)",
                    c.p50, c.p99, c.count, c.failed
                ));
            }
            if let Some(rq) = &p.runqueue_us {
                parts.push(format!("shard run-queue p99 {:.0} µs max {:.0} µs", rq.p99, rq.max));
            }
            if let Some(rq) = p.runqueue_other_us.as_ref().filter(|_| all) {
                parts.push(format!("other threads' p99 {:.0} µs", rq.p99));
            }
            if let Some(n) = p.syn_retransmits {
                parts.push(format!("SYN retransmits {n}"));
            }
            if let Some(r) = &p.resets {
                parts.push(format!("resets sent/received {}/{}", r.sent, r.received));
            }
            if let Some(tw) = &p.time_wait {
                let host = tw.host_max_live.map_or(String::new(), |h| format!(" (host {h})"));
                parts.push(match all {
                    true => format!("TIME_WAIT entries {}, live max {}{host}", tw.entries, tw.max_live),
                    false => format!("TIME_WAIT live max {}", tw.max_live),
                });
            }
            if let Some(t) = p.tls_handshake_ms.as_ref().filter(|t| t.started > 0) {
                parts.push(format!(
                    "TLS handshakes {} ({} resumed, {} failed) p50/p99 {:.2}/{:.2} ms",
                    t.count, t.resumed, t.failed, t.p50, t.p99
                ));
            }
            if let Some(lost) = p.lost.filter(|&n| n > 0) {
                let share = p.loss_share.as_ref().map(|l| l.runqueue.max(l.sockets));
                parts.push(match share.filter(|&x| x > 0.0) {
                    Some(x) => format!("{lost} probe event(s) lost ({} of what a rule reads)", pct(x)),
                    None => format!("{lost} probe event(s) lost"),
                });
            }
            let _ = writeln!(out, "probes (kernel, loader's own sockets and threads): {}", parts.join(", "));
        }
        (false, Some(why)) => {
            let _ = writeln!(out, "probes: unavailable ({why})");
        }
        (false, None) => {}
    }
    out.push_str(&crate::analysis::render::run_notes(s, detail));
    out.push_str(&super::watch::render(s, detail));
    out
}

/// A share (0–1) as a reader takes it: `0.004 %`, `1.2 %`.
fn pct(x: f64) -> String {
    let p = x * 100.0;
    if p >= 1.0 { format!("{p:.1} %") } else { format!("{p:.2} %").replace("0.00 %", "< 0.01 %") }
}

/// A share of a limit (descriptors, ports, the NIC's line rate) from which a glance shows the
/// load machine's peaks.
const NOTABLE_SHARE: f64 = 0.5;
/// Host TIME_WAIT from which a glance shows the peaks: half the verdict's limit.
const NOTABLE_TIME_WAIT: u64 = 2500;
/// Steal in one second on one core, ms, from which a glance shows the peaks: twice the
/// throttling limit the verdict notes it from (a tick or two is the host's ordinary noise).
const NOTABLE_STEAL_MS: f64 = 20.0;

/// Why requests failed, as oha prints its error distribution: one line per class, its
/// messages with their counts (nothing when nothing failed).
pub fn render_errors(s: &Summary) -> String {
    let mut out = String::new();
    if s.errors_detail.is_empty() {
        return out;
    }
    let _ = writeln!(out, "errors:");
    for (class, messages) in &s.errors_detail {
        let total: u64 = messages.iter().map(|m| m.count).sum();
        let _ = writeln!(out, "  {class} ({total}):");
        for m in messages {
            let _ = writeln!(out, "    {:>8}  {}", m.count, m.message);
        }
    }
    out
}

/// Render the verdict plainly: one headline, then its reasons, the most important first
/// (invalidating, then the target's, the network's and the loader's notes). At a glance, the
/// first [`GLANCE_REASONS`] in a line each and where to read the rest (`dir`: the run's
/// directory); all of them whole otherwise.
pub fn render_verdict(v: &Verdict, detail: Detail, dir: Option<&Path>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", headline(v));
    let mut reasons: Vec<&Reason> = v.reasons.iter().collect();
    reasons.sort_by_key(|r| importance(r));
    // At a glance a code said in several steps is one line: the first, and how many more.
    let mut lines: Vec<(&Reason, usize)> = Vec::new();
    for r in reasons {
        match lines.iter_mut().find(|(l, _)| detail == Detail::Glance && same_finding(l, r)) {
            Some((_, more)) => *more += 1,
            None => lines.push((r, 0)),
        }
    }
    let shown = match detail {
        Detail::Glance => GLANCE_REASONS.min(lines.len()),
        Detail::All => lines.len(),
    };
    for (r, more) in &lines[..shown] {
        let mark = if r.invalidates { "✗" } else { "·" };
        let text = if detail == Detail::Glance { short(&r.detail) } else { r.detail.clone() };
        let also = if *more > 0 { format!(" (+ {more} more like it)") } else { String::new() };
        let _ = writeln!(out, "  {mark} [{}] {}: {text}{also}", r.side, r.code);
        // All of it: what to do, from the reason's entry in docs/verdict.md.
        if detail == Detail::All
            && let Some(e) = entries::entry(&r.code)
        {
            let _ = writeln!(out, "      what to do: {} ({})", entries::plain(e.action), e.link());
        }
    }
    let rest: Vec<&Reason> = lines[shown..].iter().map(|(r, _)| *r).collect();
    if !rest.is_empty() {
        let invalidating = rest.iter().filter(|r| r.invalidates).count();
        let what = match invalidating {
            0 => format!("{} more note(s)", rest.len()),
            n => format!("{} more reason(s), {n} of them invalidating", rest.len()),
        };
        let all =
            dir.map_or("loader verdict DIR --all".to_string(), |d| format!("loader verdict {} --all", d.display()));
        let _ = writeln!(out, "  … {what}: {all}, or report.html");
    }
    out
}

/// The verdict's first line: whether to trust the numbers, for which steps, and on whose
/// evidence.
pub fn headline(v: &Verdict) -> String {
    let held: Vec<&str> = v.steps.iter().filter(|t| t.trusted).map(|t| t.phase.as_str()).collect();
    let spoiled: Vec<&str> = v.steps.iter().filter(|t| !t.trusted).map(|t| t.phase.as_str()).collect();
    let sides = || {
        let sides: std::collections::BTreeSet<&str> =
            v.reasons.iter().filter(|r| r.invalidates).map(|r| r.side.as_str()).collect();
        sides.into_iter().collect::<Vec<_>>().join(" and ")
    };
    match v.trusted {
        Some(true) => "VERDICT: TRUSTED — no loader-side evidence against these numbers".to_string(),
        Some(false) if !held.is_empty() => format!(
            "VERDICT: TRUSTED for {}; UNTRUSTED for {} — {} side evidence invalidates {}",
            phase_list(&held),
            phase_list(&spoiled),
            sides(),
            if spoiled.len() == 1 { "its numbers" } else { "their numbers" }
        ),
        Some(false) => format!("VERDICT: UNTRUSTED — {} side evidence invalidates these numbers", sides()),
        None => "VERDICT: not judged".to_string(),
    }
}

/// Sort key of a reason: invalidating first, then notes on the target, the network, the
/// loader (what explains the numbers before what qualifies them).
fn importance(r: &Reason) -> u8 {
    match (r.invalidates, r.side.as_str()) {
        (true, _) => 0,
        (false, "target") => 1,
        (false, "network") => 2,
        _ => 3,
    }
}

/// Whether two reasons are one finding said of different steps (same code, side and weight).
fn same_finding(a: &Reason, b: &Reason) -> bool {
    a.code == b.code && a.side == b.side && a.invalidates == b.invalidates
}

/// Render repeats and the capacity plan.
pub fn render_capacity(c: &CapacitySummary) -> String {
    let mut out = String::new();
    let knees: Vec<String> =
        c.knees.iter().map(|k| k.map_or_else(|| "none".to_string(), |v| format!("{v:.0}"))).collect();
    let _ = writeln!(out, "knees over {} run(s): {} req/s", c.knees.len(), knees.join(", "));
    match c.max_sustainable {
        Some(max) => {
            let spread = c.relative_spread.map_or(String::new(), |s| format!(", spread {:.0}%", s * 100.0));
            let apart = c.steps_apart.map_or(String::new(), |n| format!(", {n} step(s) apart"));
            let settled = if c.settled { "" } else { " — not settled (want ≥ 3 runs within one step)" };
            let _ = writeln!(out, "max sustainable (minimum of the knees): {max:.0} req/s{spread}{apart}{settled}");
            if !c.spoiled_runs.is_empty() {
                let runs: Vec<String> = c.spoiled_runs.iter().map(|k| format!("run {k}")).collect();
                let _ = writeln!(
                    out,
                    "left out: {} — a step the loader could not vouch for may hold its knee; the other runs repeated it",
                    runs.join(", ")
                );
            }
        }
        None => {
            let _ = writeln!(out, "max sustainable: none — at least one run had no passing step");
        }
    }
    if let (Some(peak), Some(usable), Some(nodes)) = (c.peak_rps, c.usable_per_node, c.nodes) {
        let _ = writeln!(
            out,
            "capacity plan: peak {peak:.0} req/s ÷ ({usable:.0} req/s usable per node = knee × {:.2}) → {nodes} nodes (including one spare)",
            c.margin
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::render::SHORT_MAX;
    use crate::summary::Reason;

    #[test]
    fn verdict_names_the_side_and_puts_invalidating_reasons_first() {
        let r = |code: &str, side: &str, invalidates| Reason {
            code: code.into(),
            side: side.into(),
            invalidates,
            value: None,
            limit: None,
            detail: "why".into(),
        };
        let v = Verdict {
            trusted: Some(false),
            reasons: vec![r("syn_retransmits", "network", false), r("loader_cpu", "loader", true)],
            ..Default::default()
        };
        let text = render_verdict(&v, Detail::All, None);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "VERDICT: UNTRUSTED — loader side evidence invalidates these numbers");
        assert!(lines[1].contains("✗ [loader] loader_cpu"));
        // All of it: each reason's "what to do" from its entry in docs/verdict.md.
        assert!(
            lines[2].starts_with("      what to do: more --threads")
                && lines[2].ends_with("(docs/verdict.md#reason-loader_cpu)"),
            "{}",
            lines[2]
        );
        assert!(lines[3].contains("· [network] syn_retransmits"));
        let ok = Verdict { trusted: Some(true), reasons: vec![], ..Default::default() };
        assert!(render_verdict(&ok, Detail::Glance, None).starts_with("VERDICT: TRUSTED"));
    }

    #[test]
    fn a_verdict_that_holds_for_some_steps_says_which() {
        let step = |n: u32, trusted: bool| crate::summary::StepTrust {
            phase: format!("step {n}"),
            trusted,
            reasons: if trusted { vec![] } else { vec!["send_lag".into()] },
        };
        let v = Verdict {
            trusted: Some(false),
            reasons: vec![Reason {
                code: "send_lag".into(),
                side: "loader".into(),
                invalidates: true,
                value: None,
                limit: None,
                detail: "step 5: why".into(),
            }],
            steps: vec![step(1, true), step(2, true), step(3, true), step(4, true), step(5, false), step(6, false)],
        };
        assert_eq!(
            render_verdict(&v, Detail::Glance, None).lines().next().unwrap(),
            "VERDICT: TRUSTED for steps 1–4; UNTRUSTED for steps 5–6 — loader side evidence invalidates their numbers"
        );
        assert_eq!(phase_list(&["step 1", "step 3", "step 4", "main"]), "step 1, steps 3–4, main");
    }

    #[test]
    fn at_a_glance_the_verdict_keeps_three_reasons_a_line_each_and_says_where_the_rest_are() {
        let r = |code: &str, side: &str, invalidates, detail: &str| Reason {
            code: code.into(),
            side: side.into(),
            invalidates,
            value: None,
            limit: None,
            detail: detail.into(),
        };
        let v = Verdict {
            trusted: Some(false),
            reasons: vec![
                r(
                    "tail_own_delay",
                    "loader",
                    false,
                    "main: the loader's sends were late by up to 1.94 ms (98% of the latency max)",
                ),
                r(
                    "syn_retransmits",
                    "network",
                    false,
                    "42 SYNs of loader connections were retransmitted (the target's backlog or the network dropped them); each costs the connect ≥ 1 s",
                ),
                r(
                    "pool_exhausted",
                    "target",
                    false,
                    "main: 3946 requests left late because every connection was busy (slow answers × rate exceeded the pool); their latency counts from the due time",
                ),
                r(
                    "send_lag",
                    "loader",
                    true,
                    "main: send lag p99 92.2 ms above 50 ms with connections free: the loader could not keep its schedule (4006 of 60000 due requests late by its own doing)",
                ),
            ],
            ..Default::default()
        };
        let text = render_verdict(&v, Detail::Glance, Some(Path::new("out/x")));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "VERDICT: UNTRUSTED — loader side evidence invalidates these numbers",
                "  ✗ [loader] send_lag: main: send lag p99 92.2 ms above 50 ms with connections free",
                "  · [target] pool_exhausted: main: 3946 requests left late because every connection was busy",
                "  · [network] syn_retransmits: 42 SYNs of loader connections were retransmitted",
                "  … 1 more note(s): loader verdict out/x --all, or report.html",
            ]
        );
        // All of it, whole, in the same order.
        let all = render_verdict(&v, Detail::All, None);
        let reasons: Vec<&str> = all.lines().filter(|l| !l.starts_with("      what to do: ")).collect();
        assert_eq!(reasons.len(), 5);
        assert!(reasons[1].ends_with("(4006 of 60000 due requests late by its own doing)"));
        assert!(reasons[4].contains("[loader] tail_own_delay"));
        assert_eq!(all.lines().count(), 9, "each reason and what to do about it: {all}");
    }

    #[test]
    fn at_a_glance_one_finding_in_several_steps_is_one_line() {
        let r = |code: &str, detail: &str| Reason {
            code: code.into(),
            side: "target".into(),
            invalidates: false,
            value: None,
            limit: None,
            detail: detail.into(),
        };
        let v = Verdict {
            trusted: Some(true),
            reasons: vec![
                r("pool_exhausted", "step 5: 939 requests left late because every connection was busy (slow answers)"),
                r("pool_exhausted", "step 6: 1800 requests left late because every connection was busy (slow answers)"),
            ],
            ..Default::default()
        };
        let text = render_verdict(&v, Detail::Glance, None);
        assert_eq!(
            text.lines().nth(1),
            Some(
                "  · [target] pool_exhausted: step 5: 939 requests left late because every connection was busy (+ 1 more like it)"
            )
        );
        assert_eq!(text.lines().count(), 2, "{text}");
        assert_eq!(render_verdict(&v, Detail::All, None).lines().count(), 5, "two reasons, each with what to do");
    }

    #[test]
    fn a_short_reason_is_cut_at_a_clause_break_and_never_past_its_bound() {
        assert_eq!(short("in step 3 (noted in step 2): steal 80"), "in step 3 (noted in step 2): steal 80");
        // Never inside parentheses (a starved run's read lag, by hand).
        assert_eq!(
            short("main: answers sat 15.48 ms (p99; max 192.9 ms, over 16000 answers) in the loader's sockets"),
            "main: answers sat 15.48 ms"
        );
        // Past the steps it names, to the figure.
        assert_eq!(
            short(
                "in step 1, step 2, step 3, step 4 (noted in step 6): the loader's shard threads waited 2.88 ms (p99) runnable"
            ),
            "in step 1, step 2, step 3, step 4 (noted in step 6): the loader's shard threads waited 2.88 ms"
        );
        let long = "x".repeat(400);
        let cut = short(&long);
        assert_eq!(cut.chars().count(), SHORT_MAX);
        assert!(cut.ends_with('…'));
    }
}
