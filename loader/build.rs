//! Builds the eBPF object (`probes-ebpf`'s `probes` binary, target `bpfel-unknown-none`) into
//! `$OUT_DIR/probes`, which `loader::probes` embeds with `include_bytes_aligned!`.
//!
//! `LOADER_EBPF` chooses what happens:
//!
//! - unset / `auto`: build the real object when bpf-linker is found (on `PATH` or in
//!   `$CARGO_HOME/bin`), otherwise write an empty stub object and warn. `cargo check` and
//!   clippy therefore never need bpf-linker; a loader built with the stub reports
//!   "built without eBPF objects" at run time and runs without probes.
//! - `require`: the real object or a build error (CI sets this).
//! - `skip`: always the stub (so does aya-build's own `AYA_BUILD_SKIP=1`).
//!
//! The real build follows TOOLCHAIN.md (`../shared`, verified recipe): aya-build runs a nested
//! `cargo build -Z build-std=core` with the toolchain this build runs on (aya-build's default
//! would ask rustup for nightly) and `RUSTC_BOOTSTRAP=1` set in this build script's own
//! environment only, so the nested cargo inherits it and the rest of the workspace does not.
//!
//! It also sets `LOADER_GIT_COMMIT`, the short hash of the commit checked out (`unknown`
//! without git or outside a checkout), which `loader --version` prints.

use std::{
    env,
    ffi::OsString,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail};

/// The package holding the kernel programs, and the binary name aya-build copies to OUT_DIR.
const EBPF_PACKAGE: &str = "probes-ebpf";
const OBJECT_NAME: &str = "probes";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Auto,
    Require,
    Skip,
}

fn main() -> anyhow::Result<()> {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR")?);
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").context("OUT_DIR")?);
    let ebpf_dir = manifest_dir.join("..").join(EBPF_PACKAGE);
    let object = out_dir.join(OBJECT_NAME);

    let commit = git_commit(&manifest_dir).unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=LOADER_GIT_COMMIT={commit}");

    // Rebuild on any change to the kernel programs or the shared types. (aya-build prints
    // the same for the real build; the stub path needs it too, so it happens here as well.)
    println!("cargo:rerun-if-changed={}", ebpf_dir.join("src").display());
    println!("cargo:rerun-if-changed={}", ebpf_dir.join("Cargo.toml").display());
    println!("cargo:rerun-if-env-changed=LOADER_EBPF");
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");

    let mode = match env::var("LOADER_EBPF").as_deref() {
        Err(env::VarError::NotPresent) | Ok("" | "auto") => Mode::Auto,
        Ok("require") => Mode::Require,
        Ok("skip") => Mode::Skip,
        Ok(other) => bail!("LOADER_EBPF={other:?}: expected auto, require or skip"),
        Err(err) => bail!("LOADER_EBPF: {err}"),
    };
    let aya_build_skip = env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));

    if mode == Mode::Skip || aya_build_skip {
        let why = if mode == Mode::Skip { "LOADER_EBPF=skip" } else { "AYA_BUILD_SKIP is set" };
        if mode == Mode::Require {
            bail!("LOADER_EBPF=require but {why}");
        }
        return write_stub(&object, why);
    }

    let linker = match find_bpf_linker() {
        Some(path) if runs(&path) => path,
        found => {
            let missing = match found {
                None => "bpf-linker is not on PATH or in $CARGO_HOME/bin".to_owned(),
                // A bpf-linker built against another rustc's LLVM no longer loads.
                Some(path) => format!("{} does not run (built for another rustc?)", path.display()),
            };
            // Rerun when bpf-linker may have appeared: PATH changed or `cargo install` ran.
            println!("cargo:rerun-if-env-changed=PATH");
            if let Some(bin) = cargo_bin_dir().filter(|dir| dir.is_dir()) {
                println!("cargo:rerun-if-changed={}", bin.display());
            }
            if mode == Mode::Require {
                bail!("LOADER_EBPF=require but {missing}; `cargo xtask setup` installs it");
            }
            let why = format!("{missing}; `cargo xtask setup` installs it");
            return write_stub(&object, &why);
        }
    };
    println!("cargo:rerun-if-changed={}", linker.display());

    build_real(&ebpf_dir, &linker)
        .with_context(|| format!("building the eBPF object with bpf-linker {}", linker.display()))?;
    let size = fs::metadata(&object).with_context(|| format!("{} after the eBPF build", object.display()))?.len();
    if size == 0 {
        bail!("the eBPF build produced an empty {}", object.display());
    }
    Ok(())
}

/// The short hash of HEAD, with the files that change when HEAD moves watched: HEAD itself
/// and the branch it names. Paths come from `git rev-parse --git-path`, which knows where a
/// worktree keeps them (its `.git` is a file; its HEAD is its own, its branches the main
/// repository's). A branch that lives only in `packed-refs` gets a loose file at its next
/// commit, so then its folder is watched instead (any branch's commit reruns this).
fn git_commit(manifest_dir: &Path) -> Option<String> {
    let git = |args: &[&str]| {
        let out = Command::new("git").arg("-C").arg(manifest_dir).args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
    };
    let commit = git(&["rev-parse", "--short", "HEAD"])?;
    let head_ref = git(&["rev-parse", "--symbolic-full-name", "HEAD"]).filter(|r| r.starts_with("refs/"));
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    watched.extend(head_ref);
    for name in watched {
        let Some(path) = git(&["rev-parse", "--git-path", &name]) else { continue };
        // Relative paths are relative to the -C directory, as cargo reads them (the package root).
        let path = manifest_dir.join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        } else if name.starts_with("refs/")
            && let Some(folder) = path.parent().filter(|f| f.is_dir())
        {
            println!("cargo:rerun-if-changed={}", folder.display());
        }
    }
    Some(commit)
}

/// Run aya-build for the real object. Only this function changes the environment, and only
/// of this build-script process (inherited by the nested cargo it spawns).
fn build_real(ebpf_dir: &Path, linker: &Path) -> anyhow::Result<()> {
    let toolchain = current_toolchain()?;
    let linker_dir = linker.parent().context("bpf-linker path has no parent")?;
    let path = env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![linker_dir.to_path_buf()];
    dirs.extend(env::split_paths(&path));
    let path: OsString = env::join_paths(dirs).context("joining PATH")?;

    // SAFETY: a build script is single-threaded until aya-build spawns its reader threads,
    // which happens after these calls; nothing else reads the environment concurrently.
    unsafe {
        // Stable rustc accepts `-Z build-std=core` (needed: bpfel-unknown-none is tier 3 and
        // ships no `core`) only with RUSTC_BOOTSTRAP; aya-build passes -Z when it sees "1".
        env::set_var("RUSTC_BOOTSTRAP", "1");
        // The bpf target's linker is looked up as `bpf-linker` on PATH.
        env::set_var("PATH", path);
        // aya-build turns every stderr line of the nested cargo into a cargo warning, which
        // cargo replays on every later build; keep only real diagnostics ("Finished …" out).
        env::set_var("CARGO_TERM_QUIET", "true");
    }

    let root_dir = ebpf_dir.to_str().context("probes-ebpf path is not UTF-8")?;
    aya_build::build_ebpf(
        [aya_build::Package { name: EBPF_PACKAGE, root_dir, ..Default::default() }],
        aya_build::Toolchain::Custom(&toolchain),
    )
}

/// The rustup toolchain this build runs on. The rustup proxy sets `RUSTUP_TOOLCHAIN` for
/// everything it starts; without it (cargo started directly), ask rustup what is active here.
fn current_toolchain() -> anyhow::Result<String> {
    if let Ok(toolchain) = env::var("RUSTUP_TOOLCHAIN")
        && !toolchain.is_empty()
    {
        return Ok(toolchain);
    }
    // Without rustup aya-build runs plain `cargo`, ignoring the name; any name will do.
    let Ok(output) = Command::new("rustup").args(["show", "active-toolchain"]).output() else {
        return Ok("stable".to_owned());
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    match stdout.split_whitespace().next() {
        Some(name) if output.status.success() => Ok(name.to_owned()),
        _ => bail!(
            "RUSTUP_TOOLCHAIN is unset and `rustup show active-toolchain` failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ),
    }
}

/// `bpf-linker` on PATH, else in `$CARGO_HOME/bin` (where `cargo install` puts it, and which
/// is not always on the PATH of a `sudo` or CI shell).
fn find_bpf_linker() -> Option<PathBuf> {
    let on_path = env::var_os("PATH")
        .into_iter()
        .flat_map(|path| env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("bpf-linker"));
    let in_cargo_home = cargo_bin_dir().map(|dir| dir.join("bpf-linker"));
    on_path.chain(in_cargo_home).find(|candidate| is_executable(candidate))
}

fn cargo_bin_dir() -> Option<PathBuf> {
    env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .map(|home| home.join("bin"))
}

/// `bpf-linker --version` succeeds.
fn runs(linker: &Path) -> bool {
    Command::new(linker).arg("--version").output().is_ok_and(|out| out.status.success())
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// An empty object: the loader sees zero bytes and reports probes as unavailable
/// ("built without eBPF objects") instead of failing to compile.
fn write_stub(object: &Path, why: &str) -> anyhow::Result<()> {
    println!("cargo:warning=loader is built WITHOUT eBPF probes: {why}");
    fs::write(object, []).with_context(|| format!("writing stub {}", object.display()))
}
