# gc in the twin's VM (mcu/sim/vm/board/_twin_boot.py): the port's own, with mem_free() without its split-heap
# allowance (the twin's heap cannot grow: capped) and mem_alloc() without what the twin itself keeps in the heap.
from gc import *  # noqa: F403 - all of the port's gc
import gc as _gc

SPLIT = 1 << 27  # the port's gc_get_max_new_split(), which its gc.mem_free() adds to the real figure
kept = [0]  # bytes the twin holds beyond a plain VM's (its boot code, stand-ins, ballast): set at boot


_threshold = [-1]  # the board's: none set (gc.c's default); the twin's own is 0 (_twin_boot.py)


def threshold(*amount):
    # gc.threshold() as the board keeps it; the twin collects after every allocating call to the VM anyway, which a
    # board's threshold cannot make more often
    if not amount:
        return _threshold[0]
    value = amount[0]
    if not isinstance(value, int):
        raise TypeError("can't convert %s to int" % type(value).__name__)
    _threshold[0] = -1 if value < 0 else value // 16 * 16


def mem_free():
    return _gc.mem_free() - SPLIT


def mem_alloc():
    return _gc.mem_alloc() - kept[0]


__name__ = "gc"
