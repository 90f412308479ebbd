//! The report's reference sections: the loader's health (CPU per shard, run-queue delay,
//! send lag, connects, TIME_WAIT and ports, lost probe events — "not measured" where the
//! summary has no figure), the certificate's headroom, and the run's metadata. Tables only;
//! the health charts are `charts.rs`.

use std::fmt::Write as _;

use super::escape::{NOT_MEASURED, esc, num, opt, pct};
use crate::summary::Summary;

/// A two-column table of (label, already-escaped HTML value) rows.
fn table(id: &str, rows: &[(&str, String)]) -> String {
    let mut out = format!(r#"<table id="{id}" class="facts"><tbody>"#);
    for (label, value) in rows {
        let _ = write!(out, "<tr><th>{}</th><td>{value}</td></tr>", esc(label));
    }
    out.push_str("</tbody></table>");
    out
}

/// Three figures as "p50 / p99 / max unit".
fn trio(p50: f64, p99: f64, max: f64, unit: &str) -> String {
    format!("{} / {} / {}{unit}", num(p50), num(p99), num(max))
}

/// The loader's own health, as far as the summary carries it.
pub fn health(s: &Summary) -> String {
    let (l, p, h) = (&s.loader, &s.probes, &s.health.peaks);
    let shards = if l.cpu_p95_by_shard.is_empty() {
        NOT_MEASURED.to_string()
    } else {
        l.cpu_p95_by_shard.iter().enumerate().map(|(k, c)| format!("#{k}: {}%", num(*c))).collect::<Vec<_>>().join(", ")
    };
    let worst_lag = s.phases.iter().map(|ph| &ph.send_lag_ms).fold(None::<(f64, f64)>, |acc, lag| {
        Some(acc.map_or((lag.p99, lag.max), |(p99, max)| (p99.max(lag.p99), max.max(lag.max))))
    });
    let late: u64 = s.phases.iter().map(|ph| ph.late).sum();
    let worst_read = s.phases.iter().filter_map(|ph| ph.read_lag_ms.as_ref()).fold(None::<(f64, f64)>, |acc, r| {
        Some(acc.map_or((r.p99, r.max), |(p99, max)| (p99.max(r.p99), max.max(r.max))))
    });
    let probes = if p.available {
        "attached".to_string()
    } else {
        format!("not attached: {}", esc(p.unavailable_reason.as_deref().unwrap_or("no reason recorded")))
    };
    let rows = [
        ("probes (eBPF)", probes),
        ("CPU p95 per shard (% of one core)", shards),
        ("CPU p95 / max, busiest shard", format!("{} / {}", opt(l.cpu_p95, "%"), opt(l.cpu_max, "%"))),
        (
            "run-queue delay, shards p50 / p99 / max",
            p.runqueue_us.as_ref().map_or(NOT_MEASURED.into(), |r| trio(r.p50, r.p99, r.max, " µs")),
        ),
        (
            "run-queue delay, other threads p50 / p99 / max",
            p.runqueue_other_us.as_ref().map_or(NOT_MEASURED.into(), |r| trio(r.p50, r.p99, r.max, " µs")),
        ),
        (
            "timer wake-up lateness p50 / p99 / max",
            l.wake_late_us.as_ref().map_or(NOT_MEASURED.into(), |w| trio(w.p50, w.p99, w.max, " µs")),
        ),
        (
            "send lag, worst phase p99 / max",
            worst_lag.map_or(NOT_MEASURED.into(), |(p99, max)| format!("{} / {} ms", num(p99), num(max))),
        ),
        ("late sends (> 10 ms behind)", late.to_string()),
        (
            "late sends of the loader's own / waits it caused / due and never sent by it",
            format!(
                "{} / {} / {}",
                s.phases.iter().map(|ph| ph.late_unpooled).sum::<u64>(),
                s.phases.iter().map(|ph| ph.waited_on_loader).sum::<u64>(),
                s.phases.iter().map(|ph| ph.due_unsent_loader).sum::<u64>()
            ),
        ),
        (
            "read lag (answer read − kernel stamp), worst phase p99 / max",
            worst_read.map_or(NOT_MEASURED.into(), |(p99, max)| format!("{} / {} ms", num(p99), num(max))),
        ),
        (
            "connect latency p50 / p99 / max",
            p.connect_ms.as_ref().map_or(NOT_MEASURED.into(), |c| {
                format!("{} ({} connects, {} failed)", trio(c.p50, c.p99, c.max, " ms"), c.count, c.failed)
            }),
        ),
        (
            "connections opened / failed",
            format!(
                "{} / {} (pool of {}){}",
                s.run.connections_opened,
                s.run.connect_failures,
                s.run.connections,
                if s.run.deadline_while_connecting > 0 {
                    format!(
                        "; {} requests ran out of time while their connection opened",
                        s.run.deadline_while_connecting
                    )
                } else {
                    String::new()
                }
            ),
        ),
        (
            "TIME_WAIT: entries / loader's peak / host's peak",
            p.time_wait.as_ref().map_or_else(
                || h.time_wait_max.map_or(NOT_MEASURED.into(), |t| format!("host peak {t} (sockstat)")),
                |t| {
                    let host = t.host_max_live.map_or(NOT_MEASURED.into(), |n| n.to_string());
                    format!("{} / {} / {host}", t.entries, t.max_live)
                },
            ),
        ),
        (
            "ephemeral ports, peak share: loader / host",
            format!(
                "{} / {}",
                pct(p.ephemeral_ports_max_ratio),
                pct(p.host_ephemeral_ports_max_ratio.or(h.ephemeral_ports_max_ratio))
            ),
        ),
        ("file descriptors, peak share of the limit", pct(h.fds_max_ratio)),
        ("cgroup throttling", opt(h.cgroup_throttled_ms, " ms")),
        (
            "hypervisor steal, all cores (most in one core-second)",
            match (h.steal_ms, h.steal_max_ms_per_s) {
                (Some(all), Some(most)) => format!("{all:.0} ms ({most:.0} ms)"),
                (Some(all), None) => format!("{all:.0} ms"),
                _ => NOT_MEASURED.into(),
            },
        ),
        ("SYN retransmits / all retransmits", format!("{} / {}", count(p.syn_retransmits), count(p.retransmits))),
        (
            "resets sent / received",
            p.resets.as_ref().map_or(NOT_MEASURED.into(), |r| format!("{} / {}", r.sent, r.received)),
        ),
        (
            "drops by reason",
            p.drops.as_ref().map_or(NOT_MEASURED.into(), |d| {
                if d.is_empty() {
                    "none".into()
                } else {
                    esc(&d.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join(", "))
                }
            }),
        ),
        ("lost probe events", lost(s)),
        (
            "memory (RSS) start / end / peak",
            format!(
                "{} / {} / {}",
                opt(l.rss_mib_start, " MiB"),
                opt(l.rss_mib_end, " MiB"),
                opt(l.rss_mib_peak, " MiB")
            ),
        ),
    ];
    table("health", &rows)
}

fn count(n: Option<u64>) -> String {
    n.map_or(NOT_MEASURED.into(), |n| n.to_string())
}

fn lost(s: &Summary) -> String {
    let p = &s.probes;
    let Some(n) = p.lost else { return NOT_MEASURED.into() };
    let mut text = n.to_string();
    if let Some(by) = p.lost_by_reason.as_ref().filter(|b| !b.is_empty()) {
        let _ = write!(text, " ({})", esc(&by.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join(", ")));
    }
    if let Some(share) = &p.loss_share {
        let _ =
            write!(text, "; share lost: scheduler {}, sockets {}", pct(Some(share.runqueue)), pct(Some(share.sockets)));
    }
    text
}

/// The certificate's headroom: how far the run's rate was from this machine's certified
/// ceiling, as a bar with the verdict's 70 % line.
pub fn certificate(s: &Summary) -> String {
    let Some(c) = &s.loader.certificate else {
        return r#"<p class="missing">No certificate: this run was not compared with a certified ceiling (run <code>loader calibrate</code> on this machine).</p>"#.to_string();
    };
    let ratio = if c.ratio.is_finite() { c.ratio.max(0.0) } else { 0.0 };
    let bound = if c.lower_bound { " (a lower bound of the ceiling: the true share is at most this)" } else { "" };
    let class = if ratio > 0.7 { "over" } else { "under" };
    format!(
        r#"<p>Certified ceiling {} req/s; the run reached {} of it{bound}; headroom {}.</p><svg class="headroom" viewBox="0 0 600 28" role="img" aria-label="share of the certified ceiling"><rect class="track" x="0" y="6" width="600" height="16"/><rect class="{class}" x="0" y="6" width="{}" height="16"/><line class="mark-limit" x1="420" x2="420" y1="0" y2="28"/><text class="mark-label" x="424" y="12">70%</text></svg>"#,
        num(c.ceiling_rps),
        pct(Some(ratio)),
        pct(Some((1.0 - ratio).max(0.0))),
        super::escape::px(600.0 * ratio.min(1.0)),
    )
}

/// The load machine's fingerprint, one line.
fn machine(m: Option<&crate::health::machine::Fingerprint>) -> String {
    let Some(m) = m else { return "not recorded (a summary from an older loader)".to_string() };
    let or = |v: &Option<String>| v.as_deref().map_or_else(|| "?".to_string(), esc);
    format!(
        "{} ({} CPUs), kernel {}, ports {}, tcp_tw_reuse {}, somaxconn {}, nofile {}",
        or(&m.cpu_model),
        m.cores,
        or(&m.kernel),
        or(&m.ip_local_port_range),
        or(&m.tcp_tw_reuse),
        or(&m.somaxconn),
        m.nofile_limit.map_or_else(|| "?".to_string(), |n| n.to_string())
    )
}

/// What was run, with what, where.
pub fn metadata(s: &Summary) -> String {
    let r = &s.run;
    let rows = [
        ("target", format!("<code>{}</code>", esc(&r.url))),
        ("profile", esc(&r.profile)),
        ("started", esc(&r.started_at)),
        ("elapsed", format!("{} s", num(r.elapsed_s))),
        ("connections / shard threads", format!("{} / {}", r.connections, r.threads)),
        ("client timeout", format!("{} s", num(r.timeout_s))),
        ("keep-alive", if r.keepalive { "yes" } else { "no" }.to_string()),
        ("wake-up batching window", format!("{} µs", num(r.wake_window_us))),
        ("send-ahead window", {
            let (ahead, sent) = crate::report::text::sends_ahead(s);
            format!("{} µs ({ahead} of {sent} sends left early, measured from when they left)", num(r.send_ahead_us))
        }),
        (
            "idle CPUs",
            match (r.cpu_dma_latency_us, crate::health::idle::recorded_honours_request(r.cpuidle_driver.as_deref())) {
                (Some(us), false) => format!(
                    "<code>/dev/cpu_dma_latency</code> held at {us} µs, but the machine has no cpuidle driver to read it"
                ),
                (Some(0), true) => "polling: <code>/dev/cpu_dma_latency</code> held at 0 µs for the run".to_string(),
                (Some(us), true) => format!("<code>/dev/cpu_dma_latency</code> held at {us} µs for the run"),
                (None, false) => "as the machine has them: no cpuidle driver (<code>/dev/cpu_dma_latency</code> would change nothing, not held)".to_string(),
                (None, true) => "as the machine had them (<code>/dev/cpu_dma_latency</code> not held by the loader)".to_string(),
            },
        ),
        (
            "TLS",
            s.tls.as_ref().map_or("no (http)".into(), |t| {
                format!("{} handshakes, {} resumed, {} failed", t.handshakes, t.resumed, t.failures)
            }),
        ),
        (
            "data file",
            s.data.as_ref().map_or("none".into(), |d| {
                format!(
                    "<code>{}</code>: {} rows, {} (seed {}); {} distinct rows sent; hottest row {} ({}) {} % of sends (expected {} %)",
                    esc(&d.file),
                    d.rows,
                    esc(&d.distribution),
                    d.seed,
                    d.distinct_sent,
                    d.hottest_row,
                    esc(&d.hottest_key),
                    num(d.hottest_share * 100.0),
                    num(d.expected_hottest_share * 100.0)
                )
            }),
        ),
        (
            "command line",
            if r.command_line.is_empty() {
                "not recorded (a summary from an older loader)".to_string()
            } else {
                format!("<code>{}</code>", esc(&r.command_line.join(" ")))
            },
        ),
        ("machine", machine(s.machine.as_ref())),
        (
            "pre-flight noise check",
            s.preflight.as_ref().map_or("skipped".into(), |p| {
                format!(
                    "{} sleeps woke {} / {} / {} µs late (p50/p99/max) on {} thread(s)",
                    p.wakeups,
                    num(p.late_p50_us),
                    num(p.late_p99_us),
                    num(p.late_max_us),
                    p.threads
                )
            }),
        ),
        ("schema", esc(&s.schema)),
        ("loader version", esc(&r.loader_version)),
    ];
    let mut out = table("metadata", &rows);
    if !s.errors_detail.is_empty() {
        out.push_str(r#"<h3>Errors by class</h3><ul class="errors">"#);
        for (class, messages) in &s.errors_detail {
            for m in messages.iter().take(20) {
                let _ = write!(out, "<li><code>{}</code> × {}: {}</li>", esc(class), m.count, esc(&m.message));
            }
        }
        out.push_str("</ul>");
    }
    out
}
