//! The machine's rules: the hypervisor's steal, cgroup throttling, sockets and ports,
//! connection churn, TLS handshakes.

use super::*;
use crate::health::HealthSample;

#[test]
fn the_hypervisors_steal_on_the_loaders_cores_invalidates_like_throttling() {
    // 8 s at 30,000 req/s on this VM in a heavy-steal spell: 1,970 ms taken from 2 cores.
    let mut s = clean();
    s.run.elapsed_s = 8.0;
    s.health.peaks.steal_ms = Some(1970.0);
    s.health.peaks.loader_steal_ms = Some(1970.0);
    s.health.peaks.loader_cores = Some(2);
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(false), vec!["host_steal"]));
    let r = &v.reasons[0];
    assert_eq!((r.side.as_str(), r.limit), (LOADER, Some(50.0)));
    assert!((r.value.unwrap() - 123.125).abs() < 1e-9, "{:?}", r.value);
    assert!(r.detail.contains("1970 ms from the loader's 2 core(s)"), "{}", r.detail);
    // CI, a stepped run of ~20 s: 590 ms from 2 cores (14.4 ms/s per core) — noted, and the
    // run stays trusted (its knees were where they belong).
    s.run.elapsed_s = 20.5;
    s.health.peaks.loader_steal_ms = Some(590.0);
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(true), vec!["host_steal"]));
    assert_eq!((v.reasons[0].invalidates, v.reasons[0].limit), (false, Some(10.0)));
    // A few ticks (30 ms in 10 s on 2 cores: 1.5 ms/s per core) say nothing on their own,
    // nor does steal on cores the loader may not use.
    s.run.elapsed_s = 10.0;
    s.health.peaks.loader_steal_ms = Some(30.0);
    assert!(judge(&s, &Limits::default()).reasons.is_empty());
    s.health.peaks.loader_steal_ms = Some(0.0);
    s.health.peaks.steal_ms = Some(5000.0);
    assert!(judge(&s, &Limits::default()).reasons.is_empty());
}

#[test]
fn steal_that_cannot_move_the_latencies_is_a_note() {
    // CI: a listener that never accepts, every request timing out at 3 s, the run stopped at
    // 3.3 s; 200 ms taken from the loader's one core (up to 100 ms in one second), send lag
    // p99 0.04 ms. A request at the p99 lasted 3 s: paused 400 ms at most, under 25 % of it.
    let mut s = clean();
    s.run.elapsed_s = 3.3;
    s.phases[0].latency_ms.p99 = 3000.0;
    s.health.peaks.loader_steal_ms = Some(200.0);
    (s.health.peaks.loader_cores, s.health.peaks.loader_cpus) = (Some(1), vec![0]);
    s.health.series = [40.0, 100.0, 60.0]
        .iter()
        .enumerate()
        .map(|(t, &ms)| HealthSample { t: t as u64 + 1, core_steal_ms: vec![ms, 0.0], ..Default::default() })
        .collect();
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(true), vec!["host_steal"]));
    let r = &v.reasons[0];
    assert!(!r.invalidates && r.side == LOADER, "{r:?}");
    assert!(
        r.detail.contains("at most 100 ms in one second") && r.detail.contains("paused 400 ms at most"),
        "{}",
        r.detail
    );
    // The same steal under a target that answers in 1 ms: a pause of 100 ms is the p99 — the
    // loader's, invalidating.
    s.phases[0].latency_ms.p99 = 1.0;
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(false), vec!["host_steal"]));
    assert!(v.reasons[0].detail.contains("every delay it measured"), "{}", v.reasons[0].detail);
    // A p99 of 700 ms (the target's queue): 100 ms twice is 200 ms, above 25 % of it.
    s.phases[0].latency_ms.p99 = 700.0;
    assert_eq!(judge(&s, &Limits::default()).trusted, Some(false));
    // Steal on the other core, where the loader may not run, says nothing of it.
    for x in &mut s.health.series {
        x.core_steal_ms.swap(0, 1);
    }
    s.health.peaks.loader_steal_ms = Some(0.0);
    assert!(judge(&s, &Limits::default()).reasons.is_empty());
}

#[test]
fn throttling_that_made_sends_late_invalidates_under_its_own_limit() {
    // CI: a 10 % quota on a loader using 8.5 % at 5,000 req/s for 8 s: throttled 17 ms in
    // all, 37 of 30,000 sends more than 10 ms late, 20 ms of steal beside it.
    let mut s = clean();
    s.run.elapsed_s = 8.0;
    (s.phases[0].sent, s.phases[0].late, s.phases[0].late_unpooled) = (30_000, 37, 37);
    s.phases[0].late_unpooled_max_ms = Some(17.3);
    s.phases[0].latency_ms.p99 = 0.05;
    s.health.peaks.cgroup_throttled_ms = Some(17.0);
    (s.health.peaks.steal_ms, s.health.peaks.steal_max_ms_per_s) = (Some(20.0), Some(10.0));
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(false), vec!["late_sends", "cgroup_throttled"]));
    let (late, thr) = (&v.reasons[0], &v.reasons[1]);
    assert!(
        late.detail.contains("CPU-throttled 17 ms during the run") && !late.detail.contains("steal"),
        "{}",
        late.detail
    );
    assert!(
        thr.invalidates && thr.side == LOADER && thr.detail.contains("sends show it (late_sends)"),
        "{}",
        thr.detail
    );
    assert!((thr.value.unwrap() - 2.125).abs() < 1e-9, "{:?}", thr.value);
    // The same throttling with every send on time says nothing: no number moved.
    let mut on_time = s.clone();
    (on_time.phases[0].late, on_time.phases[0].late_unpooled) = (0, 0);
    assert!(judge(&on_time, &Limits::default()).reasons.is_empty());
    // Above the limit (100 ms in 8 s) it invalidates on its own, sends late or not.
    on_time.health.peaks.cgroup_throttled_ms = Some(100.0);
    let v = judge(&on_time, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(false), vec!["cgroup_throttled"]));
    assert!(v.reasons[0].detail.contains("its CPU limit is too low"), "{}", v.reasons[0].detail);
    // Without throttling, the late sends name the steal, and no throttling is invented.
    s.health.peaks.cgroup_throttled_ms = Some(0.0);
    let v = judge(&s, &Limits::default());
    assert_eq!(codes(&v), ["late_sends"]);
    assert!(v.reasons[0].detail.contains("steal"), "{}", v.reasons[0].detail);
}

#[test]
fn host_wide_figures_annotate_and_the_loaders_own_limits_invalidate() {
    // Without probes, /proc's TIME_WAIT and ports are the namespace's: they cannot say whose.
    let mut s = clean();
    s.health.peaks.time_wait_max = Some(12_000);
    s.health.peaks.ephemeral_ports_max_ratio = Some(0.75);
    s.health.peaks.fds_max_ratio = Some(0.9);
    let v = judge(&s, &Limits::default());
    assert_eq!(codes(&v), ["host_time_wait", "host_ephemeral_ports", "fds"]);
    assert_eq!(v.trusted, Some(false), "descriptors are the loader's own");
    assert!(v.reasons[..2].iter().all(|r| !r.invalidates));
}

#[test]
fn a_neighbours_time_wait_is_not_the_loaders() {
    // Issue 9: 9,171 TIME_WAIT sockets on the host, 8 of them the loader's.
    let mut s = clean();
    s.probes.time_wait =
        Some(crate::summary::TimeWait { entries: 8, max_live: 8, host_max_live: Some(9171), own_choice_max: None });
    s.probes.ephemeral_ports_max_ratio = Some(0.001);
    s.probes.host_ephemeral_ports_max_ratio = Some(0.32);
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(true), vec!["host_time_wait"]));
    assert!(v.reasons[0].detail.contains("loader's own were at most 8"), "{}", v.reasons[0].detail);
    // The loader's own TIME_WAIT above the limit invalidates.
    s.probes.time_wait = Some(crate::summary::TimeWait {
        entries: 9000,
        max_live: 6000,
        host_max_live: Some(9171),
        own_choice_max: None,
    });
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(false), vec!["time_wait"]));
}

#[test]
fn the_loader_short_of_ports_invalidates_whoever_holds_them() {
    let mut s = clean();
    s.probes.ephemeral_ports_max_ratio = Some(0.05);
    s.probes.host_ephemeral_ports_max_ratio = Some(0.99);
    s.run.connect_no_port = 40;
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(false), vec!["ports_exhausted"]));
    // The probe counts each of those connects failed (SYN_SENT, then CLOSE, with no port):
    // the loader's, not the target's (CI's port-exhaustion row noted them on the target).
    s.probes.connect_ms = Some(crate::summary::ConnectMs { p50: 0.05, p99: 0.2, max: 0.3, count: 300, failed: 40 });
    let v = judge(&s, &Limits::default());
    assert_eq!((v.trusted, codes(&v)), (Some(false), vec!["ports_exhausted"]));
    // Refused connects beside them are the target's, and only those are counted on its side.
    s.probes.connect_ms.as_mut().unwrap().failed = 55;
    let v = judge(&s, &Limits::default());
    let theirs = v.reasons.iter().find(|r| r.code == "connect_failures").expect("a connect_failures note");
    assert_eq!((theirs.side.as_str(), theirs.value, theirs.invalidates), ("target", Some(15.0), false));
    assert!(theirs.detail.contains("40 more were the loader's own"), "{}", theirs.detail);
    s.probes.connect_ms = None;
    s.run.connect_no_port = 0;
    assert_eq!(codes(&judge(&s, &Limits::default())), ["host_ephemeral_ports"]);
    s.probes.ephemeral_ports_max_ratio = Some(0.7);
    assert_eq!(codes(&judge(&s, &Limits::default())), ["ephemeral_ports"]);
}

#[test]
fn churn_on_a_keepalive_run_is_annotated() {
    let mut s = clean();
    s.run.connections_opened = 1000;
    let v = judge(&s, &Limits::default());
    assert_eq!(codes(&v), ["connection_churn"]);
    s.run.keepalive = false;
    assert!(judge(&s, &Limits::default()).reasons.is_empty(), "no keep-alive: churn is the plan");
}

#[test]
fn tls_handshakes_are_named_when_they_crowd_out_the_loader() {
    let mut s = clean();
    s.tls = Some(crate::summary::TlsSummary { handshakes: 200, resumed: 190, ..Default::default() });
    // Handshakes on every request, but the loader had CPU to spare: nothing to say.
    assert!(judge(&s, &Limits::default()).reasons.is_empty());
    // The same with the loader short of CPU: the handshakes are named, on the loader side.
    s.loader.cpu_p95 = Some(95.0);
    let v = judge(&s, &Limits::default());
    assert_eq!(codes(&v), ["loader_cpu", "tls_handshakes"]);
    assert!(v.reasons[1].side == LOADER && v.reasons[1].invalidates);
    // With connections reused (few handshakes), CPU trouble is not blamed on TLS.
    s.tls = Some(crate::summary::TlsSummary { handshakes: 8, ..Default::default() });
    assert_eq!(codes(&judge(&s, &Limits::default())), ["loader_cpu"]);
}
