"""DESIGN.md's layers hold: import-linter's contracts (pyproject.toml), lazy targets, an empty host/__init__.py."""

import subprocess
import sys
from pathlib import Path

from helpers import ROOT


def test_import_linter_contracts_are_kept():
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "broken" not in done.stdout.lower().replace("0 broken", "")


def test_the_cli_imports_no_device_library():
    code = ("import sys, host.compare, host.report, host.cpu; "
            "print(sorted(m for m in ('cupy', 'serial', 'mpremote', 'unicorn') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stderr


def test_host_init_stays_empty():
    assert (ROOT / "host" / "__init__.py").read_text().strip() == ""
