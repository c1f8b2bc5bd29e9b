"""Turn a ``StepPlan`` into one forward's inputs, sent to the device in ONE host-to-device copy.

The index arrays come from the Rust builders (``build_paged_extend_metadata`` for prefill chunks,
``build_decode_metadata`` for decodes), each of which fills one int32 buffer. Those buffers, the
token ids, the rows whose logits are sampled, their sampling parameters and the step's
copy-on-write page pairs are packed at 64-byte-aligned offsets into one pinned int32 staging
buffer, copied to the device at once, and used there as views (``narrow``). Decode-only steps
can instead be packed into a CUDA graph's fixed layout (``graphs.DecodeLayout``), so the same one
copy lands in the graph's static inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

import radixkv as rk
from radixkv.engine.memory import ceil_div
from radixkv.engine.sampling import key_words
from radixkv.engine.scheduler import StepPlan, Work
from radixkv.engine.seq import Seq
from radixkv.metadata import DecodeMetadata, ExtendMetadata

_ALIGN = 16  # int32 elements: 64 bytes


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


class Staging:
    """A reusable host int32 buffer (pinned on CUDA) and the copy of its prefix to the device.

    Reuse is safe because every step waits for its sampled tokens (a synchronising copy back)
    before the next step writes the buffer again."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pinned = device.type == "cuda"
        self.host = torch.zeros(0, dtype=torch.int32)
        self.copies = 0  # host-to-device copies issued (one per step on a GPU)
        self.sends = 0  # steps whose inputs went out (counted on the CPU too)

    def buffer(self, n: int) -> np.ndarray:
        if self.host.numel() < n:
            size = max(n, 2 * self.host.numel(), 1 << 16)
            self.host = torch.zeros(size, dtype=torch.int32, pin_memory=self.pinned)
        return self.host.numpy()

    def send(self, n: int, dest: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The first ``n`` elements on the device (into ``dest[:n]`` if given)."""
        src = self.host[:n]
        self.sends += 1
        if self.device.type == "cpu":
            if dest is None:
                return src.clone()
            dest[:n].copy_(src)
            return dest
        self.copies += 1
        if dest is None:
            return src.to(self.device, non_blocking=True)
        dest[:n].copy_(src, non_blocking=True)
        return dest


@dataclass
class SampleRows:
    """Sampling inputs of the rows whose logits are needed, in row order."""

    entries: list[tuple[Seq, int]]  # (sequence, branch); an n > 1 parent's last row is sampled n times
    rows: torch.Tensor  # int64 [M] rows of the token batch (eager steps)
    temps: torch.Tensor  # float32 [M]
    lo: torch.Tensor  # int64 [M]
    hi: torch.Tensor  # int64 [M]
    any_temperature: bool


@dataclass
class StepBatch:
    tokens: torch.Tensor  # int64 [N]
    positions: torch.Tensor  # int64 [N]
    extend: Optional[ExtendMetadata[torch.Tensor]]
    decode: Optional[DecodeMetadata[torch.Tensor]]
    num_extend_rows: int
    copies: Optional[torch.Tensor]  # int32 [k, 2] page pairs to copy before attention
    sample: SampleRows


def sample_entries(plan: StepPlan) -> list[tuple[Seq, int]]:
    """(sequence, branch) per sampled row, extends first: an unforked parent's final chunk is
    sampled once per branch (the branches' first tokens), everything else once."""
    out: list[tuple[Seq, int]] = []
    for w in plan.extends:
        if w.sample:
            if w.seq.branch is None:
                out.extend((w.seq, b) for b in range(w.seq.req.params.n))
            else:
                out.append((w.seq, w.seq.branch))
    out.extend((s, s.branch) for s in plan.decodes)  # type: ignore[misc]
    return out


def sample_params(entries: list[tuple[Seq, int]],
                  temps: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """float32 temperatures (``temps`` if given: the entries' own, in order) and the two int32
    words of each row's noise key."""
    if temps is None:
        temps = np.fromiter((s.temperature for s, _ in entries), np.float32, len(entries))
    any_t = bool(temps.any())
    if not any_t:  # greedy rows: the key words are never read
        zero = np.zeros(len(entries), np.int32)
        return temps, zero, zero, False
    lo = np.zeros(len(entries), np.int64)
    hi = np.zeros(len(entries), np.int64)
    if any_t:
        for i, (s, b) in enumerate(entries):
            if s.temperature > 0:
                lo[i], hi[i] = key_words(s.req.params.seed, b, len(s.group.outputs[b]))
    return temps, lo.astype(np.uint32).view(np.int32), hi.astype(np.uint32).view(np.int32), any_t


class _Packer:
    def __init__(self, out: np.ndarray) -> None:
        self.out = out
        self.at = 0

    def put(self, a: np.ndarray) -> tuple[int, int]:
        a = np.asarray(a).reshape(-1)
        if a.dtype != np.int32:
            a = a.view(np.int32) if a.dtype.itemsize == 4 else a.astype(np.int32)
        off = self.at
        self.out[off : off + a.size] = a
        self.at = _aligned(off + a.size)
        return off, int(a.size)


def _view(dev: torch.Tensor, span: tuple[int, int]) -> torch.Tensor:
    return dev.narrow(0, span[0], span[1])


def pages_of(w: Work, page_size: int) -> np.ndarray:
    return w.seq.pages[: ceil_div(w.end, page_size)]


def decode_metadata(decodes: list[Seq], page_size: int,
                    positions: Optional[np.ndarray] = None,
                    plan_slots: Optional[int] = None) -> DecodeMetadata[np.ndarray]:
    """Rust-built CSR metadata of a decode batch (each sequence's pages already cover its new
    position, so ``pages`` is exactly its page list). ``positions``: the int32 positions from
    ``decode_inputs``, if already built (the lengths are one more). ``plan_slots``: also build
    paged_decode's work plan (``decode_plan``) for that many concurrent units, in the same buffer."""
    lens = positions + 1 if positions is not None else [s.kv_len + 1 for s in decodes]
    return rk.build_decode_metadata([s.pages for s in decodes], lens, page_size, plan_slots=plan_slots)


def decode_inputs(decodes: list[Seq]) -> tuple[np.ndarray, np.ndarray]:
    """int32 token ids and positions of a decode batch."""
    n = len(decodes)
    pos = np.array([s.kv_len for s in decodes], np.int32).reshape(n)
    tok = np.array([s.tokens[s.kv_len] for s in decodes], np.int32).reshape(n)
    return tok, pos


def build_step(plan: StepPlan, copies: list[tuple[int, int]], page_size: int,
               staging: Staging, plan_slots: Optional[int] = None,
               extend_plan: Optional[tuple[int, int]] = None) -> StepBatch:
    """Eager step inputs: Rust metadata for each kind of work, packed and copied once.
    ``plan_slots``: see :func:`decode_metadata`. ``extend_plan``: ``(query heads per KV head,
    extend_attention's tile rows)``: the extend metadata then carries extend_attention's plan."""
    ext = dec = None
    if plan.extends:
        group, rows = extend_plan if extend_plan is not None else (None, None)
        ext = rk.build_paged_extend_metadata(
            [pages_of(w, page_size) for w in plan.extends], [w.end for w in plan.extends],
            [len(w.tokens) for w in plan.extends], page_size, plan_group=group, plan_tile_rows=rows)
    dec_tokens, dec_pos = decode_inputs(plan.decodes)
    if plan.decodes:
        dec = decode_metadata(plan.decodes, page_size, dec_pos, plan_slots)
    n_ext = ext.num_tokens if ext is not None else 0
    tokens = np.fromiter((t for w in plan.extends for t in w.tokens), np.int32, n_ext)
    entries = sample_entries(plan)
    rows = np.empty(len(entries), np.int32)
    if ext is not None:
        ends = ext.qo_indptr[1:] - 1
        index = {id(w.seq): i for i, w in enumerate(plan.extends)}
        k = len(entries) - len(plan.decodes)
        rows[:k] = [ends[index[id(s)]] for s, _ in entries[:k]]
    rows[len(entries) - len(plan.decodes) :] = n_ext + np.arange(len(plan.decodes))
    temps, lo, hi, any_t = sample_params(entries)
    total = (sum(_aligned(m.buffer.size) for m in (ext, dec) if m is not None)
             + 6 * _aligned(n_ext + len(plan.decodes) + len(entries)) + _aligned(2 * len(copies)) + 64)
    pk = _Packer(staging.buffer(total))
    spans: dict[str, Any] = {}
    if ext is not None:
        spans["ext"] = pk.put(ext.buffer)
    if dec is not None:
        spans["dec"] = pk.put(dec.buffer)
    spans["tok"] = pk.put(np.concatenate([tokens, dec_tokens]))
    spans["dpos"] = pk.put(dec_pos)
    spans["rows"] = pk.put(rows)
    spans["temps"] = pk.put(temps)
    spans["lo"] = pk.put(lo)
    spans["hi"] = pk.put(hi)
    spans["copies"] = pk.put(np.asarray(copies, np.int32).reshape(-1))
    dev = staging.send(pk.at)
    ext_d = ExtendMetadata(_view(dev, spans["ext"]), ext._layout, ext.scalars) if ext is not None else None
    dec_d = DecodeMetadata(_view(dev, spans["dec"]), dec._layout, dec.scalars) if dec is not None else None
    pos_parts = []
    if ext_d is not None:
        pos_parts.append(ext_d.positions)
    if dec is not None:
        pos_parts.append(_view(dev, spans["dpos"]))
    positions = torch.cat(pos_parts).long() if len(pos_parts) > 1 else pos_parts[0].long()
    to_u32 = 0xFFFFFFFF
    sample = SampleRows(
        entries=entries,
        rows=_view(dev, spans["rows"]).long(),
        temps=_view(dev, spans["temps"]).view(torch.float32),
        lo=_view(dev, spans["lo"]).long() & to_u32,
        hi=_view(dev, spans["hi"]).long() & to_u32,
        any_temperature=any_t,
    )
    return StepBatch(
        tokens=_view(dev, spans["tok"]).long(),
        positions=positions,
        extend=ext_d,
        decode=dec_d,
        num_extend_rows=n_ext,
        copies=_view(dev, spans["copies"]).view(-1, 2) if copies else None,
        sample=sample,
    )
