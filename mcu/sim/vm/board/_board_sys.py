# sys in the twin's VM (mcu/sim/vm/board/_twin_boot.py): the port's own, with the F407 firmware's identity: its
# sys.implementation (so mcu.deploy's .mpy check and q15attn.mpy's architecture read as on a board) and platform.
from sys import *  # noqa: F403 - all of the port's sys
import sys as _sys

from _twin_config import MPY_ABI as _MPY_ABI  # python -m mcu.sim --vm --mpy-abi (default the F407's, 7942)

platform = "pyboard"


class _Implementation:
    # sys.implementation as the F407 firmware prints it
    name = "micropython"
    version = _sys.implementation.version
    _machine = "STM32F4DISC with STM32F407"
    _mpy = _MPY_ABI
    _build = "STM32F4DISC"

    def __repr__(self):
        return "(name='micropython', version=%r, _machine='%s', _mpy=%d, _build='%s')" % (
            self.version, self._machine, self._mpy, self._build)


implementation = _Implementation()
__name__ = "sys"
