"""A text export of a results database, so that a change of results can be reviewed in a diff.

One JSON object per line: every table of the database (``runs``, and the others the project keeps there,
such as ``reproduce_analyses``), every row sorted by table and primary key, keys sorted, the JSON text
columns decoded into objects. The same database always gives the same text. Left out: the ``run_key`` and ``history`` of
``runs`` (every validation of a run, most of the bytes and none of the results), which the database
keeps.

The export of a SQLite file lies beside it with the suffix ``.jsonl`` (``reproduction/results.db`` ->
``reproduction/results.jsonl``). ``ltdrnn report --store DB --export-jsonl`` writes it; ``ltdrnn
reproduce report`` and ``ltdrnn ucr report``, which publish a database, rewrite it whenever one already
lies beside their database. ``tests/test_results.py`` checks that every committed database's export is
in sync.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

from .store import database_exists, database_url, sqlite_file

#: columns left out of the export, per table
LEFT_OUT = {"runs": ("history", "run_key")}


def export_lines(location: str | Path) -> List[str]:
    """The export of the database at ``location`` (a path or a URL), one line per row; it only reads."""
    if not database_exists(location):
        raise FileNotFoundError(f"{location}: no results database there")
    import sqlalchemy as sa

    engine = sa.create_engine(database_url(location))
    try:
        metadata = sa.MetaData()
        metadata.reflect(engine)
        lines = []
        with engine.connect() as connection:
            for name in sorted(metadata.tables):
                table = metadata.tables[name]
                keys = list(table.primary_key.columns) or list(table.columns)
                for row in connection.execute(sa.select(table).order_by(*keys)).mappings():
                    lines.append(_line(name, dict(row)))
        return lines
    finally:
        engine.dispose()


def _line(table: str, row: dict) -> str:
    item = {"table": table}
    for column, value in row.items():
        if column in LEFT_OUT.get(table, ()):
            continue
        if isinstance(value, str) and value[:1] in "{[":
            try:
                value = json.loads(value)
            except ValueError:
                pass
        item[column] = value
    return json.dumps(item, sort_keys=True, ensure_ascii=False, allow_nan=True)


def export_path(location: str | Path) -> Path:
    """Where the export of a SQLite database lies: beside it, suffix ``.jsonl``."""
    path = sqlite_file(database_url(location))
    if path is None:
        raise ValueError(f"store: a text export lies beside a SQLite file, got {location!r}")
    return path.with_suffix(".jsonl")


def write_export(location: str | Path, path: Optional[str | Path] = None) -> Path:
    """Write the export of the database at ``location`` to ``path`` (default :func:`export_path`), atomically."""
    from ..checkpoint import atomic_write

    target = Path(path) if path is not None else export_path(location)
    text = "".join(line + "\n" for line in export_lines(location))
    atomic_write(target, text.encode())
    return target


def refresh_export(location: str | Path) -> Optional[Path]:
    """Rewrite the export beside a SQLite database if there is one (a database published with its
    export); returns its path, or None when there is none."""
    path = sqlite_file(database_url(location))
    if path is None or not path.with_suffix(".jsonl").is_file():
        return None
    return write_export(location)
