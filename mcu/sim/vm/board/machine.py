# machine for the twin's VM (mcu/sim/vm/twin.mjs): what the board code uses of the F407's, from the twin's model
# (mcu/sim/peripherals.py) through /dev/twin. The port has no machine module.
import _twin_bridge as _bridge


def freq():
    return _bridge.call(_bridge.CLOCK)


def reset():
    raise SystemExit  # a soft reset here: the twin's REPL boots a fresh VM


def soft_reset():
    raise SystemExit
