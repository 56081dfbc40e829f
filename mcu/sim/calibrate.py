"""Calibrate the twin's cycle model against a board: the same cases' DWT cycles on both, side by side.

    python -m mcu.sim.calibrate [--serial /dev/ttyACM0] [--timeout 300]

The same MicroPython program runs on the board (through mpremote) and on a twin this command starts: it builds
deterministic Q15 inputs on the device, calls `q15attn.attention` for each case and prints the DWT cycles and a
checksum of the output (its values, then each row's shift). The host checks every checksum against host/q15.py and
prints, per case, board cycles / twin cycles. Without --serial only the twin runs (its cycles and checksums are still
checked).

Exit status: 0 the table printed, every case bit-exact; 1 a case's checksum differs from host/q15.py (the table says
DIFFER and a last line names the cases and the device), or a device, the link or the twin failed; 2 bad arguments
only (one `kbench: error:` line naming the value and the allowed range); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass

import numpy as np

from host.cli_common import Parser, guard, real
from host.errors import LinkError, TargetError
from host.q15 import Q15Params, attention_q15, score_scale

#: (seq, dim, Bc) cases: small enough for the board's RAM, varied enough to separate instruction classes.
CASES = ((16, 16, 4), (32, 32, 8), (64, 32, 16), (64, 64, 64), (96, 16, 1))
SCORE_EXPONENT = 0  # inputs are full-range Q15 with exponent 0 for Q and K
#: --timeout's range in seconds: a day at most (the cases take seconds on the twin, minutes at worst on a board).
TIMEOUT_S = (1.0, 86_400.0)

#: The device-side program; {cases} and {mult_shift} are filled in. Valid MicroPython and CPython.
DEVICE_PROGRAM = """
import array, q15attn
def fill(seed, n):
    out = array.array('h', bytes(2 * n))
    x = seed
    for i in range(n):
        x = (x * 1103515245 + 12345) & 0x7fffffff
        out[i] = ((x >> 8) & 0xffff) - 32768
    return out
for seq, dim, bc, mult, shift in {cases}:
    q = fill(1 + seq, seq * dim)
    k = fill(2 + seq, seq * dim)
    vt = fill(3 + seq, seq * dim)
    o = array.array('h', bytes(2 * seq * dim))
    g = bytearray(seq)
    cycles = q15attn.attention(q, k, vt, o, g, seq, dim, 0, bc, mult, shift)
    total = 0
    for i in range(len(o)):
        total = (total * 31 + o[i]) & 0xffffffff
    for i in range(len(g)):
        total = (total * 31 + g[i]) & 0xffffffff
    print('case', seq, dim, bc, cycles, total)
"""


def fill(seed: int, n: int) -> np.ndarray:
    """The device program's generator, on the host."""
    out, x = np.empty(n, dtype=np.int16), seed
    for i in range(n):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        out[i] = ((x >> 8) & 0xFFFF) - 32768
    return out


def checksum(values: np.ndarray) -> int:
    """The device program's checksum of a sequence of ints."""
    total = 0
    for value in values.ravel().tolist():
        total = (total * 31 + value) & 0xFFFFFFFF
    return total


def expected_checksum(seq: int, dim: int, bc: int) -> int:
    """host/q15.py's output for the case, checksummed as the device does: the values, then the row shifts."""
    mult, shift = score_scale(SCORE_EXPONENT, SCORE_EXPONENT, dim)
    q, k = fill(1 + seq, seq * dim).reshape(seq, dim), fill(2 + seq, seq * dim).reshape(seq, dim)
    v = fill(3 + seq, seq * dim).reshape(dim, seq).T  # the device fills Vᵀ
    out = attention_q15(q, k, np.ascontiguousarray(v), Q15Params(seq, dim, False, bc, mult, shift))
    return checksum(np.concatenate([out.o.ravel().astype(np.int32), out.shift.astype(np.int32)]))


def program(cases: tuple[tuple[int, int, int], ...]) -> str:
    filled = [(seq, dim, bc, *score_scale(SCORE_EXPONENT, SCORE_EXPONENT, dim)) for seq, dim, bc in cases]
    return DEVICE_PROGRAM.format(cases=repr(filled))


@dataclass(frozen=True)
class CaseResult:
    seq: int
    dim: int
    bc: int
    cycles: int
    checksum: int


def run_on(port: str, code: str, timeout_s: float) -> list[CaseResult]:
    """Run the program through `mpremote connect PORT exec` and parse its case lines."""
    try:
        done = subprocess.run([sys.executable, "-m", "mpremote", "connect", port, "exec", code],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise LinkError(f"{port} did not finish the calibration program within {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise TargetError(f"{port}: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    results = []
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 6 and parts[0] == "case":
            results.append(CaseResult(*(int(x) for x in parts[1:])))
    if not results:
        raise TargetError(f"{port} printed no case lines: {done.stdout[-200:]!r}")
    return results


def start_twin(root: str) -> tuple[subprocess.Popen, str]:
    """Start `python -m mcu.sim` and return it with its pty path (its first line of output)."""
    twin = subprocess.Popen([sys.executable, "-m", "mcu.sim", "--root", root], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    path = twin.stdout.readline().strip() if twin.stdout else ""
    if not path:
        twin.kill()
        raise LinkError("the twin did not print its pty path")
    return twin, path


def report(twin: list[CaseResult], board: list[CaseResult] | None) -> str:
    lines = ["| seq | dim | Bc | twin cycles | board cycles | board / twin | outputs |",
             "|---:|---:|---:|---:|---:|---:|---|"]
    board_by_case = {(r.seq, r.dim, r.bc): r for r in board or []}
    differ = dict(differences(twin, board))
    for result in twin:
        case = (result.seq, result.dim, result.bc)
        other = board_by_case.get(case)
        lines.append(f"| {result.seq} | {result.dim} | {result.bc} | {result.cycles:,} | "
                     f"{f'{other.cycles:,}' if other else '-'} | "
                     f"{f'{other.cycles / result.cycles:.3f}' if other else 'no board given'} | "
                     f"{'DIFFER from host/q15.py' if case in differ else 'bit-exact'} |")
    return "\n".join(lines)


def differences(twin: list[CaseResult], board: list[CaseResult] | None) -> list[tuple[tuple[int, int, int], str]]:
    """The cases whose checksum is not host/q15.py's, each with the devices that gave it ("twin", "board")."""
    board_by_case = {(r.seq, r.dim, r.bc): r for r in board or []}
    found = []
    for result in twin:
        case = (result.seq, result.dim, result.bc)
        want = expected_checksum(*case)
        other = board_by_case.get(case)
        devices = [name for name, got in (("twin", result), ("board", other))
                   if got is not None and got.checksum != want]
        if devices:
            found.append((case, " and ".join(devices)))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m mcu.sim.calibrate", doc=__doc__)
    parser.add_argument("--serial", metavar="PORT",
                        help="the board's serial port, with q15attn in its firmware or /flash (default: the twin "
                             "alone)")
    parser.add_argument("--timeout", type=real("--timeout", *TIMEOUT_S), default=300.0, metavar="S",
                        help=f"seconds each device may take for all the cases, {TIMEOUT_S[0]:g}..{TIMEOUT_S[1]:g} "
                             "(default 300)")

    def body() -> int:
        args = parser.parse_args(argv)
        code = program(CASES)
        with tempfile.TemporaryDirectory(prefix="kbench-twin-") as root:
            twin, path = start_twin(root)
            try:
                twin_results = run_on(path, code, args.timeout)
            finally:
                twin.terminate()
                twin.wait(timeout=30)
        board_results = run_on(args.serial, code, args.timeout) if args.serial else None
        print(report(twin_results, board_results), flush=True)
        differ = differences(twin_results, board_results)
        if differ:
            cases = "; ".join(f"seq={seq} dim={dim} Bc={bc} on the {devices}" for (seq, dim, bc), devices in differ)
            raise TargetError(f"{len(differ)} of {len(twin_results)} cases differ from host/q15.py: {cases}")
        return 0

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
