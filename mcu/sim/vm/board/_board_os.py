# os in the twin's VM (mcu/sim/vm/board/_twin_boot.py): the port's own (its files are the twin's root folder at
# /flash), with what the STM32 port has besides (uname, urandom, sync, dupterm) and ilistdir's entries as the
# board's FAT gives them: (name, type, inode, size), where the port's POSIX VFS gives no size.
from os import *  # noqa: F403 - all of the port's os
import os as _os
import sys as _sys
from collections import namedtuple as _namedtuple

_Uname = _namedtuple("uname", ("sysname", "nodename", "release", "version", "machine"))


def uname():
    # the firmware's attrtuple: a tuple whose fields are also attributes
    version = "%d.%d.%d" % _sys.implementation.version[:3]
    return _Uname("pyboard", "pyboard", version, "v%s on the kbench twin" % version, "STM32F4DISC with STM32F407")


def ilistdir(*args):
    # the flash's entries as the board's FAT gives them, with their size (the port's POSIX VFS gives 3-tuples);
    # anything else (the VFS root's mount points, another mounted filesystem) as the port gives it
    path = args[0] if args else ""
    where = path if path.startswith("/") else _os.getcwd().rstrip("/") + "/" + path
    on_flash = where == "/flash" or where.startswith("/flash/")
    for entry in _os.ilistdir(*args):
        if not on_flash or len(entry) != 3:
            yield entry
            continue
        size = 0
        if entry[1] == 0x8000:
            try:
                size = _os.stat(where.rstrip("/") + "/" + entry[0])[6]
            except OSError:
                pass
        yield (entry[0], entry[1], 0, size)


def urandom(n):
    import random
    return bytes(random.getrandbits(8) for _ in range(n))


def sync():
    pass


def dupterm(*args):
    return None


__name__ = "os"
