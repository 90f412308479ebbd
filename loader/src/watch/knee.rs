//! The knee explained by what the watched resources did at it (`summary.watch.knee`): the
//! first resource at its ceiling at the knee step or the one after it, with the CPU ceiling
//! the knee step implies — or that none of the watched ones was.
//!
//! Three readings beyond "this one was at its ceiling":
//! - **Shared cores.** Cores (`cpu:1`, a local node_exporter's idle counter of CPU 1) full
//!   while each process on them is far from its own ceiling: the cores are named with each
//!   watched process's share (`CPU 1 full at step 4 (cpu1: CPU 0.98 of 1.00 cores) — pg 0.51,
//!   fpm 0.33, web 0.11 cores`),
//!   and the knee is put against the cores' ceiling, not a process's.
//! - **The cause before the queue.** When CPU and a pool reach their ceilings in the same
//!   step, the CPU is named (the workers were busy working) and the pool beside it.
//! - **A pool that waited.** A pool at its limit while every watched CPU was under half its
//!   ceiling: the workers were waiting (a lock, a downstream, I/O), not working — the pool
//!   is where the queue formed, not necessarily the cause, and more workers may change
//!   nothing.
//!
//! Owns: choosing the resource and the sentence. Does not: compute a step's figures or
//! decide what is at its ceiling (`steps.rs`), or find the knee (`analysis`).

use crate::summary::{PhaseSummary, Summary, WatchShare, WatchSource, WatchStep, WatchSummary};

/// Every watched CPU under this share of its ceiling while a pool sat at its limit: its
/// workers were waiting, not working.
pub const WAITING_SHARE: f64 = 0.5;

/// CPU on shared cores that the watched sharers leave unexplained, cores, from which it is
/// named as "the rest".
pub const UNWATCHED_SHARE: f64 = 0.05;

/// The knee explained.
#[derive(Debug, Default)]
pub struct Explained {
    /// The sentence (`summary.watch.knee`).
    pub sentence: Option<String>,
    /// The source that explains it (`summary.watch.knee_resource`).
    pub resource: Option<String>,
    /// The watched processes' shares of the cores that explain it.
    pub shares: Vec<WatchShare>,
}

/// The knee of `s` explained by the sources of `w` (their steps already in `s.phases`).
pub fn explain(s: &Summary, w: &WatchSummary) -> Explained {
    let Some(knee) = &s.knee else { return Explained::default() };
    // A knee is a place among steps: a run of one measured phase has none to explain.
    if s.phases.iter().filter(|p| p.kind != "warmup").count() < 2 || w.sources.is_empty() {
        return Explained::default();
    }
    let Some(k) = s.phases.iter().position(|p| p.name == knee.step) else { return Explained::default() };
    let failed_after = s.phases[k + 1..].iter().any(|p| p.passed == Some(false));
    let head = if failed_after {
        format!("knee {:.0} req/s ({})", knee.rps, knee.step)
    } else {
        format!("knee at least {:.0} req/s ({}, no step failed)", knee.rps, knee.step)
    };
    let knee_phase = &s.phases[k];
    // What reached its ceiling at the knee or the step after it (the first that failed),
    // the earliest step first.
    let hit = s.phases[..(k + 2).min(s.phases.len())].iter().find_map(|p| {
        let at: Vec<&WatchSource> =
            w.sources.iter().filter(|src| step(p, src).is_some_and(|st| st.saturated.is_some())).collect();
        (!at.is_empty()).then_some((p, at))
    });
    let Some((p, at)) = hit else {
        let what = if failed_after {
            let names: Vec<&str> = w.sources.iter().map(|s| s.name.as_str()).collect();
            format!(
                "no watched resource saturated ({}): look elsewhere — locks, a downstream, the network",
                names.join(", ")
            )
        } else {
            "no watched resource reached its ceiling".into()
        };
        let hint = shared_hint(s.phases.get(k + 1).unwrap_or(knee_phase), w);
        let ceiling = ceiling_text(knee_phase, knee.rps, lowest_ceiling(knee_phase, w));
        return Explained { sentence: Some(format!("{head}: {what}{hint}{ceiling}")), ..Default::default() };
    };
    // The cause before the queue: a CPU at its ceiling is named before a gauge beside it.
    let chosen = at.iter().copied().find(|src| is_cpu(p, src)).unwrap_or(at[0]);
    let others: Vec<&str> = at.iter().filter(|src| src.name != chosen.name).map(|src| src.name.as_str()).collect();
    let also =
        if others.is_empty() { String::new() } else { format!(" (also at its ceiling there: {})", others.join(", ")) };
    let what = step(p, chosen).and_then(|st| st.saturated.clone()).unwrap_or_default();
    let cores =
        chosen.cpus.as_deref().filter(|_| is_cores(chosen)).and_then(|c| crate::scenario::parse_cpu_list(c).ok());
    let shares = cores.as_deref().map_or(Vec::new(), |cpus| shares(p, w, chosen, cpus));
    let body = match cores.as_deref() {
        Some(cpus) => {
            let each: Vec<String> = shares
                .iter()
                .map(|sh| {
                    let elsewhere = if sh.also_elsewhere { " (also allowed elsewhere)" } else { "" };
                    format!("{} {:.2}{elsewhere}", sh.name, sh.cores)
                })
                .collect();
            // What the watched sharers do not account for ran there too: unwatched processes,
            // the kernel's softirqs.
            let busy = step(p, chosen).and_then(|st| st.mean.cpu_cores).unwrap_or_default();
            let rest = busy - shares.iter().map(|sh| sh.cores).sum::<f64>();
            let mut each = each;
            if !each.is_empty() && rest >= UNWATCHED_SHARE {
                each.push(format!("the rest {rest:.2} (not watched)"));
            }
            let list = if each.is_empty() { String::new() } else { format!(" — {} cores", each.join(", ")) };
            format!("{} full at {} ({}: {what}){list}{also}", cpu_name(cpus), p.name, chosen.name)
        }
        _ => format!("{} reached its ceiling at {} — {what}{also}{}", chosen.name, p.name, waiting(p, w, chosen)),
    };
    // The knee against the chosen CPU's ceiling when it has one, else the lowest at the knee.
    let ceiling = match step(knee_phase, chosen).and_then(|st| st.ceiling_rps) {
        Some(c) => Some((chosen, c)),
        None => lowest_ceiling(knee_phase, w),
    };
    Explained {
        sentence: Some(format!("{head}: {body}{}", ceiling_text(knee_phase, knee.rps, ceiling))),
        resource: Some(chosen.name.clone()),
        shares,
    }
}

/// Source `src` over phase `p`.
fn step<'a>(p: &'a PhaseSummary, src: &WatchSource) -> Option<&'a WatchStep> {
    p.watch.get(&src.name)
}

/// A source whose CPU is host cores (`cpu:`, an idle counter) rather than one target's.
fn is_cores(src: &WatchSource) -> bool {
    src.kind == "cpu" || src.idle
}

/// Whether `src` reads CPU in phase `p`.
fn is_cpu(p: &PhaseSummary, src: &WatchSource) -> bool {
    step(p, src).is_some_and(|st| st.mean.cpu_cores.is_some())
}

/// `CPU 1`, `CPUs 2-3,5`.
fn cpu_name(cpus: &[usize]) -> String {
    let list = crate::scenario::cpu_list(cpus);
    if cpus.len() == 1 { format!("CPU {list}") } else { format!("CPUs {list}") }
}

/// The CPU sources other than `cores` (process trees, cgroups) that may run on its CPUs, with
/// their CPU in phase `p`, the largest first.
fn shares(p: &PhaseSummary, w: &WatchSummary, cores: &WatchSource, cpus: &[usize]) -> Vec<WatchShare> {
    let mut out: Vec<WatchShare> = w
        .sources
        .iter()
        .filter(|src| src.name != cores.name && !is_cores(src))
        .filter_map(|src| {
            let theirs = crate::scenario::parse_cpu_list(src.cpus.as_deref()?).ok()?;
            if !theirs.iter().any(|c| cpus.contains(c)) {
                return None;
            }
            let used = step(p, src)?.mean.cpu_cores?;
            let also_elsewhere = theirs.iter().any(|c| !cpus.contains(c));
            Some(WatchShare { name: src.name.clone(), cores: used, also_elsewhere })
        })
        .collect();
    out.sort_by(|a, b| b.cores.total_cmp(&a.cores));
    out
}

/// For a gauge at its limit while every watched CPU was under [`WAITING_SHARE`] of its
/// ceiling: that its workers were waiting, not working.
fn waiting(p: &PhaseSummary, w: &WatchSummary, gauge: &WatchSource) -> String {
    if is_cpu(p, gauge) {
        return String::new();
    }
    let cpus: Vec<(&WatchSource, f64, f64)> =
        w.sources.iter().filter_map(|src| Some((src, step(p, src)?.mean.cpu_cores?, src.limit?))).collect();
    if cpus.is_empty() || cpus.iter().any(|&(_, used, limit)| used >= WAITING_SHARE * limit) {
        return String::new();
    }
    let used: Vec<String> =
        cpus.iter().map(|(src, used, limit)| format!("{} used {used:.2} of its {limit:.2} cores", src.name)).collect();
    format!(
        ", while {}: the workers were waiting (a lock, a downstream, I/O), not working — the pool is where the queue \
         formed, not necessarily the cause",
        used.join(", ")
    )
}

/// When nothing watched saturated but several watched processes share the same few cores
/// (their affinity): their sum there, and how to see the cores whole.
fn shared_hint(p: &PhaseSummary, w: &WatchSummary) -> String {
    if w.sources.iter().any(is_cores) {
        return String::new();
    }
    let host = super::cpus::host_cpus().unwrap_or_default();
    let mut groups: Vec<(String, Vec<&WatchSource>)> = Vec::new();
    for src in w.sources.iter().filter(|src| src.kind != "prometheus") {
        let Some(cpus) = src.cpus.clone() else { continue };
        if crate::scenario::parse_cpu_list(&cpus).is_ok_and(|c| c.len() >= host.len()) {
            continue;
        }
        match groups.iter_mut().find(|(c, _)| *c == cpus) {
            Some((_, members)) => members.push(src),
            None => groups.push((cpus, vec![src])),
        }
    }
    let Some((cpus, members)) = groups.into_iter().find(|(_, m)| m.len() >= 2) else { return String::new() };
    let used: f64 = members.iter().filter_map(|src| step(p, src)?.mean.cpu_cores).sum();
    let names: Vec<&str> = members.iter().map(|src| src.name.as_str()).collect();
    format!(
        "; {} share CPU {cpus} ({used:.2} cores between them at {}): watch cpu:{cpus} to see the cores whole",
        names.join(" and "),
        p.name
    )
}

/// The lowest CPU ceiling a source implies at the knee step.
fn lowest_ceiling<'a>(knee: &PhaseSummary, w: &'a WatchSummary) -> Option<(&'a WatchSource, f64)> {
    w.sources
        .iter()
        .filter_map(|src| step(knee, src).and_then(|st| st.ceiling_rps).map(|c| (src, c)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// `; the knee is 75 % of app's CPU ceiling, 400 req/s (1.00 cores ÷ 2.500 ms of CPU per ok
/// answer)`, or nothing without a ceiling.
fn ceiling_text(knee: &PhaseSummary, rps: f64, ceiling: Option<(&WatchSource, f64)>) -> String {
    ceiling.map_or(String::new(), |(src, c)| {
        let ms = step(knee, src).and_then(|st| st.cpu_ms_per_ok).unwrap_or_default();
        format!(
            "; the knee is {:.0} % of {}'s CPU ceiling, {c:.0} req/s ({} cores ÷ {ms:.3} ms of CPU per ok answer)",
            rps / c * 100.0,
            src.name,
            src.limit.map_or("?".into(), |l| format!("{l:.2}"))
        )
    })
}
