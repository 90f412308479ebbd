//! The probes' readings at the end of a run as `summary.probes`: a probe that did not run
//! reads as null, never as a measured zero, and `availability` says why it did not.

use crate::probes::Probes;
use crate::summary::{self, ProbeSummary};

/// `summary.probes` from the attached probes, or why there are none.
pub(super) fn probe_summary(probes: Option<&Probes>, reason: Option<String>) -> ProbeSummary {
    let Some(p) = probes else {
        return ProbeSummary { available: false, unavailable_reason: reason, ..Default::default() };
    };
    let r = match p.readings() {
        Ok(r) => r,
        Err(e) => {
            return ProbeSummary {
                available: false,
                unavailable_reason: Some(format!("reading probe maps failed: {}", crate::error::one_line(&e))),
                ..Default::default()
            };
        }
    };
    // A probe that did not run reads as null, never as a measured zero; `availability` says
    // why it did not.
    let ok = |name: &str| r.availability.get(name).is_some_and(|v| v == "ok");
    let run_queue = |h: &crate::probes::RunqueueUs| summary::RunQueueUs {
        p50: h.p50.unwrap_or(0.0),
        p99: h.p99.unwrap_or(0.0),
        max: h.max.unwrap_or(0.0),
        count: h.count,
        buckets: h.buckets.clone(),
    };
    ProbeSummary {
        available: true,
        unavailable_reason: None,
        connect_ms: ok("connect_latency").then(|| summary::ConnectMs {
            p50: r.connect_ms.p50.unwrap_or(0.0),
            p99: r.connect_ms.p99.unwrap_or(0.0),
            max: r.connect_ms.max.unwrap_or(0.0),
            count: r.connect_ms.count,
            failed: r.connect_ms.failed,
        }),
        syn_retransmits: ok("syn_retransmits").then_some(r.syn_retransmits),
        resets: (ok("resets_received") || ok("resets_sent"))
            .then_some(summary::Resets { sent: r.resets.sent, received: r.resets.received }),
        time_wait: ok("time_wait").then(|| summary::TimeWait {
            entries: r.time_wait.entries,
            max_live: r.time_wait.max_live.unwrap_or(0),
            host_max_live: r.time_wait.host_max_live,
            own_choice_max: None,
        }),
        ephemeral_ports_max_ratio: ok("time_wait").then_some(r.ephemeral_ports_max_ratio).flatten(),
        host_ephemeral_ports_max_ratio: r.host_ephemeral_ports_max_ratio,
        tls_handshakes: ok("tls_handshakes").then(|| r.tls_handshakes.completed()),
        tls_handshake_ms: ok("tls_handshakes").then(|| {
            let t = &r.tls_handshakes;
            summary::ProbeHandshakeMs {
                p50: t.histogram.p50_ms().unwrap_or(0.0),
                p99: t.histogram.p99_ms().unwrap_or(0.0),
                max: t.histogram.max_ms().unwrap_or(0.0),
                count: t.completed(),
                resumed: t.resumed,
                failed: t.failed,
                started: t.started,
            }
        }),
        runqueue_us: ok("runqueue").then(|| run_queue(&r.runqueue_us)),
        runqueue_other_us: ok("runqueue").then(|| run_queue(&r.runqueue_other_us)),
        tcp_states: ok("tcp_states").then(|| r.tcp_states.clone()),
        lost: Some(r.lost),
        retransmits: ok("syn_retransmits").then_some(r.retransmits),
        drops: ok("drops").then(|| r.drops.clone()),
        lost_by_reason: Some(r.lost_by_reason.clone()),
        loss_share: Some(r.loss_share),
        availability: Some(r.availability.clone()),
        series: p.series().cloned().collect(),
    }
}
