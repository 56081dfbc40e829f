"""The twin's hardware: one virtual cycle clock, the Cortex-M4 debug registers `machine.mem32` reaches (DEMCR and the
DWT cycle counter), the STM32F4 factory words, and the die-temperature / supply model behind `pyb.ADCAll`.

Time on the twin is counted in CPU cycles: wall time at the board clock since boot, minus the wall time spent inside
emulated native calls (Unicorn is far slower than the silicon), plus the cycles those calls report through
`Peripherals.add_cycles`. DWT_CYCCNT, `time.ticks_*` and the thermal model all read this one clock, so a kernel
that the cycle model says takes 2 ms advances every board clock by 2 ms however long Unicorn took.

The die heats with the emulated work and cools towards ambient with one time constant; the ADC is modelled as the
12-bit converter the firmware reads, with VDDA drooping slightly under load, so `read_core_temp()` without a prior
`read_core_vref()` carries the same supply error as on the board.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from typing import Callable

DEFAULT_CLOCK_HZ = 168_000_000  # the F407's core clock as MicroPython's STM32 port sets it

# Cortex-M4 system control space and DWT (ARMv7-M architecture reference manual).
CPUID, CPUID_VALUE = 0xE000ED00, 0x410FC241  # Cortex-M4 r0p1
DEMCR, DEMCR_TRCENA = 0xE000EDFC, 1 << 24
DWT_CTRL, DWT_CTRL_RESET, DWT_CTRL_CYCCNTENA = 0xE0001000, 0x40000000, 1 << 0  # NUMCOMP = 4
DWT_CYCCNT = 0xE0001004
DWT_LAR = 0xE0001FB0  # lock access register: the M7 needs it, the M4 ignores writes

# STM32F4 system memory: unique ID, flash size, ADC calibration (values picked as a typical part reads).
UID_BASE, UID = 0x1FFF7A10, bytes.fromhex("3a0047000d51353532383431")
FLASH_SIZE_ADDR, FLASH_SIZE_KB = 0x1FFF7A22, 1024
VREFINT_CAL_ADDR, VREFINT_CAL = 0x1FFF7A2A, 1500  # VREFINT read at VDDA = 3.3 V, 30 degC
TS_CAL1_ADDR, TS_CAL1 = 0x1FFF7A2C, 962  # temperature sensor read at 30 degC
TS_CAL2_ADDR, TS_CAL2 = 0x1FFF7A2E, 1210  # ... and at 110 degC
SRAM = (0x20000000, 128 << 10)
CCM = (0x10000000, 64 << 10)

ADC_FULL_SCALE, ADC_SCALE_V = 4095, 3.3
VBAT_DIVIDER = 2  # F40x: VBAT is read through a divide-by-2 bridge
AMBIENT_C = 26.0
RISE_AT_FULL_LOAD_C = 8.0  # steady die rise with the core busy in the kernel all the time
THERMAL_TAU_S = 30.0
VDDA_IDLE_V, VDDA_DROOP_AT_FULL_LOAD_V = 3.31, 0.012
VREFINT_V = VREFINT_CAL * ADC_SCALE_V / ADC_FULL_SCALE


class VirtualClock:
    """Board time in cycles of `hz`: wall time since boot, less the wall time excluded, plus the cycles added."""

    def __init__(self, hz: int):
        self.hz = hz
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._excluded_s = 0.0
        self._added = 0

    def cycles(self) -> int:
        with self._lock:
            return int((time.monotonic() - self._t0 - self._excluded_s) * self.hz) + self._added

    def seconds(self) -> float:
        return self.cycles() / self.hz

    def add_cycles(self, cycles: int) -> None:
        with self._lock:
            self._added += int(cycles)

    def excluding(self, fn: Callable) -> Callable:
        """`fn` with the wall time of each call taken off the clock (for calls that report their own cycles)."""

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            start = time.monotonic()
            try:
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    self._excluded_s += time.monotonic() - start

        return timed


class Dwt:
    """DEMCR and the DWT: CYCCNT counts board cycles while DEMCR.TRCENA and DWT_CTRL.CYCCNTENA are both set."""

    def __init__(self, clock: VirtualClock):
        self._clock = clock
        self.demcr = 0
        self.ctrl = DWT_CTRL_RESET
        self._count = 0  # the counter's value at `_origin`
        self._origin = clock.cycles()

    @property
    def running(self) -> bool:
        return bool(self.demcr & DEMCR_TRCENA) and bool(self.ctrl & DWT_CTRL_CYCCNTENA)

    def cyccnt(self) -> int:
        if not self.running:
            return self._count
        return (self._count + self._clock.cycles() - self._origin) & 0xFFFFFFFF

    def _rebase(self, count: int) -> None:
        self._count = count & 0xFFFFFFFF
        self._origin = self._clock.cycles()

    def write(self, address: int, value: int) -> None:
        count = self.cyccnt()
        if address == DEMCR:
            self.demcr = value
        elif address == DWT_CTRL:
            self.ctrl = (self.ctrl & ~0xFFFF) | (value & 0xFFFF)  # the upper half (NUMCOMP, NO*) is read-only
        elif address == DWT_CYCCNT:
            count = value
        self._rebase(count)

    def enable(self) -> None:
        """What the STM32 port does before its first ticks_cpu(): TRCENA, CYCCNT = 0, CYCCNTENA."""
        if not self.ctrl & DWT_CTRL_CYCCNTENA:
            self.write(DEMCR, self.demcr | DEMCR_TRCENA)
            self.write(DWT_CYCCNT, 0)
            self.write(DWT_CTRL, self.ctrl | DWT_CTRL_CYCCNTENA)


class Thermal:
    """First-order die model: emulated work heats it, it relaxes to ambient with THERMAL_TAU_S."""

    def __init__(self, clock: VirtualClock):
        self._clock = clock
        self._lock = threading.Lock()
        self._rise = 0.0
        self._at = clock.seconds()

    def _relax(self) -> float:
        now = self._clock.seconds()
        self._rise *= math.exp(-max(0.0, now - self._at) / THERMAL_TAU_S)
        self._at = now
        return self._rise

    def add_work(self, cycles: int) -> None:
        with self._lock:
            self._relax()
            self._rise += RISE_AT_FULL_LOAD_C * (cycles / self._clock.hz) / THERMAL_TAU_S

    def load(self) -> float:
        """The rise as a fraction of the full-load rise (0 idle .. 1 always busy)."""
        with self._lock:
            return self._relax() / RISE_AT_FULL_LOAD_C

    def die_c(self) -> float:
        with self._lock:
            return AMBIENT_C + self._relax()


class Adc:
    """The internal channels as the 12-bit ADC converts them, and the firmware's formulas on top (adc.c)."""

    def __init__(self, thermal: Thermal):
        self._thermal = thermal
        self.refcor = 1.0  # the firmware's adc_refcor: updated by each VREFINT reading

    def vdda(self) -> float:
        return VDDA_IDLE_V - VDDA_DROOP_AT_FULL_LOAD_V * self._thermal.load()

    def raw(self, channel: int) -> int:
        """The conversion of internal channel 16 (temperature), 17 (VREFINT) or 18 (VBAT / 2)."""
        if channel == 16:
            slope_v = (TS_CAL2 - TS_CAL1) * ADC_SCALE_V / ADC_FULL_SCALE / 80
            volts = TS_CAL1 * ADC_SCALE_V / ADC_FULL_SCALE + slope_v * (self._thermal.die_c() - 30.0)
        elif channel == 17:
            volts = VREFINT_V
        elif channel == 18:
            volts = self.vdda() / VBAT_DIVIDER  # VBAT tied to VDD, as on boards without a coin cell
        else:
            raise ValueError(f"ADC channel {channel} is not an internal channel (16..18)")
        return max(0, min(ADC_FULL_SCALE, round(volts / self.vdda() * ADC_FULL_SCALE)))

    def core_temp(self) -> float:
        slope = (TS_CAL2 - TS_CAL1) / 80.0
        return (self.raw(16) * self.refcor - TS_CAL1) / slope + 30.0

    def core_vref(self) -> float:
        self.refcor = VREFINT_CAL / self.raw(17)
        return VREFINT_CAL * ADC_SCALE_V / ADC_FULL_SCALE

    def vref(self) -> float:
        self.core_vref()
        return ADC_SCALE_V * self.refcor

    def core_vbat(self) -> float:
        return self.raw(18) * VBAT_DIVIDER * ADC_SCALE_V / ADC_FULL_SCALE * self.refcor


class Memory:
    """What machine.mem8/16/32 reach: the debug registers, CPUID, the factory words, and SRAM/CCM as sparse
    zero-filled storage. Any other address raises ValueError (on silicon it would fault or read a peripheral)."""

    def __init__(self, dwt: Dwt):
        self._dwt = dwt
        self._ram: dict[int, int] = {}  # aligned word address -> value
        factory = bytearray(0x30)  # 0x1FFF7A10 .. 0x1FFF7A3F
        factory[0:12] = UID
        for address, value in ((FLASH_SIZE_ADDR, FLASH_SIZE_KB), (VREFINT_CAL_ADDR, VREFINT_CAL),
                               (TS_CAL1_ADDR, TS_CAL1), (TS_CAL2_ADDR, TS_CAL2)):
            offset = address - UID_BASE
            factory[offset:offset + 2] = value.to_bytes(2, "little")
        self._factory = bytes(factory)

    @staticmethod
    def _in(region: tuple[int, int], address: int) -> bool:
        return region[0] <= address < region[0] + region[1]

    def _read_word(self, word: int) -> int:
        if word == DEMCR:
            return self._dwt.demcr
        if word == DWT_CTRL:
            return self._dwt.ctrl
        if word == DWT_CYCCNT:
            return self._dwt.cyccnt()
        if word == CPUID:
            return CPUID_VALUE
        if UID_BASE <= word < UID_BASE + len(self._factory):
            offset = word - UID_BASE
            return int.from_bytes(self._factory[offset:offset + 4], "little")
        if self._in(SRAM, word) or self._in(CCM, word):
            return self._ram.get(word, 0)
        if word == DWT_LAR:
            return 0
        raise ValueError(f"kbench twin: address 0x{word:08x} is not modelled")

    def read(self, address: int, width: int) -> int:
        """The unsigned value of `width` bytes at `address`."""
        word = address & ~3
        shift = 8 * (address & 3)
        return (self._read_word(word) >> shift) & ((1 << 8 * width) - 1)

    def write(self, address: int, width: int, value: int) -> None:
        word = address & ~3
        shift = 8 * (address & 3)
        mask = ((1 << 8 * width) - 1) << shift
        if word == DWT_LAR:
            return
        merged = (self._read_word(word) & ~mask) | ((value << shift) & mask)
        if word in (DEMCR, DWT_CTRL, DWT_CYCCNT):
            self._dwt.write(word, merged & 0xFFFFFFFF)
        elif self._in(SRAM, word) or self._in(CCM, word):
            self._ram[word] = merged & 0xFFFFFFFF
        # CPUID and the factory words are read-only: writes are ignored, as the bus ignores them


class Peripherals:
    """Everything physical about the twin, shared by all soft resets of one run."""

    def __init__(self, clock_hz: int):
        self.clock = VirtualClock(clock_hz)
        self.dwt = Dwt(self.clock)
        self.thermal = Thermal(self.clock)
        self.adc = Adc(self.thermal)
        self.memory = Memory(self.dwt)

    def add_cycles(self, cycles: int) -> None:
        """The cycle sink of emulated native calls: their cycles advance the clock and heat the die."""
        self.clock.add_cycles(cycles)
        self.thermal.add_work(cycles)
