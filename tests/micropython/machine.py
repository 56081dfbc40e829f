# machine for the WebAssembly board (tests/micropython/board.mjs): freq() only, the STM32F407's clock, at which the
# q15attn stand-in's cycles (mcu/cycles.py, Cortex-M4 cycles) are counted. The port has no machine module, and the
# host cannot time a board whose HELLO says 0 Hz. Only the tests deploy it; nothing else of machine is here.

F407_HZ = 168_000_000


def freq():
    return F407_HZ
