"""The package's structure: imports run one way (the layer list of docs/architecture.md, checked over every
import of the package, lazy imports inside functions and module names given to importlib as strings
included), no import circle, neither between modules nor between the top-level parts of the package, the
cells apart from their fast paths' backends (ops/), argparse only in the CLI, and no module over 600 lines."""

import ast
import re
from pathlib import Path

import ltdrnn

PACKAGE = Path(ltdrnn.__file__).parent
ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
# a string constant that names a module of the package (importlib.import_module("ltdrnn.x"), a table of
# such names) is an import of that module; after "-m" in a list it is the program of a child process
# (``python -m ltdrnn.x``), which imports nothing into this one
MODULE_NAME = re.compile(r"ltdrnn(\.\w+)+")


def layers_of_the_docs(text: str | None = None) -> dict:
    """``{top-level module: level}`` from the numbered list under "Imports run one way"."""
    text = ARCHITECTURE.read_text() if text is None else text
    listing = text[text.index("Imports run one way") :].split("\n\n")[1]
    levels = {}
    for line in listing.splitlines():
        number, names = re.match(r"(\d+)\. [^:]+: (.*)", line).groups()
        for name in re.findall(r"`(\w+)`", names):
            levels[name] = int(number)
    return levels


def package_modules(root: Path = PACKAGE) -> dict:
    """``{dotted module name under the package (without "ltdrnn."): source path}``; a package is named
    by its ``__init__.py``."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imported_names(source: str, module: str, is_package: bool):
    """``(dotted name under the package, line)`` of everything the module ``ltdrnn.<module>`` imports from
    the package: ``import`` and ``from ... import`` at any depth (inside functions too), relative or
    absolute, and string constants that name a module of the package. ``from a import b`` yields ``a.b``
    (the caller keeps the longest name that is a module)."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    tree = ast.parse(source)
    listed = {id(item) for node in ast.walk(tree) if isinstance(node, (ast.List, ast.Tuple)) for item in node.elts}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                target = base + (node.module.split(".") if node.module else [])
            elif (node.module or "").split(".")[0] == "ltdrnn":
                target = node.module.split(".")[1:]
            else:
                continue
            for alias in node.names:
                yield ".".join(target + [alias.name]), node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ltdrnn" and "." in alias.name:
                    yield alias.name.split(".", 1)[1], node.lineno
        elif isinstance(node, (ast.List, ast.Tuple)):
            for before, item in zip([None, *node.elts], node.elts):
                if _module_string(item) and not (isinstance(before, ast.Constant) and before.value == "-m"):
                    yield item.value.split(".", 1)[1], item.lineno
        elif _module_string(node) and id(node) not in listed:
            yield node.value.split(".", 1)[1], node.lineno


def _module_string(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(MODULE_NAME.fullmatch(node.value))


def resolve(name: str, modules: dict) -> str | None:
    """The longest prefix of ``name`` that is a module of the package (``from .x import f`` names
    ``x.f``, the module ``x``); None when none is."""
    parts = name.split(".")
    for stop in range(len(parts), 0, -1):
        candidate = ".".join(parts[:stop])
        if candidate in modules:
            return candidate
    return None


def import_graph(root: Path = PACKAGE) -> dict:
    """``{module: {imported module: first line}}`` over every module of the package."""
    modules = package_modules(root)
    graph = {}
    for module, path in modules.items():
        edges = {}
        for name, line in imported_names(path.read_text(), module, path.name == "__init__.py"):
            target = resolve(name, modules)
            if target is not None and target != module:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def top(module: str) -> str:
    """The top-level part a module belongs to; a ``__main__`` module is an entry point, at the CLI's level."""
    return "cli" if module.split(".")[-1] == "__main__" else module.split(".")[0]


def circles(graph: dict) -> list:
    """Every strongly connected component of more than one node, each as a sorted list (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def one_path_round(graph: dict, component: list) -> list:
    """A shortest circle through the first member of ``component``, as ``[a, b, ..., a]`` (for messages)."""
    start, members = component[0], set(component)
    paths, seen = [[start]], {start}
    while paths:
        path = paths.pop(0)
        for target in graph[path[-1]]:
            if target == start:
                return path + [start]
            if target in members and target not in seen:
                seen.add(target)
                paths.append(path + [target])
    return component


def upward_imports(graph: dict, levels: dict) -> list:
    problems = []
    for module, edges in sorted(graph.items()):
        if not module:  # the package's own __init__: the public API, above nothing it re-exports
            continue
        here = levels.get(top(module))
        assert here is not None, f"{top(module)}: not in the layer list of docs/architecture.md"
        for target, line in sorted(edges.items()):
            there = levels.get(top(target))
            if there is not None and there < here:
                problems.append(f"{module}:{line} (level {here}) imports {target} (level {there})")
    return problems


def part_graph(graph: dict) -> dict:
    """The graph between the top-level parts (``cells``, ``sweep``, ``cli``, ...)."""
    parts = {}
    for module, edges in graph.items():
        if not module:
            continue
        for target in edges:
            if target and top(target) != top(module):
                parts.setdefault(top(module), {}).setdefault(top(target), 0)
    return parts


def describe(graph: dict) -> list:
    """One shortest circle through each member of every circle of ``graph`` (members already on an
    earlier one are skipped), as ``"a -> b -> a"``."""
    found = []
    for component in circles(graph):
        covered = set()
        for member in component:
            if member not in covered:
                path = one_path_round(graph, [member, *(m for m in component if m != member)])
                covered.update(path)
                found.append(" -> ".join(path))
    return found


def test_every_module_has_a_layer_and_imports_only_its_own_or_lower_layers():
    problems = upward_imports(import_graph(), layers_of_the_docs())
    assert not problems, "imports up the layers:\n" + "\n".join(problems)


def test_no_module_imports_itself_round_a_circle():
    graph = import_graph()
    found = describe({m: e for m, e in graph.items() if m})
    assert not found, "import circles between modules:\n" + "\n".join(found)


def test_no_two_parts_of_the_package_import_each_other():
    found = describe(part_graph(import_graph()))
    assert not found, "import circles between the parts of the package:\n" + "\n".join(found)


def test_the_cli_has_a_level_of_its_own_above_every_other_part():
    levels = layers_of_the_docs()
    assert [name for name, level in levels.items() if level == levels["cli"]] == ["cli"]
    assert levels["cli"] == min(levels.values())


# ---- the cells and their fast paths (docs/architecture.md, "The fast paths") ----------------------------
def ops_fronts(modules) -> set:
    """What a cell module may import from ``ops``: the package (the backends, ``resolve``), ``ops.common`` and
    each cell's front ``ops.<cell>`` (a module with ``<cell>_torch`` or ``<cell>_triton`` beside it)."""
    backends = {m.rsplit("_", 1)[0] for m in modules if m.startswith("ops.") and m.endswith(("_torch", "_triton"))}
    return {"ops", "ops.common"} | {m for m in modules if m in backends}


def backend_imports(graph: dict, modules) -> list:
    """``"module:line imports target"`` for each import of an ``ops`` backend by a cell module."""
    fronts = ops_fronts(modules)
    return [
        f"{module}:{line} imports {target}"
        for module, edges in sorted(graph.items())
        if top(module) == "cells"
        for target, line in sorted(edges.items())
        if top(target) == "ops" and target not in fronts
    ]


def test_the_cells_import_no_backend_of_their_fast_paths():
    problems = backend_imports(import_graph(), package_modules())
    assert not problems, "cells importing an ops backend (go through ops/<cell>.py):\n" + "\n".join(problems)


def test_the_fast_paths_import_nothing_from_the_cells():
    levels = layers_of_the_docs()
    assert levels["ops"] > levels["cells"], "ops must sit below cells in docs/architecture.md's layer list"
    problems = [
        f"{module}:{line} imports {target}"
        for module, edges in sorted(import_graph().items())
        if top(module) == "ops"
        for target, line in sorted(edges.items())
        if top(target) == "cells"
    ]
    assert not problems, "ops importing a cell module (read the cell given instead):\n" + "\n".join(problems)


def test_the_backend_rule_sees_a_cell_reaching_past_its_front():
    modules = ["ops", "ops.common", "ops.kernels", "ops.tarnn", "ops.tarnn_torch", "ops.tarnn_triton", "cells.tarnn"]
    assert ops_fronts(modules) == {"ops", "ops.common", "ops.tarnn"}
    graph = {"cells.tarnn": {"ops": 3, "ops.common": 4, "ops.tarnn": 5, "ops.tarnn_torch": 6, "ops.kernels": 7}}
    assert backend_imports(graph, modules) == [
        "cells.tarnn:7 imports ops.kernels",
        "cells.tarnn:6 imports ops.tarnn_torch",
    ]


MAX_LINES = 600


def test_no_module_is_over_600_lines():
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    long = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them): {long}"


def test_argparse_lives_only_in_the_cli():
    parsing = [
        name
        for name, path in package_modules().items()
        if top(name) != "cli" and re.search(r"^\s*(import argparse|from argparse import)", path.read_text(), re.M)
    ]
    assert not parsing, f"argparse outside ltdrnn.cli: {parsing}"


def test_the_check_sees_lazy_relative_absolute_and_importlib_imports(tmp_path):
    root = tmp_path / "ltdrnn"
    (root / "cells").mkdir(parents=True)
    (root / "sweep").mkdir()
    (root / "__init__.py").write_text("")
    (root / "cli.py").write_text("TABLE = {'sweep': 'ltdrnn.sweep'}\nCHILD = ['python', '-m', 'ltdrnn.sweep']\n")
    (root / "train.py").write_text("")
    (root / "cells" / "__init__.py").write_text("")
    (root / "cells" / "base.py").write_text(
        "import torch\nfrom . import probe\n\ndef f():\n    from ..train import train\n    import ltdrnn.cli\n"
    )
    (root / "cells" / "probe.py").write_text("from .base import f\n")
    (root / "sweep" / "__init__.py").write_text("from .worker import run\n")
    (root / "sweep" / "worker.py").write_text("def run():\n    from ..cli import main\n")
    (root / "sweep" / "__main__.py").write_text("from ..cli import main\n")
    graph = import_graph(root)
    assert graph["cells.base"] == {"cells.probe": 2, "train": 5, "cli": 6}
    assert graph["cli"] == {"sweep": 1}  # not the child process's program
    levels = {"cli": 1, "sweep": 2, "train": 3, "cells": 4}
    problems = upward_imports(graph, levels)
    assert problems == [
        "cells.base:6 (level 4) imports cli (level 1)",
        "cells.base:5 (level 4) imports train (level 3)",
        "sweep.worker:2 (level 2) imports cli (level 1)",
    ]  # sweep/__main__.py is an entry point: at the CLI's level, it may import the CLI
    assert describe({m: e for m, e in graph.items() if m}) == [
        "cells.base -> cells.probe -> cells.base",
        "cli -> sweep -> sweep.worker -> cli",
    ]
    assert describe(part_graph(graph)) == ["cli -> sweep -> cli"]


def test_the_layer_list_is_read_from_the_docs():
    text = "Imports run one way, ...:\n\n1. applications: `cli`, `sweep`\n2. trainer: `train`\n\nLevels ..."
    assert layers_of_the_docs(text) == {"cli": 1, "sweep": 1, "train": 2}
