"""The fast paths of the source cells not yet moved into :mod:`ltdrnn.ops` (docs/architecture.md), one
module per cell: hand-written autograd Functions over a whole sequence and the bridges to their compiled
time loops (``ltdrnn/ops/csrc/<cell>.cpp``).

Each cell's own module (``ltdrnn.cells.<cell>``) keeps its registration, its maths (the reference
``step`` and ``precompute``), its streaming step and the dispatch (``scan_fast``), which calls in here.
Modules here import nothing from the cell modules. GPU kernels of a cell go beside its module here as
``<cell>_triton.py``: its whole time loop in Triton (on a GPU, or on CPU tensors under ``TRITON_INTERPRET=1``)
as ``torch.library`` operators; ``ltdrnn.ops.triton_support`` (no Triton import) and
``ltdrnn.ops.triton_blocks`` hold what they share. They import Triton, so the cells import them lazily, on
the first scan that takes the ``"triton"`` path.
"""
