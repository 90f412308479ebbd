//! The signals that end a run early — SIGINT, SIGTERM and SIGHUP — each set the halt flag the
//! shards watch, so what was measured until then is written and marked interrupted, with the
//! signal's name (`summary.interrupted_by`).
//!
//! A hang-up (a closed terminal, a dropped SSH session) also takes the terminal away: writes
//! to it then fail with EIO (or EPIPE through a pipe whose reader died), and Rust's `print!`
//! panics on a failed write. So on SIGHUP, inside the handler, standard output and error are
//! pointed at `/dev/null` unless they are regular files (`> run.log`, `nohup`): the results
//! still go to the output directory, and a log file keeps its lines. A second SIGINT exits at
//! once (130), for a user who does not want to wait for the partial results.

use std::os::fd::IntoRawFd as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use anyhow::Context as _;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// The last signal that asked the run to stop (0: none).
static STOPPED_BY: AtomicI32 = AtomicI32::new(0);

/// Install the handlers; the returned flag is set by any of the three signals.
pub fn install() -> anyhow::Result<Arc<AtomicBool>> {
    let halt = Arc::new(AtomicBool::new(false));
    // Before the flag is set by the first SIGINT: a second one finds it set and exits.
    signal_hook::flag::register_conditional_shutdown(SIGINT, 130, Arc::clone(&halt))
        .context("cannot install signal handler")?;
    // Opened now: the handler may not allocate or open files.
    // Kept open for the process's life.
    let null_fd =
        std::fs::OpenOptions::new().write(true).open("/dev/null").context("cannot open /dev/null")?.into_raw_fd();
    let (out_away, err_away) = (!regular_file(1), !regular_file(2));
    for sig in [SIGINT, SIGTERM, SIGHUP] {
        // SAFETY: the action only stores to an atomic and calls dup2, both async-signal-safe.
        unsafe {
            signal_hook::low_level::register(sig, move || {
                STOPPED_BY.store(sig, Ordering::Relaxed);
                if sig == SIGHUP {
                    if out_away {
                        libc::dup2(null_fd, 1);
                    }
                    if err_away {
                        libc::dup2(null_fd, 2);
                    }
                }
            })
        }
        .context("cannot install signal handler")?;
        signal_hook::flag::register(sig, Arc::clone(&halt)).context("cannot install signal handler")?;
    }
    Ok(halt)
}

/// The name of the signal that stopped the run, if one did.
pub fn stopped_by() -> Option<&'static str> {
    match STOPPED_BY.load(Ordering::Relaxed) {
        SIGINT => Some("SIGINT"),
        SIGTERM => Some("SIGTERM"),
        SIGHUP => Some("SIGHUP"),
        _ => None,
    }
}

/// Whether `fd` is a regular file (output that outlives the terminal).
fn regular_file(fd: i32) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes the struct on success, and it is read only then.
    unsafe { libc::fstat(fd, st.as_mut_ptr()) == 0 && (st.assume_init().st_mode & libc::S_IFMT) == libc::S_IFREG }
}
