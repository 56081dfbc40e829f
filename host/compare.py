"""`python -m host.compare`: the sweep's command (host/sweep/cli.py holds it; this file keeps the name users type)."""

import sys

from host.sweep.cli import main

if __name__ == "__main__":
    sys.exit(main())
