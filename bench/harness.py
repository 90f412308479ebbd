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

Fixed-rate mode (bench/run.sh --mode fixed):
  fixed TOOL PATH        parse one run of TOOL (wrk2, oha, vegeta, k6, loader, loader-probes, loader-window,
                         loader-halt)
                         -> "achieved_rps answered p50_ms p99_ms verdict send_lag_p99_ms dropped"
                         ("-" where the tool has no such figure; dropped: k6's dropped_iterations)
  fixed-table FILE       print the fixed-rate markdown tables from the results TSV
  hold-cpu-latency       hold /dev/cpu_dma_latency at 0 µs until killed (--hold-cpu-latency)

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


# --- fixed-rate mode --------------------------------------------------------------------
# Every tool runs open loop at the same rate R. Each parser returns
# (achieved_rps, answered, p50_ms, p99_ms, verdict, send_lag_p99_ms) with None where the
# tool has no such figure. "answered" is the count of requests that got an HTTP answer over
# the whole process lifetime, because the CPU time it is divided by covers all of it.

WRK2_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0, "h": 3600000.0}

# Whether each tool's percentiles are measured from the intended send time.
CO_CORRECTED = {
    "wrk2": "yes",
    "oha": "yes (--latency-correction)",
    "vegeta": "no: from the actual send",
    "k6": "no: from the actual send",
    "loader": "yes",
    "loader-probes": "yes",
    "loader-window": "yes",
    "loader-halt": "yes",
}


def parse_wrk2(path):
    text = open(path).read()
    # wrk2 --latency prints the HdrHistogram of latency from the intended send time
    # ("Recorded Latency"; -U would add the uncorrected one, which is not asked for).
    section = text.split("Latency Distribution (HdrHistogram - Recorded Latency)", 1)
    if len(section) != 2:
        raise ValueError(f"{path}: not wrk2 --latency output (no 'Recorded Latency' distribution)")
    dist = section[1]

    def pct(p):
        m = re.search(rf"^\s*{p}\.000%\s+([\d.]+)(us|ms|s|m|h)\b", dist, re.M)
        if not m:
            raise ValueError(f"{path}: no {p}% line in wrk2's latency distribution")
        return float(m.group(1)) * WRK2_UNITS_MS[m.group(2)]

    rps = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.M)
    count = re.search(r"^\s+(\d+) requests in ", text, re.M)
    if not (rps and count):
        raise ValueError(f"{path}: no 'Requests/sec' or 'requests in' line in wrk2 output")
    answered = int(count.group(1))  # like wrk, every answer whatever its status
    return float(rps.group(1)), answered, pct(50), pct(99), None, None


def parse_oha_fixed(path):
    data = json.load(open(path))
    # With -q R --latency-correction oha measures each latency from the request's scheduled
    # start. Latencies are in seconds. Answered: every status received (errors and requests
    # cut at the deadline are left out).
    lat = data["latencyPercentiles"]
    answered = sum(data.get("statusCodeDistribution", {}).values())

    def ms(v):
        return v * 1000.0 if v is not None else None

    return float(data["summary"]["requestsPerSec"]), answered, ms(lat["p50"]), ms(lat["p99"]), None, None


def parse_vegeta(path):
    # `vegeta report -type=json`: latencies in nanoseconds, from each request's actual send.
    data = json.load(open(path))
    if "latencies" not in data or "status_codes" not in data:
        raise ValueError(f"{path}: not `vegeta report -type=json` output")
    answered = sum(n for code, n in data["status_codes"].items() if code != "0")  # 0: no answer
    lat = data["latencies"]
    return float(data["throughput"]), answered, lat["50th"] / 1e6, lat["99th"] / 1e6, None, None


def parse_k6(path):
    # The end-of-test summary as handleSummary() gets it (k6 v0.30+): trends in milliseconds.
    data = json.load(open(path))
    metrics = data["metrics"]
    reqs = metrics["http_reqs"]["values"]
    duration = metrics["http_req_duration"]["values"]
    if "p(99)" not in duration:
        raise ValueError(f"{path}: http_req_duration has no p(99) (summaryTrendStats)")
    failed = metrics.get("http_req_failed", {}).get("values", {}).get("passes", 0)
    count = int(reqs["count"])
    answered = count - int(failed)
    rate = float(reqs["rate"]) * answered / count if count else 0.0
    return rate, answered, float(duration["med"]), float(duration["p(99)"]), None, None


def k6_dropped(path):
    """Iterations k6 could not start on time (no free VU): its own sign of falling behind."""
    try:
        data = json.load(open(path))
        return int(data["metrics"].get("dropped_iterations", {}).get("values", {}).get("count", 0))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def parse_loader_fixed(out_dir):
    data = json.load(open(os.path.join(out_dir, "summary.json")))
    if data.get("schema") != "loader.summary/v1":
        raise ValueError(f"{out_dir}/summary.json: schema is {data.get('schema')!r}, want loader.summary/v1")
    phases = data["phases"]
    main = [p for p in phases if p.get("name") == "main"] or [p for p in phases if p.get("kind") == "hold"]
    if not main:
        raise ValueError(f"{out_dir}/summary.json: no phase named 'main'")
    main = main[0]
    answered = sum(int(p.get("ok", p["requests"])) for p in phases)
    verdict = data.get("verdict") or {}
    trusted = verdict.get("trusted")
    if trusted is True:
        word = "trusted"
    elif trusted is False:
        codes = sorted({r["code"] for r in verdict.get("reasons", []) if r.get("invalidates")})
        word = "UNTRUSTED" + (":" + ",".join(codes) if codes else "")
    else:
        word = "none"
    lat = main["latency_ms"]
    return (float(main["ok_rps"]), answered, float(lat["p50"]), float(lat["p99"]), word,
            float(main["send_lag_ms"]["p99"]))


FIXED_PARSERS = {
    "wrk2": parse_wrk2,
    "oha": parse_oha_fixed,
    "vegeta": parse_vegeta,
    "k6": parse_k6,
    "loader": parse_loader_fixed,
    "loader-probes": parse_loader_fixed,
    "loader-window": parse_loader_fixed,
    "loader-halt": parse_loader_fixed,
}

FIXED_COLUMNS = ["rate", "round", "tool", "achieved_rps", "answered", "cpu_s", "wall_s",
                 "p50_ms", "p99_ms", "verdict", "send_lag_p99_ms", "dropped", "exit"]


def fixed(tool, path):
    rps, answered, p50, p99, verdict, lag = FIXED_PARSERS[tool](path)
    dropped = k6_dropped(path) if tool == "k6" else None

    def num(v, fmt):
        return "-" if v is None else format(v, fmt)

    print(f"{rps:.1f} {answered} {num(p50, '.3f')} {num(p99, '.3f')} {verdict or '-'} {num(lag, '.3f')} "
          f"{num(dropped, 'd')}")


def verdict_summary(words):
    """'trusted 3/3' or 'trusted 1/3, UNTRUSTED (loader_cpu) 2/3'."""
    counts = {}
    for w in words:
        counts[w] = counts.get(w, 0) + 1

    def label(w):
        if w.startswith("UNTRUSTED:"):
            return "UNTRUSTED (" + w.split(":", 1)[1].replace(",", ", ") + ")"
        return w

    return ", ".join(f"{label(w)} {n}/{len(words)}" for w, n in
                     sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def fixed_table(path):
    rows = {}  # rate -> tool -> [run]
    tool_order = []
    for line in open(path):
        fields = line.split()
        if len(fields) != len(FIXED_COLUMNS) or fields[0] == "rate":
            continue
        r = dict(zip(FIXED_COLUMNS, fields))
        rate = int(float(r["rate"]))
        tool = r["tool"]
        if tool not in tool_order:
            tool_order.append(tool)
        cpu, wall = float(r["cpu_s"]), float(r["wall_s"])

        def opt(v):
            return None if v == "-" else float(v)

        rows.setdefault(rate, {}).setdefault(tool, []).append({
            "rps": float(r["achieved_rps"]),
            "p50": opt(r["p50_ms"]),
            "p99": opt(r["p99_ms"]),
            "cpu_pct": 100.0 * cpu / wall if wall > 0 else float("nan"),
            "per_cpu_s": int(r["answered"]) / cpu if cpu > 0 else float("nan"),
            "verdict": r["verdict"],
            "lag": opt(r["send_lag_p99_ms"]),
            "dropped": opt(r["dropped"]),
            "exit": int(r["exit"]),
        })
    if not rows:
        print("no results: every tool was skipped or failed")
        return 1

    def med(runs, key):
        values = [run[key] for run in runs if run[key] is not None]
        return statistics.median(values) if values else None

    def spread(runs, key):
        values = [run[key] for run in runs]
        return f"{min(values):,.0f}–{max(values):,.0f}" if len(values) > 1 else "—"

    def ms(v):
        return "—" if v is None else f"{v:.2f}"

    for rate in sorted(rows):
        by_tool = rows[rate]
        print(f"#### {rate:,} req/s")
        print()
        print("| tool | rounds | achieved req/s | of rate | p50 (ms) | p99 (ms) | latency from intended send "
              "| tool CPU (% of one core) | requests per CPU-second | range over rounds | vs wrk2 "
              "| loader verdict | send lag p99 (ms) |")
        print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|---:|")
        wrk2 = med(by_tool["wrk2"], "per_cpu_s") if "wrk2" in by_tool else None
        for tool in tool_order:
            runs = by_tool.get(tool)
            if not runs:
                continue
            per = med(runs, "per_cpu_s")
            ratio = f"{per / wrk2:.2f}×" if wrk2 else "—"
            loaderish = tool.startswith("loader")
            verdict = verdict_summary([run["verdict"] for run in runs]) if loaderish else "—"
            lag = ms(med(runs, "lag")) if loaderish else "—"
            rps = med(runs, "rps")
            print(f"| {tool} | {len(runs)} | {rps:,.0f} | {100.0 * rps / rate:.0f} % | {ms(med(runs, 'p50'))} "
                  f"| {ms(med(runs, 'p99'))} | {CO_CORRECTED.get(tool, '?')} | {med(runs, 'cpu_pct'):.0f} "
                  f"| {per:,.0f} | {spread(runs, 'per_cpu_s')} | {ratio} | {verdict} | {lag} |")
        print()
        dropped = med(by_tool.get("k6", []), "dropped")
        if dropped:
            print(f"k6 dropped {dropped:,.0f} iterations (median over rounds): all its VUs (one per "
                  "connection) were busy when they were due, so it sent fewer than the rate.")
            print()
    print("Medians over rounds; every tool open loop at the rate of its table, with the same number "
          "of connections. requests per CPU-second: answered requests ÷ user+sys CPU time of the tool "
          "process (the loader's warm-up counts on both sides). p50/p99 as each tool reports them: "
          "wrk2, oha --latency-correction and loader measure from the intended send time "
          "(coordinated omission corrected), vegeta and k6 from the actual send. "
          "loader verdict: trusted/UNTRUSTED with the codes of the invalidating reasons, per round.")
    return 0


def hold_cpu_latency():
    """Hold the PM QoS request at 0 µs (idle CPUs poll) until killed: the machine every tool of
    the bench then runs on, as `loader run` has it by default as root."""
    import signal
    import struct
    import time

    fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
    os.write(fd, struct.pack("=i", 0))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("held", flush=True)
    while True:
        time.sleep(3600)


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
    if len(argv) == 4 and argv[1] == "fixed" and argv[2] in FIXED_PARSERS:
        try:
            fixed(argv[2], argv[3])
        except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as err:
            print(f"harness: cannot parse {argv[2]} output: {err!r}", file=sys.stderr)
            return 1
        return 0
    if len(argv) == 3 and argv[1] == "fixed-table":
        return fixed_table(argv[2])
    if argv[1:] == ["hold-cpu-latency"]:
        return hold_cpu_latency()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv) or 0)
