"""Where the C export reads a cell: a cell whose fast paths live in ``ltdrnn.ops`` is read through its front's
public operands (``ops.<cell>.operands(cell)``), never through its attributes, its module's constants or a
private field."""

from __future__ import annotations

import ast
import re

from test_layering import PACKAGE, import_graph, ops_fronts, package_modules, top

CELLS_IR = PACKAGE / "export" / "cells_ir.py"
#: cells with a front in ops/ whose C builder still reads the cell itself; each leaves the set when its builder
#: reads ``ops.<cell>.operands(cell)`` only
NOT_SWITCHED = {"srnn", "mist", "irnn", "sarnn"}
#: what the export may import from the cells: the interface every cell follows and the registry
CELL_INTERFACE = {"cells.base", "cells.registry"}


def cells_with_operands(modules: dict) -> set:
    """The cells whose front ``ops/<cell>.py`` defines ``operands``."""
    fronts = ops_fronts(modules) - {"ops", "ops.common"}
    return {f.split(".", 1)[1] for f in fronts if re.search(r"^def operands\(", modules[f].read_text(), re.M)}


def cell_readers(source: str) -> dict:
    """``{cell name: [(function, its cell parameter)]}`` of cells_ir: each ``@builds(name)`` builder and each
    lambda keyed by a cell's name (the unsupported options)."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and getattr(decorator.func, "id", None) == "builds":
                    for name in decorator.args:
                        found.setdefault(name.value, []).append((node, node.args.args[1].arg))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and isinstance(value, ast.Lambda):
                    found.setdefault(key.value, []).append((value, value.args.args[0].arg))
    return found


def reads_past_operands(function, parameter: str) -> list:
    """``"line: code"`` of each use of ``parameter`` in ``function`` other than as the one argument of an
    ``operands(...)`` call (an attribute read, or the cell handed to a helper)."""
    parents = {id(child): node for node in ast.walk(function) for child in ast.iter_child_nodes(node)}
    uses = [node for node in ast.walk(function) if isinstance(node, ast.Name) and node.id == parameter]
    return [
        f"{node.lineno}: {ast.unparse(parents[id(node)])}"
        for node in sorted(uses, key=lambda node: node.lineno)
        if not _operands_call(parents[id(node)])
    ]


def _operands_call(node) -> bool:
    function = node.func if isinstance(node, ast.Call) else None
    name = getattr(function, "attr", None) or getattr(function, "id", None)
    return name == "operands" and len(node.args) == 1 and not node.keywords


def private_reads(source: str) -> list:
    """``"line: code"`` of each read of an attribute with a leading underscore on anything but ``self``/``cls``."""
    return [
        f"{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    ]


def test_the_export_reads_a_cell_with_ops_through_its_operands_only():
    modules = package_modules()
    moved = cells_with_operands(modules)
    readers = cell_readers(CELLS_IR.read_text())
    problems = [
        f"cells_ir.py:{line} ({name})"
        for name in sorted(moved - NOT_SWITCHED)
        for function, parameter in readers.get(name, [])
        for line in reads_past_operands(function, parameter)
    ]
    switched = [name for name in sorted(NOT_SWITCHED & moved) if not any(
        reads_past_operands(function, parameter) for function, parameter in readers.get(name, []))]  # fmt: skip
    allowed = CELL_INTERFACE | {f"cells.{name}" for name in NOT_SWITCHED}
    problems += [
        f"{module}:{line} imports {target}"
        for module, edges in sorted(import_graph().items())
        if top(module) == "export"
        for target, line in sorted(edges.items())
        if top(target) == "cells" and target not in allowed
    ]
    problems += [
        f"{name}:{line}"
        for name, path in sorted(modules.items())
        if top(name) == "export"
        for line in private_reads(path.read_text())
    ]
    assert not problems, "the export reading a cell past ops.<cell>.operands(cell):\n" + "\n".join(problems)
    assert not switched, f"builders that read only the operands now: take {switched} out of NOT_SWITCHED"


def test_the_operands_rule_sees_a_builder_reading_the_cell():
    source = """
@builds("tarnn")
def _tarnn(g, cell, pre, x, parts):
    op = ops_tarnn.operands(cell)
    return _apply_a(g, cell, op.weight_U) + cell.weight_B2

@builds("lstm")
def _lstm(g, cell, pre, x, parts):
    return cell.weight_ih

UNSUPPORTED = {"tarnn": lambda c: c.per_time_step, "irnn": lambda c: operands(c).eta.dim() == 2}
"""
    readers = cell_readers(source)
    assert sorted(readers) == ["irnn", "lstm", "tarnn"]
    ((builder, parameter), (options, name)) = readers["tarnn"]
    assert (parameter, name) == ("cell", "c")
    assert reads_past_operands(builder, parameter) == ["5: _apply_a(g, cell, op.weight_U)", "5: cell.weight_B2"]
    assert reads_past_operands(options, name) == ["11: c.per_time_step"]
    assert reads_past_operands(*readers["irnn"][0]) == []
    private = private_reads("cell._betas\nself._cache\nmodel.__class__\nmodule._TASKS[1]")
    assert private == ["1: cell._betas", "4: module._TASKS"]
