#!/usr/bin/env bash
# bench/uring_proto.sh — the engine (io-uring crate directly) against a tokio-uring prototype of
# one shard (bench/uring-proto/), same target, same rates, same connections, same CPU.
#
# Builds both, starts `loader target` pinned to TARGET_CPU on 127.0.0.1, then runs every tool
# pinned to LOAD_CPU, open loop, one shard, CONNECTIONS keep-alive connections, WARMUP + DURATION
# seconds, at each rate. Rounds go over every rate; within a round and a rate each tool runs
# once, and the tool that goes first moves by one each round, so drift on this shared host hits
# them alike. CPU is user + sys of the tool process and all its threads, measured the same way
# for every tool (getrusage(RUSAGE_CHILDREN) in bench/harness.py), from exec to exit: the
# loader's figure therefore also holds its health sampler and its report writing.
#
# Tools: loader (`run --threads 1 --no-probes`: the engine as shipped), loader-1ms (the same
# with `--wake-window 1ms`: sends batched within 1 ms, the budget tokio's timer wheel imposes),
# tokio-uring-sleep (the prototype paced by tokio::time::sleep_until), tokio-uring-timeout
# (paced by an absolute IORING_OP_TIMEOUT on tokio-uring's ring), tokio-uring-spin (on request:
# yield_now until due; see bench/uring-proto/src/pace.rs for why it is not in the default set).
#
# --rt PRIO runs the target and every tool under SCHED_FIFO at PRIO (chrt -f), so the other
# work on a shared host cannot preempt them; the kernel's RT throttling (95 % of each CPU by
# default) still bounds them. Off by default: a load machine does not normally run that way.
#
# Output: per run a line; at the end a markdown table of medians over the rounds (with the
# min–max of the two noisiest columns), also written to OUT_DIR/results.md. See docs/design.md.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: bench/uring_proto.sh [--rounds N] [--duration SECONDS] [--warmup SECONDS] [--rates R1,R2]
                            [--connections N] [--tools t1,t2,...] [--rt PRIO] [--out DIR]

Defaults (also from the environment; flags win): ROUNDS 3, DURATION 10, WARMUP 1,
RATES 1000,10000, CONNECTIONS 64, TOOLS loader,loader-1ms,tokio-uring-sleep,tokio-uring-timeout
(tokio-uring-spin on request), RT_PRIO (none), OUT_DIR out/bench/uring-proto-<time>,
LOAD_CPU 0, TARGET_CPU 1.
EOF
}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
harness=("python3" "$here/harness.py")

rounds=${ROUNDS:-3}
duration=${DURATION:-10}
warmup=${WARMUP:-1}
rates=${RATES:-1000,10000}
connections=${CONNECTIONS:-64}
tools=${TOOLS:-loader,loader-1ms,tokio-uring-sleep,tokio-uring-timeout}
out_dir=${OUT_DIR:-$repo/out/bench/uring-proto-$(date +%Y%m%d-%H%M%S)}
load_cpu=${LOAD_CPU:-0}
target_cpu=${TARGET_CPU:-1}
rt_prio=${RT_PRIO:-}

while (($#)); do
    case $1 in
        --rounds) rounds=$2; shift 2 ;;
        --duration) duration=${2%s}; shift 2 ;;
        --warmup) warmup=${2%s}; shift 2 ;;
        --rates) rates=$2; shift 2 ;;
        --connections) connections=$2; shift 2 ;;
        --tools) tools=$2; shift 2 ;;
        --rt) rt_prio=$2; shift 2 ;;
        --out) out_dir=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "uring_proto: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done

die() { echo "uring_proto: $*" >&2; exit 1; }
[[ $rounds =~ ^[1-9][0-9]*$ && $rounds -le 20 ]] || die "--rounds must be 1..20"
[[ $duration =~ ^[1-9][0-9]*$ && $duration -le 600 ]] || die "--duration must be 1..600 seconds"
[[ $warmup =~ ^[0-9]+$ ]] || die "--warmup must be whole seconds"
[[ -z $rt_prio || ($rt_prio =~ ^[0-9]+$ && $rt_prio -ge 1 && $rt_prio -le 99) ]] || die "--rt must be 1..99"
rt=()
if [[ -n $rt_prio ]]; then rt=(chrt -f "$rt_prio"); fi
IFS=, read -r -a rate_list <<<"$rates"
IFS=, read -r -a order <<<"$tools"
for tool in "${order[@]}"; do
    case $tool in
        loader | loader-1ms | tokio-uring-sleep | tokio-uring-timeout | tokio-uring-spin) ;;
        *) die "unknown tool: $tool" ;;
    esac
done

echo "uring_proto: building the loader and the prototype"
(cd "$repo" && cargo build --release --quiet -p loader)
cargo build --release --quiet --locked --manifest-path "$here/uring-proto/Cargo.toml"
loader_bin=$repo/target/release/loader
proto_bin=$here/uring-proto/target/release/uring-proto

mkdir -p "$out_dir"
port=$("${harness[@]}" free-port)
url=http://127.0.0.1:$port/

target_pid=
cleanup() {
    if [[ -n $target_pid ]] && kill -0 "$target_pid" 2>/dev/null; then
        kill -TERM "$target_pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$target_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$target_pid" 2>/dev/null || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

${rt[@]+"${rt[@]}"} taskset -c "$target_cpu" "$loader_bin" target --listen "127.0.0.1:$port" >"$out_dir/target.log" 2>&1 &
target_pid=$!
for _ in $(seq 50); do
    if "${harness[@]}" check-target "$url" >/dev/null 2>&1; then break; fi
    kill -0 "$target_pid" 2>/dev/null || die "the target exited at start: $(tail -n 3 "$out_dir/target.log")"
    sleep 0.1
done
"${harness[@]}" check-target "$url" >/dev/null || die "the target does not answer on $url"

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: $(uname -r), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "loader: $("$loader_bin" --version)"
    echo "prototype: tokio-uring $(grep -A1 '^name = "tokio-uring"' "$here/uring-proto/Cargo.lock" | sed -n 's/version = "\(.*\)"/\1/p')"
    echo "rounds $rounds, duration ${duration}s, warm-up ${warmup}s, rates $rates, connections $connections"
    echo "load CPU $load_cpu, target CPU $target_cpu, scheduling ${rt_prio:+SCHED_FIFO }${rt_prio:-normal}, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$out_dir/host.txt"

results=$out_dir/results.tsv
echo "rate round tool sent ok errors waited lag_p50 lag_p99 lat_p50 lat_p99 cpu_s ok_all exit" >"$results"
limit=$((duration + warmup + 60))

# run_one ROUND RATE TOOL: one run, pinned, bounded, CPU measured, parsed, appended.
run_one() {
    local round=$1 rate=$2 tool=$3 code=0 cmd=()
    local log=$out_dir/$tool-$rate-$round
    case $tool in
        loader | loader-1ms)
            cmd=("$loader_bin" run --url "$url" --rate "$rate" --duration "${duration}s" --warmup "${warmup}s"
                --connections "$connections" --threads 1 --no-probes --plain --preflight 0s
                --no-emergency-stop --out "$log")
            if [[ $tool == loader-1ms ]]; then cmd+=(--wake-window 1ms); fi ;;
        tokio-uring-*)
            local pace=${tool#tokio-uring-}
            if [[ $pace == timeout ]]; then pace=uring-timeout; fi
            cmd=("$proto_bin" --addr "127.0.0.1:$port" --rate "$rate" --duration "$duration" --warmup "$warmup"
                --connections "$connections" --pace "$pace" --cpu "$load_cpu") ;;
    esac
    "${harness[@]}" rusage "$log.rusage" -- \
        timeout --foreground -k 5 "$limit" ${rt[@]+"${rt[@]}"} taskset -c "$load_cpu" "${cmd[@]}" >"$log.out" 2>"$log.err" || code=$?
    local parsed
    if ! parsed=$(python3 - "$tool" "$log" <<'EOF'
import json, sys
tool, log = sys.argv[1], sys.argv[2]
if tool.startswith("loader"):
    d = json.load(open(f"{log}/summary.json"))
    main = [p for p in d["phases"] if p["name"] == "main"][0]
    errors = sum(v for k, v in main["errors"].items())
    ok_all = sum(p["ok"] for p in d["phases"])
    f = (main["sent"], main["ok"], errors, main["waited_for_connection"], main["send_lag_ms"]["p50"],
         main["send_lag_ms"]["p99"], main["latency_ms"]["p50"], main["latency_ms"]["p99"], ok_all)
else:
    d = json.loads(open(f"{log}.out").read().strip().splitlines()[-1])
    f = (d["sent"], d["ok"], d["errors"] + d["unanswered"], d["waited_for_connection"], d["send_lag_ms"]["p50"],
         d["send_lag_ms"]["p99"], d["latency_ms"]["p50"], d["latency_ms"]["p99"], d["ok_all"])
print(*f)
EOF
    2>>"$log.err"); then
        echo "  $tool: no result (exit $code): $(tail -n 2 "$log.err" | tr '\n' ' ')"
        return 1
    fi
    local sent ok errors waited lag50 lag99 lat50 lat99 ok_all user sys cpu
    read -r sent ok errors waited lag50 lag99 lat50 lat99 ok_all <<<"$parsed"
    read -r user sys _ <"$log.rusage"
    cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.3f", u + s }')
    echo "$rate $round $tool $sent $ok $errors $waited $lag50 $lag99 $lat50 $lat99 $cpu $ok_all $code" >>"$results"
    printf '  %-20s sent %7d ok %7d err %3d waited %5d  lag p50/p99 %6.3f/%7.3f ms  latency p50/p99 %6.3f/%7.3f ms  CPU %6.3f s  %6.0f req/CPU-s  exit %s\n' \
        "$tool" "$sent" "$ok" "$errors" "$waited" "$lag50" "$lag99" "$lat50" "$lat99" "$cpu" \
        "$(awk -v n="$ok_all" -v c="$cpu" 'BEGIN { printf "%.0f", (c > 0) ? n / c : 0 }')" "$code"
}

n=${#order[@]}
for round in $(seq "$rounds"); do
    for rate in "${rate_list[@]}"; do
        echo "round $round/$rounds at $rate req/s (load average $(cut -d' ' -f1 /proc/loadavg))"
        for ((i = 0; i < n; i++)); do
            run_one "$round" "$rate" "${order[(i + round - 1) % n]}" || true
        done
    done
done

echo
python3 - "$results" "$tools" <<'EOF' | tee "$out_dir/results.md"
import statistics, sys
path, tools = sys.argv[1], sys.argv[2].split(",")
rows = [line.split() for line in open(path)]
head, rows = rows[0], [dict(zip(rows[0], r)) for r in rows[1:]]
rates = sorted({int(r["rate"]) for r in rows})
print("| tool | rate | CPU s | req/CPU-s (min–max) | send lag p50 ms | send lag p99 ms (min–max) | latency p50 ms | latency p99 ms | ok / errors | waited |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for rate in rates:
    for tool in tools:
        runs = [r for r in rows if int(r["rate"]) == rate and r["tool"] == tool]
        if not runs:
            continue
        per = [float(r["ok_all"]) / float(r["cpu_s"]) for r in runs if float(r["cpu_s"]) > 0]
        col = lambda k: [float(r[k]) for r in runs]
        med = lambda k: statistics.median(col(k))
        print(f"| {tool} | {rate:,} | {med('cpu_s'):.2f} | {statistics.median(per):,.0f} ({min(per):,.0f}–{max(per):,.0f}) "
              f"| {med('lag_p50'):.3f} | {med('lag_p99'):.3f} ({min(col('lag_p99')):.3f}–{max(col('lag_p99')):.3f}) "
              f"| {med('lat_p50'):.3f} | {med('lat_p99'):.3f} | {med('ok'):,.0f} / {med('errors'):,.0f} "
              f"| {med('waited'):,.0f} |")
print(f"\nMedians of {len({r['round'] for r in rows})} interleaved rounds; req/CPU-s = 2xx responses of the "
      "whole run (warm-up included) / user+sys CPU of the tool process; the rest is the measured phase.")
EOF
echo "uring_proto: runs in $out_dir"
