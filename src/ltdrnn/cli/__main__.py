"""``python -m ltdrnn.cli``: the same as ``ltdrnn``."""

import sys

from . import main

sys.exit(main())
