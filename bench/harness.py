#!/usr/bin/env python3
"""bench/run.sh's measuring and parsing side (standard library only).

Subcommands:
  rusage OUT -- CMD...   run CMD, write "user_s sys_s wall_s exit" of CMD and all its
                         descendants to OUT (getrusage(RUSAGE_CHILDREN)), exit with its code
  free-port              print a free TCP port on 127.0.0.1
  check-target URL       GET URL once; exit 0 if the answer is 200 with a body
  wrk FILE               parse `wrk --latency` output  -> "rps p99_ms requests"
  oha FILE               parse `oha --output-format json` -> "rps p99_ms requests"
  loader DIR             parse DIR/summary.json (loader.summary/v1) -> "rps p99_ms requests"
  table FILE             print the final markdown table from the results TSV

It leaves running the tools, pinning and nginx to run.sh.
"""

import json
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import time
import urllib.request


def rusage(out, cmd):
    start = time.monotonic()
    try:
        child = subprocess.Popen(cmd)
    except FileNotFoundError:
        print(f"harness: cannot run {cmd[0]}", file=sys.stderr)
        child = None
    code = 127
    while child is not None:
        try:
            # Ctrl-C reaches the tool too (same process group); wait for it to finish so its
            # CPU time is still counted, then let run.sh handle the interrupt.
            code = child.wait()
            break
        except KeyboardInterrupt:
            continue
    wall = time.monotonic() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out, "w") as f:
        f.write(f"{usage.ru_utime:.3f} {usage.ru_stime:.3f} {wall:.3f} {code}\n")
    return code if code >= 0 else 128 - code


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        print(s.getsockname()[1])


def check_target(url):
    with urllib.request.urlopen(url, timeout=2) as answer:
        body = answer.read()
        ok = answer.status == 200 and len(body) > 0
        print(f"{answer.status} {answer.headers.get('Content-Type')} {body.decode(errors='replace')}")
    return 0 if ok else 1


WRK_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def parse_wrk(path):
    text = open(path).read()
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.M)
    p99 = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s|m)\b", text, re.M)
    count = re.search(r"^\s+(\d+) requests in ", text, re.M)
    if not (rps and p99 and count):
        raise ValueError(f"{path}: not wrk --latency output")
    return float(rps.group(1)), float(p99.group(1)) * WRK_UNITS_MS[p99.group(2)], int(count.group(1))


def parse_oha(path):
    data = json.load(open(path))
    summary = data["summary"]
    # Latencies are in seconds. Requests = answered (by status) + failed (by error), leaving
    # out the ones still in flight at the deadline ("aborted due to deadline"), as wrk does.
    p99 = data["latencyPercentiles"]["p99"]
    answered = sum(data.get("statusCodeDistribution", {}).values())
    failed = sum(n for error, n in data.get("errorDistribution", {}).items() if "deadline" not in error)
    p99_ms = p99 * 1000.0 if p99 is not None else float("nan")
    return float(summary["requestsPerSec"]), p99_ms, answered + failed


def parse_loader(out_dir):
    data = json.load(open(os.path.join(out_dir, "summary.json")))
    if data.get("schema") != "loader.summary/v1":
        raise ValueError(f"{out_dir}/summary.json: schema is {data.get('schema')!r}, want loader.summary/v1")
    phases = data["phases"]
    hold = [p for p in phases if p.get("kind") == "hold"]
    if not hold:
        raise ValueError(f"{out_dir}/summary.json: no phase of kind 'hold'")
    # Rate and p99 from the measured (hold) phase; the count of every phase, because the
    # process CPU time it is divided by covers the warm-up too. Answered requests (`ok`) when
    # the summary has them — like wrk's count, which leaves out errors and timeouts.
    count = sum(int(p.get("ok", p["requests"])) for p in phases)
    return float(hold[0]["ok_rps"]), float(hold[0]["latency_ms"]["p99"]), count


def table(path):
    rows = {}
    order = []
    for line in open(path):
        fields = line.split()
        if len(fields) != 8 or fields[0] == "round":
            continue
        _round, tool, rps, p99, requests, cpu, wall, _code = fields
        if tool not in rows:
            rows[tool] = []
            order.append(tool)
        cpu = float(cpu)
        rows[tool].append({
            "rps": float(rps),
            "p99": float(p99),
            "cpu_pct": 100.0 * cpu / float(wall) if float(wall) > 0 else float("nan"),
            "per_cpu_s": int(requests) / cpu if cpu > 0 else float("nan"),
        })
    if not rows:
        print("no results: every tool was skipped or failed")
        return 1

    def med(tool, key):
        return statistics.median(r[key] for r in rows[tool])

    def spread(tool, key):
        values = [r[key] for r in rows[tool]]
        return f"{min(values):,.0f}–{max(values):,.0f}" if len(values) > 1 else "—"

    print("| tool | rounds | achieved req/s | p99 latency (ms) | tool CPU (% of one core) "
          "| requests per CPU-second | range over rounds | vs wrk |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    wrk = med("wrk", "per_cpu_s") if "wrk" in rows else None
    for tool in order:
        per = med(tool, "per_cpu_s")
        ratio = f"{per / wrk:.2f}×" if wrk else "—"
        print(f"| {tool} | {len(rows[tool])} | {med(tool, 'rps'):,.0f} | {med(tool, 'p99'):.2f} "
              f"| {med(tool, 'cpu_pct'):.0f} | {per:,.0f} | {spread(tool, 'per_cpu_s')} | {ratio} |")
    print()
    print("Medians over rounds. p99: loader's is measured from each request's intended send time "
          "(open loop, coordinated omission corrected); wrk's and oha's are closed-loop and "
          "uncorrected, so they are not the same quantity.")
    if wrk and "loader" in rows:
        print(f"loader/wrk requests per CPU-second: {med('loader', 'per_cpu_s') / wrk:.2f}")
    if "loader" in rows and "loader-probes" in rows:
        cost = 1 - med('loader-probes', 'per_cpu_s') / med('loader', 'per_cpu_s')
        print(f"probes on vs off, requests per CPU-second: {cost * 100:+.1f} % cost")
    return 0


def main(argv):
    if len(argv) >= 4 and argv[1] == "rusage" and argv[3] == "--":
        return rusage(argv[2], argv[4:])
    if argv[1:] == ["free-port"]:
        return free_port()
    if len(argv) == 3 and argv[1] == "check-target":
        return check_target(argv[2])
    if len(argv) == 3 and argv[1] in ("wrk", "oha", "loader", "loader-probes"):
        parse = {"wrk": parse_wrk, "oha": parse_oha, "loader": parse_loader, "loader-probes": parse_loader}[argv[1]]
        try:
            rps, p99, requests = parse(argv[2])
        except (OSError, ValueError, KeyError, TypeError) as err:
            print(f"harness: cannot parse {argv[1]} output: {err!r}", file=sys.stderr)
            return 1
        print(f"{rps:.1f} {p99:.3f} {requests}")
        return 0
    if len(argv) == 3 and argv[1] == "table":
        return table(argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv) or 0)
