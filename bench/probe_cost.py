#!/usr/bin/env python3
"""bench/probe_cost.py — what each eBPF program of the loader costs per run, by the kernel's own
stats (kernel.bpf_stats_enabled: run_time_ns and run_cnt per program), for several loader
builds or flags side by side.

    sudo python3 bench/probe_cost.py [--rounds 3] [--rate 10000] [--duration 10] VARIANT...

VARIANT is LABEL=BINARY[,FLAG...], e.g. before=/tmp/loader-before off=target/release/loader
debug=target/release/loader,--log-level,debug. Rounds interleave the variants, every other
round in reverse order. Each run is
`BINARY run --url <target> --rate RATE --duration DURATION --preflight 0s --plain FLAG...`
pinned to LOAD_CPU (0) against `loader target` (the first variant's binary) pinned to
TARGET_CPU (1). While it runs, the script reads /proc/<pid>/fdinfo of the loader's program fds
every 0.2 s; the last reading before exit is each program's total since load. Per program:
ns per run (median over rounds, all rounds in brackets) and the translated size (bytes after
the verifier, `bytes_xlated` of `bpftool prog show`), and how many records of the programs'
log (aya-log, target `probes::…`) each run printed. Most hooks are system-wide, so run_cnt
counts every event on the host, the loader's or not; what compares across variants is the
cost per run. See docs/methodology.md ("The probes' own log").
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

STATS = "/proc/sys/kernel/bpf_stats_enabled"


def programs_of(pid):
    """prog_id -> (run_time_ns, run_cnt) for every BPF program fd the process holds."""
    found = {}
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:bpf-prog":
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                info = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        except OSError:
            continue
        prog_id = int(info["prog_id"])
        found[prog_id] = (int(info.get("run_time_ns", 0)), int(info.get("run_cnt", 0)))
    return found


def describe(prog_id):
    """(name, bytes_xlated) of a loaded program, from bpftool."""
    out = subprocess.run(["bpftool", "-j", "prog", "show", "id", str(prog_id)], capture_output=True, text=True)
    if out.returncode != 0:
        return (f"id{prog_id}", None)
    prog = json.loads(out.stdout)
    return (prog.get("name", f"id{prog_id}"), prog.get("bytes_xlated"))


def start_target(binary, cpu):
    target = subprocess.Popen(
        ["taskset", "-c", str(cpu), binary, "target", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    line = target.stdout.readline()
    match = re.search(r"listening on (http://\S+)", line)
    if not match:
        target.kill()
        sys.exit(f"loader target said {line!r}")
    return target, match.group(1) + "/"


def one_run(binary, flags, url, args, out_dir):
    command = ["taskset", "-c", str(args.load_cpu), binary, "run", "--url", url, "--rate", str(args.rate),
               "--duration", f"{args.duration}s", "--preflight", "0s", "--plain", "--out", out_dir, *flags]
    with open(os.path.join(out_dir, "stderr"), "w") as err:
        run = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
        last, names = {}, {}
        while run.poll() is None:
            now = programs_of(run.pid)
            for prog_id in now.keys() - names.keys():
                names[prog_id] = describe(prog_id)
            last.update(now)
            time.sleep(0.2)
    if run.returncode not in (0, 3, 4):
        sys.exit(f"{' '.join(command)} ended with {run.returncode}; see {out_dir}/stderr")
    by_name = {}
    for prog_id, (ns, count) in last.items():
        name, xlated = names[prog_id]
        by_name[name] = (ns / count if count else None, count, xlated)
    with open(os.path.join(out_dir, "stderr")) as err:
        records = sum(1 for line in err if " probes::" in line)
    return by_name, records


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variants", nargs="+", metavar="LABEL=BINARY[,FLAG...]")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=10000)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--load-cpu", type=int, default=int(os.environ.get("LOAD_CPU", 0)))
    parser.add_argument("--target-cpu", type=int, default=int(os.environ.get("TARGET_CPU", 1)))
    args = parser.parse_args()
    variants = []
    for spec in args.variants:
        label, _, rest = spec.partition("=")
        binary, *flags = rest.split(",")
        variants.append((label, os.path.abspath(binary), flags))

    with open(STATS) as f:
        stats_before = f.read().strip()
    with open(STATS, "w") as f:
        f.write("1")
    target, url = start_target(variants[0][1], args.target_cpu)
    results = {label: [] for label, _, _ in variants}
    logged = {label: [] for label, _, _ in variants}
    try:
        with tempfile.TemporaryDirectory(prefix="probe_cost.") as tmp:
            for round_no in range(args.rounds):
                # Every other round in reverse order, so no variant always follows another.
                for label, binary, flags in variants if round_no % 2 == 0 else variants[::-1]:
                    out_dir = os.path.join(tmp, f"{label}.{round_no}")
                    os.makedirs(out_dir)
                    by_name, records = one_run(binary, flags, url, args, out_dir)
                    results[label].append(by_name)
                    logged[label].append(records)
                    print(f"round {round_no + 1} {label}: done", file=sys.stderr)
    finally:
        target.kill()
        target.wait()
        with open(STATS, "w") as f:
            f.write(stats_before)

    names = sorted({name for runs in results.values() for run in runs for name in run})
    labels = [label for label, _, _ in variants]
    print(f"ns per program run, median of {args.rounds} (each round); bytes after the verifier; "
          f"{args.rate} req/s for {args.duration} s")
    print("| program | " + " | ".join(f"{label} ns/run | {label} xlated B" for label in labels) + " |")
    print("|---|" + "---|---|" * len(labels))
    for name in names:
        cells = []
        for label in labels:
            per_run = [run[name][0] for run in results[label] if name in run and run[name][0] is not None]
            xlated = {run[name][2] for run in results[label] if name in run}
            if per_run:
                rounds = " / ".join(f"{ns:.0f}" for ns in per_run)
                cells.append(f"{statistics.median(per_run):.0f} ({rounds})")
            else:
                cells.append("–")
            cells.append(",".join(str(x) for x in sorted(x for x in xlated if x is not None)) or "–")
        print(f"| {name} | " + " | ".join(cells) + " |")
    counts = {label: sum(run[n][1] for run in results[label] for n in run) // max(len(results[label]), 1)
              for label in labels}
    print("program runs per round, all programs: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
    print("records of the programs' log on stderr, per round: "
          + ", ".join(f"{k} {' / '.join(map(str, v))}" for k, v in logged.items()))


if __name__ == "__main__":
    main()
