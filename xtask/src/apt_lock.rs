//! Waiting for the package manager: a fresh cloud machine often runs unattended upgrades at
//! boot, and `apt-get` fails at once (exit 100, "Could not get lock") while another apt or
//! dpkg holds its locks. Before each `apt-get`, the locks are looked up in `/proc/locks`; while
//! one is held, `setup` says by whom and waits, bounded.

use std::os::unix::fs::MetadataExt as _;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// The files apt and dpkg lock (fcntl) while they work.
const LOCKS: [&str; 4] =
    ["/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock", "/var/lib/apt/lists/lock", "/var/cache/apt/archives/lock"];
/// The longest wait for another package manager to finish (an unattended upgrade at boot
/// takes a few minutes).
pub const WAIT_LIMIT: Duration = Duration::from_secs(600);
const POLL: Duration = Duration::from_secs(2);

/// Returns once no other process holds a package-manager lock, after saying (once) who does;
/// an error after `limit`.
pub fn wait(limit: Duration) -> Result<()> {
    wait_on(&LOCKS, limit, POLL)
}

fn wait_on(paths: &[&str], limit: Duration, poll: Duration) -> Result<()> {
    let since = Instant::now();
    let mut said = false;
    while let Some((pid, path)) = holder(paths) {
        if !said {
            println!(
                "waiting: {path} is held by pid {pid} ({}) — another apt or dpkg (unattended upgrades at boot?); up to {} s",
                command_of(pid),
                limit.as_secs()
            );
            said = true;
        }
        if since.elapsed() >= limit {
            bail!(
                "{path} is still held by pid {pid} ({}) after {} s: another package manager is running; try again when it ends",
                command_of(pid),
                limit.as_secs()
            );
        }
        std::thread::sleep(poll);
    }
    if said {
        println!("ok: the package manager is free after {} s", since.elapsed().as_secs());
    }
    Ok(())
}

/// The first of `paths` that another process holds a lock on, with that process's pid.
fn holder<'a>(paths: &[&'a str]) -> Option<(u32, &'a str)> {
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let me = std::process::id();
    paths.iter().find_map(|&path| {
        let meta = std::fs::metadata(path).ok()?;
        locked_by(&locks, meta.dev(), meta.ino()).into_iter().find(|&pid| pid != me).map(|pid| (pid, path))
    })
}

/// The pids that `/proc/locks` says hold a lock on the file (`dev`, `ino`). A line reads
/// `1: POSIX  ADVISORY  WRITE 1234 08:01:393229 0 EOF` (the device as hex major:minor); a
/// waiting lock (`->`) holds nothing.
fn locked_by(locks: &str, dev: u64, ino: u64) -> Vec<u32> {
    let (major, minor) = ((dev >> 8) & 0xfff | ((dev >> 32) & !0xfff), (dev & 0xff) | ((dev >> 12) & !0xff));
    locks
        .lines()
        .filter(|line| !line.contains("->"))
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (pid, file) = (fields.get(4)?, fields.get(5)?);
            let mut parts = file.split(':');
            let (maj, min, i) = (parts.next()?, parts.next()?, parts.next()?);
            let same = u64::from_str_radix(maj, 16).ok()? == major
                && u64::from_str_radix(min, 16).ok()? == minor
                && i.parse::<u64>().ok()? == ino;
            if same { pid.parse().ok() } else { None }
        })
        .collect()
}

fn command_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).map_or_else(|_| "?".to_owned(), |c| c.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_line_names_its_holder_and_a_waiter_holds_nothing() {
        let dev = (8 << 8) | 1;
        let locks = "1: POSIX  ADVISORY  WRITE 1234 08:01:393229 0 EOF\n\
                     1: -> POSIX  ADVISORY  WRITE 999 08:01:393229 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 77 08:02:393229 0 EOF\n";
        assert_eq!(locked_by(locks, dev, 393229), [1234]);
        assert!(locked_by(locks, dev, 5).is_empty());
    }

    #[test]
    fn a_lock_another_process_holds_is_found_and_waited_for() {
        let path = std::env::temp_dir().join(format!("xtask-apt-lock-{}", std::process::id()));
        std::fs::write(&path, b"").unwrap();
        let name: &'static str = Box::leak(path.display().to_string().into_boxed_str());
        assert_eq!(holder(&[name]), None, "nobody holds it yet");
        // Another process (flock(1) would do; python is on every machine setup runs on).
        let mut child = std::process::Command::new("python3")
            .args(["-c", "import fcntl,sys,time; f=open(sys.argv[1],'w'); fcntl.lockf(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(30)", name])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        assert_eq!(holder(&[name]), Some((child.id(), name)));
        let err = wait_on(&[name], Duration::from_millis(100), Duration::from_millis(20)).unwrap_err().to_string();
        assert!(err.contains("still held by pid") && err.contains(name), "{err}");
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(holder(&[name]), None, "released with its holder");
        wait_on(&[name], Duration::from_millis(100), Duration::from_millis(20)).expect("nothing to wait for");
        std::fs::remove_file(&path).unwrap();
    }
}
