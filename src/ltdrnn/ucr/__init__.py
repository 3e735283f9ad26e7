"""The UCR/UEA benchmark: one recipe, every offline set, every chosen cell, beside MiniRocket.

    ltdrnn ucr sets [--splits]                         the classification sets found offline (and their splits)
    ltdrnn ucr run [--sets A,B] [--cells lstm,srnn] [--seeds 3] [--budget default|quick]
                   [--set KEY=VALUE ...] [--study NAME] [--store DB] [--no-minirocket]
    ltdrnn ucr report [--store DB] [--study NAME] [--page benchmarks-ucr.md]

This repository's benchmark keeps its database and page in docs/ (``--store docs/ucr/results.db --page
docs/benchmarks-ucr.md --notes docs/ucr/notes.md``); the command line is :mod:`ltdrnn.cli.ucr`.

Protocol (fixed): each set's official TRAIN file is split into a stratified 80 % that trains and 20 %
that validates (``split_seed`` 0); the checkpoint with the best validation accuracy is tested on the
official TEST file; every (cell, set) runs with seeds 0, 1, 2 and is reported as mean ± std. Every run
is a normal ``train(cfg)`` run of the preset ``ucr/default`` (plus the budget's and the user's
overrides), stored in the results database under ``study``. MiniRocket (aeon's ``MiniRocketClassifier``,
10,000 kernels, ridge classifier) is fitted on the whole official TRAIN file with the same seeds and
stored in the same study as cell ``minirocket``. A run already in the store is not run again, so an
interrupted benchmark continues where it stopped. Every set is read and checked before any training (both
files, scaling, classes, the validation split); a bad set is reported by name with what is wrong and
skipped, and the others run. A set without class labels (``@classLabel false``: a regression set) is
such a set when asked for by name; it is never picked by default. A set whose validation split would be
empty (every class with at most 2 TRAIN series at ``val_fraction`` 0.2) is such a set: the protocol
chooses the tested checkpoint on validation, and a choice on nothing is no choice, so the set is skipped
with a message that gives the override that runs it, ``--set train.select_on=last`` (tested on the final
weights, in a study of its own, which the page marks). It is never run on another rule without being asked.

``report`` reads only the database (and the packaged published numbers,
``presets/ucr/published.csv``) and writes the page: per-set accuracy, average ranks with aeon's
critical-difference diagram, the splits of each set (read from the data where it renders) with the
checkpoint its runs tested (a run tested on its final weights is marked †), parameters and training time,
and the goal check.

The package, by concern: :mod:`.benchmark` (the sets, the runs, MiniRocket) and :mod:`.page` (the page).
"""

from .benchmark import (
    BUDGETS,
    DEFAULT_CELLS,
    DEFAULT_PAGE,
    DEFAULT_RUNS,
    PRESET,
    REFERENCE,
    SEEDS,
    SOURCE_CELLS,
    BenchmarkError,
    BenchmarkOutcome,
    SplitSizes,
    available_sets,
    benchmark_key,
    benchmark_runs,
    check_sets,
    default_study,
    fit_minirocket,
    minirocket_record,
    padded_array,
    preset_split_sizes,
    published_numbers,
    run_benchmark,
    run_config,
    set_problem,
    split_sizes,
    unlabelled_sets,
)
from .page import (
    accuracy_rows,
    average_ranks,
    cd_diagram,
    collect,
    complete_sets,
    cost_rows,
    goal_lines,
    mean_std,
    rank_rows,
    recipe_rows,
    render_page,
    split_rows,
    tested_checkpoint,
)

__all__ = [
    "BUDGETS",
    "DEFAULT_CELLS",
    "DEFAULT_PAGE",
    "DEFAULT_RUNS",
    "PRESET",
    "REFERENCE",
    "SEEDS",
    "SOURCE_CELLS",
    "BenchmarkError",
    "BenchmarkOutcome",
    "SplitSizes",
    "accuracy_rows",
    "available_sets",
    "average_ranks",
    "benchmark_key",
    "benchmark_runs",
    "cd_diagram",
    "check_sets",
    "collect",
    "complete_sets",
    "cost_rows",
    "default_study",
    "fit_minirocket",
    "goal_lines",
    "mean_std",
    "minirocket_record",
    "padded_array",
    "preset_split_sizes",
    "published_numbers",
    "rank_rows",
    "recipe_rows",
    "render_page",
    "run_benchmark",
    "run_config",
    "set_problem",
    "split_sizes",
    "split_rows",
    "tested_checkpoint",
    "unlabelled_sets",
]
