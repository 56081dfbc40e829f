"""Tests of mcu/: framing, the board's frame server, the link, the planner, the C kernel and the MCU target, on the
twin (the `twin` and `fresh_twin` fixtures of tests/conftest.py) or a board (marker `board`). A module that needs
an mcu extra (cobs, mpremote, unicorn) skips at collection with the reason. Area fixtures go here; a fixture one
module uses stays in that module; shared code (the board's modules, its stand-ins) is in tests/helpers."""
