"""Every parameter count a paper reports (each registry entry's ``param_counts``) is reproduced."""

from __future__ import annotations

import pytest

import ltdrnn


def _cases():
    return [
        pytest.param(name, count, id=f"{name}-d{count.input_size}-H{count.hidden_size}-{i}")
        for name in ltdrnn.list_cells()
        for i, count in enumerate(ltdrnn.entry(name).param_counts)
    ]


CASES = _cases()


def test_some_entries_carry_paper_counts():
    assert CASES, "no registry entry declares a paper parameter count"


@pytest.mark.parametrize("name,count", CASES)
def test_parameter_count_is_within_the_papers_range(name, count):
    assert count.low <= count.high, f"{name}: ParamCount range is empty ({count.low} > {count.high})"
    assert count.source, f"{name}: ParamCount without a source"
    cell = ltdrnn.build(name, count.input_size, count.hidden_size, **count.options)
    total = sum(p.numel() for p in cell.parameters())
    assert count.low <= total <= count.high, (
        f"{name}(d={count.input_size}, H={count.hidden_size}, {count.options}) has {total} parameters; "
        f"expected {count.low}..{count.high} ({count.source})"
    )
