//! The trust verdict: can these numbers be trusted, and which side explains each anomaly?
//!
//! [`judge`] reads a finished [`Summary`] — loader health, probe figures, per-phase send
//! figures — and returns [`Reason`]s, each with a stable code, a side (`loader`, `network`,
//! `target`), the measured value, the limit, whether it *invalidates* the run or only
//! annotates it, and a sentence. The run is trusted when no reason invalidates it.
//!
//! The verdict deliberately does not look at the latency numbers themselves: a high p99 is a
//! finding about the target, not evidence against the measurement. Evidence comes from the
//! loader's own CPU, its threads' run-queue delay, how late it sent, its descriptors, ports and
//! TIME_WAIT, and what the kernel saw on its sockets.
//!
//! It is pure: `loader verdict DIR` re-judges a saved summary with other [`Limits`].

use crate::report::summary::{Reason, Summary, Verdict};

/// Limits the evidence is held against: DESIGN.md's defaults, overridden by a scenario's
/// `[verdict]` (the same type: scenario validates it, the verdict reads it).
pub use crate::scenario::VerdictLimits as Limits;

/// Sides a reason can name.
pub const LOADER: &str = "loader";
/// The network between loader and target.
pub const NETWORK: &str = "network";
/// The system under test.
pub const TARGET: &str = "target";

/// Late sends (with a connection free) that never invalidate a run on their own, whatever
/// their share: one or two pauses of the host, each recorded from its due time.
pub const ISOLATED_LATE_SENDS: u64 = 2;

/// The loader's own delays (send lag p99, run-queue delay p99) below this, ms, are timer and
/// scheduler noise whatever the target's latency (clean runs here: send lag p99 0.07–0.14 ms,
/// run-queue p99 0.02–0.07 ms from 100 to 30 000 req/s).
///
/// Above it, the loader's own delay p99 may reach `Limits::loader_delay_pct` (25 %) of a
/// phase's latency p99 before it is a material part of the tail it reports: a target answering
/// in 0.2 ms cannot be measured by a loader that is itself 0.5 ms late. (Two busy loops at
/// nice 0 on both cores of the development VM: send lag p99 1.0 ms against a latency p99 of
/// 1.6 ms, seven times the clean run's 0.14 ms — while the absolute limits, 1 ms run-queue
/// and 50 ms send lag, saw nothing.)
pub const MATERIAL_DELAY_FLOOR_MS: f64 = 0.25;
/// Share of a phase's sends that may have waited for a connection (or their own connect)
/// before its send lag stops being the loader's own.
const WAITED_SHARE_MAX: f64 = 0.005;
/// Fewest sends for a phase's p99s to be compared: from 1000 the p99 is the tenth-worst
/// sample, which one or two pauses of the host cannot set (from 100 it would be the worst).
const MIN_SENDS_FOR_P99: u64 = 1_000;

fn reason(code: &str, side: &str, invalidates: bool, value: f64, limit: Option<f64>, detail: String) -> Reason {
    Reason { code: code.into(), side: side.into(), invalidates, value: Some(value), limit, detail }
}

/// Judge `s` against `limits`.
pub fn judge(s: &Summary, limits: &Limits) -> Verdict {
    let mut reasons = Vec::new();
    let measured = || s.phases.iter().filter(|p| p.kind != "warmup");

    if let Some(cpu) = s.loader.cpu_p95
        && cpu > limits.cpu_p95_pct
    {
        reasons.push(reason(
            "loader_cpu",
            LOADER,
            true,
            cpu,
            Some(limits.cpu_p95_pct),
            format!("loader shard threads ran at {cpu:.0}% CPU (p95 over the run), above {:.0}%: the loader was close to saturating itself", limits.cpu_p95_pct),
        ));
    }
    let share = limits.loader_delay_pct / 100.0;
    // The fastest measured phase's latency p99: the tail most easily bent by the loader.
    let fastest_p99 = measured()
        .filter(|p| p.sent >= MIN_SENDS_FOR_P99 && p.latency_ms.p99 > 0.0)
        .map(|p| p.latency_ms.p99)
        .min_by(f64::total_cmp);
    if let Some(rq) = &s.probes.runqueue_us {
        let p99_ms = rq.p99 / 1000.0;
        if p99_ms > limits.runqueue_p99_ms {
            reasons.push(reason(
                "runqueue_delay",
                LOADER,
                true,
                p99_ms,
                Some(limits.runqueue_p99_ms),
                format!("loader threads waited {p99_ms:.2} ms (p99) runnable but not running, above {} ms: something else competed for the loader's CPUs", limits.runqueue_p99_ms),
            ));
        } else if let Some(fastest) = fastest_p99
            && share < 1.0
            && p99_ms >= MATERIAL_DELAY_FLOOR_MS
            && p99_ms >= share * fastest
        {
            reasons.push(reason(
                "runqueue_delay",
                LOADER,
                true,
                p99_ms,
                Some(share * fastest),
                format!("loader threads waited {p99_ms:.2} ms (p99) runnable but not running: {:.0}% of the fastest phase's latency p99 ({fastest:.2} ms), so the loader's own scheduling is a material part of that tail — something else competed for its CPUs", p99_ms / fastest * 100.0),
            ));
        }
    }
    for p in measured() {
        let lag = p.send_lag_ms.p99;
        let lat = p.latency_ms.p99;
        let own_lag = share < 1.0
            && p.sent >= MIN_SENDS_FOR_P99
            && p.waited_for_connection as f64 <= WAITED_SHARE_MAX * p.sent as f64
            && lag >= MATERIAL_DELAY_FLOOR_MS
            && lag >= share * lat;
        if lag > limits.send_lag_p99_ms && p.late_unpooled > 0 {
            reasons.push(reason(
                "send_lag",
                LOADER,
                true,
                lag,
                Some(limits.send_lag_p99_ms),
                format!("{}: send lag p99 {lag:.1} ms above {} ms with connections free: the loader could not keep its schedule", p.name, limits.send_lag_p99_ms),
            ));
        } else if own_lag {
            reasons.push(reason(
                "send_lag",
                LOADER,
                true,
                lag,
                Some(share * lat),
                format!("{}: send lag p99 {lag:.2} ms is {:.0}% of the latency p99 ({lat:.2} ms) with connections free: the loader's own lateness is a material part of the tail it reports", p.name, lag / lat.max(f64::MIN_POSITIVE) * 100.0),
            ));
        }
        let waited = p.late.saturating_sub(p.late_unpooled);
        if waited > 0 {
            reasons.push(reason(
                "pool_exhausted",
                TARGET,
                false,
                waited as f64,
                None,
                format!("{}: {waited} requests left late because every connection was busy (slow answers × rate exceeded the pool); their latency counts from the due time, so the numbers hold, but the target saw fewer concurrent arrivals than planned — raise --connections if that matters", p.name),
            ));
        }
        let dropped = p.errors.get("dropped").copied().unwrap_or(0);
        if dropped > 0 {
            reasons.push(reason(
                "dropped_sends",
                TARGET,
                false,
                dropped as f64,
                None,
                format!("{}: {dropped} requests were never sent: no connection came free within the timeout (recorded at their deadline)", p.name),
            ));
        }
    }

    // Late sends with a connection free, over the measured run: a few isolated ones (the host
    // paused the loader once or twice) are recorded from their due time and touch one or two
    // samples; a share of them means the loader could not keep its schedule. Both conditions,
    // because at a low rate one pause is already a large share of a short run (1 of 20 sends
    // is 5 %) without saying anything about the loader's schedule.
    let late: u64 = measured().map(|p| p.late_unpooled).sum();
    let sent: u64 = measured().map(|p| p.sent).sum();
    let lag_reported = reasons.iter().any(|r| r.code == "send_lag");
    if late > 0 && !lag_reported {
        let pct = late as f64 * 100.0 / sent.max(1) as f64;
        let invalidates = pct > limits.late_sends_pct && late > ISOLATED_LATE_SENDS;
        let why = if invalidates {
            "the loader fell behind its own schedule"
        } else {
            "isolated pauses of the loader; their latency still counts from the due time"
        };
        let phases: Vec<&str> = measured().filter(|p| p.late_unpooled > 0).map(|p| p.name.as_str()).collect();
        reasons.push(reason(
            "late_sends",
            LOADER,
            invalidates,
            pct,
            Some(limits.late_sends_pct),
            format!(
                "{late} requests ({pct:.3} % of sends; in {}) left more than 10 ms late while a connection was free: {why}",
                phases.join(", ")
            ),
        ));
    }

    let live_tw = s.probes.time_wait.as_ref().map(|t| t.max_live).or(s.health.peaks.time_wait_max);
    if let Some(tw) = live_tw
        && tw > limits.time_wait
    {
        reasons.push(reason(
            "time_wait",
            LOADER,
            true,
            tw as f64,
            Some(limits.time_wait as f64),
            format!(
                "{tw} sockets in TIME_WAIT, above {}: connections are not reused and ports pile up on the load machine",
                limits.time_wait
            ),
        ));
    }
    let ports = s.probes.ephemeral_ports_max_ratio.or(s.health.peaks.ephemeral_ports_max_ratio);
    if let Some(r) = ports
        && r * 100.0 > limits.ephemeral_ports_pct
    {
        reasons.push(reason(
            "ephemeral_ports",
            LOADER,
            true,
            r * 100.0,
            Some(limits.ephemeral_ports_pct),
            format!(
                "{:.0}% of the ephemeral port range in use, above {:.0}%: new connections will soon wait for ports",
                r * 100.0,
                limits.ephemeral_ports_pct
            ),
        ));
    }
    if let Some(r) = s.health.peaks.fds_max_ratio
        && r * 100.0 > limits.fds_pct
    {
        reasons.push(reason(
            "fds",
            LOADER,
            true,
            r * 100.0,
            Some(limits.fds_pct),
            format!("{:.0}% of the file-descriptor limit in use, above {:.0}%", r * 100.0, limits.fds_pct),
        ));
    }
    if let Some(ms) = s.health.peaks.cgroup_throttled_ms {
        let per_s = ms / s.run.elapsed_s.max(1.0);
        if per_s > limits.throttled_ms_per_s {
            reasons.push(reason(
                "cgroup_throttled",
                LOADER,
                true,
                per_s,
                Some(limits.throttled_ms_per_s),
                format!("the loader's cgroup was CPU-throttled {ms:.0} ms in all ({per_s:.1} ms/s): its CPU limit is too low for this load"),
            ));
        }
    }
    let pool = s.run.connections as f64;
    let opened = s.run.connections_opened as f64;
    if s.run.keepalive && opened > pool * limits.churn_ratio {
        reasons.push(reason(
            "connection_churn",
            TARGET,
            false,
            opened / pool,
            Some(limits.churn_ratio),
            format!("{} connections opened for a pool of {}: the server closed keep-alive connections (or they failed), so some latencies include a connect", s.run.connections_opened, s.run.connections),
        ));
    }
    if let Some(n) = s.probes.syn_retransmits
        && n > 0
    {
        reasons.push(reason(
            "syn_retransmits",
            NETWORK,
            false,
            n as f64,
            None,
            format!("{n} SYNs of loader connections were retransmitted (the target's backlog or the network dropped them); each costs the connect ≥ 1 s"),
        ));
    }
    if let Some(r) = &s.probes.resets
        && r.received > 0
    {
        reasons.push(reason(
            "resets_received",
            TARGET,
            false,
            r.received as f64,
            None,
            format!("the target reset {} loader connections", r.received),
        ));
    }
    if let Some(c) = &s.probes.connect_ms
        && c.failed > 0
    {
        reasons.push(reason(
            "connect_failures",
            TARGET,
            false,
            c.failed as f64,
            None,
            format!("{} loader connects failed in the kernel (refused or timed out)", c.failed),
        ));
    }
    if !s.probes.available {
        reasons.push(Reason {
            code: "probes_unavailable".into(),
            side: LOADER.into(),
            invalidates: false,
            value: None,
            limit: None,
            detail: format!(
                "kernel probes did not run ({}); the verdict rests on /proc figures only",
                s.probes.unavailable_reason.as_deref().unwrap_or("unknown reason")
            ),
        });
    }
    if let Some(cert) = &s.loader.certificate
        && cert.ratio * 100.0 > limits.cert_ceiling_pct
    {
        // Above 70 % of a ceiling the loader is out of certified headroom: invalidates. Above
        // 70 % of a lower bound the headroom is unproven, not known to be missing: annotates
        // (the loader's own CPU, run-queue and lateness still judge it).
        let detail = if cert.lower_bound {
            format!(
                "the run reached {:.0}% of the {:.0} req/s this machine is certified for, above {:.0}%; that figure is a lower bound (its calibration was limited by the target), so the loader's headroom above it is unproven — calibrate against a faster target to know it",
                cert.ratio * 100.0,
                cert.ceiling_rps,
                limits.cert_ceiling_pct
            )
        } else {
            format!(
                "the run reached {:.0}% of this machine's certified ceiling ({:.0} req/s), above {:.0}%",
                cert.ratio * 100.0,
                cert.ceiling_rps,
                limits.cert_ceiling_pct
            )
        };
        reasons.push(reason(
            "cert_ceiling",
            LOADER,
            !cert.lower_bound,
            cert.ratio * 100.0,
            Some(limits.cert_ceiling_pct),
            detail,
        ));
    }
    // TLS handshakes crowding out the work: little connection reuse while the loader itself
    // was short of CPU or fell behind. Each full or resumed handshake costs the loader far
    // more CPU than a request on a warm connection (~150 µs resumed on the bench machine).
    if let Some(tls) = &s.tls {
        let sent: u64 = s.phases.iter().map(|p| p.sent).sum();
        let loader_short = reasons.iter().any(|r| r.side == LOADER && r.invalidates);
        if sent > 0 && tls.handshakes * 2 >= sent && loader_short {
            let per_s = tls.handshakes as f64 / s.run.elapsed_s.max(1.0);
            reasons.push(reason(
                "tls_handshakes",
                LOADER,
                true,
                per_s,
                None,
                format!(
                    "{} TLS handshakes ({per_s:.0}/s, {} resumed) for {sent} requests while the loader was short of CPU: handshakes dominate its work — keep connections alive, or spread the load over more machines",
                    tls.handshakes, tls.resumed
                ),
            ));
        }
    }
    let trusted = !reasons.iter().any(|r| r.invalidates);
    Verdict { trusted: Some(trusted), reasons }
}

#[cfg(test)]
mod tests;
