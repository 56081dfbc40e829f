"""host/cpu/perf.py: the attr layout, the errno reasons, the group logic against a fake kernel, and the real syscall.

The fake kernel stands in for perf_event_open, the ioctls, the group read and close, so the summing, scaling and
fd handling are tested on machines without a PMU. The real kernel is exercised twice: the hardware events (which
answer with a reason where there is no PMU, as on the development machines) and software events, which every Linux
kernel with perf events offers, to run the ctypes syscall, ioctls, group read and per-thread enumeration for real.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import threading
import time

import numpy as np
import pytest

from host.cpu import perf
from host.cpu.perf import Counters
from host.results import Result

FIELDS = {"llc_loads", "llc_misses", "instructions", "cpu_cycles", "ipc", "counters_source", "counters_reason"}


@pytest.fixture(autouse=True)
def fresh_probe():
    """counters_available() caches its probe; every test starts and ends with it cleared."""
    perf.counters_available.cache_clear()
    yield
    perf.counters_available.cache_clear()


# ---- the real kernel, hardware events ---------------------------------------------------------------------------

def test_counters_available_answers_without_raising():
    ok, reason = perf.counters_available()
    assert isinstance(ok, bool) and isinstance(reason, str)
    if not ok:
        assert reason.strip(), "a missing capability must carry a reason"
    assert perf.counters_available() == (ok, reason)  # cached: the same answer


def test_measure_returns_fns_result_and_counts_or_reason():
    a = np.arange(256 * 256, dtype=np.float32).reshape(256, 256) / 65536.0
    a @ a  # warm: the BLAS pool exists before measure enumerates threads
    result, counters = perf.measure(lambda: float((a @ a).sum()))
    assert result == pytest.approx(float((a.astype(np.float64) @ a).sum()), rel=1e-4)
    ok, reason = perf.counters_available()
    if ok:
        assert counters.source == "perf_event"
        assert counters.cycles is not None and counters.cycles > 0
        assert counters.instructions is not None and counters.instructions > 0
    else:
        assert (counters.llc_loads, counters.llc_misses, counters.instructions, counters.cycles) == (None,) * 4
        assert counters.source == ""
        assert counters.reason == reason and counters.reason


def test_measure_lets_fns_exception_through():
    def boom():
        raise KeyError("from fn")

    with pytest.raises(KeyError, match="from fn"):
        perf.measure(boom)


def test_no_pmu_reason_is_the_documented_sentence_here():
    """The development machines are VMs without a PMU; where a machine has one, this says nothing."""
    ok, reason = perf.counters_available()
    if ok:
        pytest.skip("this machine has hardware counters")
    if "not supported" in reason:
        assert reason == perf.NOT_SUPPORTED


# ---- the record ---------------------------------------------------------------------------------------------------

def test_as_fields_has_exactly_the_result_fields_and_a_result_accepts_them():
    counters = Counters(llc_loads=40, llc_misses=4, instructions=3000, cycles=1500, source="perf_event", reason="")
    fields = counters.as_fields()
    assert set(fields) == FIELDS
    assert fields["cpu_cycles"] == 1500 and fields["ipc"] == pytest.approx(2.0)
    row = Result(run_id="r", timestamp="t", git_rev="g", host="h", device="d", target="cpu", kernel="reference",
                 dtype="float32", batch=1, heads=1, seq=64, dim=16, causal=False, seed=0, **fields)
    assert row.instructions == 3000 and row.counters_source == "perf_event"


def test_missing_counters_have_no_ipc_and_keep_their_reason():
    counters = Counters.missing("why")
    assert counters.ipc() is None
    assert counters.as_fields() == {"llc_loads": None, "llc_misses": None, "instructions": None, "cpu_cycles": None,
                                    "ipc": None, "counters_source": "", "counters_reason": "why"}
    assert Counters(None, None, 10, 0, "perf_event", "").ipc() is None  # zero cycles: no ratio


# ---- the attr layout and event encodings -------------------------------------------------------------------------

def test_attr_is_the_64_byte_ver0_layout():
    assert ctypes.sizeof(perf.PerfEventAttr) == perf.PERF_ATTR_SIZE_VER0 == 64
    offsets = {name: getattr(perf.PerfEventAttr, name).offset for name, _ in perf.PerfEventAttr._fields_}
    assert offsets == {"type": 0, "size": 4, "config": 8, "sample_period": 16, "sample_type": 24,
                       "read_format": 32, "flags": 40, "wakeup_events": 48, "bp_type": 52, "config1": 56}


def test_event_encodings():
    by_field = {e.field: e for e in perf.EVENTS}
    assert [e.field for e in perf.EVENTS][0] == "cycles"  # the leader
    assert (by_field["cycles"].type, by_field["cycles"].config) == (0, 0)  # PERF_TYPE_HARDWARE, CPU_CYCLES
    assert (by_field["instructions"].type, by_field["instructions"].config) == (0, 1)
    # PERF_TYPE_HW_CACHE: LL (2) | OP_READ (0) << 8 | RESULT_ACCESS (0) / RESULT_MISS (1) << 16
    assert (by_field["llc_loads"].type, by_field["llc_loads"].config) == (3, 0x00002)
    assert (by_field["llc_misses"].type, by_field["llc_misses"].config) == (3, 0x10002)


def test_make_attr_leader_is_disabled_user_only_group_reader():
    leader = perf.make_attr(perf.EVENTS[0], leader=True)
    sibling = perf.make_attr(perf.EVENTS[3], leader=False)
    assert leader.size == 64 and sibling.size == 64
    assert leader.read_format == 0b1011  # GROUP | TOTAL_TIME_RUNNING | TOTAL_TIME_ENABLED
    assert leader.flags == (1 << 0) | (1 << 5) | (1 << 6)  # disabled, exclude_kernel, exclude_hv
    assert sibling.flags == (1 << 5) | (1 << 6)  # follows its leader's enable
    raw = bytes(sibling)
    assert struct.unpack_from("=IIQ", raw) == (3, 64, 0x10002)


def test_decode_group():
    data = struct.pack("=6Q", 3, 500, 250, 7, 8, 9)
    assert perf.decode_group(data, 3) == (500, 250, [7, 8, 9])
    with pytest.raises(ValueError, match="reports 3 events; 4 were opened"):
        perf.decode_group(data + struct.pack("=Q", 1), 4)
    with pytest.raises(ValueError, match="needs"):
        perf.decode_group(data[:-8], 3)


# ---- errno → reason ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("err", [errno.EACCES, errno.EPERM])
def test_permission_reason_names_paranoid_value_and_cap_perfmon(err, tmp_path, monkeypatch):
    paranoid = tmp_path / "perf_event_paranoid"
    paranoid.write_text("3\n")
    monkeypatch.setattr(perf, "PARANOID_PATH", str(paranoid))
    reason = perf.reason_for_errno(err)
    assert "perf_event_paranoid is 3" in reason and "CAP_PERFMON" in reason


def test_permission_reason_when_paranoid_unreadable(tmp_path, monkeypatch):
    monkeypatch.setattr(perf, "PARANOID_PATH", str(tmp_path / "perf_event_paranoid"))
    assert "perf_event_paranoid is unreadable" in perf.reason_for_errno(errno.EACCES)


@pytest.mark.parametrize("err", [errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV])
def test_no_pmu_reason(err):
    assert perf.reason_for_errno(err) == "hardware counters not supported (no PMU exposed, e.g. a VM)"


def test_other_reasons():
    assert "syscall missing" in perf.reason_for_errno(errno.ENOSYS)
    assert os.strerror(errno.EINVAL) in perf.reason_for_errno(errno.EINVAL)
    assert "EMFILE" in perf.reason_for_errno(errno.EMFILE)


def test_unknown_architecture_and_platform(monkeypatch):
    monkeypatch.setattr(perf.platform, "machine", lambda: "riscv64")
    assert perf.counters_available() == (False, "perf_event_open syscall number unknown for riscv64")
    perf.counters_available.cache_clear()
    monkeypatch.setattr(perf.sys, "platform", "darwin")
    ok, reason = perf.counters_available()
    assert not ok and "Linux" in reason and "darwin" in reason
    assert perf.measure(lambda: 5) == (5, Counters.missing(reason))


# ---- a fake kernel -------------------------------------------------------------------------------------------------

class FakeKernel:
    """perf_event_open, ioctl, read and close over fake fds; `refuse` maps an event field to an errno."""

    def __init__(self, refuse=None, reads=None, vanished=()):
        self.refuse = refuse or {}
        self.reads = reads or {}  # tid -> (enabled, running, values of the opened events)
        self.vanished = set(vanished)
        self.opened = {}  # fd -> (tid, field, group_fd, flags, attr flags)
        self.closed = []
        self.ioctls = []
        self.next_fd = 1000
        self.enabled_leaders = set()

    def open(self, attr, pid, cpu, group_fd, flags):
        assert cpu == -1 and attr.size == 64
        if pid in self.vanished:
            raise OSError(errno.ESRCH, "No such process")
        field = next(e.field for e in perf.EVENTS if (e.type, e.config) == (attr.type, attr.config))
        if field in self.refuse:
            raise OSError(self.refuse[field], os.strerror(self.refuse[field]))
        fd = self.next_fd
        self.next_fd += 1
        self.opened[fd] = (pid, field, group_fd, flags, attr.flags)
        return fd

    def ioctl(self, fd, request, arg):
        assert fd in self.opened and fd not in self.closed
        self.ioctls.append((fd, request, arg))
        if request == perf.PERF_EVENT_IOC_ENABLE:
            self.enabled_leaders.add(fd)
        elif request == perf.PERF_EVENT_IOC_DISABLE:
            self.enabled_leaders.discard(fd)

    def read(self, fd, size):
        tid = self.opened[fd][0]
        members = [f for f, o in self.opened.items() if o[0] == tid]
        enabled, running, values = self.reads.get(tid, (1000, 1000, [1] * len(members)))
        assert len(values) == len(members)
        data = struct.pack(f"=3Q{len(values)}Q", len(values), enabled, running, *values)
        assert size >= len(data)
        return data

    def close(self, fd):
        assert fd not in self.closed, f"fd {fd} closed twice"
        self.closed.append(fd)

    def leaders(self):
        return [fd for fd, o in self.opened.items() if o[2] == -1]

    def install(self, monkeypatch, tids=(100,)):
        monkeypatch.setattr(perf, "_perf_event_open", self.open)
        monkeypatch.setattr(perf, "_ioctl", self.ioctl)
        monkeypatch.setattr(perf, "_read", self.read)
        monkeypatch.setattr(perf, "_close", self.close)
        monkeypatch.setattr(perf, "_thread_ids", lambda: list(tids))
        monkeypatch.setattr(perf, "platform_reason", lambda: "")
        self.probe = perf.counters_available()  # probes this thread; measure() then opens only for `tids`
        self.opened.clear()
        self.closed.clear()
        return self


@pytest.mark.parametrize("err, words", [(errno.ENOENT, "not supported"), (errno.EACCES, "CAP_PERFMON"),
                                        (errno.ENOSYS, "syscall missing")])
def test_refusal_of_every_event_is_a_reason_not_an_exception(err, words, monkeypatch):
    kernel = FakeKernel(refuse={e.field: err for e in perf.EVENTS}).install(monkeypatch)
    ok, reason = perf.counters_available()
    assert not ok and words in reason
    assert perf.measure(lambda: "done") == ("done", Counters.missing(reason))
    assert kernel.opened == {}


def test_the_group_structure_and_the_enable_window(monkeypatch):
    kernel = FakeKernel().install(monkeypatch, tids=(100, 101))
    seen = {}

    def fn():
        seen["enabled during fn"] = set(kernel.enabled_leaders)
        return 42

    result, counters = perf.measure(fn)
    assert result == 42
    leaders = kernel.leaders()
    assert len(leaders) == 2 and seen["enabled during fn"] == set(leaders)
    assert kernel.enabled_leaders == set()  # disabled right after fn
    for leader in leaders:
        tid, field, _, flags, attr_flags = kernel.opened[leader]
        assert field == "cycles" and attr_flags & perf.ATTR_FLAG_DISABLED and flags == perf.PERF_FLAG_FD_CLOEXEC
        siblings = [o for o in kernel.opened.values() if o[2] == leader]
        assert [o[1] for o in siblings] == ["instructions", "llc_loads", "llc_misses"]
        assert all(o[0] == tid for o in siblings)
        calls = [(request, arg) for fd, request, arg in kernel.ioctls if fd == leader]
        assert calls == [(perf.PERF_EVENT_IOC_RESET, perf.PERF_IOC_FLAG_GROUP),
                         (perf.PERF_EVENT_IOC_ENABLE, perf.PERF_IOC_FLAG_GROUP),
                         (perf.PERF_EVENT_IOC_DISABLE, perf.PERF_IOC_FLAG_GROUP)]
    assert {kernel.opened[fd][0] for fd in leaders} == {100, 101}
    assert sorted(kernel.closed) == sorted(kernel.opened)  # every fd closed, once
    assert counters.source == "perf_event" and counters.reason == ""


def test_threads_are_summed_and_multiplexed_groups_scaled(monkeypatch):
    # values in group order: cycles, instructions, LLC loads, LLC misses
    reads = {100: (1000, 1000, [10, 20, 30, 4]),  # ran the whole time
             101: (2000, 1000, [5, 6, 7, 1]),  # multiplexed: on the PMU half the time, so counts double
             102: (0, 0, [0, 0, 0, 0])}  # never ran while enabled: contributes nothing, costs no figure
    FakeKernel(reads=reads).install(monkeypatch, tids=(100, 101, 102))
    _, counters = perf.measure(lambda: None)
    assert (counters.cycles, counters.instructions, counters.llc_loads, counters.llc_misses) == (20, 32, 44, 6)
    assert counters.ipc() == pytest.approx(32 / 20)
    assert counters.reason == ""


def test_a_group_never_scheduled_leaves_its_figures_missing(monkeypatch):
    reads = {100: (1000, 1000, [10, 20, 30, 4]), 101: (1000, 0, [0, 0, 0, 0])}
    FakeKernel(reads=reads).install(monkeypatch, tids=(100, 101))
    _, counters = perf.measure(lambda: None)
    assert (counters.cycles, counters.instructions, counters.llc_loads, counters.llc_misses) == (None,) * 4
    assert "multiplexed" in counters.reason


def test_llc_refused_still_reports_cycles_and_instructions(monkeypatch):
    refuse = {"llc_loads": errno.ENOENT, "llc_misses": errno.ENOENT}
    reads = {100: (1000, 1000, [300, 600])}
    kernel = FakeKernel(refuse=refuse, reads=reads).install(monkeypatch)
    ok, reason = perf.counters_available()
    assert ok and "LLC loads, LLC load misses not counted" in reason
    _, counters = perf.measure(lambda: None)
    assert (counters.cycles, counters.instructions) == (300, 600)
    assert (counters.llc_loads, counters.llc_misses) == (None, None)
    assert counters.source == "perf_event" and counters.ipc() == pytest.approx(2.0)
    assert "LLC loads, LLC load misses not counted: hardware counters not supported" in counters.reason
    assert sorted(kernel.closed) == sorted(kernel.opened)


def test_cycles_refused_makes_instructions_the_leader(monkeypatch):
    kernel = FakeKernel(refuse={"cycles": errno.EOPNOTSUPP}, reads={100: (10, 10, [7, 8, 9])}).install(monkeypatch)
    _, counters = perf.measure(lambda: None)
    assert (counters.cycles, counters.instructions, counters.llc_loads, counters.llc_misses) == (None, 7, 8, 9)
    assert [kernel.opened[fd][1] for fd in kernel.leaders()] == ["instructions"]
    assert counters.reason.startswith("cycles not counted")


def test_a_thread_gone_before_its_group_opened_is_skipped(monkeypatch):
    kernel = FakeKernel(reads={100: (5, 5, [1, 2, 3, 4])}, vanished={101}).install(monkeypatch, tids=(100, 101))
    _, counters = perf.measure(lambda: None)
    assert (counters.cycles, counters.instructions, counters.llc_loads, counters.llc_misses) == (1, 2, 3, 4)
    assert counters.reason == ""
    assert {o[0] for o in kernel.opened.values()} == {100}


def test_fds_are_closed_when_fn_raises(monkeypatch):
    kernel = FakeKernel().install(monkeypatch, tids=(100, 101))

    def boom():
        raise RuntimeError("inside")

    with pytest.raises(RuntimeError, match="inside"):
        perf.measure(boom)
    assert len(kernel.opened) == 8 and sorted(kernel.closed) == sorted(kernel.opened)
    assert kernel.enabled_leaders == set()


# ---- the real kernel, software events ----------------------------------------------------------------------------

PERF_TYPE_SOFTWARE = 1
SOFTWARE_EVENTS = (  # stand-ins in the four slots; task-clock (ns on the CPU) leads
    perf.Event("cycles", "task clock", PERF_TYPE_SOFTWARE, 1),
    perf.Event("instructions", "page faults", PERF_TYPE_SOFTWARE, 2),
    perf.Event("llc_loads", "cpu clock", PERF_TYPE_SOFTWARE, 0),
    perf.Event("llc_misses", "context switches", PERF_TYPE_SOFTWARE, 3),
)


@pytest.fixture
def software_events(monkeypatch):
    """The real syscall with software events, or a skip saying why the kernel refuses them."""
    monkeypatch.setattr(perf, "EVENTS", SOFTWARE_EVENTS)
    ok, reason = perf.counters_available()
    if not ok:
        pytest.skip(f"software perf events unavailable: {reason}")
    perf.counters_available.cache_clear()
    opened = []
    real_open = perf._perf_event_open

    def recording_open(attr, pid, cpu, group_fd, flags):
        fd = real_open(attr, pid, cpu, group_fd, flags)
        opened.append((pid, fd))
        return fd

    monkeypatch.setattr(perf, "_perf_event_open", recording_open)
    return opened


def _spin(stop: threading.Event) -> None:
    while not stop.is_set():
        pass


def test_real_syscall_counts_every_existing_thread(software_events):
    stop = threading.Event()
    worker = threading.Thread(target=_spin, args=(stop,))
    worker.start()
    try:
        time.sleep(0.05)
        _, counters = perf.measure(lambda: time.sleep(0.3))  # this thread sleeps; the worker spins
    finally:
        stop.set()
        worker.join()
    assert worker.native_id in {pid for pid, _ in software_events}
    assert counters.source == "perf_event" and counters.reason == ""
    task_clock_ns = counters.cycles
    assert task_clock_ns is not None and task_clock_ns > 0.05e9, "the spinning thread's CPU time was not counted"
    assert task_clock_ns < 10e9
    for fd in (fd for _, fd in software_events):  # every fd closed
        with pytest.raises(OSError):
            os.fstat(fd)


def test_real_syscall_does_not_count_threads_created_during_fn(software_events):
    stop = threading.Event()
    made = {}

    def fn():
        worker = threading.Thread(target=_spin, args=(stop,))
        worker.start()
        made["tid"] = worker.native_id
        time.sleep(0.2)
        stop.set()
        worker.join()
        return "ran"

    result, counters = perf.measure(fn)
    assert result == "ran" and counters.source == "perf_event"
    assert threading.get_native_id() in {pid for pid, _ in software_events}
    assert made["tid"] not in {pid for pid, _ in software_events}


def test_a_failed_group_read_is_a_reason(monkeypatch):
    kernel = FakeKernel().install(monkeypatch)

    def short_read(fd, size):
        return b"\0" * 8

    monkeypatch.setattr(perf, "_read", short_read)
    result, counters = perf.measure(lambda: "kept")
    assert result == "kept" and counters == Counters.missing(counters.reason)
    assert "thread 100 failed" in counters.reason
    assert sorted(kernel.closed) == sorted(kernel.opened)
