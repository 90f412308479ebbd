//! The targets and sources of the watch suite (`tests/watch.rs`): the Python pool server
//! (`tests/pool_server.py`) with its exporter, a test cgroup with a CPU quota, Debian's
//! node_exporter, and a busy loop on one CPU — each a guard that ends what it started on
//! drop.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `tests/pool_server.py WORKERS SERVICE_MS [EXPORTER_LIFETIME_S]`: (its load address, its
/// metrics address); killed on drop.
pub struct PoolServer {
    child: Child,
    /// Where the load goes (`127.0.0.1:PORT`).
    pub load: String,
    /// Where its exporter answers (`127.0.0.1:PORT`).
    pub metrics: String,
}

impl PoolServer {
    /// `WORKERS` slots of `SERVICE_MS`, its exporter answering for `exporter_lifetime_s`.
    pub fn start(workers: u32, service_ms: u32, exporter_lifetime_s: Option<u32>) -> PoolServer {
        Self::start_cold(workers, service_ms, exporter_lifetime_s, 0)
    }

    /// With a cold start: the service time 20× at first, down to `service_ms` over `cold_s`.
    pub fn start_cold(workers: u32, service_ms: u32, exporter_lifetime_s: Option<u32>, cold_s: u32) -> PoolServer {
        Self::start_with(workers, service_ms, exporter_lifetime_s, &[("POOL_COLD_S", cold_s)])
    }

    /// With the environment variables of `pool_server.py`'s docstring.
    pub fn start_with(
        workers: u32,
        service_ms: u32,
        exporter_lifetime_s: Option<u32>,
        env: &[(&str, u32)],
    ) -> PoolServer {
        Self::spawn(None, workers, service_ms, exporter_lifetime_s, env)
    }

    /// Pinned to `cpu` (`taskset -c CPU python3 …`: the same process).
    pub fn start_on(cpu: usize, workers: u32, service_ms: u32, env: &[(&str, u32)]) -> PoolServer {
        Self::spawn(Some(cpu), workers, service_ms, None, env)
    }

    fn spawn(
        cpu: Option<usize>,
        workers: u32,
        service_ms: u32,
        exporter_lifetime_s: Option<u32>,
        env: &[(&str, u32)],
    ) -> PoolServer {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("pool_server.py");
        let mut cmd = match cpu {
            Some(cpu) => {
                let mut c = Command::new("taskset");
                c.args(["-c", &cpu.to_string(), "python3"]);
                c
            }
            None => Command::new("python3"),
        };
        for (k, v) in env {
            cmd.env(k, v.to_string());
        }
        cmd.arg(script).arg(workers.to_string()).arg(service_ms.to_string());
        if let Some(s) = exporter_lifetime_s {
            cmd.arg(s.to_string());
        }
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("python3 pool_server.py");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("its listening line");
        let mut words = line.split_whitespace().skip(1);
        let (load, metrics) = (words.next().expect("load address"), words.next().expect("metrics address"));
        PoolServer { load: load.to_string(), metrics: metrics.to_string(), child }
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for PoolServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A cgroup named the same in every hierarchy this host has — cgroup v2 (for the CPU used and
/// its pressure) and, on a hybrid host, the v1 `cpu` and `cpuacct` hierarchies — with a CPU
/// quota where the `cpu` controller lives. Removed on drop, its processes moved back first.
pub struct QuotaGroup {
    name: String,
    dirs: Vec<PathBuf>,
}

impl QuotaGroup {
    /// `percent` of one CPU, in 50 ms periods.
    pub fn create(tag: &str, percent: u32) -> QuotaGroup {
        let name = format!("loader-watch-{}-{tag}", std::process::id());
        let (period, quota) = (50_000u64, 500 * u64::from(percent));
        let mut dirs = Vec::new();
        let mut quota_set = false;
        let v2 = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.join("cgroup.procs").exists() && p.join("cgroup.controllers").exists());
        for root in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpuacct"]
            .into_iter()
            .map(PathBuf::from)
            .filter(|p| p.join("cgroup.procs").exists())
            .chain(v2.clone())
        {
            let dir = root.join(&name);
            let _ = std::fs::remove_dir(&dir);
            std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
            if dir.join("cpu.cfs_quota_us").exists() && !quota_set {
                std::fs::write(dir.join("cpu.cfs_period_us"), period.to_string()).expect("cpu.cfs_period_us");
                std::fs::write(dir.join("cpu.cfs_quota_us"), quota.to_string()).expect("cpu.cfs_quota_us");
                quota_set = true;
            }
            dirs.push(dir);
        }
        if !quota_set && let Some(root) = &v2 {
            // A v2-only host: the cpu controller enabled for the children, then cpu.max.
            let _ = std::fs::write(root.join("cgroup.subtree_control"), "+cpu");
            let dir = root.join(&name);
            std::fs::write(dir.join("cpu.max"), format!("{quota} {period}"))
                .unwrap_or_else(|e| panic!("cpu.max in {}: {e}", dir.display()));
            quota_set = true;
        }
        assert!(quota_set, "no cgroup hierarchy with the cpu controller: {dirs:?}");
        QuotaGroup { name, dirs }
    }

    /// `sh -c '…join every hierarchy…; exec "$@"' sh`: a prefix that starts a command inside.
    pub fn prefix(&self) -> Vec<String> {
        let joins: Vec<String> = self.dirs.iter().map(|d| format!("echo $$ > {}/cgroup.procs", d.display())).collect();
        vec!["sh".into(), "-c".into(), format!("{} && exec \"$@\"", joins.join(" && ")), "sh".into()]
    }

    /// The v2 directory when there is one (CPU and pressure), else the v1 `cpu` one.
    pub fn watched(&self) -> &Path {
        self.dirs.iter().find(|d| d.join("cgroup.controllers").exists()).unwrap_or(&self.dirs[0])
    }
}

impl Drop for QuotaGroup {
    fn drop(&mut self) {
        for dir in &self.dirs {
            let parent = dir.parent().expect("a parent").join("cgroup.procs");
            for pid in std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default().lines() {
                let _ = std::fs::write(&parent, pid);
            }
            for _ in 0..50 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = &self.name;
    }
}

/// `prometheus-node-exporter` on a free loopback port, killed on drop; `None` when it is not
/// installed.
pub struct NodeExporter {
    child: Child,
    /// Where it answers (`127.0.0.1:PORT`).
    pub addr: String,
}

impl NodeExporter {
    pub fn start() -> Option<NodeExporter> {
        let bin = "/usr/bin/prometheus-node-exporter";
        if !Path::new(bin).exists() {
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new(bin)
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting node_exporter");
        let n = NodeExporter { child, addr };
        for _ in 0..100 {
            if std::net::TcpStream::connect(&n.addr).is_ok() {
                return Some(n);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("node_exporter did not listen on {} within 5 s", n.addr);
    }
}

impl Drop for NodeExporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A neighbour on one CPU, killed on drop: a Python loop that burns `busy_ms` of CPU, then
/// sleeps `idle_ms`, for at most two minutes — a fixed share of a core it asks for (less
/// when the core is contended), beside whatever else runs there.
pub struct Spinner(Child);

/// The neighbour's loop: `python3 -c SPIN BUSY_MS IDLE_MS`.
const SPIN: &str = "import sys, time
busy, idle = float(sys.argv[1]) / 1e3, float(sys.argv[2]) / 1e3
end = time.monotonic() + 120
while time.monotonic() < end:
    start = time.thread_time()
    while time.thread_time() - start < busy:
        pass
    time.sleep(idle)
";

impl Spinner {
    /// One on `cpu` (`taskset -c CPU python3 …`: the same process).
    pub fn on(cpu: usize, busy_ms: u32, idle_ms: u32) -> Spinner {
        let child = Command::new("taskset")
            .args(["-c", &cpu.to_string(), "python3", "-c", SPIN, &busy_ms.to_string(), &idle_ms.to_string()])
            .stdin(Stdio::null())
            .spawn()
            .expect("taskset (util-linux) and python3");
        Spinner(child)
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether this process may run on every CPU of `cpus` (its affinity, from the kernel).
pub fn may_use(cpus: &[usize]) -> bool {
    // SAFETY: a zeroed cpu_set_t is an empty set; sched_getaffinity fills it for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) == 0
            && cpus.iter().all(|&c| libc::CPU_ISSET(c, &set))
    }
}
