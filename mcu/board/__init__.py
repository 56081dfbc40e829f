"""MicroPython code that runs on the board (deployed to its /flash), kept importable by CPython for the tests."""
