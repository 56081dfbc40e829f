"""host/cli_common.py: argument types quote the bad value and the allowed range; guard maps errors to exit statuses."""

import argparse
import importlib
import importlib.util
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import ROOT
from host.cli_common import Parser, guard, int_list, integer, name_list, terminate_on_sigterm
from host.errors import LinkError, ResultsError, SpecError


@pytest.mark.parametrize("parse,text,message", [
    (integer("dim", 1, 256), "0", "dim=0 is out of range; allowed: 1..256"),
    (integer("iters", 1), "-3", "iters=-3 is out of range; allowed: >= 1"),
    (integer("Br", 8, 128, (8, 16)), "12", "Br=12 is not supported; allowed: 8, 16"),
    (integer("seq", 1, 9), "x", "'x' is not an integer; allowed: 1..9"),
    (integer("seq", 1, 99999), "10_000", "'10_000' is not an integer; allowed: 1..99999"),
    (integer("seq", 1, 9), "\u0665", "'\u0665' is not an integer; allowed: 1..9"),  # an Arabic-Indic five
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


@pytest.mark.parametrize("value, message", [
    ("-1e9", "clock=-1e9 is out of range"), ("-4x4", "has a side of -4"), ("-1,2", "seq=-1 is out of range")])
def test_a_negative_value_argparse_would_take_for_an_option_is_judged_as_a_value(value, message):
    """argparse takes only -5 and -0.5 for numbers: -1e9, -4x4 and -1,2 were 'expected one argument', with no value
    or range; kbench's Parser hands them to the option's type."""
    from host.sweep.cli import build_parser

    option = {"-1e9": "--asic-clock", "-4x4": "--asic-array", "-1,2": "--seq"}[value]
    with pytest.raises(SpecError, match=f"argument {option}: .*{re.escape(message)}"):
        build_parser()[0].parse_args([option, value])


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


# -- every host and mcu entry point: one convention (issue 27) ------------------------------------------------------
# (kernels/ and codesign/ check theirs in their own folders; host.cluster in tests/cluster)

#: entry point → (module whose main(argv) it runs, extras it needs, a bad argument, what the error line must name)
ENTRY_POINTS = {
    "host.compare": ("host.sweep.cli", (), ["--seq", "0"], "seq=0"),
    "host.report": ("host.report.render", (), ["/nonexistent/kbench-out"], "/nonexistent/kbench-out"),
    "host.q15_error": ("host.q15_error", (), ["--causal", "2"], "'2'"),
    "host.cpu.cachegrind": ("host.cpu.cachegrind", (), ["--batch", "0", "--heads", "1", "--seq", "1", "--dim", "1",
                                                        "--causal", "0", "--seed", "0"], "batch=0"),
    "mcu.deploy": ("mcu.deploy", ("cobs",), ["--serial", "/dev/null", "--baud", "7"], "baud=7"),
    "mcu.link_bench": ("mcu.link_bench", ("cobs",), ["--windows", "1,0"], "windows=0"),
    "mcu.planner": ("mcu.planner", (), ["--dim", "32,0"], "dim=0"),
    "mcu.q15_bench": ("mcu.q15_bench", (), ["--repeats", "0"], "repeats=0"),
    "mcu.sim": ("mcu.sim.__main__", (), ["--clock", "5"], "clock=5"),
    "mcu.sim.bench": ("mcu.sim.bench", (), ["--causal", "maybe"], "'maybe'"),
    "mcu.sim.calibrate": ("mcu.sim.calibrate", (), ["--timeout", "-1"], "-1"),
    "scripts/coremark_twin.py": (str(ROOT / "scripts" / "coremark_twin.py"), (),
                                 ["--coremark", "/nonexistent", "--iterations", "zero"], "'zero'"),
}


def tool(name: str):
    """The module behind an entry point (a script loaded from its file), skipped where its extras are missing."""
    module, extras, _, _ = ENTRY_POINTS[name]
    for extra in extras:
        pytest.importorskip(extra, reason=f"{name} needs {extra} (pip install -e '.[mcu]')")
    if module.endswith(".py"):
        name = Path(module).stem
        if name not in sys.modules:  # a script's dataclasses look their module up there
            spec = importlib.util.spec_from_file_location(name, module)
            sys.modules[name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(sys.modules[name])
        return sys.modules[name]
    return importlib.import_module(module)


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_a_bad_argument_exits_2_with_one_line_naming_the_value(name, capsys, keep_signals):
    _, _, argv, named = ENTRY_POINTS[name]
    assert tool(name).main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kbench: error: ") and named in err, err


def parser_of(name: str, monkeypatch) -> argparse.ArgumentParser:
    """The parser the entry point's main builds, caught as it parses."""
    class Caught(Exception):
        pass

    def catch(self, *args, **kwargs):
        raise Caught(self)

    monkeypatch.setattr(Parser, "parse_args", catch)
    with pytest.raises(Caught) as caught:
        tool(name).main(["--help"])
    monkeypatch.undo()
    return caught.value.args[0]


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_help_exits_0_whole_with_the_exit_statuses(name, capsys, monkeypatch, keep_signals):
    module = tool(name)
    with pytest.raises(SystemExit) as done:
        module.main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    text = " ".join(out.split())
    parser = parser_of(name, monkeypatch)
    assert parser.description and " ".join(parser.description.split()) in text, "the description is cut"
    assert parser.description.count("`") % 2 == 0, "the description ends inside a backtick"
    assert "Exit status: 0 " in text and "2 bad arguments" in text and "130 interrupted" in text, out
    assert not any(line.rstrip().endswith("-") and not line.rstrip().endswith(" -") for line in out.splitlines()), \
        "a word or flag split at its hyphen"


OWN_OPTIONS = [name for name in ENTRY_POINTS if name != "host.compare"]  # compare's target groups are the targets'


@pytest.mark.parametrize("name", OWN_OPTIONS)
def test_every_option_says_what_it_is_and_its_default(name, monkeypatch, keep_signals):
    for action in parser_of(name, monkeypatch)._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        where = f"{name} {'/'.join(action.option_strings) or action.dest}"
        assert action.help, f"{where} has no help"
        if action.option_strings and not isinstance(action, argparse._StoreTrueAction):
            assert "default" in action.help or "required" in action.help, f"{where} does not say its default"


@pytest.mark.parametrize("name", ["host.q15_error", "mcu.sim.bench"])
def test_causal_is_0_1_or_both(name, monkeypatch, keep_signals):
    causal = next(a for a in parser_of(name, monkeypatch)._actions if "--causal" in a.option_strings)
    assert tuple(causal.choices) == ("0", "1", "both")


def test_causal_both_prints_a_row_per_mask(capsys):
    from host import q15_error

    assert q15_error.main(["--seq", "17", "--dim", "8", "--inputs", "normal", "--causal", "both"]) == 0
    out = capsys.readouterr().out
    assert out.count("| normal | 0 | 17 | 8 |") == 1 and out.count("| normal | 1 | 17 | 8 |") == 1


def test_report_reads_a_bad_results_file_in_its_folder_argument_as_a_bad_argument(tmp_path, capsys):
    # Issue 28: a file that is not results is a bad argument or file (exit 2), for host.report as for --resume and
    # codesign explore --results; 1 is for an output the report could not write.
    from host.report.render import main

    (tmp_path / "results.csv").write_text("not,a,results,file\n")
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"kbench: error: OUT_DIR {tmp_path}: ") and "header" in err


@pytest.mark.slow
def test_ctrl_c_in_a_real_tool_is_one_line_and_130():
    """host.q15_error on a large table, run as `python -m` would (runpy), its heavy imports done first so the signal
    lands in its body."""
    code = ("import runpy, sys; import host.cli_common, host.q15, host.reference; print('ready', flush=True); "
            "sys.argv = ['host.q15_error', '--seq', '256,32768', '--dim', '128']; "
            "runpy.run_module('host.q15_error', run_name='__main__', alter_sys=True)")
    process = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "ready"
        time.sleep(4.0)  # into main(), a few rows measured: the whole table takes a minute
        assert process.poll() is None, "the table finished before the interrupt"
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert err.endswith("kbench: interrupted\n") and "Traceback" not in err
    rows = out.splitlines()  # the table's header and the rows measured before the interrupt, each printed whole
    assert rows[0].startswith("| inputs |") and len(rows) >= 3 and all(row.endswith("|") for row in rows)


def test_guard_turns_sigterm_into_one_line_and_143_after_the_finally_clauses(capsys):
    released = []

    def body() -> int:
        try:
            signal.raise_signal(signal.SIGTERM)
            return 0
        finally:
            released.append(True)  # a lock's or a temporary file's cleanup

    before = signal.getsignal(signal.SIGTERM)
    try:
        terminate_on_sigterm()
        assert guard(body, interrupted="nothing written") == 143
    finally:
        signal.signal(signal.SIGTERM, before)
    assert released == [True]
    assert capsys.readouterr().err == "kbench: terminated (SIGTERM); nothing written\n"
