"""The source cells' fused machinery, one module per cell and kind: ``<cell>_triton.py`` holds a cell's
Triton kernels (its whole time loop on the GPU, or on CPU tensors under ``TRITON_INTERPRET=1``) and their
``torch.library`` operators; ``triton_support.py`` what those modules share. They import Triton, so the
cells import them lazily, on the first scan that takes the ``"triton"`` path."""
