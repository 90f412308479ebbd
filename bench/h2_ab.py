#!/usr/bin/env python3
"""bench/h2_ab.py — interleaved A/B of loader builds (and h2load) over HTTP/2 on one nginx.

For comparing engine changes, where only interleaved pairs measure anything on a noisy host:
one nginx (bench/h2.py's, 1 worker on TARGET_CPU, h2c on 127.0.0.1), and in each round, at
each rate, h2load (when asked for) and then every named build, each pinned to LOAD_CPU. A
loader run is `loader run --url … --http2 --max-streams STREAMS --rate R --duration DUR
--connections CONNS --threads 1 --warmup 1s --preflight 0s --no-emergency-stop --plain` plus
EXTRA; its figure is answered requests per CPU-second over the whole run (warm-up included,
as its CPU time covers it), with its verdict and send lag p99. Medians at the end.

usage: bench/h2_ab.py RATES ROUNDS NAME=PATH [NAME=PATH …] [h2load]
       e.g. bench/h2_ab.py 1000,10000,40000 4 base=/tmp/loader-main new=target/release/loader h2load
Environment: DUR (6 s), CONNS (8), STREAMS (10), EXTRA (more loader flags), LOAD_CPU (0),
TARGET_CPU (1), OUT (/tmp/h2_ab).
"""

import os
import statistics
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import h2 as H  # noqa: E402  (bench/h2.py: nginx, h2load and the CPU timing)


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    rates = [int(x) for x in sys.argv[1].split(",")]
    rounds = int(sys.argv[2])
    builds = [a.split("=", 1) for a in sys.argv[3:] if "=" in a]
    with_h2load = "h2load" in sys.argv[3:]
    dur = int(os.environ.get("DUR", "6"))
    args = types.SimpleNamespace(load_cpu=os.environ.get("LOAD_CPU", "0"), connections=int(os.environ.get("CONNS", "8")),
                                 streams=int(os.environ.get("STREAMS", "10")), duration=dur, loader=None)
    extra = os.environ.get("EXTRA", "").split()
    out_dir = os.environ.get("OUT", "/tmp/h2_ab")
    os.makedirs(out_dir, exist_ok=True)
    port = H.free_port()
    nginx = H.start_nginx(out_dir, port, os.environ.get("TARGET_CPU", "1"))
    url = f"http://127.0.0.1:{port}/"
    results = {}
    try:
        for r in range(rounds):
            for rate in rates:
                if with_h2load:
                    h = H.h2load(args, url, f"{out_dir}/h2load.log", rate)
                    results.setdefault((rate, "h2load"), []).append(h["ok"] / h["cpu_s"])
                    print(f"round {r} {rate} req/s h2load {h['ok'] / h['cpu_s']:.0f} req/CPU-s (ok {h['ok']})", flush=True)
                for name, path in builds:
                    args.loader = path
                    out = f"{out_dir}/{name}-{rate}-{r}"
                    res = H.loader(args, url, rate, out, out + ".log", extra, name)
                    if res["verdict"] == "no summary":
                        print(f"round {r} {rate} req/s {name}: no summary (exit {res['code']}, see {out}.log)", flush=True)
                        continue
                    per = res["ok"] / res["cpu_s"]
                    results.setdefault((rate, name), []).append(per)
                    print(f"round {r} {rate} req/s {name} {per:.0f} req/CPU-s (ok {res['ok']}, cpu {res['cpu_s']:.3f} s, "
                          f"{res['verdict']}, send lag p99 {res['lag_p99_ms']} ms, p50 {res['p50_ms']} ms)", flush=True)
    finally:
        nginx.terminate()
        nginx.wait()
    for (rate, name), figures in sorted(results.items()):
        print(f"{rate} req/s {name}: median {statistics.median(figures):.0f} {[round(x) for x in figures]}")


if __name__ == "__main__":
    main()
