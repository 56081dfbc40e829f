"""The twin, whose board is the real MicroPython VM (`python -m mcu.sim`: the WebAssembly port under Node,
mcu/sim/vm_process.py): driven by mpremote and by the host's own link code over its pty, as a board is."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import ROOT
from helpers.twin import TwinWithOptions, client_env, emulator_missing
from mcu.sim.vm_process import BOARD_HEAP, vm_missing

pytestmark = pytest.mark.skipif(bool(vm_missing()), reason=vm_missing() or "-")


@pytest.fixture(scope="module")
def vm(tmp_path_factory):
    with TwinWithOptions() as twin:
        twin.env = client_env(tmp_path_factory.mktemp("xdg"))
        yield twin


def mpremote(twin, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpremote", "connect", twin.port, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=twin.env)


def test_the_vm_says_it_is_the_f407_firmware(vm):
    done = mpremote(vm, "exec", "import sys, os; print(sys.platform, sys.implementation._mpy, "
                                "sys.implementation._machine); print(os.getcwd())")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0].strip() == "pyboard 7942 STM32F4DISC with STM32F407"
    assert done.stdout.split("\n")[1].strip() == "/flash"


def test_the_heap_is_the_boards_and_the_repl_answers_after_it_runs_out(vm):
    code = ("import gc\ngc.collect()\nfree = gc.mem_free()\nkept = []\ntry:\n    while True:\n"
            "        kept.append(bytearray(1000))\nexcept MemoryError:\n    pass\nprint(free, len(kept))\n")
    done = mpremote(vm, "exec", code)
    assert done.returncode == 0, done.stderr
    free, blocks = map(int, done.stdout.split())
    assert 0.7 * BOARD_HEAP < free < BOARD_HEAP  # what the VM and the twin's boot code leave of the board's heap
    # 1000 B each; the growing list's old copies stay until the command ends (the port collects between commands)
    assert 0.8 * free / 1016 < blocks <= free / 1000
    done = mpremote(vm, "eval", "6 * 7")
    assert (done.returncode, done.stdout.strip()) == (0, "42"), done.stderr
    done = mpremote(vm, "exec", "x = bytearray(200000)")
    said = done.stdout + done.stderr
    assert done.returncode == 1 and "MemoryError: memory allocation failed, allocating 200000 bytes" in said


def test_a_commands_garbage_is_collected_before_the_next_and_gc_threshold_is_the_boards(vm):
    # the twin asks for a collection after every allocation (gc.threshold(0) underneath), which the port runs as the
    # command returns; board code sees the board's threshold: none (-1) until it sets one
    done = mpremote(vm, "exec", "import gc\nprint(gc.mem_free())\n"
                                "junk = [bytearray(1000) for i in range(10)]\njunk = None\n")
    assert done.returncode == 0, done.stderr
    before = int(done.stdout)
    done = mpremote(vm, "resume", "exec", "import gc\nprint(gc.mem_free(), gc.threshold())\ngc.threshold(5000)\n"
                                          "print(gc.threshold())\ngc.threshold(-1)\n")
    assert done.returncode == 0, done.stderr
    free, threshold, set_to = map(int, done.stdout.split())
    assert free > before - 2000  # the 10 KB of junk (under the port's 16 KB threshold) went as the command returned
    assert (threshold, set_to) == (-1, 4992)  # the board's gc rounds to its 16-byte blocks


def test_a_fragmented_heap_refuses_a_block_larger_than_its_largest_free_one(vm):
    # the heap filled with 2 KB blocks, every other one freed: half the heap free, in holes of 2 KB. The port
    # collects garbage between REPL commands, so the freeing and the asking are commands of their own.
    fill = ("import gc\nchunks = []\ntry:\n    while True:\n        chunks.append(bytearray(2000))\n"
            "except MemoryError:\n    pass\nfor i in range(0, len(chunks), 2):\n    chunks[i] = None\n")
    ask = ("import gc\nfree = gc.mem_free()\ntry:\n    big = bytearray(8000)\n    print(free, 'fit')\n"
           "except MemoryError:\n    print(free, 'refused')\n")
    done = mpremote(vm, "exec", fill, "exec", ask)
    assert done.returncode == 0, done.stderr
    free, verdict = done.stdout.split()
    assert int(free) > 30_000 and verdict == "refused", done.stdout


def test_files_go_to_the_root_folder_and_back(vm, tmp_path):
    script = tmp_path / "hello.py"
    script.write_text("print('hello from flash')\n")
    assert mpremote(vm, "fs", "cp", str(script), ":hello.py").returncode == 0
    assert (vm.root / "hello.py").read_text() == script.read_text()
    listed = mpremote(vm, "fs", "ls")
    assert listed.returncode == 0 and "hello.py" in listed.stdout, listed.stderr
    ran = mpremote(vm, "exec", "import hello")
    assert ran.stdout.strip() == "hello from flash", ran.stderr
    missing = mpremote(vm, "exec", "open('absent.txt')")
    assert "OSError: [Errno 2] ENOENT" in missing.stdout + missing.stderr
    assert mpremote(vm, "fs", "rm", ":hello.py").returncode == 0 and not (vm.root / "hello.py").exists()


def test_soft_reset_gives_a_fresh_vm_on_the_same_flash(vm):
    done = mpremote(vm, "exec", "import builtins; builtins.kbench_marker = 1", "soft-reset", "exec",
                    "import builtins; print(hasattr(builtins, 'kbench_marker'))")
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr


def test_ctrl_c_interrupts_code_that_computes_and_prints(vm):
    process = subprocess.Popen([sys.executable, "-m", "mpremote", "connect", vm.port, "exec",
                                "i = 0\nwhile True:\n    i += 1\n    if i % 1000 == 0: print(i)\n"],
                               cwd=ROOT, env=vm.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = process.stdout.readline()
        assert first.strip().isdigit()
        process.send_signal(2)  # mpremote sends Ctrl-C to the board, as a user's Ctrl-C
        process.wait(timeout=30)
    finally:
        process.kill()
    done = mpremote(vm, "eval", "1 + 1")
    assert done.stdout.strip() == "2", done.stderr


@pytest.mark.skipif(bool(emulator_missing()), reason=emulator_missing() or "-")
@pytest.mark.parametrize("seq, dim, causal", [(128, 64, False), (97, 59, True)])
def test_a_head_runs_on_the_vm_bit_exact_with_the_emulators_cycles(vm, seq, dim, causal):
    from host.problem import AttentionProblem
    from host.q15 import Q15Out, prepare
    from mcu.deploy import deploy
    from mcu.head import Session, run_head
    from mcu.link import BoardLink

    deploy(vm.port, 115200, say=lambda line: None)
    problem = AttentionProblem(seq=seq, dim=dim, causal=causal)
    quantized = prepare(problem, *problem.inputs())  # at the contract's Bc
    with BoardLink(vm.port) as link:
        hello = link.hello
        head = run_head(Session(link, vm.port, "VM twin"), quantized.params, *quantized.head(0, 0), 1)
    assert hello.machine == "STM32F4DISC with STM32F407" and hello.module_version == 4
    assert hello.largest_block <= hello.heap_free < BOARD_HEAP
    expected = quantized.expected()
    assert head.out.same_bits(Q15Out(expected.o[0, 0], expected.shift[0, 0]))
    assert head.cycles[0] > seq * seq * dim // (2 if causal else 1)  # at least a cycle per multiply-accumulate


def test_ctrl_c_stops_a_main_py_that_loops_so_mpremote_gets_in(tmp_path):
    """A main.py that prints forever: mpremote's Ctrl-C interrupts it, as pyexec lets Ctrl-C stop a boot file on a
    board, and its command runs (mpremote waited forever, and mcu.deploy could not reach the board to remove it)."""
    (tmp_path / "main.py").write_text("import time\nwhile True:\n    print('main loop')\n    time.sleep(0.1)\n")
    with TwinWithOptions(root=tmp_path) as twin:
        twin.env = client_env(tmp_path / "xdg")
        done = mpremote(twin, "exec", "print(6 * 7)", timeout=30)
    assert (done.returncode, done.stdout.strip().splitlines()[-1:]) == (0, ["42"]), done.stderr


def test_deploy_to_a_board_whose_main_py_turned_ctrl_c_off_ends_in_one_line(tmp_path):
    """A main.py that turns Ctrl-C off and computes forever cannot be interrupted (on a board either): mcu.deploy
    gives up within mpremote's 10 s with one line saying what may hold the line (it read a silent pty forever)."""
    (tmp_path / "main.py").write_text("import micropython\nmicropython.kbd_intr(-1)\nwhile True:\n    pass\n")
    with TwinWithOptions(root=tmp_path) as twin:
        done = subprocess.run([sys.executable, "-m", "mcu.deploy", "--serial", twin.port], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == "", done
    assert done.stderr.count("\n") == 1 and "could not enter raw repl (no raw REPL prompt" in done.stderr


MANY_CALLS = """import array, gc, q15attn
seq, dim = 16, 8
q, k, vt, o = (array.array('h', range(i, i + seq * dim)) for i in range(4))
g = bytearray(seq)
state = bytearray(q15attn.state_bytes(dim, seq))
calls = 200
free = gc.mem_free()
for _ in range(calls):
    q15attn.attention(q, k, vt, o, g, seq, dim, 0, 16, 23170, 16)
    q15attn.stream(q, k, vt, o, g, state, seq, dim, 0, 16, 23170, 16, 0, 0)
print(free - gc.mem_free(), calls)
"""


@pytest.mark.skipif(bool(emulator_missing()), reason=emulator_missing() or "-")
def test_a_kernel_call_allocates_nothing_so_one_step_can_make_hundreds(vm):
    """A board's native call allocates nothing; this port collects only between calls into the VM, and a frame
    server's RUN makes heads × repeat calls in one step: 1.4 KB a call wedged the twin after about 40 (a 60-repeat
    row hung). 400 calls in one command: not a byte of the heap."""
    done = mpremote(vm, "exec", MANY_CALLS, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "200"], done.stdout


ALIASED = """import q15attn
seq, dim = 17, 8
q = bytearray(bytes((i * 37 + 11) % 256 for i in range(seq * dim * 2)))
k = bytearray(bytes((i * 53 + 7) % 256 for i in range(seq * dim * 2)))
vt = bytearray(bytes((i * 29 + 3) % 256 for i in range(seq * dim * 2)))
clean = bytearray(seq * dim * 2)
g = bytearray(seq)
q15attn.attention(q, k, vt, clean, g, seq, dim, 0, 32, 23170, 16, 0)
out = k
q15attn.attention(q, k, vt, out, g, seq, dim, 0, 32, 23170, 16, 0)
print(bytes(q).hex(), bytes(vt).hex(), bytes(clean).hex(), bytes(k).hex())
"""


@pytest.mark.skipif(bool(emulator_missing()), reason=emulator_missing() or "-")
def test_an_output_that_aliases_an_input_is_overwritten_while_it_is_read(vm):
    # o is k: the kernel writes k's first rows while later rows still read it, as on the board; the emulator run with
    # o placed over k gives the same bytes, and the clean run (o apart) differs
    from mcu.sim.q15emu import shared_emulator

    done = mpremote(vm, "exec", ALIASED)
    assert done.returncode == 0, done.stderr
    q, vt, clean, aliased = (bytes.fromhex(x) for x in done.stdout.split())
    k = bytes((i * 53 + 7) % 256 for i in range(len(q)))
    params = (17, 8, 0, 32, 23170, 16)
    shifts = ("B", bytes(17))
    alone, _, _, _ = shared_emulator().attention(params, [("h", q), ("h", k), ("h", vt), ("h", bytes(len(q))), shifts],
                                                 0, len(q))
    assert alone == clean
    over, _, _, _ = shared_emulator().attention(params, [("h", q), ("h", k), ("h", vt), ("h", k), shifts], 0, len(q),
                                                at=[0x1000, 0x2000, 0x3000, 0x2000, 0x4000])
    assert aliased == over != clean


def test_a_socket_in_the_root_is_a_file_that_exists_and_cannot_be_opened(vm):
    import socket

    path = vm.root / "sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    try:
        done = mpremote(vm, "exec", "import os\nprint('sock' in os.listdir())\nfor f in (lambda: open('sock'), "
                                    "lambda: os.mkdir('sock')):\n    try:\n        f()\n    except OSError as e:\n"
                                    "        print(e.errno)\n")
    finally:
        server.close()
        path.unlink()
    assert done.returncode == 0, done.stderr
    listed, opened, made = done.stdout.split()
    assert (listed, made) == ("True", "17")  # EEXIST: it is there
    assert opened == "6"  # ENXIO, as Linux says for a socket: not ENOENT (2)


def test_the_framing_helpers_match_the_c_ones(vm):
    from cobs import cobs

    cases = [b"123456789", b"", b"\x00", b"\x01" * 254, b"\x01" * 255 + b"\x00\x02", bytes(range(256)) * 3]
    code = ("import q15attn, binascii\nfor data in %r:\n    src = bytearray(data)\n"
            "    out = bytearray(len(data) + 2 + len(data) // 254)\n    n = q15attn.cobs_encode(out, 0, src, 0, -1)\n"
            "    print(q15attn.crc16(src, 0xFFFF, 0, -1), binascii.hexlify(out[:n]).decode())\n"
            "buf = bytearray(b'\\x00\\x00' + bytes(range(1, 40)))\nn = q15attn.cobs_encode(buf, 0, buf, 2, -1)\n"
            "print(binascii.hexlify(buf[:n]).decode())\n") % (cases,)
    done = mpremote(vm, "exec", code)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.split("\n")
    import binascii

    for data, line in zip(cases, lines):
        crc, encoded = line.split(" ") if " " in line.strip() else (line.strip(), "")
        assert int(crc) == binascii.crc_hqx(data, 0xFFFF) and encoded.strip() == cobs.encode(data).hex(), data[:8]
    assert lines[len(cases)].strip() == cobs.encode(bytes(range(1, 40))).hex()  # in place, the output ahead


# -- what a hostile pass did to the CPython twin (issue 30): the VM answers each as a board would, and lives on ----

HOSTILE = {
    "a tuple nested 150,000 deep, hashed": "t = ()\nfor _ in range(150000):\n    t = (t,)\nhash(t)\n",
    "1,000,000 nested map iterators": "it = iter([1])\nfor _ in range(1000000):\n    it = map(abs, it)\nlist(it)\n",
    "a 1.3 GB bytearray": "b = bytearray(1300 * 1024 * 1024)\n",
    "recursion without end": "def f(n):\n    return f(n + 1)\nf(0)\n",
    "50 MB of output": "print('x' * 50000000)\n",
    "appending 1 KB blocks until MemoryError": "b = []\nwhile True:\n    b.append(bytearray(1024))\n",
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_board_code_gets_an_error_and_the_vm_answers_after(vm, case):
    done = mpremote(vm, "exec", HOSTILE[case])
    said = done.stdout + done.stderr
    assert done.returncode == 1 and ("MemoryError" in said or "RuntimeError: maximum recursion depth" in said), said
    after = mpremote(vm, "exec", "import q15attn; print(q15attn.version(), 6 * 7)")
    assert after.stdout.split() == ["4", "42"], after.stdout + after.stderr


def test_board_code_cannot_aim_the_twins_memory_writes(vm):
    # the interrupt map (where the Python side writes a Ctrl-C into node's memory) comes from twin.mjs on a pipe of
    # its own, at each boot; the bridge board code reaches has no such operation (tests/sim/test_sim_repl.py
    # interrupts a loop that only computes)
    done = mpremote(vm, "exec", "import _twin_bridge as b\ntry:\n    b.call(12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)\n"
                                "except ValueError as e:\n    print(e)\n")
    assert done.stdout.strip() == "op=12 is not a twin bridge operation; allowed: 0..11", done.stdout + done.stderr


def test_a_module_that_removes_itself_and_raises_gets_its_own_error(vm):
    (vm.root / "selfish.py").write_text("import sys\nsys.modules.pop('selfish', None)\nraise ValueError('mine')\n")
    try:
        done = mpremote(vm, "exec", "import selfish")
    finally:
        (vm.root / "selfish.py").unlink()
    assert "ValueError: mine" in done.stdout + done.stderr


def test_a_vm_that_dies_is_replaced_on_the_same_pty_and_flash(vm):
    import os
    import signal
    import time

    (vm.root / "kept.txt").write_text("still here")
    children = subprocess.run(["pgrep", "-P", str(vm.process.pid), "node"], capture_output=True, text=True)
    nodes = [int(pid) for pid in children.stdout.split()]
    assert len(nodes) == 1, children
    os.kill(nodes[0], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        again = subprocess.run(["pgrep", "-P", str(vm.process.pid), "node"], capture_output=True, text=True)
        if again.stdout.split() and int(again.stdout.split()[0]) != nodes[0]:
            break
        time.sleep(0.1)
    done = mpremote(vm, "exec", "print(open('kept.txt').read())")
    assert done.stdout.strip() == "still here", done.stdout + done.stderr
    assert vm.process.poll() is None


@pytest.mark.skipif(bool(emulator_missing()), reason=emulator_missing() or "-")
@pytest.mark.parametrize("faults, seq, dim", [("reset=150", 128, 64), ("drop=0.0005,flip=0.0005,seed=7", 64, 32)])
def test_a_head_through_line_faults_on_the_vm_is_bit_exact(faults, seq, dim):
    from host.problem import AttentionProblem
    from host.q15 import Q15Out, prepare
    from mcu.deploy import deploy
    from mcu.head import Session, run_head
    from mcu.link import BoardLink

    with TwinWithOptions("--faults", faults) as twin:
        deploy(twin.port, 115200, say=lambda line: None)
        # with resets, a head of several chunks (the heap holds about 22 query rows of 128 x 64), each far fewer
        # frames than a reset's period
        problem = AttentionProblem(seq=seq, dim=dim, causal=False)
        quantized = prepare(problem, *problem.inputs())  # at the contract's Bc
        with BoardLink(twin.port) as link:
            head = run_head(Session(link, twin.port, "VM twin"), quantized.params, *quantized.head(0, 0), 1)
    expected = quantized.expected()
    assert head.out.same_bits(Q15Out(expected.o[0, 0], expected.shift[0, 0]))
    if faults.startswith("reset"):
        assert len(head.sessions) > 1  # the resets cut sessions short, and the head went on in new ones


def test_a_vm_of_another_mpy_version_is_refused_by_deploy():
    with TwinWithOptions("--mpy-abi", str(7942 - 1)) as other:  # .mpy version 5
        done = subprocess.run([sys.executable, "-m", "mcu.deploy", "--serial", other.port], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "the board reads .mpy v5" in done.stderr and "nothing copied" in done.stderr


@pytest.mark.skipif(bool(emulator_missing()), reason=emulator_missing() or "-")
@pytest.mark.parametrize("faults", ["", "reset=150,seed=3"])
def test_a_sweep_on_the_vm_twin_gives_ok_bit_exact_rows(tmp_path, faults):
    # host.compare --sim: the twin started, deployed, and the rows measured on it (the main job's
    # 128 x 64 and an awkward 17 x 59), through a resetting line too (a reset each 150 frames: a chunk of the real
    # heap's plan takes more than 40)
    import csv

    from helpers import run_module

    done = run_module("host.compare", "--targets", "mcu", "--sim", "--seq", "17,128", "--dim", "59,64",
                      "--heads", "1", "--causal", "both", "--out", str(tmp_path),
                      *(["--sim-faults", faults] if faults else []), timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(tmp_path / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 8
    assert all(r["status"] == "ok" and r["bit_exact"] == "1" for r in rows), [r["message"] for r in rows]
    if faults:
        assert any("session restarts" in r["message"] for r in rows)  # the resets did hit
