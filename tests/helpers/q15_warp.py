"""A lane-by-lane numpy emulation of kernels/q15.cu, for tests that run without a GPU (tests/kernels/
test_q15_layout.py): the shared-memory byte tiles the kernel stores, the fragment registers each lane loads from
them at the kernel's addresses, the int8 m16n8k32 MMA as the PTX ISA defines its fragments (independently of the
kernel's addressing), and the kernel's block loop (mask, max, rescale, P re-packed from the accumulators, Vᵀ in
the permuted key order, the division) on top of them.

What it checks is the kernel's index arithmetic and algorithm, transcribed; what it cannot check is the CUDA
compiler or the hardware (a GPU run, tests/kernels/test_q15_gpu.py, does).
"""

from __future__ import annotations

import numpy as np

from host import q15

BC = q15.BC
ROW_PAD = 16  # kernels/q15.cu: Q and K rows are D + 16 bytes, Vᵀ rows 64 + 16
LANES = np.arange(32)
G, T = LANES >> 2, LANES & 3  # the lane's group (row) and thread in group


def split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int16 → (signed high byte, unsigned low byte), x = hi·256 + lo (kernels/q15_math.cuh q15_hi, q15_lo)."""
    x = np.asarray(x, dtype=np.int64)
    return x >> 8, x & 0xFF


def words(smem: np.ndarray, address: np.ndarray) -> np.ndarray:
    """The 32-bit little-endian words at byte addresses `address` (any shape) of a uint8 array."""
    b = smem[address[..., None] + np.arange(4)].astype(np.uint64)
    return (b[..., 0] | b[..., 1] << 8 | b[..., 2] << 16 | b[..., 3] << 24).astype(np.uint32)


def load_a(smem: np.ndarray, base: int, stride: int) -> np.ndarray:
    """kernels/q15.cu q15_load_a for all lanes: (32, 4) registers of rows g, g + 8, bytes 4t.. and 16 + 4t.."""
    rows, cols = np.stack([G, G + 8, G, G + 8], 1), np.stack([4 * T, 4 * T, 16 + 4 * T, 16 + 4 * T], 1)
    return words(smem, base + rows * stride + cols)


def load_b(smem: np.ndarray, base: int, stride: int) -> np.ndarray:
    """kernels/q15.cu q15_load_b for all lanes: (32, 2) registers of shared row g, bytes 4t.. and 16 + 4t.."""
    return words(smem, base + G[:, None] * stride + np.stack([4 * T, 16 + 4 * T], 1))


def pack4(b: np.ndarray) -> np.ndarray:
    """q15_pack4 on (..., 4) bytes, the first in the lowest byte."""
    b = (np.asarray(b, dtype=np.int64) & 0xFF).astype(np.uint64)
    return (b[..., 0] | b[..., 1] << 8 | b[..., 2] << 16 | b[..., 3] << 24).astype(np.uint32)


def _bytes(regs: np.ndarray, signed: bool) -> np.ndarray:
    """(32, R) registers → (32, R, 4) bytes, low byte first, as int8 or uint8 values."""
    b = (regs[..., None].astype(np.int64) >> (8 * np.arange(4))) & 0xFF
    return np.where(b > 127, b - 256, b) if signed else b


def mma(c: np.ndarray, a: np.ndarray, b: np.ndarray, a_signed: bool, b_signed: bool) -> np.ndarray:
    """mma.sync.aligned.m16n8k32.row.col.s32.{s8,u8}.{s8,u8}.s32 by the PTX ISA's fragment layouts: A element a_i of
    a lane (register i/4, byte i mod 4) is row g (+8 for registers 1, 3), column 4t + i mod 4 (+16 for registers 2,
    3); B element b_i is row 4t + i mod 4 (+16 for register 1), column g; C element c_i is row g (+8 for i >= 2),
    column 2t + i mod 2. c (32, 4) int64 → c + A·B, checked to stay within int32."""
    A, B = np.zeros((16, 32), dtype=np.int64), np.zeros((32, 8), dtype=np.int64)
    ab, bb = _bytes(a, a_signed), _bytes(b, b_signed)
    for r in range(4):
        for i in range(4):
            A[G + 8 * (r & 1), 4 * T + i + 16 * (r >> 1)] = ab[:, r, i]
    for r in range(2):
        for i in range(4):
            B[4 * T + i + 16 * r, G] = bb[:, r, i]
    D = A @ B
    out = c + np.stack([D[G, 2 * T], D[G, 2 * T + 1], D[G + 8, 2 * T], D[G + 8, 2 * T + 1]], 1)
    assert np.abs(out).max(initial=0) < 2**31, "an int32 accumulator overflowed"
    return out


def join(hh: np.ndarray, mid: np.ndarray, ll: np.ndarray) -> np.ndarray:
    return hh * 65536 + mid * 256 + ll


def key_slot(key: np.ndarray) -> np.ndarray:
    """kernels/q15.cu q15_key_slot: the k-slot of key 8j + 2t + b of a 32-key step in P's A operand."""
    j, t, b = key >> 3, (key & 7) >> 1, key & 1
    return 16 * (j >> 1) + 4 * t + 2 * (j & 1) + b


def row_tiles(x: np.ndarray, dim_pad: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of int16 (r, d) as the kernel stores Q or K: (hi, lo) uint8 arrays of r rows of D + 16 bytes, zeros past
    d."""
    hi, lo = (np.zeros((x.shape[0], dim_pad + ROW_PAD), dtype=np.uint8) for _ in range(2))
    h, low = split(x)
    hi[:, :x.shape[1]], lo[:, :x.shape[1]] = h & 0xFF, low
    return hi.ravel(), lo.ravel()


def vt_tiles(v: np.ndarray, dim_pad: int) -> tuple[np.ndarray, np.ndarray]:
    """A key block of V (keys, d) as the kernel stores Vᵀ: D rows of 64 + 16 bytes, key κ at slot
    32·(κ/32) + q15_key_slot(κ mod 32), zeros past the block's keys and past d."""
    hi, lo = (np.zeros((dim_pad, BC + ROW_PAD), dtype=np.uint8) for _ in range(2))
    keys = np.arange(v.shape[0])
    slots = (keys & ~31) + key_slot(keys & 31)
    h, low = split(v)
    hi[:v.shape[1], slots], lo[:v.shape[1], slots] = (h & 0xFF).T, low.T
    return hi.ravel(), lo.ravel()


def scores(q_tiles, k_tiles, dim_pad: int) -> np.ndarray:
    """One warp's S = Q·Kᵀ of 16 rows × 64 keys, exact: z-layout (32 lanes, 8 n-tiles, 4) int64, as the kernel's
    four MMAs a k-step leave it before q15_join."""
    (qh, ql), (kh, kl), stride = q_tiles, k_tiles, dim_pad + ROW_PAD
    out = np.zeros((32, 8, 4), dtype=np.int64)
    for j in range(8):
        hh, mid, ll = (np.zeros((32, 4), dtype=np.int64) for _ in range(3))
        for ks in range(dim_pad // 32):
            ah, al = load_a(qh, 32 * ks, stride), load_a(ql, 32 * ks, stride)
            bh, bl = load_b(kh, 8 * j * stride + 32 * ks, stride), load_b(kl, 8 * j * stride + 32 * ks, stride)
            hh = mma(hh, ah, bh, True, True)
            mid = mma(mma(mid, ah, bl, True, False), al, bh, False, True)
            ll = mma(ll, al, bl, False, False)
        out[:, j] = join(hh, mid, ll)
    return out


def p_operand(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P (32 lanes, 8, 4) in the accumulator layout → its high- and low-byte A operands (2 steps, 32 lanes, 4),
    packed as kernels/q15.cu does: register reg of step s takes z[j][e], z[j][e+1], z[j+1][e], z[j+1][e+1] with
    j = 4s + 2·(reg/2), e = 2·(reg mod 2)."""
    ph, pl = np.zeros((2, 32, 4), dtype=np.uint32), np.zeros((2, 32, 4), dtype=np.uint32)
    for s in range(2):
        for reg in range(4):
            j, e = 4 * s + 2 * (reg >> 1), 2 * (reg & 1)
            quad = np.stack([p[:, j, e], p[:, j, e + 1], p[:, j + 1, e], p[:, j + 1, e + 1]], 1)
            ph[s, :, reg], pl[s, :, reg] = pack4(quad >> 8), pack4(quad & 0xFF)
    return ph, pl


def pv(p: np.ndarray, vt: tuple[np.ndarray, np.ndarray], dim_pad: int) -> np.ndarray:
    """One warp's Σ_keys p·v over a block: (32 lanes, D/8 n-tiles, 4) int64 in the accumulator layout."""
    ph, pl = p_operand(p)
    (vh, vl), stride = vt, BC + ROW_PAD
    out = np.zeros((32, dim_pad // 8, 4), dtype=np.int64)
    for nt in range(dim_pad // 8):
        hh, mid, ll = (np.zeros((32, 4), dtype=np.int64) for _ in range(3))
        for s in range(2):
            bh, bl = load_b(vh, 8 * nt * stride + 32 * s, stride), load_b(vl, 8 * nt * stride + 32 * s, stride)
            hh = mma(hh, ph[s], bh, False, True)
            mid = mma(mma(mid, ph[s], bl, False, False), pl[s], bh, False, True)
            ll = mma(ll, pl[s], bl, False, False)
        out[:, nt] = join(hh, mid, ll)
    return out


def warp_head(q: np.ndarray, k: np.ndarray, v: np.ndarray, params: q15.Q15Params, nq: int, w0: int) -> q15.Q15Out:
    """kernels/q15.cu for one warp: rows w0 .. w0 + 15 of a head's nq queries (q (nq, d), k and v (n, d) int16),
    the block loop to the warp's last key, then the division; the rows that exist (< nq) of its Q15Out."""
    n, d, causal = params.seq, params.dim, params.causal
    dim_pad, row0 = -(-d // 32) * 32, n - nq
    rows = np.zeros((16, d), dtype=np.int64)
    real = min(16, nq - w0)
    rows[:real] = q[w0:w0 + real]
    q_tiles = row_tiles(rows, dim_pad)
    key_end = row0 + min(nq, w0 + 16) if causal else n
    pos = row0 + w0 + np.stack([G, G + 8], 1)  # (32, 2): the lane's rows' positions
    m = np.full((32, 2), q15.INT32_MIN, dtype=np.int64)
    l = np.zeros((32, 2), dtype=np.int64)
    acc = np.zeros((32, dim_pad // 8, 4), dtype=np.int64)
    for j0 in range(0, key_end, BC):
        kb, vb = k[j0:j0 + BC], v[j0:j0 + BC]
        s = scores(q_tiles, row_tiles(np.pad(kb, ((0, BC - len(kb)), (0, 0))), dim_pad), dim_pad)
        z = np.clip(q15.round_shift(s * params.score_mult, params.score_shift), q15.INT32_MIN, q15.INT32_MAX)
        key = j0 + 8 * np.arange(8)[None, :, None] + 2 * T[:, None, None] + (np.arange(4) & 1)[None, None, :]
        row_pos = pos[:, np.arange(4) >> 1][:, None, :]  # (32, 1, 4)
        valid = (key < n) & ((key <= row_pos) if causal else True)
        top, seen = np.full((32, 2), q15.INT32_MIN, dtype=np.int64), np.zeros((32, 2), dtype=bool)
        for r in range(2):
            zr, vr = z[:, :, 2 * r:2 * r + 2], valid[:, :, 2 * r:2 * r + 2]
            top[:, r] = np.where(vr, zr, q15.INT32_MIN).reshape(32, -1).max(1)
            seen[:, r] = vr.reshape(32, -1).any(1)
        top = top.reshape(8, 4, 2).max(1).repeat(4, 0)  # q15_row_max over a row's 4 lanes
        seen = seen.reshape(8, 4, 2).any(1).repeat(4, 0)
        grow = seen & (top > m)
        alpha = np.where(grow, q15.exp2_q15(np.where(grow, top - m, 0)), 0)
        l = np.where(grow, q15.round_shift(l * alpha, 15), l)
        m = np.where(grow, top, m)
        p = np.where(valid, q15.exp2_q15(np.where(valid, m[:, np.arange(4) >> 1][:, None, :] - z, 0)), 0)
        sums = np.stack([p[:, :, :2].sum((1, 2)), p[:, :, 2:].sum((1, 2))], 1)
        l = l + sums.reshape(8, 4, 2).sum(1).repeat(4, 0)
        add = pv(p, vt_tiles(vb, dim_pad), dim_pad)
        g4, a4 = grow[:, np.arange(4) >> 1][:, None, :], alpha[:, np.arange(4) >> 1][:, None, :]
        acc = np.where(g4, q15.round_shift(acc * a4, 15), acc) + add
    # back to (16 rows, D) and the contract's division
    full = np.zeros((16, dim_pad), dtype=np.int64)
    for e in range(4):
        columns = 8 * np.arange(dim_pad // 8)[None, :] + (2 * T + (e & 1))[:, None]
        full[(G + 8 * (e >> 1))[:, None], columns] = acc[:, :, e]
    row_l = np.concatenate([l[::4, 0], l[::4, 1]])[:, None]
    out = q15.divide_q15(full[:, :d], row_l)
    return q15.Q15Out(out.o[:real], out.shift[:real])


def kernel_head(q: np.ndarray, k: np.ndarray, v: np.ndarray, params: q15.Q15Params) -> q15.Q15Out:
    """Every warp of a head (16 query rows each, in order): the head's values (nq, d) and shifts (nq,)."""
    parts = [warp_head(q, k, v, params, q.shape[0], w0) for w0 in range(0, q.shape[0], 16)]
    return q15.Q15Out(np.concatenate([p.o for p in parts]), np.concatenate([p.shift for p in parts]))
