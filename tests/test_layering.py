"""Imports run one way: the layer list of docs/architecture.md, checked over every import of the package
(lazy imports inside functions included)."""

import ast
import re
from pathlib import Path

import ltdrnn

PACKAGE = Path(ltdrnn.__file__).parent
ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def layers_of_the_docs():
    """``{top-level module: level}`` from the numbered list under "Imports run one way"."""
    text = ARCHITECTURE.read_text()
    listing = text[text.index("Imports run one way") :].split("\n\n")[1]
    levels = {}
    for line in listing.splitlines():
        number, names = re.match(r"(\d+)\. [^:]+: (.*)", line).groups()
        for name in re.findall(r"`(\w+)`", names):
            levels[name] = int(number)
    return levels


def package_imports(source: str, module: tuple):
    """The top-level package modules that ``source``, the module ``ltdrnn.<module...>``, imports, with
    the line of each."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(module[:-1])[: len(module) - node.level]
            target = base + (node.module.split(".") if node.module else [node.names[0].name])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ltdrnn."):
            target = node.module.split(".")[1:]
        elif isinstance(node, ast.Import):
            target = next((a.name.split(".")[1:] for a in node.names if a.name.startswith("ltdrnn.")), [])
        else:
            continue
        if target:
            yield target[0], node.lineno


def test_every_module_has_a_layer_and_imports_only_its_own_or_lower_layers():
    levels = layers_of_the_docs()
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).with_suffix("").parts
        top = module[0]
        if top == "__init__":
            continue
        assert top in levels, f"{top}: not in the layer list of docs/architecture.md"
        for target, line in package_imports(path.read_text(), module):
            if target in levels and levels[target] < levels[top]:
                upward.append(
                    f"{path.relative_to(PACKAGE)}:{line} ({top}, level {levels[top]}) imports "
                    f"{target} (level {levels[target]})"
                )
    assert not upward, "imports up the layers:\n" + "\n".join(upward)


def test_the_check_sees_upward_imports_lazy_relative_or_absolute():
    levels = layers_of_the_docs()
    source = "import torch\nfrom .base import Cell\n\ndef f():\n    from ..train import train\n    import ltdrnn.cli\n"
    assert list(package_imports(source, ("cells", "probe"))) == [("cells", 2), ("train", 5), ("cli", 6)]
    assert levels["train"] < levels["cells"] and levels["cli"] < levels["cells"]
