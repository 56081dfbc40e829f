"""`python -m host.report OUT_DIR`: re-render OUT_DIR/results.md and its plots from the result files alone."""

import sys

from host.report.render import main

sys.exit(main())
