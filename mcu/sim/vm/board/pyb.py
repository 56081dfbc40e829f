# pyb for the twin's VM (mcu/sim/vm/twin.mjs): the parts the board code uses (the internal ADC's temperature and
# VDDA, the USB VCP's flow control), from the twin's model (mcu/sim/peripherals.py) through /dev/twin.
import _twin_bridge as _bridge


class ADCAll:
    def __init__(self, resolution, mask=0):
        if resolution not in (6, 8, 10, 12):
            raise ValueError("resolution %d not supported" % resolution)

    def read_core_temp(self):
        return _bridge.call(_bridge.TEMP_MILLI_C) / 1000

    def read_vref(self):
        return _bridge.call(_bridge.VDDA_MILLI_V) / 1000

    def read_core_vref(self):
        return 1.21


class USB_VCP:  # noqa: N801 - the name pyb gives it
    RTS = 1
    CTS = 2

    def init(self, flow=-1):
        pass

    def any(self):
        return False


def repl_uart(*args):
    return None


def freq():
    hz = _bridge.call(_bridge.CLOCK)
    return (hz, hz, hz // 4, hz // 2)
