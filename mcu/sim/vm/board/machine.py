# machine for the twin's VM (mcu/sim/vm/twin.mjs): what the board code uses of the F407's, from the twin's model
# (mcu/sim/peripherals.py) through /dev/twin: the clock, and mem8/mem16/mem32 onto the modelled memory (the debug
# registers with DWT's cycle counter, CPUID, the factory words, SRAM). The port has no machine module.
import _twin_bridge as _bridge


def freq():
    hz = _bridge.call(_bridge.CLOCK)
    return (hz, hz, hz // 4, hz // 2)  # SYSCLK, HCLK, PCLK1, PCLK2 as the STM32 port reports them


def reset():
    raise SystemExit  # a soft reset here: the twin's REPL boots a fresh VM


def soft_reset():
    raise SystemExit


class _Mem:
    # machine.memN: a word read as the firmware's int (32 bits signed), an address not aligned to N bytes refused
    def __init__(self, width):
        self._width = width

    def __repr__(self):
        return "<%d-bit memory>" % (8 * self._width)

    def _address(self, index):
        address = index & 0xFFFFFFFF
        if address & (self._width - 1):
            raise ValueError("address %08x is not aligned to %d bytes" % (address, self._width))
        return address

    def __getitem__(self, index):
        value = _bridge.call(_bridge.MEM_READ, self._address(index), self._width)
        return value - (1 << 32) if self._width == 4 and value >= 1 << 31 else value

    def __setitem__(self, index, value):
        _bridge.call(_bridge.MEM_WRITE, self._address(index), self._width, value & 0xFFFFFFFF)


mem8 = _Mem(1)
mem16 = _Mem(2)
mem32 = _Mem(4)
