# The twin's boot code, run by mcu/sim/vm/twin.mjs in each fresh VM before its REPL starts: what makes the
# WebAssembly port stand for the STM32F407 firmware. Board code imports `sys`, `gc`, `os`, `machine`, `pyb` and
# `q15attn` through the hook below and gets the board's modules from /twin (mcu/sim/vm/board/): the port's own with
# what the F407 build has different (_board_*.py: sys.implementation and sys.platform, gc.mem_free() without the
# port's split-heap allowance and the board's gc.threshold(), os.uname), and the stand-ins whose calls go to the
# twin's Python side through /dev/twin (q15attn's Cortex-M4 kernel, the modelled peripherals). `micropython` is the
# port's own: the twin judges the line's Ctrl-Cs when the frame server clears and restores the interrupt character
# (code that calls kbd_intr itself has them judged at the twin's next look, within 5 ms).
import builtins as _builtins
import gc as _gc
import os as _os
import sys as _sys

import js as _js

_SPLIT = 1 << 27  # the port's gc_get_max_new_split(), which its gc.mem_free() adds to the real figure
_STANDINS = ("machine", "pyb", "q15attn")
_BOARD = ("sys", "gc", "os")  # the port's own, as the F407 firmware has them: /twin/_board_*.py
_import = _builtins.__import__
_serving = [None]


_loading = [0]  # > 0 while a module of /twin loads: its imports are the port's own


def _standin(name):
    module = _sys.modules.get(name)
    if module is None:
        saved = _sys.path[:]
        _sys.path[:] = ["/twin"]
        _loading[0] += 1
        try:
            module = _import(name)
        finally:
            _loading[0] -= 1
            _sys.path[:] = saved
    return module


_begin = [None]
_line_in = open("/dev/twinline", "rb")  # noqa: SIM115 - the board's serial line (mcu/sim/vm/twin.mjs), for the VM's life
_line_out = open("/dev/twinline", "wb")  # noqa: SIM115


def _stepped_serve(module, rx=None, tx=None, kernel=None):
    # kbench_server.serve() as the twin runs it: the command returns at once (what it made is collected as it does:
    # the port collects only between calls into the VM, and a board would collect inside begin() when it had to),
    # then JS begins and announces the server (_kbench_begin) and steps it a frame at a time (_kbench_step), what a
    # step allocated collected as it returns
    if rx is None:  # sys.stdin.buffer and sys.stdout.buffer as the twin's line device: a read is one call to JS
        rx, tx = _line_in, (_line_out if tx is None else tx)
    _begin[0] = (module, rx, tx, kernel)
    _gc.collect()
    _js.kbenchServing()


def _kbench_begin():
    module, rx, tx, kernel = _begin[0]
    _begin[0] = None
    _js.kbenchBinary()  # from the HELLO on, the line carries frames: no \n is cooked
    _serving_line(1)
    _js.kbenchInterruptCharChanging()  # the Ctrl-Cs so far are judged before begin() clears the interrupt character
    server = module.begin(rx, tx, kernel)
    _serving[0] = module
    server.announce()


def _kbench_import(name, *rest):
    if _loading[0]:
        return _import(name, *rest)
    if name in _BOARD:
        return _standin("_board_" + name)
    if name in _STANDINS:
        return _standin(name)
    module = _import(name, *rest)
    if name == "kbench_server" and hasattr(module, "begin") and not hasattr(module, "_stepped"):
        module._stepped = True
        module.serve = lambda rx=None, tx=None, kernel=None: _stepped_serve(module, rx, tx, kernel)
    return module


def _serving_line(on):
    bridge = _standin("_twin_bridge")
    bridge.call(bridge.SERVING, on)


def _kbench_step():
    # the frame server's reads up to the end of a frame (a frame's answer is what allocates), then back to JS, which
    # collects what they allocated
    module = _serving[0]
    server = module.active
    decoder = server.decoder
    try:
        going = server.step()
        while going and decoder.raw:  # within a frame: steps that only decode allocate nothing, so no collection
            going = server.step()
    except BaseException:
        _end(module)
        raise
    if not going:
        _end(module)
    return 1 if going else 0


def _end(module):
    _js.kbenchInterruptCharChanging()  # the Ctrl-Cs so far were the frame server's data: judged before end() sets it
    module.end()
    _serving[0] = None
    _serving_line(0)


_builtins.__import__ = _kbench_import


def _input(prompt=""):
    # the port's input() reads a stdin no callback feeds, and hangs: the line's, as a board's
    if prompt:
        _sys.stdout.write(prompt)
    line = _sys.stdin.readline()
    return line[:-1] if line.endswith("\n") else line


_builtins.input = _input


_ballast = []


def _kbench_settle(board_free, board_alloc):
    # a ballast that leaves board code `board_free` bytes and shows it `board_alloc` allocated (a plain VM's after
    # boot), the stand-ins already loaded as a board's firmware has machine and pyb
    board_gc = _standin("_board_gc")
    extra = board_gc.mem_free() - board_free
    if extra > 16:
        _ballast.append(bytearray(extra - 16))  # a GC block of its own header rounds it up
    board_gc.kept[0] = _gc.mem_alloc() - board_alloc


for _name in ("_twin_bridge", "machine", "pyb", "_board_sys", "_board_gc", "_board_os"):
    _standin(_name)
_sys.path[:] = ["", ".frozen", "/flash", "/flash/lib"]
# Any allocation asks for a collection, which the port runs as control returns to JS (it cannot collect inside a
# call): so whatever a REPL command or a step of the frame server allocated is collected as it returns, and a call
# that allocated nothing costs no collection. Board code sees the board's threshold (_board_gc.py).
_gc.threshold(0)
_os.chdir("/flash")
_gc.collect()
