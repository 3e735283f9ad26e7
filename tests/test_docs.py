"""The docs tell the truth about the code: the examples in the source cells' and Recurrent's docstrings
run (doctests), the cell map of docs/architecture.md is the one the registry generates, every cell
module links its doc page, tests and kernel, and no doc cites a file outside the repository."""

import ast
import doctest
import inspect
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
        *(ROOT / "reproduction").rglob("*.md"),
        *(p for p in (ROOT / "lab").rglob("*") if p.suffix in (".md", ".py", ".sh")),
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


# a path into the repository's own folders, as prose and comments cite it ("lab/notes/tarnn.md")
CITED_PATH = re.compile(r"(?<![\w./-])((?:docs|lab|reproduction|benchmarks|examples)/[\w./-]*\w)(?![\w-]*[*{])")


def test_every_repository_path_the_docs_and_sources_cite_exists():
    # moved files leave no stale citation behind: in a comment as much as in a link
    files = [
        ROOT / "README.md",
        ROOT / "REPRODUCTION.md",
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "reproduction").rglob("*.md"),
        *(p for p in (ROOT / "src" / "ltdrnn").rglob("*") if p.suffix in (".py", ".h", ".cpp", ".yaml", ".md")),
    ]
    missing = [
        f"{path.relative_to(ROOT)}:{number}: {cited}"
        for path in files
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        for cited in CITED_PATH.findall(line)
        if not (ROOT / cited).exists()
    ]
    assert not missing, "\n".join(missing)


def _code_strings(path: Path):
    """The string constants of a module that are not docstrings, with their line numbers."""
    tree = ast.parse(path.read_text())
    documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, documented) and node.body and isinstance(node.body[0], ast.Expr)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def test_the_package_neither_ships_nor_reads_the_lab():
    # lab/ is the dated notebook: a comment or docstring may cite a note there, code may not open it
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["packages"]["find"]["where"] == ["src"]
    assert not any("lab" in pattern for patterns in setuptools["package-data"].values() for pattern in patterns)
    reads = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for path in sorted((ROOT / "src" / "ltdrnn").rglob("*.py"))
        for line, text in _code_strings(path)
        if re.search(r"(^|[\s/\"'`(])lab/", text)
    ]
    assert not reads, "the package reads from lab/:\n" + "\n".join(reads)


def test_ci_and_the_pytest_config_run_the_slow_tests_too():
    import tomllib

    pytest_config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "slow" in " ".join(pytest_config["markers"])
    assert "-m" not in pytest_config["addopts"].split() and "slow" not in pytest_config["addopts"]
    runs = [line.split("-m pytest", 1)[1] for line in ci.splitlines() if "-m pytest" in line]
    assert runs and not any(" -m " in f"{args} " or "slow" in args for args in runs)
    assert pytest_config["pythonpath"] == ["tests"]


# The README's two commands: the first sets up and runs the main job, the second is what CI runs.
def _readme_command(number: int) -> str:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
    lines = [line for block in blocks for line in block.splitlines()]
    for index, line in enumerate(lines):
        if line.startswith(f"# {number}. "):
            return lines[index + 1]
    raise AssertionError(f"README.md: expected a bash line after '# {number}. ...'")


def test_the_readmes_second_command_is_what_ci_runs():
    ci_steps = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.startswith(("#", "set ", "cd "))
    ]
    # the optional device toolchains (root, apt) come first; the README says so beside the command
    toolchains = ".ci/install-device-toolchains"
    assert ci_steps[0].startswith(toolchains) and toolchains in (ROOT / "README.md").read_text()
    assert _readme_command(2).split(" && ") == ci_steps[1:]


def test_the_readmes_first_command_installs_the_pinned_setup_and_runs_the_main_job():
    steps = _readme_command(1).split(" && ")
    assert steps[0] == "python3 -m venv .venv"
    assert steps[1].startswith(".venv/bin/pip install -c constraints.txt -e ")
    assert steps[-1] == ".venv/bin/ltdrnn run"


def test_the_readme_gives_no_clock_times_of_single_runs():
    readme = (ROOT / "README.md").read_text()
    assert not re.search(r"\bUTC\b|\d+ min \d+ s\b|\d{2}:\d{2}", readme)


SOURCE_CELLS = ["tarnn", "srnn", "mist", "irnn", "sarnn"]
REQUIRED_SECTIONS = {
    "equations": r"^## Equations",
    "options": r"^## (Options|Parameters) and defaults",
    "the paper's settings": r"^## (Paper settings|Per-task settings in the paper)",
    "deviations": r"^## Choices and deviations",
    "measured results": r"^## Measured",
}


@pytest.mark.parametrize("cell", SOURCE_CELLS)
def test_each_source_cell_page_is_a_short_reference_with_its_measured_results_linked(cell):
    page = (ROOT / "docs" / "cells" / f"{cell}.md").read_text()
    missing = [name for name, heading in REQUIRED_SECTIONS.items() if not re.search(heading, page, flags=re.M)]
    assert not missing, f"docs/cells/{cell}.md lacks a section for: {', '.join(missing)}"
    measured = page[re.search(r"^## Measured", page, flags=re.M).start() :]
    assert "REPRODUCTION.md#" in measured and "| task |" in measured
    assert "sample std" in page, f"docs/cells/{cell}.md: say once that ± is the sample std"
    assert f"../../lab/notes/{cell}" in page, f"docs/cells/{cell}.md: link its dated notes in lab/notes/"
    assert len(page.split()) <= 3000, f"docs/cells/{cell}.md has {len(page.split())} words; move history to lab/notes/"


def _documented_defaults(page: str) -> dict:
    """``{option: default column}`` from the rows of a cell page's options table (a row may name several)."""
    start = re.search(REQUIRED_SECTIONS["options"], page, flags=re.M).end()
    end = page.find("\n## ", start)
    rows = re.findall(r"^\|([^|]*)\|([^|]*)\|", page[start : end if end >= 0 else None], flags=re.M)
    return {name: default.strip() for names, default in rows for name in re.findall(r"`(\w+)`", names)}


def _shows(text: str, default) -> bool:
    if repr(default).replace("'", '"') in text or str(default) in text:
        return True
    numbers = re.findall(r"-?\d[\d.]*(?:e-?\d+)?", text.replace("−", "-"))
    return isinstance(default, (int, float)) and any(float(n) == default for n in numbers)


@pytest.mark.parametrize("cell", SOURCE_CELLS)
def test_each_source_cell_page_documents_every_constructor_option_with_its_default(cell):
    documented = _documented_defaults((ROOT / "docs" / "cells" / f"{cell}.md").read_text())
    parameters = inspect.signature(entry(cell).cls.__init__).parameters.values()
    options = {
        p.name: p.default for p in parameters if p.name not in ("self", "input_size", "hidden_size", "device", "dtype")
    }
    missing = sorted(set(options) - set(documented))
    assert not missing, f"docs/cells/{cell}.md: the options table lacks {missing}"
    single = {name: text for name, text in documented.items() if "," not in text}
    wrong = [
        f"{name}: {single[name]!r}, code {options[name]!r}"
        for name in single
        if name in options and not _shows(single[name], options[name])
    ]
    assert not wrong, f"docs/cells/{cell}.md: defaults differ from the constructor's: {wrong}"


def test_each_notes_file_is_dated():
    notes = sorted((ROOT / "lab" / "notes").glob("*.md"))
    assert notes
    dated = re.compile(r"^## \d{4}-\d{2}-\d{2}", re.M)
    undated = [p.name for p in notes if p.name != "README.md" and not dated.search(p.read_text())]
    assert not undated, f"notes without a dated heading: {undated}"


def test_relative_links_in_the_docs_point_to_files_that_exist():
    pages = [ROOT / "README.md", ROOT / "REPRODUCTION.md", *(ROOT / "docs").rglob("*.md")]
    pages += [*(ROOT / "reproduction").rglob("*.md"), *(ROOT / "lab").rglob("*.md")]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, "\n".join(broken)


def _claim_counts(text: str, statuses) -> dict:
    """Per status, the number written just before it (``4 reproduced``), or None where it is not written."""
    return {s: (int(m.group(1)) if (m := re.search(rf"(\d+) {s}\b", text)) else None) for s in statuses}


def test_the_readme_gives_the_reproduction_page_s_counts():
    """The README's summary line is written by hand; it must say what the generated page says."""
    headline = next(line for line in (ROOT / "REPRODUCTION.md").read_text().splitlines() if line.startswith("**"))
    readme = next(
        " ".join(block.split())
        for block in (ROOT / "README.md").read_text().split("\n- ")
        if block.startswith("**Reproduction**")
    )
    page = _claim_counts(headline, ("claims", "reproduced", "partly", "not reproduced", "proxy", "not measured"))
    said = _claim_counts(readme, ("claims", "reproduced", "partly", "not reproduced"))
    proxy = re.search(r"(\d+) runs? on a proxy", readme)
    said["proxy"] = int(proxy.group(1)) if proxy else None  # as the page: not written when none
    waiting = re.search(r"(\d+) tuned on seeds 1-3 and not yet measured", readme)
    said["not measured"] = int(waiting.group(1)) if waiting else None  # as the page: not written when none
    assert said == page, f"README says {said}, REPRODUCTION.md says {page}"
