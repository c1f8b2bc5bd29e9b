#!/usr/bin/env python3
"""Compile every kernel unit (hip/*.cu) for AMD targets down to ISA with Debian's clang-19 and
report what each kernel costs: VGPRs, AGPRs, SGPRs, static LDS, scratch, spills, and the
resulting waves per SIMD (the compiler's occupancy). No GPU and no ROCm install needed beyond
Debian's HIP headers (libamdhip64-dev).

usage: python3 hip/isa_report.py [--targets gfx906,gfx90a,gfx942,gfx1100] [--jobs N] [--all]
       [--keep DIR]
Exit status 1 if a unit fails to compile, or if a kernel spills to scratch (VGPR spills or any
private segment) or draws a "cannot meet waves-per-eu" warning on a gating target (gfx906,
gfx90a, gfx942: the parts the kernels run on; gfx1100 is reported only).

Flags mirror what Debian's hipcc passes to its clang (HIPCC_VERBOSE=1 shows them): the HIP headers
from /usr/include, early inlining of everything, no function calls. gfx1100 (RDNA3) is compiled in
wave64 mode (-mwavefrontsize64): the kernels assume 64-lane wavefronts on AMD (platform.h).
LDS is the static part only; the matrix-unit decode and extend kernels add dynamic shared memory
at launch, which the occupancy column does not include.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GATING = ("gfx906", "gfx90a", "gfx942")
DEFAULT_TARGETS = ("gfx906", "gfx90a", "gfx942", "gfx1100")
CLANG = os.environ.get("RADIXKV_CLANG", "clang++-19")
CXXFILT = shutil.which("llvm-cxxfilt-19") or shutil.which("c++filt")

FIELDS = {
    ".name": "name",
    ".vgpr_count": "vgpr",
    ".agpr_count": "agpr",
    ".sgpr_count": "sgpr",
    ".vgpr_spill_count": "vspill",
    ".sgpr_spill_count": "sspill",
    ".group_segment_fixed_size": "lds",
    ".private_segment_fixed_size": "scratch",
}


def compile_unit(target: str, unit: Path, out: Path) -> tuple[int, str]:
    cmd = [CLANG, "-x", "hip", f"--offload-arch={target}", "-nogpulib", "--offload-device-only", "-S",
           "-std=c++17", "-O3", "--rocm-path=/usr", "-isystem", "/usr/hsa/include",
           "-mllvm", "-amdgpu-early-inline-all=true", "-mllvm", "-amdgpu-function-calls=false",
           f"-I{HERE}", str(unit), "-o", str(out)]
    if target.startswith("gfx1"):
        cmd.insert(4, "-mwavefrontsize64")
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, r.stderr


def parse(asm: str) -> list[dict]:
    """Kernels of one .s: the amdhsa.kernels metadata, plus the occupancy comment per kernel."""
    occ = {}
    cur = None
    for line in asm.splitlines():
        m = re.match(r"^\s*\.amdhsa_kernel (\S+)", line)
        if m:
            cur = m.group(1)
        m = re.match(r"^\s*; Occupancy: (\d+)", line)
        if m and cur:
            occ[cur] = int(m.group(1))
    kernels, k = [], None
    meta = asm[asm.find("amdhsa.kernels:"):] if "amdhsa.kernels:" in asm else ""
    for line in meta.splitlines():
        m = re.match(r"^  - (\.[a-z_]+):\s*(\S*)", line)  # a kernel's first key starts its entry
        if m:
            k = {}
            kernels.append(k)
        else:
            m = re.match(r"^    (\.[a-z_]+):\s+(\S+)", line)  # the kernel's own keys (not its args')
        if m and k is not None and m.group(1) in FIELDS:
            key, val = m.groups()
            k[FIELDS[key]] = val if key == ".name" else int(val)
    for k in kernels:
        k.setdefault("agpr", 0)
        k["occ"] = occ.get(k.get("name", ""), 0)
    return [k for k in kernels if "name" in k]


def demangle(names: list[str]) -> dict[str, str]:
    if not CXXFILT or not names:
        return {n: n for n in names}
    out = subprocess.run([CXXFILT], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return {n: _short(d) for n, d in zip(names, out)}


def _short(d: str) -> str:
    d = d.replace("rk::", "").replace("(anonymous namespace)::", "").replace("decode_mma::", "")
    d = re.sub(r"\((?:const )?\w+Params\)$", "", d)
    d = d.replace("__hip_bfloat16_raw", "bf16").replace("unsigned short", "u16")
    return d


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", default=os.environ.get("RADIXKV_ISA_TARGETS", ",".join(DEFAULT_TARGETS)))
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("RADIXKV_CHECK_JOBS", os.cpu_count() or 2)))
    ap.add_argument("--all", action="store_true", help="print every kernel, not only the worst per family")
    ap.add_argument("--keep", help="keep the .s files in this directory")
    args = ap.parse_args()
    if not shutil.which(CLANG):
        print(f"isa_report: {CLANG} not found (apt-get install clang-19 lld-19)", file=sys.stderr)
        return 1
    targets = [t for t in args.targets.split(",") if t]
    units = sorted(HERE.glob("*.cu"))
    outdir = Path(args.keep or tempfile.mkdtemp())
    outdir.mkdir(parents=True, exist_ok=True)
    jobs = {}
    with cf.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        for t in targets:
            for u in units:
                s = outdir / f"{u.stem}.{t}.s"
                jobs[(t, u.name)] = (ex.submit(compile_unit, t, u, s), s)
    failed = False
    rows = []
    warn_lines = []
    for (t, u), (fut, s) in jobs.items():
        rc, err = fut.result()
        if rc != 0:
            failed = True
            print(f"FAIL  {t}  {u}\n" + "\n".join("    " + x for x in err.splitlines()[:30]))
            continue
        for line in err.splitlines():
            if "waves-per-eu" in line or "spill" in line.lower():
                warn_lines.append((t, u, line.strip()))
        for k in parse(s.read_text()):
            k["target"], k["unit"] = t, u
            rows.append(k)
    names = demangle(sorted({r["name"] for r in rows}))
    for r in rows:
        r["short"] = names.get(r["name"], r["name"])

    def bad(r):
        return r["vspill"] > 0 or r["scratch"] > 0

    hdr = f"{'target':8} {'VGPR':>5} {'AGPR':>5} {'SGPR':>5} {'LDS':>6} {'scratch':>7} {'vspill':>6} {'sspill':>6} {'waves':>5}  kernel"
    print(hdr)
    shown = rows if args.all else [r for r in rows if bad(r)] + _worst_per_family(rows)
    seen = set()
    for r in sorted(shown, key=lambda r: (r["target"], r["unit"], r["short"])):
        key = (r["target"], r["name"])
        if key in seen:
            continue
        seen.add(key)
        print(f"{r['target']:8} {r['vgpr']:5d} {r['agpr']:5d} {r['sgpr']:5d} {r['lds']:6d} {r['scratch']:7d} "
              f"{r['vspill']:6d} {r['sspill']:6d} {r['occ']:5d}  {r['short'][:150]}")
    print()
    print("summary (kernels with VGPR spills or scratch / kernels):")
    for t in targets:
        mine = [r for r in rows if r["target"] == t]
        n_bad = sum(bad(r) for r in mine)
        worst = max((r["vspill"] for r in mine), default=0)
        print(f"  {t:8} {n_bad:4d} / {len(mine):4d}   max VGPR spill {worst}, max scratch "
              f"{max((r['scratch'] for r in mine), default=0)} B, min waves/SIMD "
              f"{min((r['occ'] for r in mine), default=0)}")
    for t, u, line in warn_lines:
        print(f"warning  {t}  {u}: {line}")
    gate_bad = [r for r in rows if r["target"] in GATING and bad(r)]
    gate_warn = [w for w in warn_lines if w[0] in GATING]
    if failed or gate_bad or gate_warn:
        print(f"isa_report: FAILED ({'compile errors; ' if failed else ''}{len(gate_bad)} spilling kernels, "
              f"{len(gate_warn)} occupancy/spill warnings on {', '.join(GATING)})", file=sys.stderr)
        return 1
    print(f"isa_report: no spills on {', '.join(t for t in targets if t in GATING)}")
    return 0


def _worst_per_family(rows: list[dict]) -> list[dict]:
    """Per target and kernel template (name up to '<'), the instantiation with the most VGPRs."""
    best: dict[tuple, dict] = {}
    for r in rows:
        fam = (r["target"], r["short"].split("<")[0])
        if fam not in best or (r["vgpr"] + r["agpr"], r["vspill"]) > (best[fam]["vgpr"] + best[fam]["agpr"], best[fam]["vspill"]):
            best[fam] = r
    return list(best.values())


if __name__ == "__main__":
    sys.exit(main())
