"""Hardware counters for the CPU target: LLC loads, LLC load misses, instructions and cycles around one call.

The counters come from the Linux perf_event_open syscall, reached through ctypes (no third-party library). The four
events form one group (cycles leads), so they are scheduled on the PMU together and their ratios are consistent;
if the kernel multiplexes the group, each count is scaled by time_enabled / time_running. Only user space is counted
(exclude_kernel, exclude_hv), which an unprivileged process may do for itself at perf_event_paranoid <= 2.

numpy's BLAS runs worker threads, so `measure` opens one group per thread that exists when it is called (every entry
of /proc/self/task) and sums them: warm up first, so the BLAS pool exists. Threads created while `fn` runs are not
counted (the groups are not inherited: inherited events cannot be read as a group).

Counters never raise for a missing capability. Where the kernel refuses (no PMU in a VM, paranoid settings, an
unknown architecture, not Linux) every missing figure is None and `Counters.reason` says why, as DESIGN.md asks:
a missing figure carries a reason, never a zero. Where cachegrind stands in for the hardware (host/cpu/cachegrind.py),
the same `Counters` record carries its simulated figures with source "cachegrind (simulated)".
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import functools
import os
import platform
import struct
import sys
import threading
from dataclasses import dataclass
from typing import Callable, TypeVar

T = TypeVar("T")

SOURCE_PERF = "perf_event"

#: perf_event_open's syscall number by platform.machine().
SYSCALL_NUMBERS = {"x86_64": 298, "amd64": 298, "aarch64": 241, "arm64": 241}

# perf_event_attr.type
PERF_TYPE_HARDWARE = 0
PERF_TYPE_HW_CACHE = 3
# PERF_TYPE_HARDWARE configs
PERF_COUNT_HW_CPU_CYCLES = 0
PERF_COUNT_HW_INSTRUCTIONS = 1
# PERF_TYPE_HW_CACHE config = cache id | (op << 8) | (result << 16)
PERF_COUNT_HW_CACHE_LL = 2
PERF_COUNT_HW_CACHE_OP_READ = 0
PERF_COUNT_HW_CACHE_RESULT_ACCESS = 0
PERF_COUNT_HW_CACHE_RESULT_MISS = 1
# perf_event_attr.read_format
PERF_FORMAT_TOTAL_TIME_ENABLED = 1 << 0
PERF_FORMAT_TOTAL_TIME_RUNNING = 1 << 1
PERF_FORMAT_GROUP = 1 << 3
# perf_event_attr flag bits (the bitfield word after read_format)
ATTR_FLAG_DISABLED = 1 << 0
ATTR_FLAG_EXCLUDE_KERNEL = 1 << 5
ATTR_FLAG_EXCLUDE_HV = 1 << 6
# perf_event_open flags
PERF_FLAG_FD_CLOEXEC = 1 << 3
# ioctls: _IO('$', n), applied to the whole group with PERF_IOC_FLAG_GROUP
PERF_EVENT_IOC_ENABLE = 0x2400
PERF_EVENT_IOC_DISABLE = 0x2401
PERF_EVENT_IOC_RESET = 0x2403
PERF_IOC_FLAG_GROUP = 1

#: The size of the first published perf_event_attr layout; every kernel since 2.6.31 accepts it.
PERF_ATTR_SIZE_VER0 = 64

PARANOID_PATH = "/proc/sys/kernel/perf_event_paranoid"
NOT_SUPPORTED = "hardware counters not supported (no PMU exposed, e.g. a VM)"


def hw_cache_config(cache: int, op: int, result: int) -> int:
    """The PERF_TYPE_HW_CACHE config word: cache id | (op << 8) | (result << 16)."""
    return cache | (op << 8) | (result << 16)


@dataclass(frozen=True)
class Event:
    """One counter: its Counters field, its name in reasons, and its perf_event_attr type and config."""

    field: str
    name: str
    type: int
    config: int


#: The group, leader first. The order is the order of the values in a PERF_FORMAT_GROUP read.
EVENTS = (
    Event("cycles", "cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES),
    Event("instructions", "instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS),
    Event("llc_loads", "LLC loads", PERF_TYPE_HW_CACHE,
          hw_cache_config(PERF_COUNT_HW_CACHE_LL, PERF_COUNT_HW_CACHE_OP_READ, PERF_COUNT_HW_CACHE_RESULT_ACCESS)),
    Event("llc_misses", "LLC load misses", PERF_TYPE_HW_CACHE,
          hw_cache_config(PERF_COUNT_HW_CACHE_LL, PERF_COUNT_HW_CACHE_OP_READ, PERF_COUNT_HW_CACHE_RESULT_MISS)),
)


@dataclass(frozen=True)
class Counters:
    """Counts of one measured call; None where a figure is missing, and then `reason` says why.

    source: "perf_event" (hardware), "cachegrind (simulated)", or "" when every figure is missing.
    """

    llc_loads: int | None
    llc_misses: int | None
    instructions: int | None
    cycles: int | None
    source: str
    reason: str

    @classmethod
    def missing(cls, reason: str) -> "Counters":
        """No figures at all, and why."""
        return cls(llc_loads=None, llc_misses=None, instructions=None, cycles=None, source="", reason=reason)

    def ipc(self) -> float | None:
        """Instructions per cycle, where both are known and cycles > 0."""
        if self.instructions is None or not self.cycles:
            return None
        return self.instructions / self.cycles

    def as_fields(self) -> dict:
        """The counter fields of a `host.results.Result`, by name."""
        return {
            "llc_loads": self.llc_loads,
            "llc_misses": self.llc_misses,
            "instructions": self.instructions,
            "cpu_cycles": self.cycles,
            "ipc": self.ipc(),
            "counters_source": self.source,
            "counters_reason": self.reason,
        }


class PerfEventAttr(ctypes.Structure):
    """struct perf_event_attr as of PERF_ATTR_SIZE_VER0 (64 bytes); `flags` holds the bitfield word."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64),
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
        ("wakeup_events", ctypes.c_uint32),
        ("bp_type", ctypes.c_uint32),
        ("config1", ctypes.c_uint64),
    ]


def make_attr(event: Event, leader: bool) -> PerfEventAttr:
    """The attr of one event: user space only; the leader is created disabled and reads the whole group."""
    attr = PerfEventAttr()
    attr.type = event.type
    attr.size = ctypes.sizeof(PerfEventAttr)
    attr.config = event.config
    attr.read_format = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING
    attr.flags = ATTR_FLAG_EXCLUDE_KERNEL | ATTR_FLAG_EXCLUDE_HV | (ATTR_FLAG_DISABLED if leader else 0)
    return attr


def paranoid_level() -> str:
    """The text of /proc/sys/kernel/perf_event_paranoid, or "unreadable"."""
    try:
        with open(PARANOID_PATH, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return "unreadable"


def reason_for_errno(err: int) -> str:
    """A sentence saying why perf_event_open failed with `err`."""
    if err in (errno.EACCES, errno.EPERM):
        return (f"perf_event_open was refused permission ({errno.errorcode[err]}): "
                f"{PARANOID_PATH} is {paranoid_level()}; counting this process's user space needs it at 2 or "
                f"lower, or CAP_PERFMON (CAP_SYS_ADMIN before Linux 5.8)")
    if err in (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV):
        return NOT_SUPPORTED
    if err == errno.ENOSYS:
        return "perf_event_open syscall missing (a kernel without CONFIG_PERF_EVENTS, or blocked by a seccomp filter)"
    name = errno.errorcode.get(err, str(err))
    return f"perf_event_open failed: {os.strerror(err)} ({name})"


def platform_reason() -> str:
    """Why this platform cannot reach perf_event_open at all, or "" where it can."""
    if not sys.platform.startswith("linux"):
        return f"hardware counters need Linux perf_event_open; this is {sys.platform}"
    machine = platform.machine()
    if machine not in SYSCALL_NUMBERS:
        return f"perf_event_open syscall number unknown for {machine}"
    return ""


@functools.lru_cache(maxsize=1)
def _libc_syscall() -> Callable[..., int]:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc.syscall


def _perf_event_open(attr: PerfEventAttr, pid: int, cpu: int, group_fd: int, flags: int) -> int:
    """The syscall: a new fd, or OSError carrying the kernel's errno."""
    syscall = _libc_syscall()
    fd = syscall(ctypes.c_long(SYSCALL_NUMBERS[platform.machine()]), ctypes.byref(attr), ctypes.c_long(pid),
                 ctypes.c_long(cpu), ctypes.c_long(group_fd), ctypes.c_ulong(flags))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(fd)


def _ioctl(fd: int, request: int, arg: int) -> None:
    fcntl.ioctl(fd, request, arg)


def _read(fd: int, size: int) -> bytes:
    return os.read(fd, size)


def _close(fd: int) -> None:
    os.close(fd)


def _thread_ids() -> list[int]:
    """Every thread of this process now (the current one first)."""
    me = threading.get_native_id()
    try:
        tids = sorted(int(name) for name in os.listdir("/proc/self/task"))
    except OSError:
        return [me]
    return [me] + [tid for tid in tids if tid != me]


def decode_group(data: bytes, n: int) -> tuple[int, int, list[int]]:
    """(time_enabled, time_running, values) of a PERF_FORMAT_GROUP | TOTAL_TIME_* read of an n-event group.

    Layout: u64 nr, u64 time_enabled, u64 time_running, then nr u64 values in the group's creation order.
    """
    need = 8 * (3 + n)
    if len(data) < need:
        raise ValueError(f"group read returned {len(data)} bytes; a group of {n} needs {need}")
    nr, enabled, running = struct.unpack_from("=QQQ", data)
    if nr != n:
        raise ValueError(f"group read reports {nr} events; {n} were opened")
    return enabled, running, list(struct.unpack_from(f"={n}Q", data, 24))


@dataclass
class _Group:
    """One thread's open group: fds in EVENTS order of the events that opened, leader first."""

    tid: int
    events: list[Event]
    fds: list[int]

    @property
    def leader(self) -> int:
        return self.fds[0]


def _open_group(tid: int, refused: dict[str, int]) -> _Group | None:
    """Open the EVENTS that the kernel accepts on thread `tid` as one group; note each refusal's errno in `refused`.

    None where no event opened, or the thread is gone (ESRCH: it exited since /proc/self/task was listed).
    """
    group = _Group(tid=tid, events=[], fds=[])
    try:
        for event in EVENTS:
            leader = not group.fds
            try:
                fd = _perf_event_open(make_attr(event, leader), tid, -1, -1 if leader else group.leader,
                                      PERF_FLAG_FD_CLOEXEC)
            except OSError as e:
                if e.errno == errno.ESRCH:
                    raise
                refused.setdefault(event.field, e.errno or 0)
                continue
            group.fds.append(fd)
            group.events.append(event)
    except OSError:
        _close_group(group)
        return None
    if not group.fds:
        return None
    return group


def _close_group(group: _Group) -> None:
    for fd in reversed(group.fds):
        try:
            _close(fd)
        except OSError:
            pass
    group.fds.clear()


def _missing_reason(refused: dict[str, int], unscheduled: set[str]) -> str:
    """One reason for every missing event, grouped by cause, naming the events."""
    by_reason: dict[str, list[str]] = {}
    for event in EVENTS:
        if event.field in refused:
            by_reason.setdefault(reason_for_errno(refused[event.field]), []).append(event.name)
        elif event.field in unscheduled:
            by_reason.setdefault("the kernel never scheduled the counter group on the PMU (multiplexed out by "
                                 "other users of the counters)", []).append(event.name)
    if len(by_reason) == 1 and sum(len(v) for v in by_reason.values()) == len(EVENTS):
        return next(iter(by_reason))
    return "; ".join(f"{', '.join(names)} not counted: {reason}" for reason, names in by_reason.items())


@functools.lru_cache(maxsize=1)
def counters_available() -> tuple[bool, str]:
    """Whether perf_event_open gives at least one of the events on this thread; probed once, never raises.

    (True, "") when all four open; (True, reason) when some do and reason names the others; (False, reason) when none.
    """
    reason = platform_reason()
    if reason:
        return False, reason
    refused: dict[str, int] = {}
    try:
        group = _open_group(threading.get_native_id(), refused)
    except Exception as e:  # noqa: BLE001 - a broken libc or ctypes: say so rather than raise
        return False, f"perf_event_open could not be called: {e}"
    if group is None:
        return False, _missing_reason(refused, set()) if refused else "perf_event_open gave no counters"
    _close_group(group)
    return True, _missing_reason(refused, set())


def measure(fn: Callable[[], T]) -> tuple[T, Counters]:
    """Call fn() once with the counters of every current thread enabled around it; (fn's result, the counts).

    The groups are opened (disabled) before fn, reset and enabled right before it, disabled right after it, read,
    and closed whatever happens. fn's exceptions propagate. Threads created during fn are not counted.
    """
    ok, reason = counters_available()
    if not ok:
        return fn(), Counters.missing(reason)
    refused: dict[str, int] = {}
    groups: list[_Group] = []
    try:
        for tid in _thread_ids():
            group = _open_group(tid, refused)
            if group is not None:
                groups.append(group)
        if not groups:
            return fn(), Counters.missing(_missing_reason(refused, set()) if refused else "perf_event_open gave "
                                          "no counters for any thread")
        try:
            for group in groups:
                _ioctl(group.leader, PERF_EVENT_IOC_RESET, PERF_IOC_FLAG_GROUP)
            for group in groups:
                _ioctl(group.leader, PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP)
            result = fn()
        finally:
            for group in groups:
                _ioctl(group.leader, PERF_EVENT_IOC_DISABLE, PERF_IOC_FLAG_GROUP)
        return result, _sum_groups(groups, refused)
    finally:
        for group in groups:
            _close_group(group)


def _sum_groups(groups: list[_Group], refused: dict[str, int]) -> Counters:
    """Read every group, scale each by enabled/running, and sum per event over the threads.

    An event refused on any thread is missing (a partial sum would undercount). A group the kernel never ran
    although it was enabled (running == 0 < enabled) leaves its events missing for the same reason.
    """
    totals = {event.field: 0.0 for event in EVENTS}
    unscheduled: set[str] = set()
    for group in groups:
        n = len(group.fds)
        try:
            enabled, running, values = decode_group(_read(group.leader, 8 * (3 + n)), n)
        except (OSError, ValueError) as e:
            return Counters.missing(f"reading the counter group of thread {group.tid} failed: {e}")
        if running == 0:
            if enabled > 0:
                unscheduled.update(event.field for event in group.events)
            continue  # enabled == running == 0: the thread never ran while counting
        scale = enabled / running if enabled > running else 1.0
        for event, value in zip(group.events, values):
            totals[event.field] += value * scale
    missing = set(refused) | unscheduled
    figures = {field: (None if field in missing else int(round(total))) for field, total in totals.items()}
    present = any(value is not None for value in figures.values())
    return Counters(**figures, source=SOURCE_PERF if present else "", reason=_missing_reason(refused, unscheduled))
