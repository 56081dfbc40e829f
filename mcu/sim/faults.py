"""A noisy line for the board twin: byte drops, bit flips, delays and soft resets, for testing the link's recovery.

`python -m mcu.sim --faults drop=0.001,flip=0.001,delay=0.01,reset=40,seed=1` corrupts the line only while a frame
server holds it (the board has disabled Ctrl-C with `micropython.kbd_intr(-1)`): the raw REPL handshake before it
has no retry layer, in mpremote or here, and stays clean. Each byte in either direction is dropped with probability
`drop` and has one random bit flipped with probability `flip`; each write from the board is held back by up to
`delay_s` seconds with probability `delay`; every `reset`-th frame the board receives (counted by the delimiters
that end one) is followed by a soft reset of the board (SystemExit raised in the running server, as
`machine.soft_reset()` would), which ends the session.
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from dataclasses import dataclass, fields
from typing import Callable

from host.errors import SpecError

DELIMITER = 0x00


@dataclass(frozen=True)
class FaultSpec:
    """What to inject; all zero means a clean line."""

    drop: float = 0.0
    flip: float = 0.0
    delay: float = 0.0
    delay_s: float = 0.05
    reset: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("drop", "flip", "delay"):
            value = getattr(self, name)
            if not 0.0 <= value <= 0.5:
                raise SpecError(f"--faults {name}={value} is out of range; allowed: 0..0.5")
        if not 0.0 <= self.delay_s <= 5.0:
            raise SpecError(f"--faults delay_s={self.delay_s} is out of range; allowed: 0..5 seconds")
        if self.reset < 0:
            raise SpecError(f"--faults reset={self.reset} is out of range; allowed: >= 0 (0: never)")

    @classmethod
    def parse(cls, text: str, option: str = "--faults") -> "FaultSpec":
        """'drop=0.001,flip=0.001,delay=0.01,delay_s=0.05,reset=40,seed=1' (any subset); errors name `option`."""
        try:
            return cls._parse(text)
        except SpecError as exc:
            raise SpecError(str(exc).replace("--faults", option, 1)) from None

    @classmethod
    def argument(cls, text: str) -> "FaultSpec":
        """An argparse type: the spec, or the one-line reason it is not one."""
        try:
            return cls.parse(text)
        except SpecError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    @classmethod
    def _parse(cls, text: str) -> "FaultSpec":
        kinds = {f.name: f.type for f in fields(cls)}
        values: dict[str, object] = {}
        if not text.strip():
            return cls()
        for item in (part.strip() for part in text.split(",")):
            name, sep, value = item.partition("=")
            if not sep:
                raise SpecError(f"--faults item {item!r} is not NAME=VALUE; names: {', '.join(kinds)}")
            if name not in kinds:
                raise SpecError(f"--faults {name!r} is not a fault; allowed: {', '.join(kinds)}")
            if name in values:
                raise SpecError(f"--faults {name} is given twice ({name}={values[name]!r} and {item!r}); give it once")
            whole = kinds[name] in (int, "int")
            try:
                values[name] = int(value) if whole else float(value)
            except ValueError:
                what = "a whole number (reset: every N-th frame, 0 never; seed: any)" if whole else \
                    "a number (drop, flip, delay: a probability 0..0.5; delay_s: 0..5 seconds)"
                hint = "; items are separated by ','" if ";" in value else ""
                raise SpecError(f"--faults {name}={value!r} is not {what}{hint}") from None
        return cls(**values)

    @property
    def clean(self) -> bool:
        return not (self.drop or self.flip or self.delay or self.reset)


class FaultyLine:
    """Applies a FaultSpec to the bytes of one line while `active()` says a frame server holds it."""

    def __init__(self, spec: FaultSpec, active: Callable[[], bool], reset: Callable[[], bool]):
        self.spec = spec
        self._active = active
        self._reset = reset
        self._rng = random.Random(spec.seed)
        self._lock = threading.Lock()
        self._frames = 0
        self._last = DELIMITER
        self.counts = {"dropped": 0, "flipped": 0, "delayed": 0, "resets": 0}

    def _mangle(self, data: bytes) -> bytes:
        if not (self.spec.drop or self.spec.flip):
            return data
        out = bytearray()
        with self._lock:
            for byte in data:
                if self._rng.random() < self.spec.drop:
                    self.counts["dropped"] += 1
                    continue
                if self._rng.random() < self.spec.flip:
                    byte ^= 1 << self._rng.randrange(8)
                    self.counts["flipped"] += 1
                out.append(byte)
        return bytes(out)

    def inbound(self, data: bytes) -> bytes:
        """Host -> board bytes as the board receives them; may soft-reset the board after a frame."""
        if self.spec.clean or not self._active():
            return data
        if self.spec.reset:
            with self._lock:
                frames = self._frame_ends(data)
                before, self._frames = self._frames, self._frames + frames
            if frames and before // self.spec.reset != self._frames // self.spec.reset and self._reset():
                self.counts["resets"] += 1
        return self._mangle(data)

    def _frame_ends(self, data: bytes) -> int:
        """Delimiters that end a frame (a 0x00 after a non-zero byte): padding and flush zeros do not count."""
        ends = 0
        for byte in data:
            ends += byte == DELIMITER and self._last != DELIMITER
            self._last = byte
        return ends

    def outbound(self, data: bytes) -> bytes:
        """Board -> host bytes as the host receives them, possibly after a delay."""
        if self.spec.clean or not self._active():
            return data
        if self.spec.delay and self._rng.random() < self.spec.delay:
            self.counts["delayed"] += 1
            time.sleep(self._rng.uniform(0, self.spec.delay_s))
        return self._mangle(data)
