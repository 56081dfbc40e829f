"""Shared test setup: `slow` on every test that starts a process (a twin, a cluster, a `python -m` run, a synthesis),
found from what its code and its fixtures call; hardware markers that skip with the reason the capability is
missing; and the board twin, started as production starts it (mcu/twin_process.py)."""

from __future__ import annotations

import inspect
import signal
import types

import pytest

from helpers import board_missing, gpu_missing
from mcu.twin_process import start_twin

pytest_plugins = ["pytester"]  # for the tests that run pytest on test files of their own (tests/host/test_markers.py)

#: Names whose use starts a process: a test whose code, or a fixture or a test-side function it calls, names one
#: is slow (a Python process alone costs about a second on the 2-core machine, the imports of the tree included).
PROCESS_NAMES = {
    "run_module": "runs `python -m` in a child process",
    "executable": "starts a Python child process (sys.executable)",
    "start_twin": "starts a twin",
    "TwinProcess": "starts a twin",
    "TwinWithOptions": "starts a twin",
    "synthesize": "runs yosys (a synthesis)",
    "run_yosys": "runs yosys (a synthesis)",
}
#: Words in a test's code that start processes: arguments of an in-process sweep, a compiler a test runs.
PROCESS_ARGUMENTS = {
    "--sim": "sweeps on the twin (a twin process)",
    "--cluster": "sweeps on a Dask cluster (scheduler and worker processes)",
    "nvcc": "compiles CUDA with nvcc",
}
#: The fixtures below that start a twin, for a fixture that requests one by name (request.getfixturevalue).
TWIN_FIXTURES = {"twin", "fresh_twin"}


def constants(values: tuple):
    """A code object's constants, with the tuples the compiler folded (an argument list) opened."""
    for value in values:
        if isinstance(value, (tuple, frozenset)):
            yield from constants(tuple(value))
        else:
            yield value


def starts_a_process(code: types.CodeType, scope: dict, tests: tuple[str, ...], seen: set) -> str:
    """Why `code` starts a process, directly or through a function of the tests (a file under one of the folders
    `tests`) that it calls ("" when it does not)."""
    if code in seen:
        return ""
    seen.add(code)
    for name in code.co_names:
        if name in PROCESS_NAMES:
            return f"{code.co_name}: {PROCESS_NAMES[name]}"
    for constant in constants(code.co_consts):
        if isinstance(constant, str) and constant in PROCESS_ARGUMENTS:
            return f"{code.co_name}: {PROCESS_ARGUMENTS[constant]}"
        if isinstance(constant, str) and constant in TWIN_FIXTURES and "getfixturevalue" in code.co_names:
            return f"{code.co_name}: requests the {constant} fixture (a twin)"
        if isinstance(constant, types.CodeType) and (why := starts_a_process(constant, scope, tests, seen)):
            return why
    for name in code.co_names:
        value = scope.get(name)
        functions = vars(value).values() if isinstance(value, type) else (value,)
        for function in functions:
            function = inspect.unwrap(function) if callable(function) else function
            if isinstance(function, types.FunctionType) and function.__code__.co_filename.startswith(tests) and \
                    (why := starts_a_process(function.__code__, function.__globals__, tests, seen)):
                return why
    return ""


def slow_reason(item: pytest.Item) -> str:
    if not isinstance(item, pytest.Function):
        return ""
    seen: set = set()
    # the tests' own code is what lies under testpaths; the code under test is not followed
    tests = tuple(str(item.config.rootpath / path) for path in item.config.getini("testpaths") or ["."])
    function = inspect.unwrap(item.function)
    why = starts_a_process(function.__code__, function.__globals__, tests, seen)
    # pytest keeps no public record of an item's fixture functions; _fixtureinfo is the one its own fixtures use
    for name, definitions in item._fixtureinfo.name2fixturedefs.items():
        for definition in definitions:
            fixture = inspect.unwrap(definition.func)
            if not why and isinstance(fixture, types.FunctionType):
                why = starts_a_process(fixture.__code__, fixture.__globals__, tests, seen)
                why = why and f"fixture {name}: {why}"
    return why


@pytest.hookimpl(tryfirst=True)  # before -m selects: `slow` must be on the items it reads
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reasons = {}
    for item in items:
        if item.get_closest_marker("slow") is None and slow_reason(item):
            item.add_marker(pytest.mark.slow)
        for marker, probe in (("gpu", gpu_missing), ("board", board_missing)):
            if item.get_closest_marker(marker) is not None:  # a marker, not a parameter id that happens to match
                if marker not in reasons:
                    reasons[marker] = probe()
                if reasons[marker]:
                    item.add_marker(pytest.mark.skip(reason=reasons[marker]))


def skip_without_a_twin() -> None:
    from helpers.twin import twin_missing

    if twin_missing():
        pytest.skip(twin_missing())


@pytest.fixture(scope="session")
def twin():
    """The session's twin (`twin.port` its pty, `twin.root` its filesystem), for tests that use it as a board and
    leave it running: started once, as production starts it, and stopped at the end."""
    skip_without_a_twin()
    with start_twin() as started:
        yield started


@pytest.fixture
def fresh_twin():
    """A twin of the test's own, for tests that kill it, deploy to a clean board or need one nobody deployed to."""
    skip_without_a_twin()
    with start_twin() as started:
        yield started


@pytest.fixture
def keep_signals():
    """A tool run in this process (host.compare, kernels.sweep) sets its SIGINT and SIGTERM handlers; put pytest's
    back after the test."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)
