"""Where the C export reads a cell, and how often it writes the C: a cell whose fast paths live in ``ltdrnn.ops``
is read through its front's public operands (``ops.<cell>.operands(cell)``), never through its attributes, its
module's constants or a private field; and an export generates each C step once, compiling the bytes it writes."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from harness_helpers import TinyTask
from ltdrnn.export import c_build, c_export, export
from ltdrnn.models import SequenceModel
from test_export import needs_cc
from test_layering import PACKAGE, import_graph, ops_fronts, package_modules, top

CELLS_IR = PACKAGE / "export" / "cells_ir.py"
#: what the export may import from the cells: the interface every cell follows and the registry
CELL_INTERFACE = {"cells.base", "cells.registry"}
SOURCE_CELLS = {"tarnn", "srnn", "mist", "irnn", "sarnn"}


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
    assert SOURCE_CELLS <= moved & set(readers), "each source cell: a front with operands and a C builder"
    problems = [
        f"cells_ir.py:{line} ({name})"
        for name in sorted(moved)
        for function, parameter in readers.get(name, [])
        for line in reads_past_operands(function, parameter)
    ]
    problems += [
        f"{module}:{line} imports {target}"
        for module, edges in sorted(import_graph().items())
        if top(module) == "export"
        for target, line in sorted(edges.items())
        if top(target) == "cells" and target not in CELL_INTERFACE
    ]
    problems += [
        f"{name}:{line}"
        for name, path in sorted(modules.items())
        if top(name) == "export"
        for line in private_reads(path.read_text())
    ]
    assert not problems, "the export reading a cell past ops.<cell>.operands(cell):\n" + "\n".join(problems)


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


# ---- the C is generated once per export ----------------------------------------------------------------
@needs_cc
@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
def test_an_export_generates_each_c_step_once_and_compiles_what_it_writes(tmp_path, monkeypatch, int8):
    """The exported step used to be generated twice: once for the report's costs, again to be written."""
    generated, compiled = [], []
    original, compile_c = c_export.generate_c, c_build.compile_c

    def counted(*args, **kwargs):
        generated.append(original(*args, **kwargs))
        return generated[-1]

    def recorded(sources, target, shared, flags=()):
        compiled.extend(Path(source).read_text() for source in sources if Path(source).name == "net.c")
        return compile_c(sources, target, shared, flags)

    for module in list(sys.modules.values()):  # every binding of the generator inside the export package
        if module.__name__.startswith("ltdrnn.export") and getattr(module, "generate_c", None) is original:
            monkeypatch.setattr(module, "generate_c", counted)
    monkeypatch.setattr(c_build, "compile_c", recorded)
    model = SequenceModel("tarnn", 2, 8, 2, "classifier").eval()
    report = export(model, "c", tmp_path, int8=int8, name="net", task=TinyTask(), latency_steps=5)
    assert sorted(source.int8 for source in generated) == [False, True]  # each once: both costs are reported
    (exported,) = [source for source in generated if source.int8 == int8]
    assert (tmp_path / "net.c").read_text() == exported.source
    assert (tmp_path / "net.h").read_text() == exported.header
    assert len(compiled) == 2 and set(compiled) == {exported.source}  # the parity library and the latency bench
    assert report["c"]["int8" if int8 else "fp32"]["flash_bytes"] == exported.flash_bytes
    assert report["parity"] is not None and report["latency_us"]["c_step"] > 0
