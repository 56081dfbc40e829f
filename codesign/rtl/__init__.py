"""The datapath as RTL (Amaranth HDL): the units of codesign/datapath.py as circuits, simulated bit for bit against
host/q15.py and cycle for cycle against codesign/cycles.py, and exported to Verilog for Yosys's gate counts.

Amaranth is imported only under this package (import-linter), so the model, the explorer and the asic target run
without it; `codesign.rtl.available()` says whether it is installed.
"""

from __future__ import annotations

import importlib.util


def available() -> tuple[bool, str]:
    """(True, '') when Amaranth can be imported, else (False, why and how to install it)."""
    if importlib.util.find_spec("amaranth") is None:
        return False, "Amaranth HDL is not installed (pip install -e '.[rtl]', or scripts/setup.sh installs it)"
    return True, ""
