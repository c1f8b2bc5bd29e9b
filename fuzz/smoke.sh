#!/usr/bin/env bash
# Bounded fuzz smoke for CI: each cargo-fuzz target for FUZZ_SECONDS (default 60), failing on any
# crash. cargo-fuzz needs nightly-only sanitizer flags: use a nightly toolchain when rustup has
# one, else stable with RUSTC_BOOTSTRAP=1. The same op enums also run as proptest state machines
# in `cargo test`, which covers them on stable if this script cannot run at all.
set -euo pipefail
cd "$(dirname "$0")"
secs="${FUZZ_SECONDS:-60}"

if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "installing cargo-fuzz (once)"
  cargo install cargo-fuzz --locked -q
fi
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  fuzz=(cargo +nightly fuzz)
else
  export RUSTC_BOOTSTRAP=1
  fuzz=(cargo fuzz)
fi

for target in radix_ops blocks_ops; do
  echo "--- fuzz $target for ${secs}s"
  log=$(mktemp)
  if ! "${fuzz[@]}" run "$target" -- -max_total_time="$secs" -print_final_stats=1 >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz target $target FAILED"
    exit 1
  fi
  # libFuzzer's final stats: number of inputs executed (each input is a sequence of ops).
  grep -E 'stat::number_of_executed_units|Done [0-9]+ runs' "$log" | tail -n 2
  rm -f "$log"
done
echo "fuzz smoke passed"
