"""The board twin: an emulated STM32F407 running MicroPython that mpremote drives (docs/twin.md)."""
