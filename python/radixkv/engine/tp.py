"""Tensor parallelism for the engine: one scheduler and radix cache (rank 0), N model shards.

``TensorParallel(factory, world)`` starts ranks 1..N-1 as processes (``torch.multiprocessing``,
spawn), joins them in a ``torch.distributed`` process group (gloo on the CPU, NCCL on GPUs, with
``NCCL_NVLS_ENABLE=0``), and hands rank 0's shard to an ``Engine`` (``TensorParallel.engine``).
Every rank builds the full model with ``factory(device)`` and keeps its shard
(``parallel_model``); each rank's KV pool has the same pages, holding that rank's KV heads.

Per step, rank 0 broadcasts ONE int32 message: a header (what follows, the metadata layouts and
scalars) then the step's extend and decode metadata buffers, token ids, positions and the
copy-on-write page pairs. Every rank applies the copies to its own pool and runs the same forward;
the shards' all-reduces keep them in lock step. Eviction and preemption only change which slots
rank 0's metadata names, so every pool sees them identically. Only rank 0 computes logits.

Failure: rank 0 checks the worker processes before each step and turns any failed collective into
``TensorParallelError`` naming the dead rank (exit code and, if it raised, its error); the process
group's timeout bounds every collective, so nothing waits forever. Between steps, rank 0 sends a
heartbeat message every ``timeout_s / 3`` from a thread, so idle workers do not time out; a worker
whose collective fails (rank 0 gone) exits.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import traceback
from dataclasses import replace
from datetime import timedelta
from types import ModuleType
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import radixkv as rk
from radixkv.engine.engine import Engine, EngineConfig
from radixkv.engine.kv import KVPool, StepAttention, select_ops
from radixkv.engine.model import LlamaModel
from radixkv.engine.parallel_model import TPLlama, shard_plan
from radixkv.metadata import DecodeMetadata, ExtendMetadata

# factory(device) -> the full model on that device; must be picklable (a module-level function or
# a functools.partial of one) because the worker processes are spawned.
ModelFactory = Callable[[torch.device], LlamaModel]

_HDR = 96  # int32 header words
_STEP, _GROW, _POOL, _STOP, _BEAT = 1, 2, 3, 4, 5
_MIN_CAP = 4096
# _POOL's third word: the KV pool's element type (0: the model's dtype).
_KV_DTYPE_CODES: list[Optional[torch.dtype]] = [None, torch.float8_e4m3fn, torch.float8_e5m2]


class TensorParallelError(rk.RadixKVError, RuntimeError):
    """A tensor-parallel rank died or a collective failed or timed out; ``rank`` names the rank
    (None when no single rank is to blame). The session is unusable afterwards."""

    def __init__(self, message: str, rank: Optional[int] = None) -> None:
        super().__init__(message)
        self.rank = rank


def _stuck_rank(progress: Sequence[int]) -> Optional[int]:
    """The rank to blame for a failed collective, all ranks alive, ``progress[r]`` the collectives
    rank r finished: the one with the fewest (the lowest rank on a tie) among the ranks not ahead
    of rank 0, or None. One behind rank 0 is stuck in a collective; one level with it stopped
    between collectives and never finished the one that just failed on rank 0."""
    mine = progress[0]
    behind = [(d, r) for r, d in enumerate(progress) if r > 0 and d <= mine]
    return min(behind)[1] if behind else None


def _templates() -> tuple[list[str], list[str], list[str], list[str]]:
    """Field and scalar names of the two metadata kinds, in the order the header carries them."""
    one = np.zeros(1, np.int32)
    e = rk.build_paged_extend_metadata([one], [1], [1], 1)
    d = rk.build_decode_metadata([one], [1], 1)
    return ([n for n, _, _ in e._layout], sorted(e.scalars), [n for n, _, _ in d._layout],
            sorted(d.scalars))


_EXT_F, _EXT_S, _DEC_F, _DEC_S = _templates()
_EXT_AT = 16
_DEC_AT = _EXT_AT + 2 * len(_EXT_F) + len(_EXT_S)
assert _DEC_AT + 2 * len(_DEC_F) + len(_DEC_S) <= _HDR


def _put_meta(hdr: np.ndarray, at: int, meta: Any, fields: list[str], scalars: list[str]) -> None:
    lay = {n: (off, shape) for n, off, shape in meta._layout}
    for i, name in enumerate(fields):
        off, shape = lay[name]
        if len(shape) != 1:
            raise TensorParallelError(f"metadata field {name} has shape {shape}; only 1-D travels")
        hdr[at + 2 * i], hdr[at + 2 * i + 1] = off, shape[0]
    at += 2 * len(fields)
    for i, name in enumerate(scalars):
        hdr[at + i] = meta.scalars[name]


def _get_meta(cls: type, buf: torch.Tensor, hdr: list[int], at: int, fields: list[str],
              scalars: list[str]) -> Any:
    layout = [(n, hdr[at + 2 * i], (hdr[at + 2 * i + 1],)) for i, n in enumerate(fields)]
    at += 2 * len(fields)
    return cls(buf, layout, {n: hdr[at + i] for i, n in enumerate(scalars)})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_device(device: torch.device, rank: int) -> torch.device:
    if device.type == "cuda":
        return torch.device("cuda", (device.index or 0) + rank)
    return device


def _init_group(backend: str, init: str, rank: int, world: int, timeout_s: float) -> None:
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # the H200 hosts' notes: NVLink multicast off
    kw: dict[str, Any] = {}
    if backend == "nccl":
        kw["device_id"] = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout_s), **kw)


# ----------------------------------------------------------------------------- worker ranks


def _worker(rank: int, world: int, init: str, backend: str, device: torch.device,
            factory: ModelFactory, timeout_s: float, threads: int, errors: Any,
            progress: Any) -> None:
    """A rank > 0: build the shard, then run what rank 0's messages say until STOP."""
    try:
        if threads > 0:
            torch.set_num_threads(threads)
        dev = _rank_device(device, rank)
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        full = factory(dev)
        model = TPLlama.from_model(full, rank, world)
        del full
        errors.put(("ready", rank, ""))  # built: rank 0 joins the group now, so joining is quick
        _init_group(backend, init, rank, world, timeout_s)
        ops = select_ops(dev)
        msg = torch.zeros(_MIN_CAP, dtype=torch.int32, device=dev)
        pool: Optional[KVPool] = None
        dist.barrier()
        model.progress = _counter(progress, rank)
        with torch.inference_mode():
            while True:
                dist.broadcast(msg, 0)
                model.progress()
                hdr = msg[:_HDR].tolist()
                cmd = hdr[0]
                if cmd == _STOP:
                    break
                if cmd == _BEAT:
                    continue
                if cmd == _GROW:
                    msg = torch.zeros(hdr[1], dtype=torch.int32, device=dev)
                elif cmd == _POOL:
                    pool = None  # free the old pool first
                    kv_dtype = _KV_DTYPE_CODES[hdr[3]] or model.dtype
                    pool = KVPool(model.config, hdr[1], hdr[2], dev, kv_dtype, model.kv_scales)
                elif cmd == _STEP:
                    assert pool is not None, "a step before the pool"
                    _worker_step(model, pool, ops, msg, hdr)
                else:
                    raise TensorParallelError(f"unknown command {cmd}")
        dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001 - report anything, then exit non-zero
        text = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}"
        try:
            errors.put(("error", rank, text))
        except Exception:  # noqa: BLE001
            pass
        sys.stderr.write(f"radixkv tensor-parallel rank {rank}: {text}\n")
        sys.stderr.flush()
        os._exit(1)


def _counter(progress: Any, rank: int) -> Callable[[], None]:
    """Counts this rank's finished collectives in shared memory (``progress[rank]``): after a
    timeout, a live rank that finished fewer than rank 0 is the one that is stuck. (Host-side
    counts: exact for gloo; NCCL calls return before they finish.)"""

    def bump() -> None:
        progress[rank] += 1

    return bump


def _worker_step(model: TPLlama, pool: KVPool, ops: ModuleType, msg: torch.Tensor,
                 hdr: list[int]) -> None:
    n, split, n_ext, n_dec, n_cp = hdr[2], hdr[3], hdr[4], hdr[5], hdr[6]
    at = _HDR
    ext = dec = None
    if n_ext:
        ext = _get_meta(ExtendMetadata, msg.narrow(0, at, n_ext), hdr, _EXT_AT, _EXT_F, _EXT_S)
        at += n_ext
    if n_dec:
        dec = _get_meta(DecodeMetadata, msg.narrow(0, at, n_dec), hdr, _DEC_AT, _DEC_F, _DEC_S)
        at += n_dec
    tokens = msg.narrow(0, at, n).long()
    positions = msg.narrow(0, at + n, n).long()
    at += 2 * n
    if n_cp:
        pool.copy_pages(ops, msg.narrow(0, at, 2 * n_cp).view(-1, 2))
    model.forward(tokens, positions, StepAttention(pool, ops, ext, dec, split), None)


# ----------------------------------------------------------------------------- rank 0


class _DriverModel:
    """What rank 0's ``Engine`` runs: the rank-0 shard, whose ``forward`` first broadcasts the step
    to the other ranks. ``config`` is the shard's (its KV heads size the pool)."""

    def __init__(self, tp: TensorParallel, shard: TPLlama) -> None:
        self.tp = tp
        self.shard = shard
        self.config = shard.config
        self.full_config = shard.full_config
        self.device = shard.device
        self.dtype = shard.dtype
        self.weights = shard.weights
        self.kv_scales = shard.kv_scales

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: Any,
                logits_rows: Optional[torch.Tensor] = None) -> torch.Tensor:
        if not isinstance(attend, StepAttention):
            raise TensorParallelError("tensor parallelism runs eager engine steps only "
                                      "(StepAttention; CUDA graphs are off)")
        return self.tp._step(tokens, positions, attend, logits_rows)


class TensorParallel:
    """Rank 0's handle on a tensor-parallel session of ``world`` ranks (see the module doc).

    ``device``: cpu (gloo, every rank on the CPU) or cuda[:k] (NCCL, rank r on GPU k + r).
    ``timeout_s`` bounds every collective; ``keep_full`` keeps rank 0's full model (``full``),
    e.g. as a verification reference; ``start_timeout_s`` bounds the workers' start (imports,
    model build). Use as a context manager or call ``close``."""

    def __init__(self, factory: ModelFactory, world: int, device: str | torch.device = "cpu",
                 timeout_s: float = 60.0, keep_full: bool = False, threads: int = 1,
                 start_timeout_s: float = 600.0, start_method: str = "spawn") -> None:
        if world < 1:
            raise rk.InvalidArgument(f"tensor parallel: world size must be >= 1, got {world}")
        if dist.is_initialized():
            raise rk.InvalidArgument("tensor parallel: a torch.distributed process group already "
                                     "exists in this process")
        dev = torch.device(device)
        if dev.type == "cuda" and (dev.index or 0) + world > torch.cuda.device_count():
            raise rk.InvalidArgument(f"tensor parallel {world} from {dev}: only "
                                     f"{torch.cuda.device_count()} GPUs")
        self.world = world
        self.device = _rank_device(dev, 0)
        self.backend = "nccl" if dev.type == "cuda" else "gloo"
        self.timeout_s = timeout_s
        self._lock = threading.Lock()  # one thread at a time issues collectives
        self._broken: Optional[TensorParallelError] = None
        self._closed = False
        self._pending: Optional[torch.Tensor] = None  # copy-on-write pairs of the coming step
        self._last_send = time.monotonic()
        self.steps = 0
        self.copied_pages = 0  # copy-on-write pairs sent to the other ranks
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        init = f"tcp://127.0.0.1:{_free_port()}"
        # "forkserver" starts later sessions faster (the server has imported torch once); the
        # factory must then be importable outside __main__.
        ctx: Any = mp.get_context(start_method)
        if start_method == "forkserver":
            ctx.set_forkserver_preload(["radixkv.engine.tp"])
        self._errors = ctx.SimpleQueue()
        self._progress = ctx.Array("q", world, lock=False)  # per rank: collectives finished
        self.procs = [ctx.Process(target=_worker, name=f"radixkv-tp-rank{r}", daemon=True,
                                  args=(r, world, init, self.backend, dev, factory, timeout_s,
                                        threads, self._errors, self._progress))
                      for r in range(1, world)]
        for p in self.procs:
            p.start()
        self._errs: dict[int, str] = {}
        self._ready: set[int] = set()
        try:
            full = factory(self.device)
            self.shard = TPLlama.from_model(full, 0, world)
            self.full: Optional[LlamaModel] = full if keep_full else None
            del full
            # Workers import torch and build their shard first (slow on a loaded machine); the
            # group's timeout, meant for collectives, starts once all are built.
            self._wait_ready(start_timeout_s)
            self._guard(lambda: _init_group(self.backend, init, 0, world, timeout_s))
            self._guard(dist.barrier)
        except BaseException:
            self._kill()
            raise
        self.model = _DriverModel(self, self.shard)
        self.shard.progress = _counter(self._progress, 0)
        self._cap = _MIN_CAP
        self._msg = torch.zeros(self._cap, dtype=torch.int32, device=self.device)
        # Pinned on a GPU so the header's copy does not wait; reused safely because each step
        # ends with the sampled tokens' synchronising copy back.
        self._hdr_t = torch.zeros(_HDR, dtype=torch.int32, pin_memory=self.device.type == "cuda")
        self._hdr = self._hdr_t.numpy()
        self._beat = threading.Thread(target=self._heartbeat, name="radixkv-tp-heartbeat",
                                      daemon=True)
        self._beat.start()

    # -- the engine ---------------------------------------------------------------------------

    def engine(self, config: EngineConfig = EngineConfig(), ops: Optional[ModuleType] = None
               ) -> Engine:
        """An ``Engine`` over the shards (eager steps: CUDA graphs off). The ranks' pools are
        (re)made with its page count; one engine at a time."""
        eng = Engine(self.model, replace(config, cuda_graphs=False), ops)
        code = _KV_DTYPE_CODES.index(eng.pool.dtype) if eng.pool.fp8 else 0
        self._send_simple(_POOL, eng.pool.num_pages, eng.pool.page_size, code)
        pool = eng.pool
        copy = pool.copy_pages

        def copy_pages(ops: ModuleType, pairs: torch.Tensor) -> None:
            self._pending = pairs  # they travel in the next step's message
            copy(ops, pairs)

        pool.copy_pages = copy_pages  # type: ignore[method-assign]
        return eng

    def all_reduce_time(self) -> tuple[float, int]:
        """(seconds, calls) of rank 0's all-reduces since the last call; enables the timer."""
        t = self.shard.timer
        if not t.enabled:
            t.enabled = True
            return 0.0, 0
        return t.drain()

    # -- one step -----------------------------------------------------------------------------

    def _step(self, tokens: torch.Tensor, positions: torch.Tensor, attend: StepAttention,
              rows: Optional[torch.Tensor]) -> torch.Tensor:
        self._check()
        ext, dec = attend.extend, attend.decode
        copies, self._pending = self._pending, None
        n = int(tokens.shape[0])
        h = self._hdr
        h[:] = 0
        n_ext = int(ext.buffer.numel()) if ext is not None else 0
        n_dec = int(dec.buffer.numel()) if dec is not None else 0
        n_cp = int(copies.shape[0]) if copies is not None else 0
        self.copied_pages += n_cp
        total = _HDR + n_ext + n_dec + 2 * n + 2 * n_cp
        h[0:8] = (_STEP, total, n, attend.split, n_ext, n_dec, n_cp, self.steps)
        if ext is not None:
            _put_meta(h, _EXT_AT, ext, _EXT_F, _EXT_S)
        if dec is not None:
            _put_meta(h, _DEC_AT, dec, _DEC_F, _DEC_S)
        with self._lock:
            self._check()
            if total > self._cap:
                self._grow(total)
            m = self._msg
            m[:_HDR].copy_(self._hdr_t, non_blocking=True)
            at = _HDR
            for part in (ext.buffer if ext is not None else None,
                         dec.buffer if dec is not None else None, tokens, positions,
                         copies.reshape(-1) if copies is not None else None):
                if part is not None and part.numel():
                    m[at : at + part.numel()].copy_(part)
                    at += part.numel()
            self.steps += 1
            self._collective(lambda: dist.broadcast(m, 0))
            self.shard.progress()
            logits: torch.Tensor = self._collective(
                lambda: self.shard.forward(tokens, positions, attend, rows))
            return logits

    def _grow(self, total: int) -> None:
        cap = max(total, 2 * self._cap)
        self._send_locked(_GROW, cap)
        self._cap = cap
        self._msg = torch.zeros(cap, dtype=torch.int32, device=self.device)

    def _send_simple(self, cmd: int, a: int = 0, b: int = 0, c: int = 0) -> None:
        with self._lock:
            self._check()
            self._send_locked(cmd, a, b, c)

    def _send_locked(self, cmd: int, a: int = 0, b: int = 0, c: int = 0) -> None:
        self._msg[:4].copy_(torch.tensor([cmd, a, b, c], dtype=torch.int32))
        self._collective(lambda: dist.broadcast(self._msg, 0))
        self.shard.progress()

    def _heartbeat(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        period = self.timeout_s / 3
        while not self._closed and self._broken is None:
            time.sleep(min(period, 0.5))
            dead = self._dead()
            if dead:
                if self.device.type == "cuda":
                    self._abort(dead)
                continue  # gloo (CPU): rank 0's own collective fails and names the rank
            if time.monotonic() - self._last_send < period:
                continue
            if not self._lock.acquire(timeout=0.1):
                continue
            try:
                if not self._closed and self._broken is None:
                    self._send_locked(_BEAT)
            except TensorParallelError:
                pass  # recorded in self._broken; the next step raises it
            finally:
                self._lock.release()

    # -- failures -----------------------------------------------------------------------------

    def _abort(self, dead: list[tuple[int, int]]) -> None:
        """NCCL: a step in flight would wait for the dead rank until the group's timeout;
        abort the communicators now, so it fails at once, and say which rank died."""
        err = self._dead_error(dead, "noticed by rank 0's watchdog; process group aborted")
        self._broken = err
        sys.stderr.write(f"radixkv: {err}\n")
        sys.stderr.flush()
        try:
            dist.distributed_c10d._abort_process_group()
        except Exception:  # noqa: BLE001 - best effort: the group timeout still bounds the wait
            pass

    def _dead(self) -> list[tuple[int, int]]:
        return [(r, p.exitcode) for r, p in enumerate(self.procs, 1) if p.exitcode is not None]

    def _worker_errors(self) -> dict[int, str]:
        while not self._errors.empty():
            kind, rank, text = self._errors.get()
            if kind == "ready":
                self._ready.add(rank)
            else:
                self._errs[rank] = text
        return self._errs

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            self._worker_errors()
            if len(self._ready) == self.world - 1:
                return
            dead = self._dead()
            if dead:
                raise self._dead_error(dead, "while starting")
            if time.monotonic() > deadline:
                late = sorted(set(range(1, self.world)) - self._ready)
                raise TensorParallelError(f"tensor parallel: ranks {late} not ready after "
                                          f"{timeout_s:g}s", late[0])
            time.sleep(0.05)

    def _dead_error(self, dead: list[tuple[int, int]], cause: str = "") -> TensorParallelError:
        errs = self._worker_errors()
        parts = []
        for r, code in dead:
            why = errs.get(r, "").splitlines()[0] if r in errs else ""
            parts.append(f"rank {r} (pid {self.procs[r - 1].pid}) exited with code {code}"
                         + (f": {why}" if why else ""))
        msg = "tensor parallel: " + "; ".join(parts) + (f" ({cause})" if cause else "")
        return TensorParallelError(msg, dead[0][0])

    def _check(self) -> None:
        if self._broken is not None:
            raise self._broken
        if self._closed:
            raise TensorParallelError("tensor parallel session is closed")
        dead = self._dead()
        if dead:
            self._broken = self._dead_error(dead, "found before a step")
            raise self._broken

    def _guard(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001
            raise self._blame(exc) from exc

    def _collective(self, fn: Callable[[], Any]) -> Any:
        try:
            out = fn()
        except Exception as exc:  # noqa: BLE001 - a failed collective: find the culprit
            self._broken = self._blame(exc)
            raise self._broken from exc
        self._last_send = time.monotonic()
        return out

    def _blame(self, exc: BaseException) -> TensorParallelError:
        # A peer's death usually breaks the collective before its exit status is visible.
        deadline = time.monotonic() + 3.0
        dead = self._dead()
        while not dead and time.monotonic() < deadline:
            time.sleep(0.05)
            dead = self._dead()
        first = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        if dead:
            return self._dead_error(dead, f"rank 0 saw: {first}")
        # Read each counter once: a live worker may still advance its own.
        progress = [int(self._progress[r]) for r in range(self.world)]
        mine = progress[0]
        r = _stuck_rank(progress)
        if r is not None:
            d = progress[r]
            return TensorParallelError(
                f"tensor parallel: rank {r} (pid {self.procs[r - 1].pid}) is alive but stuck: it "
                f"finished {d} collectives, rank 0 {mine}; a collective failed or timed out "
                f"(timeout {self.timeout_s:g}s): {type(exc).__name__}: {first}", r)
        return TensorParallelError(
            f"tensor parallel: a collective failed or timed out (timeout {self.timeout_s:g}s) "
            f"with every worker running and caught up: {type(exc).__name__}: {first}")

    # -- shutdown -----------------------------------------------------------------------------

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the workers (STOP message; killed if they do not exit) and leave the group."""
        if self._closed:
            return
        ok = self._broken is None and not self._dead()
        if ok:
            try:
                with self._lock:
                    self._send_locked(_STOP)
            except TensorParallelError:
                ok = False
        self._closed = True
        for p in self.procs:
            p.join(timeout_s if ok else 0.5)
        self._kill()

    def _kill(self) -> None:
        self._closed = True
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join(5.0)
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - a broken group may not tear down cleanly
                pass

    def __enter__(self) -> TensorParallel:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            try:
                self.close(2.0)
            except Exception:  # noqa: BLE001
                pass
