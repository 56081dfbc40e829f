"""kernels.sweep's command line: defaults that suit the device, progress in a log, an interrupt that says what it
kept, and a default folder git ignores (no GPU: the fake device)."""

import subprocess

from helpers import ROOT, run_module
from host.results_file import ResultsFile
from kernels import sweep

SMALL = ["--gpu-device", "fake", "--br", "16", "--bc", "16,32", "--seq", "17", "--heads", "1", "--iters", "1"]


def parsed(*args):
    return sweep.with_device_defaults(sweep.build_parser().parse_args(list(args)))


def test_the_default_grid_suits_the_device():
    cuda, fake = parsed(), parsed("--gpu-device", "fake")
    assert (cuda.br, cuda.bc, cuda.seq) == ((8, 16, 32, 64), (8, 16, 32, 64), (64, 128, 512, 1024, 4096))
    assert (fake.br, fake.bc, fake.seq) == ((16, 32, 64), (16, 32, 64), (64, 256))  # 18 cells of seconds
    assert parsed("--gpu-device", "fake", "--br", "8", "--seq", "4096").br == (8,)  # given values stay
    assert parsed("--gpu-device", "fake", "--br", "8", "--seq", "4096").seq == (4096,)
    shown = " ".join(sweep.build_parser().format_help().split())
    assert "default on cuda: 8,16,32,64; default on fake: 16,32,64" in shown


def test_the_default_folder_is_one_git_ignores():
    assert sweep.DEFAULT_OUT.parts[:2] == ("reports", "latest")
    probe = sweep.DEFAULT_OUT / sweep.RESULTS_NAME
    done = subprocess.run(["git", "check-ignore", "-q", str(probe)], cwd=ROOT)
    assert done.returncode == 0, f"{probe} is not ignored by .gitignore"


def test_progress_shows_in_a_log(tmp_path):
    """stdout and stderr are pipes here, as in a CI log: a line per row on stderr, counted."""
    done = run_module("kernels.sweep", *SMALL, "--out", str(tmp_path), timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("[1/2, ") and "N=17 Br=16 Bc=16: " in lines[0] and lines[0].endswith(" ok")
    assert lines[1].startswith("[2/2, ") and "N=17 Br=16 Bc=32: " in lines[1]


def test_an_interrupted_sweep_says_how_many_rows_it_kept(tmp_path, monkeypatch, capsys):
    from kernels import fake

    def interrupted_in_the_second_cell(q, k, v, out, problem, br, bc, parts=0):
        if bc == 32:
            raise KeyboardInterrupt
        fake.flash(q, k, v, out, problem, br, bc)

    monkeypatch.setitem(fake.KERNEL_MATH, "flash", interrupted_in_the_second_cell)
    out = tmp_path / "s"
    assert sweep.main([*SMALL, "--bc", "16,32,64", "--out", str(out)]) == 130
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == f"kbench: interrupted; 1 of 3 rows kept in {out / sweep.RESULTS_NAME}"
    assert len(ResultsFile(out / sweep.RESULTS_NAME).read()) == 1


def test_the_heatmap_title_wraps_to_the_figure(tmp_path):
    """A long device name in the title is wrapped onto lines no wider than the figure, not clipped."""
    from matplotlib.figure import Figure

    seen = {}
    original = Figure.suptitle

    def keep(self, text, **kwargs):
        seen["text"], seen["width"] = text, self.get_figwidth()
        return original(self, text, **kwargs)

    rows_out = tmp_path / "s"
    assert sweep.main([*SMALL, "--out", str(rows_out)]) == 0
    rows = ResultsFile(rows_out / sweep.RESULTS_NAME).read()
    Figure.suptitle = keep
    try:
        sweep.heatmap(rows, tmp_path / "h.png", "flash fp32 TFLOP/s; " + "a very long device name " * 8)
    finally:
        Figure.suptitle = original
    lines = seen["text"].splitlines()
    assert len(lines) > 1 and max(map(len, lines)) <= seen["width"] * 72 / (10 * 0.55)
