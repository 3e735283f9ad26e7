"""The reproduction machinery: the claims table, verdict rules, one claim end to end at a tiny budget."""
import math

import pytest
import torch

from ltdrnn import reproduce as R
from ltdrnn.config import list_presets

TINY = ["--set", "train.steps=3", "--set", "train.eval_every=1", "--set", "task.options.n_val=16",
        "--set", "task.options.n_test=16", "--set", "train.progress=false"]


# ---- the table -------------------------------------------------------------------------------------
def test_claims_table_validates():
    claims = R.load_claims()
    assert R.validate(claims) == []
    presets = set(list_presets("reproduce"))
    for claim in claims:
        assert set(claim.budgets) >= set(R.BUDGETS), claim.id
        for spec in claim.runs:
            assert spec.preset in presets, (claim.id, spec.preset)
        for check in claim.checks:
            assert check.expression.labels() <= set(claim.labels), (claim.id, check.expr)
        assert claim.paper_numbers and all(n["source"] for n in claim.paper_numbers), claim.id


def test_required_claims_are_present():
    ids = {c.id for c in R.load_claims()}
    assert {"tarnn-toy", "adding-200", "adding-750", "copy-200", "copy-500", "sarnn-adding-500",
            "mist-gradient-lag", "irnn-identity-gradient", "pixel-mnist", "pmnist", "noisy-mnist",
            "srnn-random-labels"} <= ids


def test_validate_reports_a_missing_preset_and_an_unregistered_cell():
    claim = R.find_claim(R.load_claims(), "tarnn-toy")
    broken = R.Claim(claim.id, claim.paper, claim.title, claim.claim, claim.paper_numbers,
                     (R.RunSpec("tarnn", "reproduce/no-such-preset"),
                      R.RunSpec("lstm", "reproduce/toy-lstm", ("model.cell=no_such_cell",))),
                     claim.budgets, claim.checks)
    problems = R.validate([broken])
    assert any("no-such-preset" in p for p in problems)
    assert any("no_such_cell" in p and "not registered" in p for p in problems)


CLAIM_YAML = """
claims:
  - id: demo
    paper: X
    title: demo
    claim: a beats b
    paper_numbers: [{what: a, value: "1", source: "Table 1"}]
    runs: [{label: a, preset: reproduce/toy-tarnn}, {label: b, preset: reproduce/toy-lstm}]
    budgets:
      quick: {overrides: [train.steps=1], note: tiny}
      paper: {overrides: [], note: full}
    checks: [{expr: "%s", says: "a beats b"}]
"""


@pytest.mark.parametrize("expr, message", [
    ("__import__('os').system('true')", "unknown function"),
    ("metric(a).real > 0", "Attribute"),
    ("metric(c) > 0", "unknown run label 'c'"),
    ("metric(a, 2) > 0", "takes a run label"),
    ("a > 0", "unknown name 'a'"),
    ("metric(a) > 'x'", "only numbers"),
])
def test_unsafe_or_wrong_expressions_are_refused(expr, message):
    with pytest.raises(R.ClaimError, match=message):
        R.load_claims(CLAIM_YAML % expr.replace('"', '\\"'))


def test_unknown_claim_key_is_named():
    with pytest.raises(R.ClaimError, match="unknown key 'verdict'"):
        R.load_claims(CLAIM_YAML.replace("    checks:", "    verdict: x\n    checks:") % "metric(a) > 0")


# ---- verdict rules on synthetic rows ---------------------------------------------------------------
def row(metric, history=(), higher=True, skip=None, status="finished", baseline=0.25):
    return {"metric": metric, "status": status, "params": 10, "train_time_s": 1.0,
            "metrics": {"higher_is_better": higher, "skip_fraction": skip, "baseline": baseline},
            "history": [{"step": s, "val_metric": v} for s, v in history]}


def toy_claim():
    return R.find_claim(R.load_claims(), "tarnn-toy")


def test_verdict_reproduced_partly_not_and_not_run_yet():
    claim = toy_claim()
    verdict = R.judge(claim, R.Measurements({"tarnn": row(1.0), "lstm": row(0.45)}), "quick")
    assert verdict.status == "reproduced"
    assert "metric(tarnn) = 1" in verdict.reason and "metric(lstm) = 0.45" in verdict.reason
    assert R.judge(claim, R.Measurements({"tarnn": row(0.8), "lstm": row(0.45)}), "quick").status == "partly"
    failed = R.judge(claim, R.Measurements({"tarnn": row(0.8), "lstm": row(0.9)}), "quick")
    assert failed.status == "not reproduced" and "reduced 'quick' budget" in failed.reason
    assert "reduced" not in R.judge(claim, R.Measurements({"tarnn": row(0.8), "lstm": row(0.9)}),
                                    "paper").reason
    missing = R.judge(claim, R.Measurements({"tarnn": row(1.0)}), "quick")
    assert missing.status == "not run yet" and "missing: lstm" in missing.reason


def test_steps_to_follows_the_metric_direction_and_is_inf_when_never_reached():
    falling = row(0.0, [(25, 0.2), (50, 0.04), (75, 0.001)], higher=False)
    assert R.steps_to(falling, 0.05) == 50
    assert R.steps_to(falling, 1e-6) == math.inf
    rising = row(1.0, [(10, 0.5), (20, 0.95)])
    assert R.steps_to(rising, 0.9) == 20


def test_speed_check_compares_steps_and_unmeasured_checks_fail():
    claim = R.find_claim(R.load_claims(), "adding-200")
    fast = [(25, 0.1), (50, 0.004)]
    rows = {name: row(0.004, fast, higher=False) for name in ("tarnn", "irnn", "srnn")}
    rows["lstm"] = row(0.17, [(25, 0.17), (50, 0.16)], higher=False)
    assert R.judge(claim, R.Measurements(rows), "quick").status == "reproduced"
    rows["lstm"] = row(0.004, [(25, 0.004)], higher=False)  # LSTM faster: the speed check fails
    verdict = R.judge(claim, R.Measurements(rows), "quick")
    assert verdict.status == "partly" and "before LSTM" in verdict.reason and "-> no" in verdict.reason

    sarnn = R.find_claim(R.load_claims(), "sarnn-adding-500")
    no_skip = {label: row(0.001, higher=False) for label in sarnn.labels}  # skip fraction missing
    verdict = R.judge(sarnn, R.Measurements(no_skip), "paper")
    assert verdict.status == "partly" and "not measured" in verdict.reason
    ordered = {"lambda_0": row(0.001, higher=False, skip=0.2), "lambda_1e5": row(0.001, higher=False, skip=0.5),
               "lambda_1e4": row(0.001, higher=False, skip=0.9)}
    assert R.judge(sarnn, R.Measurements(ordered), "paper").status == "reproduced"
    ordered["lambda_1e5"] = row(0.001, higher=False, skip=0.95)  # not monotone in lambda
    assert R.judge(sarnn, R.Measurements(ordered), "paper").status == "partly"


# ---- analyses --------------------------------------------------------------------------------------
def exact_frobenius(model, x, start):
    """||d state_T / d state_start||_F of a one-sequence batch, by the full Jacobian."""
    cell = model.rnn.cells[0]
    slices = list(cell.precompute(x.transpose(0, 1)).unbind(0))
    state = cell.init_state(1, x.device, x.dtype)
    for p_t in slices[:start + 1]:
        _, state = cell.step(p_t, state)

    def rest(h):
        for p_t in slices[start + 1:]:
            _, h = cell.step(p_t, h)
        return h
    return float(torch.autograd.functional.jacobian(rest, state.detach()).norm())


def test_jacobian_ratio_matches_the_exact_jacobians():
    from ltdrnn.models import SequenceModel
    torch.manual_seed(0)
    model = SequenceModel("irnn", 2, 3, 1, "regressor", K=2, rank=2, eta=0.5)
    x = torch.rand(1, 6, 2)
    got = R.jacobian_ratio(model, x, probes=4000)
    first, previous = exact_frobenius(model, x, 0), exact_frobenius(model, x, 4)
    assert got["first"] == pytest.approx(first, rel=0.1)
    assert got["previous"] == pytest.approx(previous, rel=0.1)
    assert got["ratio"] == pytest.approx(first / previous, rel=0.2)


# ---- end to end ------------------------------------------------------------------------------------
def test_one_claim_at_a_tiny_budget_renders_the_document(tmp_path):
    store, doc = str(tmp_path / "r.db"), tmp_path / "REPRODUCTION.md"
    code = R.main(["run", "tarnn-toy", "--store", store, "--runs", str(tmp_path / "runs"), *TINY,
                   "--report", "--out", str(doc), "--plots", str(tmp_path / "plots")])
    assert code == 0
    rows = R.Store(store).results.rows(study="reproduce/tarnn-toy/quick")
    assert sorted(r["name"] for r in rows) == ["lstm", "tarnn"]
    text = doc.read_text()
    section = text[text.index("## tarnn-toy"):text.index("## srnn-random-labels")]
    assert "| TARNN test accuracy | 100% | TARNN Fig. 1 (table) |" in section
    tarnn = next(r for r in rows if r["name"] == "tarnn")
    assert f"accuracy {100 * tarnn['metric']:.1f}%" in section
    assert "`ltdrnn reproduce run tarnn-toy --budget quick --set train.steps=3" in section
    assert "`ltdrnn train reproduce/toy-tarnn train.latency=false train.steps=3" in section
    assert "**Verdict: " in section and f"metric(tarnn) = {R.format_number(tarnn['metric'])}" in section
    assert (tmp_path / "plots" / "tarnn-toy-curves.png").exists()
    # claims without runs are listed as not run yet, with the command that would run them
    assert "**Verdict: not run yet.**" in text and "ltdrnn reproduce run copy-500 --budget quick" in text


def test_analysis_runs_are_stored_and_skip_done_skips_them(tmp_path):
    store = str(tmp_path / "r.db")
    args = ["run", "irnn-identity-gradient", "--only", "k1", "--store", store, "--runs", str(tmp_path / "runs"),
            *TINY, "--set", "task.options.T=12"]
    assert R.main(args) == 0
    claim = R.find_claim(R.load_claims(), "irnn-identity-gradient")
    measured = R.Store(store).measurements(claim, "quick")
    analysis = measured.analyses["k1"]["jacobian_ratio"]
    assert analysis["trace"][-1]["step"] == 3 and len(analysis["trace"]) == 3
    assert analysis["ratio"] == pytest.approx(analysis["first"] / analysis["previous"])
    assert R.main(args + ["--skip-done"]) == 0
    assert len(R.Store(store).results.rows(study="reproduce/irnn-identity-gradient/quick")) == 1
    verdict = R.judge(claim, measured, "quick")
    assert verdict.status == "not run yet" and "missing: k5, k10" in verdict.reason


def test_command_line_errors_exit_2(capsys):
    assert R.main(["run", "no-such-claim"]) == 2
    assert "unknown claim 'no-such-claim'" in capsys.readouterr().err


def test_gradient_vs_lag_analysis_is_relative_to_the_peak(tmp_path):
    from ltdrnn.config import load_config
    from ltdrnn.train import train
    cfg = load_config("reproduce/adding200-lstm", [
        "task.options.T=10", "task.options.n_train=64", "task.options.n_val=8", "task.options.n_test=120",
        "train.steps=2", "train.epochs=null", "train.progress=false", "train.latency=false", "results=null",
        f"run_dir={tmp_path / 'run'}"])
    watcher = R.AnalysisWatcher(R.RunSpec("lstm", "reproduce/adding200-lstm", analyses=("gradient_vs_lag",)), cfg)
    result = watcher.finish(train(cfg, callbacks=[watcher]))["gradient_vs_lag"]
    assert len(result["curve"]) == 10 and result["examples"] == 100 and result["step"] == 2
    assert result["ratio"] == pytest.approx(result["curve"][-1] / max(result["curve"]))
