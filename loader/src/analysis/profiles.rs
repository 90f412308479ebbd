//! What a spike or a soak run is for, beyond steps and knees.
//!
//! - Spike: after the peak, how long until the target serves the base rate cleanly again —
//!   the first second of the `recovery` phase from which, for [`RECOVERED_FOR`] seconds, no
//!   request fails and both sends and answers track the offered rate within the criteria's
//!   goodput share. While a backlog from the peak drains, answers (and delayed sends) run
//!   *above* the offered rate, so goodput alone would call a draining target recovered.
//! - Soak: the loader's own drift from start to end (memory, descriptors), so a slow leak on
//!   the load machine is not mistaken for the target degrading.

use crate::summary::{PhaseSummary, SecondSummary, SoakSummary, SpikeSummary, Summary};

/// Seconds of clean service that count as recovered.
pub const RECOVERED_FOR: usize = 3;

fn phase<'a>(phases: &'a [PhaseSummary], name: &str) -> Option<&'a PhaseSummary> {
    phases.iter().find(|p| p.name == name)
}

/// The spike figures, if the run has a `recovery` phase.
pub fn spike(phases: &[PhaseSummary], series: &[SecondSummary], goodput_min: f64) -> Option<SpikeSummary> {
    let recovery = phase(phases, "recovery")?;
    let first = recovery.start_s.ceil() as u64;
    let end = (recovery.start_s + recovery.duration_s).floor() as u64;
    let tracks = |n: u64, offered: u64| {
        let (n, o) = (n as f64, offered as f64);
        n >= goodput_min * o && n <= o / goodput_min
    };
    let clean = |s: &SecondSummary| {
        s.offered > 0 && s.errors.values().sum::<u64>() == 0 && tracks(s.ok, s.offered) && tracks(s.sent, s.offered)
    };
    let window: Vec<&SecondSummary> = series.iter().filter(|s| s.t >= first && s.t < end).collect();
    let time_to_recover_s =
        window.windows(RECOVERED_FOR).find(|w| w.iter().all(|s| clean(s))).map(|w| w[0].t.saturating_sub(first));
    Some(SpikeSummary {
        time_to_recover_s,
        base_p99_ms: phase(phases, "base").map(|p| p.latency_ms.p99),
        peak_p99_ms: phase(phases, "peak").map(|p| p.latency_ms.p99),
        recovery_p99_ms: Some(recovery.latency_ms.p99),
    })
}

/// The soak figures of a finished summary.
pub fn soak(s: &Summary) -> SoakSummary {
    let fds: Vec<u64> = s.health.series.iter().filter_map(|h| h.fds).collect();
    SoakSummary {
        rss_mib_start: s.loader.rss_mib_start,
        rss_mib_end: s.loader.rss_mib_end,
        fds_start: fds.first().copied(),
        fds_end: fds.last().copied(),
        connections_opened: s.run.connections_opened,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn second(t: u64, offered: u64, ok: u64, errors: u64) -> SecondSummary {
        let mut e = BTreeMap::new();
        if errors > 0 {
            e.insert("http_5xx".to_string(), errors);
        }
        SecondSummary {
            t,
            offered,
            sent: offered,
            ok,
            errors: e,
            in_flight_max: 1,
            late_loader: 0,
            cpu: None,
            latency_ms: None,
            ..Default::default()
        }
    }

    fn recovery_phase(start_s: f64, duration_s: f64) -> PhaseSummary {
        let mut p: PhaseSummary = serde_json::from_value(serde_json::json!({
            "name": "recovery", "kind": "hold", "start_s": start_s, "duration_s": duration_s,
            "offered_rps": 100.0, "sent_rps": 100.0, "ok_rps": 100.0, "requests": 1000, "sent": 1000, "ok": 1000,
            "errors": {}, "late": 0, "waited_for_connection": 0,
            "latency_ms": {"p50": 1.0, "p90": 1.0, "p95": 1.0, "p99": 40.0, "p999": 1.0, "max": 1.0, "mean": 1.0, "count": 1000},
            "service_ms": {"p50": 1.0, "p90": 1.0, "p95": 1.0, "p99": 1.0, "p999": 1.0, "max": 1.0, "mean": 1.0, "count": 1000},
            "send_lag_ms": {"p50": 0.0, "p99": 0.0, "max": 0.0}, "passed": null, "fail_reasons": []
        }))
        .unwrap();
        p.start_s = start_s;
        p
    }

    #[test]
    fn recovery_is_the_first_of_three_clean_seconds() {
        let phases = vec![recovery_phase(10.0, 10.0)];
        let mut series: Vec<SecondSummary> = (0..10).map(|t| second(t, 100, 100, 0)).collect();
        // Recovery starts at 10: two bad seconds, one good, one bad, then clean from 14.
        for (t, ok, err) in [(10, 40, 30), (11, 80, 5), (12, 100, 0), (13, 90, 1)] {
            series.push(second(t, 100, ok, err));
        }
        series.extend((14..20).map(|t| second(t, 100, 99, 0)));
        let s = spike(&phases, &series, 0.97).unwrap();
        assert_eq!(s.time_to_recover_s, Some(4));
        // A backlog draining (answers well above the offered rate) is not recovery.
        let draining: Vec<SecondSummary> = (10..20).map(|t| second(t, 100, 180, 0)).collect();
        assert_eq!(spike(&phases, &draining, 0.97).unwrap().time_to_recover_s, None);
        assert_eq!(s.recovery_p99_ms, Some(40.0));
    }

    #[test]
    fn never_recovered_is_null_and_no_recovery_phase_is_none() {
        let phases = vec![recovery_phase(0.0, 5.0)];
        let series: Vec<SecondSummary> = (0..5).map(|t| second(t, 100, 50, 0)).collect();
        assert_eq!(spike(&phases, &series, 0.97).unwrap().time_to_recover_s, None);
        assert!(spike(&[], &series, 0.97).is_none());
    }
}
