"""The board twin's `q15attn`: the Cortex-M4 build of mcu/native/attention_q15.c executed by Unicorn, with a cycle
model standing in for the DWT cycle counter.

The ELF (`make -C mcu/native arm`, built on demand by mcu/native_build.py) is loaded at its link address into an
STM32F407 memory map:
flash 0x08000000 (1 MB), SRAM 0x20000000 (128 KB, code, buffers and stack), CCM 0x10000000 (64 KB). DEMCR
(0xE000EDFC) and the DWT (0xE0001000..) are memory-mapped I/O whose CYCCNT is the modelled cycle count.

Cycle model (`costs`): every instruction gets a cost from the Cortex-M4 instruction timing table by class (ALU 1,
multiplies and DSP multiply-accumulates 1, divides 7 (2..12 on silicon, data-dependent), loads 2 or 1 when
pipelined behind another load, stores 1, LDM/STM/PUSH/POP 1+N, VFP per its class); a taken branch adds a pipeline
refill of 2 (1..3 on silicon). Costs are summed per basic block once (capstone disassembly) and the Unicorn block
hook adds a block's sum, so the hook runs once per block, not per instruction (in C:
mcu/sim/blockcount.py). docs/twin.md says what is ignored.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from host import q15
from host.errors import UnavailableError
from mcu.native_build import BUILD, built
from mcu.sim.blockcount import NativeCounter
from mcu.cycles import TWIN_EMULATION_CAP_S, kernel_cycles, twin_seconds

ELF = BUILD / "attention_q15_m4.elf"

FLASH, FLASH_SIZE = 0x08000000, 1 << 20
SRAM, SRAM_SIZE = 0x20000000, 128 << 10
CCM, CCM_SIZE = 0x10000000, 64 << 10
PPB, PPB_SIZE = 0xE0000000, 0x10000
DEMCR, DWT_CTRL, DWT_CYCCNT = 0xE000EDFC, 0xE0001000, 0xE0001004
STACK_BYTES = 8 << 10
MESSAGE_BYTES = 192  # the binding's message buffer (modq15attn.c), with room for a streamed call's longer ones
RETURN_ADDRESS = FLASH  # a halfword the call returns to; emulation stops there
BOARD_CLOCK_HZ = 168_000_000

#: Cortex-M4 cycles by instruction class (Technical Reference Manual, instruction set summary, zero wait states).
TAKEN_BRANCH_REFILL = 2
DIVIDE_CYCLES = 7
VFP_CYCLES = {"vdiv": 14, "vsqrt": 14, "vmla": 3, "vmls": 3, "vnmla": 3, "vnmls": 3, "vfma": 3, "vfms": 3,
              "vfnma": 3, "vfnms": 3, "vldr": 2, "vstr": 2}
LOAD_MNEMONICS = ("ldr", "ldrb", "ldrh", "ldrsb", "ldrsh", "ldrex", "ldrexb", "ldrexh", "ldrt", "ldrbt", "ldrht")
STORE_MNEMONICS = ("str", "strb", "strh", "strex", "strexb", "strexh", "strt", "strbt", "strht")
CONDITIONS = ("eq", "ne", "cs", "hs", "cc", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le", "al")


def base_mnemonic(mnemonic: str) -> str:
    """'ldr.w' → 'ldr', 'addeq' → 'add', 'bne.w' → 'b': width suffix and condition code removed."""
    name = mnemonic.split(".")[0].lower()
    for cond in CONDITIONS:
        if name.endswith(cond) and len(name) > len(cond) and name[: -len(cond)] in _KNOWN_STEMS:
            return name[: -len(cond)]
    return name


_KNOWN_STEMS = {"b", "bl", "bx", "blx", "mov", "add", "sub", "ldr", "str", "cmp", "it", "and", "orr", "eor", "mvn",
                "ldrh", "ldrb", "strh", "strb", "rsb", "bic", "lsl", "lsr", "asr", "mul", "mla", "adc", "sbc", "tst",
                "ldrsh", "ldrsb", "movs", "adds", "subs", "vmov", "neg", "ldrd", "strd", "pop", "push"}


def instruction_cycles(mnemonic: str, operands: str, previous_was_load: bool) -> int:
    """Cycles of one instruction without its branch refill (added at run time when the branch is taken)."""
    name = base_mnemonic(mnemonic)
    if name in ("push", "pop", "ldm", "ldmia", "ldmdb", "stm", "stmia", "stmdb", "vpush", "vpop"):
        registers = operands.count(",") + 1 if "{" in operands else 1
        if "-" in operands:  # ranges such as {r4-r7}
            registers += 3
        return 1 + registers
    if name in ("ldrd", "strd"):
        return 3 if name == "ldrd" else 2
    if name in LOAD_MNEMONICS:
        return 1 if previous_was_load else 2
    if name in STORE_MNEMONICS:
        return 1
    if name in ("sdiv", "udiv"):
        return DIVIDE_CYCLES
    if name.startswith("v"):
        return VFP_CYCLES.get(name, 1)
    return 1  # ALU, shifts, multiplies and DSP multiply-accumulates (single-cycle on the M4), branches, IT


@contextlib.contextmanager
def interrupts_after_the_call():
    """A Ctrl-C (SIGINT) during an emulated call is raised once the call returns. Raised inside Unicorn, it would
    land in one of its callbacks (the DWT read, a block's costing), which the binding reports and swallows, leaving
    a wrong cycle count in a call that goes on. Only the main thread receives signals; elsewhere nothing changes."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:  # None: a handler set in C
        yield
        return
    pending: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pending:  # the handler that was there gets it now: Python's raises KeyboardInterrupt, a tool's its own
        if callable(previous):
            previous(signal.SIGINT, None)
        elif previous == signal.SIG_DFL:
            signal.raise_signal(signal.SIGINT)


@dataclass
class Block:
    """A basic block's precomputed cost: total cycles, instruction count, and per-instruction (address, cycles)."""

    cycles: int
    instructions: int
    end: int  # address after its last instruction (the fall-through)
    steps: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class RunStats:
    """What one emulated call did."""

    cycles: int = 0
    instructions: int = 0
    blocks: int = 0
    wall_s: float = 0.0


class CortexM4:
    """One emulated Cortex-M4 with the kernel's ELF loaded; `call` runs a function of it to completion.

    `native_count`: count the cycle model in C (mcu/sim/blockcount.py) where it builds, else in a Python hook;
    `counting` says which, and why."""

    def __init__(self, elf: Path | None = None, native_count: bool = True):
        try:
            import capstone
            import unicorn
            from elftools.elf.elffile import ELFFile
        except ImportError as exc:
            raise UnavailableError(f"the board twin needs unicorn, capstone and pyelftools: {exc} "
                                   "(pip install -e '.[mcu]')") from exc
        from unicorn import arm_const

        self._uc_mod, self._arm = unicorn, arm_const
        path = elf or built("arm", ELF)
        self.uc = unicorn.Uc(unicorn.UC_ARCH_ARM, unicorn.UC_MODE_THUMB | unicorn.UC_MODE_MCLASS)
        self.uc.ctl_set_cpu_model(unicorn.arm_const.UC_CPU_ARM_CORTEX_M4)
        for base, size in ((FLASH, FLASH_SIZE), (SRAM, SRAM_SIZE), (CCM, CCM_SIZE)):
            self.uc.mem_map(base, size)
        self.uc.mmio_map(PPB, PPB_SIZE, self._mmio_read, None, self._mmio_write, None)
        self.symbols: dict[str, int] = {}
        image_end = SRAM
        with path.open("rb") as handle:
            elf_file = ELFFile(handle)
            for segment in elf_file.iter_segments():
                if segment["p_type"] == "PT_LOAD":
                    self.uc.mem_write(segment["p_vaddr"], segment.data())
                    image_end = max(image_end, segment["p_vaddr"] + segment["p_memsz"])
            for symbol in elf_file.get_section_by_name(".symtab").iter_symbols():
                if symbol["st_info"]["type"] == "STT_FUNC":
                    self.symbols[symbol.name] = symbol["st_value"] & ~1
        self.uc.mem_write(RETURN_ADDRESS, b"\x00\xbe")  # bkpt #0, never executed: emulation stops at it
        self.heap_start = (image_end + 7) & ~7
        self.stack_top = SRAM + SRAM_SIZE
        self.heap_limit = self.stack_top - STACK_BYTES
        self._disasm = capstone.Cs(capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB | capstone.CS_MODE_MCLASS)
        self._blocks: dict[int, Block] = {}
        self._stats = RunStats()
        self._current: Block | None = None
        self._current_start = 0
        self._previous_end: int | None = None
        self.demcr = 0
        self.dwt_ctrl = 0
        self.counter: NativeCounter | None = None
        self.counting = "Python (asked for)"
        if native_count:
            self.counter, why = NativeCounter.open(self.uc, SRAM, (self.heap_start - SRAM) & ~1, self._cost,
                                                   TAKEN_BRANCH_REFILL)
            self.counting = "C (mcu/native/twin_blockcount.c)" if self.counter else why
        if self.counter is None:
            self.uc.hook_add(unicorn.UC_HOOK_BLOCK, self._on_block)

    # --- cycle model -----------------------------------------------------------------------------------------

    def _block(self, address: int, size: int) -> Block:
        block = self._blocks.get(address)
        if block is None:
            code = bytes(self.uc.mem_read(address, size))
            block, previous_load = Block(0, 0, address + size), False
            for insn in self._disasm.disasm(code, address):
                cost = instruction_cycles(insn.mnemonic, insn.op_str, previous_load)
                previous_load = base_mnemonic(insn.mnemonic) in LOAD_MNEMONICS
                block.steps.append((insn.address, cost))
                block.cycles += cost
                block.instructions += 1
            self._blocks[address] = block
        return block

    def _cost(self, address: int, size: int) -> tuple[int, int]:
        block = self._block(address, size)
        return block.cycles, block.instructions

    def _on_block(self, uc, address: int, size: int, user_data) -> None:
        block = self._block(address, size)
        stats = self._stats
        if self._previous_end is not None and address != self._previous_end:
            stats.cycles += TAKEN_BRANCH_REFILL
        stats.cycles += block.cycles
        stats.instructions += block.instructions
        stats.blocks += 1
        self._current, self._current_start, self._previous_end = block, stats.cycles - block.cycles, block.end

    def cycle_count(self) -> int:
        """Modelled cycles so far, up to (not including) the instruction at PC: what CYCCNT reads mid-block."""
        if self.counter is not None:
            running = self.counter.running()
            if running is None:
                return 0
            current, start = self._blocks[running[0]], running[1]
        elif self._current is None:
            return self._stats.cycles
        else:
            current, start = self._current, self._current_start
        pc = self.uc.reg_read(self._arm.UC_ARM_REG_PC) & ~1
        return start + sum(cost for address, cost in current.steps if address < pc)

    def _mmio_read(self, uc, offset: int, size: int, user_data) -> int:
        address = PPB + offset
        if address == DWT_CYCCNT:
            return self.cycle_count() & 0xFFFFFFFF if self.dwt_ctrl & 1 else 0
        if address == DWT_CTRL:
            return self.dwt_ctrl
        if address == DEMCR:
            return self.demcr
        return 0

    def _mmio_write(self, uc, offset: int, size: int, value: int, user_data) -> None:
        address = PPB + offset
        if address == DEMCR:
            self.demcr = value
        elif address == DWT_CTRL:
            self.dwt_ctrl = value if self.demcr & (1 << 24) else self.dwt_ctrl  # the DWT needs TRCENA

    # --- calls ---------------------------------------------------------------------------------------------

    def call(self, name: str, *args: int, timeout_s: float = TWIN_EMULATION_CAP_S,
             expected_s: float | None = None) -> tuple[int, RunStats]:
        """Run function `name` with integer/pointer arguments (AAPCS: r0-r3, then the stack); (r0, stats). The
        emulation stops after timeout_s; the TimeoutError then names the cap and `expected_s`, the estimate."""
        arm = self._arm
        sp = self.stack_top - 4 * max(0, len(args) - 4)
        sp &= ~7
        for i, value in enumerate(args[4:]):
            self.uc.mem_write(sp + 4 * i, int(value & 0xFFFFFFFF).to_bytes(4, "little"))
        for register, value in zip((arm.UC_ARM_REG_R0, arm.UC_ARM_REG_R1, arm.UC_ARM_REG_R2, arm.UC_ARM_REG_R3),
                                   args[:4]):
            self.uc.reg_write(register, value & 0xFFFFFFFF)
        self.uc.reg_write(arm.UC_ARM_REG_SP, sp)
        self.uc.reg_write(arm.UC_ARM_REG_LR, RETURN_ADDRESS | 1)
        self._stats, self._current, self._previous_end = RunStats(), None, None
        if self.counter is not None:
            self.counter.reset()
        start = time.perf_counter()
        with interrupts_after_the_call():
            self.uc.emu_start(self.symbols[name] | 1, RETURN_ADDRESS, timeout=int(timeout_s * 1e6))
        self._stats.wall_s = time.perf_counter() - start
        if self.counter is not None:
            counter = self.counter
            counter.raise_error()
            self._stats.cycles, self._stats.instructions, self._stats.blocks = \
                counter.cycles, counter.instructions, counter.blocks
        if (self.uc.reg_read(arm.UC_ARM_REG_PC) & ~1) != RETURN_ADDRESS:
            expected = f"; this call was expected to need ~{expected_s:.0f} s" if expected_s is not None else ""
            raise TimeoutError(f"{name} did not return within the twin's emulation cap of {timeout_s:.0f} s"
                               f"{expected}: a board runs it, the twin gives up (mcu/cycles.py)")
        result = self.uc.reg_read(arm.UC_ARM_REG_R0)
        return (result - (1 << 32) if result & 0x80000000 else result), self._stats

    def write(self, address: int, data: bytes) -> None:
        self.uc.mem_write(address, data)

    def read(self, address: int, size: int) -> bytes:
        return bytes(self.uc.mem_read(address, size))


class Q15Emulator:
    """The kernel's API on the emulated core: buffers placed in emulated SRAM as on the board."""

    def __init__(self, elf: Path | None = None, native_count: bool = True):
        self.cpu = CortexM4(elf, native_count)

    def _layout(self, sizes: list[int]) -> list[int]:
        addresses, cursor = [], self.cpu.heap_start
        for size in sizes:
            addresses.append(cursor)
            cursor = (cursor + size + 7) & ~7
        if cursor > self.cpu.heap_limit:
            free = self.cpu.heap_limit - self.cpu.heap_start
            raise MemoryError(f"memory allocation failed, allocating {cursor - self.cpu.heap_start} bytes "
                              f"({free} bytes of emulated SRAM free for buffers)")
        return addresses

    def _place(self, params: tuple[int, ...], buffers: list[tuple[str, bytes]],
               at: list[int] | None = None) -> tuple[list[int], list[int]]:
        """Parameters, buffer descriptors, two result words, a message and the buffers in emulated SRAM:
        ([params, descriptors, results, message], [each buffer's address]). The buffers' bytes are not written yet.

        `at`: the buffers' addresses in the caller's memory (the VM twin's), or None: buffers that overlap there are
        placed overlapping the same way here (one region each group, its start at the same address mod 8), so that
        an output sharing memory with an input is overwritten while it is read, as on the board."""
        param_bytes = b"".join(int(v).to_bytes(4, "little", signed=True) for v in params)
        descriptors = b"".join(ord(code).to_bytes(4, "little") + len(data).to_bytes(4, "little", signed=True)
                               for code, data in buffers)
        regions = overlapping_regions([(start, len(data)) for start, (_, data) in zip(at, buffers)]) if at else None
        if regions is None:
            sizes = [len(data) for _, data in buffers]
        else:
            sizes = [start % 8 + size for start, size in regions[0]]
        addresses = self._layout([len(param_bytes), len(descriptors), 8, MESSAGE_BYTES] + sizes)
        self.cpu.write(addresses[0], param_bytes)
        self.cpu.write(addresses[1], descriptors)
        if regions is None:
            return addresses[:4], addresses[4:]
        spans, member = regions
        bases = [base + start % 8 for base, (start, _) in zip(addresses[4:], spans)]
        return addresses[:4], [bases[region] + offset for region, offset in member]

    def _refuse(self, describe: str, message: int, *args: int) -> None:
        """ValueError with the emulated kernel's own message: `describe` (q15attn_describe or _describe_stream) called
        with args, then the message buffer at `message` and its size."""
        length, _ = self.cpu.call(describe, *args, message, MESSAGE_BYTES)
        raise ValueError(self.cpu.read(message, length).decode("ascii", "replace"))

    def attention(self, params: tuple[int, ...], buffers: list[tuple[str, bytes]], row0: int,
                  out_nbytes: int, at: list[int] | None = None) -> tuple[bytes, bytes, int, RunStats]:
        """params = (seq, dim, causal, bc, score_mult, score_shift); buffers = [(typecode, bytes)] for q, k, vt, o
        and oshift (typecode 'B', a byte per row).

        Validation runs in the emulated kernel (q15attn_check_buffers, q15attn_describe): a bad argument raises
        ValueError with the kernel's own message. Returns (o bytes, oshift bytes, DWT cycles measured by the kernel,
        stats)."""
        cpu = self.cpu
        (p_addr, d_addr, n_addr, msg_addr), (q_addr, k_addr, vt_addr, o_addr, s_addr) = \
            self._place(params, buffers, at)
        status, _ = cpu.call("q15attn_check_buffers", p_addr, row0, d_addr, n_addr)
        if status != 0:
            self._refuse("q15attn_describe", msg_addr, status, p_addr, row0, d_addr)
        nrows = int.from_bytes(cpu.read(n_addr, 4), "little")
        for address, (_, data) in zip((q_addr, k_addr, vt_addr), buffers[:3]):
            cpu.write(address, data)
        seq, dim, causal = params[0], params[1], bool(params[2])
        expected_s = twin_seconds(kernel_cycles(seq, dim, row0, nrows, causal))
        if buffers[4][1]:  # what the call does not write stays as the caller had it
            cpu.write(s_addr, buffers[4][1])
        status, stats = cpu.call("q15attn_rows_timed", p_addr, row0, nrows, q_addr, k_addr, vt_addr, o_addr, s_addr,
                                 n_addr, expected_s=expected_s)
        if status != 0:
            raise ValueError(f"q15attn_rows_timed returned status {status}")
        cycles = int.from_bytes(cpu.read(n_addr, 4), "little")
        return cpu.read(o_addr, out_nbytes), cpu.read(s_addr, len(buffers[4][1])), cycles, stats

    def stream(self, params: tuple[int, ...], buffers: list[tuple[str, bytes]], row0: int,
               key0: int, at: list[int] | None = None) -> tuple[bytes, bytes, bytes, int, RunStats]:
        """One key chunk of a streamed head: buffers = [(typecode, bytes)] for q, k, vt, o, oshift and state (k and
        vt the chunk's). Validation and refusals as `attention`. Returns (o bytes, oshift bytes, state bytes, DWT
        cycles, stats); o and oshift are written only by the chunk that reaches the rows' last key, and a refusal
        leaves the state as it was."""
        cpu = self.cpu
        (p_addr, d_addr, n_addr, msg_addr), addresses = self._place(params, buffers, at)
        status, _ = cpu.call("q15attn_check_stream_buffers", p_addr, row0, key0, d_addr, n_addr, n_addr + 4)
        if status != 0:
            self._refuse("q15attn_describe_stream", msg_addr, status, p_addr, row0, key0, d_addr)
        nrows = int.from_bytes(cpu.read(n_addr, 4), "little")
        nkeys = int.from_bytes(cpu.read(n_addr + 4, 4), "little")
        for address, (_, data) in zip(addresses, buffers):
            cpu.write(address, data)
        seq, dim, causal = params[0], params[1], bool(params[2])
        expected_s = twin_seconds(kernel_cycles(seq, dim, row0, nrows, causal, key0, key0 + nkeys))
        q_addr, k_addr, vt_addr, o_addr, g_addr, s_addr = addresses
        status, stats = cpu.call("q15attn_stream_timed", p_addr, row0, nrows, key0, nkeys, q_addr, k_addr, vt_addr,
                                 s_addr, o_addr, g_addr, n_addr, expected_s=expected_s)
        if status != 0:
            self._refuse("q15attn_describe_stream", msg_addr, status, p_addr, row0, key0, d_addr)
        cycles = int.from_bytes(cpu.read(n_addr, 4), "little")
        return (cpu.read(o_addr, len(buffers[3][1])), cpu.read(g_addr, len(buffers[4][1])),
                cpu.read(s_addr, len(buffers[5][1])), cycles, stats)

    def state_bytes(self, dim: int, nrows: int) -> int:
        """q15attn_state_bytes of the emulated kernel."""
        return self.cpu.call("q15attn_state_bytes", dim, nrows)[0]

    def run(self, params: q15.Q15Params, q: np.ndarray, k: np.ndarray, v: np.ndarray,
            row0: int = 0) -> tuple[q15.Q15Out, int, RunStats]:
        """One head on the twin: q (rows, d), k and v (seq, d) int16 → (Q15Out: o int16 (rows, d) and each row's
        shift uint8 (rows,); DWT cycles; stats)."""
        q = np.ascontiguousarray(q, dtype="<i2")
        vt = np.ascontiguousarray(np.asarray(v, dtype="<i2").T)
        buffers = [("h", q.tobytes()), ("h", np.ascontiguousarray(k, dtype="<i2").tobytes()), ("h", vt.tobytes()),
                   ("h", bytes(q.nbytes)), ("B", bytes(q.shape[0]))]
        values = (params.seq, params.dim, int(params.causal), params.bc, params.score_mult, params.score_shift)
        out, shift, cycles, stats = self.attention(values, buffers, row0, q.nbytes)
        return (q15.Q15Out(np.frombuffer(out, dtype="<i2").reshape(q.shape).copy(),
                           np.frombuffer(shift, dtype=np.uint8).copy()), cycles, stats)


def overlapping_regions(spans: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Buffers given as (start, size) grouped where they overlap: ([(start, size) of each region], [(its region,
    offset in it) for each buffer]). Empty buffers overlap nothing."""
    order = sorted((i for i, (_, size) in enumerate(spans) if size), key=lambda i: spans[i][0])
    order += [i for i, (_, size) in enumerate(spans) if not size]
    regions: list[list[int]] = []
    member: list[tuple[int, int]] = [(0, 0)] * len(spans)
    for i in order:
        start, size = spans[i]
        if regions and size and start < regions[-1][1]:
            regions[-1][1] = max(regions[-1][1], start + size)
        else:
            regions.append([start, start + size])
        member[i] = (len(regions) - 1, start - regions[-1][0])
    return [(start, end - start) for start, end in regions], member


@functools.lru_cache(maxsize=1)
def shared_emulator() -> Q15Emulator:
    """One emulator per process (loading the ELF and the block cache are reused across calls)."""
    return Q15Emulator()
