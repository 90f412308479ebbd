//! A local cgroup v2 directory, watched beside the run (`--watch NAME=cgroup:PATH`): its CPU
//! use and throttling (`cpu.stat`, `cpu.max`), memory (`memory.current`, `memory.max`) and
//! pressure stall information (`cpu.pressure`, `memory.pressure`).
//!
//! What this module owns: resolving the path the user wrote to a cgroup v2 directory,
//! checking it once ([`Cgroup::open`]), and turning one set of its files into one
//! [`CgroupReading`] ([`Cgroup::read`]), through pure parsers over the files' text.
//!
//! What it does not: the once-a-second schedule, differences between readings (rates,
//! throttled share), judging them, reporting them. A hybrid host's v1 controllers of the
//! same cgroup (`cgroup_v1.rs`) fill in what its v2 directory lacks (quota, throttling). Readings are cumulative counters and gauges exactly as the
//! kernel reports them; a file a controller does not provide reads as `None`.
//!
//! Errors are one line naming the cgroup (`cgroup:/sys/fs/cgroup/app: cannot read cpu.stat:
//! No such file or directory`). Nothing here panics on what the files hold.

use super::{io_msg, one_line};
use std::fs;
use std::path::{Path, PathBuf};

use nix::sys::statfs::{CGROUP_SUPER_MAGIC, CGROUP2_SUPER_MAGIC, TMPFS_MAGIC, statfs};

/// Where cgroup v2 is mounted on a unified (v2-only) system.
pub const DEFAULT_MOUNT: &str = "/sys/fs/cgroup";

/// A cgroup v2 directory, opened once before the run.
#[derive(Debug, Clone)]
pub struct Cgroup {
    /// The resolved directory (the path the user named).
    dir: PathBuf,
    /// The cgroup v2 directory, when there is one (a v1-only cgroup has none).
    v2: Option<PathBuf>,
    /// The same cgroup in the v1 hierarchies (hybrid hosts): quota, throttling, CPU, memory.
    v1: super::cgroup_v1::V1,
}

/// Cumulative counters (since the cgroup was created) and gauges at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CgroupReading {
    /// CPU time used by the cgroup's tasks, µs (`cpu.stat` `usage_usec`).
    pub usage_us: u64,
    /// Time the cgroup's tasks were throttled by `cpu.max`, µs (`cpu.stat` `throttled_usec`);
    /// `None` when the cpu controller is not enabled for the cgroup (`cpu.stat` then has only
    /// `usage_usec`, `user_usec` and `system_usec`).
    pub throttled_us: Option<u64>,
    /// Periods in which the cgroup was throttled (`cpu.stat` `nr_throttled`); `None` as for
    /// `throttled_us`.
    pub nr_throttled: Option<u64>,
    /// Time some of the cgroup's tasks stalled waiting for a CPU, µs (`cpu.pressure`, `some`
    /// line, `total=`); `None` when the file is absent or unreadable (PSI off).
    pub cpu_some_us: Option<u64>,
    /// Time all of the cgroup's non-idle tasks stalled waiting for a CPU, µs
    /// (`cpu.pressure`, `full` line, `total=`); `None` as for `cpu_some_us`, or on kernels
    /// without the line.
    pub cpu_full_us: Option<u64>,
    /// Memory charged to the cgroup, bytes (`memory.current`); `None` at the root cgroup or
    /// when the memory controller is not enabled for it.
    pub memory_bytes: Option<u64>,
    /// The cgroup's memory limit, bytes (`memory.max`); `None` for `max` (no limit) or when
    /// the file is absent.
    pub memory_max_bytes: Option<u64>,
    /// Time some tasks stalled on memory, µs (`memory.pressure`, `some` line, `total=`).
    pub mem_some_us: Option<u64>,
    /// Time all non-idle tasks stalled on memory, µs (`memory.pressure`, `full` line,
    /// `total=`).
    pub mem_full_us: Option<u64>,
    /// The CPU limit, cores (`cpu.max` `QUOTA PERIOD` → QUOTA / PERIOD); `None` for
    /// `max PERIOD` (no limit) or when the file is absent.
    pub cpu_limit_cores: Option<f64>,
}

impl Cgroup {
    /// `path` as the user wrote it: absolute (`/sys/fs/cgroup/x`), or relative to the cgroup
    /// v2 mount (`system.slice/nginx.service`, or `/system.slice/nginx.service` as
    /// `/proc/PID/cgroup` prints it). The mount is [`DEFAULT_MOUNT`], or where
    /// `/proc/self/mounts` says cgroup2 is when that is not it (a hybrid system's
    /// `/sys/fs/cgroup/unified`). Fails (one line) when the directory or its `cpu.stat`
    /// cannot be read, or it is not cgroup v2.
    pub fn open(path: &str) -> Result<Cgroup, String> {
        let trimmed = path.trim();
        if trimmed.is_empty() {
            return Err("cgroup: empty path (give a cgroup v2 directory, e.g. system.slice/nginx.service)".into());
        }
        let mount = cgroup2_mount();
        let dir = resolve(trimmed, &mount);
        let at = |what: String| format!("cgroup:{}: {what}", one_line(&dir.display().to_string()));
        let meta = fs::metadata(&dir).map_err(|e| at(format!("cannot read the directory: {}", io_msg(&e))))?;
        if !meta.is_dir() {
            return Err(at("not a directory".into()));
        }
        let fs_type = statfs(&dir).map_err(|e| at(format!("cannot statfs: {}", e.desc())))?.filesystem_type();
        // A hybrid host keeps some controllers on v1: the same cgroup there fills in the
        // quota and throttling (cpu), CPU used (cpuacct) and memory the v2 side lacks.
        let relative = match fs_type {
            t if t == CGROUP2_SUPER_MAGIC => {
                mount.as_ref().and_then(|m| dir.strip_prefix(m).ok()).map(Path::to_path_buf)
            }
            t if t == CGROUP_SUPER_MAGIC => super::cgroup_v1::V1::relative(&dir),
            _ => None,
        };
        let v1 = relative.as_deref().map(super::cgroup_v1::V1::find).unwrap_or_default();
        let v2 = if fs_type == CGROUP2_SUPER_MAGIC {
            Some(dir.clone())
        } else {
            relative.as_ref().zip(mount.as_ref()).map(|(r, m)| m.join(r)).filter(|d| d.join("cpu.stat").is_file())
        };
        if v2.is_none() && v1.cpuacct.is_none() {
            let found = if fs_type == CGROUP_SUPER_MAGIC {
                "cgroup v1 without cpuacct"
            } else if fs_type == TMPFS_MAGIC {
                "tmpfs"
            } else {
                "another filesystem"
            };
            let hint = match &mount {
                Some(m) if !dir.starts_with(m) => {
                    format!("; cgroup v2 is mounted at {}", one_line(&m.display().to_string()))
                }
                Some(_) => String::new(),
                None => "; no cgroup v2 mount in /proc/self/mounts".into(),
            };
            return Err(at(format!("not a cgroup directory whose CPU can be read (it is on {found}{hint})")));
        }
        let cgroup = Cgroup { dir, v2, v1 };
        cgroup.read()?;
        Ok(cgroup)
    }

    /// The resolved directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CPUs its tasks may run on (`cpuset.cpus.effective` of its v2 directory), when the
    /// cpuset controller says.
    pub fn cpuset(&self) -> Option<Vec<usize>> {
        let text = fs::read_to_string(self.v2.as_ref()?.join("cpuset.cpus.effective")).ok()?;
        crate::scenario::parse_cpu_list(text.trim()).ok().filter(|c| !c.is_empty())
    }

    /// One reading of the cumulative counters and gauges. Fails (one line) only when
    /// `cpu.stat` cannot be read or has no `usage_usec` (the cgroup was removed, say); every
    /// other file that cannot be read or parsed gives `None`. Six small reads, no allocation
    /// kept between calls.
    pub fn read(&self) -> Result<CgroupReading, String> {
        let v1 = self.v1.read();
        let mut r = match &self.v2 {
            Some(dir) => self.read_v2(dir)?,
            None => CgroupReading {
                usage_us: v1.usage_us.ok_or_else(|| self.at("cannot read cpuacct.usage".into()))?,
                ..Default::default()
            },
        };
        r.throttled_us = r.throttled_us.or(v1.throttled_us);
        r.nr_throttled = r.nr_throttled.or(v1.nr_throttled);
        r.cpu_limit_cores = r.cpu_limit_cores.or(v1.limit_cores);
        r.memory_bytes = r.memory_bytes.or(v1.memory_bytes);
        Ok(r)
    }

    fn at(&self, what: String) -> String {
        format!("cgroup:{}: {what}", one_line(&self.dir.display().to_string()))
    }

    /// The v2 directory's files.
    fn read_v2(&self, dir: &Path) -> Result<CgroupReading, String> {
        let text = fs::read_to_string(dir.join("cpu.stat"))
            .map_err(|e| self.at(format!("cannot read cpu.stat: {}", io_msg(&e))))?;
        let cpu = parse_cpu_stat(&text).ok_or_else(|| self.at("cpu.stat has no usage_usec line".into()))?;
        let optional = |name: &str| fs::read_to_string(dir.join(name)).ok();
        let (cpu_some_us, cpu_full_us) = optional("cpu.pressure").map(|t| parse_pressure(&t)).unwrap_or_default();
        let (mem_some_us, mem_full_us) = optional("memory.pressure").map(|t| parse_pressure(&t)).unwrap_or_default();
        Ok(CgroupReading {
            usage_us: cpu.usage_us,
            throttled_us: cpu.throttled_us,
            nr_throttled: cpu.nr_throttled,
            cpu_some_us,
            cpu_full_us,
            memory_bytes: optional("memory.current").and_then(|t| parse_u64(&t)),
            memory_max_bytes: optional("memory.max").and_then(|t| parse_memory_max(&t)),
            mem_some_us,
            mem_full_us,
            cpu_limit_cores: tightest_quota(dir),
        })
    }
}

/// The CPU quota process `pid` runs under, cores, with the cgroup directory that holds it:
/// the tightest of its cgroup v2 `cpu.max` and its v1 `cpu` controller's CFS quota (a hybrid
/// host keeps it there), each over that cgroup and its ancestors (a parent's quota bounds
/// its children's sum). `None` when it runs under none, or none can be read.
pub fn quota_of(pid: u32) -> Option<(PathBuf, f64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let v2 = parse_proc_cgroup(&text).and_then(|relative| {
        let dir = resolve(&relative, &cgroup2_mount());
        tightest_quota(&dir).map(|q| (dir, q))
    });
    [v2, super::cgroup_v1::quota_in(&text)].into_iter().flatten().min_by(|a, b| a.1.total_cmp(&b.1))
}

/// The tightest `cpu.max` of `dir` and every cgroup above it (each cgroup v2 directory,
/// the root included, has `cgroup.controllers`; the root has no `cpu.max`).
fn tightest_quota(dir: &Path) -> Option<f64> {
    dir.ancestors()
        .take_while(|d| d.join("cgroup.controllers").is_file())
        .filter_map(|d| fs::read_to_string(d.join("cpu.max")).ok().and_then(|t| parse_cpu_max(&t)))
        .reduce(f64::min)
}

/// The cgroup v2 path of `/proc/PID/cgroup` text (its `0::/path` line).
fn parse_proc_cgroup(text: &str) -> Option<String> {
    text.lines().find_map(|l| l.strip_prefix("0::")).map(|p| p.trim().to_string())
}

/// The directory `path` names, given the cgroup v2 mount (`None`: none found, use
/// [`DEFAULT_MOUNT`]). Paths under [`DEFAULT_MOUNT`] or the mount are taken as they are; an
/// absolute path elsewhere that exists is taken as it is (another cgroup2 mount, or a
/// mistake `open` reports); anything else is relative to the mount.
fn resolve(path: &str, mount: &Option<PathBuf>) -> PathBuf {
    let mount = mount.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_MOUNT));
    let p = Path::new(path);
    if p.is_absolute() && (p.starts_with(DEFAULT_MOUNT) || p.starts_with(&mount) || (p != Path::new("/") && p.exists()))
    {
        return p.to_path_buf();
    }
    match path.trim_start_matches('/') {
        "" => mount,
        relative => mount.join(relative),
    }
}

/// Where cgroup v2 is mounted: [`DEFAULT_MOUNT`] when it is cgroup2, else the first cgroup2
/// mount in `/proc/self/mounts`; `None` when there is none.
fn cgroup2_mount() -> Option<PathBuf> {
    if statfs(DEFAULT_MOUNT).is_ok_and(|s| s.filesystem_type() == CGROUP2_SUPER_MAGIC) {
        return Some(PathBuf::from(DEFAULT_MOUNT));
    }
    fs::read_to_string("/proc/self/mounts").ok().and_then(|t| parse_cgroup2_mount(&t))
}

/// The mount point of the first `cgroup2` line of `/proc/self/mounts` text (octal escapes
/// such as `\040` for a space undone).
fn parse_cgroup2_mount(mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (_source, point, fs_type) = (fields.next()?, fields.next()?, fields.next()?);
        (fs_type == "cgroup2").then(|| PathBuf::from(unescape_octal(point)))
    })
}

/// `\NNN` octal escapes (as `/proc/self/mounts` writes spaces, tabs, newlines, backslashes)
/// undone; anything else kept as it is.
fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let code = b.get(i + 1..i + 4).filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match code.map(|d| d.iter().fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'))) {
            Some(v) if v <= 0xff => {
                out.push(v as u8);
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The counters of `cpu.stat` this module reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CpuStat {
    /// `usage_usec`.
    usage_us: u64,
    /// `throttled_usec`, present with the cpu controller.
    throttled_us: Option<u64>,
    /// `nr_throttled`, present with the cpu controller.
    nr_throttled: Option<u64>,
}

/// `cpu.stat` text (`KEY VALUE` lines) → its counters; `None` without a readable
/// `usage_usec`. A line whose value is not a number counts as absent.
fn parse_cpu_stat(text: &str) -> Option<CpuStat> {
    let mut usage = None;
    let mut stat = CpuStat { usage_us: 0, throttled_us: None, nr_throttled: None };
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(key), Some(value), None) = (fields.next(), fields.next(), fields.next()) else { continue };
        let Ok(value) = value.parse::<u64>() else { continue };
        match key {
            "usage_usec" => usage = Some(value),
            "throttled_usec" => stat.throttled_us = Some(value),
            "nr_throttled" => stat.nr_throttled = Some(value),
            _ => {}
        }
    }
    stat.usage_us = usage?;
    Some(stat)
}

/// A PSI file's text (`some avg10=… avg60=… avg300=… total=N`, then the same for `full`) →
/// (`some` total, `full` total), µs; a missing line or a malformed total is `None`.
fn parse_pressure(text: &str) -> (Option<u64>, Option<u64>) {
    let (mut some, mut full) = (None, None);
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let slot = match fields.next() {
            Some("some") => &mut some,
            Some("full") => &mut full,
            _ => continue,
        };
        *slot = fields.find_map(|f| f.strip_prefix("total=")).and_then(|v| v.parse().ok());
    }
    (some, full)
}

/// `cpu.max` text (`QUOTA PERIOD`, µs) → QUOTA / PERIOD cores; `None` for `max PERIOD` (no
/// limit), a zero period, or anything malformed.
fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut fields = text.split_whitespace();
    let (quota, period) = (fields.next()?, fields.next()?);
    if fields.next().is_some() {
        return None;
    }
    let (quota, period) = (quota.parse::<u64>().ok()?, period.parse::<u64>().ok()?);
    (period > 0).then(|| quota as f64 / period as f64)
}

/// `memory.max` text → bytes; `None` for `max` (no limit) or anything malformed.
fn parse_memory_max(text: &str) -> Option<u64> {
    parse_u64(text)
}

/// A file holding one unsigned number (`memory.current`) → it; `None` otherwise.
fn parse_u64(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_stat_with_and_without_the_cpu_controller() {
        let full = "usage_usec 8123456\nuser_usec 5000000\nsystem_usec 3123456\ncore_sched.force_idle_usec 0\n\
                    nr_periods 1200\nnr_throttled 37\nthrottled_usec 912345\nnr_bursts 0\nburst_usec 0\n";
        assert_eq!(
            parse_cpu_stat(full),
            Some(CpuStat { usage_us: 8123456, throttled_us: Some(912345), nr_throttled: Some(37) })
        );
        let bare = "usage_usec 42\nuser_usec 40\nsystem_usec 2\n";
        assert_eq!(parse_cpu_stat(bare), Some(CpuStat { usage_us: 42, throttled_us: None, nr_throttled: None }));
    }

    #[test]
    fn cpu_stat_malformed() {
        assert_eq!(parse_cpu_stat(""), None);
        assert_eq!(parse_cpu_stat("user_usec 40\nsystem_usec 2\n"), None);
        assert_eq!(parse_cpu_stat("usage_usec -5\n"), None);
        assert_eq!(parse_cpu_stat("usage_usec\n"), None);
        assert_eq!(parse_cpu_stat("usage_usec 1 2\n"), None);
        assert_eq!(parse_cpu_stat("usage_usec 99999999999999999999999\n"), None);
        let bad_throttle = parse_cpu_stat("usage_usec 7\nthrottled_usec x\nnr_throttled 3\n").unwrap();
        assert_eq!(bad_throttle, CpuStat { usage_us: 7, throttled_us: None, nr_throttled: Some(3) });
    }

    #[test]
    fn pressure() {
        let text = "some avg10=1.25 avg60=0.40 avg300=0.10 total=123456789\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=4567\n";
        assert_eq!(parse_pressure(text), (Some(123456789), Some(4567)));
        assert_eq!(parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"), (Some(0), None));
        assert_eq!(parse_pressure(""), (None, None));
        assert_eq!(parse_pressure("some avg10=0.00 total=abc\nfull total=\n"), (None, None));
        assert_eq!(parse_pressure("nonsense\n\n  \nsome\nfull total=9"), (None, Some(9)));
    }

    #[test]
    fn proc_cgroup() {
        assert_eq!(parse_proc_cgroup("0::/loader-test/app\n").as_deref(), Some("/loader-test/app"));
        assert_eq!(parse_proc_cgroup("12:cpu,cpuacct:/x\n0::/\n").as_deref(), Some("/"));
        assert_eq!(parse_proc_cgroup("12:cpu,cpuacct:/x\n"), None);
    }

    #[test]
    fn quota_of_this_process_is_its_cgroups_or_none() {
        // Whatever this process runs under, the answer is read from the files, never made up:
        // a quota when its cgroup (or one above) has one, else none.
        let text = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        match parse_proc_cgroup(&text) {
            Some(rel) => {
                let dir = resolve(&rel, &cgroup2_mount());
                assert_eq!(quota_of(std::process::id()).map(|q| q.1), tightest_quota(&dir));
            }
            None => assert_eq!(quota_of(std::process::id()), None),
        }
        assert_eq!(quota_of(u32::MAX >> 1), None, "no such process");
    }

    #[test]
    fn cpu_max() {
        assert_eq!(parse_cpu_max("50000 100000\n"), Some(0.5));
        assert_eq!(parse_cpu_max("200000 100000\n"), Some(2.0));
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("50000 0\n"), None);
        assert_eq!(parse_cpu_max("50000\n"), None);
        assert_eq!(parse_cpu_max(""), None);
        assert_eq!(parse_cpu_max("1 2 3"), None);
        assert_eq!(parse_cpu_max("-1 100000"), None);
    }

    #[test]
    fn memory_files() {
        assert_eq!(parse_memory_max("max\n"), None);
        assert_eq!(parse_memory_max("536870912\n"), Some(536870912));
        assert_eq!(parse_memory_max(""), None);
        assert_eq!(parse_u64("10485760\n"), Some(10485760));
        assert_eq!(parse_u64("12 kB"), None);
    }

    #[test]
    fn mount_discovery_and_resolution() {
        let hybrid = "tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0\n\
                      cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n";
        assert_eq!(parse_cgroup2_mount(hybrid), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        assert_eq!(parse_cgroup2_mount("none /mnt/my\\040cg cgroup2 rw 0 0\n"), Some(PathBuf::from("/mnt/my cg")));
        assert_eq!(parse_cgroup2_mount("proc /proc proc rw 0 0\ngarbage\n"), None);
        assert_eq!(unescape_octal("a\\134b\\9\\"), "a\\b\\9\\");

        let unified = Some(PathBuf::from("/sys/fs/cgroup"));
        let p = |s| resolve(s, &unified);
        assert_eq!(p("system.slice/nginx.service"), PathBuf::from("/sys/fs/cgroup/system.slice/nginx.service"));
        assert_eq!(p("/system.slice/nginx.service"), PathBuf::from("/sys/fs/cgroup/system.slice/nginx.service"));
        assert_eq!(p("/sys/fs/cgroup/app"), PathBuf::from("/sys/fs/cgroup/app"));
        assert_eq!(p("/"), PathBuf::from("/sys/fs/cgroup"));
        let other = Some(PathBuf::from("/sys/fs/cgroup/unified"));
        assert_eq!(resolve("app", &other), PathBuf::from("/sys/fs/cgroup/unified/app"));
        assert_eq!(resolve("/sys/fs/cgroup/unified/app", &other), PathBuf::from("/sys/fs/cgroup/unified/app"));
    }

    #[test]
    fn open_errors_are_one_line_and_name_the_path() {
        let e = Cgroup::open("loader-watch-no-such-cgroup").unwrap_err();
        assert!(e.starts_with("cgroup:/") && e.contains("loader-watch-no-such-cgroup"), "{e}");
        assert!(e.contains("No such file or directory") && !e.contains('\n'), "{e}");
        let e = Cgroup::open("/proc").unwrap_err();
        assert!(e.contains("cgroup:/proc: not a cgroup directory whose CPU can be read"), "{e}");
        assert_eq!(Cgroup::open("/etc/passwd").unwrap_err(), "cgroup:/etc/passwd: not a directory");
        let e = Cgroup::open("bad\nname").unwrap_err();
        assert!(!e.contains('\n'), "{e}");
        assert!(Cgroup::open("  ").is_err());
    }

    /// Removes the test's cgroup directory however the test ends.
    struct RemoveDir(PathBuf);

    impl Drop for RemoveDir {
        fn drop(&mut self) {
            if let Err(e) = fs::remove_dir(&self.0) {
                eprintln!("cannot remove {}: {e}", self.0.display());
            }
        }
    }

    #[test]
    fn live_child_cgroup_with_a_cpu_limit() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: creating a cgroup needs root");
            return;
        }
        let Some(mount) = cgroup2_mount() else {
            eprintln!("skipped: no cgroup v2 mount");
            return;
        };
        // Ignored: fails where the cpu controller is taken by cgroup v1, or already enabled.
        let _ = fs::write(mount.join("cgroup.subtree_control"), "+cpu");
        let name = format!("loader-watch-test-{}", std::process::id());
        let dir = mount.join(&name);
        if let Err(e) = fs::create_dir(&dir) {
            eprintln!("skipped: cannot create {}: {e}", dir.display());
            return;
        }
        let _guard = RemoveDir(dir.clone());
        let limited = fs::write(dir.join("cpu.max"), "50000 100000").is_ok();

        let cgroup = Cgroup::open(&name).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cgroup.dir(), dir.as_path());
        let reading = cgroup.read().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reading.usage_us, 0, "no task ever ran in it");
        assert_eq!(reading.memory_bytes.unwrap_or(0), 0);
        if limited {
            assert_eq!(reading.cpu_limit_cores, Some(0.5));
            assert_eq!(reading.throttled_us, Some(0));
        } else {
            assert_eq!(reading.cpu_limit_cores, None);
            eprintln!("cpu limit not checked: the cpu controller is not available in {}", mount.display());
        }
        let by_absolute = Cgroup::open(&dir.display().to_string()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(by_absolute.dir(), dir.as_path());
    }
}
