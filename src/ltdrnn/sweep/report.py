"""The study's report: the papers' top-k summary, the best trials, parameter importance, a sensitivity
plot, and the markdown of it all (``ltdrnn sweep report``, ``ltdrnn report --study``)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..analysis.plots import pyplot, save_figure
from ..config import DEFAULT_STORE, ConfigError
from ..results import database_exists, file_slug, markdown_table
from ..results.store import read_only_url
from .storage import BUDGET_ATTR, SPEC_ATTR, fail_stale_trials, open_storage, optuna_module


def top_k(spec_report: Dict[str, Any], finished: int, complete: int) -> int:
    """How many trials the papers' summary uses: ``top_k``, or ``top_fraction`` of the ``finished``
    trials (complete + pruned or diverged; the MIST protocol: 10% of 50 = 5), at least 1 and at most the
    ``complete`` ones that can be ranked."""
    wanted = int(spec_report["top_k"]) if "top_k" in spec_report else round(spec_report["top_fraction"] * finished)
    return max(1, min(wanted, complete))


def _mean_std(values: List[float]) -> str:
    if not values:
        return "-"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.4g} ± {std:.2g}"


def _format_param(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def study_summary(study: str, store: str = DEFAULT_STORE) -> Dict[str, Any]:
    """The study as plain data: trials by state, the ranked finished trials, the top-k summary, importances."""
    optuna = optuna_module()
    from optuna.trial import TrialState

    if not has_study(study, store):
        raise ConfigError(
            f"study: no study {study!r} in {store}; run one with 'ltdrnn sweep run' or name "
            "the database that holds it (--store)"
        )
    handle = optuna.load_study(study_name=study, storage=open_storage(store, heartbeat_s=30))
    fail_stale_trials(handle)  # a dead worker's trial shows as FAIL, not as running forever
    trials = handle.get_trials(deepcopy=False)
    spec = handle.user_attrs.get(SPEC_ATTR) or {"params": [], "report": {"top_fraction": 0.1}}
    maximize = handle.direction == optuna.study.StudyDirection.MAXIMIZE
    complete = sorted((t for t in trials if t.state == TrialState.COMPLETE), key=lambda t: t.value, reverse=maximize)
    finished = len(complete) + sum(t.state == TrialState.PRUNED for t in trials)
    k = top_k(spec["report"], finished, len(complete)) if complete else 0
    top = complete[:k]
    log_params = {p["name"] for p in spec["params"] if p["distribution"] == "log-float"}
    params_summary = {}
    for name in {n for t in top for n in t.params}:
        values = [t.params[name] for t in top if name in t.params]
        if all(isinstance(v, (int, float)) for v in values):
            if name in log_params:
                logs = [math.log10(v) for v in values]
                params_summary[f"log10({name})"] = _mean_std(logs)
            else:
                params_summary[name] = _mean_std([float(v) for v in values])
        else:
            params_summary[name] = ", ".join(f"{v} x{values.count(v)}" for v in sorted(set(values), key=str))
    tests = [t.user_attrs["test_metric"] for t in top if t.user_attrs.get("test_metric") is not None]
    states = {s.name: sum(t.state == s for t in trials) for s in TrialState}
    return {
        "study": study,
        "direction": "maximize" if maximize else "minimize",
        "spec": spec,
        "budget": handle.user_attrs.get(BUDGET_ATTR),
        "states": {k: v for k, v in states.items() if v},
        "trials": trials,
        "ranked": complete,
        "k": k,
        "top": {
            "validation": _mean_std([t.value for t in top]),
            "test": _mean_std(tests),
            "metric_name": top[0].user_attrs.get("metric_name", "value") if top else None,
            "params": params_summary,
            "n_test": len(tests),
        },
        "importance": parameter_importance(handle, complete, log_params),
    }


def parameter_importance(handle, complete, log_params) -> Dict[str, Any]:
    """Optuna's importance evaluator; when it cannot run (too few trials, one value), the absolute
    Spearman rank correlation of each numeric parameter (log10 for log-float) with the objective."""
    optuna = optuna_module()
    if len(complete) >= 2:
        try:
            return {
                "method": "optuna.importance.get_param_importances",
                "values": dict(optuna.importance.get_param_importances(handle)),
            }
        except (RuntimeError, ValueError, ZeroDivisionError):
            pass
    values = {}
    for name in sorted({n for t in complete for n in t.params}):
        pairs = [(t.params[name], t.value) for t in complete if isinstance(t.params.get(name), (int, float))]
        if len(pairs) >= 3:
            xs = [math.log10(x) if name in log_params else x for x, _ in pairs]
            rho = _spearman(xs, [v for _, v in pairs])
            if rho is not None:
                values[name] = abs(rho)
    return {"method": "|Spearman rank correlation| with the objective", "values": values}


def _spearman(xs: List[float], ys: List[float]) -> Optional[float]:
    def ranks(values):
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for m in range(i, j + 1):
                out[order[m]] = (i + j) / 2
            i = j + 1
        return out

    rx, ry = ranks(xs), ranks(ys)
    if len(set(rx)) < 2 or len(set(ry)) < 2:
        return None
    return statistics.correlation(rx, ry)


def sensitivity_plot(summary: Dict[str, Any], path: Path) -> bool:
    """Objective against each parameter (log axis for log-float), top-k marked; False if nothing to plot."""
    ranked = summary["ranked"]
    names = [p["name"] for p in summary["spec"]["params"]]
    if not ranked or not names:
        return False
    plt = pyplot()
    log_params = {p["name"] for p in summary["spec"]["params"] if p["distribution"] == "log-float"}
    figure, axes = plt.subplots(1, len(names), figsize=(4 * len(names), 3.2), squeeze=False)
    top = set(t.number for t in ranked[: summary["k"]])
    for axis, name in zip(axes[0], names):
        points = [(t.params[name], t.value, t.number in top) for t in ranked if name in t.params]
        numeric = all(isinstance(x, (int, float)) for x, _, _ in points)
        labels = sorted({str(x) for x, _, _ in points})
        xs = [x if numeric else labels.index(str(x)) for x, _, _ in points]
        axis.scatter(xs, [v for _, v, _ in points], c=["tab:red" if best else "tab:blue" for *_, best in points], s=18)
        if numeric and name in log_params:
            axis.set_xscale("log")
        if not numeric:
            axis.set_xticks(range(len(labels)), labels, rotation=30)
        axis.set_xlabel(name)
        axis.set_ylabel("validation " + (summary["top"]["metric_name"] or "value"))
    figure.suptitle(f"{summary['study']}: red = top {summary['k']}")
    save_figure(figure, path)
    return True


def study_markdown(summary: Dict[str, Any], figure: Optional[str] = None, best: int = 10) -> str:
    """The study as markdown: states, the papers' top-k summary, the best trials, importances, failures."""
    spec, top = summary["spec"], summary["top"]
    ranked = summary["ranked"]
    metric = top["metric_name"] or "value"
    states = ", ".join(f"{n} {c}" for n, c in summary["states"].items())
    lines = [
        f"## Sweep {summary['study']}",
        "",
        f"{spec.get('description', '')}".strip(),
        f"Base `{spec.get('base')}`, sampler {spec.get('sampler')}, {summary['direction']} validation "
        f"{metric}; budget {summary['budget']} trials; trials by state: {states}.",
        "",
    ]
    if ranked:
        rule = (
            f"top {spec['report']['top_fraction']:.0%}"
            if "top_fraction" in spec["report"]
            else f"top {spec['report']['top_k']:g}"
        )
        finished = len(ranked) + summary["states"].get("PRUNED", 0)
        names = [p["name"] for p in spec["params"]]
        lines += [
            f"### Top {summary['k']} of {finished} finished trials by validation ({rule}; mean ± std)",
            "",
            markdown_table(
                [
                    ["quantity", "mean ± std"],
                    [f"validation {metric}", top["validation"]],
                    [f"test {metric} (n={top['n_test']})", top["test"]],
                    *sorted(top["params"].items()),
                ]
            ),
            "",
            f"### Best {min(best, len(ranked))} trials",
            "",
            markdown_table(
                [["rank", "trial", "validation", "test", *names, "run id"]]
                + [
                    [
                        i,
                        t.number,
                        f"{t.value:.4g}",
                        _format_param(t.user_attrs.get("test_metric")),
                        *(_format_param(t.params.get(n, "-")) for n in names),
                        t.user_attrs.get("run_id", "-"),
                    ]
                    for i, t in enumerate(ranked[:best], 1)
                ]
            ),
        ]
    importance = summary["importance"]
    if importance["values"]:
        lines += [
            "",
            f"### Parameter importance ({importance['method']})",
            "",
            markdown_table(
                [["parameter", "importance"]]
                + [[n, f"{v:.3f}"] for n, v in sorted(importance["values"].items(), key=lambda kv: -kv[1])]
            ),
        ]
    if figure:
        lines += ["", f"![sensitivity]({figure})"]
    unfinished = [t for t in summary["trials"] if t.state.name not in ("COMPLETE", "PRUNED")]
    if unfinished:
        lines += [
            "",
            "### Trials not completed",
            "",
            markdown_table(
                [["trial", "state", "retry of", "reason"]]
                + [[t.number, t.state.name, t.system_attrs.get("failed_trial", "-"), reason(t)] for t in unfinished]
            ),
        ]
    return "\n".join(lines) + "\n"


def reason(trial) -> str:
    """Why a trial did not complete: given back unrun, its error, or a lost worker."""
    return (
        trial.user_attrs.get("not_run")
        or trial.user_attrs.get("error")
        or ("worker stopped sending heartbeats" if trial.state.name == "FAIL" else "")
    )


def has_study(study: str, store: str = DEFAULT_STORE) -> bool:
    """Whether the database ``store`` holds a study named ``study``. It only reads: a SQLite file that
    does not exist, or a results database without Optuna's tables, holds none and is left as it is (Optuna
    would add its tables). False when Optuna is not installed."""
    if not database_exists(store):
        return False
    try:
        optuna_module()
    except ImportError:
        return False
    import sqlalchemy as sa

    engine = sa.create_engine(read_only_url(store))
    try:
        if "studies" not in sa.inspect(engine).get_table_names():
            return False
        query = sa.text("SELECT 1 FROM studies WHERE study_name = :name")
        with engine.connect() as connection:
            return connection.execute(query, {"name": study}).first() is not None
    finally:
        engine.dispose()


def study_report(
    study: str, store: str = DEFAULT_STORE, out_dir: str | Path = "report", plots: bool = True
) -> Dict[str, Path]:
    """Write ``sweep-<study>.md`` (and ``sweep-<study>.png``) into ``out_dir``; returns their paths.

    This is the function ``ltdrnn report --study NAME`` can call to add the study's section.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = study_summary(study, store)
    slug = file_slug(study)
    paths = {"markdown": out_dir / f"sweep-{slug}.md"}
    figure = out_dir / f"sweep-{slug}.png"
    if plots and sensitivity_plot(summary, figure):
        paths["sensitivity"] = figure
    paths["markdown"].write_text(study_markdown(summary, figure.name if "sensitivity" in paths else None))
    return paths
