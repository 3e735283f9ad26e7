"""``python -m ltdrnn.sweep``: the same as ``ltdrnn sweep``."""

import sys

from ..cli import main

sys.exit(main(["sweep", *sys.argv[1:]]))
