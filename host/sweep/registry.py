"""The targets host.compare can run: the registry by name, and what the sweep asks of each target module before
measuring (its option group, its typed settings, whether it can run here, its session), and what a cluster worker
needs from each (`cluster_needs`: its device options and resource). host/target_api.py says what a target module
exposes (`TargetModule`, `ClusterNeeds`); adding a target is one line in `TARGETS`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
from dataclasses import dataclass
from types import ModuleType

from host.errors import LinkError, SpecError, UnavailableError
from host.target_api import ClusterNeeds

#: target name → the module that implements it (host/target_api.py says what such a module exposes). Registering a
#: target here is the only edit a new one needs: its options, settings and session come from its module.
TARGETS = {
    "cpu": "host.cpu.target",
    "gpu": "kernels.target",
    "mcu": "mcu.target",
    "asic": "codesign.target",
}


@dataclass(frozen=True)
class TargetEntry:
    """A registered target: its module (None when it cannot be imported, with the reason) and the option names
    (argparse dests) it added to the parser."""

    name: str
    module: ModuleType | None
    reason: str
    dests: tuple[str, ...]


def load_targets(parser: argparse.ArgumentParser) -> dict[str, TargetEntry]:
    """Import every registered target (cheap: heavy imports are inside their functions) and let each add its own
    option group to the parser."""
    entries = {}
    for name, path in TARGETS.items():
        try:
            module = importlib.import_module(path)
        except ImportError as exc:
            entries[name] = TargetEntry(name, None, f"cannot import {path}: {exc}", ())
            continue
        group = parser.add_argument_group(f"{name} target options")
        module.add_options(group)
        entries[name] = TargetEntry(name, module, "", tuple(action.dest for action in group._group_actions))
    return entries


def select_targets(requested: tuple[str, ...] | None, entries: dict[str, TargetEntry],
                   settings: dict[str, object]) -> tuple[dict[str, ModuleType], dict[str, str]]:
    """The requested targets (default: all); return ({name: module} available, {name: reason} unavailable)."""
    names = requested or tuple(TARGETS)
    unknown = [name for name in names if name not in TARGETS]
    if unknown:
        raise SpecError(f"--targets: unknown target {unknown[0]!r}; allowed: {', '.join(TARGETS)}")
    ready, missing = {}, {}
    for name in names:
        entry = entries[name]
        if entry.module is None:
            missing[name] = entry.reason
            continue
        ok, reason = entry.module.available(settings[name])
        if ok:
            ready[name] = entry.module
        else:
            missing[name] = reason
    return ready, missing


def target_settings(args: argparse.Namespace, entries: dict[str, TargetEntry]) -> dict[str, object]:
    """Each importable target's typed settings from the parsed arguments (a bad option raises SpecError)."""
    return {name: entry.module.settings(args) for name, entry in entries.items() if entry.module is not None}


def unused_options(given_dests: frozenset[str], entries: dict[str, TargetEntry],
                   selected: tuple[str, ...] | None) -> list[str]:
    """One warning per target whose options were on the command line (`given_dests`, at any value:
    host.cli_common.typed) while --targets leaves it out."""
    if not selected:
        return []
    warnings = []
    for name, entry in entries.items():
        given = [dest for dest in entry.dests if dest in given_dests]
        if given and name not in selected:
            flags = ", ".join("--" + dest.replace("_", "-") for dest in given)
            verb = "applies" if len(given) == 1 else "apply"
            warnings.append(f"{flags} {verb} to the {name} target, which --targets leaves out")
    return warnings


def open_sessions(settings: dict[str, object], targets: dict[str, ModuleType], unavailable: dict[str, str],
                  stack: contextlib.ExitStack) -> dict[str, object]:
    """Connect the targets that hold a device for the whole sweep (open_session); one that cannot connect moves
    from `targets` to `unavailable` with the reason."""
    sessions = {}
    for name in list(targets):
        opener = getattr(targets[name], "open_session", None)
        if opener is None:
            continue
        try:
            sessions[name] = stack.enter_context(opener(settings[name]))
        except (UnavailableError, LinkError) as exc:
            unavailable[name] = str(exc)
            del targets[name]
    return sessions


def kernel_table(module: ModuleType, settings: object) -> list[tuple[str, str]]:
    """(kernel name, dtype) pairs a target runs under its settings: its `kernels(settings)` where its options choose
    them (the asic target's datapaths, the GPU target's dtypes; a dict or pairs, so one kernel may run in several
    dtypes), else its fixed KERNELS."""
    named = getattr(module, "kernels", None)
    table = named(settings) if callable(named) else module.KERNELS
    return list(table.items()) if isinstance(table, dict) else list(table)


def check_kernels(requested: tuple[str, ...] | None, entries: dict[str, TargetEntry],
                  settings: dict[str, object], targets: tuple[str, ...] | None = None) -> list[str]:
    """Refuse, before any target starts, a --kernels name that none of the selected targets (default: all) runs
    with these options, listing those that they do run; a warning for each target --targets names that --kernels
    leaves without a kernel (it runs no row)."""
    chosen = [name for name in (targets or tuple(entries)) if name in entries and entries[name].module]
    tables = {name: {kernel for kernel, _ in kernel_table(entries[name].module, settings.get(name))} for name in chosen}
    known = sorted(set().union(*tables.values()))
    unknown = [kernel for kernel in requested or () if kernel not in known]
    if unknown:
        scope = f"targets {', '.join(chosen)}" if targets else "the targets"
        raise SpecError(f"--kernels: {scope} run no kernel {unknown[0]!r} with these options (a dtype or datapath "
                        f"option may exclude it); allowed: {', '.join(known) or 'none'}")
    if not (requested and targets):
        return []
    return [f"--kernels {','.join(requested)} leaves the {name} target no kernel, so it runs no row (its kernels: "
            f"{', '.join(sorted(table)) or 'none'})" for name, table in tables.items() if not table & set(requested)]


def target_module(name: str) -> ModuleType:
    """A registered target's module, imported by name (cheap: heavy imports are inside its functions)."""
    return importlib.import_module(TARGETS[name])


def cluster_needs() -> dict[str, ClusterNeeds]:
    """{target: what a cluster worker needs from it (its CLUSTER)}, for the registered targets whose rows need a
    device of a worker's own; the others run on any worker. A target that cannot be imported here is left out (no
    worker on this machine can own its device)."""
    found = {}
    for name in TARGETS:
        try:
            needs = target_module(name).CLUSTER
        except ImportError:
            continue
        if needs is not None:
            found[name] = needs
    return found
