"""The machinery of the source cells' fast paths, one module per cell: hand-written autograd Functions
over a whole sequence and the bridges to their compiled time loops (``csrc/<cell>.cpp``).

Each cell's own module (``ltdrnn.cells.<cell>``) keeps its registration, its maths (the reference
``step`` and ``precompute``), its streaming step and the dispatch (``scan_fast``), which calls in here.
Modules here import nothing from the cell modules. GPU kernels of a cell go beside its module here as
``<cell>_triton.py``.
"""
