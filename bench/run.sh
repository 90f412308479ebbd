#!/usr/bin/env bash
# bench/run.sh — loader vs wrk vs oha against the same nginx, on this machine.
#
# nginx: its own prefix and config in the run directory (the system nginx is not touched),
# 1 worker pinned to TARGET_CPU, access_log off, `return 200 '{"ok":true}'`, 127.0.0.1 only.
# Each load tool is pinned to LOAD_CPU and runs DURATION seconds per round; rounds interleave
# the tools (wrk, oha, loader, then again) so drift hits them alike. Per tool: achieved req/s,
# requests per CPU-second of the tool process (user+sys of it and its threads, from
# getrusage(RUSAGE_CHILDREN) in bench/harness.py), p99, and loader/wrk of requests per CPU-s.
#
# The loader runs open loop at the rate wrk achieved in the same round (unless --rate is
# given), so both do the same work per second and their CPU cost compares directly.
# A tool that is missing is skipped with the reason. See docs/performance.md.
#
# --mode fixed: every open-loop tool (wrk2 -R, oha -q --latency-correction, vegeta, k6
# constant-arrival-rate, loader) at the same fixed rates (--rates 1000,10000,40000), the
# tools interleaved within each round and each rate. Per tool and rate: achieved rate,
# requests per CPU-second, p50/p99 as the tool reports them, and for loader runs the verdict
# and the send lag p99. The max-rate mode above stays the default.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: bench/run.sh [--mode max|fixed] [--rounds N] [--duration SECONDS] [--connections N]
                    [--rate RPS] [--rates R1,R2,...] [--warmup SECONDS] [--port PORT]
                    [--tools wrk,oha,loader] [--out DIR]

--mode max (the default): wrk and oha closed loop at their maximum rate, the loader open loop
at wrk's rate (or --rate). Tools: wrk, oha, loader (--no-probes), loader-probes (root only).
--mode fixed: every tool open loop at each of --rates. Tools: wrk2, oha, vegeta, k6,
loader-probes (root; without root loader stands in), loader (--no-probes, on request),
loader-window (probes and --wake-window 1ms: sends batched within wrk2's own 1 ms budget,
on request — the equal-lag comparison; its verdict flags the window's lag), loader-halt
(probes and --cpu-dma-latency off: idle CPUs free to halt, as the other tools find the
machine — on request).
--hold-cpu-latency: hold /dev/cpu_dma_latency at 0 µs for the whole bench (root), so every
tool runs with idle CPUs polling — the machine `loader run` sets up for itself by default.

Environment (flags win): MODE (max), ROUNDS (3), DURATION (10; 20 in fixed mode),
CONNECTIONS (64), LOADER_RATE (wrk's rate this round), RATES (1000,10000,40000),
LOADER_WARMUP (1), PORT (a free one), TOOLS (max: wrk,oha,loader,loader-probes; fixed:
wrk2,oha,vegeta,k6,loader-probes), OUT_DIR (out/bench/<time>), LOADER
(target/release/loader), LOAD_CPU (0), TARGET_CPU (1).
Fixed-mode tools (a missing one is skipped with the reason): WRK2 (wrk2's binary, which is
also called wrk; default: wrk2 on PATH), OHA (oha), VEGETA (vegeta), K6 (k6).
EOF
}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
harness=("python3" "$here/harness.py")

mode=${MODE:-max}
rounds=${ROUNDS:-3}
duration=${DURATION:-}
connections=${CONNECTIONS:-64}
loader_rate=${LOADER_RATE:-}
rates=${RATES:-1000,10000,40000}
loader_warmup=${LOADER_WARMUP:-1}
port=${PORT:-}
tools=${TOOLS:-}
out_dir=${OUT_DIR:-$repo/out/bench/$(date +%Y%m%d-%H%M%S)}
loader_bin=${LOADER:-$repo/target/release/loader}
load_cpu=${LOAD_CPU:-0}
target_cpu=${TARGET_CPU:-1}
hold_latency=${HOLD_CPU_LATENCY:-}

while (($#)); do
    case $1 in
        --mode) mode=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --duration) duration=${2%s}; shift 2 ;;
        --connections) connections=$2; shift 2 ;;
        --rate) loader_rate=$2; shift 2 ;;
        --rates) rates=$2; shift 2 ;;
        --warmup) loader_warmup=${2%s}; shift 2 ;;
        --port) port=$2; shift 2 ;;
        --tools) tools=$2; shift 2 ;;
        --out) out_dir=$2; shift 2 ;;
        --hold-cpu-latency) hold_latency=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "bench: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
done

die() { echo "bench: $*" >&2; exit 1; }
case $mode in
    max)
        [[ -n $duration ]] || duration=10
        [[ -n $tools ]] || tools=wrk,oha,loader,loader-probes ;;
    fixed)
        # wrk2 leaves its first ~10 s out of its latency figures (calibration), so fixed-rate
        # runs default to 20 s.
        [[ -n $duration ]] || duration=20
        [[ -n $tools ]] || tools=wrk2,oha,vegeta,k6,loader-probes
        [[ -z $loader_rate ]] || die "--rate is for --mode max; in --mode fixed give --rates"
        [[ $rates =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--rates must be whole numbers separated by commas, got '$rates'"
        IFS=, read -r -a rate_list <<<"$rates"
        for i in "${!rate_list[@]}"; do
            rate_list[i]=$((10#${rate_list[i]}))
            ((rate_list[i] >= 1)) || die "every rate must be >= 1, got '$rates'"
        done ;;
    *) die "--mode must be max or fixed, got '$mode'" ;;
esac
for n in "$rounds" "$duration" "$connections" "$loader_warmup" "$load_cpu" "$target_cpu"; do
    [[ $n =~ ^[0-9]+$ ]] || die "expected a whole number, got '$n'"
done
((rounds >= 1 && duration >= 1 && connections >= 1)) || die "rounds, duration and connections must be >= 1"
[[ -z $loader_rate || $loader_rate =~ ^[0-9]+([.][0-9]+)?$ ]] || die "--rate must be a number, got '$loader_rate'"
command -v python3 >/dev/null || die "python3 is required (measuring and parsing)"
command -v taskset >/dev/null || die "taskset is required (package util-linux)"
command -v timeout >/dev/null || die "timeout is required (package coreutils)"
cpus=$(nproc --all)
((load_cpu < cpus && target_cpu < cpus && load_cpu != target_cpu)) ||
    die "need two distinct CPUs: LOAD_CPU=$load_cpu TARGET_CPU=$target_cpu, this machine has $cpus"

# --- which tools run -------------------------------------------------------------------
declare -A enabled=()
declare -A tool_bin=() # fixed mode: the binary of each tool
tool_versions=()       # fixed mode: "tool: path (version)", written to the run directory
IFS=, read -r -a wanted <<<"$tools"

# find_tool NAME VAR HINT: the path of NAME's binary — $VAR if set, else NAME on PATH — or a
# "skip:" line saying why there is none (HINT: where to get it) and status 1.
find_tool() {
    local name=$1 var=$2 hint=$3
    local from_env=${!var:-}
    if [[ -n $from_env ]]; then
        command -v "$from_env" 2>/dev/null && return
        echo "skip: $name — $var=$from_env is not an executable"
    else
        command -v "$name" 2>/dev/null && return
        echo "skip: $name — not found: $hint"
    fi
    return 1
}

# first_line CMD...: the first line CMD prints (stdout or stderr), whatever its exit status.
first_line() {
    local text
    text=$("$@" 2>&1 || true)
    echo "${text%%$'\n'*}"
}

# Fixed mode: check each tool can run open loop at a given rate; skip it with the reason.
enable_fixed() {
    local tool=$1 bin version help
    case $tool in
        wrk2)
            bin=$(find_tool wrk2 WRK2 "set WRK2=/path/to/wrk2's wrk binary or put wrk2 on PATH (wrk2 is not packaged by Debian; docs/performance.md)") || { echo "$bin"; return; }
            # wrk2's binary is called wrk too; only wrk2 has -R/--rate (plain wrk 4.x has not).
            help=$("$bin" 2>&1 || true)
            if [[ $help != *"-R, --rate"* ]]; then
                echo "skip: wrk2 — $bin has no -R/--rate option: it is a plain wrk, not wrk2"
                return
            fi
            version="wrk2 ($(first_line "$bin" -v | sed 's/ Copyright.*//'))" ;;
        oha)
            bin=$(find_tool oha OHA "cargo xtask setup --bench installs it") || { echo "$bin"; return; }
            help=$("$bin" --help 2>&1 || true)
            if [[ $help != *--latency-correction* ]]; then
                echo "skip: oha — $bin has no --latency-correction option (too old)"
                return
            fi
            version=$(first_line "$bin" --version) ;;
        vegeta)
            bin=$(find_tool vegeta VEGETA "set VEGETA=/path/to/vegeta or put it on PATH (Debian 12 has no vegeta package; docs/performance.md)") || { echo "$bin"; return; }
            version=$("$bin" -version 2>&1 || true)
            version="vegeta $(sed -n 's/^Version: //p' <<<"$version") ($(sed -n 's/^Runtime: //p' <<<"$version"))" ;;
        k6)
            bin=$(find_tool k6 K6 "set K6=/path/to/k6 or put it on PATH (Debian 12 has no k6 package; docs/performance.md)") || { echo "$bin"; return; }
            version=$(first_line "$bin" version) ;;
        *) return 1 ;;
    esac
    enabled[$tool]=1
    tool_bin[$tool]=$bin
    tool_versions+=("$tool: $bin — $version")
}

for tool in "${wanted[@]}"; do
    if [[ $mode == fixed ]]; then
        case $tool in
            wrk2 | oha | vegeta | k6) enable_fixed "$tool"; continue ;;
            loader | loader-probes | loader-window | loader-halt) ;;
            wrk) die "wrk is closed loop, it has no rate to fix: --mode fixed runs wrk2, its open-loop fork" ;;
            *) die "unknown tool '$tool' for --mode fixed (known: wrk2, oha, vegeta, k6, loader, loader-probes, loader-window, loader-halt)" ;;
        esac
    fi
    case $tool in
        wrk | oha)
            if command -v "$tool" >/dev/null; then enabled[$tool]=1
            else echo "skip: $tool — not installed (cargo xtask setup --bench installs it)"; fi ;;
        loader)
            if [[ -x $loader_bin ]]; then enabled[loader]=1
            else echo "skip: loader — $loader_bin not found (cargo build --release -p loader)"; fi ;;
        loader-probes | loader-window | loader-halt)
            if [[ ! -x $loader_bin ]]; then echo "skip: $tool — $loader_bin not found"
            elif ((EUID != 0)); then echo "skip: $tool — loading eBPF probes needs root"
            else enabled[$tool]=1; fi ;;
        wrk2 | vegeta | k6) die "$tool runs only in --mode fixed (bench/run.sh --mode fixed --tools $tool)" ;;
        *) die "unknown tool '$tool' (known: wrk, oha, loader, loader-probes; --mode fixed: wrk2, oha, vegeta, k6)" ;;
    esac
done
# Fixed mode runs the loader with its probes; without root they cannot load, so the loader
# without probes stands in (unless it was asked for as well).
if [[ $mode == fixed && -z ${enabled[loader-probes]:-} && -z ${enabled[loader]:-} && -x $loader_bin ]] &&
    [[ ,$tools, == *,loader-probes,* ]]; then
    echo "bench: loader runs with --no-probes instead"
    enabled[loader]=1
fi
((${#enabled[@]})) || die "no tool to run"

# --- nginx: own prefix, 1 worker on TARGET_CPU ------------------------------------------
nginx_bin=$(command -v nginx || true)
[[ -z $nginx_bin && -x /usr/sbin/nginx ]] && nginx_bin=/usr/sbin/nginx
[[ -n $nginx_bin ]] || die "nginx is required (cargo xtask setup installs nginx-light)"
[[ -n $port ]] || port=$("${harness[@]}" free-port)
url="http://127.0.0.1:$port/"

mkdir -p "$out_dir"
out_dir=$(cd "$out_dir" && pwd)
nginx_dir="$out_dir/nginx"
mkdir -p "$nginx_dir/tmp"
mask="1$(printf '%*s' "$target_cpu" '' | tr ' ' 0)"
cat >"$nginx_dir/nginx.conf" <<EOF
worker_processes 1;
worker_cpu_affinity $mask;
daemon off;
pid $nginx_dir/nginx.pid;
error_log $nginx_dir/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    # Keep-alive for the whole run: nginx's default closes a connection every 1000 requests.
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    client_body_temp_path $nginx_dir/tmp/body;
    proxy_temp_path $nginx_dir/tmp/proxy;
    fastcgi_temp_path $nginx_dir/tmp/fastcgi;
    uwsgi_temp_path $nginx_dir/tmp/uwsgi;
    scgi_temp_path $nginx_dir/tmp/scgi;
    server {
        listen 127.0.0.1:$port;
        location / {
            default_type application/json;
            return 200 '{"ok":true}';
        }
    }
}
EOF

nginx_pid=
hold_pid=
cleanup() {
    if [[ -n $hold_pid ]]; then kill -TERM "$hold_pid" 2>/dev/null || true; wait "$hold_pid" 2>/dev/null || true; fi
    if [[ -n $nginx_pid ]] && kill -0 "$nginx_pid" 2>/dev/null; then
        kill -TERM "$nginx_pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$nginx_pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$nginx_pid" 2>/dev/null; then
            pkill -KILL -P "$nginx_pid" 2>/dev/null || true # its worker
            kill -KILL "$nginx_pid" 2>/dev/null || true
        fi
        wait "$nginx_pid" 2>/dev/null || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

taskset -c "$target_cpu" "$nginx_bin" -p "$nginx_dir" -c "$nginx_dir/nginx.conf" -e "$nginx_dir/error.log" &
nginx_pid=$!
for _ in $(seq 50); do
    "${harness[@]}" check-target "$url" >/dev/null 2>&1 && break
    kill -0 "$nginx_pid" 2>/dev/null || die "nginx exited at start: $(tail -n 3 "$nginx_dir/error.log" 2>/dev/null)"
    sleep 0.1
done
answer=$("${harness[@]}" check-target "$url") || die "nginx does not answer on $url"

# How idle CPUs sleep sets what every tool's wake-ups cost (docs/performance.md): say it.
cpuidle=$(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || true)
if [[ -n $hold_latency ]]; then
    ((EUID == 0)) || die "--hold-cpu-latency needs root (/dev/cpu_dma_latency)"
    "${harness[@]}" hold-cpu-latency >"$out_dir/hold-cpu-latency.out" 2>&1 &
    hold_pid=$!
    for _ in $(seq 50); do grep -q held "$out_dir/hold-cpu-latency.out" 2>/dev/null && break; sleep 0.1; done
    grep -q held "$out_dir/hold-cpu-latency.out" || die "cannot hold /dev/cpu_dma_latency: $(cat "$out_dir/hold-cpu-latency.out")"
    if [[ ${cpuidle:-none} == none ]]; then
        echo "bench: /dev/cpu_dma_latency held at 0 µs for every tool — no cpuidle driver reads it here: idle CPUs still halt"
    else
        echo "bench: /dev/cpu_dma_latency held at 0 µs for every tool (idle CPUs poll)"
    fi
fi
echo "bench: target $url — nginx ($("$nginx_bin" -v 2>&1 | sed 's/.*: //'), 1 worker on CPU $target_cpu) answers: $answer"
echo "bench: load average before start: $(cut -d' ' -f1-3 /proc/loadavg) (other work on CPU $load_cpu or $target_cpu skews every figure)"
echo "bench: host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs, cpuidle driver ${cpuidle:-none}"
echo "bench: tools on CPU $load_cpu; $rounds round(s) of ${duration}s per tool, $connections connections; raw output in $out_dir"
if [[ $mode == fixed ]]; then
    # shellcheck source=bench/fixed.sh
    source "$here/fixed.sh"
    exit 0
fi
if [[ -n $loader_rate ]]; then
    echo "bench: loader runs open loop at a fixed $loader_rate req/s (--rate)"
else
    echo "bench: loader runs open loop at the rate wrk achieved in the same round, so both do the same work per second"
fi

results="$out_dir/results.tsv"
echo "round tool rps p99_ms requests cpu_s wall_s exit" >"$results"
limit=$((duration + loader_warmup + 60))

# run_tool ROUND TOOL PARSER PARSE_ARG -- CMD...: pinned, bounded, CPU measured, parsed.
run_tool() {
    local round=$1 tool=$2 parse_arg=$3
    shift 4
    local log="$out_dir/$tool-$round"
    local code=0 parsed user sys wall
    "${harness[@]}" rusage "$log.rusage" -- \
        timeout --foreground -k 5 "$limit" taskset -c "$load_cpu" "$@" >"$log.out" 2>"$log.err" || code=$?
    read -r user sys wall _ <"$log.rusage"
    if ! parsed=$("${harness[@]}" "$tool" "$parse_arg" 2>>"$log.err"); then
        echo "  $tool: no result (exit $code): $(tail -n 2 "$log.err" | tr '\n' ' ')"
        return 1
    fi
    local rps p99 requests cpu
    read -r rps p99 requests <<<"$parsed"
    cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.3f", u + s }')
    echo "$round $tool $rps $p99 $requests $cpu $wall $code" >>"$results"
    printf '  %-6s %10.0f req/s  p99 %8.2f ms  %9d requests  CPU %6.2f s (user %s, sys %s)  exit %s\n' \
        "$tool" "$rps" "$p99" "$requests" "$cpu" "$user" "$sys" "$code"
    last_rps=$rps
}

for round in $(seq "$rounds"); do
    echo "round $round/$rounds"
    round_rate=$loader_rate
    last_rps=
    if [[ -n ${enabled[wrk]:-} ]]; then
        if run_tool "$round" wrk "$out_dir/wrk-$round.out" -- \
            wrk -t1 "-c$connections" "-d${duration}s" --latency "$url"; then
            [[ -n $round_rate ]] || round_rate=$last_rps
        fi
    fi
    if [[ -n ${enabled[oha]:-} ]]; then
        run_tool "$round" oha "$out_dir/oha-$round.out" -- \
            oha -z "${duration}s" -c "$connections" --no-tui --output-format json "$url" || true
    fi
    if [[ -n ${enabled[loader]:-} ]]; then
        if [[ -z $round_rate ]]; then
            echo "  loader: skipped this round — no wrk result to take the rate from (give --rate)"
        else
            round_rate=$(printf '%.0f' "$round_rate")
            echo "  loader at $round_rate req/s (open loop)"
            run_tool "$round" loader "$out_dir/loader-$round" -- \
                "$loader_bin" run --url "$url" --rate "$round_rate" --duration "${duration}s" \
                --warmup "${loader_warmup}s" --connections "$connections" --threads 1 \
                --no-probes --plain --preflight 0s --no-emergency-stop --out "$out_dir/loader-$round" || true
        fi
    fi
    # The same run with every eBPF probe attached: what the probes cost.
    if [[ -n ${enabled[loader-probes]:-} && -n $round_rate ]]; then
        round_rate=$(printf '%.0f' "$round_rate")
        run_tool "$round" loader-probes "$out_dir/loader-probes-$round" -- \
            "$loader_bin" run --url "$url" --rate "$round_rate" --duration "${duration}s" \
            --warmup "${loader_warmup}s" --connections "$connections" --threads 1 \
            --plain --preflight 0s --no-emergency-stop --out "$out_dir/loader-probes-$round" || true
    fi
done

echo
"${harness[@]}" table "$results" | tee "$out_dir/results.md"
