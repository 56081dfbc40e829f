"""Command-line plumbing every kbench tool shares: a parser whose errors are one line, integer argument types that
quote the bad value and the allowed range, and `guard`, which prints a KbenchError once and turns it into an exit
status.

The convention of every `python -m` entry point (docs/architecture.md): `--serial PORT` wherever a board port is
named, `--out DIR` where a tool writes a folder, `--causal {0,1,both}` where a tool takes the mask; `main()` runs its
body through `guard`, so the exit status means the same everywhere: 0 done; 1 a KbenchError (the device, the link, a
check or a file failed while working), 2 bad arguments only (SpecError: one `kbench: error:` line naming the
value), 130 interrupted (Ctrl-C: one line, never a traceback), 143 terminated (SIGTERM, in a tool that calls
`terminate_on_sigterm`: one line). `guard` also makes Ctrl-C work in a tool a non-interactive shell started in the
background (which ignores SIGINT there). A tool whose own errors are bad arguments (an --out
that cannot be made, a results folder named on the command line that is missing) raises SpecError where it checks
them; a file that turns out unreadable during the work is a failure (1). Each tool states its statuses in an
"Exit status:" sentence of its docstring, which `Parser(doc=__doc__)` shows as the --help epilog.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import textwrap
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

from host.errors import KbenchError, SpecError


class HelpFormatter(argparse.HelpFormatter):
    """argparse's help layout, wrapping only at spaces: a flag (`--exit-on-stdin-eof`) or a word (`host-built`) is
    never split at its hyphen, so no help line looks cut off."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent, subsequent_indent=indent,
                             break_on_hyphens=False)


class Parser(argparse.ArgumentParser):
    """argparse that raises SpecError instead of printing usage and exiting, so a bad argument is one line.
    `doc` (a tool's module docstring) gives --help its description, the docstring's whole first paragraph (a first
    line alone can end mid-sentence or mid-backtick), and its epilog, the docstring's "Exit status:" sentence."""

    def __init__(self, *args, doc: str | None = None, **kwargs):
        if doc is not None:
            kwargs.setdefault("description", summary(doc))
            kwargs.setdefault("epilog", exit_statuses(doc))
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        # a value that starts with '-' and a digit or '.' (-1e9, -4x4, -1,2) is a value to judge, not an unknown
        # option: argparse's own pattern takes only -5 and -0.5, and said "expected one argument" for the others
        self._negative_number_matcher = re.compile(r"^-[\d.]")

    def error(self, message: str) -> None:  # type: ignore[override]
        raise SpecError(message)


#: The Namespace attribute where `Given` notes the options on the command line.
GIVEN = "given_options"


class Given(argparse.Action):
    """argparse's plain store, noting the option's dest in `namespace.given_options` (a frozenset): whether the
    option was on the command line, whatever its value. A value equal to the default, typed out (`--seq 128,256,512`),
    is given all the same, which comparing values with the default cannot tell (`given`)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, GIVEN, given(namespace) | {self.dest})


def given(namespace: argparse.Namespace) -> frozenset[str]:
    """The dests of the `Given` options on the command line parsed into `namespace`."""
    return frozenset(getattr(namespace, GIVEN, ()))


def typed(parser: argparse.ArgumentParser, argv: Sequence[str], dests: Iterable[str]) -> frozenset[str]:
    """Which of `dests` the command line `argv` gave, whatever the value (one typed out at its default too): argv
    parsed again into a namespace holding a sentinel for each, since argparse fills in a default only where the
    namespace has none. For the options a tool does not declare itself (a target's own), where `Given` cannot be
    the action."""
    unset = object()
    parsed, _ = parser.parse_known_args(list(argv), argparse.Namespace(**{dest: unset for dest in dests}))
    return frozenset(dest for dest in dests if getattr(parsed, dest) is not unset)


def summary(doc: str) -> str:
    """A docstring's first paragraph as one line (argparse wraps it again)."""
    return " ".join(doc.strip().split("\n\n")[0].split())


def exit_statuses(doc: str) -> str:
    """The docstring's "Exit status: ..." sentence, from those words to the end of their paragraph, as one line."""
    start = doc.find("Exit status:")
    if start < 0:
        raise ValueError("the docstring states no 'Exit status:'")
    return " ".join(doc[start:].split("\n\n")[0].split())


def _allowed(low: int, high: int | None, allowed: Sequence[int]) -> str:
    if allowed:
        return ", ".join(map(str, allowed))
    return f">= {low}" if high is None else f"{low}..{high}"


def _parse_int(name: str, text: str, low: int, high: int | None, allowed: Sequence[int]) -> int:
    # plain decimal only: Python's int() also takes 10_000 and non-ASCII digits, which no shell user means
    if not re.fullmatch(r"[+-]?[0-9]+", text.strip()):
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer; allowed: "
                                         f"{_allowed(low, high, allowed)}")
    value = int(text.strip())
    bad = (value not in allowed) if allowed else (value < low or (high is not None and value > high))
    if bad:
        verdict = "is not supported" if allowed else "is out of range"
        raise argparse.ArgumentTypeError(f"{name}={value} {verdict}; allowed: {_allowed(low, high, allowed)}")
    return value


def integer(name: str, low: int, high: int | None = None, allowed: Sequence[int] = ()) -> Callable[[str], int]:
    """An argparse type: one int in low..high (no upper bound when high is None), or one of `allowed`."""
    return lambda text: _parse_int(name, text, low, high, allowed)


def int_list(name: str, low: int, high: int | None = None,
             allowed: Sequence[int] = ()) -> Callable[[str], tuple[int, ...]]:
    """An argparse type: a comma-separated list of such ints, duplicates dropped, order kept."""
    def parse(text: str) -> tuple[int, ...]:
        items = text.split(",")
        if not text.strip() or any(not item.strip() for item in items):
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers "
                                             f"({_allowed(low, high, allowed)})")
        return tuple(dict.fromkeys(_parse_int(name, item, low, high, allowed) for item in items))

    return parse


def real(name: str, low: float, high: float) -> Callable[[str], float]:
    """An argparse type: one finite number in low..high (scientific notation allowed: 1e9)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}={text!r} is not a number; allowed: {low:g}..{high:g}") from None
        if not math.isfinite(value) or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{name}={text} is out of range; allowed: {low:g}..{high:g}")
        return value

    return parse


def name_list(text: str) -> tuple[str, ...]:
    """An argparse type: a comma-separated list of names (each checked against its registry by the caller)."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of names")
    return tuple(dict.fromkeys(items))


def folder(text: str) -> Path:
    """An argparse type: a folder path (new or existing); an empty one is refused rather than read as '.'."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is empty; allowed: a folder path")
    return Path(text)


def output_folder(out: Path, option: str = "--out", create: bool = True) -> Path:
    """Make `out` (and its parents) for writing, or raise SpecError in one line: it is a file, it lies under a
    file, or it cannot be created or written. With create False, only what can be told without making anything (a
    file in the way, a folder or its nearest existing parent that cannot be written in): for a check before a tool
    knows it will write at all."""
    absolute = out.absolute()
    existing = next(path for path in (absolute, *absolute.parents) if path.exists())
    if existing == absolute and not existing.is_dir():
        raise SpecError(f"{option} {out} is a file; allowed: a folder (new or existing)")
    if not existing.is_dir():
        raise SpecError(f"{option} {out}: {existing} is a file, so no folder can be made under it")
    if not create:
        if not os.access(existing, os.W_OK | os.X_OK):
            raise SpecError(f"{option} {out}: cannot write in {existing}")
        return out
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"{option} {out} cannot be created: {exc.strerror or exc}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        read_only = hasattr(os, "statvfs") and bool(os.statvfs(out).f_flag & os.ST_RDONLY)
        raise SpecError(f"{option} {out}: cannot write in it "
                        f"({'a read-only file system' if read_only else 'permission denied'})")
    return out


class Stages:
    """Progress of a long command that shows in a log as well as on a terminal: `stage(text)` prints
    `kbench: TOOL TEXT (T s)` on stderr, flushed at once, T the seconds since the Stages began."""

    def __init__(self, tool: str):
        self.tool, self.start = tool, time.perf_counter()

    def __call__(self, text: str) -> None:
        print(f"kbench: {self.tool} {text} ({time.perf_counter() - self.start:.1f} s)", file=sys.stderr, flush=True)


class Terminated(BaseException):
    """SIGTERM arrived (raised by the handler `terminate_on_sigterm` installs): like Ctrl-C, a BaseException, so every
    `finally` between the signal and `guard` runs (locks released, temporary files removed)."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


def terminate_on_sigterm() -> None:
    """Make SIGTERM raise Terminated in the main thread, so `guard` turns it into one line and exit 143 (128 + 15)
    as it turns Ctrl-C into 130; off the main thread (where Python cannot install handlers) nothing changes."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)


def answer_ctrl_c() -> None:
    """Make SIGINT raise KeyboardInterrupt where it is ignored: a non-interactive shell starts `tool &` with SIGINT
    set to SIG_IGN, so `kill -INT` (or Ctrl-C on the script) would do nothing. A handler a tool installed itself is
    left alone; off the main thread (where Python cannot install handlers) nothing changes."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def stop_line(stop: KeyboardInterrupt | Terminated) -> tuple[str, int]:
    """What stopped a tool, as its one line begins, and the exit status: Ctrl-C `interrupted` and 130 (128 + SIGINT),
    SIGTERM `terminated (SIGTERM)` and 143 (128 + SIGTERM). For a tool that writes its own line (saying what it
    kept) instead of guard's."""
    return ("terminated (SIGTERM)", 143) if isinstance(stop, Terminated) else ("interrupted", 130)


def guard(body: Callable[[], int], interrupted: str = "") -> int:
    """Run a tool's body and turn what it raised into one line on stderr and the exit status: SpecError (a bad
    argument) `kbench: error: …` and 2; any other KbenchError `kbench: …` and 1; Ctrl-C (KeyboardInterrupt)
    `kbench: interrupted` (and `; interrupted`, saying what was kept) and 130, also where a shell started the tool
    with SIGINT ignored (`answer_ctrl_c`); SIGTERM, where the tool called `terminate_on_sigterm`,
    `kbench: terminated (SIGTERM)` (and the same note) and 143. Anything else is a bug and keeps its traceback."""
    answer_ctrl_c()
    try:
        return body()
    except (KeyboardInterrupt, Terminated) as stop:
        line, code = stop_line(stop)
        print(f"kbench: {line}" + (f"; {interrupted}" if interrupted else ""), file=sys.stderr)
        return code
    except SpecError as exc:
        print(f"kbench: error: {exc}", file=sys.stderr)
        return 2
    except KbenchError as exc:
        print(f"kbench: {exc}", file=sys.stderr)
        return 1
