"""Results: the run record (:mod:`.record`, the one builder of a run's row), the store (:mod:`.store`, one
row per finished run in SQLite or any SQLAlchemy database), the report (:mod:`.report`, tables and plots
from the store), and what identifies a run (:mod:`.stamps`). The package's public names are these."""

from .record import RECORD_KEYS, config_record, run_record
from .report import (
    comparison_rows,
    detail_rows,
    file_slug,
    has_result,
    html_table,
    markdown_table,
    marked_comparison_rows,
    model_label,
    paper_numbers,
    paper_rows,
    render_report,
    seed_of,
    setting_label,
    summarise,
)
from .stamps import new_run_id, utc_stamp, version_info
from .store import (
    ResultConflict,
    ResultStore,
    create_tables,
    database_exists,
    database_url,
    fold_write_ahead_log,
    make_sqlite_folder,
    retry_creation_race,
    sqlite_file,
)

__all__ = [
    "RECORD_KEYS",
    "ResultConflict",
    "ResultStore",
    "comparison_rows",
    "config_record",
    "create_tables",
    "database_exists",
    "database_url",
    "detail_rows",
    "file_slug",
    "fold_write_ahead_log",
    "has_result",
    "html_table",
    "make_sqlite_folder",
    "markdown_table",
    "marked_comparison_rows",
    "model_label",
    "paper_numbers",
    "paper_rows",
    "render_report",
    "retry_creation_race",
    "run_record",
    "seed_of",
    "setting_label",
    "sqlite_file",
    "summarise",
    "new_run_id",
    "utc_stamp",
    "version_info",
]
