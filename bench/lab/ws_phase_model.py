"""CPU model of hip/extend_ws.cuh's synchronisation: the producer / consumer stage ring (mbarriers
with phase parity, cp.async arrivals that land late) and the consumers' ping-pong turns (named
barriers), run under many random interleavings.

Checks, for every schedule: no deadlock; a consumer reads stage n % S only once all of tile n's
copies have landed and before any copy of a later tile lands there; the two consumers' S-product
issues alternate (0, 1, 0, 1, ...); a named barrier never takes more arrivals than its count in
one generation; every barrier ends idle. With the stage in Q's space (the pair-step instance: 7
stages, the last one the Q tile's space, filled first once every consumer warp has arrived on
bar_q_free), also: no copy lands in Q's space before every consumer warp holds Q, and when the
consumers stage their output there (after their last products and the consumers' barrier), no
copy is in flight to it and no consumer still reads it. Before the schedules, the producer's gather indexing
(per-warp row lookups read by shuffle, the tile walker, swizzled destinations) is checked against
key // page_size, key % page_size and sw128_index for several page sizes.

Persistent CTAs (the single-tile instance's rank-order launches): a CTA runs several slots, each a
query tile of its own number of K/V tiles or nothing (0: a skipped slot or a NaN tile), with one
ring running on across them (ring tile g = the K/V tiles of the CTA's earlier query tiles + n),
each consumer warp loading its own Q rows and staging its own output rows (no consumers'
barrier), and the turns running on across tiles: consumer 1 arrives ahead only before the first
tile and consumer 0 takes the last hand-over once, after the last. The producer's thread 0 hands
each slot to the consumers through the slot ring (KINFO entries, a "full" barrier of count 1 and
an "empty" one of one arrival per consumer thread, here per warp): a consumer reads entry
k % KINFO only once slot k is in it, and the producer overwrites an entry only once every
consumer warp has read it.
The same checks hold; the S issues alternate over all the CTA's K/V tiles.

    python3 bench/lab/ws_phase_model.py [--schedules 3000]
"""

from __future__ import annotations

import argparse
import random

STAGES = 6  # hip/extend_ws.cuh Ring<false>::kStages (the pair-step instance: 7, the last in Q's space)
KINFO = 4  # hip/extend_ws.cuh kInfo: the slot ring's entries
PRODUCER_THREADS = 3  # copy agents (the kernel: 128 threads; full barrier count = this)
CONSUMER_WARPS = 2    # per consumer warpgroup (the kernel: 4; empty barrier count = 2 * this)


class MBarrier:
    """mbarrier: `count` arrivals complete a phase; try_wait(parity) is true once the phase of
    that parity has completed, i.e. the current phase's parity differs."""

    def __init__(self, count: int):
        self.count = count
        self.pending = count
        self.completed = 0

    def arrive(self) -> None:
        self.pending -= 1
        assert self.pending >= 0
        if self.pending == 0:
            self.completed += 1
            self.pending = self.count

    def try_wait(self, parity: int) -> bool:
        return self.completed % 2 != parity


class NamedBarrier:
    """bar.sync / bar.arrive with a thread count, here in warpgroups (256 threads = 2)."""

    def __init__(self, count: int):
        self.count = count
        self.arrived: list[int] = []
        self.generation = 0

    def arrive(self, who: int) -> int:
        assert who not in self.arrived, f"warpgroup {who} arrives twice in one generation"
        self.arrived.append(who)
        gen = self.generation
        if len(self.arrived) == self.count:
            self.arrived = []
            self.generation += 1
        return gen

    def passed(self, gen: int) -> bool:
        return self.generation > gen


def run(tiles: list[int], rng: random.Random, q_stage: bool = False, persistent: bool = False) -> None:
    """`tiles`: K/V tiles of each query tile the CTA runs (one unless persistent)."""
    assert persistent or len(tiles) == 1
    assert not (persistent and q_stage)
    n_tiles = sum(tiles)  # ring tiles over the CTA's life
    starts = [sum(tiles[:k]) for k in range(len(tiles))]
    stages = STAGES + (1 if q_stage else 0)
    q_space = stages - 1 if q_stage else None  # the stage in Q's space
    full = [MBarrier(PRODUCER_THREADS) for _ in range(stages)]
    empty = [MBarrier(2 * CONSUMER_WARPS) for _ in range(stages)]
    q_free = MBarrier(2 * CONSUMER_WARPS)
    q_held = [0]  # consumer warps holding Q in registers
    done_warps = [0]  # consumer warps at kBarConsumers, before the output is staged
    reading = [0] * stages  # consumer warps between taking a stage and releasing it
    turn = [NamedBarrier(2), NamedBarrier(2)]  # kBarTurn + c
    stage_tile = [-1] * stages   # tile whose copies have all landed in the stage (-1: none yet)
    landed: dict[tuple[int, int], int] = {}  # (stage, tile) -> copies landed
    in_flight: list[tuple[int, int, int]] = []  # (producer thread, stage, tile): copies not landed
    issue_order: list[int] = []
    released = [0] * n_tiles  # consumer warps done with tile n
    info_full = [MBarrier(1) for _ in range(KINFO)]
    info_empty = [MBarrier(2 * CONSUMER_WARPS) for _ in range(KINFO)]
    info = [-1] * KINFO  # the slot each entry holds
    info_read = [0] * KINFO  # consumer warps that have read the entry's slot

    def publish(k: int):  # the producer's thread 0 hands slot k to the consumers
        j, rnd = k % KINFO, k // KINFO
        if rnd > 0:
            while not info_empty[j].try_wait((rnd - 1) & 1):
                yield
            assert info_read[j] == 2 * CONSUMER_WARPS, \
                f"slot {k} overwrites slot {info[j]} before every warp read it"
        info[j], info_read[j] = k, 0
        info_full[j].arrive()
        yield

    def producer(u: int):
        # Per slot k: its hand-over (n None), then its ring tiles n (K/V tile n - starts[k]).
        ring = [(k, n) for k, count in enumerate(tiles)
                for n in [None] + list(range(starts[k], starts[k] + count))]
        for k, n in ring:
            if n is None:
                if persistent and u == 0:
                    yield from publish(k)
                continue
            s, rnd = n % stages, n // stages
            if rnd > 0:
                while not empty[s].try_wait((rnd - 1) & 1):
                    yield
            if q_stage and n == q_space:  # the first fill of Q's space
                while not q_free.try_wait(0):
                    yield
            # cp.async copies of this thread, then its noinc arrive (when they land)
            in_flight.append((u, s, n))
            yield
        # cp.async.wait_all
        while any(f[0] == u for f in in_flight):
            yield

    def lander():
        # Lands in-flight copies in order per thread (cp.async arrive fires after all earlier copies).
        while True:
            if in_flight:
                firsts = {}
                for i, (u, s, n) in enumerate(in_flight):
                    firsts.setdefault(u, i)
                i = rng.choice(list(firsts.values()))
                u, s, n = in_flight.pop(i)
                assert stage_tile[s] < n
                assert n < stages or released[n - stages] == 2 * CONSUMER_WARPS, \
                    f"tile {n} lands in stage {s} before tile {n - stages} is released"
                assert s != q_space or q_held[0] == 2 * CONSUMER_WARPS, "a copy lands in Q's space while Q is read"
                key = (s, n)
                landed[key] = landed.get(key, 0) + 1
                if landed[key] == PRODUCER_THREADS:
                    stage_tile[s] = n
                full[s].arrive()
            yield

    def consumer(c: int, warp: int):
        # warp 0 of each consumer stands for the warpgroup at the named barriers (all warps of a
        # warpgroup pass bar.sync together); every warp arrives on "empty".
        leader = warp == 0

        def take(n: int):
            s = n % stages
            while not full[s].try_wait((n // stages) & 1):
                yield
            assert stage_tile[s] == n, f"consumer {c} reads stage {s} for tile {n}, holds {stage_tile[s]}"
            reading[s] += 1
            if leader:
                gen = turn[c].arrive(c)
                while not turn[c].passed(gen):
                    yield
                issue_order.append(c)
                turn[1 - c].arrive(c)

        started = False
        for k, count in enumerate(tiles):
            base = starts[k]
            if persistent:  # the slot from the slot ring
                j = k % KINFO
                while not info_full[j].try_wait((k // KINFO) & 1):
                    yield
                assert info[j] == k, f"consumer {c} reads slot {info[j]} for slot {k}"
                info_read[j] += 1
                info_empty[j].arrive()
                if count == 0:  # skipped, or NaN rows written: no K/V tiles
                    continue
            yield  # Q copied (persistent: this warp's own rows), then read into registers
            if k == 0:
                q_held[0] += 1
                if q_stage:
                    q_free.arrive()
            if leader and c == 1 and not started:
                turn[0].arrive(1)
            started = True
            # Tile 0's S on the first turn; then step n: wait for tile n + 1's stage, take the
            # turn, issue S(n + 1) and P V(n), softmax of n + 1, release tile n's stage; last:
            # P V(N - 1). Ring tiles are base + n.
            yield from take(base)
            for n in range(base, base + count):
                if n + 1 < base + count:
                    yield from take(n + 1)
                yield  # softmax of n + 1 while P V(n) runs
                s = n % stages
                assert stage_tile[s] == n, f"stage {s} overwritten while consumer {c} reads tile {n}"
                reading[s] -= 1
                released[n] += 1
                empty[s].arrive()
                yield
            if persistent:
                yield  # this warp stages and stores its own output rows; then the next tile
                continue
            if leader and c == 0:
                gen = turn[0].arrive(0)
                while not turn[0].passed(gen):
                    yield
            # The output staged through Q's space, once both consumers are past the barrier.
            done_warps[0] += 1  # bar.sync(kBarConsumers, 256): every warp of both warpgroups
            while done_warps[0] < 2 * CONSUMER_WARPS:
                yield
            if q_stage:
                assert reading[q_space] == 0, "the output is staged while a consumer reads Q's space"
                assert not any(f[1] == q_space for f in in_flight), "the output is staged under a copy in flight"
        if persistent and leader and c == 0 and started:  # the last hand-over, after the last tile
            gen = turn[0].arrive(0)
            while not turn[0].passed(gen):
                yield

    agents = [producer(u) for u in range(PRODUCER_THREADS)]
    agents += [consumer(c, w) for c in range(2) for w in range(CONSUMER_WARPS)]
    land = lander()
    live = list(agents)
    steps = 0
    while live:
        steps += 1
        assert steps < 100000, "deadlock"
        if in_flight and rng.random() < 0.3:
            next(land)
            continue
        a = rng.choice(live)
        try:
            next(a)
        except StopIteration:
            live.remove(a)
    while in_flight:
        next(land)
    assert issue_order == [0, 1] * n_tiles, issue_order
    for b in turn:
        assert not b.arrived, "a named barrier left with pending arrivals"


def sw128_index(rows: int, row: int, col: int) -> int:
    """hip/extend_wgmma.cuh sw128_index: element index in a 128-byte-swizzled [rows][128] tile."""
    return (col >> 6) * (rows * 64) + row * 64 + ((((col >> 3) & 7) ^ (row & 7)) << 3) + (col & 7)


def check_gather_indexing(page_sizes=(1, 2, 3, 5, 16, 17, 64, 100), tiles: int = 12) -> None:
    """The producer's per-warp row lookup (hip/extend_ws.cuh): lane j < 16 of warp w resolves row
    2w + (j & 1) + 8 (j >> 1) with a walker stepping a tile (64 keys) at a time; thread u copies
    chunk u % 16 of rows u / 16 + 8 i from lane (lane >> 4) + 2 i, into byte offset
    dst0 + 1024 i. Checks that every (row, chunk) of a tile is copied exactly once, from the right
    page and slot, to its swizzled place."""
    bn = 64
    for ps in page_sizes:
        # the lookups: (warp, lane) -> per tile (page, slot) through the walker
        walk = {}
        for w in range(4):
            for lane in range(32):
                jj = lane % 16
                my_row = 2 * w + (jj & 1) + 8 * (jj >> 1)
                pidx, off = my_row // ps, my_row % ps
                seq = []
                for _ in range(tiles):
                    seq.append((my_row, pidx, off))
                    pidx += bn // ps
                    off += bn % ps
                    if off >= ps:
                        off -= ps
                        pidx += 1
                walk[(w, lane)] = seq
        for n in range(tiles):
            seen = set()
            for u in range(128):
                w, lane, r0, c8 = u // 32, u % 32, u // 16, (u % 16) * 8
                dst0 = 2 * sw128_index(bn, r0, c8)
                for i in range(bn // 8):
                    row, pidx, off = walk[(w, (lane >> 4) + 2 * i)][n]
                    assert row == r0 + 8 * i, (ps, u, i)
                    key = n * bn + row
                    assert (pidx, off) == (key // ps, key % ps), (ps, n, u, i)
                    assert dst0 + 1024 * i == 2 * sw128_index(bn, row, c8), (u, i)
                    seen.add((row, c8))
            assert len(seen) == bn * 16, "every row and chunk of the tile copied once"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--schedules", type=int, default=3000)
    args = ap.parse_args()
    check_gather_indexing()
    rng = random.Random(12)
    lengths = [1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 19]
    for i in range(args.schedules):
        if i % 3 == 2:  # a persistent CTA of 1-9 slots, some without K/V tiles
            slots = [rng.choice(lengths + [0] * 4) for _ in range(rng.randint(1, 9))]
            run(slots, rng, persistent=True)
        else:
            run([rng.choice(lengths)], rng, q_stage=i % 3 == 1)
    print(f"ws_phase_model: gather indexing and {args.schedules} schedules (stages {STAGES}, "
          f"{STAGES} + Q's space, persistent CTAs): all checks held")


if __name__ == "__main__":
    main()
