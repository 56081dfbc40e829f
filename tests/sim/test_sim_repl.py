"""The board twin's REPL and board namespace: the byte protocol on its pty (`wire`, `raw`: tests/helpers/twin.py),
the flash's confinement, and the real mpremote driving `python -m mcu.sim` on its pty. Every wait is bounded."""

from __future__ import annotations

import hashlib
import os
import select
import shutil
import signal
import subprocess
import sys
import time
import types

import pytest

from helpers import ROOT
from helpers.twin import CLOCK_HZ, RAW_BANNER, SOFT_RESET_REPLY, TwinWithOptions, Wire, client_env, emulator_missing
from mcu.sim.peripherals import DEMCR, DWT_CTRL, DWT_CYCCNT

# -- the REPL protocol, byte by byte --------------------------------------------------------------------------------

def test_friendly_repl_banner_echo_and_values(wire):
    wire.send(b"\x02")  # the banner again: the one at boot went out before anyone listened, as on a board
    banner = wire.expect(b">>> ")
    assert banner.startswith(b"\r\nMicroPython v1.") and banner.endswith(b'Type "help()" for more information.\r\n>>> ')
    wire.send(b"1+2\r")
    assert wire.expect(b">>> ") == b"1+2\r\n3\r\n>>> "
    wire.send(b"for i in range(2):\r  print(i)\r\r")
    assert wire.expect(b">>> ").endswith(b"0\r\n1\r\n>>> ")
    wire.send(b"1/0\r")
    assert b"ZeroDivisionError: divide by zero\r\n>>> " in wire.expect(b">>> ")


def test_raw_repl_entry_is_what_mpremote_expects(wire):
    wire.send(b"\r\x03")
    wire.send(b"\r\x01")
    assert wire.expect(RAW_BANNER + b">").endswith(b"\r\n" + RAW_BANNER + b">")
    wire.send(b"\x04")
    assert wire.expect(b">") == SOFT_RESET_REPLY
    wire.send(b"\x02")
    assert wire.expect(b">>> ").startswith(b"\r\nMicroPython v1.")


def test_raw_repl_classic_framing_and_line_reset(raw):
    raw.send(b"garbage\x03print(1)\x04")
    assert raw.expect(b">") == b"OK1\r\n\x04\x04>"
    raw.send(b"junk\x01")
    assert raw.expect(b">") == RAW_BANNER + b">"
    raw.send(b"\x05B\x01")
    assert raw.expect(b">") == b"R\x00>"


def test_raw_paste_window_and_flow_control(raw):
    code = b"print('a' * 3)\n" + b"#" * 280 + b"\n"
    raw.send(b"\x05A\x01")
    assert raw.expect(b"\x80\x00\x01") == b"R\x01\x80\x00\x01"  # R, OK, window 128 little-endian, one more window
    raw.send(code)
    assert raw.expect(b"\x01\x01") == b"\x01\x01"  # one 0x01 per 128 bytes consumed: 296 // 128 = 2
    raw.send(b"\x04")
    assert raw.expect(b">") == b"\x04aaa\r\n\x04\x04>"


def test_tracebacks_as_micropython_prints_them(raw):
    out, err = raw.run("def f():\n    return 1 / 0\nprint('before')\nf()\n")
    assert out == b"before\r\n"
    assert err == (b'Traceback (most recent call last):\r\n  File "<stdin>", line 4, in <module>\r\n'
                   b'  File "<stdin>", line 2, in f\r\nZeroDivisionError: divide by zero\r\n')
    _, err = raw.run("open('missing.txt')")
    assert err.endswith(b"\r\nOSError: [Errno 2] ENOENT\r\n")
    _, err = raw.run("import socket")
    assert err.endswith(b"ImportError: no module named 'socket'\r\n")
    _, err = raw.run("x = (1,\n")
    assert err == b'Traceback (most recent call last):\r\n  File "<stdin>", line 2\r\nSyntaxError: invalid syntax\r\n'
    _, err = raw.run("import js")  # the WebAssembly port's way to the host is not there, as on a board
    assert err.endswith(b"ImportError: no module named 'js'\r\n")
    _, err = raw.run("undefined_name")
    assert err.endswith(b"NameError: name 'undefined_name' isn't defined\r\n")


def test_print_is_cooked(raw):
    # (sys.stdout.buffer is cooked too on the twin: the port writes both through one stream; docs/twin.md)
    out, err = raw.run("import sys\nprint('a\\nb')\nsys.stdout.write('c\\n')")
    assert (out, err) == (b"a\r\nb\r\nc\r\n", b"")


def test_ctrl_c_interrupts_running_code(raw):
    raw.send(b"import time\nprint('ready')\ntime.sleep(30)\x04")
    assert raw.expect(b"ready\r\n") == b"OKready\r\n"
    started = time.monotonic()
    raw.send(b"\x03")
    tail = raw.expect(b"\x04>", 5)
    assert time.monotonic() - started < 2
    assert tail.startswith(b"\x04Traceback (most recent call last):\r\n") and tail.endswith(
        b"KeyboardInterrupt: \r\n\x04>")
    raw.send(b"print('ready')\nwhile True:\n    pass\x04")
    raw.expect(b"ready\r\n")
    raw.send(b"\x03")
    assert raw.expect(b"\x04>", 5).endswith(b"KeyboardInterrupt: \r\n\x04>")


def test_kbd_intr_off_lets_ctrl_c_through_to_stdin_for_one_command(raw):
    raw.send(b"import micropython, sys\nmicropython.kbd_intr(-1)\nprint('ready')\nprint(sys.stdin.buffer.read(2))\x04")
    raw.expect(b"ready\r\n")
    raw.send(b"\x03\x04")
    assert raw.expect(b">") == b"b'\\x03\\x04'\r\n\x04\x04>"
    raw.send(b"import time\nprint('ready')\ntime.sleep(30)\x04")  # the next command has Ctrl-C again
    raw.expect(b"ready\r\n")
    raw.send(b"\x03")
    assert raw.expect(b"\x04>", 5).endswith(b"KeyboardInterrupt: \r\n\x04>")


def test_soft_reset_clears_globals_and_runs_boot_py(raw, tmp_path):
    (tmp_path / "boot.py").write_text("print('booted')\n")
    raw.run("x = 1")
    raw.send(b"\x04")
    assert raw.expect(b">") == b"OK\r\nMPY: soft reboot\r\nbooted\r\n" + RAW_BANNER + b">"
    assert raw.run("print('x' in globals())") == (b"False\r\n", b"")
    raw.send(b"\x05A\x01")
    raw.expect(b"R\x01\x80\x00\x01")
    raw.send(b"import machine\nmachine.soft_reset()\x04")
    assert raw.expect(b">", 5) == b"\x04\x04\x04MPY: soft reboot\r\nbooted\r\n" + RAW_BANNER + b">"


# -- the board namespace --------------------------------------------------------------------------------------------

def test_board_identity_and_modules(raw):
    out, err = raw.run("import sys, os, uos\nprint(sys.implementation._mpy, sys.platform, sys.implementation.name)\n"
                       "print(os is uos, os.getcwd(), sys.implementation.version[:2] >= (1, 22))")
    assert (out, err) == (b"7942 pyboard micropython\r\nTrue /flash True\r\n", b"")
    out, _ = raw.run("import binascii, hashlib, struct\nh = hashlib.sha256(b'ab')\nh.update(b'c')\n"
                     "print(binascii.hexlify(h.digest()).decode(), struct.unpack('<H', b'\\x80\\x00')[0])")
    assert out == (hashlib.sha256(b"abc").hexdigest() + " 128\r\n").encode()


def test_dwt_cycle_counter_through_mem32(raw):
    started = time.monotonic()
    out, err = raw.run(f"import machine, time\nm = machine.mem32\nm[{DEMCR:#x}] |= 1 << 24\nm[{DWT_CYCCNT:#x}] = 0\n"
                       f"m[{DWT_CTRL:#x}] |= 1\nt0 = m[{DWT_CYCCNT:#x}] & 0xFFFFFFFF\ntime.sleep_ms(100)\n"
                       f"print((m[{DWT_CYCCNT:#x}] & 0xFFFFFFFF) - t0, machine.freq()[0])")
    wall_s = time.monotonic() - started
    assert err == b""
    cycles, freq = map(int, out.split())
    assert freq == CLOCK_HZ and 0.1 * CLOCK_HZ <= cycles <= wall_s * CLOCK_HZ  # the sleep, and no more than ran


@pytest.mark.skipif(bool(emulator_missing()), reason=emulator_missing() or "-")
def test_q15attn_cycles_reach_the_board_clock(raw):
    # DWT counts the kernel's modelled cycles across the call, whatever Unicorn's wall time; the ADC reads the
    # modelled supply and reference
    out, err = raw.run(f"import machine, pyb, q15attn\nm = machine.mem32\nm[{DEMCR:#x}] |= 1 << 24\n"
                       f"m[{DWT_CTRL:#x}] |= 1\nseq, dim = 64, 32\nq = bytearray(seq * dim * 2)\n"
                       f"o = bytearray(seq * dim * 2)\ng = bytearray(seq)\nt0 = m[{DWT_CYCCNT:#x}] & 0xFFFFFFFF\n"
                       f"c = q15attn.attention(q, q, q, o, g, seq, dim, 0, 1, 23170, 16, 0)\n"
                       f"t1 = m[{DWT_CYCCNT:#x}] & 0xFFFFFFFF\nadc = pyb.ADCAll(12, 0x70000)\n"
                       f"print(c, (t1 - t0) & 0xFFFFFFFF, adc.read_vref(), adc.read_core_vref())", timeout=60)
    assert err == b"", err
    cycles, counted, vdda, vref = (float(x) for x in out.split())
    assert cycles > 64 * 64 * 32 and cycles <= counted < cycles + 0.05 * CLOCK_HZ  # the kernel, and the code's time
    assert 3.25 < vdda < 3.35 and abs(vref - 1.21) < 0.01


@pytest.mark.skipif(bool(emulator_missing()), reason=emulator_missing() or "-")
def test_ctrl_c_waits_for_a_native_call_to_return(raw):
    # a Ctrl-C during a kernel call interrupts the code once the call is back, at the VM's next check (the loop's
    # jump), as a UART interrupt's pending exception does on a board: the call completes, the next does not start
    raw.send(b"import q15attn\nseq, dim = 256, 64\nq = bytearray(seq * dim * 2)\no = bytearray(seq * dim * 2)\n"
             b"g = bytearray(seq)\nn = 0\nprint('ready')\nwhile n < 3:\n"
             b"    q15attn.attention(q, q, q, o, g, seq, dim, 0, 1, 23170, 16, 0)\n"
             b"    n += 1\nprint('not reached')\x04")
    raw.expect(b"ready\r\n", 30)
    time.sleep(0.3)  # well inside the first call: at Bc 1 (33 cycles a MAC) it takes ~0.8 s of emulation
    raw.send(b"\x03")
    tail = raw.expect(b"\x04>", 60)
    assert b"not reached" not in tail and b"/twin/" not in tail, tail
    # raised at the loop's jump back, which the compiler puts on the body's last line
    assert tail.endswith(b'  File "<stdin>", line 10, in <module>\r\nKeyboardInterrupt: \r\n\x04>')
    assert raw.run("print(n)") == (b"1\r\n", b"")


def test_heap_model(raw):
    out, err = raw.run("import gc\nf0 = gc.mem_free()\nbuf = bytearray(20000)\nprint(f0 - gc.mem_free())")
    assert err == b"" and 20000 <= int(out) < 20100
    _, err = raw.run("big = bytearray(200000)")
    assert err.endswith(b"MemoryError: memory allocation failed, allocating 200000 bytes\r\n")


def test_modules_import_from_the_board_filesystem(raw, tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "helper.py").write_text("def twice(x):\n    return 2 * x\n")
    (tmp_path / "broken.py").write_text("1 / 0\n")
    assert raw.run("import helper\nprint(helper.twice(21))") == (b"42\r\n", b"")
    _, err = raw.run("import broken")
    assert b'File "broken.py", line 1, in <module>' in err and err.endswith(b"ZeroDivisionError: divide by zero\r\n")


# -- the flash's confinement -----------------------------------------------------------------------------------------

def test_links_and_dot_dots_do_not_leave_the_root(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("inside")
    (tmp_path / "secret.txt").write_text("outside")
    os.symlink(tmp_path / "secret.txt", root / "link_out")
    os.symlink(tmp_path, root / "dir_out")
    wire = Wire(root)
    try:
        wire.raw()
        out, err = wire.run("import os\nprint(open('a.txt').read())\n"
                            "for path in ('link_out', 'dir_out/secret.txt', '../secret.txt', '/flash/../secret.txt',"
                            " '/flash/../../secret.txt'):\n    try:\n        print(open(path).read())\n"
                            "    except OSError as e:\n        print('refused', e.errno)\n"
                            "os.mkdir('d')\nos.chdir('d')\nopen('f.bin', 'wb').write(b'\\x00\\x01')\n"
                            "print(os.getcwd(), sorted(os.listdir('/flash')))")
    finally:
        wire.close()
    assert err == b"", err
    lines = out.decode().split("\r\n")
    assert lines[0] == "inside" and all(line.startswith("refused") for line in lines[1:6]), lines
    assert "outside" not in out.decode()
    assert lines[6] == "/flash/d ['a.txt', 'd', 'dir_out', 'link_out']"
    assert (root / "d" / "f.bin").read_bytes() == b"\x00\x01"


# -- the real mpremote on the pty -----------------------------------------------------------------------------------

def mpremote(twin, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """`mpremote connect <pty> args...`, bounded by `timeout` seconds."""
    return subprocess.run([sys.executable, "-m", "mpremote", "connect", twin.path, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=twin.env)


@pytest.fixture(scope="module")
def twin(twin, tmp_path_factory):
    """The session's twin as these tests drive it: its pty, its root, and mpremote without the user's config."""
    return types.SimpleNamespace(path=twin.port, root=twin.root, process=twin.process,
                                 env=client_env(tmp_path_factory.mktemp("xdg")))


def test_mpremote_exec_eval_run_soft_reset(twin, tmp_path):
    done = mpremote(twin, "exec", "import sys; print(sys.implementation._mpy)")
    assert (done.returncode, done.stdout.strip()) == (0, "7942"), done.stderr
    done = mpremote(twin, "eval", "6 * 7")
    assert (done.returncode, done.stdout.strip()) == (0, "42"), done.stderr
    script = tmp_path / "script.py"
    script.write_text("for i in range(3):\n    print('line', i)\n")
    done = mpremote(twin, "run", str(script))
    assert done.stdout.splitlines()[:3] == ["line 0", "line 1", "line 2"], done.stderr
    done = mpremote(twin, "exec", "x = 5", "+", "soft-reset", "+", "exec", "print('x' in globals())")
    assert (done.returncode, done.stdout.strip()) == (0, "False"), done.stderr
    done = mpremote(twin, "exec", "raise ValueError('bad')")
    assert done.returncode == 1 and "ValueError: bad" in done.stdout


def test_mpremote_cp_both_ways_is_identical(twin, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("one\ntwo\n")
    blob = tmp_path / "blob.bin"
    blob.write_bytes(os.urandom(100 * 1024))
    done = mpremote(twin, "fs", "cp", str(text), ":notes.txt", "+", "fs", "cp", str(blob), ":blob.bin")
    assert done.returncode == 0, done.stderr
    back = tmp_path / "back"
    back.mkdir()
    done = mpremote(twin, "fs", "cp", ":notes.txt", str(back / "notes.txt"), "+", "fs", "cp", ":blob.bin",
                    str(back / "blob.bin"), "+", "fs", "sha256sum", ":blob.bin")
    assert done.returncode == 0, done.stderr
    digest = hashlib.sha256(blob.read_bytes()).hexdigest()
    assert digest in done.stdout
    for name, source in (("notes.txt", text), ("blob.bin", blob)):
        assert (back / name).read_bytes() == source.read_bytes() == (twin.root / name).read_bytes()
    done = mpremote(twin, "fs", "cp", str(blob), ":blob.bin")
    assert done.returncode == 0 and "Up to date: blob.bin" in done.stdout, done.stdout + done.stderr


def test_mpremote_ls_mkdir_rm(twin, tmp_path):
    (tmp_path / "gone.txt").write_text("x")
    done = mpremote(twin, "fs", "mkdir", ":sub", "+", "fs", "cp", str(tmp_path / "gone.txt"), ":sub/",
                    "+", "fs", "ls", ":sub", "+", "fs", "ls")
    assert done.returncode == 0, done.stderr
    assert "1 gone.txt" in done.stdout and "0 sub/" in done.stdout
    done = mpremote(twin, "fs", "rm", ":sub/gone.txt", "+", "fs", "rmdir", ":sub", "+", "fs", "ls")
    assert done.returncode == 0 and "sub/" not in done.stdout.split("ls :")[-1], done.stdout + done.stderr
    assert not (twin.root / "sub").exists()
    done = mpremote(twin, "fs", "rm", ":nothing.txt")
    assert done.returncode == 1 and "No such file or directory" in done.stderr


def test_mpremote_path_escapes_are_refused(twin, tmp_path):
    local = tmp_path / "f.txt"
    local.write_text("payload")
    outside = twin.root.parent / "x_escaped.txt"
    done = mpremote(twin, "fs", "cp", str(local), ":../x_escaped.txt")  # the VM's / takes no files
    assert done.returncode == 1 and "Permission denied" in done.stderr and not outside.exists()
    assert not list(twin.root.parent.glob("x_escaped*"))
    for code in ("open('/etc/passwd')", "open('../../../../etc/passwd')"):
        done = mpremote(twin, "exec", code)
        assert done.returncode == 1 and "OSError: [Errno" in done.stdout, code
    done = mpremote(twin, "exec", "import os; print(os.listdir('/../..') == os.listdir('/'), os.listdir('/'))")
    assert done.stdout.startswith("True [") and "'flash'" in done.stdout and "'etc'" not in done.stdout, done.stdout
    done = mpremote(twin, "fs", "cp", f":{os.path.relpath('/etc/passwd', twin.root)}", str(tmp_path / "p"))
    assert done.returncode == 1 and not (tmp_path / "p").exists()


def running_on_the_twin(path: str, env: dict) -> subprocess.Popen:
    """An mpremote client whose command is running on the board (it printed 'running'): it sleeps 30 s there."""
    client = subprocess.Popen([sys.executable, "-m", "mpremote", "connect", path, "exec",
                               "import time; print('running'); time.sleep(30)"], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env=env)
    ready, _, _ = select.select([client.stdout], [], [], 30)
    if not ready or client.stdout.readline().strip() != b"running":
        client.kill()
        client.wait(timeout=10)
        pytest.fail("the command did not start on the twin within 30 s")
    return client


def test_a_second_client_interrupts_a_hung_command(twin):
    hung = running_on_the_twin(twin.path, twin.env)
    hung.kill()
    hung.wait(timeout=10)
    done = mpremote(twin, "exec", "print('after')", timeout=20)
    assert (done.returncode, done.stdout.strip()) == (0, "after"), done.stderr


def test_pyserial_drives_the_raw_repl(twin):
    serial = pytest.importorskip("serial")
    with serial.Serial(twin.path, 115200, timeout=5) as port:
        port.write(b"\r\x03\r\x02")
        port.reset_input_buffer()
        port.write(b"\r\x01")
        assert port.read_until(RAW_BANNER + b">").endswith(RAW_BANNER + b">")
        port.write(b"print(2 ** 10)\x04")
        assert port.read_until(b"\x04>") == b"OK1024\r\n\x04\x04>"
        port.write(b"\x02")
        assert port.read_until(b">>> ").endswith(b'Type "help()" for more information.\r\n>>> ')


def test_killing_the_twin_mid_command_fails_mpremote(fresh_twin, tmp_path_factory):
    process = fresh_twin.process
    env = client_env(tmp_path_factory.mktemp("xdg"))
    client = running_on_the_twin(fresh_twin.port, env)
    try:
        process.kill()
        process.wait(timeout=10)
        client.communicate(timeout=15)  # mpremote gives up on its own, well within the bound
    finally:
        if client.poll() is None:
            client.kill()
            client.wait(timeout=10)
    assert client.returncode not in (0, None)


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
@pytest.mark.parametrize("exit_on_stdin_eof", [False, True], ids=["as-a-shell-starts-it", "as-a-host-starts-it"])
def test_ctrl_c_or_sigterm_ends_the_twin_cleanly(signal_number, exit_on_stdin_eof):
    """A shell starts the twin without --exit-on-stdin-eof, a host (mcu/twin_process.py) with it; a signal ends both
    with status 0 (with the flag, a thread blocked reading stdin once made the interpreter abort at exit: -6)."""
    with TwinWithOptions(exit_on_stdin_eof=exit_on_stdin_eof) as twin:
        twin.process.send_signal(signal_number)
        assert twin.process.wait(timeout=10) == 0


def test_cli_rejects_a_missing_root(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mcu.sim", "--root", str(tmp_path / "nope")], cwd=ROOT,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "is not a directory" in done.stderr


@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None, reason="arm-none-eabi-gcc is not installed")
def test_q15attn_through_mpremote_gives_the_models_bits_and_cycles(twin):
    """The acceptance path: mpremote exec on the twin runs the Cortex-M4 kernel in the emulator."""
    from mcu.sim import calibrate

    cases = ((17, 8, 4),)
    done = mpremote(twin, "exec", calibrate.program(cases), timeout=120)
    assert done.returncode == 0, done.stderr
    [line] = [line.split() for line in done.stdout.splitlines() if line.startswith("case")]
    result = calibrate.CaseResult(*(int(x) for x in line[1:]))
    assert result.cycles > 0
    assert result.checksum == calibrate.expected_checksum(17, 8, 4)
