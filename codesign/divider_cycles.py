"""The divider stage's cycles per query tile (codesign/cycles.py takes them for its divider stage): after a tile's
last key block, a pass of d cycles over its accumulators finds each row's peak |A| (column c of every row in cycle
c), which sets the row's output shift g; then the tile's r·d quotients on the D divider lanes, by the datapath's
divider (codesign/datapath.py DIVIDERS; every kind gives host/q15.py's bits, codesign/bits.py):

    iterative    d + ⌈r·d/D⌉ · L                         a wave of D divisions every L = div_latency cycles
    pipelined    d + ⌈r·d/D⌉ + L − 1                     a wave a cycle, the last out L − 1 cycles after it entered
    reciprocal   max(d, ⌈r/D⌉ · Lr) + ⌈r·d/D⌉ + Lp − 1   each lane one row's reciprocal in Lr = RECIPROCAL_LATENCY
                                                         cycles (it needs l only, so it runs beside the peak pass),
                                                         then a wave of products a cycle, Lp = PRODUCT_LATENCY deep

The reciprocal lane (codesign/reciprocal.py): m = ⌊2^(31+ℓ)/l'⌋ + 1 once a row, then ⌊n·m / 2^(31+ℓ)⌋ for each of its
d numerators n; the products wait for the peak pass, since n is A shifted by g − s.
"""

from __future__ import annotations

import numpy as np

from codesign.datapath import PRODUCT_LATENCY, RECIPROCAL_LATENCY, Datapath


def tile_cycles(dp: Datapath, dim: int, rows: np.ndarray) -> np.ndarray:
    """The divider stage's cycles for each query tile of `rows` rows (an array), peak pass included."""
    rows = np.asarray(rows, dtype=np.int64)
    waves = -(-(rows * dim) // dp.dividers)
    if dp.divider == "pipelined":
        return dim + waves + dp.div_latency - 1
    if dp.divider == "reciprocal":
        reciprocals = -(-rows // dp.dividers) * RECIPROCAL_LATENCY
        return np.maximum(dim, reciprocals) + waves + PRODUCT_LATENCY - 1
    return dim + waves * dp.div_latency


def occupied(dp: Datapath, divisions: int) -> int:
    """Divider-cycles the divisions hold a lane for (the stage's utilisation is this over busy cycles × D): L each
    on an iterative divider, one each on a pipelined divider or a reciprocal lane's multiplier."""
    return divisions * dp.div_latency if dp.divider == "iterative" else divisions


def reciprocals(dp: Datapath, queries: int) -> int:
    """Row reciprocals a head computes: one per query row on reciprocal lanes, none otherwise."""
    return queries if dp.divider == "reciprocal" else 0
