"""The twin survives any board code: exceptions that cannot be printed, replaced streams, soft resets that must
forget a session, allocations beyond the host's memory, bad calls of the native module; and the MicroPython
semantics MicroPython's own test runner relies on (`.value` on exceptions, the detailed error messages).

In-process tests drive the REPL over a Link (tests/helpers/twin.py's Wire); the memory tests need the twin's own
process (`python -m mcu.sim`, whose address space is limited) and drive it with mpremote. Every wait is bounded.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from helpers import ROOT
from helpers.twin import CLOCK_HZ, Wire
from mcu.sim.repl import RAW_BANNER
from mcu.sim.server import RESTARTS_MAX, PtyServer

UNPRINTABLE = "class B:\n    def __str__(self):\n        return 1 / 0\n"
FALLBACK = b"ValueError: <exception str() failed>\r\n"


def alive(raw) -> None:
    assert raw.run("print(6 * 7)") == (b"42\r\n", b""), "the twin must go on serving"


# -- 1. formatting an exception and writing output never take the twin down -----------------------------------------

def test_an_exception_whose_str_raises_prints_what_it_can(raw):
    out, err = raw.run(UNPRINTABLE + "raise ValueError(B())")
    assert out == b"" and err.endswith(b'line 4, in <module>\r\n' + FALLBACK)
    alive(raw)


@pytest.mark.parametrize("body", [
    "raise KeyboardInterrupt",  # an interrupt while the message is made
    "return str(self)",  # a RecursionError while the message is made
    "raise SystemExit",  # an exit while the message is made: no soft reset, the message just fails
])
def test_any_failure_while_formatting_gives_the_fallback(raw, body):
    out, err = raw.run(f"class B:\n    def __str__(self):\n        {body}\nraise ValueError(B())")
    assert err.endswith(FALLBACK)
    alive(raw)


def test_a_str_that_never_returns_yields_to_ctrl_c(raw):
    raw.send(b"class B:\n    def __str__(self):\n        while True:\n            pass\n"
             b"print('raising')\nraise ValueError(B())\x04")
    raw.expect(b"raising\r\n")
    time.sleep(0.2)  # the REPL is now formatting the exception, in __str__'s loop
    raw.send(b"\x03")
    assert raw.expect(b"\x04>", 5).endswith(FALLBACK + b"\x04>")
    alive(raw)


def test_exception_classes_that_lie_about_themselves_are_still_printed(raw):
    meta = "class M(type):\n    @property\n    def __name__(cls):\n        1 / 0\nclass X(Exception, metaclass=M):\n" \
           "    pass\nraise X(1)"
    assert raw.run(meta)[1].endswith(b"X: <exception str() failed>\r\n")
    liar = "class L(Exception):\n    @property\n    def __class__(self):\n        1 / 0\n    @property\n" \
           "    def args(self):\n        1 / 0\nraise L()"
    assert raw.run(liar)[1].endswith(b"L: <exception str() failed>\r\n")
    assert raw.run("class E(BaseException):\n    pass\nraise E('x')")[1].endswith(b"E: x\r\n")
    alive(raw)


def test_replaced_stdout_cannot_silence_the_repl(raw):
    for patch in ("sys.stdout.write = None", "type(sys.stdout).write = lambda self, s: len(s)",
                  "sys.stdout = None", "__builtins__['print'] = None"):
        out, err = raw.run(f"import sys\ntry:\n    {patch}\nexcept AttributeError:\n    pass\n"
                           "1 / 0")
        assert err.endswith(b"ZeroDivisionError: divide by zero\r\n"), patch
        raw.send(b"\x04")  # a soft reset: the next patch starts from a clean namespace
        raw.expect(RAW_BANNER + b">")
    out, err = raw.run(UNPRINTABLE + "import sys\nsys.print_exception(ValueError(B()))")
    assert out == FALLBACK and err == b""


def test_a_failing_repr_or_str_at_the_friendly_prompt(wire):
    wire.expect(b">>> ")
    wire.send(b"class R:\r    def __repr__(self):\r        raise KeyboardInterrupt\r\r")
    wire.expect(b">>> ")
    wire.send(b"R()\r")
    assert wire.expect(b">>> ").endswith(b"KeyboardInterrupt: \r\n>>> ")
    wire.send(UNPRINTABLE.replace("\n", "\r").encode() + b"\r")
    wire.expect(b">>> ")
    wire.send(b"print(B())\r")
    assert wire.expect(b">>> ").endswith(b"ZeroDivisionError: divide by zero\r\n>>> ")
    wire.send(b"raise ValueError(B())\r")
    assert wire.expect(b">>> ").endswith(FALLBACK + b">>> ")


def test_boot_py_with_an_unprintable_error_still_boots(tmp_path):
    (tmp_path / "boot.py").write_text(UNPRINTABLE + "import sys\nraise ValueError(B())\n")
    wire = Wire(tmp_path)
    try:
        assert wire.expect(b">>> ").startswith(b'Traceback (most recent call last):\r\n  File "boot.py", line 5')
        wire.send(b"\x01")
        wire.expect(RAW_BANNER + b">")
        alive(wire)
    finally:
        wire.close()


def test_a_failing_repl_thread_restarts_the_board_instead_of_ending_the_twin(tmp_path, monkeypatch):
    server = PtyServer(tmp_path, CLOCK_HZ)
    calls = []

    def flaky():
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise MemoryError()  # what board code's allocations can leave the REPL thread

    monkeypatch.setattr(server.repl, "serve", flaky)
    try:
        assert server.serve(threading.Event()) is None and len(calls) == 2
        monkeypatch.setattr(server.repl, "serve", lambda: 1 / 0)  # broken for good: the twin stops, and says why
        assert isinstance(server.serve(threading.Event()), ZeroDivisionError)
    finally:
        server.close()
    assert RESTARTS_MAX > 1


# -- 2. a soft reset forgets the session ------------------------------------------------------------------------------

PATCHES = ("sys.stdout.write = lambda s: len(s)", "type(sys.stdout).write = lambda self, s: len(s)",
           "type(sys.stdout.buffer).write = lambda self, b: len(b)", "import builtins; builtins.len = None",
           "math.pi = 3",
           "type(sys.implementation).name = 'hacked'", "type(hashlib.sha256(b'')).digest = lambda self: b''",
           "sys.path.append('/elsewhere')", "__builtins__['print'] = None")
#: each patch as board code may try it; those the board refuses (AttributeError) are refused on a board too
SESSION = "import sys, math, hashlib\n" + "".join(
    f"try:\n    {patch}\nexcept (AttributeError, ImportError):\n    pass\n" for patch in PATCHES)
CHECK = ("import sys, math, hashlib\nsys.stdout.write('w\\n')\nsys.stdout.buffer.write(b'b\\n')\n"
         "print(len('abc'), math.pi > 3.1, sys.implementation.name, len(hashlib.sha256(b'').digest()), "
         "'/elsewhere' in sys.path)")
CLEAN = b"True w\r\nb\n3 True micropython 32 False\r\n"


def test_a_soft_reset_restores_a_clean_namespace(raw):
    assert raw.run(SESSION) == (b"", b"")
    raw.send(b"\x04")
    assert raw.expect(b">") == b"OK\r\nMPY: soft reboot\r\n" + RAW_BANNER + b">"
    out, err = raw.run("print(True, end=' ')\n" + CHECK)
    assert (out, err) == (CLEAN, b"")


def test_ctrl_d_in_the_friendly_repl_restores_a_clean_namespace(wire):
    wire.expect(b">>> ")
    wire.send(b"\x05" + SESSION.replace("\n", "\r").encode() + b"\x04")
    wire.expect(b">>> ")
    wire.send(b"\x04")
    assert wire.expect(b">>> ").startswith(b"\r\nMPY: soft reboot\r\nMicroPython v1.")
    wire.raw()
    assert wire.run("print(True, end=' ')\n" + CHECK) == (CLEAN, b"")


# -- 3. host memory: board code gets a MemoryError and the twin goes on --------------------------------------------

def mpremote_exec(twin, code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpremote", "connect", twin.port, "exec", code], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("code", [
    "x = b'a' * 2**31",
    "x = bytearray(2**33)",
    "[].extend(range(10**9))",
    "x = [bytes(10**7) for i in range(1000)]",  # 10 GB, ten megabytes at a time
])
def test_allocating_beyond_the_hosts_share_is_a_memory_error(twin, code):
    done = mpremote_exec(twin, code)
    assert done.returncode == 1 and done.stdout.rstrip().endswith("MemoryError:"), (done.stdout, done.stderr)
    assert twin.process.poll() is None
    assert mpremote_exec(twin, "print('alive')").stdout == "alive\n"


def test_the_memory_limit_leaves_room_for_the_emulator(twin):
    """The Cortex-M4 emulator (a 1 GiB translation buffer) fits under the limit."""
    pytest.importorskip("unicorn")
    from mcu.sim import calibrate

    done = mpremote_exec(twin, calibrate.program(((17, 8, 4),)), timeout=120)
    assert done.returncode == 0, done.stderr
    [line] = [line.split() for line in done.stdout.splitlines() if line.startswith("case")]
    assert calibrate.CaseResult(*(int(x) for x in line[1:])).checksum == calibrate.expected_checksum(17, 8, 4)


# -- 4. q15attn.attention behaves like modq15attn.c -----------------------------------------------------------------

ARGS = ("import q15attn, array\nq = array.array('h', bytes(2 * 17 * 8))\nk = array.array('h', bytes(2 * 17 * 8))\n"
        "vt = array.array('h', bytes(2 * 17 * 8))\no = array.array('h', bytes(2 * 17 * 8))\n")


@pytest.fixture
def q15(raw):
    pytest.importorskip("unicorn")
    out, err = raw.run(ARGS + "print(q15attn.attention(q, k, vt, o, 17, 8, 0, 4, 16714, 43) > 0)", timeout=60)
    if b"ImportError" in err or b"Unavailable" in err:
        pytest.skip(f"no Cortex-M4 kernel for the twin: {err[-200:]!r}")
    assert (out, err) == (b"True\r\n", b"")
    return raw


@pytest.mark.parametrize("call, error", [
    ("q15attn.attention(q, k, vt, o, 17.0, 8, 0, 4, 16714, 43)", b"TypeError: can't convert float to int"),
    ("q15attn.attention(q, k, vt, o, 17, 8, 0, 4, 16714, 43, 2**32)", b"OverflowError: "),
    ("q15attn.attention(q, k, vt, o, 17, 8, 0, 4, 16714)", b"TypeError: "),
    ("q15attn.attention(q, k, vt, o, 17, 8, 0, 4, 16714, 43, 0, 0)", b"TypeError: "),
    ("q15attn.attention(q, k, vt, o, 17, 8, 0, 4, 16714, score_shift=43)", b"TypeError: "),
])
def test_attention_checks_its_arguments_as_the_binding_does(q15, call, error):
    _, err = q15.run(call)
    last = err.splitlines()[-1]
    assert last.startswith(error), err
    assert b"<locals>" not in err and b"make_module" not in err and b"call()" not in err
    if b"positional" in last or b"arguments" in last:
        assert b"attention" in last or b"function" in last


def test_native_functions_show_no_host_names(q15):
    """A natmod's functions print as MicroPython prints a builtin, and lead nowhere on the host."""
    out, _ = q15.run("print(q15attn.attention, q15attn.limits)\n"
                     "print([a for a in ('__closure__', '__globals__', '__self__', '__func__', 'func')"
                     " if hasattr(q15attn.attention, a)])")
    assert out == b"<function> <function>\r\n[]\r\n", out


# -- 5. the MicroPython semantics its test runner relies on ---------------------------------------------------------

def test_the_runners_platform_check_passes(raw):
    """feature_check/target_info.py reads the message of `(lambda: 0)(0)` through `.value` and maps its length to
    the error-reporting level: 56 is "detailed", the STM32 port's (written here from its description)."""
    out, err = raw.run("try:\n    (lambda: 0)(0)\nexcept TypeError as er:\n    print(len(er.value or ''), er.value)")
    assert (out, err) == (b"56 <lambda>() takes 0 positional arguments but 1 were given\r\n", b"")


def test_exceptions_carry_value_and_errno(raw):
    out, err = raw.run("print(ValueError(3).value, KeyError().value, OSError(5).errno, StopIteration(7).value)\n"
                       "class E(Exception):\n    def __init__(self):\n        self.value = 'own'\nprint(E().value)\n"
                       "e = ValueError(1)\ne.value = 2\nprint(e.value)")
    assert (out, err) == (b"3 None 5 7\r\nown\r\n2\r\n", b"")


def test_exec_eval_compile_run_as_board_code(raw):
    out, err = raw.run("exec(compile('if 1: 10 + 1\\n', 'f', 'single'))\nx = 5\nprint(eval('x + 1'))\n"
                       "exec('try:\\n    (lambda: 0)(0)\\nexcept TypeError as er:\\n    print(len(er.value))')\n"
                       "import __main__\nprint(__main__.x)\nexec('print(x)', {'x': 2})\n"
                       "exec('print(x)', None, {'x': 3})")
    assert (out, err) == (b"11\r\n6\r\n56\r\n5\r\n2\r\n3\r\n", b"")


def test_micropython_decorators(raw):
    out, err = raw.run("@micropython.native\ndef f():\n    return 1\n@micropython.viper\ndef g():\n    return 2\n"
                       "print(f() + g())\ntry:\n    exec('@micropython.asm_thumb\\ndef h():\\n    nop()\\n')\n"
                       "except SyntaxError:\n    print('no inline assembler')")
    assert (out, err) == (b"3\r\nno inline assembler\r\n", b"")


def test_print_to_a_stream_writes_each_piece(raw):
    out, err = raw.run("import io\nclass W(io.IOBase):\n    def write(self, s):\n        print('write', len(s))\n"
                       "print('four', 1, file=W())\nimport sys\ntry:\n    sys.exit()\nexcept SystemExit as e:\n"
                       "    print(e.args)")
    assert (out, err) == (b"write 4\r\nwrite 1\r\nwrite 1\r\nwrite 1\r\n()\r\n", b"")
