//! Start-up: each tracepoint's layout from the running kernel, the globals set before load,
//! loading the object, and attaching the programs in dependency order, each probe on its own.
//!
//! Owns: [`Probes::try_start`] and the tracepoints the programs attach to ([`Hook`]). A probe
//! whose tracepoint is missing, whose layout is unexpected or whose program the kernel refuses
//! is recorded in the availability map with the reason, and the others start; the socket
//! probes depend on `tcp_states` (they filter on the sockets it registers). Does not: read
//! any map after start (the readers do), or parse format files (`tracefs.rs`).

use std::{collections::BTreeMap, fs, io, path::Path};

use aya::{Ebpf, EbpfLoader, programs::TracePoint};
use probes_ebpf::names;

use super::{
    AVAILABLE, OBJECT, Probes, Unavailable,
    connect_latency::ConnectLatencyReader,
    counters,
    drops::DropsReader,
    kernel_log::{self, KernelLog},
    privilege, probe,
    runqueue::{self, RunqueueReader},
    rx_segments,
    series::Series,
    sock_events::SockEventsReader,
    tcp_states::TcpStatesReader,
    tls_handshakes::{self, TlsHandshakesReader},
    tracefs::{self, Tracefs},
};

/// A tracepoint a program attaches to.
#[derive(Debug, Clone, Copy)]
struct Hook {
    program: &'static str,
    category: &'static str,
    name: &'static str,
    /// `category:name`, for messages.
    full: &'static str,
}

const TCP_STATES: Hook = Hook {
    program: names::TCP_STATES_PROGRAM,
    category: names::TCP_STATES_CATEGORY,
    name: names::TCP_STATES_TRACEPOINT,
    full: "sock:inet_sock_set_state",
};
const RETRANSMIT: Hook = Hook {
    program: names::SYN_RETRANSMITS_PROGRAM,
    category: "tcp",
    name: "tcp_retransmit_skb",
    full: "tcp:tcp_retransmit_skb",
};
const RECEIVE_RESET: Hook = Hook {
    program: names::RESETS_RECEIVED_PROGRAM,
    category: "tcp",
    name: "tcp_receive_reset",
    full: "tcp:tcp_receive_reset",
};
const SEND_RESET: Hook =
    Hook { program: names::RESETS_SENT_PROGRAM, category: "tcp", name: "tcp_send_reset", full: "tcp:tcp_send_reset" };
const KFREE_SKB: Hook =
    Hook { program: names::DROPS_PROGRAM, category: "skb", name: "kfree_skb", full: "skb:kfree_skb" };
const WAKEUP: Hook =
    Hook { program: names::RUNQ_WAKEUP_PROGRAM, category: "sched", name: "sched_wakeup", full: "sched:sched_wakeup" };
const WAKEUP_NEW: Hook = Hook {
    program: names::RUNQ_WAKEUP_NEW_PROGRAM,
    category: "sched",
    name: "sched_wakeup_new",
    full: "sched:sched_wakeup_new",
};
const SWITCH: Hook =
    Hook { program: names::RUNQ_SWITCH_PROGRAM, category: "sched", name: "sched_switch", full: "sched:sched_switch" };
const TCP_PROBE: Hook =
    Hook { program: names::RX_SEGMENTS_PROGRAM, category: "tcp", name: "tcp_probe", full: "tcp:tcp_probe" };

impl Hook {
    /// The tracepoint's format file text.
    fn format(&self, tracefs: &Path) -> Result<String, Unavailable> {
        let path = tracefs::format_path(tracefs, self.category, self.name);
        fs::read_to_string(&path).map_err(|err| {
            let detail = format!("{}: {err}", path.display());
            if err.kind() == io::ErrorKind::NotFound {
                Unavailable::TracepointMissing { tracepoint: self.full, detail }
            } else {
                Unavailable::NoTracefs { detail }
            }
        })
    }

    /// The layout `parse` finds in the format file.
    fn layout<T>(&self, tracefs: &Path, parse: impl FnOnce(&str) -> Result<T, String>) -> Result<T, Unavailable> {
        parse(&self.format(tracefs)?).map_err(|detail| Unavailable::TracepointLayout { tracepoint: self.full, detail })
    }

    /// Load (verify) and attach the program.
    fn attach(&self, ebpf: &mut Ebpf) -> Result<(), Unavailable> {
        let program = self.program;
        let tracepoint: &mut TracePoint = ebpf
            .program_mut(program)
            .ok_or(Unavailable::MissingFromObject { item: program })?
            .try_into()
            .map_err(|source| Unavailable::Program { program, source })?;
        tracepoint.load().map_err(|source| Unavailable::Program { program, source })?;
        tracepoint.attach(self.category, self.name).map_err(|source| Unavailable::Program { program, source })?;
        Ok(())
    }
}

impl Probes {
    /// [`Probes::start`] with the typed error.
    pub fn try_start(tgid: u32, with_segments: bool) -> Result<Probes, Unavailable> {
        if OBJECT.is_empty() {
            return Err(Unavailable::NoObject);
        }
        privilege::check().map_err(|detail| Unavailable::NotPrivileged { detail })?;
        let Tracefs { root, mounted_now } =
            tracefs::find_or_mount().map_err(|detail| Unavailable::NoTracefs { detail })?;

        // Each tracepoint's layout from the running kernel; a failure disables its probe only.
        let set_state = TCP_STATES.layout(&root, tracefs::set_state_layout);
        let retransmit = RETRANSMIT.layout(&root, |f| tracefs::sock_event_layout(f, true));
        let receive_reset = RECEIVE_RESET.layout(&root, |f| tracefs::sock_event_layout(f, false));
        let send_reset = SEND_RESET.layout(&root, |f| tracefs::sock_event_layout(f, false));
        let kfree_skb_format = KFREE_SKB.format(&root);
        let kfree_skb = KFREE_SKB.layout(&root, tracefs::kfree_skb_layout);
        let wakeup = WAKEUP.layout(&root, tracefs::sched_wakeup_layout);
        let switch = SWITCH.layout(&root, tracefs::sched_switch_layout);
        // Only runs that use it attach it (it runs for every TCP segment on the host).
        let tcp_probe = with_segments.then(|| TCP_PROBE.layout(&root, tracefs::tcp_probe_layout));

        let mut loader = EbpfLoader::new();
        loader.override_global(names::TARGET_TGID, &tgid, true);
        // 0 (off) unless the loader logs at debug or trace; see `kernel_log.rs`.
        let log_level = kernel_log::level();
        loader.override_global(aya_log::LEVEL, &log_level, true);
        if let Some(capacity) = socks_capacity_for_tests() {
            loader.map_max_entries(names::LOADER_SOCKS, capacity);
        }
        // Each tracepoint's field offsets, as this kernel's format file gave them (a program
        // whose layout could not be read keeps its compiled-in default and is not attached).
        let layouts = [
            (names::SET_STATE_LAYOUT, set_state.as_ref().ok().map(aya::GlobalData::from)),
            (names::RETRANSMIT_LAYOUT, retransmit.as_ref().ok().map(aya::GlobalData::from)),
            (names::RECEIVE_RESET_LAYOUT, receive_reset.as_ref().ok().map(aya::GlobalData::from)),
            (names::SEND_RESET_LAYOUT, send_reset.as_ref().ok().map(aya::GlobalData::from)),
            (names::KFREE_SKB_LAYOUT, kfree_skb.as_ref().ok().map(aya::GlobalData::from)),
            (names::WAKEUP_LAYOUT, wakeup.as_ref().ok().map(aya::GlobalData::from)),
            (names::SWITCH_LAYOUT, switch.as_ref().ok().map(aya::GlobalData::from)),
            (names::TCP_PROBE_LAYOUT, tcp_probe.as_ref().and_then(|l| l.as_ref().ok()).map(aya::GlobalData::from)),
        ];
        for (name, layout) in layouts {
            if let Some(layout) = layout {
                loader.override_global(name, layout, true);
            }
        }
        let mut ebpf = loader.load(OBJECT).map_err(Unavailable::Load)?;
        // Without it the programs' records stay in their ring buffer; every probe still runs.
        let kernel_log = KernelLog::start(&mut ebpf).unwrap_or_else(|why| {
            log::warn!("{why}");
            None
        });

        let mut availability = BTreeMap::new();
        let mut attached = Vec::new();
        let mut first_error = None;
        let record = |availability: &mut BTreeMap<String, String>,
                      probe: &str,
                      result: Result<(), Unavailable>,
                      first_error: &mut Option<Unavailable>| {
            let state = match result {
                Ok(()) => AVAILABLE.to_owned(),
                Err(err) => {
                    let text = err.to_string();
                    first_error.get_or_insert(err);
                    text
                }
            };
            availability.insert(probe.to_owned(), state);
        };

        // tcp_states first: every socket probe filters on the sockets it registers.
        let tcp_states = set_state.and_then(|_| TCP_STATES.attach(&mut ebpf));
        let sockets_followed: Result<(), String> = tcp_states.as_ref().map(|_| ()).map_err(ToString::to_string);
        if tcp_states.is_ok() {
            attached.push(TCP_STATES.program);
        }
        let needs_tcp_states = |why: &String| Unavailable::Dependency { probe: probe::TCP_STATES, detail: why.clone() };
        for probe in [probe::CONNECT_LATENCY, probe::TIME_WAIT] {
            let result = sockets_followed.as_ref().map(|_| ()).map_err(needs_tcp_states);
            record(&mut availability, probe, result, &mut first_error);
        }
        record(&mut availability, probe::TCP_STATES, tcp_states, &mut first_error);

        let socket_probes = [
            (probe::SYN_RETRANSMITS, RETRANSMIT, retransmit.map(drop)),
            (probe::RESETS_RECEIVED, RECEIVE_RESET, receive_reset.map(drop)),
            (probe::RESETS_SENT, SEND_RESET, send_reset.map(drop)),
            (probe::DROPS, KFREE_SKB, kfree_skb.map(drop)),
        ];
        for (probe, hook, layout) in socket_probes {
            let result = match &sockets_followed {
                Err(why) => Err(needs_tcp_states(why)),
                Ok(()) => layout.and_then(|()| hook.attach(&mut ebpf)),
            };
            if result.is_ok() {
                attached.push(hook.program);
            }
            record(&mut availability, probe, result, &mut first_error);
        }

        // Run-queue delay: the end hook first, so a start is never stored without an end.
        let runqueue = switch.map(drop).and_then(|()| SWITCH.attach(&mut ebpf)).and_then(|()| {
            attached.push(SWITCH.program);
            wakeup.map(drop).and_then(|()| WAKEUP.attach(&mut ebpf))
        });
        if runqueue.is_ok() {
            attached.push(WAKEUP.program);
            // Optional: without it a new thread's first run waits are missed, nothing else.
            match WAKEUP_NEW.attach(&mut ebpf) {
                Ok(()) => attached.push(WAKEUP_NEW.program),
                Err(err) => {
                    availability.insert(format!("{}.sched_wakeup_new", probe::RUNQUEUE), err.to_string());
                }
            }
            if let Err(detail) = runqueue::seed_threads(&mut ebpf, tgid) {
                availability.insert(format!("{}.seed_threads", probe::RUNQUEUE), detail);
            }
        }
        record(&mut availability, probe::RUNQUEUE, runqueue, &mut first_error);

        // TLS handshakes: uprobes on this binary, independent of every tracepoint.
        let tls = tls_handshakes::attach(&mut ebpf, tgid);
        if tls.is_ok() {
            attached.extend([names::TLS_END_PROGRAM, names::TLS_START_PROGRAM]);
        }
        record(&mut availability, probe::TLS_HANDSHAKES, tls, &mut first_error);

        if attached.is_empty() {
            return Err(first_error.unwrap_or(Unavailable::MissingFromObject { item: "any program" }));
        }

        // Per-answer receive stamps for h2c: optional, the engine does without (less cheaply).
        let segments = tcp_probe.and_then(|layout| {
            layout
                .map_err(|e| e.to_string())
                .and_then(|_| rx_segments::start(&mut ebpf, |ebpf| TCP_PROBE.attach(ebpf)))
                .map_err(|why| log::info!("per-segment receive stamps unavailable: {why}"))
                .ok()
        });

        let reason_names = kfree_skb_format.map(|f| tracefs::symbolic_names(&f, "reason")).unwrap_or_default();
        Ok(Probes {
            tcp_states: TcpStatesReader::take(&mut ebpf)?,
            connect_latency: ConnectLatencyReader::take(&mut ebpf)?,
            sock_events: SockEventsReader::take(&mut ebpf)?,
            drops: DropsReader::take(&mut ebpf, reason_names)?,
            runqueue: RunqueueReader::take(&mut ebpf)?,
            tls_handshakes: TlsHandshakesReader::take(&mut ebpf)?,
            lost: counters::LostCounters(counters::take_per_cpu_array(&mut ebpf, names::LOST)?),
            runs: counters::LostCounters(counters::take_per_cpu_array(&mut ebpf, names::PROGRAM_RUNS)?),
            ebpf,
            tgid,
            attached,
            availability,
            misses_at_reset: BTreeMap::new(),
            series: Series::new(),
            mounted_tracefs: mounted_now,
            segments,
            kernel_log,
        })
    }
}

/// Test hook: `LOADER_TEST_SOCKS_CAPACITY=N` sizes `LOADER_SOCKS` to N sockets instead of
/// `LOADER_SOCKS_CAPACITY`, so that a test fills it with a few connections and sees the
/// programs report it (`tests/probe_log.rs`). Unset in normal use.
fn socks_capacity_for_tests() -> Option<u32> {
    let value = std::env::var(SOCKS_CAPACITY_VAR).ok()?;
    match value.parse() {
        Ok(capacity) if capacity > 0 => Some(capacity),
        _ => {
            log::warn!("{SOCKS_CAPACITY_VAR}={value:?} is not a positive number: ignored");
            None
        }
    }
}

/// The environment variable of [`socks_capacity_for_tests`].
const SOCKS_CAPACITY_VAR: &str = "LOADER_TEST_SOCKS_CAPACITY";

#[cfg(test)]
mod tests {
    /// The programs read every field through the layouts the running kernel's tracepoint
    /// format files give (`tracefs`), never through CO-RE, so the object carries no BTF
    /// relocations and the loader's aya never reads the kernel's BTF (`vendor/aya/PATCH.md`:
    /// parsing it was ~18 ms of every run's CPU). A program that added one would still load —
    /// aya then reads the BTF to apply it — but every run would pay that again.
    #[test]
    fn the_probe_object_needs_no_kernel_btf() {
        if super::OBJECT.is_empty() {
            eprintln!("skipped: this build has no eBPF object (LOADER_EBPF=skip or no bpf-linker)");
            return;
        }
        let object = aya_obj::Object::parse(super::OBJECT).expect("the probe object parses");
        assert!(!object.has_btf_relocations(), "a probe program now carries BTF (CO-RE) relocations");
    }
}
