"""The parameters of one ASIC attention datapath: what an architect chooses, validated on construction.

A `Datapath` is an R×C systolic array of Q15 multiply-accumulate cells (one dataflow, one accumulator width and overflow
rule) with a score unit, a softmax unit of E exponent lanes, a bank of dividers, four on-chip buffers and a DRAM
interface, at one clock; `arrays` copies of all of it (each with its own buffers, softmax unit and dividers) share the
DRAM interface. Under the serial schedule its rows are the query tile (Br = R); the key block is the contract's
(host.q15.BC, the same for every target), which a block's QKᵀ folds over the C columns, so every shape gives the Q15
contract's bits at that Bc (docs/codesign.md "Key block and array width"). codesign/bits.py computes those bits,
codesign/cycles.py the cycles and the traffic; both take this object and the key block.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields

from host.errors import SpecError
from host.checks import check_int, check_real
from host.q15 import MODEL_BC_MAX

DATAFLOWS = ("os", "ws", "is")
#: serial: today's schedule, which the RTL runs (folds back to back, rows the query tile, heads one after another);
#: overlap: folds pipelined (codesign/gemm.py `overlapped`), rows and columns and the query tile chosen by the mapper
#: (codesign/mapper.py), heads pipelined one into the next (docs/codesign.md "Schedules and the mapper").
SCHEDULES = ("serial", "overlap")
#: iterative: a divider takes div_latency cycles per division; pipelined: it accepts one division a cycle and each
#: comes out div_latency cycles later (the same quotient bits: codesign/bits.py models the function, not the timing);
#: reciprocal: each divider lane computes one row's reciprocal (codesign/reciprocal.py) in RECIPROCAL_LATENCY cycles,
#: then multiplies one element by it a cycle, each out PRODUCT_LATENCY cycles later (div_latency does not apply).
DIVIDERS = ("iterative", "pipelined", "reciprocal")
ARRAYS_MAX = 64
OVERFLOWS = ("wrap", "saturate")
ARRAY_MAX = MODEL_BC_MAX  # rows and columns: 1..256
ACC_BITS_MIN, ACC_BITS_MAX = 16, 64
#: Width of the running output accumulators A (signed): |A| ≤ 2¹⁵·l + 2²⁹ < 2⁴⁶ for every N ≤ 32768 (docs/q15.md §6),
#: so 48 bits hold every head exactly; they wrap or saturate as the array's accumulators do.
OUTPUT_ACC_BITS = 48
#: Bytes one running output accumulator occupies in the O buffer (48 bits), and the per-row state m, l (32 bits each).
OUTPUT_ACC_BYTES = 6
ROW_STATE_BYTES = 8
#: Pipeline depths in cycles (latency only: each stage accepts a new element per lane per cycle).
SCORE_LATENCY = 3  # multiply by M, add the rounding half and shift, saturate to 32 bits
EXP_LATENCY = 4  # table read, interpolation multiply, rounding shift, cap at 32767
RESCALE_LATENCY = 2  # multiply by α, rounding shift
#: A reciprocal lane's row reciprocal m − 1 = ⌊2^(31+ℓ) / l'⌋ lies in [2³¹, 2³²): normalise l and find ℓ (1 cycle),
#: 32 quotient bits by restoring division (one a cycle), add one (1 cycle).
RECIPROCAL_LATENCY = 1 + 32 + 1
#: One element's quotient on a reciprocal lane: align A by g − s and add ⌊l'/2⌋; the 31 × 33-bit multiply by m;
#: shift by 31 + ℓ, restore the sign and clamp to int16.
PRODUCT_LATENCY = 3


def _exact(value: float) -> str:
    """A number as a name carries it: short (%g) where that is the number itself, else every digit (repr), so
    that two datapaths differing in the sixth significant figure never share a name."""
    short = f"{value:g}"
    return short if float(short) == value else repr(float(value))


@dataclass(frozen=True)
class Datapath:
    """One operating point of the datapath. Sizes in KB are 1024 bytes; Q15 words are 2 bytes."""

    rows: int = 32  # R: query rows per tile (Br)
    cols: int = 32  # C: keys per QKᵀ fold, output columns per P·V fold
    dataflow: str = "os"
    acc_bits: int = 40  # the array's MAC accumulators, signed
    overflow: str = "wrap"  # what an accumulator does past its range: wrap (two's complement) or saturate
    exp_lanes: int = 16  # E: EXP2 evaluations (and max comparisons, rescale multiplies) per cycle
    dividers: int = 32
    #: cycles per division of one divider: the RTL divider's normalise, saturation check, 15 quotient bits, sign, clamp
    div_latency: int = 18
    q_buffer_kb: float = 32.0
    k_buffer_kb: float = 64.0
    v_buffer_kb: float = 64.0
    o_buffer_kb: float = 128.0
    dram_bytes_per_cycle: float = 32.0
    clock_hz: int = 1_000_000_000
    arrays: int = 1  # P: copies of the array with its softmax unit, dividers and buffers, sharing the DRAM interface
    schedule: str = "serial"  # one of SCHEDULES
    divider: str = "iterative"  # one of DIVIDERS

    def __post_init__(self) -> None:
        check_int("array rows", self.rows, 1, ARRAY_MAX)
        check_int("array cols", self.cols, 1, ARRAY_MAX)
        if self.dataflow not in DATAFLOWS:
            raise SpecError(f"dataflow={self.dataflow!r} is unknown; allowed: {', '.join(DATAFLOWS)}")
        check_int("acc_bits", self.acc_bits, ACC_BITS_MIN, ACC_BITS_MAX)
        if self.overflow not in OVERFLOWS:
            raise SpecError(f"overflow={self.overflow!r} is unknown; allowed: {', '.join(OVERFLOWS)}")
        check_int("exp_lanes", self.exp_lanes, 1, 4096)
        check_int("dividers", self.dividers, 1, 4096)
        check_int("div_latency", self.div_latency, 1, 256)
        for name in ("q_buffer_kb", "k_buffer_kb", "v_buffer_kb", "o_buffer_kb"):
            check_real(name, getattr(self, name), 0.0625, 1 << 20)
        check_real("dram_bytes_per_cycle", self.dram_bytes_per_cycle, 0.001, 65536)
        check_real("clock_hz", self.clock_hz, 1e6, 1e10)
        check_int("arrays", self.arrays, 1, ARRAYS_MAX)
        if self.schedule not in SCHEDULES:
            raise SpecError(f"schedule={self.schedule!r} is unknown; allowed: {', '.join(SCHEDULES)}")
        if self.divider not in DIVIDERS:
            raise SpecError(f"divider={self.divider!r} is unknown; allowed: {', '.join(DIVIDERS)}")
        if float(self.clock_hz) != int(self.clock_hz):
            raise SpecError(f"clock_hz={self.clock_hz!r} is not a whole number of Hz; allowed: 1e6..1e10 Hz")

    @property
    def name(self) -> str:
        """The short name rows carry as their kernel: array, dataflow, accumulator (s = saturating), then a tag for
        each other parameter that differs from its default, so that two different datapaths never share a name
        (e.g. sa32x32-os-acc40, sa16x16-ws-acc36s-e8-bw4-500MHz, sa64x64-os-acc40-p4-overlap-pdiv)."""
        saturating = "s" if self.overflow == "saturate" else ""
        name = f"sa{self.rows}x{self.cols}-{self.dataflow}-acc{self.acc_bits}{saturating}"
        changed = [f.name for f in fields(self) if getattr(self, f.name) != f.default]
        tags = []
        if "exp_lanes" in changed:
            tags.append(f"e{self.exp_lanes}")
        if "dividers" in changed or "div_latency" in changed:
            tags.append(f"div{self.dividers}x{self.div_latency}")
        buffers = ("q_buffer_kb", "k_buffer_kb", "v_buffer_kb", "o_buffer_kb")
        if any(name in changed for name in buffers):
            tags.append("buf" + "_".join(_exact(getattr(self, name)) for name in buffers))
        if "dram_bytes_per_cycle" in changed:
            tags.append(f"bw{_exact(self.dram_bytes_per_cycle)}")
        if "clock_hz" in changed:
            mhz = _exact(self.clock_hz / 1e6)
            exact = float(mhz) * 1e6 == self.clock_hz  # 2.5MHz as before; 1000000001 Hz is not "1000MHz"
            tags.append(f"{mhz}MHz" if exact else f"{int(self.clock_hz)}Hz")
        if "arrays" in changed:
            tags.append(f"p{self.arrays}")
        if "schedule" in changed:
            tags.append(self.schedule)
        if "divider" in changed:
            tags.append({"pipelined": "pdiv", "reciprocal": "rdiv"}[self.divider])
        return "-".join([name, *tags])

    def describe(self) -> str:
        """One line for a row's device field."""
        arrays = f"{self.arrays} x " if self.arrays > 1 else ""
        extra = "" if self.schedule == "serial" else f", {self.schedule} schedule"
        divider = "" if self.divider == "iterative" else f" {self.divider}"
        return (f"ASIC model: {arrays}{self.rows}x{self.cols} {self.dataflow} array, {self.acc_bits}-bit "
                f"{self.overflow} accumulators, {self.exp_lanes} exp lanes, {self.dividers}{divider} dividers, "
                f"{self.clock_hz / 1e6:g} MHz, DRAM {self.dram_bytes_per_cycle:g} B/cycle{extra}")


def array_shape(text: str) -> tuple[int, int]:
    """An argparse type: 'RxC' (e.g. 32x32), each 1..256."""
    parts = text.lower().split("x")
    try:
        rows, cols = (int(part) for part in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"array {text!r} is not RxC (e.g. 32x32); allowed: 1..{ARRAY_MAX} "
                                         "each") from None
    for value in (rows, cols):
        if not 1 <= value <= ARRAY_MAX:
            raise argparse.ArgumentTypeError(f"array {text!r} has a side of {value}; allowed: 1..{ARRAY_MAX} each")
    return rows, cols
