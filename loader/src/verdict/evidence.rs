//! What the kernel saw on the wire (network and target evidence) and how complete the
//! probes' own record is (probes that did not run, events they lost).
//!
//! Network and target evidence annotates: a retransmitted SYN or a reset is a finding about
//! the path or the server, which the latency numbers include truthfully. Lost probe events
//! annotate above a small share of the events behind a rule (`probes.loss_share`), and
//! invalidate only when the loss could hide what an invalidating rule checks: above
//! [`LOST_INVALIDATE_SHARE`] of the scheduler events (run-queue waits, whose p99 a lost share
//! can move), or so many socket events that the loader's own TIME_WAIT could be over its
//! limit with every lost event one more entry. (Socket events are few on a keep-alive run —
//! a few hundred — so a share alone would invalidate clean runs for a handful of events the
//! kernel skipped while another BPF program ran on the CPU; ports and connect failures are
//! counted outside the probes.)

use super::{LOADER, Limits, NETWORK, TARGET, reason};
use crate::summary::{Reason, Summary};

/// Lost events above this share of the events counted are noted.
const LOST_NOTE_SHARE: f64 = 0.001;
/// Lost events of a kind above this share of that kind's events invalidate.
const LOST_INVALIDATE_SHARE: f64 = 0.01;

/// Network and target annotations, and the probes' completeness.
pub fn judge(s: &Summary, limits: &Limits, reasons: &mut Vec<Reason>) {
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
    let data_retransmits = s.probes.retransmits.unwrap_or(0).saturating_sub(s.probes.syn_retransmits.unwrap_or(0));
    if data_retransmits > 0 {
        reasons.push(reason(
            "retransmits",
            NETWORK,
            false,
            data_retransmits as f64,
            None,
            format!("{data_retransmits} data segments of loader connections were retransmitted: the network lost packets (or the receiver dropped them), and the requests they carried took at least one retransmission timeout longer"),
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
    // A connect that finds no local port (EADDRNOTAVAIL) enters SYN_SENT before the kernel
    // looks for one and leaves it for CLOSE, so the probe counts it failed too: those are the
    // loader's (`ports_exhausted` names them), and only the rest can be the target's.
    if let Some(c) = &s.probes.connect_ms
        && c.failed > s.run.connect_no_port
    {
        let theirs = c.failed - s.run.connect_no_port;
        let own = match s.run.connect_no_port {
            0 => String::new(),
            n => format!("; {n} more were the loader's own, for want of a local port"),
        };
        reasons.push(reason(
            "connect_failures",
            TARGET,
            false,
            theirs as f64,
            None,
            format!("{theirs} loader connects failed in the kernel (refused or timed out){own}"),
        ));
    }
    completeness(s, limits, reasons);
}

fn completeness(s: &Summary, limits: &Limits, reasons: &mut Vec<Reason>) {
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
        return;
    }
    let missing: Vec<String> = s
        .probes
        .availability
        .iter()
        .flatten()
        .filter(|(name, state)| state.as_str() != "ok" && !name.contains('.'))
        .map(|(name, state)| format!("{name} ({state})"))
        .collect();
    if !missing.is_empty() {
        reasons.push(Reason {
            code: "probe_unavailable".into(),
            side: LOADER.into(),
            invalidates: false,
            value: Some(missing.len() as f64),
            limit: None,
            detail: format!(
                "{} of the probes did not run, so their figures are null and the rules on them were not applied: {}",
                missing.len(),
                missing.join("; ")
            ),
        });
    }
    lost_events(s, limits, reasons);
}

fn lost_events(s: &Summary, limits: &Limits, reasons: &mut Vec<Reason>) {
    let lost = s.probes.lost.unwrap_or(0);
    if lost == 0 {
        return;
    }
    let share = s.probes.loss_share.unwrap_or_default();
    // Each lost socket event hides at most one TIME_WAIT entry of the loader's (a close, or
    // the connect that would have made the socket followed).
    let own_time_wait = s.probes.time_wait.as_ref().map_or(0, |t| t.max_live);
    let time_wait_hidden = share.sockets > LOST_INVALIDATE_SHARE && own_time_wait + lost > limits.time_wait;
    let hides = (share.runqueue > LOST_INVALIDATE_SHARE)
        .then(|| format!("{:.2}% of the run-queue waits of the loader's threads", share.runqueue * 100.0))
        .or_else(|| {
            time_wait_hidden.then(|| format!(
                "{:.2}% of the events on the loader's own sockets: its TIME_WAIT ({own_time_wait} seen) could be over its limit ({}) with them",
                share.sockets * 100.0,
                limits.time_wait
            ))
        });
    if let Some(what) = hides {
        reasons.push(reason(
            "probe_events_lost",
            LOADER,
            true,
            lost as f64,
            Some(LOST_INVALIDATE_SHARE),
            format!("the probes lost {lost} events, {what}: enough to hide what the rules check, so they cannot clear the loader"),
        ));
    } else if share.runqueue.max(share.sockets) > LOST_NOTE_SHARE {
        reasons.push(reason(
            "probe_events_lost",
            LOADER,
            false,
            lost as f64,
            Some(LOST_INVALIDATE_SHARE),
            format!(
                "the probes lost {lost} events ({:.2}% of scheduler events, {:.2}% of socket events); too few to change what the rules read",
                share.runqueue * 100.0,
                share.sockets * 100.0
            ),
        ));
    }
}
