# bench/fixed.sh — the fixed-rate mode of bench/run.sh (`--mode fixed`), sourced by it once
# nginx answers. It uses run.sh's variables (url, out_dir, rounds, duration, connections,
# rates, rate_list, enabled, tool_bin, tool_versions, loader_bin, loader_warmup, load_cpu,
# harness) and its clean-up trap, which stops nginx.
#
# Every enabled tool runs open loop at each rate, pinned to LOAD_CPU, CONNECTIONS connections,
# DURATION seconds. Rounds go over every rate, and within a round and a rate every tool runs
# once; the tool that goes first moves by one each round, so over as many rounds as tools each
# takes every place in the order. CPU time is measured as in the max-rate mode
# (bench/harness.py rusage).

echo "bench: fixed rates ${rates//,/, } req/s; every tool open loop at each rate, interleaved"
for line in "${tool_versions[@]}"; do echo "bench: $line"; done
{
    for line in "${tool_versions[@]}"; do echo "$line"; done
    if [[ -n ${enabled[loader]:-}${enabled[loader-probes]:-}${enabled[loader-window]:-}${enabled[loader-halt]:-} ]]; then echo "loader: $loader_bin — $(first_line "$loader_bin" --version)"; fi
} >"$out_dir/tools.txt"

order=()
for tool in wrk2 oha vegeta k6 loader-probes loader loader-window loader-halt; do
    if [[ -n ${enabled[$tool]:-} ]]; then order+=("$tool"); fi
done
((${#order[@]})) || die "no tool to run in --mode fixed"

# vegeta: one target, as `echo "GET URL" | vegeta attack` would read it.
vegeta_targets="$out_dir/vegeta-targets.txt"
printf 'GET %s\n' "$url" >"$vegeta_targets"

# k6: a constant-arrival-rate scenario. One VU holds one keep-alive connection, so
# preAllocatedVUs = maxVUs = CONNECTIONS gives the same 64 connections as the other tools;
# when all are busy, k6 drops the iteration (dropped_iterations) instead of opening more.
k6_script="$out_dir/k6-constant-arrival-rate.js"
cat >"$k6_script" <<'EOF'
// Written by bench/run.sh --mode fixed: k6 at a fixed arrival rate.
import http from 'k6/http';

export const options = {
  discardResponseBodies: true,
  summaryTrendStats: ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)', 'p(99)'],
  scenarios: {
    fixed: {
      executor: 'constant-arrival-rate',
      rate: Number(__ENV.RATE),
      timeUnit: '1s',
      duration: `${__ENV.DURATION}s`,
      preAllocatedVUs: Number(__ENV.VUS),
      maxVUs: Number(__ENV.VUS),
      gracefulStop: '5s',
    },
  },
};

export default function () {
  http.get(__ENV.URL);
}

export function handleSummary(data) {
  return { [__ENV.SUMMARY]: JSON.stringify(data) };
}
EOF

results="$out_dir/results.tsv"
echo "rate round tool achieved_rps answered cpu_s wall_s p50_ms p99_ms verdict send_lag_p99_ms dropped exit" >"$results"
limit=$((duration + loader_warmup + 60))

# run_fixed ROUND RATE TOOL: one run, pinned, bounded, CPU measured, parsed, appended.
run_fixed() {
    local round=$1 rate=$2 tool=$3
    local log="$out_dir/$tool-$rate-$round"
    local parse_path="$log.out" code=0 cmd=()
    case $tool in
        wrk2)
            cmd=("${tool_bin[wrk2]}" -t1 "-c$connections" "-d${duration}s" "-R$rate" --latency "$url") ;;
        oha)
            cmd=("${tool_bin[oha]}" -z "${duration}s" -c "$connections" -q "$rate" --latency-correction
                --no-tui --output-format json "$url") ;;
        vegeta)
            # CONNECTIONS workers, each one request at a time on its own keep-alive connection
            # (-max-connections caps them, -connections keeps them all in the idle pool), as
            # wrk2 and k6 run here: a request due while all are busy is sent late. Letting
            # workers grow past the connections instead (-max-workers unbounded, vegeta's
            # default) queues them in Go's connection pool: at 40,000 req/s here that gave
            # seconds of latency and a third of the rate. The attack alone is measured; its
            # results go to a file that `vegeta report` reads afterwards, outside the measurement.
            cmd=("${tool_bin[vegeta]}" attack "-targets=$vegeta_targets" "-rate=$rate/1s" "-duration=${duration}s"
                "-connections=$connections" "-max-connections=$connections"
                "-workers=$connections" "-max-workers=$connections" "-output=$log.bin") ;;
        k6)
            parse_path="$log.json"
            cmd=(env K6_NO_USAGE_REPORT=true K6_AUTO_EXTENSION_RESOLUTION=false
                "${tool_bin[k6]}" run --quiet --no-color --no-usage-report
                -e "URL=$url" -e "RATE=$rate" -e "DURATION=$duration" -e "VUS=$connections"
                -e "SUMMARY=$log.json" "$k6_script") ;;
        loader | loader-probes | loader-window | loader-halt)
            parse_path=$log
            cmd=("$loader_bin" run --url "$url" --rate "$rate" --duration "${duration}s"
                --warmup "${loader_warmup}s" --connections "$connections" --threads 1)
            if [[ $tool == loader ]]; then cmd+=(--no-probes); fi
            # wrk2 wakes about once a millisecond and sends what fell due: the same budget.
            if [[ $tool == loader-window ]]; then cmd+=(--wake-window 1ms); fi
            # Idle CPUs left free to halt, as every other tool finds the machine.
            if [[ $tool == loader-halt ]]; then cmd+=(--cpu-dma-latency off); fi
            cmd+=(--plain --preflight 0s --no-emergency-stop --out "$log") ;;
    esac
    "${harness[@]}" rusage "$log.rusage" -- \
        timeout --foreground -k 5 "$limit" taskset -c "$load_cpu" "${cmd[@]}" >"$log.out" 2>"$log.err" || code=$?
    if [[ $tool == vegeta && -f $log.bin ]]; then
        "${tool_bin[vegeta]}" report -type=json "$log.bin" >"$log.out" 2>>"$log.err" || true
        rm -f "$log.bin" # tens of MB per run at high rates; the report keeps what is used
    fi
    local user sys wall parsed
    read -r user sys wall _ <"$log.rusage"
    if ! parsed=$("${harness[@]}" fixed "$tool" "$parse_path" 2>>"$log.err"); then
        echo "  $tool: no result (exit $code): $(tail -n 2 "$log.err" | tr '\n' ' ')"
        return 1
    fi
    local achieved answered p50 p99 verdict lag dropped cpu per extra=
    read -r achieved answered p50 p99 verdict lag dropped <<<"$parsed"
    cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.3f", u + s }')
    per=$(awk -v n="$answered" -v c="$cpu" 'BEGIN { printf "%.0f", (c > 0) ? n / c : 0 }')
    echo "$rate $round $tool $achieved $answered $cpu $wall $p50 $p99 $verdict $lag $dropped $code" >>"$results"
    case $tool in
        loader*) extra="  verdict $verdict, send lag p99 $lag ms" ;;
        k6) extra="  dropped iterations $dropped" ;;
    esac
    printf '  %-13s %9.0f req/s  p50 %7s ms  p99 %8s ms  CPU %6.2f s  %8d req/CPU-s  exit %s%s\n' \
        "$tool" "$achieved" "$p50" "$p99" "$cpu" "$per" "$code" "$extra"
}

n=${#order[@]}
for round in $(seq "$rounds"); do
    for rate in "${rate_list[@]}"; do
        echo "round $round/$rounds at $rate req/s"
        for ((i = 0; i < n; i++)); do
            run_fixed "$round" "$rate" "${order[(i + round - 1) % n]}" || true
        done
    done
done

echo
"${harness[@]}" fixed-table "$results" | tee "$out_dir/results.md"
