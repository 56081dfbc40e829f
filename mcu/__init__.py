"""MCU target: the host side of the STM32F407 running MicroPython (client, framing, deploy) and its board twin."""
