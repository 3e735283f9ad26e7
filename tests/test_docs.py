"""The docs tell the truth about the code: the examples in the source cells' and Recurrent's docstrings
run (doctests), the cell map of docs/architecture.md is the one the registry generates, every cell
module links its doc page, tests and kernel, and no doc cites a file outside the repository."""

import doctest
import re
import sys
from pathlib import Path

import pytest

import ltdrnn
from ltdrnn import cellmap
from ltdrnn.cells.registry import entry, list_cells

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["tarnn", "srnn", "mist", "irnn", "sarnn", "Recurrent"])
def test_the_examples_in_the_docstrings_run(name):
    cls = ltdrnn.Recurrent if name == "Recurrent" else entry(name).cls
    tests = doctest.DocTestFinder(recurse=False).find(cls, globs={})
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    assert "Examples::" in cls.__doc__
    assert runner.tries >= 5 and runner.failures == 0


def test_the_cell_map_in_the_architecture_page_is_the_generated_one():
    committed = cellmap.committed_map((ROOT / "docs" / "architecture.md").read_text())
    assert committed == cellmap.cell_map(), "regenerate it: python -m ltdrnn.cellmap docs/architecture.md"
    assert all(f"| `{name}` |" in committed for name in list_cells())


def test_the_map_generator_refuses_a_file_without_markers():
    with pytest.raises(ValueError, match="cell map: expected the markers"):
        cellmap.replace_map("# a page without the map\n")
    page = f"before\n{cellmap.BEGIN}\nold rows\n{cellmap.END}\nafter\n"
    assert cellmap.replace_map(page) == f"before\n{cellmap.cell_map()}\nafter\n"


def test_every_cell_module_links_its_doc_tests_and_kernel_and_they_exist():
    modules = {sys.modules[entry(name).cls.__module__] for name in list_cells()}
    for module in modules:
        links = cellmap.module_links(module)
        stem = module.__name__.rsplit(".", 1)[1]
        assert links["Doc"] == f"docs/cells/{stem}.md"
        assert "tests/cells/test_contract.py" in links["Tests"]
        paths = re.findall(r"[\w./-]+\.(?:py|md|cpp|h)\b", " ".join(links.values()))
        missing = [p for p in paths if not (ROOT / p).is_file()]
        assert not missing, f"{module.__name__} links files that do not exist: {missing}"


def test_a_module_without_links_is_named():
    module = type(sys)("ltdrnn.cells.nowhere", "A cell family.\n\nDoc: docs/cells/nowhere.md\n")
    with pytest.raises(ValueError, match="ltdrnn.cells.nowhere: expected a 'Tests: ...' line"):
        cellmap.module_links(module)


# the specification and design notes the project was started from live outside the repository
OUTSIDE = re.compile(r"CELLS\.md|DESIGN\.md|\bDESIGN\b|\bpapers/|/work/")


def test_docs_and_sources_cite_no_file_outside_the_repository():
    files = [
        ROOT / "README.md",
        ROOT / "REPRODUCTION.md",
        *(ROOT / "docs").rglob("*.md"),
        *(
            p
            for p in (ROOT / "src" / "ltdrnn").rglob("*")
            if p.suffix in (".py", ".md", ".yaml", ".c", ".json", ".csv")
        ),
    ]
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        if path.is_file()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not hits, "\n".join(hits)


def test_ci_and_the_pytest_config_run_the_slow_tests_too():
    import tomllib

    pytest_config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "slow" in " ".join(pytest_config["markers"])
    assert "-m" not in pytest_config["addopts"].split() and "slow" not in pytest_config["addopts"]
    runs = [line.split("-m pytest", 1)[1] for line in ci.splitlines() if "-m pytest" in line]
    assert runs and not any(" -m " in f"{args} " or "slow" in args for args in runs)
    assert pytest_config["pythonpath"] == ["tests"]
