"""CPU model of the direct FP8 fragment layout of the narrow decode kernel (hip/fp8_decode.h,
"Direct fragments"; hip/paged_decode_mma.cuh, kDirect).

Mirrors the kernel's index arithmetic lane by lane: which cache bytes each lane copies into which
lane's stage slot in which copy instruction (k_slot / v_slot, k_row / v_row), the 16-byte read-backs, the byte permutes
(__byte_perm selectors 0x5140 / 0x7362), cvt4's pairing (lo = bytes 0, 1; hi = bytes 2, 3), the
Q^T operand built with K's dim permutation, the m16n8k16 fragment layouts (PTX ISA, row.col) and
the permuted O^T store (out_dim). Checks, for every D in {64, 128, 256} and KEYS in {16, 32, 64}:
  - no two copies of a tile land on the same stage byte, and they fill the stage exactly;
  - every (key, dim) of K and of V is copied exactly once per tile;
  - each lane reads back only slots that hold its own fragments;
  - each copy instruction reads whole 128-byte cache lines (whole rows when D < 128), each 32-byte
    sector into one aligned 32-byte block of shared memory (so no sector is requested twice), the
    sectors of one line in different banks;
  - read-backs: V conflict-free per quarter-warp (half-warp for 8-byte reads) except 2-way at
    D = 256; K 2-way when a lane holds more than 16 bytes of a row;
  - S^T = K Q^T and O = P^T V computed from the assembled fragments equal the plain products;
  - the output un-permutation is a bijection onto [0, D).
Elements stand for themselves (the fp8 -> fp16 conversion is not modelled). Run:
  python3 bench/lab/fp8_direct_layout.py
"""

from __future__ import annotations

import numpy as np

WARP = 32


def byte_perm(a: int, b: int, sel: int) -> int:
    src = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    return sum(src[(sel >> (4 * i)) & 7] << (8 * i) for i in range(4))


def words(buf: np.ndarray) -> list[int]:
    return [int.from_bytes(bytes(buf[4 * i : 4 * i + 4]), "little") for i in range(len(buf) // 4)]


def cvt4(w: int) -> tuple[tuple[int, int], tuple[int, int]]:
    b = [(w >> (8 * i)) & 0xFF for i in range(4)]
    return (b[0], b[1]), (b[2], b[3])


class Geo:
    def __init__(self, d: int, keys: int) -> None:
        self.D, self.KEYS = d, keys
        self.KB, self.DB = keys // 16, d // 16
        self.kKBytes = d // 4
        self.kKChunks = self.kKBytes // 16
        self.kVBytes = d // 8
        self.kVCopy = min(16, self.kVBytes)
        self.kVChunks = self.kVBytes // self.kVCopy

        self.kKRowChunks = d // 16
        self.kKRows = 32 // self.kKRowChunks
        self.kVRowChunks = d // self.kVCopy
        self.kVRows = 32 // self.kVRowChunks

    def k_slot(self, kb: int, h: int, c: int, lane: int) -> int:
        if self.kKBytes < 32:
            return ((kb * 2 + h) * 32 + lane) * self.kKBytes
        sec = self.kKBytes // 32
        return ((((kb * 2 + h) * sec + (c >> 1)) * 32 + (lane ^ (2 * (c >> 1)))) * 32) + (c & 1) * 16

    def v_pos(self, lane: int) -> int:
        g, t = lane >> 2, lane & 3
        if self.kVBytes == 8:
            return ((g >> 2) << 4) | (((t ^ (g >> 2)) & 3) << 2) | (g & 3)
        if self.kVBytes == 16:
            return ((g >> 1) << 3) | (((t ^ (g >> 1)) & 3) << 1) | (g & 1)
        return 4 * g + ((t + g) & 3)

    def v_slot(self, kb: int, q: int, c: int, lane: int) -> int:
        return ((kb * 4 + q) * 32 + self.v_pos(lane)) * self.kVBytes + c * self.kVCopy

    def k_copies(self, kb: int) -> list[list[tuple[int, int, int, int, int]]]:
        """Copy instructions of block kb: per lane (row, col, dst, bytes, consumer lane)."""
        out = []
        for h in range(2):
            for s8 in range(0, 8, self.kKRows):
                ins = []
                for lane in range(WARP):
                    ki, kj = lane // self.kKRowChunks, lane % self.kKRowChunks
                    kt, kc = kj // self.kKChunks, kj % self.kKChunks
                    g = s8 + ki
                    cons = 4 * g + kt
                    ins.append((self.k_row(kb, h, g), kj * 16, self.k_slot(kb, h, kc, cons), 16, cons))
                out.append(ins)
        return out

    def v_copies(self, kb: int) -> list[list[tuple[int, int, int, int, int]]]:
        out = []
        for q in range(4):
            for s4 in range(0, 4, self.kVRows):
                ins = []
                for lane in range(WARP):
                    vi, vj = lane // self.kVRowChunks, lane % self.kVRowChunks
                    vg, vc = vj // self.kVChunks, vj % self.kVChunks
                    t = s4 + vi
                    cons = 4 * vg + t
                    ins.append((self.v_row(kb, q, t), vj * self.kVCopy, self.v_slot(kb, q, vc, cons),
                                self.kVCopy, cons))
                out.append(ins)
        return out

    @staticmethod
    def k_row(kb: int, h: int, g: int) -> int:
        return kb * 16 + g + 8 * h

    @staticmethod
    def v_row(kb: int, q: int, t: int) -> int:
        return kb * 16 + 2 * t + (q & 1) + 8 * (q >> 1)

    def out_dim(self, db: int, g: int, h: int) -> int:
        return g * self.kVBytes + 2 * db + h


def check_instruction(ins: list[tuple[int, int, int, int, int]], d: int) -> None:
    """One copy instruction: whole cache lines read; each 32-byte sector into one aligned 32-byte
    block of shared memory; a line's sectors in distinct banks."""
    lines: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for row, col, dst, n, _ in ins:
        lines.setdefault((row, col // 128), []).append((col, dst, n))
    for (row, line), parts in lines.items():
        covered = sorted(c for c, _, _ in parts)
        n = parts[0][2]
        assert covered == list(range(line * 128, line * 128 + min(128, d), n)), f"row {row}: partial line"
        sectors: dict[int, set[int]] = {}
        for col, dst, _ in parts:
            sectors.setdefault(col // 32, set()).add(dst // 32)
        assert all(len(b) == 1 for b in sectors.values()), f"row {row}: a sector split in shared memory"
        banks = [(dst % 128) // 32 for dst in {next(iter(b)) * 32 for b in sectors.values()}]
        assert len(set(banks)) == len(banks), f"row {row}: sectors share banks"


def check_reads(addr, groups: int, width: int, max_way: int = 1) -> None:
    """Read-backs of `width` bytes per lane (phases of 128 / width lanes): bank conflicts <= max_way."""
    per = 128 // width
    for grp in range(groups):
        for ph in range(32 // per):
            units = [(addr(grp, lane) % 128) // width for lane in range(per * ph, per * ph + per)]
            worst = max(units.count(u) for u in units)
            assert worst <= max_way, f"{worst}-way read conflict"


def check(d: int, keys: int, rng: np.random.Generator) -> None:
    G = Geo(d, keys)
    for cc in range(G.kKChunks):  # K: 2-way by design when a lane holds 32 or 64 bytes of a row
        check_reads(lambda grp, lane: G.k_slot(grp // 2, grp % 2, cc, lane), G.KB * 2, 16,
                    2 if G.kKChunks > 1 else 1)
    for cc in range(G.kVChunks):  # D 256: two 32-byte V copies per lane and row, 2-way by design
        check_reads(lambda grp, lane: G.v_slot(grp // 4, grp % 4, cc, lane), G.KB * 4, G.kVCopy,
                    2 if G.kVChunks > 1 else 1)
    K = rng.integers(0, 256, size=(keys, d), dtype=np.uint8)
    V = rng.integers(0, 256, size=(keys, d), dtype=np.uint8)
    Q = rng.integers(-8, 8, size=(8, d)).astype(np.int64)
    P = rng.integers(-8, 8, size=(keys, 8)).astype(np.int64)
    stage_bytes = keys * d
    for name, cache in (("K", K), ("V", V)):
        stage = np.zeros(stage_bytes, dtype=np.uint8)
        owner = np.full(stage_bytes, -1)
        seen = np.zeros((keys, d), dtype=int)
        for kb in range(G.KB):
            for ins in (G.k_copies(kb) if name == "K" else G.v_copies(kb)):
                check_instruction(ins, d)
                for row, col, dst, n, cons in ins:
                    assert dst % n == 0 and col % n == 0, "aligned copies"
                    assert (owner[dst : dst + n] == -1).all(), f"{name}: overlapping stage bytes"
                    owner[dst : dst + n] = cons
                    stage[dst : dst + n] = cache[row, col : col + n]
                    seen[row, col : col + n] += 1
        assert (owner >= 0).all(), f"{name}: stage not filled exactly"
        assert (seen == 1).all(), f"{name}: (key, dim) not copied exactly once"
        if name == "K":
            k_stage, k_owner = stage, owner
        else:
            v_stage, v_owner = stage, owner

    # ---- S^T = K Q^T from the fragments ---------------------------------------------------
    A = np.zeros((G.KB, G.DB, 16, 16), dtype=np.int64)  # [kb][db] A[m = key][k]
    B = np.zeros((G.DB, 16, 8), dtype=np.int64)  # Q^T [k][head]
    filled_a = np.zeros(A.shape, dtype=int)
    filled_b = np.zeros(B.shape, dtype=int)
    for lane in range(WARP):
        g, t = lane // 4, lane % 4
        for db in range(G.DB):  # q_direct: head g, dims t D/4 + 4 db + 0..3
            base = t * G.kKBytes + 4 * db
            for j, k in enumerate((2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9)):
                B[db, k, g] = Q[g, base + j]
                filled_b[db, k, g] += 1
        for kb in range(G.KB):
            for cc in range(G.kKChunks):
                rows = []
                for h in range(2):
                    off = G.k_slot(kb, h, cc, lane)
                    assert (k_owner[off : off + 16] == lane).all(), "K: reads a slot holding another lane's fragments"
                    rows.append(words(k_stage[off : off + 16]))
                for w in range(4):
                    db = 4 * cc + w
                    x = [None] * 4
                    x[0], x[2] = cvt4(rows[0][w])
                    x[1], x[3] = cvt4(rows[1][w])
                    # A regs: x0 = (g, 2t..), x1 = (g+8, 2t..), x2 = (g, 2t+8..), x3 = (g+8, 2t+8..)
                    for r, (m, k0) in enumerate(((g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8))):
                        A[kb, db, m, k0] = x[r][0]
                        A[kb, db, m, k0 + 1] = x[r][1]
                        filled_a[kb, db, m, k0 : k0 + 2] += 1
    assert (filled_a == 1).all() and (filled_b == 1).all(), "K/Q fragments filled once"
    st = np.zeros((keys, 8), dtype=np.int64)
    for kb in range(G.KB):
        for db in range(G.DB):
            st[kb * 16 : kb * 16 + 16] += A[kb, db] @ B[db]
    assert (st == K.astype(np.int64) @ Q.T).all(), "S^T mismatch"

    # ---- O^T += V^T P^T from the fragments, stored through out_dim ---------------------------
    ot = np.zeros((G.DB, 16, 8), dtype=np.int64)  # accumulators [db][m][head]
    filled_v = np.zeros((G.KB, G.DB, 16, 16), dtype=int)
    for kb in range(G.KB):
        Bp = P[kb * 16 : kb * 16 + 16]  # P^T B operand: [key][head] (pt_from_acc, keys in order)
        Av = np.zeros((G.DB, 16, 16), dtype=np.int64)
        for lane in range(WARP):
            g, t = lane // 4, lane % 4
            for cc in range(G.kVChunks):
                rv = []
                for q in range(4):
                    off = G.v_slot(kb, q, cc, lane)
                    assert (v_owner[off : off + G.kVCopy] == lane).all(), "V: reads a slot holding another lane's fragments"
                    rv.append(words(v_stage[off : off + G.kVCopy]))
                for w in range(G.kVCopy // 4):
                    for hb in range(2):
                        db = cc * (G.kVCopy // 2) + 2 * w + hb
                        sel = 0x7362 if hb else 0x5140
                        x = [None] * 4
                        x[0], x[1] = cvt4(byte_perm(rv[0][w], rv[1][w], sel))
                        x[2], x[3] = cvt4(byte_perm(rv[2][w], rv[3][w], sel))
                        for r, (m, k0) in enumerate(((g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8))):
                            Av[db, m, k0] = x[r][0]
                            Av[db, m, k0 + 1] = x[r][1]
                            filled_v[kb, db, m, k0 : k0 + 2] += 1
        for db in range(G.DB):
            ot[db] += Av[db] @ Bp
    assert (filled_v == 1).all(), "V fragments filled once"
    O = np.full((8, d), 10**18, dtype=np.int64)
    dims = set()
    for lane in range(WARP):
        g, t = lane // 4, lane % 4
        for db in range(G.DB):
            for e in range(4):  # accumulator element e: row g + 8 (e >> 1), head 2t + (e & 1)
                dim = G.out_dim(db, g, e >> 1)
                dims.add((2 * t + (e & 1), dim))
                O[2 * t + (e & 1), dim] = ot[db, g + 8 * (e >> 1), 2 * t + (e & 1)]
    assert len(dims) == 8 * d and all(0 <= dd < d for _, dd in dims), "out_dim not a bijection"
    assert (O == P.T @ V.astype(np.int64)).all(), "O mismatch"


def main() -> None:
    rng = np.random.default_rng(0)
    n = 0
    for d in (64, 128, 256):
        for keys in (16, 32, 64):
            check(d, keys, rng)
            n += 1
    print(f"fp8 direct layout: {n} (D, KEYS) shapes ok")


if __name__ == "__main__":
    main()
