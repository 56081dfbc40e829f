"""One record per GPU kernel variant: its source, the functions it launches (name expressions of template
instantiations), threads per block, dynamic shared memory, grid and tile configurations.

The planner (kernels/target.py), the CuPy launcher (kernels/cuda.py), the numpy fake (kernels/fake.py) and the budget
tool (kernels/budget.py) all read these records, so a variant's facts are written once:

| variant       | kernel | path (Plan.path) | source        | dtypes            | tile                                 |
|---------------|--------|------------------|---------------|-------------------|--------------------------------------|
| `naive`       | naive  | any              | naive.cu      | float32           | none: 16×16 thread tiles             |
| `fused`       | fused  | any              | fused.cu      | float32           | none: one block per query row        |
| `flash`       | flash  | simt             | flash.cu      | float32           | (Br, Bc) from TILE_CHOICES           |
| `flash_tf32`  | flash  | 3xtf32           | flash_tf32.cu | float32           | TF32_CONFIGS per (d, causal)         |
| `flash_tc`    | flash  | mma.sync         | flash_tc.cu   | float16, bfloat16 | TC_CONFIGS per (d, causal)           |
| `flash_wgmma` | flash  | wgmma            | flash_wgmma.cu| float16, bfloat16 | WGMMA_CONFIGS per d                  |
| `split_tc`    | flash  | split-kv         | flash_tc.cu   | float16, bfloat16 | SPLIT_TC_CONFIG, blocks planned      |
| `split_tf32`  | flash  | split-kv         | flash_tf32.cu | float32           | SPLIT_TF32_CONFIG, blocks planned    |
| `split_wgmma` | flash  | split-wgmma      | decode_wgmma.cu | fp16, bf16      | WGMMA_SPLIT_CONFIGS, blocks planned  |

A variant's `launches(problem, br, bc, parts)` gives each kernel launch of one call: the function, its grid and
block, its dynamic shared memory in bytes, its arguments by name (ARGS says what each name is; kernels/cuda.py binds
the buffers and floats) and its integer arguments' values. Every kernel takes any shape of the problem: q_len
queries against seq keys (the causal mask aligned to the bottom right) and kv_heads K/V heads (kernels/kv_rows.cuh).
The split-KV variants (the decode path) pack a K/V head's query heads into one launch head, so that a block reads
its K and V once for the whole group, and share the (tile, key block) units among `parts` blocks in near-equal
contiguous shares (kernels/shares.py, kernels/kv_rows.cuh); the partial states of the tiles a share boundary cut
are merged in place by the 16-bit split kernels where a tile has few rows (`merges_in_place`: the block finishing a
tile's last piece, one launch, kernels/split_merge.cuh), else by a second launch (kernels/split_combine.cu). Nothing
here imports CuPy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from host.checks import check_int
from host.errors import SpecError
from host.problem import AttentionProblem
from kernels.halves import HALF_DTYPES
from kernels.shares import check_parts, partial_segments
from kernels.launch_configs import (  # noqa: F401 - re-exported: the launch records' configurations
    FLOAT_BYTES, TILE_RANGE, row_strides, flash_smem_bytes, flash_tf32_smem_bytes, flash_tc_smem_bytes,
    flash_wgmma_smem_bytes, flash_wgmma_threads, decode_wgmma_smem_bytes, TcConfig, Tf32Config, WgmmaConfig,
    WgmmaSplitConfig, TC_CONFIGS, TF32_CONFIGS, WGMMA_CONFIGS, WGMMA_SPLIT_CONFIGS, WGMMA_SPLIT_THREADS, TC_DIMS,
    TF32_DIMS, TILE_CHOICES, DEFAULT_TILES, TC_TYPES, WGMMA_TYPES, WGMMA_BCS, check_tile, check_wgmma_config)

#: CUDA's limit on a grid's x extent, where the flash kernels put query tiles × (batch, head) pairs.
MAX_GRID_X = 2**31 - 1
#: Dynamic shared memory a kernel gets without raising its max_dynamic_shared_size_bytes attribute.
SMEM_DEFAULT_LIMIT = 48 * 1024

#: What each launch argument name stands for (kernels/cuda.py binds the buffers and floats; each Launch carries its
#: integer arguments' values, int32).
ARGS = {
    "q": "Q, (B·H, q_len, d) in the problem's storage (float32, or 16-bit bit patterns)",
    "k": "K, (B·Hkv, N, d)",
    "v": "V, (B·Hkv, N, d)",
    "out": "O, (B·H, q_len, d), poisoned with NaN before the first launch",
    "s": "the naive kernel's scores S, then P in place: (B·H, q_len, N) float32",
    "o_part": "the split-KV partial outputs, (2·parts, Br, d) float32: two slots a block (kernels/kv_rows.cuh)",
    "lse": "the split-KV partial log-sums (base 2), (2·parts, Br) float32",
    "tickets": "the split tiles' piece counters of an in-place merge, one int32 a tile, 0 between launches",
    "n": "N, the keys, as int32",
    "nq": "query rows of a launch head (q_len; packed: the group's G·q_len)",
    "qlen": "queries per query head (row r is query r mod qlen)",
    "group": "launch heads per K/V head (heads / kv_heads; packed: 1)",
    "heads": "launch heads (packed: B·Hkv)",
    "parts": "blocks of a split-KV launch sharing the (tile, key block) units (0: a prefill launch, a block a tile)",
    "rows": "rows the split-KV combine looks at: B·H·q_len",
    "d": "d as int32",
    "scale": "1/√d as float32",
    "scale_log2": "log2(e)/√d as float32 (the kernels' exponentials are base 2)",
    "causal": "1 for the causal mask, else 0, as int32",
    "q_map": "the copy engine's map of Q, boxes of Br rows (kernels/hopper.py)",
    "k_map": "the copy engine's map of K, boxes of Bc rows",
    "v_map": "the copy engine's map of V, boxes of Bc rows",
}
#: The most blocks the planner shares a split-KV launch's units among beyond one a tile (a launch takes up to
#: MAX_GRID_X, one a tile at most that many tiles).
MAX_PARTS = 1 << 16


def flash_grid(n: int, br: int, bh: int) -> int:
    """Blocks of one flash launch: ⌈rows / Br⌉ query tiles × launch heads on the grid's x axis, in the order
    kernels/tile_order.cuh reads (causal launches run their longest tiles first across all heads)."""
    return -(-n // br) * bh


class HeadRows(NamedTuple):
    """How a launch sees the problem's heads (kernels/kv_rows.cuh): `heads` launch heads of `nq` query rows each,
    each query head's `qlen` queries, `group` launch heads per K/V head."""

    heads: int
    nq: int
    qlen: int
    group: int


def head_rows(problem: AttentionProblem, packed: bool = False) -> HeadRows:
    """Unpacked: a launch head per query head (B·H of q_len rows, K/V head h // G); packed: a launch head per K/V
    head, its G query heads' rows one after another (B·Hkv of G·q_len rows: Q's memory order)."""
    group = problem.heads // problem.kv_head_count
    if packed:
        return HeadRows(problem.batch * problem.kv_head_count, group * problem.queries, problem.queries, 1)
    return HeadRows(problem.batch * problem.heads, problem.queries, problem.queries, group)


def shape_ints(problem: AttentionProblem, rows: HeadRows | None = None, **more: int) -> tuple[tuple[str, int], ...]:
    """A launch's integer arguments by name: the shape (nq, qlen, n, group, d, causal) and `more`."""
    rows = rows or head_rows(problem)
    return tuple({"nq": rows.nq, "qlen": rows.qlen, "n": problem.seq, "group": rows.group, "d": problem.dim,
                  "causal": int(problem.causal), **more}.items())


# ---------------------------------------------------------------------------------------------------------- records

@dataclass(frozen=True)
class Launch:
    """One kernel launch of a call: the function (a name expression where the source is a template), its grid and
    block, dynamic shared memory in bytes, its arguments by name (ARGS), the values of its integer arguments, and
    its source where that is not the variant's (the split-KV combine)."""

    function: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    smem: int
    args: tuple[str, ...]
    ints: tuple[tuple[str, int], ...] = ()
    source: str = ""


@dataclass(frozen=True)
class Variant:
    """A kernel variant: which row kernel it serves, the plan path that picks it, its source under kernels/, the
    dtypes it computes in and, for messages, its label (what a refused launch names) and what runs (in words).

    `templated`: its functions are template instantiations, compiled with their name expressions; `sm90a`: built by
    kernels/hopper.py for the architecture-specific sm_90a target with tensor maps, not by CuPy's RawModule."""

    name: str
    kernel: str
    path: str
    source: str
    dtypes: tuple[str, ...]
    label: str
    templated: bool = True
    sm90a: bool = False

    def launches(self, problem: AttentionProblem, br: int, bc: int, parts: int = 0) -> tuple[Launch, ...]:
        raise NotImplementedError

    def smem(self, problem: AttentionProblem, br: int, bc: int, parts: int = 0) -> int:
        """Dynamic shared memory of one block of the call's largest launch, in bytes."""
        return max(launch.smem for launch in self.launches(problem, br, bc, parts))

    def expressions(self, problem: AttentionProblem, br: int, bc: int, parts: int = 0) -> tuple[str, ...]:
        """The name expressions this call compiles from the variant's source (none for plain extern "C" kernels;
        a launch from another source compiles there)."""
        return tuple(launch.function for launch in self.launches(problem, br, bc, parts)
                     if not launch.source) if self.templated else ()


@dataclass(frozen=True)
class Naive(Variant):
    """S = Q·Kᵀ in 16×16 thread tiles, a row softmax of 256 threads per row, then P·V in 16×16 thread tiles."""

    tile: int = 16
    softmax_threads: int = 256

    def launches(self, problem: AttentionProblem, br: int, bc: int, parts: int = 0) -> tuple[Launch, ...]:
        bh, nq, n, d, t = problem.batch * problem.heads, problem.queries, problem.seq, problem.dim, self.tile
        ints = shape_ints(problem)
        return (Launch("naive_scores", (-(-n // t), -(-nq // t), bh), (t, t), 0,
                       ("q", "k", "s", "nq", "n", "group", "d", "scale", "causal"), ints),
                Launch("naive_softmax", (nq, bh), (self.softmax_threads,), 0, ("s", "nq", "n"), ints),
                Launch("naive_pv", (-(-d // t), -(-nq // t), bh), (t, t), 0,
                       ("s", "v", "out", "nq", "n", "group", "d"), ints))


@dataclass(frozen=True)
class Fused(Variant):
    """One block of 256 threads per query row, its N scores (and 32 floats of reduction scratch) in shared memory."""

    threads: int = 256

    def launches(self, problem: AttentionProblem, br: int, bc: int, parts: int = 0) -> tuple[Launch, ...]:
        return (Launch("fused_row", (problem.queries, problem.batch * problem.heads), (self.threads,),
                       FLOAT_BYTES * (problem.seq + 32),
                       ("q", "k", "v", "out", "nq", "n", "group", "d", "scale_log2", "causal"), shape_ints(problem)),)


FLASH_ARGS = ("q", "k", "v", "out", "nq", "n", "group", "scale_log2", "causal")
#: The mma.sync kernels' arguments: the split-KV buffers and the packing beside the shape.
SPLIT_ARGS = ("q", "k", "v", "out", "o_part", "lse", "nq", "qlen", "n", "group", "heads", "parts", "scale_log2",
              "causal")
#: ... and the mma.sync 16-bit kernel's, which also takes the split tiles' tickets (its MERGE instances merge the
#: partial states in place, kernels/split_merge.cuh, as the Hopper split kernel's do).
TC_ARGS = SPLIT_ARGS[:6] + ("tickets",) + SPLIT_ARGS[6:]


@dataclass(frozen=True)
class Flash(Variant):
    """The FFMA flash kernel: a Br × Bc tile of any TILE_CHOICES, 128 threads, flash_smem_bytes."""

    threads: int = 128

    def launches(self, problem: AttentionProblem, br: int, bc: int, parts: int = 0) -> tuple[Launch, ...]:
        d, rows = problem.dim, head_rows(problem)
        return (Launch(f"flash_fwd<{br},{bc},{d}>", (flash_grid(rows.nq, br, rows.heads),),
                       (self.threads,), flash_smem_bytes(br, bc, d), FLASH_ARGS, shape_ints(problem, rows)),)


def packed_tiles(problem: AttentionProblem, br: int) -> int:
    """The tiles of a split-KV launch: a K/V head's packed rows in Br-row tiles, for each (batch, K/V head)."""
    rows = head_rows(problem, packed=True)
    return flash_grid(rows.nq, br, rows.heads)


def has_partials(problem: AttentionProblem, br: int, bc: int, parts: int) -> bool:
    """Whether a split-KV launch of `parts` blocks (0: a block a tile) leaves partial states: a share boundary cuts a
    tile."""
    return bool(parts) and partial_segments(packed_tiles(problem, br), -(-problem.seq // bc), parts) > 0


#: The most packed rows a tile may have for its split kernel to merge it in place: the block that merges a tile
#: does all of its rows, one warp a row, each row a chain of L2 round trips. At q_len 1 in a group of 4 (4 rows)
#: that was a few µs at the end of the launch; at q_len 16 (64 rows on 4 warps) it was 30–40 µs where the separate
#: combine spreads the rows over the whole GPU (an H100, reports/issue-32/gpu/run9_merge_h100: q_len 16, batch 1, 4k
#: 61.2 µs against 22.3 with the combine launch in run 8).
MERGE_MAX_ROWS = 16


def merges_in_place(of: Variant, problem: AttentionProblem) -> bool:
    """Whether `of`'s launch for `problem` merges its cut tiles in place (one launch) rather than by the combine
    launch: a variant built to (`merges`) on a problem whose K/V head packs at most MERGE_MAX_ROWS rows."""
    return getattr(of, "merges", False) and head_rows(problem, packed=True).nq <= MERGE_MAX_ROWS


def mma_launches(of: "FlashTc | FlashTf32 | SplitWgmma", problem: AttentionProblem, function: str, br: int, bc: int,
                 threads: int, smem: int, parts: int, args: tuple[str, ...] = SPLIT_ARGS) -> tuple[Launch, ...]:
    """The launches of an mma.sync flash call: the kernel on tiles × launch heads blocks, or for the split-KV variants
    (which pack) on `parts` blocks sharing the (tile, key block) units (0: a block a tile), then the combine where a
    share boundary cut a tile (kernels/split_combine.cu, 4 rows per 128-thread block)."""
    rows = head_rows(problem, packed=of.split)
    tiles, key_blocks = flash_grid(rows.nq, br, rows.heads), -(-problem.seq // bc)
    if parts and not of.split:
        raise SpecError(f"{of.label} writes O directly; parts={parts} needs a split-KV variant")
    if of.split:  # 0: a block a tile (whole tiles, no combine)
        parts = check_parts(check_int("parts", parts or tiles, 1, MAX_GRID_X), tiles, key_blocks)
    kernel = Launch(function, (parts or tiles,), (threads,), smem, args,
                    shape_ints(problem, rows, heads=rows.heads, parts=parts))
    if not parts or not partial_segments(tiles, key_blocks, parts) or merges_in_place(of, problem):
        return (kernel,)
    total = problem.batch * problem.heads * problem.queries
    out_type = TC_TYPES.get(problem.dtype, "float")
    return (kernel, Launch(f"split_combine<{out_type},{problem.dim},{br},{bc}>", (-(-total // 4),), (128,), 0,
                           ("o_part", "lse", "out", "rows", "nq", "n", "heads", "parts"),
                           (("rows", total), ("nq", rows.nq), ("n", problem.seq), ("heads", rows.heads),
                            ("parts", parts)), source="split_combine.cu"))


@dataclass(frozen=True)
class FlashTf32(Variant):
    """The 3xTF32 flash kernel: its launch per (d, causal) from TF32_CONFIGS, 32 threads per warp."""

    configs: tuple[tuple[tuple[int, bool], Tf32Config], ...] = tuple(TF32_CONFIGS.items())
    split: bool = False  # the split-KV decode variant: packed heads, `parts` blocks sharing the keys

    def config(self, problem: AttentionProblem) -> Tf32Config:
        return _config(self, dict(self.configs), (problem.dim, problem.causal))

    def launches(self, problem: AttentionProblem, br: int, bc: int, parts: int = 0) -> tuple[Launch, ...]:
        c, d = self.config(problem), problem.dim
        check_config_tile(self, c, problem, br, bc)
        shared = ",true" if self.split else ""  # the segment loop (kernels/kv_rows.cuh) in split instances only
        return mma_launches(self, problem, f"flash_tf32_fwd<{d},{c.warps},{bc},{c.m_tiles},"
                                           f"{str(c.q_in_regs).lower()}{shared}>", br, bc, 32 * c.warps,
                            flash_tf32_smem_bytes(br, bc, d), parts)


@dataclass(frozen=True)
class FlashTc(Variant):
    """The mma.sync tensor-core flash kernel: its launch per (d, causal) from TC_CONFIGS, 32 threads per warp."""

    configs: tuple[tuple[tuple[int, bool], TcConfig], ...] = tuple(TC_CONFIGS.items())
    split: bool = False  # the split-KV decode variant: packed heads, `parts` blocks sharing the keys
    few_rows: TcConfig | None = None  # the split variant's launch where a K/V head's packed rows fit its Br
    #: the split variant merges a cut tile in place (the block finishing its last piece), one launch, where a tile
    #: has few rows (merges_in_place)
    merges: bool = False

    def config(self, problem: AttentionProblem) -> TcConfig:
        config = _config(self, dict(self.configs), (problem.dim, problem.causal))
        if self.few_rows is not None and head_rows(problem, packed=self.split).nq <= self.few_rows.br:
            return self.few_rows
        return config

    def launches(self, problem: AttentionProblem, br: int, bc: int, parts: int = 0) -> tuple[Launch, ...]:
        c, d = self.config(problem), problem.dim
        check_config_tile(self, c, problem, br, bc)
        # the template's defaults: two stages, one key warp, no segment loop (split instances only)
        stages = (f",{c.stages},{c.key_warps},true{',true' * merges_in_place(self, problem)}" if self.split
                  else f",{c.stages},{c.key_warps}" if c.key_warps != 1 else f",{c.stages}" if c.stages != 2 else "")
        return mma_launches(self, problem, f"flash_tc_fwd<{TC_TYPES[problem.dtype]},{d},{c.warps},{bc},{c.m_tiles}"
                                           f"{stages}>", br, bc, 32 * c.warps,
                            flash_tc_smem_bytes(br, bc, d, c.stages), parts, TC_ARGS)


@dataclass(frozen=True)
class FlashWgmma(Variant):
    """The Hopper kernel: its launch per d from WGMMA_CONFIGS, a producer and `consumers` consumer warpgroups,
    Q, K and V read through the copy engine's tensor maps."""

    configs: tuple[tuple[int, WgmmaConfig], ...] = tuple(WGMMA_CONFIGS.items())

    def __post_init__(self):
        for dim, config in self.configs:
            check_wgmma_config(config, dim)

    def config(self, problem: AttentionProblem) -> WgmmaConfig:
        return _config(self, dict(self.configs), problem.dim)

    def launches(self, problem: AttentionProblem, br: int, bc: int, parts: int = 0) -> tuple[Launch, ...]:
        c, d, rows = self.config(problem), problem.dim, head_rows(problem)
        check_config_tile(self, c, problem, br, bc)
        tiles = flash_grid(rows.nq, br, rows.heads)
        # the template's flags past the schedule: PERSISTENT (a grid of c.blocks walking the tiles), EARLY_K
        flags = f",{str(bool(c.blocks)).lower()},true" if c.early_k else ",true" if c.blocks else ""
        return (Launch(f"flash_wgmma_fwd<{WGMMA_TYPES[problem.dtype]},{d},{bc},{c.consumers},{c.stages},{c.schedule}"
                       f"{flags}>", (min(tiles, c.blocks) if c.blocks else tiles,),
                       (flash_wgmma_threads(c.consumers),),
                       flash_wgmma_smem_bytes(d, bc, c.consumers, c.stages, bool(c.blocks), c.early_k),
                       ("q_map", "k_map", "v_map", "out", "nq", "n", "group", "heads", "scale_log2", "causal"),
                       shape_ints(problem, rows, heads=rows.heads)),)


@dataclass(frozen=True)
class SplitWgmma(Variant):
    """The Hopper split-KV decode kernel (kernels/decode_wgmma.cu): packed 64-row tiles, one consumer and one producer
    warpgroup a block, `parts` blocks sharing the (tile, key block) units, the combine where a share cut a tile."""

    configs: tuple[tuple[int, WgmmaSplitConfig], ...] = tuple(WGMMA_SPLIT_CONFIGS.items())
    split: bool = True
    #: merges a cut tile in place (the block finishing its last piece), one launch, where a tile has few rows
    #: (merges_in_place)
    merges: bool = False

    def config(self, problem: AttentionProblem) -> WgmmaSplitConfig:
        return _config(self, dict(self.configs), problem.dim)

    def launches(self, problem: AttentionProblem, br: int, bc: int, parts: int = 0) -> tuple[Launch, ...]:
        c, d = self.config(problem), problem.dim
        check_config_tile(self, c, problem, br, bc)
        return mma_launches(self, problem, f"decode_wgmma_fwd<{WGMMA_TYPES[problem.dtype]},{d},{bc},{c.stages}"
                                           f"{',true' * merges_in_place(self, problem)}>",
                            br, bc, WGMMA_SPLIT_THREADS, decode_wgmma_smem_bytes(d, bc, c.stages), parts,
                            ("q_map", "k_map", "v_map", "out", "o_part", "lse", "tickets", "nq", "qlen", "n", "heads",
                             "parts", "scale_log2", "causal"))


def check_config_tile(of: Variant, config: "TcConfig | Tf32Config | WgmmaConfig", problem: AttentionProblem,
                      br: int, bc: int) -> None:
    """SpecError unless (br, bc) is the tile the kernel's launch configuration is built with: its grid is sized
    from br while the kernel's own rows come from the configuration, so another br would index past the heads."""
    if (br, bc) != (config.br, config.bc):
        raise SpecError(f"{of.label} runs Br={config.br}, Bc={config.bc} at d {problem.dim} (kernels/variants.py); "
                        f"asked for Br={br}, Bc={bc}")


def _config(of: Variant, configs: dict, key: int | tuple[int, bool]):
    """The launch configuration under `key` (d, or (d, causal)); SpecError naming the dimensions built."""
    if key not in configs:
        dims = sorted({k[0] if isinstance(k, tuple) else k for k in configs})
        dim = key[0] if isinstance(key, tuple) else key
        raise SpecError(f"kernels/{of.source} is built for d {', '.join(map(str, dims))}; d={dim}")
    return configs[key]


NAIVE = Naive("naive", "naive", "", "naive.cu", ("float32",), "naive", templated=False)
FUSED = Fused("fused", "fused", "", "fused.cu", ("float32",), "fused", templated=False)
FLASH = Flash("flash", "flash", "simt", "flash.cu", ("float32",), "flash")
FLASH_TF32 = FlashTf32("flash_tf32", "flash", "3xtf32", "flash_tf32.cu", ("float32",), "3xTF32 flash")
FLASH_TC = FlashTc("flash_tc", "flash", "mma.sync", "flash_tc.cu", HALF_DTYPES, "tensor-core flash (mma.sync)")
FLASH_WGMMA = FlashWgmma("flash_wgmma", "flash", "wgmma", "flash_wgmma.cu", HALF_DTYPES,
                         "tensor-core flash (wgmma)", sm90a=True)
#: The split-KV (decode) launches: 64 query rows a block (4 warps of one m-tile), so that a group's G·q_len packed
#: rows waste little of a tile at decode's few queries; 64-key blocks (16-bit) and 32-key blocks (float32, whose
#: tiles are twice the bytes), both dimensions alike. 16-bit: three stages, two key blocks in flight per block
#: (decode is a stream of K and V: with two stages the H200 ran batch 1 at 0.84 of its copy bandwidth).
SPLIT_TC_CONFIG = TcConfig(4, 64, 1, 3)
#: ... and where a K/V head's packed rows are 16 or fewer (one query of a group of up to 16: decode proper), one row
#: block of 16 and the four warps splitting every 64-key block four ways, so that no warp idles on padding rows.
SPLIT_TC_FEW_ROWS = TcConfig(4, 64, 1, 3, 4)
SPLIT_TF32_CONFIG = Tf32Config(4, 32, 1, False)
SPLIT_TC = FlashTc("split_tc", "flash", "split-kv", "flash_tc.cu", HALF_DTYPES, "split-KV tensor-core flash (mma.sync)",
                   configs=tuple(((d, causal), SPLIT_TC_CONFIG) for d in TC_DIMS for causal in (False, True)),
                   split=True, few_rows=SPLIT_TC_FEW_ROWS, merges=True)
SPLIT_TF32 = FlashTf32("split_tf32", "flash", "split-kv", "flash_tf32.cu", ("float32",), "split-KV 3xTF32 flash",
                       configs=tuple(((d, causal), SPLIT_TF32_CONFIG) for d in TF32_DIMS for causal in (False, True)),
                       split=True)
#: The Hopper split-KV launch (kernels/decode_wgmma.cu): every 16-bit decode head on Hopper by default (kernels/
#: plan.py WGMMA_SPLIT_AUTO); at 64 packed rows (q_len 16 in a Llama-style group of 4) mma.sync's split kernel is bound
#: by its shared-memory reads, and at 4 this one is level or faster though its tile is mostly padding.
SPLIT_WGMMA = SplitWgmma("split_wgmma", "flash", "split-wgmma", "decode_wgmma.cu", HALF_DTYPES,
                         "split-KV tensor-core flash (wgmma)", sm90a=True, merges=True)
#: The plan paths whose launches pack a K/V head's query heads and share the keys among blocks.
SPLIT_PATHS = ("split-kv", "split-wgmma")
#: Every variant by name.
VARIANTS: dict[str, Variant] = {v.name: v for v in (NAIVE, FUSED, FLASH, FLASH_TF32, FLASH_TC, FLASH_WGMMA, SPLIT_TC,
                                                    SPLIT_TF32, SPLIT_WGMMA)}


def variant(kernel: str, dtype: str, path: str) -> Variant:
    """The variant that runs `kernel` for a problem of `dtype` on plan path `path`: naive and fused whatever the
    path; flash on path "split-kv" the split-KV variant of its dtype, in 16 bits on "split-wgmma" the Hopper one;
    flash in 16 bits wgmma on path "wgmma", else mma.sync; flash in float32 3xTF32 on path "3xtf32", else FFMA.
    SpecError for an unknown kernel or a 16-bit naive or fused."""
    if kernel not in ("naive", "fused", "flash"):
        raise SpecError(f"kernel {kernel!r} is unknown; allowed: naive, fused, flash")
    if dtype in HALF_DTYPES and kernel != "flash":
        raise SpecError(f"kernel {kernel!r} computes in float32 only; {dtype} runs on flash")
    if kernel != "flash":
        return VARIANTS[kernel]
    if path == "split-kv":
        return SPLIT_TC if dtype in HALF_DTYPES else SPLIT_TF32
    if path == "split-wgmma" and dtype in HALF_DTYPES:
        return SPLIT_WGMMA
    if dtype in HALF_DTYPES:
        return FLASH_WGMMA if path == "wgmma" else FLASH_TC
    return FLASH_TF32 if path == "3xtf32" else FLASH
