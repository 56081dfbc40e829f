"""The twin's hardware modules: `machine` (memory access to the modelled registers, the RTC, resets) and `pyb`
(ADCAll over the modelled ADC, LEDs, timing, the USB VCP's flow control), as MicroPython's STM32 port offers them;
the peripherals they read are mcu.sim.peripherals'."""

from __future__ import annotations

import calendar
import types
from typing import TYPE_CHECKING

from mcu.sim.module_kit import TICKS_PERIOD, board_module, fresh_class, soft_reset
from mcu.sim.sandbox import EPOCH_2000

if TYPE_CHECKING:
    from mcu.sim.interpreter import Interpreter


class Mem:
    """machine.mem8 / mem16 / mem32: aligned loads and stores of the modelled addresses."""

    def __init__(self, interp: Interpreter, width: int):
        self._memory = interp.hw.memory
        self._width = width

    def _address(self, address) -> int:
        if not isinstance(address, int):
            raise TypeError("address must be an int")
        address &= 0xFFFFFFFF
        if address % self._width:
            raise ValueError(f"address {address:08x} is not aligned to {self._width} bytes")
        return address

    def __getitem__(self, address) -> int:
        value = self._memory.read(self._address(address), self._width)
        return value - (1 << 32) if self._width == 4 and value >= 1 << 31 else value  # mem32 is signed

    def __setitem__(self, address, value) -> None:
        self._memory.write(self._address(address), self._width, int(value) & ((1 << 8 * self._width) - 1))

    def __repr__(self) -> str:
        return f"<{8 * self._width}-bit memory>"


def make_machine(interp: Interpreter) -> types.ModuleType:
    hz = interp.clock_hz

    class RTC:
        def datetime(self, value=None):
            if value is None:
                t = interp.modules.get("time") or interp.module("time")
                y, mo, d, h, mi, s, wd, _ = t.localtime()
                return (y, mo, d, wd + 1, h, mi, s, 0)
            y, mo, d, _wd, h, mi, s = value[:7]
            target = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) - EPOCH_2000
            interp.rtc_offset_s = target - interp.sandbox.board_time()

    return board_module(
        "machine", "machine of the STM32 port",
        freq=lambda *args: (hz, hz, hz // 4, hz // 2), reset=soft_reset, soft_reset=soft_reset,
        unique_id=lambda: bytes.fromhex("3a0047000d51353532383431"), mem8=fresh_class(Mem)(interp, 1),
        mem16=fresh_class(Mem)(interp, 2), mem32=fresh_class(Mem)(interp, 4), idle=lambda: interp.link.pause(0),
        disable_irq=lambda: 0, enable_irq=lambda state=0: None,
        reset_cause=lambda: 5, PWRON_RESET=1, HARD_RESET=2, WDT_RESET=3, DEEPSLEEP_RESET=4, SOFT_RESET=5, RTC=RTC)


def make_pyb(interp: Interpreter) -> types.ModuleType:
    adc, clock, hz = interp.hw.adc, interp.hw.clock, interp.clock_hz

    class ADCAll:
        """pyb.ADCAll(resolution, mask): the internal channels (16 temperature, 17 VREFINT, 18 VBAT)."""

        def __init__(self, resolution: int, mask: int = 0xFFFFFFFF):
            if resolution not in (6, 8, 10, 12):
                raise ValueError(f"resolution {resolution} not supported")
            self._resolution = resolution
            self._mask = mask

        def read_channel(self, channel: int) -> int:
            return adc.raw(channel) >> (12 - self._resolution)

        def read_core_temp(self) -> float:
            return adc.core_temp()

        def read_core_vbat(self) -> float:
            return adc.core_vbat()

        def read_core_vref(self) -> float:
            return adc.core_vref()

        def read_vref(self) -> float:
            return adc.vref()

    class LED:
        def __init__(self, number: int):
            if not 1 <= number <= 4:
                raise ValueError(f"LED({number}) doesn't exist")
            self._on = False

        def on(self):
            self._on = True

        def off(self):
            self._on = False

        def toggle(self):
            self._on = not self._on

        def intensity(self, value=None):
            return 255 if self._on else 0

    class USB_VCP:  # noqa: N801 - MicroPython's name
        """pyb.USB_VCP(id=0): the REPL's USB virtual COM port, flow control only. The twin's line never drops a byte
        (its receive buffer has no limit), which is what RTS flow control gives a board; init(flow=...) is recorded
        and changes nothing."""

        RTS, CTS = 1, 2

        def __init__(self, id: int = 0):
            if id != 0:
                raise ValueError(f"USB_VCP({id}) doesn't exist")

        def init(self, *, flow: int = -1) -> None:
            if flow != -1:
                USB_VCP.flow = flow

        def isconnected(self) -> bool:
            return True

    USB_VCP.flow = 0  # the REPL's default: no RTS (a board drops what does not fit), no CTS

    def millis() -> int:
        return clock.cycles() * 1000 // hz & (TICKS_PERIOD - 1)

    def micros() -> int:
        return clock.cycles() * 1_000_000 // hz & (TICKS_PERIOD - 1)

    return board_module(
        "pyb", "pyb of the STM32 port (ADCAll, LED, timing and USB_VCP flow control only)", ADCAll=ADCAll, LED=LED,
        USB_VCP=USB_VCP, repl_uart=lambda *uart: None, millis=millis,
        micros=micros, elapsed_millis=lambda start: (millis() - start) & (TICKS_PERIOD - 1),
        elapsed_micros=lambda start: (micros() - start) & (TICKS_PERIOD - 1),
        delay=lambda ms: interp.link.pause(ms / 1e3), udelay=lambda us: interp.link.pause(us / 1e6),
        freq=lambda *args: (hz, hz, hz // 4, hz // 2), unique_id=lambda: bytes.fromhex("3a0047000d51353532383431"),
        hard_reset=soft_reset)
