"""FP8 KV cache benchmark (issue 13): radixkv's FP8 (e4m3) decode against its own bf16 decode and
FlashInfer's FP8-KV decode, and extend with FP8 KV against extend with bf16 KV, in one run.

Decode cells: the 12 B x L cells of bench/kernels.py (B in {1, 16, 64, 256}, L in {512, 4096,
32768}), Llama-3-8B attention (32 q heads, 8 KV heads, D = 128), bf16 q and output, page sizes 1
and 16, pages scattered at random over one pool. The bf16 and FP8 pools hold the same values (the
FP8 one written by ops.store_kv from the bf16 one, per-tensor scales). Timing as bench/kernels.py:
CUDA-graph replays after the clean L2 flush, CUDA events, median. Columns: FP8 µs, its bandwidth
counting FP8 bytes (B * L * 8 * 128 * 2 bytes) and that as a fraction of the read stream measured
in the same run, radixkv bf16 µs and the speed-up bf16 / FP8, FlashInfer FP8 µs (tensor-core
wrapper, as the FlashInfer anchor kit calls it (bench/README.md), per-tensor Python-float scales) and
FlashInfer / radixkv. Targets: >= 0.90 of the read stream on cells with >= 1 GB of FP8 KV;
geomean bf16 / FP8 >= 1.7 over the 12 cells; >= 1.3x FlashInfer FP8 on cells >= 1 GB.

Extend cells: bench/kernels_extend.py's grid (8 requests, P in {0, 1024, 4096}, E in {128, 512,
2048}), radixkv extend with an FP8 cache (ops.extend_attention with k_scale / v_scale) against the
same call on the bf16 cache; target: FP8 no slower on any cell.

Usage (GPU machine, FlashInfer optional, set up by bench/gpu_env.sh):
    PYTHONPATH=python python3 bench/kernels_fp8.py --out bench/results
    (or: python3 bench/kernels.py --fp8-only --out ...)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _gpu_timing import Timer, load_flashinfer  # noqa: E402

H_Q, H_KV, D = 32, 8, 128
BATCHES = (1, 16, 64, 256)
LENGTHS = (512, 4096, 32768)
FP8_BYTES_PER_TOKEN = H_KV * D * 2  # K and V, one byte each
E4M3 = torch.float8_e4m3fn


def reps_for(nbytes: int) -> int:
    return 30 if nbytes > (1 << 30) else 60 if nbytes > (32 << 20) else 100


class Pools:
    """bf16 K/V pools of `tokens` slots and their FP8 copies (ops.store_kv, per-tensor scales)."""

    def __init__(self, tokens: int, seed: int = 0):
        from radixkv import ops  # noqa: PLC0415

        gen = torch.Generator(device="cuda").manual_seed(seed)
        self.tokens = tokens
        self.k = torch.randn(tokens, H_KV, D, dtype=torch.bfloat16, device="cuda", generator=gen)
        self.v = torch.randn(tokens, H_KV, D, dtype=torch.bfloat16, device="cuda", generator=gen)
        self.k_scale = (self.k.float().abs().amax() / 448.0).reshape(())
        self.v_scale = (self.v.float().abs().amax() / 448.0).reshape(())
        self.k8 = torch.empty(tokens, 1, H_KV, D, dtype=torch.uint8, device="cuda").view(E4M3)
        self.v8 = torch.empty_like(self.k8)
        slots = torch.arange(tokens, dtype=torch.int32, device="cuda")
        step = 1 << 20
        for s in range(0, tokens, step):  # chunks: bounded temporaries
            e = min(tokens, s + step)
            ops.store_kv(self.k8[s:e], self.v8[s:e], self.k[s:e], self.v[s:e], slots[: e - s],
                         k_scale=self.k_scale, v_scale=self.v_scale)

    def view(self, page: int, fp8: bool) -> tuple[Any, Any]:
        shape = (self.tokens // page, page, H_KV, D)
        if fp8:
            return self.k8.view(shape), self.v8.view(shape)
        return self.k.view(shape), self.v.view(shape)

    def cell(self, batch: int, length: int, page: int, seed: int) -> dict[str, Any]:
        per_req = -(-length // page)
        gen = torch.Generator(device="cuda").manual_seed(seed)
        pages = torch.randperm(self.tokens // page, device="cuda", generator=gen)[: batch * per_req]
        last = (length - 1) % page + 1
        return {
            "q": torch.randn(batch, H_Q, D, dtype=torch.bfloat16, device="cuda", generator=gen),
            "kv_indptr": torch.arange(0, batch + 1, device="cuda", dtype=torch.int32) * per_req,
            "kv_indices": pages.to(torch.int32),
            "kv_lens": torch.full((batch,), length, dtype=torch.int32, device="cuda"),
            "kv_last_page_len": torch.full((batch,), last, dtype=torch.int32, device="cuda"),
        }


def radixkv_decode(k: Any, v: Any, c: dict[str, Any], scales: Optional[tuple[Any, Any]]
                   ) -> Callable[[], Any]:
    from radixkv import ops  # noqa: PLC0415

    out = torch.empty_like(c["q"])
    kw: dict[str, Any] = {} if scales is None else {"k_scale": scales[0], "v_scale": scales[1]}
    if hasattr(ops, "decode_slots"):  # the work plan, built before the timer captures a graph
        lens = c["kv_lens"].cpu().tolist()
        page = int(k.shape[1])
        h_q, h_kv = int(c["q"].shape[1]), int(k.shape[2])
        kw["plan"] = ops.decode_plan(lens, page, ops.decode_slots(h_q, h_kv), device="cuda")
    return lambda: ops.paged_decode(c["q"], k, v, c["kv_indptr"], c["kv_indices"], c["kv_lens"],
                                    out=out, **kw)


def flashinfer_fp8_decode(fi: Any, k: Any, v: Any, page: int, c: dict[str, Any], ws: Any,
                          ks: float, vs: float) -> Callable[[], Any]:
    w = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=True)
    w.plan(c["kv_indptr"], c["kv_indices"], c["kv_last_page_len"], H_Q, H_KV, D, page,
           pos_encoding_mode="NONE", q_data_type=torch.bfloat16, kv_data_type=E4M3)
    out = torch.empty_like(c["q"])
    return lambda: w.run(c["q"], (k, v), k_scale=ks, v_scale=vs, out=out)


def read_stream_tbps(timer: Timer, nbytes: int = 4 << 30) -> float:
    x = torch.randn(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    best = 0.0
    for fn in (lambda: torch.sum(x, dtype=torch.float32), lambda: torch.amax(x)):
        best = max(best, nbytes / (timer(fn, reps=20, use_graph=False) * 1e-6) / 1e12)
    try:
        from kernels import _triton_read  # noqa: PLC0415

        best = max(best, nbytes / (timer(_triton_read(x), reps=20, use_graph=False) * 1e-6) / 1e12)
    except Exception as exc:  # noqa: BLE001
        print(f"[fp8 bench] triton read stream unavailable: {exc}", file=sys.stderr)
    del x
    torch.cuda.empty_cache()
    return best


def run_fp8_decode(timer: Timer, read_tbps: float, page_sizes=(1, 16), batches=BATCHES,
                   lengths=LENGTHS) -> list[dict[str, Any]]:
    fi = load_flashinfer("fp8 bench")
    ws = torch.empty(1 << 30, dtype=torch.uint8, device="cuda") if fi else None
    pools = Pools(max(batches) * max(lengths) + 64 * 16)
    ks, vs = float(pools.k_scale), float(pools.v_scale)
    scales = (pools.k_scale, pools.v_scale)
    rows = []
    for page in page_sizes:
        k16, v16 = pools.view(page, False)
        k8, v8 = pools.view(page, True)
        for batch in batches:
            for length in lengths:
                c = pools.cell(batch, length, page, seed=batch * 100003 + length + page)
                nbytes = batch * length * FP8_BYTES_PER_TOKEN
                reps = reps_for(nbytes)
                fp8 = radixkv_decode(k8, v8, c, scales)
                bf16 = radixkv_decode(k16, v16, c, None)
                row: dict[str, Any] = {"page_size": page, "batch": batch, "kv_len": length,
                                       "fp8_kv_bytes": nbytes}
                mine, base = fp8().float(), bf16().float()
                row["rel_err_vs_bf16"] = float((mine - base).norm() / base.norm())
                sides = {"fp8": fp8, "bf16": bf16}
                if fi is not None:
                    try:
                        run = flashinfer_fp8_decode(fi, k8, v8, page, c, ws, ks, vs)
                        ref = run().float()
                        row["rel_err_vs_fi_fp8"] = float((mine - ref).norm() / ref.norm())
                        sides["fi_fp8"] = run
                    except Exception as exc:  # noqa: BLE001
                        row["fi_error"] = repr(exc)[:300]
                # In turns (bench/_gpu_timing.py), so every side meets the same clock drift.
                row.update({f"{n}_us": t for n, t in timer.interleaved(sides, reps).items()})
                row["speedup_vs_bf16"] = row["bf16_us"] / row["fp8_us"]
                row["fp8_tbps"] = nbytes / (row["fp8_us"] * 1e-6) / 1e12
                row["frac_read"] = row["fp8_tbps"] / read_tbps
                if "fi_fp8_us" in row:
                    row["vs_fi_fp8"] = row["fi_fp8_us"] / row["fp8_us"]
                rows.append(row)
                print(fmt_decode(row), flush=True)
                del c
    del pools
    torch.cuda.empty_cache()
    return rows


def fmt_decode(r: dict[str, Any]) -> str:
    fi = (f"FI fp8 {r['fi_fp8_us']:8.1f} us x{r['vs_fi_fp8']:.2f}" if "vs_fi_fp8" in r
          else f"FI - {r.get('fi_error', '')[:60]}")
    return (f"ps={r['page_size']:>2} B={r['batch']:>3} L={r['kv_len']:>5} | fp8 {r['fp8_us']:8.1f} us "
            f"{r['fp8_tbps']:.2f} TB/s ({r['frac_read']:.3f} read) | bf16 {r['bf16_us']:8.1f} us "
            f"x{r['speedup_vs_bf16']:.2f} | {fi} | err vs bf16 {r['rel_err_vs_bf16']:.1e}")


def run_fp8_extend(timer: Timer, page_sizes=(1, 16)) -> list[dict[str, Any]]:
    import kernels_extend as ke  # noqa: PLC0415
    from radixkv import ops  # noqa: PLC0415

    rows = []
    for ps in page_sizes:
        pool = ke.Pool(ps, max(ke.PREFIXES) + max(ke.EXTENDS))
        ks = (pool.k.float().abs().amax() / 448.0).reshape(())
        vs = (pool.v.float().abs().amax() / 448.0).reshape(())
        k8 = torch.empty(pool.k.shape, dtype=torch.uint8, device="cuda").view(E4M3)
        v8 = torch.empty_like(k8)
        flat = pool.k.shape[0] * ps
        slots = torch.arange(flat, dtype=torch.int32, device="cuda")
        ops.store_kv(k8.view(flat, 1, H_KV, D), v8.view(flat, 1, H_KV, D),
                     pool.k.view(flat, H_KV, D), pool.v.view(flat, H_KV, D), slots,
                     k_scale=ks, v_scale=vs)
        for prefix in ke.PREFIXES:
            for extend in ke.EXTENDS:
                c = pool.cell(prefix, extend, seed=prefix * 7 + extend + ps)
                out16, out8 = torch.empty_like(c["q"]), torch.empty_like(c["q"])
                args = (c["qo_indptr"], c["kv_indptr"], c["kv_indices"], c["kv_lens"])

                def bf16(out16=out16, c=c, args=args, extend=extend, prefix=prefix):
                    return ops.extend_attention(c["q"], pool.k, pool.v, *args, out=out16,
                                                max_q_len=extend, max_kv_len=prefix + extend)

                def fp8(out8=out8, c=c, args=args, extend=extend, prefix=prefix):
                    return ops.extend_attention(c["q"], k8, v8, *args, out=out8, max_q_len=extend,
                                                max_kv_len=prefix + extend, k_scale=ks, v_scale=vs)

                row = {"page_size": ps, "prefix": prefix, "extend": extend}
                row.update({f"{n}_us": t for n, t in timer.interleaved({"bf16": bf16, "fp8": fp8}, 30).items()})
                row["fp8_vs_bf16"] = row["bf16_us"] / row["fp8_us"]
                a, b = fp8().float(), bf16().float()
                row["rel_err_vs_bf16"] = float((a - b).norm() / b.norm())
                rows.append(row)
                print(f"[fp8 extend] ps={ps:>2} P={prefix:>5} E={extend:>5} | bf16 "
                      f"{row['bf16_us']:9.1f} us | fp8 {row['fp8_us']:9.1f} us "
                      f"x{row['fp8_vs_bf16']:.2f} | err vs bf16 {row['rel_err_vs_bf16']:.1e}",
                      flush=True)
        del pool, k8, v8
        torch.cuda.empty_cache()
    return rows


def summary(res: dict[str, Any]) -> list[str]:
    lines = []
    for page in sorted({r["page_size"] for r in res.get("decode", [])}):
        rs = [r for r in res["decode"] if r["page_size"] == page]
        gm = math.exp(sum(math.log(r["speedup_vs_bf16"]) for r in rs) / len(rs))
        big = [r for r in rs if r["fp8_kv_bytes"] >= 1e9]
        fr = min((r["frac_read"] for r in big), default=float("nan"))
        fis = [r["vs_fi_fp8"] for r in big if "vs_fi_fp8" in r]
        lines.append(
            f"fp8 decode page {page}: geomean x{gm:.2f} over radixkv bf16 ({len(rs)} cells; target "
            f"1.7); >=1 GB cells: min {fr:.3f} of read stream (target 0.90), min "
            + (f"x{min(fis):.2f}" if fis else "-") + " vs FlashInfer fp8 (target 1.3)")
    if res.get("extend"):
        worst = min(res["extend"], key=lambda r: r["fp8_vs_bf16"])
        lines.append(f"fp8 extend: worst bf16/fp8 x{worst['fp8_vs_bf16']:.2f} at ps={worst['page_size']} "
                     f"P={worst['prefix']} E={worst['extend']} (target >= 1.0 everywhere)")
    return lines


def run_fp8_bench(out_dir: Optional[Path], page_sizes=(1, 16), extend: bool = True,
                  decode: bool = True, batches=BATCHES, lengths=LENGTHS) -> dict[str, Any]:
    from radixkv.ops import loader  # noqa: PLC0415

    t0 = time.time()
    loader.load()
    print(f"[fp8 bench] extension ready in {time.time() - t0:.1f} s", flush=True)
    timer = Timer()
    res: dict[str, Any] = {
        "bench": "fp8_kv", "device": torch.cuda.get_device_name(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "shape": {"heads_q": H_Q, "heads_kv": H_KV, "head_dim": D, "q": "bf16", "kv": "e4m3"},
    }
    if decode:
        read = read_stream_tbps(timer)
        print(f"[fp8 bench] read stream {read:.2f} TB/s", flush=True)
        res["read_tbps"] = read
        res["decode"] = run_fp8_decode(timer, read, page_sizes, batches, lengths)
    if extend:
        try:
            res["extend"] = run_fp8_extend(timer, page_sizes)
        except Exception as exc:  # noqa: BLE001
            print(f"[fp8 bench] extend section failed: {exc!r}", file=sys.stderr)
    for line in summary(res):
        print(line)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        name = "fp8_kv.json" if decode else "fp8_extend.json"
        (out_dir / name).write_text(json.dumps(res, indent=1))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--page-sizes", default="1,16")
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)),
                    help="decode batch sizes (default: the 12-cell grid's)")
    ap.add_argument("--lengths", default=",".join(map(str, LENGTHS)),
                    help="decode KV lengths (default: the 12-cell grid's)")
    ap.add_argument("--no-extend", action="store_true")
    ap.add_argument("--no-decode", action="store_true",
                    help="extend cells only (written to fp8_extend.json)")
    args = ap.parse_args()
    res = run_fp8_bench(args.out, tuple(int(s) for s in args.page_sizes.split(",")),
                        extend=not args.no_extend, decode=not args.no_decode,
                        batches=tuple(int(s) for s in args.batches.split(",")),
                        lengths=tuple(int(s) for s in args.lengths.split(",")))
    if not args.no_extend and "extend" not in res:
        sys.exit(1)  # the extend section failed (printed above)


if __name__ == "__main__":
    os.environ.setdefault("RADIXKV_OPS_BACKEND", "extension")
    main()
