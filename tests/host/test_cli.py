"""host/cli_common.py: argument types quote the bad value and the allowed range; guard maps errors to exit statuses."""

import argparse

import pytest

from host.cli_common import guard, int_list, integer, name_list
from host.errors import LinkError, ResultsError, SpecError


@pytest.mark.parametrize("parse,text,message", [
    (integer("dim", 1, 256), "0", "dim=0 is out of range; allowed: 1..256"),
    (integer("iters", 1), "-3", "iters=-3 is out of range; allowed: >= 1"),
    (integer("Br", 8, 128, (8, 16)), "12", "Br=12 is not supported; allowed: 8, 16"),
    (integer("seq", 1, 9), "x", "'x' is not an integer; allowed: 1..9"),
    (int_list("seq", 1, 9), "1,,2", "'1,,2' is not a comma-separated list of integers (1..9)"),
    (int_list("seq", 1, 9), "1,10", "seq=10 is out of range; allowed: 1..9"),
    (name_list, " ", "' ' is not a comma-separated list of names"),
])
def test_types_quote_the_value_and_the_range(parse, text, message):
    with pytest.raises(argparse.ArgumentTypeError) as info:
        parse(text)
    assert str(info.value) == message


def test_lists_keep_order_and_drop_duplicates():
    assert int_list("seq", 1, 99)(" 17, 1,17 ,97") == (17, 1, 97)
    assert name_list("cpu, gpu,cpu") == ("cpu", "gpu")


def test_guard_maps_errors_to_statuses_and_prints_one_line(capsys):
    def fail(exc):
        def body():
            raise exc
        return body

    assert guard(lambda: 0) == 0
    assert guard(fail(SpecError("dim=0 is out of range"))) == 2
    assert capsys.readouterr().err == "kbench: error: dim=0 is out of range\n"
    assert guard(fail(LinkError("board did not answer"))) == 1
    assert capsys.readouterr().err == "kbench: board did not answer\n"
    assert guard(fail(ResultsError("results.csv:2: not UTF-8"))) == 1, "only a SpecError is a bad argument"
    assert capsys.readouterr().err == "kbench: results.csv:2: not UTF-8\n"
    with pytest.raises(ZeroDivisionError):
        guard(lambda: 1 // 0)


def test_guard_turns_ctrl_c_into_one_line_and_130(capsys):
    def interrupted():
        raise KeyboardInterrupt

    assert guard(interrupted) == 130
    assert capsys.readouterr().err == "kbench: interrupted\n"
    assert guard(interrupted, interrupted="3 rows kept") == 130
    assert capsys.readouterr().err == "kbench: interrupted; 3 rows kept\n"


def test_ctrl_c_in_any_codesign_command_is_one_line(capsys, monkeypatch):
    import codesign.gemm

    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(codesign.gemm, "main", interrupted)
    from codesign.__main__ import main

    assert main(["gemm", "1", "1", "1"]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kbench: ") and "interrupted" in err, err
