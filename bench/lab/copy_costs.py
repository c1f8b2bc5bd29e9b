"""Host time of the host<->device id copies the SGLang plugin makes on GPU pools (lab probe):
pageable vs pinned H2D, D2H of a table row, with the stream idle and with ~1 ms of work queued
ahead on it (a copy that waits for the stream takes ~1 ms then; the sleep's launch is counted)."""
import time

import numpy as np
import torch


def t(fn, n=300):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    s = time.perf_counter_ns()
    for _ in range(n):
        fn()
    e = time.perf_counter_ns()
    torch.cuda.synchronize()
    return (e - s) / n / 1e3


a = np.arange(300, dtype=np.int64)
table = torch.zeros((64, 4096), dtype=torch.int32, device="cuda")
# ~1 ms of GPU work queued ahead of each copy (about 2e6 cycles), as a forward pass would be
busy = lambda: torch.cuda._sleep(2_000_000)  # noqa: E731
for label, pre in (("idle", lambda: None), ("1 ms kernel queued", busy)):
    print(label)
    print(f"  H2D pageable   {t(lambda: (pre(), torch.from_numpy(a).to('cuda'))):7.1f} us")
    print(f"  H2D pinned nb  {t(lambda: (pre(), torch.from_numpy(a).pin_memory().to('cuda', non_blocking=True))):7.1f} us")
    print(f"  D2H row        {t(lambda: (pre(), table[3, :300].to('cpu', torch.int64))):7.1f} us")
    print(f"  D2H row int32  {t(lambda: (pre(), table[3, :300].cpu())):7.1f} us")
    print(f"  a kernel       {t(lambda: (pre(), table[3, :300].add_(0))):7.1f} us")
