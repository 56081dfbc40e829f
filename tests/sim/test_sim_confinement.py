"""What the twin confines (docs/twin.md, "Confinement"): entries that are not directories or regular files never
block it, board code cannot silence it past a soft reset, board errors carry no host path, the root cannot be
removed, and the board's builtins do not lead to host objects by their attributes. Every wait is bounded."""

from __future__ import annotations

import errno
import os
import re
import stat
import threading

import pytest

from helpers.twin import Wire
from mcu.sim.sandbox import Sandbox

WAIT_S = 5.0
ROUTES = ("__func__", "__self__", "__globals__", "__closure__", "__wrapped__", "func")
MODULES = ("array", "binascii", "collections", "errno", "gc", "hashlib", "heapq", "io", "json", "machine", "math",
           "micropython", "os", "pyb", "random", "re", "select", "struct", "sys", "time")


@pytest.fixture
def root(tmp_path):
    folder = tmp_path / "root"
    folder.mkdir()
    (folder / "a.txt").write_text("inside")
    (folder / "d").mkdir()
    return folder


@pytest.fixture
def fifo(root):
    path = root / "fifo"
    os.mkfifo(path)
    yield path
    try:  # a twin blocked on it (the bug) is released: opening a FIFO read-write never blocks on Linux
        os.close(os.open(path, os.O_RDWR | os.O_NONBLOCK))
    except OSError:
        pass


@pytest.fixture
def board(root):
    wire = Wire(root)
    wire.raw()
    yield wire
    wire.close()


def board_errno(board, statement: str) -> str:
    """The board's report of `statement`: "ok" or the errno name of the OSError it raised (any other error fails)."""
    out, err = board.run(f"try:\n {statement}\n print('ok')\nexcept OSError as e:\n print(e.errno)\n")
    assert err == b"", err
    code = int(out) if out.strip().isdigit() else out.strip().decode()
    return errno.errorcode.get(code, code) if isinstance(code, int) else code


def in_thread(fn, timeout: float = WAIT_S):
    """fn() in a daemon thread: its result or the exception it raised; fails if it does not return in time."""
    outcome: list = []

    def run():
        try:
            outcome.append(("value", fn()))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(("raised", exc))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout)
    assert outcome, f"{fn} still blocked after {timeout} s"
    return outcome[0]


# -- entries that are not directories or regular files ---------------------------------------------------------

def test_a_fifo_is_not_on_the_board_and_never_blocks_it(board, root, fifo):
    os.symlink("fifo", root / "to_fifo")
    for statement in ("open('fifo')", "open('fifo', 'rb')", "open('fifo', 'w')", "open('fifo', 'a+')",
                      "open('to_fifo')", "os.stat('fifo')", "os.listdir('fifo')", "os.remove('fifo')",
                      "os.rmdir('fifo')", "os.rename('fifo', 'moved')", "os.chdir('fifo')"):
        board.run("import os")
        assert board_errno(board, statement) == "ENOENT", statement
    assert board.run("import os\nprint(os.listdir())") == (b"['a.txt', 'd']\r\n", b"")
    # renaming a board file onto the hidden entry would destroy a host object the board cannot see
    assert board_errno(board, "os.rename('a.txt', 'fifo')") == "EACCES"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and (root / "a.txt").read_text() == "inside"
    # and regular files still open in every mode, through the same non-blocking path
    assert board.run("f = open('n.txt', 'w'); f.write('one'); f.close()\n"
                     "f = open('n.txt', 'a'); f.write('+two'); f.close()\n"
                     "f = open('n.txt', 'r+'); print(f.read()); f.seek(0); f.write('ONE'); f.close()\n"
                     "f = open('n.txt', 'w'); f.write('3'); f.close()\n"
                     "print(open('n.txt', 'rb').read())") == (b"one+two\r\nb'3'\r\n", b"")
    assert board_errno(board, "open('n.txt', 'x')") == "EEXIST"
    assert board_errno(board, "open('d')") == "EISDIR" and board_errno(board, "open('d', 'w')") == "EISDIR"
    assert board.run("open('n.txt', 'rw')")[1].endswith(b"ValueError: invalid mode 'rw'\r\n")


@pytest.mark.parametrize("swap", ["fifo", "symlink"])
def test_an_entry_swapped_between_the_check_and_the_open_is_refused(root, monkeypatch, swap):
    """The race: a.txt is a regular file when open() looks, and a FIFO (or a symlink) when it opens."""
    target = root / "a.txt"
    real_stat = os.stat

    def stat_then_swap(path, *args, **kwargs):
        result = real_stat(path, *args, **kwargs)
        if os.fspath(path) == str(target) and not os.path.islink(target) and stat.S_ISREG(result.st_mode):
            target.unlink()
            if swap == "fifo":
                os.mkfifo(target)
            else:
                os.symlink(root / "d" / "elsewhere.txt", target)
        return result

    box = Sandbox(root)
    monkeypatch.setattr(os, "stat", stat_then_swap)
    try:
        kind, value = in_thread(lambda: box.open("a.txt").read())
    finally:
        monkeypatch.undo()
        if stat.S_ISFIFO(os.lstat(target).st_mode):
            os.close(os.open(target, os.O_RDWR | os.O_NONBLOCK))
    assert kind == "raised" and isinstance(value, OSError), value
    assert value.errno == (errno.ENOENT if swap == "fifo" else errno.EACCES)


# -- output cannot be silenced past a soft reset --------------------------------------------------------------------

def test_stdio_refuses_attribute_assignment_and_output_survives_a_soft_reset(board):
    for statement in ("sys.stdout.write = lambda s: len(s)", "sys.stdout.buffer.write = lambda b: len(b)",
                      "sys.stdin.read = None", "type(sys.stdout).write = lambda self, s: len(s)",
                      "sys.stdout._link.write = lambda b: None"):
        out, err = board.run(f"import sys\n{statement}\n")
        assert out == b"" and b"AttributeError: " in err and b"has no attribute" in err, (statement, err)
    assert board.run("import sys\nsys.stdout.write('still\\n'); print(sys.stdout)") == (
        b"still\r\n<io.TextIOWrapper 1>\r\n", b"")
    board.send(b"\x04")
    board.expect(b">")
    assert board.run("import sys\nsys.stdout.write('after\\n'); print('reset')") == (b"after\r\nreset\r\n", b"")


# -- board errors carry no host path --------------------------------------------------------------------------------

def test_board_oserrors_carry_the_errno_only(board, root):
    statements = ("open('missing')", "open('d', 'w')", "open('missing/x', 'w')", "os.mkdir('d')",
                  "os.rename('missing', 'x')", "os.remove('missing')", "os.rmdir('a.txt')", "os.listdir('missing')",
                  "os.chdir('a.txt')", "os.stat('../x')", "open('a.txt', 'w').read()")
    probe = ("import os\nfor s in {statements!r}:\n"
             " try:\n  eval(s)\n except OSError as e:\n"
             "  c = e.__context__\n"
             "  print(s, e.args, str(e), repr(e), e.filename, e.filename2, e.strerror, c, repr(c),"
             " getattr(c, 'filename', None), e.__cause__)\n")
    out, err = board.run(probe.format(statements=statements))
    assert err == b"", err
    lines = out.decode().splitlines()
    assert len(lines) == len(statements), out
    for statement, line in zip(statements, lines):
        assert str(root.parent) not in line, line
        # args (errno,), str and repr as MicroPython's; no file names, strerror, context, its file name or cause
        assert re.fullmatch(re.escape(statement) + r" \((\d+),\) \[Errno \1\] E[A-Z]+ OSError\(\1\)"
                            r" None None None None None None None", line), line


# -- the root stays --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("statement", ["os.rmdir('/')", "os.rmdir('/flash')", "os.rmdir('/flash/..')",
                                       "os.rmdir('.')", "os.rmdir('')", "os.rmdir('d/..')", "os.remove('/')",
                                       "os.rename('/', '/d/root')", "os.rename('/flash/d/..', 'x')",
                                       "os.rename('a.txt', '/flash')"])
def test_the_root_cannot_be_removed_or_renamed(board, root, statement):
    (root / "a.txt").unlink()  # an empty root, which a plain rmdir would take
    (root / "d").rmdir()
    board.run("import os")
    assert board_errno(board, statement) == "EPERM"
    assert root.is_dir()


# -- the board's builtins do not lead to host objects ---------------------------------------------------------------

def test_board_functions_have_no_route_to_host_objects(board, root):
    names = ("open", "io.open", "os.stat", "os.listdir", "os.ilistdir", "os.mkdir", "os.rmdir", "os.remove",
             "os.rename", "os.chdir", "os.getcwd", "os.statvfs")
    probe = ("import os, io\nfor name in {names!r}:\n f = eval(name)\n"
             " print(name, repr(f), [a for a in ('__func__', '__self__', '__globals__', '__closure__',"
             " '__wrapped__', 'func') if hasattr(f, a)])\n")
    out, err = board.run(probe.format(names=names))
    assert err == b"", err
    assert out.decode().splitlines() == [f"{name} <function> []" for name in names]
    out, err = board.run("open.__func__.__globals__['os']")
    assert err.endswith(b"AttributeError: 'BoardFunction' object has no attribute '__func__'\r\n"), err
    # files hide the host file object and its path, and refuse attributes as a board's do
    out, err = board.run("f = open('a.txt')\nprint(repr(f), [a for a in ('_raw', 'name', 'buffer', '_owner')"
                         " if hasattr(f, a)])\nf.close = None")
    assert out.startswith(b"<io.TextIOWrapper ") and out.endswith(b"> []\r\n") and str(root).encode() not in out
    assert err.endswith(b"AttributeError: 'TextIOWrapper' object has no attribute 'close'\r\n"), err
    # the host side cannot be re-rooted either
    box = Sandbox(root)
    with pytest.raises(AttributeError):
        box.root = root.parent
    assert box.root == root


def routes_from(board, module: str) -> list[str]:
    """The callables of board module `module` (classes aside) that have an attribute leading to host objects."""
    probe = (f"import {module}\nprint([n for n, f in sorted(vars({module}).items()) if callable(f)"
             f" and not isinstance(f, type) and any(hasattr(f, a) for a in {ROUTES!r})])")
    out, err = board.run(probe)
    assert err == b"", err
    return eval(out.decode())


def test_the_builtins_do_not_lead_to_the_interpreter_or_host_modules(board, root):
    """print, input, help, __import__, exec, ... were bound methods of the Interpreter (print.__self__.sandbox could
    re-root the twin, print.__func__.__globals__ held the host modules) and len.__self__ was the host `builtins`."""
    assert routes_from(board, "builtins") == []
    for name in ("print", "input", "help", "__import__", "exec", "eval", "compile", "len", "__build_class__"):
        assert board.run(f"print(repr({name}))") == (b"<function>\r\n", b""), name
    for statement in ("print.__self__", "print.__func__.__globals__", "len.__self__", "__import__.__self__"):
        out, err = board.run(statement)
        assert out == b"" and err.startswith(b"Traceback") and b"AttributeError: " in err, (statement, err)
    out, err = board.run("print.__self__ = 1")
    assert err.endswith(b"AttributeError: 'BoardFunction' object has no attribute '__self__'\r\n"), err
    assert board.run("print.__self__.sandbox._root = '/'")[1].endswith(
        b"AttributeError: 'BoardFunction' object has no attribute '__self__'\r\n")
    # the builtins still behave as before through their wrappers
    assert board.run("import os\nexec('x = len([1, 2])')\nprint(x, eval('x + 1'), os.listdir(), __import__('sys')"
                     ".platform)\nclass C:\n    pass\nprint(C.__name__)") == (
        b"2 3 ['a.txt', 'd'] pyboard\r\nC\r\n", b"")


@pytest.mark.parametrize("module", MODULES)
def test_module_functions_do_not_lead_to_the_interpreter_or_host_modules(board, module):
    """time.time, sys.exit, json.dumps, ... were closures and host functions: __closure__ led to the Interpreter,
    __globals__ to host modules, a builtin's __self__ to its host module."""
    assert routes_from(board, module) == []


def test_module_functions_still_work_wrapped(board):
    out, err = board.run("import time, sys, json, math, random, gc\nrandom.seed(1)\n"
                         "print(repr(time.time), type(time.time()), json.dumps([1]), math.sqrt(4.0), "
                         "random.randint(3, 3), gc.mem_free() > 0)\n"
                         "try:\n 1/0\nexcept Exception as e:\n sys.print_exception(e)\n"
                         "try:\n sys.exit(3)\nexcept SystemExit as e:\n print(e.value)")
    assert out == (b"<function> <class 'int'> [1] 2.0 3 True\r\n"
                   b"Traceback (most recent call last):\r\n  File \"<stdin>\", line 5, in <module>\r\n"
                   b"ZeroDivisionError: divide by zero\r\n3\r\n"), out
    assert err == b""


def test_stdio_names_itself_as_the_stm32_port_does(board):
    """MicroPython's tests/basics/sys_stdio.py and sys_stdio_buffer.py: TextIOWrapper streams over FileIO buffers."""
    probe = ("import sys\nfor s in (sys.stdout, sys.stderr, sys.stdin):\n"
             " print(str(s), str(type(s)), str(s.buffer), str(type(s.buffer)))")
    out, err = board.run(probe)
    assert err == b"", err
    assert out.decode().splitlines() == [
        f"<io.TextIOWrapper {fd}> <class 'TextIOWrapper'> <io.FileIO {fd}> <class 'FileIO'>" for fd in (1, 1, 0)]
    out, err = board.run("import sys\nsys.stdout.buffer.write = None")
    assert err.endswith(b"AttributeError: 'FileIO' object has no attribute 'write'\r\n"), err


@pytest.mark.parametrize("target", ["open('a.txt')", "sys.stdout", "sys.stdin", "sys.stdout.buffer"])
def test_files_and_streams_hand_out_no_pickling_hooks(board, target):
    """object.__reduce_ex__ returns copyreg's functions, whose __globals__ reach the host's builtins (an
    adversarial pass read /etc/hostname that way); a board's files have no such method."""
    out, err = board.run(f"import sys\nprint(getattr({target}, '__reduce_ex__', 'absent'))")
    assert out == b"None\r\n", (out, err)
    out, err = board.run(f"import sys\n{target}.__reduce_ex__(0)")
    assert err.endswith(b"TypeError: 'NoneType' object is not callable\r\n"), err


def test_sys_streams_cannot_be_replaced_as_on_a_board(board):
    for name in ("stdout", "stdin", "stderr"):
        out, err = board.run(f"import sys\nsys.{name} = None")
        assert err.endswith(f"AttributeError: 'module' object has no attribute '{name}'\r\n".encode()), err
    out, err = board.run("import sys\nprint('still', 'here')")
    assert out == b"still here\r\n" and err == b""


@pytest.mark.parametrize("statement", ["os.rmdir('up/root')", "os.rename('up/root', '/d/y')", "os.remove('up/root')"])
def test_the_root_spelt_through_a_symlink_to_its_parent_is_still_the_root(board, root, statement):
    (root / "up").symlink_to(root.parent)  # up/root is the root itself, seen from outside
    board.run("import os")
    assert board_errno(board, statement) == "EPERM"
    assert root.is_dir() and (root / "up").is_symlink()
