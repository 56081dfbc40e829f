"""kernels.headline --variants (the launch-variant sweep that replaced scripts/gpu_{tc,tf32,wgmma}_bench.py) on the
fake device: every launch a row of the one results schema, checked at awkward N, then timed."""

import pytest

from host.results_file import ResultsFile
from kernels import headline, headline_variants


def test_the_variant_sweep_writes_one_row_per_launch(tmp_path, capsys):
    out = tmp_path / "v"
    assert headline.main(["--gpu-device", "fake", "--variants", "tf32", "--set", "quick", "--seq-scale", "32",
                          "--iters", "1", "--out", str(out)]) == 0
    rows = ResultsFile(out / "results.csv").read()
    # quick: one launch per d (64, 128) × both masks × (3 checks: N 1, 17, 1000, 4097 over 32 are 1, 1, 31, 128;
    # + 1 timed) = 16 rows, all float32 flash
    assert len(rows) == 16 and {row.status for row in rows} == {"ok"} and {row.dtype for row in rows} == {"float32"}
    timed = [row for row in rows if row.p50_ms is not None]
    assert sorted({row.seq for row in rows}) == [1, 31, 128]  # N 1, 17, 1000, 4097 and 4096, each divided by 32
    assert len(timed) == 4 and {row.seq for row in timed} == {128} and {row.heads for row in timed} == {16}
    d64 = next(row for row in timed if row.dim == 64)
    assert (d64.br, d64.bc) == (128, 32) and "flash_tf32_fwd<64,4,32,2,false>: 128 threads" in d64.message
    table = capsys.readouterr().out
    assert "EFFICIENT -" in table and "FFMA" in table  # no torch on the fake; the FFMA kernel is timed beside
    assert table.startswith("device: fake GPU (numpy on the CPU")  # its rates are numpy's, said before any row


def test_a_set_the_kernel_has_not_is_a_bad_argument(tmp_path, capsys):
    assert headline.main(["--gpu-device", "fake", "--variants", "tf32", "--set", "stages", "--out",
                          str(tmp_path)]) == 2
    assert "--set 'stages' has no tf32 variants; allowed: all, quick" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[], ["--variants", "tf32"]])
def test_no_gpu_is_the_machine_not_a_bad_argument(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(headline.target, "available", lambda settings=None: (False, "no CUDA device (test)"))
    extra = ["--out", str(tmp_path)] if argv else []
    assert headline.main(["--gpu-device", "cuda", *argv, *extra]) == 1
    assert capsys.readouterr().err == ("kbench: nothing can be measured: no CUDA device (test) (--gpu-device fake "
                                       "checks the tool without a GPU)\n")


def test_the_ratios_cover_every_issue_34_length_on_the_fake_device(capsys):
    """The 16-bit comparison runs at each --seqs length (divided by --seq-scale), both dtypes, d 64 and 128, both
    masks: 2 lengths × 8 = 16 rows; the fake measures no matmul rate and has no torch, so those cells say '-'."""
    assert headline.main(["--gpu-device", "fake", "--seq-scale", "64", "--iters", "1", "--seqs", "1024,4096"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith(("float16 ", "bfloat16 "))]
    assert len(rows) == 16 and sorted({row[1] for row in rows}) == ["16", "64"]  # 1024/64, 4096/64
    assert all(row[6] == "-" and row[7] == "-" for row in rows)  # of mm (no matmul rate), FLASH (no torch)
    assert "no matmul rate measured" in out


def test_a_variant_sweep_times_each_seqs_length(tmp_path):
    out = tmp_path / "v"
    assert headline.main(["--gpu-device", "fake", "--variants", "tf32", "--set", "quick", "--seq-scale", "32",
                          "--iters", "1", "--seqs", "1024,4096", "--out", str(out)]) == 0
    timed = [row for row in ResultsFile(out / "results.csv").read() if row.p50_ms is not None]
    # 2 d × 2 masks × 2 lengths (1024/32, 4096/32)
    assert len(timed) == 8 and sorted({row.seq for row in timed}) == [32, 128]


def test_bad_seqs_are_refused_in_one_line(capsys):
    assert headline.main(["--gpu-device", "fake", "--seqs", "1024,0"]) == 2
    err = capsys.readouterr().err
    assert "seqs" in err and "0" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv, named", [
    (["--seqs", "1024", "--no-16bit"], "--seqs sets the 16-bit comparison's N, which --no-16bit skips"),
    (["--q15-seqs", "1024", "--no-q15"], "--q15-seqs sets the q15 section's N, which --no-q15 skips"),
    (["--variants", "wgmma", "--no-q15"], "--no-q15 apply only to the ratios, not with --variants wgmma"),
    (["--variants", "tc", "--no-16bit", "--q15-seqs", "64"],
     "--no-16bit, --q15-seqs apply only to the ratios, not with --variants tc"),
])
def test_an_option_whose_section_does_not_run_is_refused_in_one_line(argv, named, tmp_path, capsys):
    """Nothing is measured under an option that would be silently ignored (as --set and --out without --variants)."""
    assert headline.main(["--gpu-device", "fake", *argv]) == 2
    err = capsys.readouterr().err
    assert named in err and len(err.strip().splitlines()) == 1 and not (tmp_path / "results.csv").exists()


def test_the_q15_section_runs_q15_beside_float16_on_the_same_shapes(capsys):
    """--q15-seqs 1024 at --seq-scale 64: N 16, d 64 and 128, both masks: 4 lines, each with the q15 row's verdict
    (the fake runs host/q15.py's model, so every row is bit-exact: ok) and no energy on the fake."""
    assert headline.main(["--gpu-device", "fake", "--seq-scale", "64", "--iters", "1", "--no-16bit",
                          "--q15-seqs", "1024"]) == 0
    out = capsys.readouterr().out
    lines = [line.split() for line in out.splitlines() if line.split()[:1] == ["16"] and len(line.split()) == 11]
    assert "-: mJ/head: no energy measured on fake GPU" in out  # the '-' cells say why
    assert [(row[1], row[2]) for row in lines] == [("64", "0"), ("64", "1"), ("128", "0"), ("128", "1")]
    assert all(row[-1] == "ok" and row[5] == "-" and row[8] == "-" for row in lines)  # verdict; no NVML mJ/head


def test_a_wrong_q15_row_fails_the_headline(monkeypatch, capsys):
    from kernels import q15_headline

    real = q15_headline.target.run

    def one_wrong(problem, inputs, options):
        rows = real(problem, inputs, options)
        return [row.__class__(**{**row.__dict__, "status": "wrong"}) if options.kernel == "q15" else row
                for row in rows]

    monkeypatch.setattr(q15_headline.target, "run", one_wrong)
    assert headline.main(["--gpu-device", "fake", "--seq-scale", "64", "--iters", "1", "--no-16bit",
                          "--q15-seqs", "1024"]) == 1


@pytest.mark.parametrize("dim, bc", [(64, 192), (128, 176), (128, 192)])
@pytest.mark.parametrize("causal", [False, True])
def test_the_i34_larger_key_blocks_run_on_the_fake_in_their_tile(dim, bc, causal):
    """Each launch of the i34 wgmma set with a key block past 128 (kernels/wgmma.cuh's new wgmma_ss shapes) checked
    as the sweep checks it: the fake's flash walks Bc-key tiles, at N 17 (one partial block) and 400 (two full
    blocks of 176 or 192 and a partial third), and each row is `ok` against the golden in its own tile."""
    from host.problem import AttentionProblem
    from host.target_api import RunContext
    from kernels import target

    configs = [c for c in headline_variants.VARIANT_SETS["wgmma"]["i34"][dim] if c.bc == bc]
    assert configs  # d 64: 2 and 3 stages; d 128: 2 (3 would pass 227 KB)
    dev, context = target.backend(target.Settings(device="fake")), RunContext.start()
    for config in configs:
        chosen = headline_variants.configured(headline_variants.FLASH_WGMMA, config, dim)
        for seq in (17, 400):
            problem = AttentionProblem(heads=2, seq=seq, dim=dim, causal=causal, dtype="float16", seed=seq)
            row = headline_variants.variant_row(chosen, problem, 1, dev, context, timed=False)
            assert row.status == "ok" and (row.br, row.bc) == (128, bc), row.message
            assert row.message.startswith(f"flash_wgmma_fwd<0,{dim},{bc},2,{config.stages},2>: 384 threads")


def test_a_second_run_keeps_the_first_aside_and_is_judged_on_its_own_rows(tmp_path):
    """An earlier run's wrong row does not fail a run whose own rows are ok; results.csv holds this run's rows, the
    earlier file is results.csv.prev."""
    import dataclasses

    out = tmp_path / "v"
    argv = ["--gpu-device", "fake", "--variants", "tf32", "--set", "quick", "--seq-scale", "64", "--iters", "1",
            "--out", str(out)]
    assert headline.main(argv) == 0
    first = ResultsFile(out / "results.csv")
    rows = first.read()
    first.rewrite([dataclasses.replace(rows[0], status="wrong"), *rows[1:]])
    assert headline.main(argv) == 0
    assert len(ResultsFile(out / "results.csv").read()) == len(rows)
    assert [row.status for row in ResultsFile(out / "results.csv.prev").read()].count("wrong") == 1


def test_the_table_shows_a_timed_rows_verdict_and_no_small_rate_as_zero(capsys):
    from host.results import Result

    row = Result(run_id="r", timestamp="t", git_rev="g", host="h", device="d", target="gpu", kernel="flash",
                 dtype="float16", batch=1, heads=1, seq=64, dim=64, causal=False, seed=0, status="wrong", message="m",
                 p50_ms=13.583, timing_source="measured: CUDA events")
    headline_variants.print_variants([(row, (4, 32, 2, False), {"FLASH": None})])
    line = capsys.readouterr().out
    # 4·64²·64 FLOP in 13.583 ms: 7.72e-5 TFLOP/s, printed to three figures, not 0.0
    assert "WRONG" in line and "7.72e-05 TFLOP/s" in line, line


def test_a_stopped_variant_sweep_says_how_many_rows_it_kept(tmp_path, capsys, monkeypatch):
    """Ctrl-C during the sweep: the rows measured before it stay, and the line says where (it said 'interrupted'
    alone)."""
    from kernels import headline_variants

    real_row, calls = headline_variants.variant_row, []

    def row_then_stop(*args, **kwargs):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(1)
        return real_row(*args, **kwargs)

    monkeypatch.setattr(headline_variants, "variant_row", row_then_stop)
    out = tmp_path / "v"
    assert headline.main(["--gpu-device", "fake", "--variants", "tf32", "--set", "quick", "--seq-scale", "32",
                          "--iters", "1", "--out", str(out)]) == 130
    assert len(ResultsFile(out / "results.csv").read()) == 2
    assert capsys.readouterr().err.splitlines()[-2:] == [
        f"kbench: the 2 rows measured before the stop are in {out / 'results.csv'}", "kbench: interrupted"]
