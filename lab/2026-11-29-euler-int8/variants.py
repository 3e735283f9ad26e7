"""Two cheaper integer Euler steps that were measured and not taken: their host agreement with eager over
the run's test split, and the generated C for profile_avr.py.

    narrow: no wide (int32) values at all: every state an int16 in its calibrated format (Q15-like)
    high-half: states stay int32, but a wide value enters a linear map as its rounded int16 high half only
               (one int8 x int16 product per weight instead of two)

    .venv/bin/python lab/2026-11-29-euler-int8/variants.py narrow|high-half RUN OUT_DIR
"""

from __future__ import annotations

import sys

from ltdrnn.cli import main
from ltdrnn.export import c_fixed

variant, run, out = sys.argv[1:4]
if variant == "narrow":
    c_fixed._wide_values = lambda graph: set()
elif variant == "high-half":
    portable = c_fixed.FixedDialect._inputs

    def high_half(self, vector, k, cols, emit):
        parts = portable(self, vector, k, cols, emit)
        if len(parts) == 1:
            return parts
        (name, frac, _), _ = parts
        value = emit.ref(vector, "c")
        fill = [
            f"int16_t n{k}[{cols}];",
            f"for (int c = 0; c < {cols}; ++c) n{k}[c] = (int16_t)((({value}) + 16384) >> 15);",
        ]
        return [(name, frac, fill)]

    c_fixed.FixedDialect._inputs = high_half
else:
    raise SystemExit(f"variant: expected narrow or high-half, got {variant!r}")
sys.exit(main(["export", run, "--format", "c", "--int8", "--out", out]))
