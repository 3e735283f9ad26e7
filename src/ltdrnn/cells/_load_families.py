"""Importing this module imports every cell family module of the package, which registers its cells.

Every module in ``ltdrnn/cells`` other than the infrastructure below is a family. A family that fails
to import is an error here: the registry must never silently lose a cell.
"""

import pkgutil
from importlib import import_module

INFRASTRUCTURE = {"base", "registry", "_load_families", "euler", "masked"}

for _module in sorted(m.name for m in pkgutil.iter_modules(import_module(__package__).__path__)):
    if _module not in INFRASTRUCTURE:
        import_module(f"{__package__}.{_module}")
