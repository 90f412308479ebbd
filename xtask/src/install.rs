//! `cargo xtask install [--prefix DIR]`: the release loader, its shell completions and its man
//! pages under PREFIX (default /usr/local), where a shell, `sudo` (Debian's secure_path has
//! /usr/local/bin) and `man` look for them. `demo` runs it too when root.
//!
//! The completions and pages come from the binary being installed (its hidden `loader
//! completions SHELL` and `loader man --out DIR`), so they describe exactly that binary. All
//! of them are made in `<target>/install/` first: a binary that cannot make them installs
//! nothing.

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

use crate::cmd::{self, Cmd};

/// Where `install` puts things unless told otherwise.
pub const DEFAULT_PREFIX: &str = "/usr/local";

/// Each shell's completion script, and where under PREFIX that shell looks for it.
const COMPLETIONS: [(&str, &str); 3] = [
    ("bash", "share/bash-completion/completions/loader"),
    ("zsh", "share/zsh/site-functions/_loader"),
    ("fish", "share/fish/vendor_completions.d/loader.fish"),
];

/// Where under PREFIX the man pages go.
const MAN_DIR: &str = "share/man/man1";

/// The prefix `install`'s arguments name: none (the default, which needs root: said in one
/// line otherwise), `--prefix DIR` or `--prefix=DIR`.
pub fn prefix_from(args: &[OsString]) -> Result<PathBuf> {
    const USAGE: &str = "usage: cargo xtask install [--prefix DIR]";
    let prefix = match args {
        [] => {
            if !cmd::is_root() {
                bail!(
                    "installing into {DEFAULT_PREFIX} needs root: run it as root, or choose a prefix you can write (cargo xtask install --prefix ~/.local)"
                );
            }
            PathBuf::from(DEFAULT_PREFIX)
        }
        [flag, dir] if flag == "--prefix" => PathBuf::from(dir),
        [flag] => match flag.to_str().and_then(|f| f.strip_prefix("--prefix=")) {
            Some(dir) => PathBuf::from(dir),
            None => bail!(USAGE),
        },
        _ => bail!(USAGE),
    };
    if prefix.as_os_str().is_empty() {
        bail!("--prefix: an empty directory name; {USAGE}");
    }
    std::path::absolute(&prefix).with_context(|| format!("--prefix {}", prefix.display()))
}

/// Installs `loader` (a built binary) and what it makes under `prefix`, one `installed: PATH`
/// line each.
pub fn install(loader: &Path, prefix: &Path) -> Result<()> {
    let staging = cmd::target_dir().join("install");
    if staging.exists() {
        fs::remove_dir_all(&staging).with_context(|| format!("emptying {}", staging.display()))?;
    }
    fs::create_dir_all(&staging).with_context(|| format!("creating {}", staging.display()))?;

    // (made here, installed there, mode)
    let mut files = vec![(loader.to_path_buf(), prefix.join("bin/loader"), 0o755)];
    for (shell, under_prefix) in COMPLETIONS {
        let script = Cmd::new(loader).args(["completions", shell]).capture()?;
        let made = staging.join(format!("completions.{shell}"));
        fs::write(&made, script).with_context(|| format!("writing {}", made.display()))?;
        files.push((made, prefix.join(under_prefix), 0o644));
    }
    let man_dir = staging.join("man1");
    let pages = Cmd::new(loader).args([OsString::from("man"), "--out".into(), man_dir.into()]).capture()?;
    let pages = String::from_utf8(pages).context("`loader man` printed a path that is not UTF-8")?;
    for page in pages.lines().map(PathBuf::from) {
        let name = page.file_name().with_context(|| format!("`loader man` printed {page:?}, not a file"))?;
        let installed = prefix.join(MAN_DIR).join(name);
        files.push((page, installed, 0o644));
    }
    if !files.iter().any(|(_, to, _)| to.ends_with("man1/loader.1")) {
        bail!("`loader man` wrote no loader.1 (it printed {:?})", pages.trim());
    }

    for (from, to, mode) in &files {
        put(from, to, *mode)?;
        println!("installed: {}", to.display());
    }
    Ok(())
}

/// Copies `from` to `to` with `mode` by way of a file beside it and a rename: a `loader`
/// running from `to` keeps its old binary (writing over it would fail with "text file busy"),
/// and nobody reads a half-written file.
fn put(from: &Path, to: &Path, mode: u32) -> Result<()> {
    let dir = to.parent().with_context(|| format!("{} has no folder", to.display()))?;
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let name = to.file_name().with_context(|| format!("{} has no file name", to.display()))?;
    let mut partial = OsString::from(".");
    partial.push(name);
    partial.push(".installing");
    let partial = dir.join(partial);
    fs::copy(from, &partial).with_context(|| format!("copying {} to {}", from.display(), partial.display()))?;
    let done = fs::set_permissions(&partial, fs::Permissions::from_mode(mode))
        .and_then(|()| fs::rename(&partial, to))
        .with_context(|| format!("installing {}", to.display()));
    if done.is_err() {
        let _ = fs::remove_file(&partial);
    }
    done
}
