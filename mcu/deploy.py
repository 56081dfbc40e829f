"""`python -m mcu.deploy --serial PORT`: put kbench's board code (and q15attn.mpy when built) on the board's /flash.

Through mpremote's SerialTransport: stop a frame server a previous host left running, enter the raw REPL, read
`sys.implementation._mpy`, compile mcu/board/*.py with mpy-cross, and check every file's .mpy version (and, for
q15attn.mpy's machine code, sub-version and architecture) against the board before copying anything: a mismatch
names both sides and nothing is written. Files whose sha256 on the board already matches are left alone ("up to
date"), so a second deploy copies nothing. A stale `.py` of the same module, which MicroPython would import before
the `.mpy`, is removed. `--build` only writes the .mpy files under build/board/, for mpremote's own `cp`.
Exit status: 0 deployed or up to date (or built); 1 refused or failed (the board, the link, a .mpy mismatch);
2 bad arguments only (one `kbench: error:` line naming the value); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from host.cli_common import Parser, guard, integer
from host.errors import LinkError, SpecError, TargetError, UnavailableError
from mcu.link import BREAK, FLUSH
from mcu.mpy import BOARD_MODULES, MpyAbi, compile_board_module

NATIVE_MODULE = Path(__file__).resolve().parent / "native" / "build" / "armv7emsp" / "q15attn.mpy"
BUILD_DIR = Path(__file__).resolve().parent.parent / "build" / "board"  # the .mpy files, for mpremote shortcuts
BOARD_DIR = "/flash"
#: Seconds one read of the line may wait. mpremote reads a pty a byte at a time and checks its overall deadline only
#: between reads, so a blocking read (pyserial's default) on a silent board waited forever.
READ_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class Upload:
    name: str  # file name on the board
    data: bytes
    origin: str  # where it came from, for messages


def build() -> list[Path]:
    """Write the board modules' .mpy files under build/board/ (what `python -m mcu.deploy --build` does)."""
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    paths = []
    for module in BOARD_MODULES:
        path = BUILD_DIR / f"{module}.mpy"
        path.write_bytes(compile_board_module(module))
        paths.append(path)
    return paths


def uploads(q15attn: Path | None) -> tuple[list[Upload], str]:
    """The files to deploy, and a note about q15attn.mpy when it is not among them."""
    files = [Upload(f"{m}.mpy", compile_board_module(m), f"mcu/board/{m}.py via mpy-cross") for m in BOARD_MODULES]
    native = q15attn or NATIVE_MODULE
    if native.is_file():
        files.append(Upload("q15attn.mpy", native.read_bytes(), str(native)))
        return files, ""
    if q15attn is not None:
        what = "is not a file" if q15attn.exists() else "does not exist"
        raise SpecError(f"--q15attn {q15attn} {what}; allowed: a built q15attn.mpy")
    return files, ("q15attn.mpy is not built (make -C mcu/native mpy MPY_DIR=<micropython checkout>); not copied: "
                   "the board needs q15attn in its firmware")


def check_abi(board_abi: int, files: list[Upload]) -> None:
    """Refuse (TargetError) when the board would not import one of the files."""
    board = MpyAbi.from_board(board_abi)
    problems = []
    for upload in files:
        why = MpyAbi.from_file(upload.data, upload.name).mismatch(board)
        if why:
            problems.append(f"{upload.name} ({MpyAbi.from_file(upload.data, upload.name)}, from {upload.origin}): "
                            f"{why}")
    if problems:
        raise TargetError(f"the board reads {board} (sys.implementation._mpy={board_abi}); nothing copied: "
                          + "; ".join(problems))


def deploy(port: str, baud: int, q15attn: Path | None = None, say=print) -> list[str]:
    """Deploy to the board at `port`; returns one line per file ('copied ...' or 'up to date ...')."""
    try:
        from mpremote.transport import TransportError
        from mpremote.transport_serial import SerialTransport
    except ImportError as exc:
        raise UnavailableError(f"mpremote is not installed ({exc}): pip install -e '.[mcu]'") from None
    files, note = uploads(q15attn)
    try:
        transport = SerialTransport(port, baudrate=baud)
        transport.serial.timeout = READ_TIMEOUT_S
    except Exception as exc:  # noqa: BLE001 - mpremote raises TransportError or a serial error
        raise LinkError(f"cannot open {port}: {exc}") from None
    lines = []
    try:
        transport.serial.write(FLUSH + BREAK)  # a frame server left running returns to the REPL
        with contextlib.redirect_stdout(io.StringIO()):  # mpremote prints what it read before it gives up
            try:
                transport.enter_raw_repl(soft_reset=False)
            except TransportError as exc:
                raise LinkError(f"{port}: {exc} (no raw REPL prompt within mpremote's 10 s: code on the board that "
                                "keeps the line busy or turned Ctrl-C off, e.g. a main.py? reset the board, or "
                                "remove it)") from None
        board_abi = transport.eval("__import__('sys').implementation._mpy")
        machine = transport.eval("getattr(__import__('sys').implementation, '_machine', '?')")
        say(f"board on {port}: {machine}, {MpyAbi.from_board(board_abi)}")
        check_abi(board_abi, files)
        for upload in files:
            path = f"{BOARD_DIR}/{upload.name}"
            same = transport.fs_exists(path) and \
                transport.fs_hashfile(path, "sha256") == hashlib.sha256(upload.data).digest()
            if same:
                lines.append(f"up to date: {path}")
            else:
                transport.fs_writefile(path, upload.data)
                lines.append(f"copied: {path} ({len(upload.data)} bytes, from {upload.origin})")
            shadow = path[:-len(".mpy")] + ".py"
            if transport.fs_exists(shadow):
                transport.fs_rmfile(shadow)
                lines.append(f"removed: {shadow} (MicroPython imports a .py before the .mpy)")
            say(lines[-1])
        if note:
            say(note)
        status = module_status(transport)
        say(f"q15attn on the board: {status}{stale_module_note(status)}")
        transport.exit_raw_repl()
        if q15attn is not None and status.startswith("missing"):  # the file given was copied and does not import
            raise TargetError(f"{port}: --q15attn {q15attn} was copied to {BOARD_DIR}/q15attn.mpy, but the board "
                              f"cannot import it: {status}")
    except (TransportError, OSError) as exc:  # pyserial's SerialException is an OSError: the port went away
        raise LinkError(f"{port}: {exc}") from None
    finally:
        with contextlib.suppress(OSError):  # closing a port that went away fails too (pyserial's RTS ioctl: EIO)
            transport.close()
    return lines


def module_status(transport) -> str:
    """'version N' when the board imports q15attn (from firmware or /flash), else why not."""
    transport.exec("try:\n import q15attn\n _kb = 'version %d' % q15attn.version()\n"
                   "except Exception as e:\n _kb = 'missing (%s)' % e\n")
    return transport.eval("_kb")


def stale_module_note(status: str) -> str:
    """What to say after module_status's 'version N' when N is older than the contract this host computes needs
    (mcu.messages.MODULE_VERSION): the host and the server would refuse it. '' otherwise."""
    from mcu.messages import MODULE_VERSION

    words = status.split()
    if len(words) != 2 or words[0] != "version" or not words[1].isdigit() or int(words[1]) >= MODULE_VERSION:
        return ""
    return (f" (older than the version {MODULE_VERSION} this host and server need, Q15 contract v2: build q15attn.mpy "
            f"of this tree, make -C mcu/native mpy MPY_DIR=<micropython checkout>, and deploy again; a q15attn baked "
            f"into the firmware needs a new firmware)")


def build_parser() -> Parser:
    parser = Parser(prog="python -m mcu.deploy", doc=__doc__)
    parser.add_argument("--serial", metavar="PORT",
                        help="the board's serial port, or the twin's pty (required unless --build)")
    parser.add_argument("--build", action="store_true",
                        help="only write the board modules' .mpy files under build/board/ (for an mpremote shortcut)")
    parser.add_argument("--baud", type=integer("baud", 1200, 12_000_000), default=115200,
                        help="the serial line's baud rate (default 115200; USB CDC ignores it)")
    parser.add_argument("--q15attn", type=Path, default=None,
                        help="a built q15attn.mpy (default: mcu/native/build/armv7emsp/q15attn.mpy when it exists)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    def body() -> int:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.build:
            for path in build():
                print(f"built: {path.relative_to(BUILD_DIR.parent.parent)}")
            return 0
        if not args.serial:
            parser.error("--serial PORT is required (or --build to only compile)")
        deploy(args.serial, args.baud, args.q15attn)
        return 0

    return guard(body)


if __name__ == "__main__":
    sys.exit(main())
