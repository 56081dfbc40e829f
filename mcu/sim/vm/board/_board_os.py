# os in the twin's VM (mcu/sim/vm/board/_twin_boot.py): the port's own (its files are the twin's root folder at
# /flash), with what the STM32 port has besides: uname, urandom, sync, dupterm.
from os import *  # noqa: F403 - all of the port's os
import sys as _sys
from collections import namedtuple as _namedtuple

_Uname = _namedtuple("uname", ("sysname", "nodename", "release", "version", "machine"))


def uname():
    # the firmware's attrtuple: a tuple whose fields are also attributes
    version = "%d.%d.%d" % _sys.implementation.version[:3]
    return _Uname("pyboard", "pyboard", version, "v%s on the kbench twin" % version, "STM32F4DISC with STM32F407")


def urandom(n):
    import random
    return bytes(random.getrandbits(8) for _ in range(n))


def sync():
    pass


def dupterm(*args):
    return None


__name__ = "os"
