#!/usr/bin/env python3
"""bench/h2_stat.py — what each tool makes the two CPUs do at one HTTP/2 rate (perf stat).

One nginx (bench/h2.py's, 1 worker on CPU 1, h2c on 127.0.0.1); h2load (`--rps RATE/8` on 8
connections, `-m 10`) and then the loader (`--http2 --max-streams 10 --connections 8
--threads 1`, plus EXTRA), each pinned to CPU 0 for an 8 s run; 3 s into each, `perf stat -A
-C 0,1` counts for 4 s: context switches, wake-ups, local timer interrupts, hrtimer
expiries, TSC-deadline writes (`msr:write_msr`, each an exit to the hypervisor on a VM),
function-call IPIs and idle entries/exits, per CPU. Needs root and perf.

usage: bench/h2_stat.py RATE [LOADER]      (LOADER: target/release/loader)
Environment: EXTRA (more loader flags), TOOLS (h2load,loader).
"""

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import h2 as H  # noqa: E402  (bench/h2.py: nginx)

EVENTS = ("context-switches,task-clock,sched:sched_wakeup,irq_vectors:local_timer_entry,timer:hrtimer_expire_entry,"
          "msr:write_msr,irq_vectors:reschedule_entry,irq_vectors:call_function_single_entry,power:cpu_idle")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rate = int(sys.argv[1])
    loader = sys.argv[2] if len(sys.argv) > 2 else "target/release/loader"
    out_dir = "/tmp/h2_stat"
    os.makedirs(out_dir, exist_ok=True)
    port = H.free_port()
    nginx = H.start_nginx(out_dir, port, "1")
    url = f"http://127.0.0.1:{port}/"
    try:
        for tool in os.environ.get("TOOLS", "h2load,loader").split(","):
            if tool == "h2load":
                cmd = ["taskset", "-c", "0", "h2load", "-c", "8", "-m", "10", "-D", "8", f"--rps={rate / 8:g}", url]
            else:
                cmd = ["taskset", "-c", "0", loader, "run", "--url", url, "--http2", "--max-streams", "10", "--rate",
                       str(rate), "--duration", "8s", "--connections", "8", "--threads", "1", "--warmup", "1s",
                       "--preflight", "0s", "--no-emergency-stop", "--out", f"{out_dir}/out", "--plain"]
                cmd += os.environ.get("EXTRA", "").split()
            run = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(3)
            stat = subprocess.run(["perf", "stat", "-A", "-C", "0,1", "-x", ",", "-e", EVENTS, "sleep", "4"],
                                  capture_output=True, text=True)
            run.wait()
            rows = {}
            for line in stat.stderr.splitlines():
                f = line.split(",")
                if len(f) > 3 and f[0].startswith("CPU"):
                    rows.setdefault(f[3], {})[f[0]] = f[1]
            print(f"{tool} at {rate} req/s, 4 s:{'' if rows else ' perf stat failed: ' + stat.stderr.strip()}")
            for event, cpus in rows.items():
                print(f"  {event:42s} CPU0 {cpus.get('CPU0', '?'):>12s}   CPU1 {cpus.get('CPU1', '?'):>12s}")
    finally:
        nginx.terminate()
        nginx.wait()


if __name__ == "__main__":
    main()
