//! A local process tree, watched beside the run (`--watch NAME=pid:N` or
//! `--watch NAME=process:NAME`): the CPU time, resident memory, open files and number of
//! processes of one process and its descendants, or of every process with a name and theirs.
//!
//! What this module owns: parsing the selector, checking once that it names something
//! ([`ProcessTree::open`]), and summing the tree at one instant ([`ProcessTree::read`]):
//! the tree found again each time by following parent pids down from the roots (workers come
//! and go), then `/proc/PID/fd` of the tree's members only, and the CPUs the tree may run on
//! ([`ProcessTree::cpus`], its members' affinity). The parsers of `/proc` text are pure
//! functions.
//!
//! A reading lists `/proc` but reads `/proc/PID/stat` only where it can have changed what
//! the tree is: the members, the processes not seen before, those younger than
//! [`YOUNG_S`] (a fork may exec into the watched name after its first sighting), and every
//! process once in [`RESCAN_EVERY`] readings. A host of 150 processes cost 1.3 ms of CPU a
//! second with every `stat` read each time; the members alone, a tenth of that.
//!
//! What it does not: the once-a-second schedule, differences between readings, judging or
//! reporting them. A reading sums the processes alive at that instant: when one leaves the
//! tree, its CPU time leaves the sum, so a caller's difference of `cpu_ns` can fall and
//! must not be taken as negative use. Threads are counted within their process (its
//! `/proc/PID/stat` covers all of them); processes re-parented away from the tree (to init
//! or a subreaper) leave it.
//!
//! Errors are one line naming the selector (`pid:123: no such process`). Nothing here
//! panics on what `/proc` holds.

use super::{io_msg, one_line};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read};
use std::sync::Mutex;

/// Which processes: one pid and its descendants, or every process whose name is NAME and
/// their descendants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// `pid:N`: process N (a process id, not a thread id) and its descendants.
    Pid(u32),
    /// `process:NAME`: every process whose `/proc/PID/comm` is NAME exactly, or whose
    /// argv[0]'s basename is NAME (comm is cut to 15 bytes), and their descendants.
    Name(String),
}

impl Selector {
    /// The selector of `kind:value` as the user wrote it, split at the first colon:
    /// `parse("pid", "123")` → `Pid(123)`, `parse("process", "nginx")` → `Name("nginx")`.
    /// Fails (one line) on another kind, a pid that is not a positive whole number, or an
    /// empty name. The value is trimmed.
    pub fn parse(kind: &str, value: &str) -> Result<Selector, String> {
        let value = value.trim();
        match kind.trim() {
            "pid" => match value.parse::<u32>() {
                Ok(pid) if pid > 0 => Ok(Selector::Pid(pid)),
                _ => Err(format!("pid:{}: not a process id (a positive whole number)", one_line(value))),
            },
            "process" if value.is_empty() => Err("process:: empty process name".into()),
            "process" => Ok(Selector::Name(value.to_string())),
            other => Err(format!(
                "{}:{}: unknown process selector (pid:N or process:NAME)",
                one_line(other),
                one_line(value)
            )),
        }
    }
}

impl fmt::Display for Selector {
    /// `pid:N` or `process:NAME`, as the user writes it (control characters escaped).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Selector::Pid(pid) => write!(f, "pid:{pid}"),
            Selector::Name(name) => write!(f, "process:{}", one_line(name)),
        }
    }
}

/// A process tree, checked once before the run and summed at each reading.
#[derive(Debug)]
pub struct ProcessTree {
    /// Which processes.
    selector: Selector,
    /// Clock ticks per second (`sysconf(_SC_CLK_TCK)`), for utime and stime.
    clk_tck: u64,
    /// Bytes per page (`sysconf(_SC_PAGESIZE)`), for the resident set.
    page_size: u64,
    /// What the readings so far learnt of every process (parent, name, argv[0]), so a reading
    /// reads again only what can have changed.
    scan: Mutex<Scan>,
}

/// A reading reads every process's `stat` again once in this many readings (a process can
/// exec into the watched name long after it started; rare).
pub const RESCAN_EVERY: u64 = 30;
/// A process started less than this long ago is read again at each reading (a fork that has
/// not yet exec'd into its final name).
pub const YOUNG_S: u64 = 10;

/// Sums over the tree at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessReading {
    /// CPU time, ns: utime + stime (fields 14 and 15 of `/proc/PID/stat`, clock ticks) of
    /// every process in the tree, threads included; falls when a process leaves the tree.
    pub cpu_ns: u64,
    /// Resident memory, bytes: the resident set (field 24 of `/proc/PID/stat`, pages) of
    /// every process in the tree. Shared pages count once per process that maps them.
    pub rss_bytes: u64,
    /// Open file descriptors of every process in the tree (entries of `/proc/PID/fd`; 0 for
    /// a process whose fd directory cannot be read).
    pub fds: u64,
    /// How many processes the tree held.
    pub processes: u32,
}

impl ProcessTree {
    /// The tree of `selector`. Fails (one line) when no such pid exists, or no process has
    /// that name (`/proc/PID/comm`, compared exactly, or the basename of argv[0] from
    /// `/proc/PID/cmdline`), or `/proc` cannot be read.
    pub fn open(selector: Selector) -> Result<ProcessTree, String> {
        if let Selector::Pid(pid) = selector {
            let path = format!("/proc/{pid}/stat");
            if let Err(e) = fs::metadata(&path) {
                return Err(match e.kind() {
                    io::ErrorKind::NotFound => format!("pid:{pid}: no such process ({path} does not exist)"),
                    _ => format!("pid:{pid}: cannot read {path}: {}", io_msg(&e)),
                });
            }
        }
        let sysconf = |var| nix::unistd::sysconf(var).ok().flatten().filter(|&v| v > 0).map(|v| v as u64);
        let tree = ProcessTree {
            selector,
            clk_tck: sysconf(nix::unistd::SysconfVar::CLK_TCK).unwrap_or(100),
            page_size: sysconf(nix::unistd::SysconfVar::PAGE_SIZE).unwrap_or(4096),
            scan: Mutex::new(Scan::default()),
        };
        tree.read()?;
        Ok(tree)
    }

    /// Which processes.
    pub fn selector(&self) -> &Selector {
        &self.selector
    }

    /// Sum over the tree at this instant: the tree found again (`/proc` listed, each
    /// process's parent and name known from an earlier reading or read now, ppid followed
    /// down from the roots), then each member's CPU, memory and fd count read.
    /// Fails (one line) when the tree is gone (no process left) or `/proc` cannot be listed.
    pub fn read(&self) -> Result<ProcessReading, String> {
        let entries =
            fs::read_dir("/proc").map_err(|e| format!("{}: cannot list /proc: {}", self.selector, io_msg(&e)))?;
        let mut scan = self.scan.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        scan.readings += 1;
        let full = scan.readings % RESCAN_EVERY == 1;
        let young_from = boot_ticks(self.clk_tck).map(|now| now.saturating_sub(YOUNG_S * self.clk_tck));
        let mut alive = Vec::with_capacity(scan.known.len().max(256));
        let mut line = String::with_capacity(512);
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            let stale = match scan.known.get(&pid) {
                None => true,
                Some(k) => full || k.member || young_from.is_none_or(|from| k.start_time >= from),
            };
            // A process that ended since the listing has no stat left: skipped.
            if stale && !scan.refresh(pid, &self.selector, &mut line) {
                continue;
            }
            alive.push(pid);
        }
        let listed: HashSet<u32> = alive.iter().copied().collect();
        scan.known.retain(|pid, _| listed.contains(pid));
        let pairs: Vec<(u32, u32)> =
            alive.iter().filter_map(|pid| scan.known.get(pid).map(|k| (*pid, k.ppid))).collect();
        let roots: Vec<u32> = alive.iter().copied().filter(|pid| scan.known.get(pid).is_some_and(|k| k.root)).collect();
        let members = tree(&pairs, &roots);
        for known in scan.known.values_mut() {
            known.member = false;
        }
        if members.is_empty() {
            return Err(match &self.selector {
                Selector::Pid(_) => {
                    format!("{}: no such process in /proc (it ended, or is a thread id)", self.selector)
                }
                Selector::Name(_) => format!(
                    "{}: no process has that name (compared with /proc/PID/comm and the basename of argv[0])",
                    self.selector
                ),
            });
        }
        let mut reading = ProcessReading::default();
        let mut ticks = 0u64;
        for pid in &members {
            // A member not read this time (it joined the tree through a parent) is read now.
            if scan.known.get(pid).is_some_and(|k| k.read != scan.readings)
                && !scan.refresh(*pid, &self.selector, &mut line)
            {
                continue;
            }
            let Some(known) = scan.known.get_mut(pid) else { continue };
            known.member = true;
            ticks = ticks.saturating_add(known.cpu_ticks);
            reading.rss_bytes = reading.rss_bytes.saturating_add(known.rss_pages.saturating_mul(self.page_size));
            reading.fds = reading.fds.saturating_add(open_fds(*pid));
            reading.processes += 1;
        }
        scan.members = members;
        reading.cpu_ns =
            u64::try_from(u128::from(ticks) * 1_000_000_000 / u128::from(self.clk_tck)).unwrap_or(u64::MAX);
        Ok(reading)
    }

    /// The CPUs the tree's processes may run on (the union of their affinity, which the
    /// kernel keeps within their cpuset), ascending, as of the last reading; empty when none
    /// can be read.
    pub fn cpus(&self) -> Vec<usize> {
        let scan = self.scan.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut cpus: Vec<usize> = scan.members.iter().flat_map(|&pid| super::cpus::affinity(pid)).collect();
        cpus.sort_unstable();
        cpus.dedup();
        cpus
    }

    /// The CPU quota the tree's processes run under, cores: the sum of their cgroups'
    /// tightest `cpu.max` (each cgroup counted once), as of the last reading; `None` when
    /// one of them runs without a quota (or none can be read).
    pub fn quota_cores(&self) -> Option<f64> {
        let scan = self.scan.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut cgroups = HashMap::new();
        for &pid in &scan.members {
            let (dir, cores) = super::cgroup::quota_of(pid)?;
            cgroups.insert(dir, cores);
        }
        (!cgroups.is_empty()).then(|| cgroups.values().sum())
    }
}

/// What the readings so far know of the processes on the host.
#[derive(Debug, Default)]
struct Scan {
    /// Readings so far (the first is 1).
    readings: u64,
    /// By pid.
    known: HashMap<u32, Known>,
    /// The tree's pids at the last reading, ascending.
    members: Vec<u32>,
}

/// One process as last read.
#[derive(Debug)]
struct Known {
    /// Field 4 of `/proc/PID/stat`.
    ppid: u32,
    /// Field 22: when it started, clock ticks after boot (a reused pid starts later).
    start_time: u64,
    /// Field 2.
    comm: String,
    /// Whether it is a root of the tree: the selector's pid, or a process of its name.
    root: bool,
    /// Whether it was in the tree at the last reading.
    member: bool,
    /// utime + stime, clock ticks, as last read.
    cpu_ticks: u64,
    /// Resident set, pages, as last read.
    rss_pages: u64,
    /// The reading ([`Scan::readings`]) that last read it.
    read: u64,
}

impl Scan {
    /// Read `/proc/PID/stat` of `pid` again into `known`; false when it cannot be read (the
    /// process ended) or is malformed. argv[0] is read (for a name selector) only when the
    /// process is new or its name changed.
    fn refresh(&mut self, pid: u32, selector: &Selector, line: &mut String) -> bool {
        line.clear();
        let path = format!("/proc/{pid}/stat");
        if File::open(&path).and_then(|mut f| f.read_to_string(line)).is_err() {
            self.known.remove(&pid);
            return false;
        }
        let Some(stat) = parse_stat(line) else {
            self.known.remove(&pid);
            return false;
        };
        let previous = self.known.remove(&pid).filter(|k| k.start_time == stat.start_time && k.comm == stat.comm);
        let root = match (selector, &previous) {
            (Selector::Pid(root), _) => stat.pid == *root,
            (Selector::Name(name), _) if stat.comm == name => true,
            (Selector::Name(_), Some(k)) => k.root,
            (Selector::Name(name), None) => {
                let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                argv0_basename(&cmdline) == name.as_bytes()
            }
        };
        let known = Known {
            ppid: stat.ppid,
            start_time: stat.start_time,
            comm: stat.comm.to_string(),
            root,
            member: previous.as_ref().is_some_and(|k| k.member),
            cpu_ticks: stat.utime.saturating_add(stat.stime),
            rss_pages: stat.rss_pages,
            read: self.readings,
        };
        self.known.insert(pid, known);
        true
    }
}

/// Clock ticks since boot now (`CLOCK_BOOTTIME`, the clock of `/proc/PID/stat`'s start time).
fn boot_ticks(clk_tck: u64) -> Option<u64> {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).ok()?;
    Some(u64::try_from(t.tv_sec()).ok()? * clk_tck + u64::try_from(t.tv_nsec()).ok()? * clk_tck / 1_000_000_000)
}

/// The fields of one `/proc/PID/stat` line this module reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat<'a> {
    /// Field 1.
    pid: u32,
    /// Field 2, without its parentheses: the name, as `/proc/PID/comm` has it.
    comm: &'a str,
    /// Field 4: the parent's pid (0 for init and kthreadd).
    ppid: u32,
    /// Field 14: user CPU time, clock ticks.
    utime: u64,
    /// Field 15: system CPU time, clock ticks.
    stime: u64,
    /// Field 22: when the process started, clock ticks after boot.
    start_time: u64,
    /// Field 24: resident set, pages.
    rss_pages: u64,
}

/// One `/proc/PID/stat` line → its fields; `None` when malformed. The name (field 2) may
/// hold spaces and parentheses, so the fields after it start at the LAST `)`.
fn parse_stat(line: &str) -> Option<Stat<'_>> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    if close < open {
        return None;
    }
    let pid = line[..open].trim().parse().ok()?;
    let comm = &line[open + 1..close];
    // Fields 3.. of the line: index i is field i + 3.
    let rest: Vec<&str> = line[close + 1..].split_whitespace().take(22).collect();
    let field = |n: usize| rest.get(n - 3).copied();
    let number = |n: usize| field(n)?.parse::<u64>().ok();
    Some(Stat {
        pid,
        comm,
        ppid: field(4)?.parse().ok()?,
        utime: number(14)?,
        stime: number(15)?,
        start_time: number(22)?,
        // Printed signed; a negative count (never seen) counts as none.
        rss_pages: field(24)?.parse::<i64>().ok()?.max(0) as u64,
    })
}

/// The pids of the trees under `roots`, given every process as (pid, ppid): each root that
/// is among the processes, and everything below it, each pid once, ascending. Roots that
/// are not among the processes are gone and contribute nothing.
fn tree(pairs: &[(u32, u32)], roots: &[u32]) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::with_capacity(pairs.len());
    let mut alive = HashSet::with_capacity(pairs.len());
    for &(pid, ppid) in pairs {
        alive.insert(pid);
        if pid != ppid {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut members = HashSet::new();
    let mut stack: Vec<u32> = roots.iter().copied().filter(|pid| alive.contains(pid)).collect();
    while let Some(pid) = stack.pop() {
        if members.insert(pid) {
            stack.extend(children.get(&pid).into_iter().flatten().filter(|c| !members.contains(c)));
        }
    }
    let mut members: Vec<u32> = members.into_iter().collect();
    members.sort_unstable();
    members
}

/// `/proc/PID/cmdline` → the basename of argv[0] (up to the first NUL, after the last `/`).
fn argv0_basename(cmdline: &[u8]) -> &[u8] {
    let argv0 = cmdline.split(|&b| b == 0).next().unwrap_or_default();
    argv0.rsplit(|&b| b == b'/').next().unwrap_or_default()
}

/// Open file descriptors of `pid`: the size the kernel reports for `/proc/PID/fd` (its fd
/// count since Linux 6.2, no listing needed), else the directory's entries counted; 0 when
/// it cannot be read.
fn open_fds(pid: u32) -> u64 {
    let dir = format!("/proc/{pid}/fd");
    match fs::metadata(&dir) {
        Ok(meta) if meta.len() > 0 => meta.len(),
        Ok(_) => fs::read_dir(&dir).map(|entries| entries.count() as u64).unwrap_or(0),
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command};
    use std::time::{Duration, Instant};

    const SLEEP: &str = "1234 (sleep) S 1000 1234 1000 34816 1234 4194304 97 0 0 0 3 5 0 0 20 0 1 0 \
                         987654 8192000 220 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";

    #[test]
    fn stat_line() {
        let s = parse_stat(SLEEP).unwrap();
        let want =
            Stat { pid: 1234, comm: "sleep", ppid: 1000, utime: 3, stime: 5, start_time: 987654, rss_pages: 220 };
        assert_eq!(s, want);
    }

    #[test]
    fn stat_line_with_spaces_and_parentheses_in_the_name() {
        let line = SLEEP.replace("(sleep)", "(my) (worker ) 7)");
        let s = parse_stat(&line).unwrap();
        assert_eq!((s.pid, s.comm, s.ppid, s.utime, s.stime, s.rss_pages), (1234, "my) (worker ) 7", 1000, 3, 5, 220));
        let empty = parse_stat(&SLEEP.replace("(sleep)", "()")).map(|s| (s.comm.len(), s.ppid));
        assert_eq!(empty, Some((0, 1000)));
    }

    #[test]
    fn stat_line_malformed() {
        assert_eq!(parse_stat(""), None);
        assert_eq!(parse_stat("1234 (sleep"), None);
        assert_eq!(parse_stat(")1234 (sleep S 1"), None);
        assert_eq!(parse_stat("1234 (sleep) S 1000 1234"), None, "truncated");
        assert_eq!(parse_stat(&SLEEP.replace("1234 (", "x (")), None);
        assert_eq!(parse_stat(&SLEEP.replace(" 3 5 ", " 3 -5 ")), None);
        assert_eq!(parse_stat(&SLEEP.replace(" 1000 1234 ", " -1 1234 ")), None);
        let negative_rss = parse_stat(&SLEEP.replace(" 220 ", " -3 ")).map(|s| s.rss_pages);
        assert_eq!(negative_rss, Some(0));
    }

    #[test]
    fn trees() {
        // 1 ─ 10 ─ 11 ─ 12
        //   │    └ 13
        //   └ 20 ─ 21
        let pairs = [(1, 0), (2, 0), (10, 1), (11, 10), (12, 11), (13, 10), (20, 1), (21, 20)];
        assert_eq!(tree(&pairs, &[10]), vec![10, 11, 12, 13]);
        assert_eq!(tree(&pairs, &[12]), vec![12]);
        assert_eq!(tree(&pairs, &[11, 10, 21]), vec![10, 11, 12, 13, 21], "nested roots count once");
        assert_eq!(tree(&pairs, &[99]), Vec::<u32>::new(), "a root that is gone");
        assert_eq!(tree(&pairs, &[]), Vec::<u32>::new());
        assert_eq!(tree(&pairs, &[1]).len(), 7);
        // Malformed input must not loop: a cycle, and a process that is its own parent.
        assert_eq!(tree(&[(5, 6), (6, 5), (7, 7)], &[5, 7]), vec![5, 6, 7]);
    }

    #[test]
    fn argv0() {
        assert_eq!(argv0_basename(b"/usr/sbin/nginx\0-g\0daemon off;\0"), b"nginx");
        assert_eq!(argv0_basename(b"postgres: checkpointer\0"), b"postgres: checkpointer");
        assert_eq!(argv0_basename(b"a-very-long-program-name\0"), b"a-very-long-program-name");
        assert_eq!(argv0_basename(b"/usr/bin/\0"), b"");
        assert_eq!(argv0_basename(b""), b"");
    }

    #[test]
    fn selectors() {
        assert_eq!(Selector::parse("pid", "123"), Ok(Selector::Pid(123)));
        assert_eq!(Selector::parse("process", " nginx "), Ok(Selector::Name("nginx".into())));
        assert_eq!(Selector::Name("nginx".into()).to_string(), "process:nginx");
        assert_eq!(Selector::Pid(7).to_string(), "pid:7");
        for (kind, value) in [("pid", "0"), ("pid", "-1"), ("pid", "abc"), ("pid", ""), ("process", ""), ("pod", "x")] {
            let e = Selector::parse(kind, value).unwrap_err();
            assert!(e.starts_with(&format!("{kind}:")) && !e.contains('\n'), "{e}");
        }
        assert!(!Selector::parse("pid", "1\n2").unwrap_err().contains('\n'));
    }

    /// Kills the test's process group however the test ends.
    struct Kill(Child);

    impl Drop for Kill {
        fn drop(&mut self) {
            let group = nix::unistd::Pid::from_raw(self.0.id() as i32);
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
            let _ = self.0.wait();
        }
    }

    fn spawn(command: &mut Command) -> Kill {
        Kill(command.process_group(0).spawn().expect("spawn"))
    }

    #[test]
    fn live_child_by_pid() {
        let child = spawn(Command::new("sleep").arg("5"));
        let tree = ProcessTree::open(Selector::Pid(child.0.id())).unwrap_or_else(|e| panic!("{e}"));
        // Right after the fork the child may not have exec'd `sleep` yet (no RSS): up to 2 s.
        let mut r = tree.read().unwrap_or_else(|e| panic!("{e}"));
        for _ in 0..200 {
            if r.rss_bytes > 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            r = tree.read().unwrap_or_else(|e| panic!("{e}"));
        }
        assert!(r.processes >= 1 && r.rss_bytes > 0, "{r:?}");
        assert!(r.fds >= 3 || !nix::unistd::geteuid().is_root(), "stdin, stdout, stderr: {r:?}");
        drop(child);
        let e = tree.read().unwrap_err();
        assert!(e.starts_with("pid:") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn live_tree_with_a_descendant() {
        let child = spawn(Command::new("sh").args(["-c", "sleep 5 & wait"]));
        let tree = ProcessTree::open(Selector::Pid(child.0.id())).unwrap_or_else(|e| panic!("{e}"));
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut r = tree.read().unwrap_or_else(|e| panic!("{e}"));
        while r.processes < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            r = tree.read().unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(r.processes, 2, "sh and its sleep: {r:?}");
    }

    #[test]
    fn live_by_argv0_name() {
        let name = format!("loader-watch-argv0-{}", std::process::id());
        let child = spawn(Command::new("sleep").arg0(&name).arg("5"));
        // Right after the fork the child may not have exec'd yet: up to 2 s for its argv[0].
        let cmdline = format!("/proc/{}/cmdline", child.0.id());
        for _ in 0..200 {
            if std::fs::read(&cmdline).is_ok_and(|c| c.starts_with(name.as_bytes())) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // comm is "sleep": only argv[0] can match.
        let tree = ProcessTree::open(Selector::Name(name.clone())).unwrap_or_else(|e| panic!("{e}"));
        let r = tree.read().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.processes, 1, "{r:?}");
        assert_eq!(tree.read().unwrap_or_else(|e| panic!("{e}")).processes, 1, "from the cache");
        drop(child);
        assert!(tree.read().unwrap_err().contains(&name));
    }

    #[test]
    fn missing_name_and_pid() {
        let e = ProcessTree::open(Selector::Name("loader-no-such-process-xyz".into())).unwrap_err();
        assert!(e.contains("loader-no-such-process-xyz") && !e.contains('\n'), "{e}");
        let e = ProcessTree::open(Selector::Pid(u32::MAX)).unwrap_err();
        assert!(e.contains(&format!("pid:{}", u32::MAX)) && !e.contains('\n'), "{e}");
    }
}
