"""Command-line options that describe a `Datapath` (the array and its units, and issue 33's --arrays, --schedule and
--divider), shared by `python -m codesign run` (one datapath) and the asic target of host.compare (prefixed --asic-…,
where the array, dataflow and accumulator width take lists: each combination is one kernel of the sweep);
`--causal {0,1,both}`, in host.compare's form, for every codesign command that takes a causal mask; and `--q-len`,
`--kv-heads` and `--workload NAME|list` (host/workloads.py's table and lookup) for the commands that take a problem
(`run`, `explore`)."""

from __future__ import annotations

import argparse
import decimal
import itertools
from collections.abc import Sequence

from codesign.datapath import (ACC_BITS_MAX, ACC_BITS_MIN, ARRAY_MAX, ARRAYS_MAX, DATAFLOWS, DIVIDERS, OVERFLOWS,
                               SCHEDULES, Datapath, array_shape)
from host.cli_common import integer, int_list, name_list, real, typed
from host.errors import SpecError
from host.problem import LIMITS, AttentionProblem
from host.q15 import BC

DEFAULT = Datapath()
#: The clock's range in Hz (Datapath checks the same).
CLOCK_HZ = (1_000_000, 10_000_000_000)


def hertz(text: str) -> int:
    """An argparse type: a clock in whole Hz within CLOCK_HZ, written as an integer or in scientific notation (1e9,
    1.5e9); a fraction of a Hz (1000000.5) is refused rather than rounded."""
    low, high = CLOCK_HZ
    allowed = f"allowed: whole Hz in {low:g}..{high:g}"
    try:
        value = decimal.Decimal(text.strip())  # exact: a float would read 1000000000.0000001 as 1e9
    except decimal.InvalidOperation:
        raise argparse.ArgumentTypeError(f"clock={text!r} is not a number; {allowed}") from None
    if not value.is_finite() or not low <= value <= high:
        raise argparse.ArgumentTypeError(f"clock={text.strip()} is out of range; {allowed}")
    if value != value.to_integral_value():
        raise argparse.ArgumentTypeError(f"clock={text.strip()} is not a whole number of Hz; {allowed}")
    return int(value)


def _array_list(text: str) -> tuple[tuple[int, int], ...]:
    items = text.split(",")
    if not text.strip() or any(not item.strip() for item in items):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of RxC arrays (1..{ARRAY_MAX})")
    return tuple(dict.fromkeys(array_shape(item.strip()) for item in items))


def _choices(name: str, allowed: tuple[str, ...], many: bool):
    def parse(text: str):
        values = name_list(text) if many else (text.strip(),)
        for value in values:
            if value not in allowed:
                raise argparse.ArgumentTypeError(f"{name}={value!r} is unknown; allowed: {', '.join(allowed)}")
        return values if many else values[0]
    return parse


def add_datapath_options(group: argparse._ArgumentGroup, prefix: str = "", lists: bool = False,
                         mapped: bool = True) -> None:
    """The datapath's options on `group`, each named --{prefix}…; with `lists`, array, dataflow and acc-bits take
    comma-separated lists; with `mapped` (for a command that runs the cycle model) also --arrays, --schedule and
    --divider (`datapaths` takes their defaults where they are absent)."""
    d = DEFAULT
    some = " (comma-separated list)" if lists else ""
    group.add_argument(f"--{prefix}array", type=_array_list if lists else array_shape,
                       default=((d.rows, d.cols),) if lists else (d.rows, d.cols),
                       help=f"systolic array RxC: R query rows per tile, C keys per QKᵀ fold (the key block is the "
                            f"contract's Bc = {BC}){some}; "
                            f"default {d.rows}x{d.cols}")
    group.add_argument(f"--{prefix}dataflow", type=_choices("dataflow", DATAFLOWS, lists),
                       default=(d.dataflow,) if lists else d.dataflow,
                       help=f"output-, weight- or input-stationary: {', '.join(DATAFLOWS)}{some}; default {d.dataflow}")
    group.add_argument(f"--{prefix}acc-bits", type=(int_list if lists else integer)("acc-bits", ACC_BITS_MIN,
                                                                                     ACC_BITS_MAX),
                       default=(d.acc_bits,) if lists else d.acc_bits,
                       help=f"the array's accumulator width in bits{some}; default {d.acc_bits}")
    group.add_argument(f"--{prefix}overflow", type=_choices("overflow", OVERFLOWS, False), default=d.overflow,
                       help=f"accumulators past their range: {' or '.join(OVERFLOWS)}; default {d.overflow}")
    group.add_argument(f"--{prefix}clock", type=hertz, default=d.clock_hz,
                       help=f"clock in Hz (e.g. 1e9); default {d.clock_hz:g}")
    group.add_argument(f"--{prefix}exp-lanes", type=integer("exp-lanes", 1, 4096), default=d.exp_lanes,
                       help=f"EXP2 evaluations per cycle in the softmax unit; default {d.exp_lanes}")
    group.add_argument(f"--{prefix}dividers", type=integer("dividers", 1, 4096), default=d.dividers,
                       help=f"dividers for the final normalisation; default {d.dividers}")
    group.add_argument(f"--{prefix}div-latency", type=integer("div-latency", 1, 256), default=d.div_latency,
                       help=f"cycles per division of one divider; default {d.div_latency}")
    group.add_argument(f"--{prefix}buffers-kb", type=_buffers, default=_buffer_sizes(d),
                       help="on-chip Q,K,V,O buffer sizes in KB; default "
                            + ",".join(f"{size:g}" for size in _buffer_sizes(d)))
    group.add_argument(f"--{prefix}dram-bw", type=real("dram-bw", 0.001, 65536),
                       default=d.dram_bytes_per_cycle, help=f"DRAM bytes per cycle; default {d.dram_bytes_per_cycle:g}")
    if not mapped:
        return
    group.add_argument(f"--{prefix}arrays", type=integer("arrays", 1, ARRAYS_MAX), default=d.arrays,
                       help="copies of the whole datapath (array, softmax unit, dividers, buffers) sharing the DRAM "
                            f"interface, the mapper spreading heads or query rows over them; default {d.arrays}")
    group.add_argument(f"--{prefix}schedule", type=_choices("schedule", SCHEDULES, False), default=d.schedule,
                       help=f"{' or '.join(SCHEDULES)}: folds back to back with query tile R (the RTL's), or "
                            "folds pipelined, heads pipelined and the query tile chosen by the mapper; default "
                            f"{d.schedule}")
    group.add_argument(f"--{prefix}divider", type=_choices("divider", DIVIDERS, False), default=d.divider,
                       help=f"{', '.join(DIVIDERS)}: a divider takes one division per div-latency cycles, or "
                            "one a cycle, or each lane one reciprocal a row (34 cycles) and then one multiply a "
                            f"cycle (codesign/reciprocal.py; the same quotients in every case); default {d.divider}")


#: --causal's values, as host.compare spells them, and the masks each stands for.
CAUSAL = {"0": (False,), "1": (True,), "both": (False, True)}


def add_causal_option(group, default: str = "0") -> None:
    """--causal 0|1|both on `group` (parsed by `causal_masks`)."""
    group.add_argument("--causal", choices=tuple(CAUSAL), default=default,
                       help=f"causal masking: 0 (none), 1 or both (each in turn); default {default}")


def causal_masks(value: str) -> tuple[bool, ...]:
    """The masks a --causal value stands for: (False,), (True,) or (False, True)."""
    return CAUSAL[value]


#: The options a named workload sets (flag, argparse dest): refused beside --workload, as host.compare does.
SHAPE_OPTIONS = (("--seq", "seq"), ("--dim", "dim"), ("--heads", "heads"), ("--batch", "batch"), ("--q-len", "q_len"),
                 ("--kv-heads", "kv_heads"), ("--causal", "causal"))


def add_shape_options(group) -> None:
    """--q-len, --kv-heads, --causal and --workload on `group` (beside the command's --seq, --dim, --heads, --batch;
    parsed by `problems_of`)."""
    group.add_argument("--q-len", type=integer("q-len", *LIMITS["seq"]), default=None,
                       help="queries per head against the seq keys of a KV cache, the array's M (1: one decode step; "
                            "default: seq, self-attention)")
    group.add_argument("--kv-heads", type=integer("kv-heads", *LIMITS["heads"]), default=None,
                       help="K/V heads, dividing --heads: grouped-query attention (default: --heads)")
    add_causal_option(group)
    group.add_argument("--workload", metavar="NAME", default=None,
                       help="a named workload's shape (a model's heads, K/V heads, head dim and masking at a stated "
                            "context, q_len and batch: host/workloads.toml) in place of the shape options; 'list' "
                            "prints them")


def listed(args: argparse.Namespace, parser: argparse.ArgumentParser, argv: Sequence[str]) -> bool:
    """Print the workload table and say so when the command is `--workload list` (refused with anything beside it)."""
    if args.workload is None or args.workload.strip() != "list":
        return False
    from host.workloads import check_list_alone, listing

    check_list_alone(parser, argv)
    print(listing())
    return True


def problems_of(args: argparse.Namespace, parser: argparse.ArgumentParser, argv: Sequence[str],
                seed: int = 0) -> list[AttentionProblem]:
    """The Q15 problems the options describe: a --workload's (host/workloads.py's lookup, whose error names the known
    workloads; a shape option typed beside it is refused at any value, its default too), or the shape options' for
    each --causal mask."""
    if args.workload is not None:
        from host.workloads import named

        typed_out = typed(parser, argv, [dest for _, dest in SHAPE_OPTIONS])
        given = [flag for flag, dest in SHAPE_OPTIONS if dest in typed_out]
        if given:
            raise SpecError(f"--workload sets the problem's shape; drop {', '.join(given)} (or drop --workload)")
        names = [name.strip() for name in args.workload.split(",") if name.strip()]
        if len(names) > 1:
            raise SpecError(f"--workload {args.workload}: this command takes one workload; allowed: one name of "
                            "--workload list (run each in turn, or host.compare --workload A,B --targets asic)")
        (workload,) = named(names)
        return [workload.problem.with_(dtype="q15", seed=seed)]
    if args.q_len is not None and args.q_len > args.seq:
        raise SpecError(f"--q-len {args.q_len} with --seq {args.seq}: q_len must be at most seq (queries against a KV "
                        f"cache of seq keys); allowed: 1..{args.seq}")
    if args.kv_heads is not None and (args.kv_heads > args.heads or args.heads % args.kv_heads):
        raise SpecError(f"--kv-heads {args.kv_heads} with --heads {args.heads}: kv_heads must divide heads "
                        "(grouped-query attention)")
    return [AttentionProblem(batch=args.batch, heads=args.heads, seq=args.seq, dim=args.dim, causal=causal,
                             q_len=args.q_len, kv_heads=args.kv_heads, dtype="q15", seed=seed)
            for causal in causal_masks(args.causal)]


def _buffer_sizes(d: Datapath) -> tuple[float, float, float, float]:
    return d.q_buffer_kb, d.k_buffer_kb, d.v_buffer_kb, d.o_buffer_kb


def _buffers(text: str) -> tuple[float, ...]:
    parts = text.split(",")
    if len(parts) != 4:
        raise argparse.ArgumentTypeError(f"buffers-kb {text!r} is not four sizes Q,K,V,O in KB (e.g. 32,64,64,128)")
    parse = real("buffer KB", 0.0625, 1 << 20)
    return tuple(parse(part.strip()) for part in parts)


def datapaths(args: argparse.Namespace, prefix: str = "") -> tuple[Datapath, ...]:
    """Every Datapath the parsed options describe (one per array × dataflow × acc-bits with list options)."""
    def get(name: str):
        dest = (prefix + name).replace("-", "_")
        if name in ("arrays", "schedule", "divider") and not hasattr(args, dest):  # a command without `mapped`
            return getattr(DEFAULT, name)
        return getattr(args, dest)

    arrays = get("array") if isinstance(get("array")[0], tuple) else (get("array"),)  # a list, or one RxC pair
    flows = get("dataflow") if isinstance(get("dataflow"), tuple) else (get("dataflow"),)
    widths = get("acc-bits") if isinstance(get("acc-bits"), tuple) else (get("acc-bits"),)
    q_kb, k_kb, v_kb, o_kb = get("buffers-kb")
    return tuple(Datapath(rows=rows, cols=cols, dataflow=flow, acc_bits=bits, overflow=get("overflow"),
                          exp_lanes=get("exp-lanes"), dividers=get("dividers"), div_latency=get("div-latency"),
                          q_buffer_kb=q_kb, k_buffer_kb=k_kb, v_buffer_kb=v_kb, o_buffer_kb=o_kb,
                          dram_bytes_per_cycle=get("dram-bw"), clock_hz=get("clock"), arrays=get("arrays"),
                          schedule=get("schedule"), divider=get("divider"))
                 for (rows, cols), flow, bits in itertools.product(arrays, flows, widths))
