# One place for the commands README, CI and developers run.
#   make demo   set up .venv, build radixkv, run the serving demo (CPU is fine);
#               options go in ARGS, e.g. make demo ARGS="--device cuda"
#   make test   set up .venv, build radixkv, run the Python and Rust test suites
#   make wheel  build the wheel (with the kernel sources) into dist/
#   make wheel-smoke  build it, install it into a fresh venv, check it works there
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
PINS   := .ci/pins.txt
STAMP  := $(VENV)/.deps-stamp
ARGS   ?=

.PHONY: setup build demo test pytest cargo-test stubtest compile-kernels isa-report fuzz-smoke wheel wheel-smoke \
	mutants mutants-shard sglang-deps lint clean

# Dependencies change rarely: install them once per pins file.
$(STAMP): $(PINS)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -r $(PINS)
	touch $(STAMP)

setup: $(STAMP)

# SGLang 0.5.23 without its dependencies, plus what its cache modules import (about 75 MB of
# wheels): tests/test_sglang_plugin.py runs with it and skips without it.
SGLANG_REQS  := .ci/sglang-requirements.txt
SGLANG_STAMP := $(VENV)/.sglang-stamp
$(SGLANG_STAMP): $(STAMP) $(SGLANG_REQS)
	$(PIP) install -q --no-deps -r $(SGLANG_REQS)
	touch $(SGLANG_STAMP)

sglang-deps: $(SGLANG_STAMP)

# Build the Rust extension into the venv (editable: python/radixkv is imported in place).
build: $(STAMP)
	. $(VENV)/bin/activate && maturin develop --release -q

demo: build
	$(PY) -m radixkv demo $(ARGS)

pytest: build
	$(PY) -m pytest -q

stubtest: build
	$(PY) -m mypy.stubtest radixkv._core --allowlist python/radixkv/stubtest_allowlist.txt

cargo-test:
	cargo test --workspace -q

test: pytest cargo-test

compile-kernels: $(STAMP)
	. $(VENV)/bin/activate && bash hip/check_compile.sh

# AMD only: every kernel's VGPR/AGPR/SGPR/LDS/scratch/spills/waves per target (clang-19).
isa-report:
	python3 hip/isa_report.py --all

fuzz-smoke:
	bash fuzz/smoke.sh

wheel: $(STAMP)
	$(PY) -m maturin build --release -q --out dist

wheel-smoke: $(STAMP)
	bash .ci/wheel_smoke.sh

# Mutation testing of radixkv-core (cargo-mutants): the whole crate, in a scratch copy.
# Results in mutants.out/; misses not listed in .ci/mutants-accepted.txt fail it.
mutants:
	nice bash .ci/mutants.sh

# The bounded slice CI runs: one shard of MUTANTS_SHARDS, chosen from the commit.
mutants-shard:
	nice bash .ci/mutants.sh --ci

clean:
	rm -rf target fuzz/target dist $(VENV)
