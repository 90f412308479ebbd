//! loader's kernel programs, one module per probe; built for `bpfel-unknown-none` by
//! `loader/build.rs` (aya-build) and embedded in the loader binary.
//!
//! Every program filters in the kernel to the loader's own process or sockets and counts
//! there (per-CPU, summed by user space: the bpf target has no atomic read-modify-write).
//! Names user space looks up are in the library half of this package (`probes_ebpf::names`).
//!
//! On any other target this binary is an empty stub, so `cargo build --workspace` and
//! `cargo clippy --workspace` on the host do not fail on it.

#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]

#[cfg(target_arch = "bpf")]
#[macro_use]
mod common;
#[cfg(target_arch = "bpf")]
mod drops;
#[cfg(target_arch = "bpf")]
mod resets;
#[cfg(target_arch = "bpf")]
mod runqueue;
#[cfg(target_arch = "bpf")]
mod rx_segments;
#[cfg(target_arch = "bpf")]
mod syn_retransmits;
#[cfg(target_arch = "bpf")]
mod tcp_states;
#[cfg(target_arch = "bpf")]
mod tls;

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
    // Unreachable in a verified program: the verifier rejects code that could get here.
    loop {}
}

/// The licence the kernel checks before allowing GPL-only helpers such as
/// `bpf_probe_read_kernel`; the kernel accepts "Dual MIT/GPL" as GPL-compatible.
#[cfg(target_arch = "bpf")]
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";

#[cfg(not(target_arch = "bpf"))]
fn main() {
    eprintln!("probes: these are eBPF programs; loader/build.rs builds them for bpfel-unknown-none");
}
