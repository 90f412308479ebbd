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

use std::ffi::{CStr, CString};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

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
}

impl Privileges {
    /// From the environment: drop to `SUDO_UID`/`SUDO_GID` when running as root under sudo.
    /// Fails on a malformed `SUDO_UID`/`SUDO_GID` (better than guessing while root).
    pub fn from_env(out: &Path) -> anyhow::Result<Privileges> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        let var = |name: &str| std::env::var(name).ok();
        let to = sudo_ids(euid, var("SUDO_UID").as_deref(), var("SUDO_GID").as_deref())
            .map_err(|why| anyhow::anyhow!("cannot tell whom to drop root to: {why}"))?;
        Ok(Privileges { to, out: out.to_path_buf(), created: Vec::new(), dropped: false })
    }

    /// The user root will be dropped to, if any.
    pub fn target(&self) -> Option<Ids> {
        self.to
    }

    /// `fs::create_dir_all(dir)`, remembering the topmost directory it created so that
    /// [`drop_now`](Self::drop_now) hands it (and what was written in it) to the user.
    /// Directories that already existed are never chowned.
    pub fn create_dir_all(&mut self, dir: &Path) -> anyhow::Result<()> {
        let top =
            dir.ancestors().take_while(|a| !a.as_os_str().is_empty() && !a.exists()).last().map(Path::to_path_buf);
        fs::create_dir_all(dir).with_context(|| format!("cannot create output directory {}", dir.display()))?;
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
    pub fn drop_now(&mut self, when: &str) -> anyhow::Result<()> {
        let Some(ids) = self.to else { return Ok(()) };
        if self.dropped {
            return Ok(());
        }
        for dir in &self.created {
            chown_tree(dir, ids).with_context(|| format!("cannot hand {} over to uid {}", dir.display(), ids.uid))?;
        }
        let groups = user_groups(ids);
        // SAFETY: a valid pointer to `groups.len()` gids (or none).
        if unsafe { libc::setgroups(groups.len(), groups.as_ptr()) } != 0 {
            bail!("setgroups({groups:?}): {}", io::Error::last_os_error());
        }
        // SAFETY: setresgid/setresuid have no memory preconditions.
        if unsafe { libc::setresgid(ids.gid, ids.gid, ids.gid) } != 0 {
            bail!("setresgid({}): {}", ids.gid, io::Error::last_os_error());
        }
        // SAFETY: as above.
        if unsafe { libc::setresuid(ids.uid, ids.uid, ids.uid) } != 0 {
            bail!("setresuid({}): {}", ids.uid, io::Error::last_os_error());
        }
        self.dropped = true;
        verify(ids).context("dropping root did not hold")?;
        println!("loader: dropped privileges to uid {} gid {} {when}", ids.uid, ids.gid);
        // access(2) checks the real ids, now the user's: fail before the load, not after it.
        let out = CString::new(self.out.as_os_str().as_bytes()).context("output path contains NUL")?;
        // SAFETY: a valid NUL-terminated path.
        if unsafe { libc::access(out.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
            bail!(
                "output directory {} is not writable by uid {} ({}); choose another --out",
                self.out.display(),
                ids.uid,
                io::Error::last_os_error()
            );
        }
        Ok(())
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
/// `ids.gid`; just `[ids.gid]` when the uid has no passwd entry.
fn user_groups(ids: Ids) -> Vec<libc::gid_t> {
    let Some(name) = user_name(ids.uid) else { return vec![ids.gid] };
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut n = groups.len() as libc::c_int;
        // SAFETY: `name` is NUL-terminated; `groups` holds `n` gids; n is updated.
        let rc = unsafe { libc::getgrouplist(name.as_ptr(), ids.gid, groups.as_mut_ptr(), &mut n) };
        if rc >= 0 {
            groups.truncate(n.max(0) as usize);
            // Never root's group, whatever the database says.
            groups.retain(|&g| g != 0);
            if !groups.contains(&ids.gid) {
                groups.push(ids.gid);
            }
            return groups;
        }
        if groups.len() >= 65_536 {
            return vec![ids.gid];
        }
        let wanted = (n.max(0) as usize).max(groups.len() * 2);
        groups.resize(wanted, 0);
    }
}

/// The passwd name of `uid`.
fn user_name(uid: u32) -> Option<CString> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: a zeroed passwd is a valid out-parameter.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: valid buffers of the given sizes; the result points into them.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut result) };
    if rc != 0 || result.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded, so pw_name is a NUL-terminated string inside `buf`.
    Some(unsafe { CStr::from_ptr(pwd.pw_name) }.to_owned())
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
fn verify(ids: Ids) -> anyhow::Result<()> {
    let (mut r, mut e, mut s) = (0, 0, 0);
    // SAFETY: valid out-pointers.
    unsafe { libc::getresuid(&mut r, &mut e, &mut s) };
    if (r, e, s) != (ids.uid, ids.uid, ids.uid) {
        bail!("getresuid: {r} {e} {s}, expected {}", ids.uid);
    }
    // SAFETY: valid out-pointers.
    unsafe { libc::getresgid(&mut r, &mut e, &mut s) };
    if (r, e, s) != (ids.gid, ids.gid, ids.gid) {
        bail!("getresgid: {r} {e} {s}, expected {}", ids.gid);
    }
    for entry in fs::read_dir("/proc/self/task").context("/proc/self/task")? {
        let path = entry?.path().join("status");
        let status = match fs::read_to_string(&path) {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue, // the thread ended
            Err(e) => return Err(e).with_context(|| path.display().to_string()),
        };
        check_thread_status(&status, ids).map_err(|why| anyhow::anyhow!("{}: {why}", path.display()))?;
    }
    // SAFETY: setuid has no memory preconditions. It must fail; if it did not, say so.
    if unsafe { libc::setuid(0) } == 0 {
        bail!("setuid(0) succeeded after the drop");
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
