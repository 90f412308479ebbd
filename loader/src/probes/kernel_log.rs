//! The kernel programs' own log: aya-log records from the `AYA_LOGS` ring buffer, handed to
//! the `log` facade (the binary's logger prints them on stderr) by a thread of their own.
//!
//! The programs log only rare conditions, all at debug: an event counted as lost (which
//! socket, thread or field), a map update that failed, a TCP state no kernel should have.
//! The lost counters stay the record the verdict reads; the log says what they cannot.
//!
//! Owns: the level the programs log at ([`level`], set as aya-log's `AYA_LOG_LEVEL` global
//! before load) and the reader thread ([`KernelLog`]). The level follows the process's
//! logger: 0 — nothing — unless `log::max_level()` is debug or trace (`--log-level debug`,
//! `RUST_LOG=debug` or `RUST_LOG=probes=debug`; the records' targets are the programs'
//! modules, `probes::tcp_states` and so on). `AYA_LOG_LEVEL` lives in `.rodata`, which aya
//! freezes after load, so the verifier knows its value and removes every disabled `debug!`
//! branch from the program: logging off costs the programs nothing (docs/methodology.md has
//! the measurement) and never writes to the ring buffer. No reader thread runs then either.
//!
//! Does not: count anything, or make up for a full ring buffer (aya-log-ebpf drops a record
//! it cannot reserve room for, silently: the log is for people, the counters are the record).

use std::{
    io,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    thread::{self, JoinHandle},
};

use aya::Ebpf;
use aya_log::EbpfLogger;
use log::LevelFilter;

/// The value of aya-log's `AYA_LOG_LEVEL` for the programs: the logger's level when it is
/// debug or trace, else 0 (every level off).
pub(super) fn level() -> u8 {
    match log::max_level() {
        LevelFilter::Trace => aya_log::Level::Trace as u8,
        LevelFilter::Debug => aya_log::Level::Debug as u8,
        LevelFilter::Off | LevelFilter::Error | LevelFilter::Warn | LevelFilter::Info => 0,
    }
}

/// The thread that forwards the programs' records to the logger; stopped (after a last
/// drain) and joined on drop.
#[derive(Debug)]
pub(super) struct KernelLog {
    /// An eventfd the reader polls beside the ring buffer; a write tells it to stop.
    stop: Option<OwnedFd>,
    reader: Option<JoinHandle<()>>,
}

impl KernelLog {
    /// Take the `AYA_LOGS` ring buffer out of `ebpf` and start forwarding its records when
    /// [`level`] enables any; `Ok(None)` when it does not.
    pub(super) fn start(ebpf: &mut Ebpf) -> Result<Option<KernelLog>, String> {
        if level() == 0 {
            return Ok(None);
        }
        let mut logger = EbpfLogger::init(ebpf).map_err(|err| format!("the programs' log (aya-log): {err}"))?;
        // SAFETY: eventfd has no memory preconditions; a non-negative return is a new fd
        // that nothing else owns.
        let stop = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if stop < 0 {
            return Err(format!("eventfd for the programs' log: {}", io::Error::last_os_error()));
        }
        // SAFETY: `stop` is a fresh fd owned by nobody else (checked above).
        let stop = unsafe { OwnedFd::from_raw_fd(stop) };
        let stop_raw = stop.as_raw_fd();
        let reader = thread::Builder::new()
            .name("probe-log".into())
            .spawn(move || {
                let ring = logger.as_raw_fd();
                loop {
                    let mut fds = [
                        libc::pollfd { fd: ring, events: libc::POLLIN, revents: 0 },
                        libc::pollfd { fd: stop_raw, events: libc::POLLIN, revents: 0 },
                    ];
                    // SAFETY: two valid pollfd entries that outlive the call; both fds stay
                    // open until this thread is joined (`Drop` joins before closing `stop`).
                    let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
                    if ready < 0 {
                        let err = io::Error::last_os_error();
                        if err.kind() == io::ErrorKind::Interrupted {
                            continue;
                        }
                        log::warn!("the programs' log stops: poll: {err}");
                        return;
                    }
                    logger.flush();
                    if fds[1].revents != 0 {
                        return;
                    }
                }
            })
            .map_err(|err| format!("starting the programs' log reader: {err}"))?;
        Ok(Some(KernelLog { stop: Some(stop), reader: Some(reader) }))
    }
}

impl Drop for KernelLog {
    fn drop(&mut self) {
        let Some(stop) = self.stop.take() else { return };
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to our own eventfd.
        let written = unsafe { libc::write(stop.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        if written == 8 {
            if let Some(reader) = self.reader.take() {
                let _ = reader.join();
            }
        } else {
            // The reader did not hear it (an eventfd write fails only on a bug): leave it
            // blocked in poll with its fd still open, rather than polling a reused number.
            std::mem::forget(stop);
        }
    }
}
