//! The load machine's resources: CPU, TIME_WAIT, ephemeral ports, descriptors, cgroup
//! throttling, connection churn, the certified ceiling, TLS handshakes.
//!
//! TIME_WAIT and ports are judged on the loader's own sockets when the probes count them
//! (`probes.time_wait.max_live`, `probes.ephemeral_ports_max_ratio`): a neighbour's TIME_WAIT
//! on the same host is a note (`host_time_wait`, `host_ephemeral_ports`), and the loader is
//! held short of ports only when it was (its own share above the limit, or connects that
//! failed for want of a local port). Without probes the host-wide `/proc` figures are all
//! there is: they annotate, since they cannot say whose sockets they are.

use super::{LOADER, Limits, TARGET, reason};
use crate::summary::{Reason, Summary};

/// Shard CPU p95 (percent of one core) above which the loader has no headroom left, whatever
/// its timing says — also the edge calibration certifies up to.
pub const CPU_SATURATED_PCT: f64 = 90.0;

/// The busiest shard's CPU. Above `Limits::cpu_p95_pct` (70) the loader is short of headroom,
/// which is a prediction of late sends; the engine measures its sends directly (send lag, late
/// sends) and the kernel stamps every response as it arrives, so a late read moves no latency.
/// So above the limit the CPU invalidates when the loader's own timing shows it (a `send_lag`
/// or `late_sends` reason that invalidates), or when it is above [`CPU_SATURATED_PCT`]; with
/// every send on time it annotates. Runs after the delay rules, whose reasons it reads.
/// (A clean 10,000 req/s run on one shard of the 2-core VM runs at 57–70 % — the wake-up per
/// send is most of it — with a send lag p99 of 0.08 ms: that is not a saturated loader.)
pub fn cpu(s: &Summary, limits: &Limits, reasons: &mut Vec<Reason>) {
    let Some(cpu) = s.loader.cpu_p95 else { return };
    if cpu <= limits.cpu_p95_pct {
        return;
    }
    let late = super::delay::sends_show_it(reasons);
    let (invalidates, why) = match late {
        Some(r) => (true, format!("the loader was close to saturating itself, and its sends show it ({})", r.code)),
        None if cpu > CPU_SATURATED_PCT => {
            (true, format!("above {CPU_SATURATED_PCT:.0}% the loader has no headroom left for a burst, on time or not"))
        }
        None => (
            false,
            "little headroom left, but every send kept its schedule (no send-lag or late-send finding): the numbers hold; more --threads or a lower rate keeps a margin".to_string(),
        ),
    };
    reasons.push(reason(
        "loader_cpu",
        LOADER,
        invalidates,
        cpu,
        Some(limits.cpu_p95_pct),
        format!(
            "the busiest loader shard ran at {cpu:.0}% CPU (p95 over the run), above {:.0}%: {why}",
            limits.cpu_p95_pct
        ),
    ));
}

/// Sockets, descriptors, throttling.
pub fn judge(s: &Summary, limits: &Limits, reasons: &mut Vec<Reason>) {
    time_wait(s, limits, reasons);
    ports(s, limits, reasons);
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
    steal(s, limits, reasons);
    let pool = s.run.connections as f64;
    let opened = s.run.connections_opened as f64;
    if s.run.keepalive && opened > pool * limits.churn_ratio {
        reasons.push(reason(
            "connection_churn",
            TARGET,
            false,
            opened / pool,
            Some(limits.churn_ratio),
            format!(
                "{} connections opened for a pool of {}: {}, so some latencies include a connect",
                s.run.connections_opened,
                s.run.connections,
                who_closed(s)
            ),
        ));
    }
}

/// Who closed the connections a churning run had to open again.
fn who_closed(s: &Summary) -> String {
    let (timeouts, target) = (s.run.closed_on_timeout, s.run.closed_by_target);
    match (timeouts, target) {
        (0, 0) => "the server closed keep-alive connections (or they failed)".to_string(),
        _ => format!(
            "the loader closed {timeouts} after their requests timed out (the target did not answer within {}), the target closed or reset {target}",
            secs(s.run.timeout_s)
        ),
    }
}

/// The loader's cgroup CPU-throttled (its `cpu.max` or CFS quota spent before the period
/// ended: every thread stopped until the next one). Above `Limits::throttled_ms_per_s` it
/// invalidates on its own; below it, when the sends show a delay (`sends_late`: the code of an
/// invalidating send-lag or late-send reason) — one throttled spell stops the shards for the
/// rest of the period, and the limit is the user's to raise. Judged after the sends for that.
/// (CI: a 10 % quota on a loader using 8.5 % at 5,000 req/s: throttled 17 ms over the run,
/// 2.1 ms/s, and 37 sends more than 10 ms late — blamed on 20 ms of steal.)
pub fn throttling(s: &Summary, limits: &Limits, sends_late: Option<&str>, reasons: &mut Vec<Reason>) {
    let Some(ms) = s.health.peaks.cgroup_throttled_ms.filter(|&ms| ms > 0.0) else { return };
    let per_s = ms / s.run.elapsed_s.max(1.0);
    let why = if per_s > limits.throttled_ms_per_s {
        "its CPU limit is too low for this load".to_string()
    } else if let Some(code) = sends_late {
        format!(
            "under the {} ms/s that invalidate on their own, but the sends show it ({code}): each throttled period stops every thread of the loader until the next — its CPU limit is too low for this load",
            limits.throttled_ms_per_s
        )
    } else {
        return;
    };
    reasons.push(reason(
        "cgroup_throttled",
        LOADER,
        true,
        per_s,
        Some(limits.throttled_ms_per_s),
        format!("the loader's cgroup was CPU-throttled {ms:.0} ms in all ({per_s:.1} ms/s): {why}"),
    ));
}

/// Steal on the loader's cores, ms per second per core, from which it invalidates a run on
/// its own: 5 % of each core. Below it (and above the throttling limit) it is noted, and the
/// delay rules judge what it did to the sends — they name the steal when they find the loader
/// not running. (This VM: heavy-steal spells of 120+ ms/s per core gave send lag p99 up to
/// 67 ms and an emptied pool, which the verdict had laid at the target's door and trusted; a
/// mild one of 14 ms/s per core left a stepped run's knees where they belong.)
pub const STEAL_INVALIDATES_MS_PER_S: f64 = 50.0;

/// The hypervisor's steal on the loader's cores: on a virtual machine, time its host ran
/// something else while a core the loader may use wanted to run — CPU taken away as cgroup
/// throttling takes it, so noted from the same limit, per core of the loader's affinity, and
/// invalidating from [`STEAL_INVALIDATES_MS_PER_S`] — when it could move the latencies
/// measured ([`steal_material`]).
fn steal(s: &Summary, limits: &Limits, reasons: &mut Vec<Reason>) {
    let h = &s.health.peaks;
    let (Some(ms), Some(cores)) = (h.loader_steal_ms, h.loader_cores.filter(|&c| c > 0)) else { return };
    let per_s = ms / f64::from(cores) / s.run.elapsed_s.max(1.0);
    if per_s <= limits.throttled_ms_per_s {
        return;
    }
    let heavy = per_s > STEAL_INVALIDATES_MS_PER_S.max(limits.throttled_ms_per_s);
    let material = steal_material(s, limits.loader_delay_pct / 100.0);
    let invalidates = heavy && material.is_none();
    let effect = match (&material, heavy) {
        (None, true) => "the loader — and every delay it measured — was paused without knowing".to_string(),
        (Some(why), true) => format!("the loader was paused without knowing, but {why}"),
        (_, false) => {
            "the loader was paused without knowing; the send-lag rules judge whether that moved its sends".to_string()
        }
    };
    reasons.push(reason(
        "host_steal",
        LOADER,
        invalidates,
        per_s,
        Some(if heavy { STEAL_INVALIDATES_MS_PER_S } else { limits.throttled_ms_per_s }),
        format!("this virtual machine's host took {ms:.0} ms from the loader's {cores} core(s) during the run ({per_s:.1} ms per second per core, steal): {effect}; a dedicated or bare-metal load machine avoids it"),
    ));
}

/// Why the steal on the loader's cores could not move the latencies measured, if it could
/// not: the most it took from one of them in one second, once for every second a request
/// at the latency p99 lasted and once more, is under `share` of that p99 — the longest any
/// such request can have been paused. `None`: it could (or the figures are missing). A
/// target answering in seconds is not mismeasured by pauses of tens of milliseconds; a run
/// whose p99 is 1 ms is. (CI: a listener that never accepts, every request timing out at
/// 3 s, 60 ms/s of steal and send lag p99 0.04 ms — untrusted on the steal alone.)
fn steal_material(s: &Summary, share: f64) -> Option<String> {
    let cpus = &s.health.peaks.loader_cpus;
    let most = s
        .health
        .series
        .iter()
        .flat_map(|x| cpus.iter().filter_map(|&c| x.core_steal_ms.get(c).copied()))
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))?;
    let p99 = s.phases.iter().filter(|p| p.kind != "warmup").map(|p| p.latency_ms.p99).fold(0.0, f64::max);
    let paused = most * (1.0 + (p99 / 1000.0).ceil());
    (share < 1.0 && p99 > 0.0 && paused < share * p99).then(|| {
        format!(
            "at most {most:.0} ms in one second on one of its cores: a request at the latency p99 ({p99:.0} ms) was paused {paused:.0} ms at most, under {:.0} % of it — the steal cannot move these numbers",
            share * 100.0
        )
    })
}

fn time_wait(s: &Summary, limits: &Limits, reasons: &mut Vec<Reason>) {
    let own = s.probes.time_wait.as_ref();
    let host = own.and_then(|t| t.host_max_live).or(s.health.peaks.time_wait_max);
    if let Some(t) = own
        && t.max_live > limits.time_wait
    {
        // What its own closes left, the target's timeouts taken out (each left one TIME_WAIT
        // socket for 60 s): per second where the series has it, else over the run.
        let timeouts = s.run.closed_on_timeout;
        let own_choice = t
            .own_choice_max
            .or_else(|| super::scope::own_choice_time_wait(s, &super::scope::whole()))
            .unwrap_or_else(|| t.max_live.min(t.entries.saturating_sub(timeouts)));
        if timeouts > 0 && own_choice <= limits.time_wait {
            reasons.push(reason(
                "time_wait_from_timeouts",
                TARGET,
                false,
                t.max_live as f64,
                Some(limits.time_wait as f64),
                format!(
                    "the loader's own sockets held up to {} TIME_WAIT entries, above {}, left by the {timeouts} connections it closed because their requests timed out (no answer within {}): the target's slowness, not connections the loader failed to reuse (at most {own_choice} were its own doing); they limit the load machine only if its ports run short ({}, no connect short of a port)",
                    t.max_live,
                    limits.time_wait,
                    secs(s.run.timeout_s),
                    s.probes.ephemeral_ports_max_ratio.map_or("its port share unknown".to_string(), |r| format!(
                        "its share of the port range peaked at {:.0}%, limit {:.0}%",
                        r * 100.0,
                        limits.ephemeral_ports_pct
                    )),
                ),
            ));
            return;
        }
        let of_which = if timeouts > 0 {
            format!(
                " ({own_choice} of them its own doing, the rest left by {timeouts} closes on the target's timeouts)"
            )
        } else {
            String::new()
        };
        reasons.push(reason(
            "time_wait",
            LOADER,
            true,
            t.max_live as f64,
            Some(limits.time_wait as f64),
            format!(
                "the loader's own sockets held up to {} TIME_WAIT entries, above {}{of_which}: connections are not reused and ports pile up on the load machine",
                t.max_live, limits.time_wait
            ),
        ));
    } else if let Some(tw) = host
        && tw > limits.time_wait
    {
        let whose = match own {
            Some(t) => {
                format!("the loader's own were at most {}: a neighbour (or a local target) left them", t.max_live)
            }
            None => "without the probes the loader's own share is unknown".to_string(),
        };
        reasons.push(reason(
            "host_time_wait",
            LOADER,
            false,
            tw as f64,
            Some(limits.time_wait as f64),
            format!(
                "the load machine held up to {tw} TIME_WAIT sockets, above {}; {whose}. They only matter to the loader if its own connects run short of ports",
                limits.time_wait
            ),
        ));
    }
}

/// `3 s`, `500 ms`: a timeout as the user gave it.
fn secs(s: f64) -> String {
    if s >= 1.0 { format!("{s} s") } else { format!("{:.0} ms", s * 1000.0) }
}

/// What made the loader short of ports, when the target's timeouts did: a clause for the
/// port reasons, with what to do about it. Empty when the loader closed nothing on timeouts.
fn timeout_cause(s: &Summary) -> String {
    match s.run.closed_on_timeout {
        0 => String::new(),
        n => format!(
            " — the target's timeouts made the loader close {n} connections, each leaving a port in TIME_WAIT for 60 s: a longer --timeout (fewer closes a second), net.ipv4.tcp_tw_reuse=1, or more source addresses"
        ),
    }
}

fn ports(s: &Summary, limits: &Limits, reasons: &mut Vec<Reason>) {
    let own = s.probes.ephemeral_ports_max_ratio;
    let host = s.probes.host_ephemeral_ports_max_ratio.or(s.health.peaks.ephemeral_ports_max_ratio);
    if s.run.connect_no_port > 0 {
        reasons.push(reason(
            "ports_exhausted",
            LOADER,
            true,
            s.run.connect_no_port as f64,
            None,
            format!(
                "{} of the loader's connects failed for want of a local port (EADDRNOTAVAIL): the load machine ran out of ephemeral ports — reuse connections, widen ip_local_port_range or spread the load{}",
                s.run.connect_no_port,
                timeout_cause(s)
            ),
        ));
    }
    if let Some(r) = own
        && r * 100.0 > limits.ephemeral_ports_pct
    {
        reasons.push(reason(
            "ephemeral_ports",
            LOADER,
            true,
            r * 100.0,
            Some(limits.ephemeral_ports_pct),
            format!(
                "the loader itself held {:.0}% of the ephemeral port range (open sockets and its own TIME_WAIT), above {:.0}%: new connections will soon wait for ports{}",
                r * 100.0,
                limits.ephemeral_ports_pct,
                timeout_cause(s)
            ),
        ));
    } else if let Some(r) = host
        && r * 100.0 > limits.ephemeral_ports_pct
        && s.run.connect_no_port == 0
    {
        let whose = match own {
            Some(o) => format!("the loader's own share was {:.0}%", o * 100.0),
            None => "without the probes the loader's own share is unknown".to_string(),
        };
        reasons.push(reason(
            "host_ephemeral_ports",
            LOADER,
            false,
            r * 100.0,
            Some(limits.ephemeral_ports_pct),
            format!(
                "{:.0}% of the ephemeral port range was held on the load machine, above {:.0}%; {whose}, and no connect of the loader failed for want of a port",
                r * 100.0,
                limits.ephemeral_ports_pct
            ),
        ));
    }
}

/// The certified ceiling and TLS handshakes: judged after everything else, because whether
/// handshakes explain a loader short of CPU depends on the other reasons.
pub fn judge_capacity(s: &Summary, limits: &Limits, reasons: &mut Vec<Reason>) {
    if let Some(cert) = &s.loader.certificate
        // To the whole percent: a run at 70 % of the ceiling that sent a few requests more
        // than it offered is still at 70 %.
        && (cert.ratio * 100.0).round() > limits.cert_ceiling_pct
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
}
