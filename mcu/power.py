"""The STM32F407's energy per row, from its datasheet: latency × run current × supply voltage.

No board here has a current probe on its supply, so an MCU row's energy is the datasheet's: ST DS8626
(STM32F405xx/STM32F407xx, DocID022152), Table 20, typical current consumption in Run mode, code with data processing
running from Flash (ART accelerator enabled), at f_HCLK = 168 MHz:

- all peripherals disabled: 40 mA typical (ST's headline 238 µA/MHz is this figure over 168 MHz);
- all peripherals enabled: 87 mA typical.

A row uses the peripherals-disabled 40 mA: the native kernel needs only the core and its memories, and the link
is idle while it runs. (A deployed .mpy runs from the MicroPython heap in SRAM, a module baked into the firmware from
Flash; the Flash-with-ART figure is taken for both.) The peripherals-enabled figure would give 87/40 = 2.2× more.
At another clock the current is scaled linearly by the datasheet's 238 µA/MHz × f_HCLK (ST's own per-MHz figure;
the real curve has a static share, so this is an estimate away from 168 MHz). VDD is the board's 3.3 V supply
(DS8626 Table 14 allows 1.8–3.6 V).

The figure is a typical current, not a measurement: J per inference of the row's whole problem (all heads and query
chunks of one timed repeat), on the twin's modelled cycles or a board's measured DWT cycles alike.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The datasheet the figures come from.
DATASHEET = "DS8626 Table 20"
#: The clock Table 20's headline figures are given at.
DATASHEET_CLOCK_HZ = 168_000_000
#: Typical Run-mode current at 168 MHz from Flash (ART on), all peripherals disabled: the row's figure.
RUN_CURRENT_A = 40e-3
#: The same with all peripherals enabled: 87/40 = 2.2× more, stated in every row's message.
RUN_CURRENT_ALL_PERIPHERALS_A = 87e-3
#: ST's per-MHz figure (40 mA / 168 MHz), used to scale the current at another clock.
RUN_CURRENT_PER_MHZ_A = 238e-6
#: The board's supply voltage (DS8626 Table 14: 1.8–3.6 V).
VDD_V = 3.3
#: The row's energy_source.
SOURCE = "datasheet"


@dataclass(frozen=True)
class Energy:
    """Joules of one timed repeat of a row's problem, where they come from, and the note for the row's message."""

    joules: float | None
    source: str
    note: str


def run_current_a(clock_hz: int) -> float:
    """Typical Run-mode current in amperes at `clock_hz`: Table 20's 40 mA at 168 MHz, else 238 µA/MHz × f."""
    if clock_hz == DATASHEET_CLOCK_HZ:
        return RUN_CURRENT_A
    return RUN_CURRENT_PER_MHZ_A * clock_hz / 1e6


def energy(seconds: float, clock_hz: int) -> Energy:
    """The energy of `seconds` of kernel time at `clock_hz`: seconds × run current × VDD, with its row note."""
    if clock_hz <= 0 or seconds < 0:
        return Energy(None, "", f"energy: none (no datasheet figure for a clock of {clock_hz} Hz and "
                                f"{seconds} s of kernel time)")
    amps = run_current_a(clock_hz)
    ratio = RUN_CURRENT_ALL_PERIPHERALS_A / RUN_CURRENT_A
    if clock_hz == DATASHEET_CLOCK_HZ:
        current = f"{amps * 1e3:g} mA"
    else:
        current = f"{RUN_CURRENT_PER_MHZ_A * 1e6:g} µA/MHz × {clock_hz / 1e6:g} MHz = {amps * 1e3:.3g} mA"
    note = (f"energy: datasheet {current} × {VDD_V:g} V at {clock_hz / 1e6:g} MHz ({DATASHEET}, peripherals "
            f"disabled; all enabled: {ratio:.1f}× more)")
    return Energy(seconds * amps * VDD_V, SOURCE, note)
