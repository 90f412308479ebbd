#!/usr/bin/env bash
# The soak for an hour (or SECONDS_TO_SOAK seconds): tests/soak.rs at 5,000 req/s with probes
# against the built-in target, sampling memory, descriptors, the probes' map entries and the
# files the run appends; prints every sample and the growth per hour. CI runs it for 5 minutes.
# As root: sudo bash bench/soak.sh [SECONDS]   (output also in target/tmp/soak.txt)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-3600}"
mkdir -p target/tmp
LOADER_SOAK_S="$seconds" cargo test --release -p loader-tests --test soak -- --nocapture 2>&1 | tee target/tmp/soak.txt
