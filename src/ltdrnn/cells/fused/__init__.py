"""The machinery of the source cells' fast paths, one module per cell: hand-written autograd Functions
over a whole sequence and the bridges to their compiled time loops (``csrc/<cell>.cpp``).

Each cell's own module (``ltdrnn.cells.<cell>``) keeps its registration, its maths (the reference
``step`` and ``precompute``), its streaming step and the dispatch (``scan_fast``), which calls in here.
Modules here import nothing from the cell modules. GPU kernels of a cell go beside its module here as
``<cell>_triton.py``: its whole time loop in Triton (on a GPU, or on CPU tensors under ``TRITON_INTERPRET=1``)
as ``torch.library`` operators; ``triton_support.py`` (no Triton import) and ``triton_blocks.py`` hold what
they share. They import Triton, so the cells import them lazily, on the first scan that takes the
``"triton"`` path.
"""
