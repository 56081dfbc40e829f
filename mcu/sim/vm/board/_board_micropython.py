# micropython in the twin's VM (mcu/sim/vm/board/_twin_boot.py): the port's own, with kbd_intr telling the twin
# first, so that the line's Ctrl-Cs so far are judged by the interrupt character they arrived under
# (mcu/sim/vm/twin.mjs).
from micropython import *  # noqa: F403 - all of the port's micropython
import micropython as _micropython

import js as _js


def kbd_intr(char):
    _js.kbenchInterruptCharChanging()
    _micropython.kbd_intr(char)


__name__ = "micropython"
