"""Everything that computes a source cell fast (docs/architecture.md, "The fast paths").

``kernels.py`` builds and loads the compiled C++ loops of ``csrc/``; ``triton_support.py`` and
``triton_blocks.py`` hold what the Triton kernels share; ``common.py`` what every fast path shares
(activation codes, operand caches, the final state at each length, autocast); ``memory.py`` work buffers.
"""
