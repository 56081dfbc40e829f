"""Named workloads (host/workloads.toml, host/workloads.py) and `host.compare --workload`: the table's models and
phases as problems, its listing, and the CLI's refusals."""

from __future__ import annotations

import pytest

from host import workloads
from host.errors import SpecError
from host.results_file import ResultsFile


def test_every_workload_is_a_valid_problem_of_its_models_shape():
    table = workloads.load()
    assert len(table) >= 10
    llama = table["llama3-8b-decode"].problem
    assert (llama.heads, llama.kv_head_count, llama.dim, llama.causal, llama.queries, llama.seq) == \
        (32, 8, 128, True, 1, 8192)
    assert table["llama3-8b-prefill"].problem.square is False and table["llama3-8b-prefill"].phase == "prefill"
    assert table["vit-b16"].problem.seq == 197 and table["vit-b16"].phase == "encode"
    for workload in table.values():
        p = workload.problem
        assert p.heads % p.kv_head_count == 0 and "config.json" in workload.source
        assert workload.phase in workloads.PHASES


@pytest.mark.parametrize("seq,q_len,causal,phase", [
    (8192, None, True, "prefill"), (197, None, False, "encode"), (8192, 1, True, "decode"), (97, 1, False, "decode"),
    (8192, 512, True, "chunked prefill"), (17, 3, True, "chunked prefill"), (17, 16, True, "chunked prefill"),
    (97, 17, False, "cross"), (1, 1, True, "prefill")])
def test_the_phase_follows_the_queries_against_the_keys(seq, q_len, causal, phase):
    """1 < q_len < seq is neither a prefill nor a one-token decode step (the review found such a chunk labelled
    decode): a causal one is a chunk of prefill (or a multi-token decode step), a non-causal one cross-attention's
    shape."""
    from host.problem import AttentionProblem

    workload = workloads.Workload("w", "M", "s", AttentionProblem(heads=12, kv_heads=6, seq=seq, q_len=q_len,
                                                                  causal=causal))
    assert workload.phase == phase and phase in workloads.PHASES
    assert f" {phase} " in workload.line()


def test_the_listing_names_each_workload_and_its_source():
    text = workloads.listing()
    assert "llama3-70b-decode    Llama 3 70B" in text and "H64/8" in text
    assert "sources:" in text and "num_key_value_heads 8" in text


def test_a_bad_table_or_name_is_one_line(tmp_path):
    with pytest.raises(SpecError, match=r"^--workload: unknown workload 'llama9'; allowed: llama3-8b-prefill, "):
        workloads.named(["llama9"])
    bad = tmp_path / "w.toml"
    bad.write_text('[model.m]\ntitle = "M"\nheads = 4\nkv_heads = 3\ndim = 8\ncausal = true\nsource = "s"\n'
                   '[workload.x]\nmodel = "m"\nseq = 8\nbatch = 1\n')
    with pytest.raises(SpecError, match=r"^w\.toml: workload 'x': kv_heads=3 does not divide heads=4"):
        workloads.load(bad)
    bad.write_text('[workload.x]\nmodel = "nobody"\nseq = 8\nbatch = 1\n')
    with pytest.raises(SpecError, match=r"^w\.toml: workload 'x' lacks 'nobody'"):
        workloads.load(bad)


def test_compare_runs_named_workloads_on_cpu_and_asic(tmp_path, capsys):
    from host.sweep import cli as compare

    assert compare.main(["--workload", "list"]) == 0 and "gpt2-decode" in capsys.readouterr().out
    # a name beside list would be dropped unread: refused in one line
    assert compare.main(["--workload", "list,no-such-model", "--out", str(tmp_path / "l")]) == 2
    assert capsys.readouterr().err.count("\n") == 1 and not (tmp_path / "l").exists()
    code = compare.main(["--workload", "vit-b16,gpt2-decode", "--targets", "cpu,asic", "--iters", "1", "--warmup",
                         "0", "--out", str(tmp_path)])
    rows = ResultsFile(tmp_path / "results.csv").read()
    assert code == 0 and len(rows) == 4
    vit = [r for r in rows if r.seq == 197]
    assert {r.status for r in vit} == {"ok"} and {(r.batch, r.heads, r.dim) for r in vit} == {(8, 12, 64)}
    decode = {r.target: r for r in rows if r.q_len == 1}
    assert decode["cpu"].status == "ok" and decode["asic"].status in ("ok", "skipped"), decode["asic"].message
    assert {r.workload for r in vit} == {"vit-b16"} and {r.workload for r in decode.values()} == {"gpt2-decode"}
    assert compare.main(["--workload", "vit-b16", "--seq", "64", "--targets", "cpu", "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err.strip().endswith("--workload sets the problem's shape; drop --seq (or drop "
                                                    "--workload)")
