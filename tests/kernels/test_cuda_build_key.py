"""kernels/cuda.py's NVRTC options carry a digest of the headers (CuPy's build cache keys on the source text and the
options only, so without it an edited header would load the old build)."""

from kernels import cuda


def test_the_options_change_when_any_header_changes(tmp_path):
    (tmp_path / "a.cuh").write_text("#define A 1\n")
    (tmp_path / "b.cuh").write_text("#define B 1\n")
    (tmp_path / "k.cu").write_text("// not a header\n")
    before = cuda.headers_digest(tmp_path)
    (tmp_path / "k.cu").write_text("// edited, still not a header\n")
    assert cuda.headers_digest(tmp_path) == before  # sources are in CuPy's key already
    (tmp_path / "b.cuh").write_text("#define B 2\n")
    edited = cuda.headers_digest(tmp_path)
    assert edited != before
    (tmp_path / "b.cuh").rename(tmp_path / "c.cuh")  # same content, another name: another include
    assert cuda.headers_digest(tmp_path) not in (before, edited)


def test_the_build_options_hold_the_shipped_headers_digest():
    options = cuda.module_options(("-DX=1",))
    assert options[0] == "-std=c++17" and options[-1] == "-DX=1"
    assert f"-DKBENCH_HEADERS={cuda.headers_digest()}" in options
