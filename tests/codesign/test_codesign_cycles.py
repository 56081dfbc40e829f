"""The head's cycle and traffic model (codesign/cycles.py): cases derived by hand (a key block as wide as the array,
and one folded over it), the grouped closed form against a plain loop over every (tile, block) step at key blocks
below, equal to and above the array's width, and the properties an architect relies on (bandwidth, buffers,
causal)."""

from __future__ import annotations


import numpy as np
import pytest

from codesign import cycles
from codesign.cycles import head_cycles
from codesign.datapath import EXP_LATENCY, SCORE_LATENCY, Datapath
from helpers.datapath_steps import walk_steps
from host.errors import SpecError


def test_one_tile_one_block_by_hand():
    dp = Datapath(rows=4, cols=4, dataflow="os", exp_lanes=4, dividers=4, div_latency=18, dram_bytes_per_cycle=32)
    head = head_cycles(dp, seq=4, dim=4, causal=False, bc=4)
    # One tile, one block. QKᵀ = gemm(4, 4, 4) on 4x4 os: one fold of T + R + C − 2 = 4 + 4 + 4 − 2 = 10 cycles;
    # P·V = gemm(4, 4, 4): 10 again → the array is busy 20 cycles.
    # Softmax: 16 compares / 4 lanes = 4, 16 p + 4 α = 20 exps / 4 = 5, no rescale in the first block, plus the
    # score (3), max tree ⌈log₂ 4⌉ = 2 and EXP2 (4) latencies → 18. Serial windows (codesign/serial_windows.py):
    # the first QKᵀ (10), the step's window with no P·V before it and no QKᵀ after it, max(0, 18) = 18, the last
    # P·V (10).
    # DRAM: the prologue loads the Q tile (4·4·2 = 32 B) and the only K and V blocks (2·32 = 64 B): 96 B at
    # 32 B/cycle = 3 cycles; the epilogue writes the O tile, 4 rows of 4·2 B and a shift byte = 36 B → 2 cycles;
    # nothing moves during the tile, so the stalls are those 5 cycles. Divider: the peak pass over d = 4 columns
    # (4 cycles), then 16 divisions on 4 dividers of 18 cycles = 72: 76, exposed (the last tile's).
    # 3 + 10 + 18 + 10 + 76 + 2 = 119.
    assert (SCORE_LATENCY, EXP_LATENCY) == (3, 4)
    assert head.cycles == 119
    assert head.stages["array"].busy_cycles == 20 and head.stages["softmax"].busy_cycles == 18
    assert head.stages["divider"].busy_cycles == 76 and head.stall_cycles == 5
    assert head.traffic["macs"] == 2 * 4 * 4 * 4 and head.useful_macs == 128
    assert head.traffic["dram_read_k_bytes"] == 32
    assert head.buffering == {"q": "double", "kv": "resident", "o": "double"}


def test_a_block_wider_than_the_array_folds_over_its_columns_by_hand():
    dp = Datapath(rows=4, cols=4, dataflow="os", exp_lanes=4, dividers=4, div_latency=18, dram_bytes_per_cycle=32)
    head = head_cycles(dp, seq=8, dim=4, causal=False, bc=8)
    # Two tiles of 4 rows, one block of Bc = 8 keys on 4 columns. QKᵀ = gemm(4, 8, 4): N = 8 keys in 2 column folds
    # of T + R + C − 2 = 10 → 20; P·V = gemm(4, 4, 8): one fold streaming the 8 keys, 8 + 4 + 4 − 2 = 14 → 34 a step.
    # Softmax: 32 compares / 4 = 8, 32 p + 4 α = 36 / 4 = 9, no rescale, + 3 + ⌈log₂ 8⌉ = 3 + 4 → 27; a step costs
    # max(34, 27) = 34. Serial windows: the first QKᵀ (20); step 0's window max(0 + 20 (step 1's QKᵀ), 27) = 27;
    # step 1's max(14 (step 0's P·V) + 0, 27) = 27; the last P·V (14). DRAM: prologue Q tile 32 B + the block's K and
    # V (2·8·4·2 = 128 B) = 160 B → 5 cycles; tile 1's Q (32 B) and tile 0's O (36 B) overlap tile 1's compute
    # (double buffers); epilogue tile 1's O, 36 B → 2. Divider per tile: 4 (peak pass) + 4 waves · 18 = 76; the bank
    # takes tile 0 at the end of step 1's window (its P·V ran there) and tile 1 after the last P·V, 14 cycles later
    # (62 exposed); tile 1's all exposed. 5 + 20 + 2·27 + 14 + 62 + 76 + 2 = 233.
    assert head.stages["array"].busy_cycles == 68 and head.stages["softmax"].busy_cycles == 54
    assert head.stages["divider"].busy_cycles == 152
    assert head.cycles == 233 and head.stall_cycles == 7
    assert (head.fill, head.array_tail) == (20, 14)
    assert head.traffic["dram_write_o_bytes"] == 8 * (4 * 2 + 1)


def test_a_pipelined_divider_by_hand():
    dp = Datapath(rows=4, cols=4, dataflow="os", exp_lanes=4, dividers=4, div_latency=18, dram_bytes_per_cycle=32,
                  divider="pipelined")
    head = head_cycles(dp, seq=4, dim=4, causal=False, bc=4)
    # The first case with a divider that takes one division a cycle: the peak pass (4 cycles), then 16 divisions on
    # 4 dividers, 4 waves entering one a cycle, the last out 18 − 1 cycles after it enters: 4 + 4 + 17 = 25 against
    # 76. Everything else as before: 3 + 18 + 20 + 25 + 2 = 68.
    assert head.cycles == 68 and head.stages["divider"].busy_cycles == 25
    assert head.stages["divider"].utilisation == 16 / (25 * 4)  # one divider-cycle per division


def test_the_overlap_schedule_by_hand():
    dp = Datapath(rows=4, cols=4, dataflow="os", exp_lanes=4, dividers=4, div_latency=18, dram_bytes_per_cycle=32,
                  schedule="overlap", divider="pipelined")
    head = head_cycles(dp, seq=8, dim=4, causal=False, bc=8)
    # The second case (two tiles of 4 rows, one block of 8 keys) with the folds pipelined. QKᵀ = gemm(4, 8, 4) os:
    # Sr = 4 rows, Sc = 8 keys in 2 column folds, T = 4; each fold holds the array max(T, r) = max(4, 4) = 4 → 8;
    # transposed, gemm(8, 4, 4) is 2 row folds of 4 as well (8), a tie, so it stays as it is. P·V = gemm(4, 4, 8):
    # one fold streaming 8 keys, max(8, 4) = 8. A step holds the array 16 cycles, the softmax unit 27 (as before):
    # 27 a step. Fill and drain of the part of the array used, once a head: QKᵀ r + c − 2 = 4 + 4 − 2 = 6, P·V 6
    # → 12. Pipelined divider per tile: 4 + 4 waves + 17 = 25; tile 0's beside tile 1's 27-cycle step (none
    # exposed), tile 1's exposed. 5 (prologue) + 27 (fill) + 2·27 + 12 + 25 + 2 (epilogue) = 125 against 220.
    assert head.cycles == 125 and head.array_tail == 12 and head.divider_tail == 25
    assert head.stages["array"].busy_cycles == 2 * 16 + 12 and head.stages["divider"].busy_cycles == 50
    assert head.orientation.startswith("QKᵀ queries on rows, keys on columns")
    assert (head.prologue, head.fill, head.epilogue) == (5, 27, 2)
    # the same head with its folds back to back (the serial schedule's) is the second case's 233 but for the divider:
    # 25 a tile, tile 0's 11 beyond the 14 cycles to the next take exposed
    assert head_cycles(dp, 8, 4, False, 8, overlap=False).cycles == 233 - 76 - 62 + 11 + 25


@pytest.mark.parametrize("seq", [1, 17, 97, 1025])
@pytest.mark.parametrize("dim", [1, 59, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(32, 32, "os", 64), (8, 24, "ws", 64), (16, 5, "is", 64), (64, 8, "os", 64),
                                   (4, 128, "os", 64), (16, 16, "ws", 20), (8, 8, "is", 8)])
def test_grouped_steps_equal_a_walk_over_every_step(seq, dim, causal, shape):
    rows, cols, dataflow, bc = shape
    dp = Datapath(rows=rows, cols=cols, dataflow=dataflow, q_buffer_kb=64, o_buffer_kb=256)
    head = head_cycles(dp, seq, dim, causal, bc)
    walked = walk_steps(dp, seq, dim, causal, bc)
    assert head.stages["array"].busy_cycles == walked["array"]
    assert head.stages["softmax"].busy_cycles == walked["softmax"]
    assert head.traffic["macs"] == walked["macs"] == head.stages["array"].operations
    assert head.traffic["sram_read_q"] == walked["sram_read_q"]
    assert head.traffic["sram_read_v"] == walked["sram_read_v"]
    pairs = seq * (seq + 1) // 2 if causal else seq * seq
    assert head.useful_macs == 2 * pairs * dim <= head.traffic["macs"]


def test_causal_visits_fewer_blocks_than_full():
    dp = Datapath()
    full, causal = head_cycles(dp, 1024, 64, False), head_cycles(dp, 1024, 64, True)
    # 32 tiles × 16 blocks of Bc = 64 = 512 steps full; causal tile t (rows 32t..32t+31) visits ⌈(32t+32)/64⌉ =
    # t // 2 + 1 blocks: 2·(1 + … + 16) = 272 steps, every block full.
    assert causal.traffic["macs"] * 512 == full.traffic["macs"] * 272
    assert causal.cycles < full.cycles


def test_kv_traffic_once_when_resident_else_per_tile():
    resident = head_cycles(Datapath(), 512, 64, False)  # K and V: 512·64·2 = 64 KB each, the buffers' size
    assert resident.buffering["kv"] == "resident" and resident.traffic["dram_read_k_bytes"] == 512 * 64 * 2
    streamed = head_cycles(Datapath(k_buffer_kb=16, v_buffer_kb=16), 512, 64, False)  # 2 blocks of 8 KB each
    assert streamed.buffering["kv"] == "double"
    assert streamed.traffic["dram_read_k_bytes"] == 16 * 512 * 64 * 2  # every one of the 16 tiles reads all of K
    causal = head_cycles(Datapath(k_buffer_kb=16, v_buffer_kb=16), 512, 64, True)
    # tile t reads its t // 2 + 1 blocks of 64 keys
    assert causal.traffic["dram_read_v_bytes"] == sum(64 * (t // 2 + 1) for t in range(16)) * 64 * 2


def test_less_bandwidth_never_helps_and_starving_it_stalls():
    previous = 0
    for bw in (64, 16, 4, 1, 0.25):
        head = head_cycles(Datapath(k_buffer_kb=16, v_buffer_kb=16, dram_bytes_per_cycle=bw), 1024, 64, False)
        assert head.cycles >= previous
        previous = head.cycles
    dram = sum(head.traffic[name] for name in ("dram_read_q_bytes", "dram_read_k_bytes", "dram_read_v_bytes",
                                               "dram_write_o_bytes"))
    assert head.stall_cycles > 0.9 * dram / 0.25 - head.stages["array"].busy_cycles
    assert head.cycles >= dram / 0.25


def test_single_buffers_expose_their_transfers():
    double = head_cycles(Datapath(k_buffer_kb=16, v_buffer_kb=16), 1024, 64, False)
    single = head_cycles(Datapath(k_buffer_kb=8, v_buffer_kb=8), 1024, 64, False)  # one 8 KB block each
    assert single.buffering["kv"] == "single"
    # each of the 32·16 steps' K and V blocks (2·8 KB at 32 B/cycle = 512 cycles) now add to the compute instead of
    # hiding
    assert single.cycles - double.cycles >= 0.9 * 32 * 16 * 512


@pytest.mark.parametrize("field,size,what", [("q_buffer_kb", 1, "one query tile"), ("k_buffer_kb", 2, "one key block"),
                                             ("o_buffer_kb", 4, "one tile's accumulators")])
def test_a_buffer_smaller_than_one_tile_is_refused(field, size, what):
    with pytest.raises(SpecError, match=f"{field}={size} holds less than {what}"):
        head_cycles(Datapath(**{field: size}), 256, 64, False)


@pytest.mark.parametrize("seq,dim", [(0, 64), (32769, 64), (64, 0), (64, 257)])
def test_shape_out_of_range(seq, dim):
    with pytest.raises(SpecError, match="out of range"):
        head_cycles(Datapath(), seq, dim, False)


def test_traffic_has_every_counter():
    head = head_cycles(Datapath(), 97, 59, True)
    assert set(head.traffic) == set(cycles.TRAFFIC_KEYS)
    assert all(isinstance(value, int) and value >= 0 for value in head.traffic.values())
    assert 0 < head.utilisation < 1 and all(0 < s.utilisation <= 1 for s in head.stages.values())
    assert np.isclose(head.latency_s, head.cycles / 1e9)


def test_a_dram_bound_head_costs_its_bytes_once():
    # seq 32 on 32x32, d 64: Q, K, V are 4 KB each and O 4 KB and a shift byte per row, 16,416 B in all; at
    # 1 B/cycle the head is that many cycles of transfer plus what cannot overlap them (one step's compute, the
    # fill, the divisions)
    head = head_cycles(Datapath(dram_bytes_per_cycle=1), 32, 64, False)
    compute = head.stages["array"].busy_cycles + head.stages["softmax"].busy_cycles + head.stages["divider"].busy_cycles
    assert 16_416 <= head.cycles <= 16_416 + compute
    assert head.stall_cycles >= 16_416 - compute


def test_more_resources_never_cost_cycles():
    rng = np.random.default_rng(7)
    for _ in range(300):
        base = dict(rows=int(rng.choice([4, 8, 32])), cols=int(rng.choice([4, 16, 32])),
                    dataflow=str(rng.choice(["os", "ws", "is"])), exp_lanes=int(rng.choice([1, 4, 16])),
                    dividers=int(rng.choice([1, 8])), dram_bytes_per_cycle=float(rng.choice([0.25, 1, 8, 64])),
                    q_buffer_kb=64, k_buffer_kb=64, v_buffer_kb=64, o_buffer_kb=64)
        seq, dim, causal = int(rng.integers(1, 300)), int(rng.choice([8, 59, 64])), bool(rng.integers(2))
        before = head_cycles(Datapath(**base), seq, dim, causal).cycles
        for field, more in (("dram_bytes_per_cycle", 2 * base["dram_bytes_per_cycle"]),
                            ("exp_lanes", 2 * base["exp_lanes"]), ("dividers", 2 * base["dividers"]),
                            ("o_buffer_kb", 256), ("q_buffer_kb", 256), ("k_buffer_kb", 256), ("v_buffer_kb", 256)):
            after = head_cycles(Datapath(**{**base, field: more}), seq, dim, causal).cycles
            assert after <= before, (base, seq, dim, causal, field)
