"""Named attention workloads (host/workloads.toml): a model's attention shape in one phase (prefill, decode, ...:
PHASES), as an AttentionProblem, for `python -m host.compare --workload NAME` and `--workload list`.

Each model carries its published head count, K/V heads, head dimension and masking with the configuration file it
comes from; each workload a context length (seq), queries per head (q_len: the context for prefill, 1 for a decode
step) and a batch. The table is shipped with the package and checked when read: a malformed entry is a SpecError
naming it.
"""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from host.errors import SpecError
from host.problem import AttentionProblem

TABLE = Path(__file__).with_name("workloads.toml")


@dataclass(frozen=True)
class Workload:
    """One named workload: its model's shape and source, and the phase's context, queries and batch."""

    name: str
    model: str  # the model's title, e.g. "Llama 3 8B"
    source: str  # where the model's shape comes from
    problem: AttentionProblem  # float32; a target runs it in its own dtype

    @property
    def phase(self) -> str:
        """The phase the problem's shape is (PHASES says what each name means): 'prefill' or, for an encoder,
        'encode' (every position a query, q_len = seq); 'decode' (one new query against the KV cache); 'chunked
        prefill' (1 < q_len < seq, causal: a block of new queries against the cache, as a prefill split into chunks
        or a step of multi-token decode computes); 'cross' (1 < q_len < seq without the mask: queries against another
        sequence's keys)."""
        p = self.problem
        if p.queries == p.seq:
            return "prefill" if p.causal else "encode"
        if p.queries == 1:
            return "decode"
        return "chunked prefill" if p.causal else "cross"

    def line(self) -> str:
        """The workload as `--workload list` prints it."""
        p = self.problem
        return (f"{self.name:<20} {self.model:<20} {self.phase:<15} B{p.batch:<3} H{p.heads}/{p.kv_head_count:<3} "
                f"N{p.seq:<6} q_len {p.queries:<6} d{p.dim} {'causal' if p.causal else 'non-causal'}")


#: What each name of Workload.phase means (the shape alone decides it: q_len against seq, and the mask).
PHASES = {
    "prefill": "every position of a causal model's context a query (q_len = seq): compute-bound",
    "encode": "an encoder's one pass, every position a query, no mask (q_len = seq)",
    "decode": "one new query per sequence against its KV cache of seq keys (q_len = 1): memory-bound",
    "chunked prefill": "1 < q_len < seq new queries of a causal model against its KV cache (the last q_len positions "
                       "of seq): a prefill split into chunks, or a step of multi-token (speculative) decode",
    "cross": "1 < q_len < seq queries against seq keys without the mask (cross-attention's shape)",
}


def load(path: Path = TABLE) -> dict[str, Workload]:
    """Every workload of the table, by name, in the table's order."""
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(f"{path.name}: {exc}") from None
    models, workloads = table.get("model", {}), table.get("workload", {})
    out = {}
    for name, entry in workloads.items():
        try:
            model = models[entry["model"]]
            problem = AttentionProblem(batch=entry["batch"], heads=model["heads"], kv_heads=model["kv_heads"],
                                       seq=entry["seq"], q_len=entry.get("q_len"), dim=model["dim"],
                                       causal=model["causal"])
            out[name] = Workload(name, model["title"], model["source"], problem)
        except KeyError as exc:
            raise SpecError(f"{path.name}: workload {name!r} lacks {exc}") from None
        except SpecError as exc:
            raise SpecError(f"{path.name}: workload {name!r}: {exc}") from None
    return out


def named(names: list[str], path: Path = TABLE) -> list[Workload]:
    """The workloads asked for, in that order; a SpecError naming an unknown one and the known names."""
    table = load(path)
    unknown = [name for name in names if name not in table]
    if unknown:
        raise SpecError(f"--workload: unknown workload {unknown[0]!r}; allowed: {', '.join(table)} (or list)")
    return [table[name] for name in names]


def check_list_alone(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """`--workload list` prints the table and runs nothing: refuse, in one line, an option typed beside it (as
    argparse reads it: abbreviated, with `=`, at its default too), which would be dropped unread (an unknown target,
    a shape option)."""
    from host.cli_common import typed

    actions = [action for action in parser._actions  # argparse keeps its options there
               if action.option_strings and action.dest not in ("help", "workload")]
    named = typed(parser, argv, [action.dest for action in actions])
    others = [action.option_strings[-1] for action in actions if action.dest in named]
    if others:
        raise SpecError(f"--workload list prints the table and runs nothing; drop {', '.join(others)}")


def listing(path: Path = TABLE) -> str:
    """The table as `--workload list` prints it: a line per workload, then each model's source."""
    table = load(path)
    lines = [workload.line() for workload in table.values()]
    sources = {workload.model: workload.source for workload in table.values()}
    lines += ["", "sources:"] + [f"  {model}: {source}" for model, source in sources.items()]
    return "\n".join(lines)
