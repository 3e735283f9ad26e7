"""``python -m ltdrnn.bench``: the benchmark, and the child process of its memory and malloc probes."""

import sys

from .cli import main

sys.exit(main())
