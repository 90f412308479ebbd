//! Dropping root once the probes are attached: `sudo loader run …` needs root only to load
//! and attach the eBPF programs; the load itself, the readings (maps through fds already
//! open, `/proc/<tgid>/…` of its own process) and every file written run as the user who
//! invoked sudo.
//!
//! Owns: finding that user (`SUDO_UID` / `SUDO_GID` while euid is 0), handing the output
//! directories this process created as root over to them, the drop itself (supplementary
//! groups, gid, uid — on every thread) and proving it cannot be undone. Does not: decide
//! whether the probes may load (`probes::privilege` reads the capabilities), or when to drop
//! (the run calls [`Privileges::drop_now`] after its last `Probes::start`).
//!
//! Plain root (no `SUDO_UID`, e.g. CI) keeps root: there is nobody to drop to, and nothing is
//! printed. Not root: nothing to do.

use std::ffi::CString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use nix::unistd::{self, AccessFlags, Gid, Uid, User};

/// Why root could not be dropped (or whom to drop to could not be told). Any of these ends
/// the run: it never goes on as root when it meant to drop.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrivilegeError {
    /// `SUDO_UID`/`SUDO_GID` do not name a user and group.
    #[error("cannot tell whom to drop root to: {0}")]
    SudoIds(String),
    /// The output directory could not be created.
    #[error("cannot create output directory {}: {source}", path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// What this process created as root could not be handed over.
    #[error("cannot hand {} over to uid {uid}: {source}", path.display())]
    Chown {
        /// The file or directory.
        path: PathBuf,
        /// The user.
        uid: u32,
        /// Why.
        source: io::Error,
    },
    /// A credentials call failed.
    #[error("{call}: {source}")]
    Call {
        /// The call and its arguments.
        call: String,
        /// The errno.
        source: nix::Error,
    },
    /// After the drop, some id or capability of root is left.
    #[error("dropping root did not hold: {0}")]
    NotHeld(String),
    /// The user cannot write the output directory.
    #[error("output directory {} is not writable by uid {uid} ({source}); choose another --out", path.display())]
    NotWritable {
        /// The directory.
        path: PathBuf,
        /// The user.
        uid: u32,
        /// Why.
        source: nix::Error,
    },
}

fn call(call: impl Into<String>) -> impl FnOnce(nix::Error) -> PrivilegeError {
    let call = call.into();
    move |source| PrivilegeError::Call { call, source }
}

/// The user and group a sudo invocation came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ids {
    /// `SUDO_UID`.
    pub uid: u32,
    /// `SUDO_GID`.
    pub gid: u32,
}

/// Whether and to whom this process drops root, and what it must hand over first.
#[derive(Debug)]
pub struct Privileges {
    /// `None`: nothing to drop (not root, or root without sudo).
    to: Option<Ids>,
    /// The run's output directory (must be writable by the user after the drop).
    out: PathBuf,
    /// Directories this process created while root (each the topmost one created).
    created: Vec<PathBuf>,
    dropped: bool,
    /// Whether the drop is said on stdout (not when stdout is for scripts: `--quiet`, `--json`).
    announce: bool,
}

impl Privileges {
    /// From the environment: drop to `SUDO_UID`/`SUDO_GID` when running as root under sudo.
    /// Fails on a malformed `SUDO_UID`/`SUDO_GID` (better than guessing while root).
    pub fn from_env(out: &Path) -> Result<Privileges, PrivilegeError> {
        let euid = unistd::geteuid().as_raw();
        let var = |name: &str| std::env::var(name).ok();
        let to =
            sudo_ids(euid, var("SUDO_UID").as_deref(), var("SUDO_GID").as_deref()).map_err(PrivilegeError::SudoIds)?;
        Ok(Privileges { to, out: out.to_path_buf(), created: Vec::new(), dropped: false, announce: true })
    }

    /// Whether [`drop_now`](Self::drop_now) says so on stdout (by default it does).
    pub fn announcing(self, announce: bool) -> Privileges {
        Privileges { announce, ..self }
    }

    /// The user root will be dropped to, if any.
    pub fn target(&self) -> Option<Ids> {
        self.to
    }

    /// `fs::create_dir_all(dir)`, remembering the topmost directory it created so that
    /// [`drop_now`](Self::drop_now) hands it (and what was written in it) to the user.
    /// Directories that already existed are never chowned.
    pub fn create_dir_all(&mut self, dir: &Path) -> Result<(), PrivilegeError> {
        let top =
            dir.ancestors().take_while(|a| !a.as_os_str().is_empty() && !a.exists()).last().map(Path::to_path_buf);
        fs::create_dir_all(dir).map_err(|source| PrivilegeError::CreateDir { path: dir.to_path_buf(), source })?;
        if let Some(top) = top
            && self.to.is_some()
            && !self.dropped
        {
            self.created.push(top);
        }
        Ok(())
    }

    /// Drop root now, if there is someone to drop to and it was not done yet: chown what
    /// this process created, then `setgroups` (the user's groups), `setresgid`, `setresuid`
    /// (glibc applies each to every thread), then check on every thread that no id and no
    /// capability of root is left and that `setuid(0)` fails. `when` ends the printed line
    /// (`"after loading probes"`). An error here ends the run: it never goes on as root
    /// when it meant to drop.
    pub fn drop_now(&mut self, when: &str) -> Result<(), PrivilegeError> {
        let Some(ids) = self.to else { return Ok(()) };
        if self.dropped {
            return Ok(());
        }
        for dir in &self.created {
            chown_tree(dir, ids).map_err(|source| PrivilegeError::Chown { path: dir.clone(), uid: ids.uid, source })?;
        }
        let groups = user_groups(ids);
        unistd::setgroups(&groups).map_err(call(format!("setgroups({groups:?})")))?;
        let (uid, gid) = (Uid::from_raw(ids.uid), Gid::from_raw(ids.gid));
        unistd::setresgid(gid, gid, gid).map_err(call(format!("setresgid({gid})")))?;
        unistd::setresuid(uid, uid, uid).map_err(call(format!("setresuid({uid})")))?;
        self.dropped = true;
        verify(ids).map_err(PrivilegeError::NotHeld)?;
        if self.announce {
            println!("loader: dropped privileges to uid {} gid {} {when}", ids.uid, ids.gid);
        }
        // access(2) checks the real ids, now the user's: fail before the load, not after it.
        unistd::access(&self.out, AccessFlags::W_OK | AccessFlags::X_OK).map_err(|source| PrivilegeError::NotWritable {
            path: self.out.clone(),
            uid: ids.uid,
            source,
        })
    }
}

/// Whom to drop to: `None` unless euid is 0 and `SUDO_UID` names another user.
fn sudo_ids(euid: u32, sudo_uid: Option<&str>, sudo_gid: Option<&str>) -> Result<Option<Ids>, String> {
    if euid != 0 {
        return Ok(None);
    }
    let Some(uid) = sudo_uid else { return Ok(None) };
    let uid: u32 = uid.trim().parse().map_err(|_| format!("SUDO_UID={uid:?} is not a uid"))?;
    if uid == 0 {
        return Ok(None);
    }
    let gid = sudo_gid.ok_or("SUDO_UID is set without SUDO_GID")?;
    let gid: u32 = gid.trim().parse().map_err(|_| format!("SUDO_GID={gid:?} is not a gid"))?;
    if gid == 0 {
        return Err(format!("SUDO_GID=0 for SUDO_UID={uid}: refusing to keep group root"));
    }
    Ok(Some(Ids { uid, gid }))
}

/// The user's supplementary groups from the group database (`getgrouplist`), always holding
/// `ids.gid` and never root's group; just `[ids.gid]` when the uid has no passwd entry.
fn user_groups(ids: Ids) -> Vec<Gid> {
    let gid = Gid::from_raw(ids.gid);
    let name = User::from_uid(Uid::from_raw(ids.uid)).ok().flatten().and_then(|u| CString::new(u.name).ok());
    let mut groups = name.and_then(|n| unistd::getgrouplist(&n, gid).ok()).unwrap_or_default();
    groups.retain(|g| g.as_raw() != 0);
    if !groups.contains(&gid) {
        groups.push(gid);
    }
    groups
}

/// `lchown -R dir uid:gid` (symlinks themselves, never their targets).
fn chown_tree(path: &Path, ids: Ids) -> io::Result<()> {
    std::os::unix::fs::lchown(path, Some(ids.uid), Some(ids.gid))?;
    if fs::symlink_metadata(path)?.is_dir() {
        for entry in fs::read_dir(path)? {
            chown_tree(&entry?.path(), ids)?;
        }
    }
    Ok(())
}

/// After the drop: this thread's real/effective/saved ids, every thread's ids and
/// capabilities (from `/proc/self/task/*/status`), and a `setuid(0)` that must fail.
fn verify(ids: Ids) -> Result<(), String> {
    let u = unistd::getresuid().map_err(|e| format!("getresuid: {e}"))?;
    let (r, e, s) = (u.real.as_raw(), u.effective.as_raw(), u.saved.as_raw());
    if (r, e, s) != (ids.uid, ids.uid, ids.uid) {
        return Err(format!("getresuid: {r} {e} {s}, expected {}", ids.uid));
    }
    let g = unistd::getresgid().map_err(|e| format!("getresgid: {e}"))?;
    let (r, e, s) = (g.real.as_raw(), g.effective.as_raw(), g.saved.as_raw());
    if (r, e, s) != (ids.gid, ids.gid, ids.gid) {
        return Err(format!("getresgid: {r} {e} {s}, expected {}", ids.gid));
    }
    for entry in fs::read_dir("/proc/self/task").map_err(|e| format!("/proc/self/task: {e}"))? {
        let path = entry.map_err(|e| format!("/proc/self/task: {e}"))?.path().join("status");
        let status = match fs::read_to_string(&path) {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue, // the thread ended
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        check_thread_status(&status, ids).map_err(|why| format!("{}: {why}", path.display()))?;
    }
    // It must fail; if it did not, say so.
    if unistd::setuid(Uid::from_raw(0)).is_ok() {
        return Err("setuid(0) succeeded after the drop".to_string());
    }
    Ok(())
}

/// A thread's `status`: all four uids and gids are the user's; no permitted or effective
/// capability is left.
fn check_thread_status(status: &str, ids: Ids) -> Result<(), String> {
    let field = |key: &str| status.lines().find_map(|l| l.strip_prefix(key)).map(str::trim).unwrap_or("");
    let all = |key: &str, want: u32| {
        let values: Vec<&str> = field(key).split_whitespace().collect();
        if values.len() == 4 && values.iter().all(|v| v.parse() == Ok(want)) {
            Ok(())
        } else {
            Err(format!("{key} {values:?}, expected {want} ×4"))
        }
    };
    all("Uid:", ids.uid)?;
    all("Gid:", ids.gid)?;
    for key in ["CapPrm:", "CapEff:"] {
        if u64::from_str_radix(field(key), 16) != Ok(0) {
            return Err(format!("{key} {:?} after the drop", field(key)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_only_as_root_under_sudo() {
        let ids = Some(Ids { uid: 1000, gid: 1001 });
        assert_eq!(sudo_ids(0, Some("1000"), Some("1001")), Ok(ids));
        assert_eq!(sudo_ids(0, None, None), Ok(None), "plain root: nobody to drop to");
        assert_eq!(sudo_ids(1000, Some("1000"), Some("1000")), Ok(None), "not root");
        assert_eq!(sudo_ids(0, Some("0"), Some("0")), Ok(None), "sudo from root");
        assert!(sudo_ids(0, Some("x"), Some("1")).is_err());
        assert!(sudo_ids(0, Some("1000"), None).is_err());
        assert!(sudo_ids(0, Some("1000"), Some("0")).is_err());
    }

    #[test]
    fn thread_status_must_hold_no_root() {
        let ok = "Name:\tx\nUid:\t1000\t1000\t1000\t1000\nGid:\t1001\t1001\t1001\t1001\n\
                  CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n";
        let ids = Ids { uid: 1000, gid: 1001 };
        assert_eq!(check_thread_status(ok, ids), Ok(()));
        let saved_root = ok.replace("Uid:\t1000\t1000\t1000\t1000", "Uid:\t1000\t1000\t0\t1000");
        assert!(check_thread_status(&saved_root, ids).is_err());
        let caps = ok.replace("CapEff:\t0000000000000000", "CapEff:\t000001ffffffffff");
        assert!(check_thread_status(&caps, ids).is_err());
        assert!(check_thread_status("Name:\tx\n", ids).is_err(), "unreadable counts as not dropped");
    }
}
