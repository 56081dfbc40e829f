# sys in the twin's VM (mcu/sim/vm/board/_twin_boot.py): the port's own, with the F407 firmware's identity: its
# sys.implementation (so mcu.deploy's .mpy check and q15attn.mpy's architecture read as on a board) and platform.
from sys import *  # noqa: F403 - all of the port's sys
import sys as _sys

platform = "pyboard"


class _Implementation:
    # sys.implementation as the F407 firmware prints it
    name = "micropython"
    version = _sys.implementation.version
    _machine = "STM32F4DISC with STM32F407"
    _mpy = 7942  # .mpy 6.3, armv7emsp
    _build = "STM32F4DISC"

    def __repr__(self):
        return "(name='micropython', version=%r, _machine='%s', _mpy=%d, _build='%s')" % (
            self.version, self._machine, self._mpy, self._build)


implementation = _Implementation()
__name__ = "sys"
