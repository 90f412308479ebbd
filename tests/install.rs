//! Issue 49, "the first ten minutes": what an install puts on the machine. `loader --version`
//! names the commit it was built from; the hidden `loader completions SHELL` and `loader man
//! --out DIR` make the scripts and pages from loader's own flags; `cargo xtask install
//! --prefix DIR` puts the binary and all of them where shells and `man` look.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use loader_tests::common;

fn loader(args: &[&str]) -> Output {
    Command::new(common::loader_bin()).args(args).output().expect("loader runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8 output")
}

/// A fresh scratch folder of this suite's.
fn scratch(name: &str) -> PathBuf {
    let dir = common::tmp_dir().join(format!("install-{name}-{}", std::process::id()));
    if dir.exists() {
        fs::remove_dir_all(&dir).expect("remove an old scratch folder");
    }
    dir
}

#[test]
fn version_names_the_commit_of_head() {
    let git = Command::new("git")
        .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "--short", "HEAD"])
        .output()
        .expect("git runs");
    assert!(git.status.success(), "git rev-parse: {}", String::from_utf8_lossy(&git.stderr));
    let commit = text(&git.stdout).trim().to_owned();
    let out = loader(&["--version"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text(&out.stdout).trim(), format!("loader {} ({commit})", env!("CARGO_PKG_VERSION")));
}

/// Each shell's script in its own grammar: how it starts, how it offers the `run` command and
/// how it names `run`'s `--rate`.
#[test]
fn completions_of_each_shell_offer_run_and_its_rate() {
    let shells = [
        ("bash", "_loader()", "loader,run)", "--rate"),
        ("zsh", "#compdef loader", "(run)", "'--rate=["),
        ("fish", "complete -c loader", "-a \"run\"", "-l rate"),
    ];
    for (shell, opening, run, rate) in shells {
        let out = loader(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {out:?}");
        assert!(out.stderr.is_empty(), "{shell}: {}", String::from_utf8_lossy(&out.stderr));
        let script = text(&out.stdout);
        assert!(script.contains(opening), "{shell} script without {opening:?}:\n{script}");
        assert!(script.contains(run), "{shell} script without {run:?}:\n{script}");
        assert!(script.contains(rate), "{shell} script without {rate:?}:\n{script}");
        // The hidden commands are for the install, not for a user's tab key.
        assert!(!script.contains("completions"), "{shell} script offers the hidden commands:\n{script}");
    }
}

#[test]
fn completions_of_an_unknown_shell_is_one_line_of_error() {
    let out = loader(&["completions", "nope"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert_eq!(stderr.trim(), "loader: error: SHELL: expected bash, zsh or fish, not \"nope\"");
    assert!(out.stdout.is_empty());
}

#[test]
fn man_writes_a_page_for_loader_and_one_per_command() {
    let dir = scratch("man");
    let out = loader(&["man", "--out", dir.to_str().expect("a UTF-8 path")]);
    assert!(out.status.success(), "{out:?}");
    let printed: BTreeSet<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    let on_disk: BTreeSet<String> = fs::read_dir(&dir)
        .expect("the pages' folder")
        .map(|entry| entry.expect("an entry").path().to_string_lossy().into_owned())
        .collect();
    assert_eq!(printed, on_disk, "it prints every page it wrote, and only those");
    let names: BTreeSet<String> =
        on_disk.iter().map(|p| Path::new(p).file_name().unwrap().to_string_lossy().into_owned()).collect();
    for command in ["loader", "loader-run", "loader-target", "loader-verdict", "loader-calibrate", "loader-merge"] {
        assert!(names.contains(&format!("{command}.1")), "no {command}.1 in {names:?}");
    }
    assert!(
        !names.iter().any(|n| n.contains("-man") || n.contains("-completions")),
        "pages of hidden commands: {names:?}"
    );
    assert!(!names.contains("loader-help.1"), "{names:?}");

    let top = fs::read_to_string(dir.join("loader.1")).expect("loader.1");
    assert!(top.contains(".TH loader 1"), "{top}");
    assert!(top.contains("loader\\-run(1)"), "loader.1 does not point at loader-run(1):\n{top}");
    let run = fs::read_to_string(dir.join("loader-run.1")).expect("loader-run.1");
    assert!(run.contains(".TH loader\\-run 1") || run.contains(".TH loader-run 1"), "{run}");
    assert!(run.contains("\\-\\-rate"), "loader-run.1 does not document --rate:\n{run}");
    fs::remove_dir_all(&dir).expect("remove the pages");
}

#[test]
fn man_into_a_folder_it_cannot_make_is_one_line_of_error() {
    let out = loader(&["man", "--out", "/dev/null/man1"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("loader: error: cannot write /dev/null/man1:"), "{stderr}");
}

/// `cargo xtask install --prefix DIR` on the loader this suite built: its nested release build
/// is a no-op then (xtask strips the variables `cargo run` sets, as the harness does), so this
/// costs building xtask and copying the binary.
#[test]
fn xtask_install_puts_the_binary_completions_and_man_pages_under_the_prefix() {
    let built = Path::new(common::loader_bin());
    if std::env::var_os("LOADER_BIN").is_some() {
        println!("skip: LOADER_BIN names a binary that xtask install would not install (it builds its own)");
        return;
    }
    if built.parent().and_then(Path::file_name).is_none_or(|profile| profile != "release") {
        println!("skip: xtask install builds the release loader; this suite is not the release build");
        return;
    }
    let prefix = scratch("prefix");
    let out = common::plain_cargo()
        .args(["xtask", "install", "--prefix"])
        .arg(&prefix)
        .env("CARGO_TARGET_DIR", common::target_dir())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("Compiling loader"), "the loader was rebuilt");

    let installed: BTreeSet<PathBuf> =
        stdout.lines().filter_map(|l| l.strip_prefix("installed: ")).map(PathBuf::from).collect();
    let man1 = prefix.join("share/man/man1");
    let wanted = [
        prefix.join("bin/loader"),
        prefix.join("share/bash-completion/completions/loader"),
        prefix.join("share/zsh/site-functions/_loader"),
        prefix.join("share/fish/vendor_completions.d/loader.fish"),
        man1.join("loader.1"),
        man1.join("loader-run.1"),
    ];
    for path in &wanted {
        assert!(installed.contains(path), "no `installed: {}` line:\n{stdout}", path.display());
    }
    for path in &installed {
        assert!(path.starts_with(&prefix), "{} is outside the prefix", path.display());
        assert!(path.is_file(), "{} is not there", path.display());
    }
    let pages = fs::read_dir(&man1).expect("man1").count();
    assert_eq!(installed.len(), 4 + pages, "the binary, three scripts and every page:\n{stdout}");

    use std::os::unix::fs::PermissionsExt as _;
    let bin = prefix.join("bin/loader");
    assert_eq!(fs::metadata(&bin).expect("bin/loader").permissions().mode() & 0o777, 0o755);
    let version = |bin: &Path| Command::new(bin).arg("--version").output().expect("loader runs").stdout;
    assert_eq!(version(&bin), version(built), "the installed binary is the one built");
    let bash = fs::read(prefix.join("share/bash-completion/completions/loader")).expect("the bash script");
    assert_eq!(bash, loader(&["completions", "bash"]).stdout);
    fs::remove_dir_all(&prefix).expect("remove the prefix");
}
