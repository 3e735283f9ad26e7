"""``python -m ltdrnn.bench``: the same as ``ltdrnn bench``, and the child process of the benchmark's
memory, timing and alone-reference probes (``--memory-probe SPEC`` / ``--timing-probe SPEC`` /
``--alone-probe SPEC``)."""

import json
import sys

from .alone import alone_probe
from .probes import memory_probe, timing_probe

PROBES = {"--memory-probe": memory_probe, "--timing-probe": timing_probe, "--alone-probe": alone_probe}

if sys.argv[1:2] and sys.argv[1] in PROBES:
    print(json.dumps(PROBES[sys.argv[1]](json.loads(sys.argv[2]))))
    sys.exit(0)

from ..cli import main  # noqa: E402  (the probe children need no command line)

sys.exit(main(["bench", *sys.argv[1:]]))
