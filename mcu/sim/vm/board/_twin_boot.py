# The twin's boot code, imported by mcu/sim/vm/twin.mjs in each fresh VM before its REPL starts (a module of its own:
# board code's globals are a board's): what makes the WebAssembly port stand for the STM32F407 firmware. Board code
# imports `sys`, `gc`, `os`, `time`, `machine`, `pyb` and `q15attn` (with or without the old `u` prefix) through the
# hook below and gets the board's modules from /twin (mcu/sim/vm/board/): the port's own with what the F407 build has
# different (_board_*.py: sys.implementation and sys.platform, gc.mem_free() without the port's split-heap allowance
# and the board's gc.threshold(), os.uname and ilistdir's sizes, sleeps a Ctrl-C ends), and the stand-ins whose calls
# go to the twin's Python side through /dev/twin (q15attn's Cortex-M4 kernel, the modelled peripherals). The port's
# `js` and `jsffi` reach the host: twin.mjs cuts them from the module table (_kbench_js_modules says where they lie),
# so board code gets the port's own ImportError for them, as on a board. `micropython` is the port's own: the twin
# judges the line's Ctrl-Cs when code prints, reads the line or sleeps, when the frame server clears and restores the
# interrupt character, and (through the VM's memory, mcu/sim/vm_process.py) when code only computes. Calls to the JS
# side are letters written to /dev/twinctl.
import builtins as _builtins
import gc as _gc
import os as _os
import sys as _sys

_SPLIT = 1 << 27  # the port's gc_get_max_new_split(), which its gc.mem_free() adds to the real figure
_STANDINS = ("machine", "pyb", "q15attn")
_BOARD = ("sys", "gc", "os", "time")  # the port's own, as the F407 firmware has them: /twin/_board_*.py
_HOST = ("js", "jsffi")  # the port's way to the host, which a board has not
_import = _builtins.__import__
_serving = [None]


_loading = [0]  # > 0 while a module of /twin loads: its imports are the port's own


def _standin(name):
    module = _sys.modules.get(name)
    if module is None:
        module = _preloaded.pop(name, None) or _load(name)
        _sys.modules[name] = module
        if hasattr(module, "_kbench_load"):  # what the module takes of the board's heap as it loads on a board
            module._kbench_load()
    return module


def _load(name):
    saved = _sys.path[:]
    _sys.path[:] = ["/twin"]
    _loading[0] += 1
    try:
        return _import(name)
    finally:
        _loading[0] -= 1
        _sys.path[:] = saved


# q15attn's code, compiled at boot into the twin's share of the heap and out of sys.modules until board code imports
# it: a board's q15attn.mpy takes its machine code of the board's heap (the stand-in's _kbench_load), not the
# stand-in's bytecode, which the binding's checks make several KB
_preloaded = {"q15attn": _load("q15attn")}
_sys.modules.pop("q15attn")


_begin = [None]
_control = open("/dev/twinctl", "wb")  # noqa: SIM115 - the JS side's calls (mcu/sim/vm/twin.mjs), for the VM's life
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
    _control.write(b"S")


_PRELUDE = "/flash/kbench_prelude.py"


def _prelude():
    # /flash/kbench_prelude.py's run(), if the file is there: the twin's hook for heap experiments (docs/twin.md,
    # "A prelude"), called after the server's modules have loaded and just before it begins; imported afresh each
    # time, as the server's modules are, so an edit takes effect at the next start; a board has no such hook
    try:
        _os.stat(_PRELUDE)
    except OSError:
        return
    _sys.modules.pop("kbench_prelude", None)
    _import("kbench_prelude").run()


def _kbench_begin():
    module, rx, tx, kernel = _begin[0]
    _begin[0] = None
    _prelude()  # before the line carries frames: what it prints is the REPL's
    _control.write(b"B")  # from the HELLO on, the line carries frames: no \n is cooked
    _serving_line(1)
    _control.write(b"I")  # the Ctrl-Cs so far are judged before begin() clears the interrupt character
    server = module.begin(rx, tx, kernel)
    _collect_before_setup(module, server)
    _serving[0] = module
    server.announce()


def _kbench_import(name, *rest):
    if _loading[0]:
        return _import(name, *rest)
    if name[:1] == "u" and (name[1:] in _BOARD or name[1:] in _STANDINS):
        name = name[1:]  # the firmware's old names: uos is os
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


class _Collect(BaseException):
    # raised through the server's step by a SETUP that freed the tensors before it: caught in _kbench_step
    pass


_deferred = [None]  # the SETUP request (kind, seq, payload) to answer at the next step, after the collection


def _collect_before_setup(module, server):
    # A board's SETUP frees the last head's tensors and carves the new ones in one request: gc.collect() inside it
    # gives their heap back first. The port cannot collect inside a call, so here a SETUP that has tensors to free
    # frees them and ends the step (JS collects as it returns); the next step answers the same request, on the heap
    # a board would have.
    setup = server.handlers[module.SETUP]

    def setup_after_a_collection(payload):
        if _deferred[0] is None and any(t is not None for t in server.tensors):
            server.free()
            _deferred[0] = (server.decoder.kind, server.decoder.seq, bytes(payload))
            raise _Collect
        _deferred[0] = None
        return setup(payload)

    server.handlers[module.SETUP] = setup_after_a_collection


def _kbench_step():
    # the frame server's reads up to the end of a frame (a frame's answer is what allocates), then back to JS, which
    # collects what they allocated
    module = _serving[0]
    server = module.active
    decoder = server.decoder
    try:
        if _deferred[0] is not None:  # the SETUP a collection came between
            kind, seq, payload = _deferred[0]
            server.send(server.respond(kind, seq, memoryview(payload)))
            return 1
        going = server.step()
        while going and decoder.raw:  # within a frame: steps that only decode allocate nothing, so no collection
            going = server.step()
    except _Collect:
        return 1
    except BaseException:
        _end(module)
        raise
    if not going:
        _end(module)
    return 1 if going else 0


def _end(module):
    _deferred[0] = None
    _control.write(b"I")  # the Ctrl-Cs so far were the frame server's data: judged before end() sets it
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


def _kbench_js_modules():
    # where the port's js and jsffi modules lie, for twin.mjs to cut them from its module table
    found = tuple(id(_import(name)) for name in _HOST)
    for name in _HOST:
        _sys.modules.pop(name, None)
    return found


def _kbench_exec(code):
    # twin.mjs's probes at boot (mapInterrupts), in a namespace of their own
    exec(code, {})


def _kbench_kbd_off():
    import micropython

    micropython.kbd_intr(-1)  # the REPL's between commands (pyexec's)


def _kbench_boot_files(raw):
    # the board's globals as after a reset, then boot.py and (unless in the raw REPL) main.py from the flash, their
    # errors printed, as the STM32 port runs them
    import __main__
    import micropython

    scope = __main__.__dict__
    scope.clear()
    scope["__name__"] = "__main__"
    for name in ("boot.py",) if raw else ("boot.py", "main.py"):
        try:
            with open(name) as f:
                source = f.read()
        except OSError:
            continue
        micropython.kbd_intr(3)  # as pyexec runs a file: Ctrl-C on the line interrupts it (mpremote's way in)
        try:
            exec(compile(source, name, "exec"), scope)
        except BaseException as exc:  # noqa: BLE001 - printed, as the firmware prints a boot file's error
            _sys.print_exception(exc)
        finally:
            micropython.kbd_intr(-1)  # the REPL's between commands


for _name in ("_twin_bridge", "machine", "pyb", "_board_sys", "_board_gc", "_board_os", "_board_time"):
    _standin(_name)
_sys.path[:] = ["", ".frozen", "/flash", "/flash/lib"]
# Any allocation asks for a collection, which the port runs as control returns to JS (it cannot collect inside a
# call): so whatever a REPL command or a step of the frame server allocated is collected as it returns, and a call
# that allocated nothing costs no collection. Board code sees the board's threshold (_board_gc.py).
_gc.threshold(0)
_os.chdir("/flash")
_sys.modules.pop("_twin_boot", None)  # twin.mjs holds it; board code cannot import it
_gc.collect()
