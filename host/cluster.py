"""`python -m host.cluster scheduler|worker`: the cluster's node commands (host/sweep/nodes.py holds them; this file
keeps the name users type)."""

import sys

from host.sweep.nodes import main

if __name__ == "__main__":
    sys.exit(main())
