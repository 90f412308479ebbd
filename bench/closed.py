#!/usr/bin/env python3
"""bench/closed.py — the closed loop at its maximum: loader --vus N --think 0 beside wrk
(HTTP/1.1) and h2load (h2c), each on one core, against the same target.

HTTP/1.1: the calibration sink (`loader target --sink`, one ring on TARGET_CPU: cheaper per
request than any load tool, so the tool on LOAD_CPU is the bottleneck) against `wrk -t1 -c N`
and `loader run --vus N --think 0 --threads 1`. h2c (the sink speaks HTTP/1.1 only): nginx,
one worker on TARGET_CPU, against `h2load -t1 -c C -m M` and `loader run --http2 --vus C×M
--connections C --max-streams M --threads 1`. Every tool is pinned to LOAD_CPU and runs
DURATION seconds a round; rounds interleave the tools, so the host's drift hits them alike.

Per tool: answered requests a second (on its one core: requests a second per core) and per
CPU-second of the tool (user + system of it and its threads, getrusage of the child), the
median over the rounds with every round in brackets, and loader ÷ peer. The loader's runs
have no probes and no warm-up (wrk and h2load have neither); its verdict is printed.

usage: bench/closed.py [--rounds 3] [--duration 8] [--users 64] [--h2-connections 4]
                       [--h2-streams 16] [--loader target/release/loader] [--out DIR]
Environment: LOAD_CPU (0), TARGET_CPU (1).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h2 import free_port, start_nginx, timed  # noqa: E402
from paths import wait_listening  # noqa: E402


def wrk(args, url, log):
    cmd = ["taskset", "-c", args.load_cpu, "wrk", "-t1", f"-c{args.users}", f"-d{args.duration}s", url]
    cpu, _, code = timed(cmd, log)
    text = open(log).read()
    m = re.search(r"(\d+) requests in", text)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    ok = (int(m.group(1)) if m else 0) - (int(errors.group(1)) if errors else 0)
    return {"tool": "wrk", "ok": ok, "rps": ok / args.duration, "cpu_s": cpu, "code": code, "verdict": "-"}


def h2load(args, url, log):
    cmd = ["taskset", "-c", args.load_cpu, "h2load", "-t1", "-c", str(args.h2_connections), "-m",
           str(args.h2_streams), "-D", str(args.duration), url]
    cpu, _, code = timed(cmd, log)
    m = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", open(log).read())
    ok = int(m.group(1)) if m else 0
    return {"tool": "h2load", "ok": ok, "rps": ok / args.duration, "cpu_s": cpu, "code": code, "verdict": "-"}


def loader(args, url, users, out_dir, log, extra=()):
    cmd = ["taskset", "-c", args.load_cpu, args.loader, "run", "--url", url, "--vus", str(users), "--think", "0",
           "--duration", f"{args.duration}s", "--threads", "1", "--no-probes", "--preflight", "0s",
           "--no-emergency-stop", "--out", out_dir, "--plain", *extra]
    cpu, _, code = timed(cmd, log)
    tool = "loader h2c" if extra else "loader"
    try:
        s = json.load(open(os.path.join(out_dir, "summary.json")))
    except (OSError, ValueError):
        return {"tool": tool, "ok": 0, "rps": 0, "cpu_s": cpu, "code": code, "verdict": "no summary"}
    ok = sum(p["ok"] for p in s["phases"])
    return {"tool": tool, "ok": ok, "rps": ok / args.duration, "cpu_s": cpu, "code": code,
            "verdict": "TRUSTED" if s["verdict"]["trusted"] else "UNTRUSTED",
            "p99_ms": s["phases"][-1]["latency_ms"]["p99"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=int, default=8)
    p.add_argument("--users", type=int, default=64, help="HTTP/1.1: wrk's connections, loader's users")
    p.add_argument("--h2-connections", type=int, default=4)
    p.add_argument("--h2-streams", type=int, default=16)
    p.add_argument("--loader", default="target/release/loader")
    p.add_argument("--out", default=f"out/bench/closed-{time.strftime('%Y%m%d-%H%M%S')}")
    args = p.parse_args()
    args.load_cpu = os.environ.get("LOAD_CPU", "0")
    target_cpu = os.environ.get("TARGET_CPU", "1")
    args.out = os.path.abspath(args.out)
    os.makedirs(args.out, exist_ok=True)

    sink_port, h2_port = free_port(), free_port()
    sink = subprocess.Popen(["taskset", "-c", target_cpu, args.loader, "target", "--sink", "--listen",
                             f"127.0.0.1:{sink_port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_listening(sink_port, "the sink")
    nginx = start_nginx(args.out, h2_port, target_cpu)
    h1, h2 = f"http://127.0.0.1:{sink_port}/", f"http://127.0.0.1:{h2_port}/"
    rows = []
    try:
        for r in range(args.rounds):
            for name, run in [
                ("wrk", lambda log: wrk(args, h1, log)),
                ("loader", lambda log: loader(args, h1, args.users, log + ".out", log)),
                ("h2load", lambda log: h2load(args, h2, log)),
                ("loader h2c", lambda log: loader(
                    args, h2, args.h2_connections * args.h2_streams, log + ".out", log,
                    ["--http2", "--connections", str(args.h2_connections), "--max-streams", str(args.h2_streams)])),
            ]:
                row = run(os.path.join(args.out, f"{name.replace(' ', '-')}-{r}"))
                row["round"] = r
                rows.append(row)
                print(f"round {r} {name:<11} {row['rps']:>9.0f} req/s  {row['ok'] / max(row['cpu_s'], 1e-9):>9.0f} "
                      f"req/CPU-s  cpu {row['cpu_s']:.2f} s  {row['verdict']}", flush=True)
    finally:
        sink.kill()
        # SIGTERM: the master stops its worker too (SIGKILL would leave it holding the port).
        nginx.terminate()
        nginx.wait(timeout=10)

    def med(tool, f):
        xs = [f(x) for x in rows if x["tool"] == tool]
        return statistics.median(xs), xs

    print(f"\nclosed loop at its maximum, one core each, {args.duration} s × {args.rounds} rounds (median [rounds])")
    per = {}
    for tool in ["wrk", "loader", "h2load", "loader h2c"]:
        rps, rps_all = med(tool, lambda x: x["rps"])
        eff, eff_all = med(tool, lambda x: x["ok"] / max(x["cpu_s"], 1e-9))
        per[tool] = (rps, eff)
        fmt = lambda xs: ", ".join(f"{x:.0f}" for x in xs)
        print(f"  {tool:<11} {rps:>9.0f} req/s per core [{fmt(rps_all)}]   {eff:>9.0f} req/CPU-s [{fmt(eff_all)}]")
    for mine, peer in [("loader", "wrk"), ("loader h2c", "h2load")]:
        (r1, e1), (r2, e2) = per[mine], per[peer]
        print(f"  {mine} ÷ {peer}: req/s {r1 / max(r2, 1e-9):.2f}, req per CPU-s {e1 / max(e2, 1e-9):.2f}")
    with open(os.path.join(args.out, "rows.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
