"""The mapper (codesign/mapper.py) and one mapping's figures (codesign/mapping.py): cases derived by hand (heads
pipelined one into the next, two arrays sharing the DRAM interface, a GEMM that runs faster transposed), the search
against every candidate, the default datapath kept on today's model, and the property an architect relies on: more
of any resource never costs cycles under the best mapping, unless the row says why."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from codesign.__main__ import main as codesign_main
from codesign.cycles import head_cycles
from codesign.datapath import Datapath
from codesign.gemm import oriented, overlapped
from codesign.groups import problem_cycles
from codesign.mapper import balanced_lanes, best_mapping, candidates, slower_reason
from codesign.mapping import Mapping, mapped_cycles
from host.errors import SpecError

#: The overlap schedule's hand case (tests/codesign/test_codesign_cycles.py): one head of seq 8, d 4, Bc 8 is 125
#: cycles: prologue 5, fill 27, two tiles of 27, array tail 12, divider tail 25, epilogue 2.
SMALL = dict(rows=4, cols=4, dataflow="os", exp_lanes=4, dividers=4, div_latency=18, dram_bytes_per_cycle=32,
             schedule="overlap", divider="pipelined")


def test_two_heads_pipelined_by_hand():
    dp = Datapath(**SMALL)
    two = mapped_cycles(dp, 8, 4, False, 8, None, 2, None, 1, Mapping(4, overlap=True))
    # Head 2 starts during head 1's tail: its prologue and fill (5 + 27 = 32) run while head 1's array drains and
    # its dividers finish (12 + 25 = 37); its body starts once head 1's O is written, after max(37, 5) + 2 = 39.
    # The gap is max(32, 39) = 39 instead of 37 + 2 + 32 = 71: 32 saved, 2 · 125 − 32 = 218.
    assert two.cycles == 218 and two.pipelined_saving == 32
    serial = mapped_cycles(dataclasses.replace(dp, schedule="serial"), 8, 4, False, 8, None, 2, None, 1, Mapping(4))
    assert serial.cycles == 2 * head_cycles(dataclasses.replace(dp, schedule="serial"), 8, 4, False, 8).cycles


def test_two_arrays_share_the_dram_interface_by_hand():
    dp = Datapath(**{**SMALL, "arrays": 2})
    model = mapped_cycles(dp, 8, 4, False, 8, None, 2, None, 1, Mapping(4, across=2, overlap=True))
    # One head on each array, each with 16 of the 32 B/cycle: prologue 160 B → 10 cycles, epilogue 36 B → 3 (2.25
    # rounded up), tile 1's 68 B of Q and O still under its 27-cycle step: 10 + 27 + 54 + 12 + 25 + 3 = 131, and
    # the problem is the busier array's, 131 against 218 on one array.
    assert (model.first.prologue, model.first.epilogue) == (10, 3)
    assert model.cycles == 131
    assert model.traffic["macs"] == 2 * head_cycles(Datapath(**SMALL), 8, 4, False, 8).traffic["macs"]
    assert model.utilisation == model.useful_macs / (131 * 16 * 2)
    with pytest.raises(SpecError, match="needs 4 arrays"):
        mapped_cycles(dp, 8, 4, False, 8, None, 2, None, 1, Mapping(4, across=2, split=2))


def test_a_gemm_runs_transposed_when_that_is_faster_by_hand():
    # (2×4)·(4×8) on an 8×2 os array: as it is, M = 2 on the rows and N = 8 over 2 columns, 4 folds of max(T = 4,
    # r = 2) = 16 cycles, tail 2 + 2 − 2 = 2; transposed (Cᵀ = Bᵀ·Aᵀ), N = 8 on the 8 rows and M = 2 on the columns,
    # one fold of max(4, 8) = 8, tail 8 + 2 − 2 = 8: 8 + 8 < 16 + 2, so the transpose.
    counts, transposed = oriented(2, 8, 4, 8, 2, "os")
    assert transposed and overlapped(counts) == (8, 8)
    assert not oriented(8, 2, 4, 8, 2, "os")[1]


def test_the_search_takes_the_fastest_candidate():
    dp = Datapath(**{**SMALL, "arrays": 3, "dram_bytes_per_cycle": 2})
    shape = (97, 16, True, 64, 40, 4, 2, 1)  # seq, dim, causal, bc, q_len, heads, kv_heads, batch
    best = best_mapping(dp, *shape)
    legal = []
    for mapping in candidates(dp, 40, 4, 2, 1):
        try:
            legal.append(mapped_cycles(dp, *shape, mapping).cycles)
        except SpecError:
            continue
    assert best.cycles == min(legal) and len(legal) > 20
    assert best.mapping.arrays <= 3
    assert "query tile" in best.describe()


def test_the_default_datapath_keeps_todays_model():
    dp = Datapath()
    model = problem_cycles(dp, 257, 64, True, queries=40, heads=4, kv_heads=2)
    assert model.mapping == Mapping(32) and model.pipelined_saving == 0
    first = head_cycles(dp, 257, 64, True, queries=40)
    later = head_cycles(dp, 257, 64, True, queries=40, shared_kv=True)
    assert model.cycles == 2 * (first.cycles + later.cycles)
    assert candidates(dp, 40, 4, 2, 1) == [Mapping(32), Mapping(32, share_kv=False)]


@pytest.mark.parametrize("field,value,allowed", [("schedule", "fast", "serial, overlap"),
                                                 ("divider", "radix4", "iterative, pipelined, reciprocal"),
                                                 ("arrays", 0, "1..64"), ("arrays", 65, "1..64")])
def test_bad_choices_are_refused_in_one_line(field, value, allowed):
    with pytest.raises(SpecError) as info:
        Datapath(**{field: value})
    assert str(value) in str(info.value) and allowed.split("..")[0] in str(info.value)
    assert "\n" not in str(info.value)


def test_new_choices_name_the_datapath():
    assert Datapath().name == "sa32x32-os-acc40"
    assert Datapath(arrays=4, schedule="overlap", divider="pipelined").name == "sa32x32-os-acc40-p4-overlap-pdiv"
    # figures past %g's six digits keep every one (1,000,000,001 Hz read as the default 1000MHz, and --resume took
    # the one datapath for the other); round ones stay short
    assert Datapath(clock_hz=1_000_000_001).name == "sa32x32-os-acc40-1000.000001MHz"
    assert Datapath(clock_hz=2.5e6).name == "sa32x32-os-acc40-2.5MHz"  # as %g has it
    assert Datapath(clock_hz=500e6, dram_bytes_per_cycle=4.0000001).name == "sa32x32-os-acc40-bw4.0000001-500MHz"
    assert Datapath(q_buffer_kb=32.5).name == "sa32x32-os-acc40-buf32.5_64_64_128"


def test_the_softmax_unit_balanced_to_the_array_by_hand():
    # A later full block (rescale included) of the tile against Bc = 64 keys, d 64. The default 32×32 os, serial:
    # QKᵀ gemm(32, 64, 64) is 2 column folds of 64 + 62 = 252, P·V gemm(32, 64, 64) the same: 504 array cycles.
    # Softmax with E lanes: ⌈2048/E⌉ + ⌈2080/E⌉ + ⌈32·65/E⌉ + 3 + 6 + 4 + 2: E = 16 → 128 + 130 + 130 + 15 = 403 ≤
    # 504, E = 8 → 791 > 504: 16, the default's own lanes.
    assert balanced_lanes(Datapath(), 64) == 16
    # 256×256 os under overlap, a 256-row tile: QKᵀ transposed (64 keys on the rows, 256 queries on the columns),
    # one fold of max(T = 64, r = 64) = 64; P·V transposed, 64; 128 a step. E = 512: 32 + 33 + 33 + 15 = 113 ≤ 128;
    # E = 256: 64 + 65 + 65 + 15 = 209 > 128: 512 (the case at 512 lanes is 97.2 µs, at 4096 97.1).
    big = Datapath(rows=256, cols=256, schedule="overlap", exp_lanes=16)
    assert balanced_lanes(big, 64) == 512
    assert balanced_lanes(Datapath(rows=1, cols=1), 64) == 1  # a 1×1 array is slower than one lane


MORE = (("rows", lambda v: 2 * v), ("cols", lambda v: 2 * v), ("arrays", lambda v: v + 1),
        ("exp_lanes", lambda v: 2 * v), ("dividers", lambda v: 2 * v), ("dram_bytes_per_cycle", lambda v: 2 * v),
        ("q_buffer_kb", lambda v: 4 * v), ("k_buffer_kb", lambda v: 4 * v), ("v_buffer_kb", lambda v: 4 * v),
        ("o_buffer_kb", lambda v: 4 * v))


def test_more_of_any_resource_never_costs_cycles_unless_the_row_says_why():
    """Random problems and overlap-schedule datapaths; each resource doubled (an array added, buffers ×4): the best
    mapping is never slower, except a bigger array, and then `slower_reason` names the fill and drain it adds (on
    the smaller array's own mapping it is slower, and spends more cycles filling and draining)."""
    rng = np.random.default_rng(11)
    explained = 0
    for _ in range(24):
        base = dict(rows=int(rng.choice([4, 8, 24])), cols=int(rng.choice([4, 16])),
                    dataflow=str(rng.choice(["os", "ws", "is"])), exp_lanes=int(rng.choice([1, 4, 16])),
                    dividers=int(rng.choice([1, 8])), dram_bytes_per_cycle=float(rng.choice([0.25, 8, 64])),
                    q_buffer_kb=16, k_buffer_kb=16, v_buffer_kb=16, o_buffer_kb=32, schedule="overlap",
                    divider=str(rng.choice(["iterative", "pipelined", "reciprocal"])),
                    arrays=int(rng.choice([1, 2, 3])))
        seq, dim = int(rng.integers(1, 200)), int(rng.choice([8, 59]))
        heads = int(rng.choice([1, 2, 4]))
        kv = int(rng.choice([h for h in (1, 2) if heads % h == 0]))
        shape = (seq, dim, bool(rng.integers(2)), 64, int(rng.choice([seq, 1, max(1, seq // 3)])), heads, kv, 1)
        before = problem_cycles(Datapath(**base), *shape)
        for field, more in MORE:
            bigger = Datapath(**{**base, field: more(base[field])})
            after = problem_cycles(bigger, *shape)
            if after.cycles > before.cycles:
                assert field in ("rows", "cols"), (field, base, shape)
                reason = slower_reason(bigger, before, *shape)
                assert reason.startswith(f"slower than the {base['rows']}x{base['cols']} array"), (base, shape)
                explained += 1
    assert 0 < explained < 24 * 2, explained  # some bigger arrays are slower (the reason is exercised), most not


def test_one_array_runs_one_gemm_at_a_time():
    """A review found heads pipelined on folds back to back overlapping one head's first QKᵀ (its fill) with the
    previous head's last P·V (its array tail) on the same array: 4 heads of seq 8, d 16 on a 2x2 array took 1,809
    cycles. Their MACs alone need 4 heads · 2 GEMMs · 8·8·16 / (2·2 MACs a cycle) = 2,048 cycles."""
    dp = Datapath(rows=2, cols=2, schedule="overlap", divider="reciprocal", q_buffer_kb=64, k_buffer_kb=256,
                  v_buffer_kb=256, o_buffer_kb=256, dram_bytes_per_cycle=4096)
    model = problem_cycles(dp, 8, 16, False, 64, 8, 4, 4, 1)
    assert model.useful_macs == 4 * 2 * 8 * 8 * 16
    assert model.cycles * 2 * 2 >= model.useful_macs, model.cycles


def test_no_mapping_beats_the_arrays_mac_peak():
    """Random problems, datapaths and every legal mapping: cycles × R × C × arrays ≥ the useful MACs (the arrays do
    at most R·C MACs a cycle each)."""
    rng = np.random.default_rng(5)
    checked = 0
    for _ in range(40):
        dp = Datapath(rows=int(rng.choice([2, 4, 8])), cols=int(rng.choice([2, 4, 8])),
                      dataflow=str(rng.choice(["os", "ws", "is"])), exp_lanes=int(rng.choice([1, 16, 1024])),
                      dividers=int(rng.choice([1, 64])), dram_bytes_per_cycle=float(rng.choice([8, 4096])),
                      q_buffer_kb=64, k_buffer_kb=256, v_buffer_kb=256, o_buffer_kb=256, schedule="overlap",
                      divider=str(rng.choice(["iterative", "pipelined", "reciprocal"])),
                      arrays=int(rng.choice([1, 2])))
        seq, dim, heads = int(rng.integers(1, 130)), int(rng.choice([8, 16, 64])), int(rng.choice([1, 4, 16]))
        for mapping in candidates(dp, seq, heads, heads, 1):
            try:
                model = mapped_cycles(dp, seq, dim, False, 64, seq, heads, heads, 1, mapping)
            except SpecError:
                continue
            assert model.cycles * dp.rows * dp.cols * dp.arrays >= model.useful_macs, (dp, seq, dim, heads, mapping)
            checked += 1
    assert checked > 100, checked


def test_the_run_report_gives_the_peak_of_every_array(capsys):
    """`codesign run --arrays 4`: the peak is 2 · 4 · 8 · 8 · 1 GHz = 512 GFLOP/s, and the throughput is below it
    (it was printed against one array's 128)."""


    assert codesign_main(["run", "--seq", "256", "--dim", "32", "--heads", "8", "--array", "8x8", "--arrays", "4",
                          "--schedule", "overlap"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("throughput"))
    achieved, peak = (float(x) for x in re.match(r"throughput ([\d.]+) GFLOP/s of ([\d.]+) peak", line).groups())
    assert peak == 512 and 0 < achieved <= peak and "of the 4 arrays" in line, line
