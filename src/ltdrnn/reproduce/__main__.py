"""``python -m ltdrnn.reproduce``: the same as ``ltdrnn reproduce``."""

import sys

from ..cli import main

sys.exit(main(["reproduce", *sys.argv[1:]]))
