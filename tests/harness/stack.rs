//! A real PHP stack from Debian's packages, on loopback with private configs: nginx →
//! PHP-FPM 8.2 (a static pool) → PostgreSQL 15, with postgres_exporter beside them — every
//! daemon allowed only on [`TARGET_CPU`], so the loader (on CPU 0) never shares a core with
//! it. For tests/real_stack.rs.
//!
//! Everything lives in a fresh directory under the system's temp dir (short enough for
//! PostgreSQL's unix socket path, and traversable by the `postgres` user, which PostgreSQL
//! needs since it refuses to run as root). Ports are free ones picked at start. On drop each
//! daemon this started is stopped (its own signal, then SIGKILL after 10 s) and the
//! directory removed: nothing else is touched.
//!
//! The endpoints, from `tests/stack/`: `sleep.php?ms=N` (a worker held N ms: capacity =
//! workers ÷ sleep), `cpu.php?rounds=N` (N chained MD5s on one core), `db.php?rounds=N` (one
//! group's rows of a seeded table on a persistent connection, each signed N times in PHP). `/fpm-status` is php-fpm's status page
//! (`?openmetrics` for the watch source), served through `pm.status_listen` — a hidden pool
//! of its own, so the scrape is neither queued behind a saturated pool nor counted in
//! `phpfpm_active_processes`.
//!
//! Does not: decide what a run should show (tests/real_stack.rs), install the packages
//! (`cargo xtask setup`).

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;
use crate::matrix::{LOADER_CPU, TARGET_CPU};
use crate::nginx::{self, Nginx};

const PHP_FPM: &str = "/usr/sbin/php-fpm8.2";
const PG_BIN: &str = "/usr/lib/postgresql/15/bin";
const EXPORTER: &str = "/usr/bin/prometheus-postgres-exporter";
const PSQL: &str = "/usr/bin/psql";
/// Rows seeded into `items`; `db.php` reads the hundredth of them one group holds, scanning
/// all (no index on `grp`). With `db.php?rounds=20`, a request here costs PostgreSQL about
/// 2.3 ms of CPU, php-fpm 1.5 ms and nginx 0.1 ms: the shared core fills at about 250 req/s
/// with neither process above 60 % of it.
const ITEMS: u32 = 30_000;
/// How long a daemon may take to answer after its start.
const START_WITHIN: Duration = Duration::from_secs(20);

/// What to start.
#[derive(Debug, Clone, Copy)]
pub struct StackSpec {
    /// php-fpm's static pool size (`pm.max_children`).
    pub workers: u32,
    /// PostgreSQL (seeded) and postgres_exporter too, for `db.php`.
    pub database: bool,
}

/// The running stack; stopped and removed on drop (nginx first, the database last).
pub struct Stack {
    nginx: Nginx,
    /// Held for its drop, like `_dir`.
    _exporter: Option<Daemon>,
    fpm: Daemon,
    postgres: Option<Daemon>,
    /// Removed on drop, after every daemon in it stopped.
    _dir: StackDir,
    exporter_port: Option<u16>,
    /// php-fpm's static pool size.
    pub workers: u32,
}

/// The Debian packages it needs, missing ones first named; in CI all must be there (the
/// setup step installs them), elsewhere the test skips.
pub fn require() -> bool {
    let needed = [
        (PHP_FPM, "php8.2-fpm"),
        ("/etc/php/8.2/mods-available/pgsql.ini", "php8.2-pgsql"),
        ("/usr/lib/postgresql/15/bin/postgres", "postgresql-15"),
        (PSQL, "postgresql-client-15"),
        (EXPORTER, "prometheus-postgres-exporter"),
        ("/usr/bin/wrk", "wrk"),
    ];
    let missing: Vec<&str> = needed.iter().filter(|(path, _)| !Path::new(path).exists()).map(|(_, p)| *p).collect();
    if !nginx::require() {
        return false;
    }
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI must have {} (cargo xtask setup installs them)",
        missing.join(", ")
    );
    eprintln!("skipped: {} not installed (cargo xtask setup installs them)", missing.join(", "));
    false
}

impl Stack {
    /// Start the stack for test `tag`: PostgreSQL and its exporter when asked, php-fpm, nginx.
    pub fn start(tag: &str, spec: StackSpec) -> Stack {
        let dir = StackDir::create(tag);
        let (postgres, exporter, pg_dsn, exporter_port) = if spec.database {
            let (postgres, dsn) = start_postgres(&dir.0);
            let (exporter, port) = start_exporter(&dir.0, &dsn);
            (Some(postgres), Some(exporter), Some(dsn), Some(port))
        } else {
            (None, None, None, None)
        };
        let fpm = start_fpm(&dir.0, spec.workers, pg_dsn.as_deref());
        let html = dir.0.join("nginx/html");
        std::fs::create_dir_all(&html).expect("the document root");
        for script in ["sleep.php", "cpu.php", "db.php"] {
            let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("stack").join(script);
            std::fs::copy(&from, html.join(script)).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
        }
        let fastcgi = |socket: &Path, script: &str| {
            format!(
                "include /etc/nginx/fastcgi_params; fastcgi_param SCRIPT_FILENAME {script}; fastcgi_pass unix:{};",
                socket.display()
            )
        };
        let locations = format!(
            "location ~ \\.php$ {{ {} }}\n    location = /fpm-status {{ {} }}",
            fastcgi(&dir.0.join("fpm.sock"), "$document_root$fastcgi_script_name"),
            fastcgi(&dir.0.join("fpm-status.sock"), "$document_root/fpm-status"),
        );
        let nginx = nginx::start_on_cpu(&dir.0.join("nginx"), TARGET_CPU, 1_000_000, "", &locations);
        let stack =
            Stack { nginx, _exporter: exporter, fpm, postgres, _dir: dir, exporter_port, workers: spec.workers };
        let body = stack.get("/fpm-status?openmetrics").unwrap_or_else(|e| panic!("php-fpm's status page: {e}"));
        assert!(body.contains("phpfpm_active_processes"), "php-fpm's status page: {body}");
        stack
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.nginx.port)
    }

    /// The watch source of php-fpm's pool gauge, its limit the pool size (the scrape is not
    /// counted: the status page has a pool of its own).
    pub fn pool_source(&self, name: &str) -> String {
        format!(
            "{name}=prometheus:{};metric=phpfpm_active_processes;limit={}",
            self.url("/fpm-status?openmetrics"),
            self.workers
        )
    }

    /// php-fpm's master process (its workers are its children).
    pub fn fpm_pid(&self) -> u32 {
        self.fpm.child.id()
    }

    /// PostgreSQL's postmaster (its backends are its children).
    pub fn postgres_pid(&self) -> Option<u32> {
        self.postgres.as_ref().map(|d| d.child.id())
    }

    /// postgres_exporter's `http://127.0.0.1:PORT/metrics`.
    pub fn exporter_url(&self) -> Option<String> {
        self.exporter_port.map(|port| format!("http://127.0.0.1:{port}/metrics"))
    }

    /// The pool's busy workers now, from its status page.
    pub fn pool_active(&self) -> Option<f64> {
        let body = self.get("/fpm-status?openmetrics").ok()?;
        body.lines().find_map(|l| l.strip_prefix("phpfpm_active_processes ")?.trim().parse().ok())
    }

    /// Wait (at most `within`) until no worker is busy: what a collapsed run left queued at
    /// php-fpm has been served. False when it did not drain in time.
    pub fn wait_idle(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.pool_active() == Some(0.0) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    }

    /// The endpoint's capacity as a closed-loop tool finds it: wrk on the loader's CPU with
    /// four times the pool's connections, the better of two 4 s runs (after 1 s to warm up) —
    /// a spell of the VM host's steal lowers one, never raises it.
    pub fn capacity(&self, path: &str) -> f64 {
        let url = self.url(path);
        let connections = (4 * self.workers).to_string();
        let wrk = |seconds: &str| {
            let mut command = Command::new("wrk");
            common::pin_to_cpu(&mut command, LOADER_CPU);
            let child = command
                .args(["-t1", "-c", &connections, "-d", seconds, "--timeout", "5s", &url])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("starting wrk");
            common::wait_bounded(child, Duration::from_secs(30))
        };
        wrk("1s");
        let rates: Vec<f64> = (0..2)
            .map(|_| {
                let out = wrk("4s");
                let text = String::from_utf8_lossy(&out.stdout);
                assert!(out.status.success() && !text.contains("Non-2xx"), "wrk {url}:\n{}", common::show(&out));
                text.lines()
                    .find_map(|l| l.strip_prefix("Requests/sec:")?.trim().parse().ok())
                    .unwrap_or_else(|| panic!("no Requests/sec from wrk:\n{text}"))
            })
            .collect();
        eprintln!("wrk {url}: {rates:?} req/s");
        rates.into_iter().fold(0.0, f64::max)
    }

    /// A GET through nginx (HTTP/1.0, 2 s at most); the body, or why not.
    fn get(&self, path: &str) -> Result<String, String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.nginx.port)).map_err(|e| e.to_string())?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).map_err(|e| e.to_string())?;
        stream.set_write_timeout(Some(Duration::from_secs(2))).map_err(|e| e.to_string())?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").map_err(|e| e.to_string())?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).map_err(|e| e.to_string())?;
        let (head, body) = answer.split_once("\r\n\r\n").ok_or_else(|| format!("no HTTP answer: {answer:?}"))?;
        if !head.starts_with("HTTP/1.1 200") {
            return Err(format!("{head}\n{body}"));
        }
        Ok(body.to_owned())
    }
}

/// The stack's directory, removed on drop (after the daemons in it stopped: it is the
/// [`Stack`]'s last field).
struct StackDir(PathBuf);

impl StackDir {
    fn create(tag: &str) -> StackDir {
        let dir = std::env::temp_dir().join(format!("loader-stack-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        StackDir(dir)
    }
}

impl Drop for StackDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A daemon this harness started, stopped on drop with `stop` (its clean, quick shutdown),
/// then SIGKILL if it has not exited within 10 s.
struct Daemon {
    name: &'static str,
    child: Child,
    stop: libc::c_int,
}

impl Daemon {
    fn spawn(name: &'static str, mut command: Command, stop: libc::c_int, log: &Path) -> Daemon {
        let log = std::fs::File::create(log).expect("a log file");
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the log again"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Daemon { name, child, stop }
    }

    /// Panics (naming the log) if it has already exited.
    fn alive(&mut self, log: &Path) {
        if let Ok(Some(status)) = self.child.try_wait() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            panic!("{} exited at start ({status}):\n{text}", self.name);
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as libc::pid_t, self.stop) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("{} did not stop within 10 s of signal {}: killed", self.name, self.stop);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("its address").port()
}

/// The `postgres` account's uid and gid (PostgreSQL refuses to run as root).
fn postgres_user() -> (u32, u32) {
    let name = c"postgres";
    // SAFETY: getpwnam returns a pointer into static storage or null; read at once, on the
    // test's own thread (the tests that start a stack hold one lock).
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(!pw.is_null(), "no `postgres` user: is postgresql-15 installed?");
    // SAFETY: non-null, just returned by getpwnam.
    unsafe { ((*pw).pw_uid, (*pw).pw_gid) }
}

fn chown(path: &Path, (uid, gid): (u32, u32)) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
}

/// `initdb` as `postgres`, then the server on CPU 1 (a unix socket in the stack's directory
/// and 127.0.0.1:PORT, no fsync: a test's data), `items` seeded. Returns its libpq DSN.
fn start_postgres(dir: &Path) -> (Daemon, String) {
    let user = postgres_user();
    let (data, socket) = (dir.join("pg"), dir.join("pg-socket"));
    for d in [&data, &socket] {
        std::fs::create_dir_all(d).expect("postgres' directories");
        chown(d, user);
    }
    let as_postgres = |program: &str| {
        let mut command = Command::new(Path::new(PG_BIN).join(program));
        command.uid(user.0).gid(user.1).current_dir(dir);
        command
    };
    let initdb = as_postgres("initdb")
        .args(["-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale=C", "-D"])
        .arg(&data)
        .output()
        .expect("running initdb");
    assert!(initdb.status.success(), "initdb:\n{}", common::show(&initdb));
    let port = free_port();
    let mut server = as_postgres("postgres");
    common::pin_to_cpu(&mut server, TARGET_CPU);
    server
        .arg("-D")
        .arg(&data)
        .args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1", "-c"])
        .arg(format!("unix_socket_directories={}", socket.display()))
        .args(["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "max_connections=50"]);
    let log = dir.join("postgres.log");
    // SIGINT: PostgreSQL's fast shutdown (ends its backends, no waiting for clients).
    let mut postgres = Daemon::spawn("postgres", server, libc::SIGINT, &log);
    let dsn = format!("host={} port={port} user=postgres dbname=postgres sslmode=disable", socket.display());
    let seed = format!(
        "CREATE TABLE items (id int PRIMARY KEY, grp int NOT NULL, price numeric NOT NULL, name text NOT NULL); \
         INSERT INTO items SELECT i, i % 100, (i * 7919 % 10000) / 100.0, md5(i::text) FROM generate_series(1, {ITEMS}) i; \
         ANALYZE items;"
    );
    let deadline = Instant::now() + START_WITHIN;
    loop {
        postgres.alive(&log);
        let psql =
            Command::new(PSQL).args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &dsn, "-c", "SELECT 1"]).output();
        if psql.is_ok_and(|o| o.status.success()) {
            break;
        }
        assert!(Instant::now() < deadline, "postgres did not answer within {START_WITHIN:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let seeded = Command::new(PSQL).args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &dsn, "-c", &seed]).output();
    let seeded = seeded.expect("running psql");
    assert!(seeded.status.success(), "seeding postgres:\n{}", common::show(&seeded));
    (postgres, dsn)
}

/// postgres_exporter on CPU 1 and a free port, reading the stack's PostgreSQL.
fn start_exporter(dir: &Path, dsn: &str) -> (Daemon, u16) {
    let port = free_port();
    let mut command = Command::new(EXPORTER);
    common::pin_to_cpu(&mut command, TARGET_CPU);
    command.env("DATA_SOURCE_NAME", dsn).arg(format!("--web.listen-address=127.0.0.1:{port}"));
    let log = dir.join("postgres_exporter.log");
    let mut exporter = Daemon::spawn("postgres_exporter", command, libc::SIGTERM, &log);
    let deadline = Instant::now() + START_WITHIN;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        exporter.alive(&log);
        assert!(Instant::now() < deadline, "postgres_exporter did not listen within {START_WITHIN:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    (exporter, port)
}

/// php-fpm on CPU 1 with its own config and no php.ini (`-n`; the two extensions it needs
/// loaded by `-d`), as root (`-R`): a static pool of `workers` on a unix socket in the
/// stack's directory, and its status page on a socket of its own.
fn start_fpm(dir: &Path, workers: u32, pg_dsn: Option<&str>) -> Daemon {
    let d = dir.display();
    let env = pg_dsn.map_or(String::new(), |dsn| format!("env[STACK_PG] = \"{dsn}\"\n"));
    let conf = format!(
        "[global]\npid = {d}/fpm.pid\nerror_log = {d}/fpm.log\ndaemonize = no\n\
         [www]\nlisten = {d}/fpm.sock\nlisten.mode = 0666\n\
         pm = static\npm.max_children = {workers}\n\
         pm.status_path = /fpm-status\npm.status_listen = {d}/fpm-status.sock\n{env}"
    );
    std::fs::write(dir.join("php-fpm.conf"), conf).expect("php-fpm.conf");
    let mut command = Command::new(PHP_FPM);
    common::pin_to_cpu(&mut command, TARGET_CPU);
    command
        .args(["-n", "-d", "extension=pgsql", "-d", "zend_extension=opcache", "-d", "opcache.enable=1", "-R", "-F"])
        .arg("-y")
        .arg(dir.join("php-fpm.conf"));
    let log = dir.join("php-fpm.out");
    // SIGTERM: php-fpm's immediate termination (the master ends its workers).
    let mut fpm = Daemon::spawn("php-fpm", command, libc::SIGTERM, &log);
    let deadline = Instant::now() + START_WITHIN;
    for socket in ["fpm.sock", "fpm-status.sock"] {
        while std::os::unix::net::UnixStream::connect(dir.join(socket)).is_err() {
            fpm.alive(&log);
            assert!(Instant::now() < deadline, "php-fpm did not listen on {socket} within {START_WITHIN:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    fpm
}
