//! The instant-reading pool's model of when a slot comes free.

use super::*;

const MS: u64 = 1_000_000;

/// A request due at `intended`, free in the model at `free`, taken at `taken` and sent then.
fn sent(intended: u64, free: u64, taken: u64) -> InFlight {
    InFlight {
        phase: 0,
        request: 0,
        intended_ns: intended,
        sent_ns: taken,
        deadline_ns: intended + 5_000 * MS,
        written: 0,
        retried: false,
        waited: true,
        free_ns: free,
        taken_ns: taken,
    }
}

/// A shard starved the way busy loops at nice −10 on its core starve it (CI: run-queue p99
/// 3.9 ms, send lag p99 40 ms): each time it becomes runnable — an answer arrived, a send
/// fell due — it runs 1.5–2.4 ms later, reads what arrived, sends what is due on the free
/// connections (12 µs each) and sleeps. 8,000 requests are due a second through 16
/// connections to a target answering in 0.1 ms: each round of 16 costs the shard a run-queue
/// wait, so its backlog lasts the whole second and most sends wait for a connection whose
/// answer it has not read. Had it read each answer at its stamp, the pool would never have
/// been short: the modelled slots must lay the late sends at the loader's door. (Conceding
/// the whole 2 ms allowance each cycle kept the modelled slots as slow as the real ones, a
/// pool of 16 per 2 ms that never drained at 8,000/s: the target's, by the model.)
#[test]
fn a_fast_targets_slots_drain_a_starved_backlog_in_the_model() {
    let (conns, period, service, per_send) = (16usize, MS / 8, MS / 10, 12_000u64);
    let mut slots = vec![0u64; conns];
    let mut answers = vec![None::<(InFlight, u64)>; conns];
    let mut free: Vec<usize> = (0..conns).collect();
    let (mut next, mut loaders, mut targets, mut t) = (0u64, 0, 0, 0u64);
    for round in 0..2_000u64 {
        for c in 0..conns {
            if let Some((f, at)) = answers[c].filter(|&(_, at)| at <= t) {
                slots[c] = slot_free(&f, at);
                answers[c] = None;
                free.push(c);
            }
        }
        while next * period <= t && !free.is_empty() {
            let (c, intended) = (free.remove(0), next * period);
            let k = free.iter().copied().chain([c]).min_by_key(|&k| slots[k]).unwrap();
            let f = sent(intended, slots[k].max(intended).min(t), t);
            slots.swap(k, c);
            let lag = t - intended;
            if lag > crate::record::LATE_NS {
                if send_wait(&f, true).loader_ns * 2 >= lag {
                    loaders += 1;
                } else {
                    targets += 1;
                }
            }
            answers[c] = Some((f, t + service));
            (next, t) = (next + 1, t + per_send);
        }
        let answer = answers.iter().flatten().map(|&(_, at)| at).min();
        let due = (!free.is_empty()).then_some(next * period);
        let runnable = answer.into_iter().chain(due).min().unwrap_or(t).max(t);
        t = runnable + 1_500_000 + round * 7 % 10 * 100_000;
    }
    assert!(loaders > 1_000, "a backlog the whole run: {loaders} late sends the loader's, {targets} the target's");
    assert!(
        targets * 100 <= loaders,
        "{targets} late sends of a starved loader laid at a 0.1 ms target's door ({loaders} the loader's)"
    );
}

/// A saturated target (each answer 100 ms in its queue) and a loader that reads each answer
/// 300 µs late: the model concedes the read to the target's queue up to the allowance, so the
/// modelled pool does not drift ahead of the real one cycle by cycle.
#[test]
fn a_queueing_targets_slot_concedes_the_allowance() {
    let f = sent(0, 0, 300_000);
    assert_eq!(slot_free(&f, 100 * MS), 100 * MS, "a 0.3 ms lead inside a 100 ms queue is absorbed");
    let late = sent(0, 0, 10 * MS);
    assert_eq!(slot_free(&late, 110 * MS), 110 * MS - 8 * MS, "a 10 ms lead keeps all but the 2 ms allowance");
    let fast = sent(0, 0, 10 * MS);
    assert_eq!(slot_free(&fast, 10 * MS + MS / 10), MS / 10 + MS / 10, "a 0.1 ms answer absorbs no more than 0.1 ms");
}
