#!/usr/bin/env bash
# Plants, one at a time, the faults issue 16 lists (and a few of their kind) into the Rust core,
# runs the tests that should catch each at CI's budget (PROPTEST_CASES unset = 256 cases), and
# restores the file. Every plant must make its test command fail; the script exits 1 if one
# passes. Usage: bash bench/lab/plant_faults.sh [name...]   (default: all). Needs a clean
# checkout of the files it touches (it restores them from a copy, not from git).
set -uo pipefail
cd "$(dirname "$0")/../.."
src=rust/radixkv-core/src

# name | file | python regex (one match, replaced once) | replacement | cargo test filter
plants=(
  "evict-everything|radix/tree.rs|self\.evict_each\(num_tokens, |self.evict_each(usize::MAX, |radix::"
  "evict-one-leaf-too-many|radix/tree.rs|while freed < num_tokens \{|while freed <= num_tokens {|radix::"
  "evict-newest-first|radix/lru.rs|self\.lru\.pop_first\(\)|self.lru.pop_last()|radix::"
  "alloc-evicts-everything|radix/cache.rs|self\.tree\.evict_each\(n - available, |self.tree.evict_each(usize::MAX, |radix::"
  "insert-does-not-tick|radix/tree.rs|        self\.clock \+= 1;\n        let now = self\.clock;\n        let mut at = w\.node;|        self.clock *= 1;\n        let now = self.clock;\n        let mut at = w.node;|radix::"
  "common-prefix-block-step|radix/tree.rs|i \+= BLOCK;|i *= BLOCK;|radix::"
  "move-lock-stops-late|radix/tree.rs|&& !on_path\.contains\(&stop\)|&& on_path.contains(&stop)|radix::"
  "check-ignores-lru|radix/check.rs|if leaves != self\.lru \{|if false && leaves != self.lru {|radix::check_tests"
  "check-ignores-lock-ref|radix/check.rs|if u64::from\(n\.lock_ref\) != |if false && u64::from(n.lock_ref) != |radix::check_tests"
  "pool-check-ignores-unlisted-pages|pool.rs|if is_listed != \(nfree == ps\) \{|if is_listed && nfree != ps {|pool::"
  "cow-never-happens|blocks/mod.rs|let cow = num_tokens > 0|let cow = false && num_tokens > 0|blocks::"
  "cow-not-reported|blocks/mod.rs|copy = Some\(\(\*last, new\)\);|copy = None; let _ = (*last, new);|blocks::"
)

# Planted failures must not leave proptest seeds behind.
seeds=rust/radixkv-core/proptest-regressions/radix/proptests.txt
cp "$seeds" "/tmp/plant.$$.seeds"

want=("$@")
failures=0
for spec in "${plants[@]}"; do
  IFS='|' read -r name file pattern repl filter <<<"$spec"
  if [[ ${#want[@]} -gt 0 && ! " ${want[*]} " =~ " $name " ]]; then continue; fi
  path="$src/$file"
  cp "$path" "/tmp/plant.$$.bak"
  if ! python3 - "$path" "$pattern" "$repl" <<'PY'
import re, sys
path, pat, repl = sys.argv[1:]
s = open(path).read()
new, n = re.subn(pat, lambda m: repl.replace("\\n", "\n"), s, count=1)
if n != 1:
    sys.exit(f"pattern not found in {path}: {pat}")
open(path, "w").write(new)
PY
  then
    echo "PLANT $name: could not apply"; failures=$((failures + 1)); continue
  fi
  start=$(date +%s)
  timeout 300 nice cargo test -p radixkv-core -q "$filter" >"/tmp/plant.$$.log" 2>&1
  rc=$?
  cp "/tmp/plant.$$.bak" "$path"
  cp "/tmp/plant.$$.seeds" "$seeds"
  secs=$(( $(date +%s) - start ))
  if [[ $rc -eq 0 ]]; then
    echo "PLANT $name: NOT caught (cargo test $filter passed, ${secs}s)"; failures=$((failures + 1))
  else
    why=$(grep -m1 -E "panicked at|^test .* FAILED|error\[" "/tmp/plant.$$.log" || echo "exit $rc")
    failed=$(grep -cE "^test .* FAILED|^    [a-z_:]+$" "/tmp/plant.$$.log")
    echo "PLANT $name: caught (exit $rc, ${secs}s; $failed failing tests; ${why:0:140})"
  fi
done
rm -f "/tmp/plant.$$.bak" "/tmp/plant.$$.log" "/tmp/plant.$$.seeds"
exit $(( failures > 0 ))
