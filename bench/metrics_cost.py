#!/usr/bin/env python3
"""bench/metrics_cost.py — what the live metrics endpoint costs the loader: its process CPU
per request with `--metrics` (counts refreshed every 100 ms, scraped every second) against
the same run without it, at fixed rates, rounds interleaved.

    sudo python3 bench/metrics_cost.py [--rounds 3] [--rates 1000,10000,25000] [--duration 8]
                                       [--loader target/release/loader]

The built-in target runs on TARGET_CPU (1), `loader run --rate R --connections 64 --threads 1
--no-probes` on LOAD_CPU (0); the loader's CPU (utime + stime of /proc/PID/stat, every thread:
shard, main loop, the endpoint's thread) is read over the same window of its measured phase
and divided by the requests offered in it. With --metrics a scraper fetches /metrics once a
second, as Prometheus would. Prints per rate the median µs/request of both and their
difference, every round in brackets. See docs/metrics.md.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

LOAD_CPU, TARGET_CPU = "0", "1"


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port, stop):
    """GET /metrics once a second until `stop` is set."""
    while not stop.wait(1.0):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as c:
                c.sendall(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
                while c.recv(65536):
                    pass
        except OSError:
            pass


def one(metrics, rate, args, url, tmp):
    out = os.path.join(tmp, f"run-{metrics}-{rate}")
    cmd = ["taskset", "-c", LOAD_CPU, args.loader, "run", "--url", url, "--rate", str(rate),
           "--duration", f"{args.duration}s", "--warmup", "1s", "--connections", "64", "--threads", "1",
           "--no-probes", "--plain", "--preflight", "0s", "--out", out]
    stop = threading.Event()
    scraper = None
    if metrics:
        port = free_port()
        cmd += ["--metrics", f"127.0.0.1:{port}", "--metrics-linger", "0s"]
        scraper = threading.Thread(target=scrape, args=(port, stop), daemon=True)
        scraper.start()
    run = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.3)  # past the warm-up
    l0 = cpu_s(run.pid)
    window = args.duration - 0.6
    time.sleep(window)
    l1 = cpu_s(run.pid)
    run.wait(timeout=60)
    stop.set()
    if scraper:
        scraper.join(timeout=5)
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    return {"us": (l1 - l0) / (rate * window) * 1e6, "trusted": s["verdict"]["trusted"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rates", default="1000,10000,25000")
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--loader", default="target/release/loader")
    args = ap.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    target = subprocess.Popen(["taskset", "-c", TARGET_CPU, args.loader, "target", "--listen", "127.0.0.1:0"],
                              stdout=subprocess.PIPE, text=True)
    url = target.stdout.readline().strip().rsplit(" ", 1)[1] + "/"
    results = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.rounds):
                order = [False, True] if r % 2 == 0 else [True, False]
                for rate in rates:
                    for metrics in order:
                        got = one(metrics, rate, args, url, tmp)
                        results.setdefault((metrics, rate), []).append(got)
                        print(f"round {r + 1} {'metrics' if metrics else 'plain':7} {rate:>6}/s: "
                              f"{got['us']:.2f} µs/req, trusted {got['trusted']}", file=sys.stderr)
    finally:
        target.terminate()
        target.wait(timeout=10)
    print(f"{'rate/s':>7} {'plain µs/req':>13} {'--metrics µs/req':>17} {'difference':>11}  rounds (plain/metrics)")
    for rate in rates:
        plain = [x["us"] for x in results[(False, rate)]]
        live = [x["us"] for x in results[(True, rate)]]
        p, m = statistics.median(plain), statistics.median(live)
        each = " ".join(f"{a:.2f}/{b:.2f}" for a, b in zip(plain, live))
        print(f"{rate:>7} {p:>13.2f} {m:>17.2f} {m - p:>+11.2f}  [{each}]")


if __name__ == "__main__":
    main()
