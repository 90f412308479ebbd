#!/usr/bin/env python3
"""bench/sink_cost.py — CPU per request of each end, measured alike: the calibration sink
(`loader target --sink`) and the full built-in target against the loader, at fixed rates.

    sudo python3 bench/sink_cost.py [--rounds 3] [--rates 10000,50000,100000] [--duration 8]
                                    [--loader target/release/loader] [--nginx]

Each run pins the target to TARGET_CPU (1) and `loader run --rate R --connections 64
--threads 1 --no-probes` to LOAD_CPU (0), then reads both processes' CPU time (utime + stime
of /proc/PID/stat) over the same window of the loader's measured phase, and divides by the
requests offered in it: µs of CPU per request for each end, and their ratio (target ÷ loader).
With --nginx, nginx with one worker (`return 200` of the same body) is measured in the
target's place too. Rounds interleave the targets. Prints the median per target and rate,
every round in brackets. This is the figure issue 38 asks for: the sink must cost clearly
less per request than the loader, so that a calibration on a machine where each gets the same
cores finds the loader's ceiling. See docs/calibration.md.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

LOAD_CPU, TARGET_CPU = "0", "1"
BODY = '{"ok":true,"service":"loader-target"}'


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_s(pid):
    """CPU of a process and its children (nginx: master and worker)."""
    total = cpu_s(pid)
    try:
        for child in open(f"/proc/{pid}/task/{pid}/children").read().split():
            total += cpu_s(int(child))
    except OSError:
        pass
    return total


def start_target(kind, loader, tmp):
    if kind == "nginx":
        conf = os.path.join(tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(
                f"worker_processes 1; daemon off; pid {tmp}/nginx.pid; error_log stderr;\n"
                "events { worker_connections 4096; }\n"
                "http { access_log off; server { listen 127.0.0.1:18390 reuseport;\n"
                f"  location / {{ default_type application/json; return 200 '{BODY}'; }} }} }}\n"
            )
        p = subprocess.Popen(["taskset", "-c", TARGET_CPU, "nginx", "-c", conf], stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        return p, "http://127.0.0.1:18390/"
    flags = ["--sink"] if kind == "sink" else []
    p = subprocess.Popen(
        ["taskset", "-c", TARGET_CPU, loader, "target", "--listen", "127.0.0.1:0", *flags],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = p.stdout.readline().strip()
    return p, line.rsplit(" ", 1)[1] + "/"


def one(kind, rate, args, tmp):
    target, url = start_target(kind, args.loader, tmp)
    out = os.path.join(tmp, f"run-{kind}-{rate}")
    cmd = ["taskset", "-c", LOAD_CPU, args.loader, "run", "--url", url, "--rate", str(rate),
           "--duration", f"{args.duration}s", "--warmup", "1s", "--connections", "64", "--threads", "1",
           "--no-probes", "--plain", "--out", out]
    run = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.3)  # past the warm-up
    l0, t0 = cpu_s(run.pid), tree_cpu_s(target.pid)
    window = args.duration - 0.6
    time.sleep(window)
    l1, t1 = cpu_s(run.pid), tree_cpu_s(target.pid)
    run.wait(timeout=60)
    target.terminate()
    target.wait(timeout=10)
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    requests = rate * window
    return {
        "loader_us": (l1 - l0) / requests * 1e6,
        "target_us": (t1 - t0) / requests * 1e6,
        "trusted": s["verdict"]["trusted"],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rates", default="10000,50000,100000")
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--loader", default="target/release/loader")
    ap.add_argument("--nginx", action="store_true")
    args = ap.parse_args()
    kinds = ["sink", "builtin"] + (["nginx"] if args.nginx else [])
    rates = [int(r) for r in args.rates.split(",")]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = kinds if r % 2 == 0 else list(reversed(kinds))
            for rate in rates:
                for kind in order:
                    got = one(kind, rate, args, tmp)
                    results.setdefault((kind, rate), []).append(got)
                    print(f"round {r + 1} {kind:8} {rate:>7}/s: loader {got['loader_us']:.2f} µs/req, "
                          f"target {got['target_us']:.2f} µs/req, trusted {got['trusted']}", file=sys.stderr)
    print(f"{'target':8} {'rate/s':>8} {'loader µs/req':>14} {'target µs/req':>14} {'target ÷ loader':>16}  rounds (loader/target)")
    for rate in rates:
        for kind in kinds:
            rs = results[(kind, rate)]
            lo = statistics.median(x["loader_us"] for x in rs)
            ta = statistics.median(x["target_us"] for x in rs)
            each = " ".join(f"{x['loader_us']:.2f}/{x['target_us']:.2f}" for x in rs)
            print(f"{kind:8} {rate:>8} {lo:>14.2f} {ta:>14.2f} {ta / lo:>16.2f}  [{each}]")


if __name__ == "__main__":
    main()
