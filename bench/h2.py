#!/usr/bin/env python3
"""bench/h2.py — HTTP/2: loader --http2 vs h2load (Debian nghttp2-client) on the same nginx.

nginx (its own prefix under the run directory, 1 worker pinned to TARGET_CPU) serves HTTP/2
with prior knowledge (h2c) on 127.0.0.1; every tool runs pinned to LOAD_CPU. Rounds are
interleaved: in each round h2load runs first at its maximum (closed loop: -c CONNECTIONS,
-m STREAMS, -D DURATION), then the loader runs open loop at each rate of --rates, where
"max" means the rate h2load just reached in that round; at each fixed rate h2load runs too,
just before the loader, with --rps RATE/CONNECTIONS per connection (h2load's own pacing: no
latency from the intended send time, but the same requests at the same rate). CPU time is
the tool's user + system time (getrusage of the child, as bench/harness.py measures it); the
figure compared is answered requests per CPU-second (the loader's over every phase, its 1 s
warm-up included, as its CPU time covers it), against h2load at the same rate. The loader's
own verdict is printed for each of its runs. With --h2load-pacing the loader also runs at
each fixed rate with --send-ahead 10ms, for a comparison at equal pacing: h2load's --rps
sends in rounds — each connection's timer fires every max(10 ms, 1/rps) (nghttp2 1.52
h2load.cc: `rps_watcher.repeat = std::max(0.01, 1. / config.rps)`) and sends what fell due
since, late, measured from when it left — and --send-ahead 10ms makes the same rounds the
other way: a wake-up sends the next 10 ms of the schedule, early, each measured from when it
left, and reads the last round's answers.

usage: bench/h2.py [--rounds 3] [--duration 10] [--connections 8] [--streams 10]
                   [--rates max,10000,40000] [--loader PATH] [--out DIR] [--h2load-pacing]
Environment: LOAD_CPU (0), TARGET_CPU (1).
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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(cmd, log):
    """Run cmd; returns (cpu_s, wall_s, exit code) of it and its descendants."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    with open(log, "w") as out:
        code = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, code


def start_nginx(run_dir, port, target_cpu):
    d = os.path.join(run_dir, "nginx")
    os.makedirs(os.path.join(d, "tmp"), exist_ok=True)
    conf = f"""daemon off; master_process on; worker_processes 1; pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  # Keep-alive for the whole run (nginx's default ends a connection after 1000 streams).
  keepalive_requests 100000000;
  http2_max_concurrent_streams 1024;
  client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp;
  uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;
  server {{
    listen 127.0.0.1:{port} http2;
    location = / {{ default_type application/json; return 200 '{{"ok":true}}'; }}
  }}
}}
"""
    with open(os.path.join(d, "nginx.conf"), "w") as f:
        f.write(conf)
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    proc = subprocess.Popen(["taskset", "-c", target_cpu, nginx, "-p", d, "-c", os.path.join(d, "nginx.conf")])
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    sys.exit("bench/h2.py: nginx did not listen")


def h2load(args, url, log, rate=None):
    """h2load closed loop at its maximum, or at `rate` req/s in all (`--rps` per client: each
    of its connections starts rate/connections requests a second, -m streams at most)."""
    cmd = ["taskset", "-c", args.load_cpu, "h2load", "-c", str(args.connections), "-m", str(args.streams),
           "-D", str(args.duration)]
    if rate is not None:
        cmd.append(f"--rps={rate / args.connections:g}")
    cpu, wall, code = timed(cmd + [url], log)
    text = open(log).read()
    done = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", text)
    ok = int(done.group(1)) if done else 0
    return {"tool": "h2load", "rate": "max" if rate is None else int(rate), "ok": ok, "rps": ok / args.duration,
            "cpu_s": cpu, "code": code, "verdict": "-", "p99_ms": None}


def loader(args, url, rate, out_dir, log, extra=(), tool="loader"):
    cmd = ["taskset", "-c", args.load_cpu, args.loader, "run", "--url", url, "--http2", "--max-streams",
           str(args.streams), "--rate", str(int(rate)), "--duration", f"{args.duration}s", "--connections",
           str(args.connections), "--threads", "1", "--warmup", "1s", "--preflight", "0s", "--no-emergency-stop",
           "--out", out_dir, "--plain", *extra]
    cpu, wall, code = timed(cmd, log)
    try:
        s = json.load(open(os.path.join(out_dir, "summary.json")))
    except (OSError, ValueError):
        return {"tool": tool, "rate": int(rate), "ok": 0, "rps": 0, "cpu_s": cpu, "code": code,
                "verdict": "no summary", "p99_ms": None}
    main = [p for p in s["phases"] if p.get("kind") != "warmup"][-1]
    # Its CPU time covers the warm-up too, so every phase's answers count (as bench/run.sh).
    answered = sum(p["ok"] for p in s["phases"])
    return {"tool": tool, "rate": int(rate), "ok": answered, "rps": main["ok"] / args.duration, "cpu_s": cpu,
            "code": code, "verdict": "TRUSTED" if s["verdict"]["trusted"] else "UNTRUSTED",
            "p99_ms": main["latency_ms"]["p99"], "p50_ms": main["latency_ms"]["p50"],
            "lag_p99_ms": main.get("send_lag_ms", {}).get("p99")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--streams", type=int, default=10)
    ap.add_argument("--rates", default="max,10000,40000")
    ap.add_argument("--loader", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "loader"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--h2load-pacing", action="store_true",
                    help="at each fixed rate also run the loader with --send-ahead 10ms: sends in 10 ms rounds, "
                         "early, each measured from when it left — h2load's --rps rounds (10 ms per connection)")
    args = ap.parse_args()
    args.load_cpu = os.environ.get("LOAD_CPU", "0")
    args.target_cpu = os.environ.get("TARGET_CPU", "1")
    if not shutil.which("h2load"):
        sys.exit("bench/h2.py: h2load is required (apt-get install nghttp2-client; cargo xtask setup installs it)")
    run_dir = os.path.abspath(args.out or os.path.join("target", "bench", time.strftime("h2-%Y%m%d-%H%M%S")))
    os.makedirs(run_dir, exist_ok=True)
    port = free_port()
    nginx = start_nginx(run_dir, port, args.target_cpu)
    url = f"http://127.0.0.1:{port}/"
    # How idle CPUs sleep sets what every tool's wake-ups cost (docs/performance.md): say it.
    try:
        cpuidle = open("/sys/devices/system/cpu/cpuidle/current_driver").read().strip() or "none"
    except OSError:
        cpuidle = "none"
    model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"bench/h2.py: host: {model}, {os.cpu_count()} CPUs, cpuidle driver {cpuidle}", flush=True)
    results = []
    try:
        for r in range(args.rounds):
            h = h2load(args, url, os.path.join(run_dir, f"h2load-{r}.log"))
            results.append(h)
            print(f"round {r + 1}: h2load {h['rps']:.0f} req/s, {h['ok'] / h['cpu_s']:.0f} req/CPU-s", flush=True)
            for rate in args.rates.split(","):
                target = h["rps"] if rate == "max" else float(rate)
                if target <= 0:
                    continue
                if rate != "max":
                    fixed = h2load(args, url, os.path.join(run_dir, f"h2load-{rate}-{r}.log"), target)
                    fixed["rate_key"] = rate
                    results.append(fixed)
                    print(f"round {r + 1}: h2load at {int(target)}: {fixed['rps']:.0f} req/s, "
                          f"{fixed['ok'] / max(fixed['cpu_s'], 1e-9):.0f} req/CPU-s", flush=True)
                out = os.path.join(run_dir, f"loader-{rate}-{r}")
                res = loader(args, url, target, out, out + ".log")
                res["rate"] = f"max ({int(target)})" if rate == "max" else int(target)
                res["rate_key"] = rate
                results.append(res)
                print(f"round {r + 1}: loader at {res['rate']}: {res['rps']:.0f} req/s, "
                      f"{res['ok'] / max(res['cpu_s'], 1e-9):.0f} req/CPU-s, p99 {res['p99_ms']} ms, {res['verdict']}",
                      flush=True)
                if args.h2load_pacing and rate != "max":
                    out = os.path.join(run_dir, f"loader-rounds-{rate}-{r}")
                    paced = loader(args, url, target, out, out + ".log", ("--send-ahead", "10ms"), "loader-rounds")
                    paced["rate_key"] = rate
                    results.append(paced)
                    print(f"round {r + 1}: loader --send-ahead 10ms at {int(target)}: {paced['rps']:.0f} req/s, "
                          f"{paced['ok'] / max(paced['cpu_s'], 1e-9):.0f} req/CPU-s, p99 {paced['p99_ms']} ms, "
                          f"{paced['verdict']}", flush=True)
    finally:
        nginx.terminate()
        nginx.wait(timeout=10)
    h2 = [x["ok"] / x["cpu_s"] for x in results if x["tool"] == "h2load" and x["rate"] == "max" and x["cpu_s"] > 0]
    h2_med = statistics.median(h2) if h2 else float("nan")
    print()
    print("| tool | rate | answered req/s | req per CPU-second | vs h2load at the same rate | p99 ms | loader verdict |")
    print("|---|---|---:|---:|---:|---:|---|")
    print(f"| h2load -c {args.connections} -m {args.streams} | max (closed loop) | "
          f"{statistics.median([x['rps'] for x in results if x['tool'] == 'h2load' and x['rate'] == 'max']):,.0f} | "
          f"{h2_med:,.0f} | 1.00× | - | - |")
    for key in args.rates.split(","):
        base = h2_med
        fixed = [x for x in results if x["tool"] == "h2load" and x.get("rate_key") == key]
        label = "h2load's max" if key == "max" else f"{int(float(key)):,}/s"
        if fixed:
            base = statistics.median([x["ok"] / max(x["cpu_s"], 1e-9) for x in fixed])
            rps = statistics.median([x["rps"] for x in fixed])
            print(f"| h2load --rps {float(key) / args.connections:g} × {args.connections} | {label} | {rps:,.0f} | "
                  f"{base:,.0f} | 1.00× | - | - |")
        for tool, name in (("loader", "loader --http2"), ("loader-rounds", "loader --http2 --send-ahead 10ms")):
            runs = [x for x in results if x["tool"] == tool and x.get("rate_key") == key]
            if not runs:
                continue
            per = statistics.median([x["ok"] / max(x["cpu_s"], 1e-9) for x in runs])
            rps = statistics.median([x["rps"] for x in runs])
            p99 = statistics.median([x["p99_ms"] for x in runs if x["p99_ms"] is not None] or [float("nan")])
            verdicts = ", ".join(sorted({x["verdict"] for x in runs}))
            print(f"| {name} | {label} (open loop) | {rps:,.0f} | {per:,.0f} | {per / base:.2f}× | {p99:.2f} | "
                  f"{verdicts} |")
    with open(os.path.join(run_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
