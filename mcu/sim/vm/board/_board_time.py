# time in the twin's VM (mcu/sim/vm/board/_twin_boot.py): the port's own, with sleeps that a Ctrl-C ends as on a
# board (the port's busy-wait never looks at the line: the twin's JS side naps and looks, /dev/twinctl's "Z").
# Ticks are the port's: the host's wall clock, not the board's modelled one (docs/twin.md).
from time import *  # noqa: F403 - all of the port's time
import struct as _struct
import time as _time

_control = open("/dev/twinctl", "wb")  # noqa: SIM115 - for the VM's life
_request = bytearray(5)


def sleep_ms(ms):
    ms = int(ms)
    if ms > 0:
        _struct.pack_into("<BI", _request, 0, 0x5A, ms)  # "Z", then the milliseconds
        _control.write(_request)
        if ms:  # a jump: the VM raises a Ctrl-C's KeyboardInterrupt here, inside the sleep, as a board's poll does
            pass


def sleep(seconds):
    sleep_ms(seconds * 1000)


def sleep_us(us):
    us = int(us)
    if us >= 1000:
        sleep_ms(us // 1000)
    _time.sleep_us(us % 1000)


__name__ = "time"
