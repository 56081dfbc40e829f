# gc in the twin's VM (mcu/sim/vm/board/_twin_boot.py): the port's own, with mem_free() without its split-heap
# allowance (the twin's heap cannot grow: capped) and mem_alloc() without what the twin itself keeps in the heap.
from gc import *  # noqa: F403 - all of the port's gc
import gc as _gc

SPLIT = 1 << 27  # the port's gc_get_max_new_split(), which its gc.mem_free() adds to the real figure
kept = [0]  # bytes the twin holds beyond a plain VM's (its boot code, stand-ins, ballast): set at boot


def mem_free():
    return _gc.mem_free() - SPLIT


def mem_alloc():
    return _gc.mem_alloc() - kept[0]


__name__ = "gc"
