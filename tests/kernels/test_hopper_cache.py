"""The Hopper kernel's on-disk build cache (kernels/hopper.py): a build is found again only under the key of exactly
its sources, expressions, options and NVRTC version, and a damaged or missing entry means a rebuild, never an error."""

from kernels import hopper

ARGS = ([b"source", b"header"], ("flash<64>",), ["-arch=sm_90a"], (12, 8))


def test_a_build_is_found_again_under_its_key_only(tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path))
    key = hopper.build_key(*ARGS)
    assert hopper.read_build(key) is None
    hopper.write_build(key, b"\x7fELF cubin", {"flash<64>": "_Z5flashILi64EEvv"})
    assert hopper.read_build(key) == (b"\x7fELF cubin", {"flash<64>": "_Z5flashILi64EEvv"})
    changed = [([b"source!", b"header"], *ARGS[1:]), (ARGS[0], ("flash<128>",), *ARGS[2:]),
               (*ARGS[:2], ["-arch=sm_90"], ARGS[3]), (*ARGS[:3], (12, 9)),
               ([b"sourceh", b"eader"], *ARGS[1:])]  # the same bytes split elsewhere are other sources
    assert len({key, *(hopper.build_key(*args) for args in changed)}) == 1 + len(changed)


def test_a_damaged_entry_is_built_again(tmp_path, monkeypatch):
    monkeypatch.setenv("KBENCH_CACHE", str(tmp_path))
    key = hopper.build_key(*ARGS)
    hopper.write_build(key, b"0123456789", {"f": "g"})
    cubin = tmp_path / "cubin" / f"{key}.cubin"
    cubin.write_bytes(b"01234")  # truncated: the length recorded beside it no longer matches
    assert hopper.read_build(key) is None
    hopper.write_build(key, b"0123456789", {"f": "g"})
    (tmp_path / "cubin" / f"{key}.json").write_text("{not json")
    assert hopper.read_build(key) is None


def test_an_unwritable_cache_costs_only_a_compile(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would go")
    monkeypatch.setenv("KBENCH_CACHE", str(blocker))
    hopper.write_build("k", b"cubin", {})
    assert hopper.read_build("k") is None
