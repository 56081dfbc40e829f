"""LLM inference shapes in the problem layer (issue 32, part 1): q_len queries against a KV cache of seq keys, K/V
heads shared by groups of query heads, the bottom-right causal mask, the FLOP and byte formulas, the golden, the
results columns, and rows of the targets that run only square self-attention skipped with their reason."""

from __future__ import annotations

import math

import numpy as np
import pytest

from host.errors import ResultsError, SpecError
from host.problem import AttentionProblem
from host.reference import attention
from host.results import Result
from host.results_file import ResultsFile


def test_the_shape_fields_are_checked_and_one_square_problem_has_one_spelling():
    assert AttentionProblem(seq=64, q_len=64, heads=4, kv_heads=4) == AttentionProblem(seq=64, heads=4)
    p = AttentionProblem(batch=2, heads=32, kv_heads=8, seq=4096, q_len=1, dim=128)
    assert (p.shape, p.kv_shape, p.queries, p.kv_head_count, p.square) == (
        (2, 32, 1, 128), (2, 8, 4096, 128), 1, 8, False)
    with pytest.raises(SpecError, match=r"^q_len=65 is out of range; allowed: 1\.\.64$"):
        AttentionProblem(seq=64, q_len=65)
    with pytest.raises(SpecError, match=r"^kv_heads=3 does not divide heads=4; allowed: a divisor of 4$"):
        AttentionProblem(heads=4, kv_heads=3)
    with pytest.raises(SpecError, match=r"^kv_heads=0 is out of range; allowed: 1\.\.4$"):
        AttentionProblem(heads=4, kv_heads=0)
    assert AttentionProblem(seq=64, q_len=16).with_(seq=128).q_len == 16  # a decode problem stays one


def test_square_inputs_are_what_they_always_were_and_grouped_ones_have_their_shapes():
    p = AttentionProblem(heads=2, seq=17, dim=5, seed=3)
    rng = np.random.default_rng(3)
    expected = [rng.standard_normal((1, 2, 17, 5), dtype=np.float32) for _ in range(3)]
    assert all(np.array_equal(a, b) for a, b in zip(p.inputs(), expected))
    q, k, v = AttentionProblem(heads=4, kv_heads=2, seq=17, q_len=3, dim=5).inputs()
    assert (q.shape, k.shape, v.shape) == ((1, 4, 3, 5), (1, 2, 17, 5), (1, 2, 17, 5))


def test_flops_and_bytes_follow_the_shapes():
    square = AttentionProblem(heads=4, seq=256, dim=64)
    assert square.flops() == 4 * 4 * 256 * 256 * 64 and square.with_(causal=True).flops() == square.flops() / 2
    decode = AttentionProblem(heads=32, kv_heads=8, seq=4096, q_len=1, dim=128, dtype="float16")
    assert decode.flops() == 4 * 32 * 4096 * 128
    assert decode.with_(causal=True).flops() == 4 * 32 * 128 * (4096 - 0.5)  # one query sees every key
    # K and V once per K/V head (8, not 32), Q and O for the one query of each of 32 heads, 2 bytes each
    assert decode.min_bytes() == (2 * 8 * 4096 * 128 + 2 * 32 * 128) * 2


def naive(q, k, v, causal):
    """Attention of one head written out: query i at position seq - q_len + i sees keys up to it when causal."""
    m, n = q.shape[0], k.shape[0]
    s = q.astype(np.float64) @ k.T.astype(np.float64) / math.sqrt(q.shape[1])
    if causal:
        s = np.where(np.arange(n)[None, :] <= (n - m + np.arange(m))[:, None], s, -np.inf)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    return (w @ v.astype(np.float64)) / w.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("heads,kv_heads,seq,q_len", [(4, 2, 97, 1), (4, 1, 97, 17), (6, 3, 33, 33), (2, 2, 1, 1),
                                                      (8, 2, 1025, 5)])
@pytest.mark.parametrize("causal", [False, True])
def test_the_golden_of_grouped_and_decode_shapes_is_the_written_out_attention(heads, kv_heads, seq, q_len, causal):
    p = AttentionProblem(batch=2, heads=heads, kv_heads=kv_heads, seq=seq, q_len=q_len, dim=59, causal=causal)
    q, k, v = p.inputs()
    got = attention(q, k, v, causal, np.float64, block=4)  # several query blocks: the mask's offset per block
    group = heads // kv_heads
    for b in range(2):
        for h in range(heads):
            want = naive(q[b, h], k[b, h // group], v[b, h // group], causal)
            assert np.allclose(got[b, h], want, rtol=1e-12, atol=1e-12), (b, h)


def test_a_causal_decode_row_is_the_last_row_of_the_prefill_it_continues():
    """Bottom-right alignment: the q_len queries of a KV cache are the last q_len positions of the sequence."""
    prefill = AttentionProblem(heads=2, seq=50, dim=8, causal=True)
    q, k, v = prefill.inputs()
    whole = attention(q, k, v, True, np.float64)
    assert np.allclose(attention(q[:, :, -7:], k, v, True, np.float64), whole[:, :, -7:], rtol=1e-12, atol=1e-13)
    assert np.allclose(attention(q[:, :, -1:], k, v, True, np.float64), attention(q[:, :, -1:], k, v, False),
                       rtol=1e-12, atol=1e-13)  # the newest query sees every key


def test_the_golden_refuses_shapes_that_do_not_fit_together():
    q = np.zeros((1, 4, 8, 4))
    with pytest.raises(SpecError, match="kv_heads dividing heads"):
        attention(q, np.zeros((1, 3, 8, 4)), np.zeros((1, 3, 8, 4)), False)
    with pytest.raises(SpecError, match="q_len <= seq"):
        attention(q, np.zeros((1, 2, 7, 4)), np.zeros((1, 2, 7, 4)), False)


def test_results_keep_the_shape_columns_and_read_older_rows_as_square(tmp_path):
    base = dict(run_id="r", timestamp="t", git_rev="g", host="h", device="d", target="cpu", kernel="numpy",
                dtype="float32", batch=1, heads=32, seq=4096, dim=128, causal=True, seed=0)
    results = ResultsFile(tmp_path / "results.csv")
    results.append(Result(**base, q_len=1, kv_heads=8, status="skipped", message="why"))
    results.append(Result(**base, status="skipped", message="why"))
    got = results.read()
    assert [(r.q_len, r.kv_heads) for r in got] == [(1, 8), (None, None)]
    assert got[0].config_key() != got[1].config_key()


def test_a_sweep_of_decode_shapes_measures_the_cpu_and_skips_what_a_target_cannot_run(tmp_path, capsys,
                                                                                     monkeypatch):
    """A target that does not declare supports() runs square problems only: here the asic target, made one such
    (issue 32 gives it the shapes; the rule for a target without them is what is tested)."""
    from codesign import target as asic
    from host.sweep import cli as compare

    monkeypatch.delattr(asic, "supports", raising=False)
    code = compare.main(["--targets", "cpu,asic", "--seq", "64", "--q-len", "1,16", "--heads", "4", "--kv-heads",
                         "2", "--dim", "16", "--causal", "1", "--out", str(tmp_path)])
    rows = ResultsFile(tmp_path / "results.csv").read()
    assert code == 0 and len(rows) == 4
    for row in rows:
        assert (row.q_len in (1, 16), row.kv_heads) == (True, 2)
        if row.target == "cpu":
            assert row.status == "ok" and row.rel_l2 < 1e-5, row.message
        else:
            assert row.status == "skipped" and "q_len = seq, kv_heads = heads" in row.message
    out = capsys.readouterr().out
    assert " Hkv " in out and " q_len " in out
    assert "| K/V heads |" in (tmp_path / "results.md").read_text()
    assert compare.main(["--targets", "cpu", "--seq", "64", "--q-len", "65", "--out", str(tmp_path / "bad")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "kbench: error: --q-len 65 with --seq 64: q_len must be at most seq (queries against a KV cache of seq keys); "
        "the sweep runs every pair of the lists: give the values that fit together, in separate runs into one --out "
        "with --resume")
    assert not (tmp_path / "bad" / "results.csv").exists()
    assert compare.main(["--targets", "cpu", "--q-len", "0", "--out", str(tmp_path / "bad")]) == 2
    assert "argument --q-len: q_len=0 is out of range; allowed: 1..1048576" in capsys.readouterr().err
    assert compare.main(["--targets", "cpu", "--kv-heads", "5000", "--out", str(tmp_path / "bad")]) == 2
    assert "argument --kv-heads: kv_heads=5000 is out of range; allowed: 1..4096" in capsys.readouterr().err


@pytest.mark.parametrize("heads,kv_heads,seq,q_len,causal", [(4, 2, 97, 1, True), (4, 1, 300, 17, True),
                                                             (2, 2, 65, 65, True), (6, 3, 40, 7, False)])
def test_the_q15_model_takes_decode_and_grouped_shapes(heads, kv_heads, seq, q_len, causal):
    """The contract's rows of a KV cache are its causal rows seq − q_len .. seq − 1 (the bottom right), each query
    head on its K/V head; within the contract's bound of the golden, and the last rows of the prefill they end."""
    from host import q15
    from host.reference import golden

    p = AttentionProblem(heads=heads, kv_heads=kv_heads, seq=seq, q_len=q_len, dim=16, causal=causal, seed=seq)
    q, k, v = p.inputs()
    quantized = q15.prepare(p, q, k, v)
    out = quantized.expected()
    assert out.o.shape == p.shape and out.shift.shape == p.shape[:-1] and quantized.row0 == seq - q_len
    error = np.abs(quantized.dequantize(out) - golden(p)).max()
    assert error <= q15.error_bound(q, k, v, quantized) and error < 1e-3
    # the same rows of the square problem over the same keys (every query head expanded onto its K/V head)
    group = heads // kv_heads
    square_k, square_v = np.repeat(quantized.k, group, axis=1), np.repeat(quantized.v, group, axis=1)
    for h in range(heads):
        full_q = np.concatenate([np.zeros((seq - q_len, 16), np.int16), quantized.q[0, h]])
        whole = q15.attention_q15(full_q, square_k[0, h], square_v[0, h], quantized.params)
        assert whole.o[seq - q_len:].tobytes() == out.o[0, h].tobytes()
        assert whole.shift[seq - q_len:].tobytes() == out.shift[0, h].tobytes()


def test_a_schema_5_file_is_read_with_the_shape_columns_empty(tmp_path):
    """Schema 5 (numerics, without q_len and kv_heads) was written by this repository's own reports: it must read."""
    from host.results import FIELD_NAMES

    row = Result(run_id="r", timestamp="t", git_rev="g", host="h", device="d", target="cpu", kernel="numpy",
                 dtype="float32", batch=1, heads=2, seq=8, dim=4, causal=False, seed=0, status="skipped",
                 message="why").to_row()
    names = [name for name in FIELD_NAMES if name not in ("q_len", "kv_heads")]
    row["schema_version"] = "5"
    (tmp_path / "results.csv").write_text(",".join(names) + "\n" + ",".join(row[name] for name in names) + "\n")
    [read] = ResultsFile(tmp_path / "results.csv").read()
    assert (read.q_len, read.kv_heads, read.schema_version) == (None, None, 5)


def test_the_memory_check_counts_the_goldens_copies_and_names_the_shape(monkeypatch):
    from host import target_api
    from host.target_api import Inputs

    decode = AttentionProblem(batch=4, heads=32, kv_heads=8, seq=8192, q_len=1, dim=128)
    assert Inputs.bytes_needed(decode) == 36 * 4 * 32 * 128 + 20 * 4 * 8 * 8192 * 128
    monkeypatch.setattr(target_api, "host_memory_available", lambda: 1 << 20)
    with pytest.raises(MemoryError, match=r"B=4 H=32 N=8192 q_len=1 kv_heads=8 d=128 need "):
        Inputs(decode)


def test_a_golden_computed_elsewhere_has_the_queries_shape():
    from host.target_api import Inputs

    inputs = Inputs(AttentionProblem(heads=4, kv_heads=2, seq=64, q_len=1, dim=8))
    gold = inputs.golden_from(lambda x: attention(x.q, x.k, x.v, False, np.float64))
    assert gold.shape == (1, 4, 1, 8)


@pytest.mark.parametrize("cells,message", [
    ({"seq": "64", "q_len": "65"}, "q_len=65 with seq=64; allowed: 1..63, or empty (q_len = seq, self-attention, is "
                                   "written empty)"),
    ({"seq": "64", "q_len": "64"}, "q_len=64 with seq=64; allowed: 1..63, or empty"),
    ({"seq": "1", "q_len": "1"}, "q_len=1 with seq=1; allowed: empty"),
    ({"seq": "64", "q_len": "0"}, "q_len=0 with seq=64; allowed: 1..63, or empty"),
    ({"heads": "12", "kv_heads": "5"}, "kv_heads=5 with heads=12; allowed: 1, 2, 3, 4, 6 (a divisor of heads), or "
                                       "empty (kv_heads = heads is written empty)"),
    ({"heads": "12", "kv_heads": "12"}, "kv_heads=12 with heads=12; allowed: 1, 2, 3, 4, 6"),
    ({"heads": "4", "kv_heads": "8"}, "kv_heads=8 with heads=4; allowed: 1, 2 (a divisor of heads)"),
    ({"heads": "1", "kv_heads": "1"}, "kv_heads=1 with heads=1; allowed: empty"),
])
def test_the_reader_refuses_a_shape_the_problem_cannot_have_naming_the_file_line_and_field(tmp_path, cells, message):
    """A row the writer could not have written (the problem stores q_len = seq and kv_heads = heads empty, and
    refuses the rest) is refused when read, in one line naming the file, its line and the field."""
    row = Result(run_id="r", timestamp="t", git_rev="g", host="h", device="d", target="cpu", kernel="numpy",
                 dtype="float32", batch=1, heads=12, seq=64, dim=4, causal=False, seed=0, status="skipped",
                 message="why").to_row()
    good = dict(row)
    row.update(cells)
    path = tmp_path / "results.csv"
    path.write_text(",".join(row) + "\n" + ",".join(good.values()) + "\n" + ",".join(row.values()) + "\n")
    with pytest.raises(ResultsError) as caught:
        ResultsFile(path).read()
    text = str(caught.value)
    assert text.startswith(f"{path}:3: {message}") and "\n" not in text
    with pytest.raises(ResultsError, match=message.split(";")[0]):  # the writer refuses it too: reader and writer agree
        Result.from_row(row)


def test_a_schema_6_file_is_read_with_no_workload(tmp_path):
    """Schema 6 (q_len and kv_heads, without workload) is what issue 32's first part wrote: it must read, a decode
    row keeping its shape."""
    from host.results import FIELD_NAMES

    row = Result(run_id="r", timestamp="t", git_rev="g", host="h", device="d", target="cpu", kernel="numpy",
                 dtype="float32", batch=1, heads=32, kv_heads=8, seq=4096, q_len=1, dim=4, causal=True, seed=0,
                 status="skipped", message="why").to_row()
    names = [name for name in FIELD_NAMES if name != "workload"]
    row["schema_version"] = "6"
    (tmp_path / "results.csv").write_text(",".join(names) + "\n" + ",".join(row[name] for name in names) + "\n")
    results = ResultsFile(tmp_path / "results.csv")
    [read] = results.read()
    assert (read.q_len, read.kv_heads, read.workload, read.schema_version) == (1, 8, "", 6)
    results.append(read.replace(schema_version=7, workload="llama3-8b-decode"))  # the file is upgraded in place
    assert [(r.workload, r.schema_version) for r in results.read()] == [("", 6), ("llama3-8b-decode", 7)]
    assert "workload" in results.header()


def test_a_decode_problems_k_and_v_are_not_the_square_problems_at_the_same_seed():
    """Q is drawn first, so a square problem's inputs are what they always were, and a decode problem's K and V
    follow its shorter Q: they are not the square problem's, nor is its Q the square Q's last rows
    (docs/architecture.md "The problem"). A comparison of decode with prefill slices the square problem's own inputs
    (as the tests above do), never one problem's Q against the other's K/V."""
    square = AttentionProblem(heads=2, seq=17, dim=5, seed=3)
    decode = square.with_(q_len=3)
    (sq, sk, sv), (dq, dk, dv) = square.inputs(), decode.inputs()
    rng = np.random.default_rng(3)
    assert np.array_equal(dq, rng.standard_normal((1, 2, 3, 5), dtype=np.float32))
    assert np.array_equal(dk, rng.standard_normal((1, 2, 17, 5), dtype=np.float32))
    # the stream's first B·H·q_len·d numbers: not the square Q's last rows (nor its first, past head 0)
    assert np.array_equal(dq.ravel(), sq.ravel()[:dq.size]) and not np.array_equal(dq, sq[:, :, -3:])
    assert not np.array_equal(dq, sq[:, :, :3]) and not np.array_equal(dk, sk) and not np.array_equal(dv, sv)
