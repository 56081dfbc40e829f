# sys in the twin's VM (mcu/sim/vm/board/_twin_boot.py): the port's own, with the F407 firmware's identity: its
# sys.implementation (so mcu.deploy's .mpy check and q15attn.mpy's architecture read as on a board) and platform.
# What the port's sys holds in the VM's state rather than in its dict is here too: path and argv (the same lists, so
# a change to their items is the port's; a new list assigned to sys.path is not). Unlike the firmware's read-only
# module, this one takes new attributes (`sys.x = 1` works here and raises AttributeError on a board).
from sys import *  # noqa: F403 - all of the port's sys
import sys as _sys

from _twin_config import MPY_ABI as _MPY_ABI  # python -m mcu.sim --vm --mpy-abi (default the F407's, 7942)

platform = "pyboard"
# The one mark of the twin a board's code can read (HELLO sends sys.version as the firmware): a host pointed at the
# twin's pty with --serial labels its rows modelled, not measured (mcu/head.py TWIN_MARK). The F407 identity that
# mcu.deploy and q15attn.mpy check (sys.implementation, sys.platform, the machine string) is unchanged.
version = _sys.version + " (kbench twin)"


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
path = _sys.path
argv = _sys.argv


__name__ = "sys"
