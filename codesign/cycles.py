"""Cycles and traffic of one attention head on a `Datapath`: a closed form per stage (docs/codesign.md "Cycle
model"), cheap enough for a design-space explorer (no data needed, ~10⁴ configurations per second).

The head is a grid of steps (query tile t, key block b of the contract's Bc keys, host.q15.BC unless a tool asks for
another). Each step runs QKᵀ then P·V on the array (codesign/gemm.py gives each GEMM's folds, fill and drain for the
dataflow: QKᵀ's Bc keys fold over the C columns in ⌈Bc/C⌉ passes, P·V streams them as its reduction), and the
softmax unit's passes (block max, EXP2 of the block's p and the rows' α, rescale of l and A) on E lanes. The softmax
unit holds two blocks of scores and of P, so the array and the softmax unit overlap one step apart: under the serial
schedule in windows (codesign/serial_windows.py, what the RTL runs), window s holding the array for step s − 1's
P·V and step s + 1's QKᵀ and the softmax unit for step s, whose rescale waits for that P·V's last partials; the first
QKᵀ (the fill) and the last P·V (`array_tail`) stand alone. Under the overlap schedule a step costs the slower of
its array and softmax cycles, and the first step's softmax is exposed once (the fill). Each tile's divisions run on
the dividers after its last block (first a pass of d cycles over its accumulators for each row's peak |A|, which
sets the row's output shift g; then its r·d divisions in waves of D), overlapped with the next tile's windows (or
steps) when the O buffer holds two tiles' accumulators. DRAM moves each tile's Q tile, its K and V blocks (each
block once per head, by the first tile that visits it, when both buffers hold all of K and V) and its O tile (d Q15
words and one shift byte per row); with double-buffered inputs a tile's transfers overlap its compute and only the
excess stalls, otherwise they add. Causal heads visit, per tile, only the blocks up to the tile's last row (the
masked part of the diagonal block is computed and discarded).

That is the serial schedule (the Datapath's default, which the RTL runs). Under the overlap schedule a step's GEMMs hold
the array for their steady cycles only (codesign/gemm.py `overlapped`: the next fold's fill under the last one's drain),
each GEMM takes the faster of its two orientations (rows and columns swapped, `oriented`), the tile height is the
mapper's (`tile_rows`, default R), and the fill and drain of QKᵀ and of P·V are paid once a head (`array_tail`: the
first scores wait for QKᵀ's, the last partial sums for P·V's). A pipelined divider takes d + ⌈r·d/D⌉ + latency − 1
cycles per tile instead of d + ⌈r·d/D⌉ · latency, a reciprocal divider max(d, ⌈r/D⌉ · 34) + ⌈r·d/D⌉ + 2
(codesign/divider_cycles.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from codesign import divider_cycles
from codesign.buffers import WORD_BYTES, Buffers, buffering
from codesign.datapath import EXP_LATENCY, RESCALE_LATENCY, SCORE_LATENCY, Datapath
from codesign.gemm import gemm, oriented, overlapped, streamed
from codesign.serial_windows import Windows, serial_windows
from host.errors import SpecError
from host.checks import check_int
from host.q15 import BC, DIM_MAX, MODEL_BC_MAX, SEQ_MAX

SHIFT_BYTES = 1  # an output row's shift g


@dataclass(frozen=True)
class Stage:
    """One unit over the head: cycles it was busy, operations done, and its utilisation of its own capacity."""

    busy_cycles: int
    operations: int  # MACs (array), element operations (softmax unit), divisions (dividers)
    utilisation: float  # operations / (busy_cycles × the unit's parallelism); 0 when never busy


@dataclass(frozen=True)
class HeadCycles:
    """One head on one datapath: total cycles, per-stage figures, DRAM stalls, and the traffic per operand."""

    datapath: Datapath
    seq: int  # keys (the KV cache's length)
    dim: int
    causal: bool
    bc: int  # keys per block (the contract's)
    cycles: int
    stall_cycles: int  # cycles the compute waited for DRAM (prologue and epilogue included)
    stages: dict[str, Stage]  # array, softmax, divider
    traffic: dict[str, int]  # see TRAFFIC_KEYS
    useful_macs: int  # the MACs of the unmasked (query, key) pairs, both GEMMs
    buffering: dict[str, str]  # per buffer: "double", "single" or "resident"
    queries: int  # query rows: seq for self-attention, q_len for decode (the array's M)
    shared_kv: bool  # K and V were on chip already (a later query head of a group): none loaded from DRAM
    tile_rows: int  # Br, the query tile's height: R under the serial schedule, the mapper's under overlap
    orientation: str  # which index of each GEMM lies along the rows and the columns (a tile's full block)
    prologue: int  # cycles before anything computes (DRAM)
    fill: int  # the pipeline fill: the first step's QKᵀ (serial) or softmax (overlap)
    array_tail: int  # the last step's P·V (serial); QKᵀ's and P·V's fill and drain, paid once (overlap)
    divider_tail: int  # the last tile's divisions, exposed
    epilogue: int  # the last tile's O to DRAM
    fill_drain: int  # array cycles not streaming: every fold's fill, drain and loads (serial), or max(T, r) − T a
    # fold and the tails (overlap)

    @property
    def latency_s(self) -> float:
        return self.cycles / self.datapath.clock_hz

    @property
    def utilisation(self) -> float:
        """Useful MACs over what the array could do in the head's cycles."""
        return self.useful_macs / (self.cycles * self.datapath.rows * self.datapath.cols)


#: Traffic counters: DRAM in bytes, on-chip buffers and units in words (Q15 words; accumulators as whole entries).
TRAFFIC_KEYS = ("dram_read_q_bytes", "dram_read_k_bytes", "dram_read_v_bytes", "dram_write_o_bytes",
                "sram_write_q", "sram_write_k", "sram_write_v", "sram_read_q", "sram_read_k", "sram_read_v",
                "score_writes", "prob_reads", "acc_reads", "acc_writes", "sram_read_o", "exp_evals",
                "max_compares", "rescale_mults", "divisions", "reciprocals", "macs")


@dataclass(frozen=True)
class _Step:
    """One (tile, block) step of a given tile height and block width: its cycles and counts."""

    array: int
    softmax: int
    macs: int
    ops: int  # softmax-unit element operations
    counts: dict[str, int]
    tail: int  # overlap schedule: the fill and drain of the step's two GEMMs (0 under serial)
    orientation: str
    fill_drain: int  # the step's array cycles beyond streaming (folds · T of each GEMM)


#: The index along the rows, along the columns, and the streamed one, of a GEMM (M, N, K) per dataflow.
_SPATIAL = {"os": (0, 1, 2), "ws": (2, 1, 0), "is": (2, 0, 1)}


def _where(dataflow: str, names: tuple[str, str, str]) -> str:
    rows, cols, streamed = (names[i] for i in _SPATIAL[dataflow])
    return f"{rows} on rows, {cols} on columns, {streamed} streamed"


def _step(dp: Datapath, rows: int, keys: int, dim: int, first_block: bool, overlap: bool) -> _Step:
    if overlap:
        qk, qk_t = oriented(rows, keys, dim, dp.rows, dp.cols, dp.dataflow)
        pv, pv_t = oriented(rows, dim, keys, dp.rows, dp.cols, dp.dataflow)
        (qk_cycles, qk_tail), (pv_cycles, pv_tail) = overlapped(qk), overlapped(pv)
        tail = qk_tail + pv_tail  # the head's first scores come out after QKᵀ's fill, its last partials after P·V's
    else:
        qk = gemm(rows, keys, dim, dp.rows, dp.cols, dp.dataflow)  # scores: (rows, d) @ (d, keys)
        pv = gemm(rows, dim, keys, dp.rows, dp.cols, dp.dataflow)  # partials: (rows, keys) @ (keys, d)
        qk_t = pv_t = False
        qk_cycles, pv_cycles, tail = qk.cycles, pv.cycles, 0
    orientation = (f"QKᵀ {_where(dp.dataflow, ('keys', 'queries', 'd') if qk_t else ('queries', 'keys', 'd'))}; "
                   f"P·V {_where(dp.dataflow, ('d', 'queries', 'keys') if pv_t else ('queries', 'd', 'keys'))}")
    q_reads, k_reads = (qk.filter_reads, qk.ifmap_reads) if qk_t else (qk.ifmap_reads, qk.filter_reads)
    p_reads, v_reads = (pv.filter_reads, pv.ifmap_reads) if pv_t else (pv.ifmap_reads, pv.filter_reads)
    lanes = dp.exp_lanes
    compares, exps = rows * keys, rows * keys + rows  # block max; p of each key and α of each row
    rescales = 0 if first_block else rows * (dim + 1)  # l and the d accumulators of every row (clock-gated if idle)
    softmax = (-(-compares // lanes) + -(-exps // lanes) + -(-rescales // lanes) + SCORE_LATENCY
               + math.ceil(math.log2(keys)) + EXP_LATENCY + (RESCALE_LATENCY if rescales else 0))
    counts = {"sram_read_q": q_reads, "sram_read_k": k_reads, "score_writes": qk.ofmap_writes,
              "prob_reads": p_reads, "sram_read_v": v_reads,
              "acc_reads": pv.ofmap_writes + rows * dim * (not first_block),
              "acc_writes": pv.ofmap_writes + rows * dim * (not first_block),
              "exp_evals": exps, "max_compares": compares, "rescale_mults": rescales, "macs": qk.macs + pv.macs}
    fill_drain = qk_cycles + pv_cycles - streamed(qk) - streamed(pv)
    return _Step(qk_cycles + pv_cycles, softmax, qk.macs + pv.macs, compares + exps + rescales, counts, tail,
                 orientation, fill_drain)


def step_cycles(dp: Datapath, rows: int, keys: int, dim: int, first_block: bool, overlap: bool) -> tuple[int, int]:
    """(array, softmax) cycles of one step of `rows` query rows against a block of `keys` keys."""
    step = _step(dp, rows, keys, dim, first_block, overlap)
    return step.array, step.softmax


@dataclass(frozen=True)
class _Tiles:
    """The head's query tiles: each one's rows and visited blocks, and the steps it takes, grouped by kind."""

    rows: np.ndarray  # (tiles,) rows of each tile
    visited: np.ndarray  # (tiles,) key blocks each tile visits
    first_keys: int  # keys of a tile's first block, min(Bc, seq)
    kinds: list[tuple[int, int, bool, np.ndarray]]  # (rows, keys, first block, (tiles,) such steps of each tile)


def _tiles(br: int, seq: int, queries: int, causal: bool, bc: int) -> _Tiles:
    """The tiles of the head's `queries` rows (the contract's rows seq − queries .. seq − 1) and their steps. A
    tile's first step (block 0, no rescale) has min(Bc, seq) keys; its later steps are full blocks and, where it
    reaches it, the short last block. A causal tile visits the blocks up to its last row's own key."""
    R, Bc = br, bc
    row0 = seq - queries  # the first query's position: bottom-right alignment
    tiles = -(-queries // R)
    blocks = -(-seq // Bc)
    last_keys = seq - (blocks - 1) * Bc  # keys in the last block (Bc when seq is a multiple of Bc)
    t = np.arange(tiles)
    tile_rows = np.minimum(R, queries - t * R)
    visited = -(-np.minimum(seq, row0 + t * R + tile_rows) // Bc) if causal else np.full(tiles, blocks)
    partial = (visited == blocks) & (last_keys < Bc)  # the tile visits the short last block
    full = visited - partial
    first_keys = min(Bc, seq)
    later_full = full - (1 if first_keys == Bc else 0)
    later_short = partial.astype(np.int64) if blocks > 1 else np.zeros(tiles, dtype=np.int64)
    kinds = []
    for rows in sorted(set(tile_rows.tolist())):
        height = tile_rows == rows
        for keys, first, number in ((first_keys, True, np.ones(tiles, dtype=np.int64)), (Bc, False, later_full),
                                    (last_keys, False, later_short)):
            kinds.append((rows, keys, first, np.where(height, number, 0)))
    return _Tiles(tile_rows, visited, first_keys, kinds)


@dataclass(frozen=True)
class _Compute:
    """The array and the softmax unit over the head: per tile its compute cycles (its windows under serial; Σ over
    its steps of the slower of the two under overlap), both stages, the steps' traffic counts, the pipeline fill and
    the array's tail, and the serial schedule's windows."""

    per_tile: np.ndarray
    array: Stage
    softmax: Stage
    counts: dict[str, int]
    fill: int
    tail: int  # the last P·V (serial), the array's last fill and drain (overlap)
    orientation: str  # the first tile's full-block step's
    fill_drain: int
    windows: Windows | None  # serial only


def _compute(dp: Datapath, seq: int, dim: int, bc: int, tiles: _Tiles, overlap: bool) -> _Compute:
    """The array and softmax stages: each kind of step once (_step), times how many of it each tile takes; under
    the serial schedule each tile's time is its windows' (codesign/serial_windows.py)."""
    steps = {}  # (rows, keys, first) -> _Step, for the few kinds of step a head has

    def step(rows: int, keys: int, first: bool) -> _Step:
        key = (rows, keys, first)
        if key not in steps:
            steps[key] = _step(dp, rows, keys, dim, first, overlap)
        return steps[key]

    per_tile = np.zeros(len(tiles.rows), dtype=np.int64)
    array_busy = softmax_busy = macs = ops = tail = fill_drain = 0
    counts = dict.fromkeys(TRAFFIC_KEYS, 0)
    for rows, keys, first, n in tiles.kinds:
        total = int(n.sum())
        if total == 0:
            continue
        s = step(rows, keys, first)
        per_tile += n * max(s.array, s.softmax)
        tail = max(tail, s.tail)
        array_busy += total * s.array
        softmax_busy += total * s.softmax
        macs += total * s.macs
        fill_drain += total * s.fill_drain
        ops += total * s.ops
        for name, value in s.counts.items():
            counts[name] += total * value
    array_busy += tail
    array = Stage(array_busy, macs, macs / (array_busy * dp.rows * dp.cols) if array_busy else 0.0)
    softmax = Stage(softmax_busy, ops, ops / (softmax_busy * dp.exp_lanes) if softmax_busy else 0.0)
    first = step(int(tiles.rows[0]), tiles.first_keys, True)
    if overlap:
        return _Compute(per_tile, array, softmax, counts, first.softmax, tail, first.orientation, fill_drain + tail,
                        None)
    windows = serial_windows(dp, dim, seq, bc, tiles.rows, tiles.visited,
                             lambda rows, keys, first_block: step(rows, keys, first_block).softmax)
    return _Compute(windows.per_tile, array, softmax, counts, windows.fill, windows.tail, first.orientation,
                    fill_drain, windows)


@dataclass(frozen=True)
class _Dram:
    """DRAM over the head: each tile's time (its compute, stretched by the transfers it cannot hide), the prologue
    and epilogue cycles, and the K and V bytes each tile loads."""

    tile_time: np.ndarray
    prologue: int
    epilogue: int
    kv_bytes: np.ndarray


def _dram(dp: Datapath, seq: int, dim: int, bc: int, tiles: _Tiles, buffers: Buffers,
          compute: np.ndarray, shared_kv: bool) -> _Dram:
    """DRAM, every byte charged once. Before anything computes (prologue): tile 0's Q and the first K, V block.
    During tile t: its other K, V blocks (each block once per head when resident), the next tile's Q and the
    previous tile's O; each overlaps the tile's compute when its buffer is double, else adds to it. After the last
    tile (epilogue): its O. With `shared_kv` (K and V resident from the group's earlier query head) no K or V
    moves."""
    bw = dp.dram_bytes_per_cycle
    kv_keys = np.minimum(tiles.visited * bc, seq)  # keys of the blocks the tile visits
    q_bytes = tiles.rows * dim * WORD_BYTES
    o_bytes = tiles.rows * (dim * WORD_BYTES + SHIFT_BYTES)  # the tile's output: d Q15 words and g per row
    if shared_kv:
        kv_bytes = np.zeros_like(kv_keys)
    elif buffers.resident:  # each block is loaded once, by the first tile that visits it, and stays
        kv_bytes = 2 * np.diff(kv_keys, prepend=0) * dim * WORD_BYTES
    else:
        kv_bytes = 2 * kv_keys * dim * WORD_BYTES
    first_kv = 0 if shared_kv else 2 * tiles.first_keys * dim * WORD_BYTES
    kv_during = kv_bytes.copy()
    kv_during[0] -= first_kv
    q_next = np.append(q_bytes[1:], 0)
    o_previous = np.concatenate(([0], o_bytes[:-1]))
    overlapped = ((kv_during if buffers.kv_double else 0) + (q_next if buffers.q_double else 0)
                  + (o_previous if buffers.o_double else 0))
    exposed = ((0 if buffers.kv_double else kv_during) + (0 if buffers.q_double else q_next)
               + (0 if buffers.o_double else o_previous))
    tile_time = np.maximum(compute, np.ceil(overlapped / bw)) + np.ceil(exposed / bw)
    return _Dram(tile_time, math.ceil((int(q_bytes[0]) + first_kv) / bw), math.ceil(int(o_bytes[-1]) / bw), kv_bytes)


def _divider(dp: Datapath, dim: int, tiles: _Tiles, o_double: bool,
             tile_time: np.ndarray) -> tuple[Stage, int, int]:
    """The divider stage, the cycles of it the head waits for, and of those the last tile's: per tile the peak pass
    and the divisions (codesign/divider_cycles.py), beside the next tile's steps when the O buffer is double (only
    the excess and the last tile's exposed), else all."""
    divide = divider_cycles.tile_cycles(dp, dim, tiles.rows)
    busy = int(divide.sum())
    # double: tile t's divisions run beside tile t+1's steps
    exposed = int(np.maximum(divide[:-1] - tile_time[1:], 0).sum()) + int(divide[-1]) if o_double else busy
    divisions = int(tiles.rows.sum()) * dim  # queries · d
    used = divider_cycles.occupied(dp, divisions)
    return Stage(busy, divisions, used / (busy * dp.dividers)), exposed, int(divide[-1])


def _traffic(dp: Datapath, queries: int, dim: int, steps: dict[str, int], kv_bytes: np.ndarray) -> dict[str, int]:
    """Every traffic counter: the steps' on-chip counts, plus DRAM, the buffers' writes and the divisions."""
    counts = dict(steps)
    divisions = queries * dim
    dram_kv = int(kv_bytes.sum()) // 2
    counts.update(dram_read_q_bytes=queries * dim * WORD_BYTES, dram_read_k_bytes=dram_kv,
                  dram_read_v_bytes=dram_kv, dram_write_o_bytes=queries * (dim * WORD_BYTES + SHIFT_BYTES),
                  sram_write_q=queries * dim,
                  sram_write_k=dram_kv // WORD_BYTES, sram_write_v=dram_kv // WORD_BYTES,
                  sram_read_o=divisions, divisions=divisions,
                  reciprocals=divider_cycles.reciprocals(dp, queries))
    counts["acc_reads"] += 2 * divisions  # each accumulator read by the peak pass and by its division
    return counts


def useful_macs(seq: int, queries: int, dim: int, causal: bool) -> int:
    """The MACs of the unmasked (query, key) pairs of both GEMMs: query i (0-based, of the last `queries` rows) sees
    keys 0 .. seq − queries + i when causal, all seq keys otherwise."""
    row0 = seq - queries
    pairs = queries * row0 + queries * (queries + 1) // 2 if causal else queries * seq
    return 2 * pairs * dim


def head_cycles(dp: Datapath, seq: int, dim: int, causal: bool, bc: int = BC, queries: int | None = None,
                shared_kv: bool = False, tile_rows: int | None = None, overlap: bool | None = None) -> HeadCycles:
    """The cycle and traffic model of one head (`queries` rows, default seq, against seq keys of dim; key blocks of
    `bc`) on `dp`; SpecError when a buffer cannot hold one tile or block. The rows are the contract's last ones (seq −
    queries .. seq − 1: a decode step's causal mask aligned to the bottom right), tiled R at a time onto the array's
    rows (or `tile_rows` at a time, the mapper's choice under the overlap schedule). `overlap`: the folds pipelined and
    each GEMM oriented (default: when the datapath's schedule is overlap; the mapper also tries its folds back to back,
    as the serial schedule runs them). `shared_kv`: K and V are already resident (a later query head of a group; only
    when they fit). The stages' closed forms (array and softmax unit per step, DRAM per tile, dividers per tile) summed:
    the prologue, the first step's softmax (the fill), every tile's time, the array's last fill and drain (overlap), the
    dividers' exposed cycles, the epilogue."""
    check_int("seq", seq, 1, SEQ_MAX)
    check_int("dim", dim, 1, DIM_MAX)
    check_int("bc", bc, 1, MODEL_BC_MAX)
    queries = seq if queries is None else check_int("q_len", queries, 1, seq)
    br = dp.rows if tile_rows is None else check_int("tile_rows", tile_rows, 1, SEQ_MAX)
    buffers = buffering(dp, seq, dim, bc, br)
    if shared_kv and not buffers.resident:
        raise SpecError(f"K and V of seq {seq}, dim {dim} do not fit the K/V buffers "
                        f"({min(dp.k_buffer_kb, dp.v_buffer_kb):g} KB each): they cannot stay on chip for a group")
    tiles = _tiles(br, seq, queries, causal, bc)
    compute = _compute(dp, seq, dim, bc, tiles, dp.schedule == "overlap" if overlap is None else overlap)
    dram = _dram(dp, seq, dim, bc, tiles, buffers, compute.per_tile, shared_kv)
    # the cycles beside which tile t − 1's divisions run: tile t's, or under serial the windows between two takes
    beside = dram.tile_time if compute.windows is None else compute.windows.divider_windows(dram.tile_time)
    divider, divider_exposed, divider_tail = _divider(dp, dim, tiles, buffers.o_double, beside)
    stall = dram.prologue + int((dram.tile_time - compute.per_tile).sum()) + dram.epilogue
    cycles = (dram.prologue + compute.fill + int(dram.tile_time.sum()) + compute.tail + divider_exposed
              + dram.epilogue)
    stages = {"array": compute.array, "softmax": compute.softmax, "divider": divider}
    return HeadCycles(dp, seq, dim, causal, bc, cycles, stall, stages,
                      _traffic(dp, queries, dim, compute.counts, dram.kv_bytes),
                      useful_macs(seq, queries, dim, causal), buffers.names, queries, shared_kv, br,
                      compute.orientation, dram.prologue, compute.fill, compute.tail, divider_tail, dram.epilogue,
                      compute.fill_drain)
