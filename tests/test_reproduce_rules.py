"""The verdict rules: no rule passes on a run that learned nothing, speed comparisons are censored at
each run's horizon, derived measures count only for solved runs, and each loophole an audit found in the
rules stays closed. Synthetic rows throughout; the packaged claims where a loophole was in
the table."""

import dataclasses
import math

import pytest

from ltdrnn import reproduce as R
from ltdrnn.reproduce.expressions import Expression
from reproduce_helpers import claim, demo, outcome, row, without_variants

ADDING = 1 / 6


def reads(result, name, label):
    return (name, label) in result.check.expression.reads()


# ---- the loopholes an audit found, on the packaged claims --------------------------------------------
def test_a_competitor_at_chance_is_not_beaten_where_the_paper_has_it_learn():
    # pixel MNIST: our LSTM at 10% (ln 10 for 30 epochs); TARNN Table 1 reports it at 97.81%
    pixel = claim("pixel-mnist")
    accuracies = {"tarnn": 0.81, "srnn": 0.79, "mist": 0.81, "irnn": 0.86, "sarnn": 0.25, "lstm": 0.10}
    rows = {label: row(a, baseline=0.1, cell=label if label != "lstm" else "lstm") for label, a in accuracies.items()}
    verdict = R.judge(pixel, R.Measurements(rows), "paper")
    versus_lstm = [r for r in verdict.checks if reads(r, "metric", "lstm") or reads(r, "train_s", "lstm")]
    assert versus_lstm and not any(r.passed for r in versus_lstm)
    beats = next(r for r in verdict.checks if r.check.expr == "metric(tarnn) >= metric(lstm)")
    assert beats.outcome == "undecided" and "the paper has it learn" in beats.text()


def test_the_most_accurate_cell_is_not_decided_against_a_competitor_at_chance():
    # noisy MNIST: iRNN at chance, where TARNN Table 1 reports 98.48%
    noisy = claim("noisy-mnist")
    accuracies = {"tarnn": 0.5, "srnn": 0.1, "mist": 0.1, "irnn": 0.1, "sarnn": 0.1, "lstm": 0.1}
    rows = {label: row(a, baseline=0.1, cell=label) for label, a in accuracies.items()}
    verdict = R.judge(noisy, R.Measurements(rows), "paper")
    most = next(r for r in verdict.checks if r.check.says.startswith("TARNN is the most accurate"))
    assert not most.passed
    assert most.outcome == "undecided"
    # LSTM at chance is what the paper reports (10.21%): "TARNN beats LSTM" holds
    assert next(r for r in verdict.checks if r.check.expr == "metric(tarnn) > metric(lstm)").passed


def adding_rows(srnn_history, lstm_metric=0.01, lstm_history=((500, 0.1), (1000, 0.06))):
    fast = [(25, 0.1), (50, 0.004)]
    rows = {name: row(0.004, fast, higher=False, baseline=ADDING, cell=name) for name in ("tarnn", "irnn")}
    rows["srnn"] = row(0.0003, srnn_history, higher=False, baseline=ADDING, cell="srnn")
    rows["lstm"] = row(lstm_metric, lstm_history, higher=False, baseline=ADDING, cell="lstm")
    return R.Measurements(rows)


def test_never_is_censored_at_the_runs_last_evaluated_step():
    # SRNN reaches MSE 0.05 at step 10,000; LSTM (which learned, test MSE 0.01) was evaluated up to
    # step 1,000 and had not reached it: nobody knows which is faster
    adding = claim("adding-200")
    verdict = R.judge(adding, adding_rows([(5000, 0.1), (10000, 0.04), (100000, 0.001)]), "paper")
    srnn_speed = [r for r in verdict.checks if reads(r, "steps_to", "srnn")]
    assert srnn_speed and not any(r.passed for r in srnn_speed)
    (srnn_speed,) = srnn_speed
    assert srnn_speed.outcome == "undecided"
    assert "steps_to(lstm, 0.05) = never within 1000 steps (n=1)" in srnn_speed.text()
    # TARNN got there at step 50, within LSTM's 1,000: decided
    tarnn_speed = next(r for r in verdict.checks if reads(r, "steps_to", "tarnn"))
    assert tarnn_speed.passed
    # the same SRNN reaching it at step 500, before LSTM's horizon: decided too
    early = R.judge(adding, adding_rows([(250, 0.1), (500, 0.04)]), "paper")
    assert next(r for r in early.checks if reads(r, "steps_to", "srnn")).passed


def test_a_skip_fraction_counts_only_for_a_run_that_solved_the_task():
    # SA-RNN adding T=500: no lambda solved (MSE 0.05 > 0.01), the skip fractions rise with the penalty
    sarnn = claim("sarnn-adding-500")
    skips = {"lambda_0_code": 0.2, "lambda_1e5_code": 0.5, "lambda_1e4_code": 0.9}
    rows = {label: row(0.05, higher=False, baseline=ADDING, skip=s, cell="sarnn") for label, s in skips.items()}
    verdict = R.verdicts.judge_rows(sarnn, R.Measurements(rows), "paper")
    assert verdict.status == "not reproduced"
    skip_rules = [r for r in verdict.checks if any(name == "skip" for name, _ in r.check.expression.reads())]
    assert skip_rules and all(r.outcome == "undecided" for r in skip_rules)
    assert "misses the success threshold <= 0.01, so its skip says nothing" in skip_rules[0].text()
    solved = {label: row(0.001, higher=False, baseline=ADDING, skip=s, cell="sarnn") for label, s in skips.items()}
    assert R.verdicts.judge_rows(without_variants(sarnn), R.Measurements(solved), "paper").status == "reproduced"


def test_the_jacobian_ratio_of_a_run_at_chance_counts_for_nothing():
    # a K=10 iRNN that learned nothing, with a ratio of exactly 1
    ablation = claim("irnn-identity-gradient")
    rows = {
        "k1": row(0.001, [(100, 0.005)], higher=False, baseline=ADDING, cell="irnn"),
        "k5": row(0.001, [(100, 0.005)], higher=False, baseline=ADDING, cell="irnn"),
        "k10": row(0.167, [(100, 0.167)], higher=False, baseline=ADDING, cell="irnn"),
    }
    ratios = {"k1": {"jacobian_ratio": {"ratio": 0.5}}, "k5": {"jacobian_ratio": {"ratio": 0.7}}}
    ratios["k10"] = {"jacobian_ratio": {"ratio": 1.0}}
    verdict = R.verdicts.judge_rows(ablation, R.Measurements(rows, ratios), "paper")
    ratio_rules = [r for r in verdict.checks if reads(r, "jac_ratio", "k10")]
    assert ratio_rules and not any(r.passed for r in ratio_rules)
    assert verdict.status == "not reproduced"
    assert all("k10" in r.text() and "at chance" in r.text() for r in ratio_rules)


def mist_measurements(lstm, mist=(1e-2, 1e-2, 1e-2), rnn=(1e-9, 1e-9, 1e-9)):
    """The three runs at chance (the claim is structural), with per-seed lag ratios."""
    cells = {"mist": "mist", "lstm": "lstm", "rnn": "rnn_tanh"}
    ratios = {"mist": mist, "lstm": lstm, "rnn": rnn}
    rows = {label: [row(0.1, baseline=0.11, cell=cell, seed=s) for s in (1, 2, 3)] for label, cell in cells.items()}
    analyses = {label: [{"gradient_vs_lag": {"ratio": r}} for r in ratios[label]] for label in cells}
    return R.Measurements(rows, analyses)


def test_the_gradient_lag_rule_reads_the_figure_in_every_seed():
    mist = claim("mist-gradient-lag")
    # 1000x in the mean, as an untrained model may have: LSTM keeps 1e-5 of its peak, not "essentially 0"
    untrained = R.judge(mist, mist_measurements(lstm=(1e-5, 1e-5, 1e-5)), "paper")
    versus_lstm = next(r for r in untrained.checks if reads(r, "lag_ratio", "lstm"))
    assert not versus_lstm.passed
    # below 1e-6 in the mean (6.7e-7) but not in seed 3
    one_seed = R.judge(mist, mist_measurements(lstm=(1e-9, 1e-9, 2e-6)), "paper")
    versus_lstm = next(r for r in one_seed.checks if reads(r, "lag_ratio", "lstm"))
    assert not versus_lstm.passed and "does not hold in seed 3" in versus_lstm.text()
    assert versus_lstm.seeds == (2, 3)
    # the figure's reading, every model at chance: holds, and the rule says why it needs no training
    figure = R.judge(mist, mist_measurements(lstm=(1e-15, 1e-17, 1e-16)), "paper")
    assert figure.status == "reproduced"
    assert all(r.check.structural and r.seeds == (3, 3) for r in figure.checks)


def test_a_bundled_claim_is_judged_per_paper():
    # permuted MNIST: SRNN and MIST beat an LSTM that learned; iRNN does not; TARNN is at chance
    pmnist = claim("pmnist")
    # (SRNN and MIST are compared with LSTMs trained under their own papers' protocols)
    accuracies = {"tarnn": 0.25, "srnn": 0.85, "mist": 0.77, "irnn": 0.44, "sarnn": 0.30, "lstm": 0.50}
    accuracies.update(lstm_srnn=0.55, lstm_mist=0.60)
    rows = {label: row(a, baseline=0.1, cell=label.split("_")[0]) for label, a in accuracies.items()}
    verdict = R.judge(pmnist, R.Measurements(rows), "paper")
    for cell in ("srnn", "mist"):
        assert any(r.passed and reads(r, "metric", cell) for r in verdict.checks), cell
    assert not any(r.passed and reads(r, "metric", "irnn") for r in verdict.checks)
    assert {r.check.paper for r in verdict.checks} == {"TARNN", "iRNN", "SRNN", "MIST"}


def test_a_claims_own_cell_is_never_let_fail():
    # copy T=200: TARNN solves it alone, iRNN stays at the memoryless level, SRNN learned partly
    copy = claim("copy-200")
    memoryless = 10 * math.log(8) / 220
    rows = {
        "tarnn": row(0.001, higher=False, baseline=memoryless, cell="tarnn"),
        "irnn": row(0.094, higher=False, baseline=memoryless, cell="irnn"),
        "srnn": row(0.05, higher=False, baseline=memoryless, cell="srnn"),
        "lstm": row(0.0946, higher=False, baseline=memoryless, cell="lstm"),
    }
    verdict = R.verdicts.judge_rows(copy, R.Measurements(rows), "paper")
    assert verdict.status == "partly"
    assert outcome(verdict, "TARNN cross entropy").passed and not outcome(verdict, "iRNN cross entropy").passed
    for c in R.load_claims():
        for check in c.checks:
            assert not set(check.may_fail) & {"tarnn", "irnn", "srnn", "mist", "sarnn"}, (c.id, check.expr)


def test_validate_refuses_a_may_fail_on_a_run_of_the_claims_own_cell():
    text = demo("metric(a) >= 0.9", may_fail='{a: "Table 9"}')
    assert R.validate([text]) == [
        "demo: checks[0].may_fail: a trains tarnn, a cell of the claim's own papers (TARNN); "
        "a rule may not let its own subject fail"
    ]
    # and the machinery ignores it: a TARNN at chance fails its own rule
    verdict = R.judge(text, R.Measurements({"a": row(0.25), "b": row(0.5, cell="lstm")}), "paper")
    assert verdict.checks[0].outcome == "no"


# ---- the second audit's loopholes: rules judged seed by seed, on equal terms ----------------------
SEEDS = (1, 2, 3)
MEMORYLESS_500 = 10 * math.log(8) / 520


def sarnn_rows(mse=(0.001,) * 3, **skips):
    """The SA-RNN claim's three judged runs, seeds 1-3: the skip fractions per seed, the same test MSE."""
    rows = {}
    for label, per_seed in skips.items():
        rows[label] = [
            row(m, higher=False, baseline=ADDING, skip=s, cell="sarnn", seed=seed)
            for seed, s, m in zip(SEEDS, per_seed, mse if label == "lambda_1e4_code" else (0.001,) * 3)
        ]
    return R.Measurements(rows)


def test_a_rule_that_holds_in_no_seed_fails_though_it_holds_on_the_means():
    # the means rise with lambda (0.20, 0.57, 0.77) and every seed falls somewhere
    sarnn = claim("sarnn-adding-500")
    found = sarnn_rows(
        lambda_0_code=(0.3, 0.1, 0.2), lambda_1e5_code=(0.2, 0.6, 0.9), lambda_1e4_code=(0.95, 0.55, 0.8)
    )
    rises = outcome(R.judge(sarnn, found, "paper"), "skip fraction rises")
    assert rises.outcome == "no" and rises.seeds == (0, 3)
    assert R.judge(without_variants(sarnn), found, "paper").status == "partly"


def test_the_vetoes_apply_seed_by_seed():
    # lambda = 1e-4 solved in the mean (0.009 <= 0.01) but not in seed 3 (0.025): its skip says nothing there
    sarnn = claim("sarnn-adding-500")
    found = sarnn_rows(
        (0.001, 0.001, 0.025), lambda_0_code=(0.2,) * 3, lambda_1e5_code=(0.5,) * 3, lambda_1e4_code=(0.9,) * 3
    )
    verdict = R.judge(sarnn, found, "paper")
    solved, at_least_half = outcome(verdict, "solved"), outcome(verdict, "skip fraction >= 50%")
    assert (
        solved.outcome == "no"
        and "seed 3: metric(lambda_0_code) = 0.001, metric(lambda_1e5_code) = 0.001, metric(lambda_1e4_code) = 0.025"
        in solved.text()
    )
    assert at_least_half.outcome == "undecided" and "misses the success threshold <= 0.01" in at_least_half.text()
    # a subject above chance in the mean (70.7%) and at chance in seed 3 (32% of a 25% baseline) fails,
    # though 32% is above the rule's threshold
    rule = demo("metric(a) >= 0.3")
    rows = {"a": [row(a, seed=s) for s, a in zip(SEEDS, (0.9, 0.9, 0.32))], "b": row(0.5, cell="lstm")}
    result = R.evaluate_check(rule, rule.checks[0], R.Measurements(rows))
    assert result.outcome == "no" and result.seeds == (2, 3)
    assert "seed 3: metric(a) = 32%; a 32% (n=1) vs trivial baseline 25%: at chance" in result.text()


def test_a_monotone_rule_needs_a_rise_beyond_its_margin():
    sarnn = claim("sarnn-adding-500")
    for flat in ((0.5, 0.5, 0.5), (0.50, 0.52, 0.54)):
        skips = dict(zip(("lambda_0_code", "lambda_1e5_code", "lambda_1e4_code"), ((s,) * 3 for s in flat)))
        assert outcome(R.judge(sarnn, sarnn_rows(**skips), "paper"), "skip fraction rises").outcome == "no", flat
    rising = sarnn_rows(lambda_0_code=(0.50,) * 3, lambda_1e5_code=(0.56,) * 3, lambda_1e4_code=(0.62,) * 3)
    assert outcome(R.judge(sarnn, rising, "paper"), "skip fraction rises").passed


def copy_row(metric, recalled, cell="irnn", seed=1, recall=None, **kwargs):
    """A copy T = 500 row whose errors are ``10 - recalled`` wrong symbols per sequence (all on recall steps);
    ``recall``: its measured accuracy on the recall steps (rows trained since it is measured)."""
    accuracy = 1 - (10 - recalled) / 520
    return row(
        metric,
        higher=False,
        baseline=MEMORYLESS_500,
        cell=cell,
        seed=seed,
        test={"accuracy": accuracy, **({} if recall is None else {"recall_accuracy": recall})},
        seq_len=520,
        **kwargs,
    )


def test_a_copy_rule_is_relative_to_the_memoryless_baseline():
    copy = claim("copy-500")
    rule = next(c for c in copy.checks if c.paper == "iRNN")
    # 0.009 is under the old absolute 0.01 but 22% of memoryless; 8 of 10 symbols recalled
    eight = R.evaluate_check(copy, rule, R.Measurements({"irnn": copy_row(0.009, 8)}))
    assert not eight.passed and eight.outcome == "undecided"
    assert ("recall(irnn)", "≥ 80% (n=1)") in eight.values
    assert R.evaluate_check(copy, rule, R.Measurements({"irnn": copy_row(0.0019, 9.9)})).passed  # 4.7%
    assert R.evaluate_check(copy, rule, R.Measurements({"irnn": copy_row(0.0024, 10)})).passed  # 6%, all recalled


def test_a_measured_recall_decides_the_copy_rule_where_the_bound_left_it_open():
    copy = claim("copy-500")
    rule = next(c for c in copy.checks if c.paper == "TARNN")
    # 13.6% of memoryless with 99.57% of all steps right: recall between 88.8% and 100% from the bound
    bounded = copy_row(0.0055, 8.88, "tarnn")
    assert R.evaluate_check(copy, rule, R.Measurements({"tarnn": bounded})).outcome == "undecided"
    measured = copy_row(0.0055, 8.88, "tarnn", recall=0.8843)
    failed = R.evaluate_check(copy, rule, R.Measurements({"tarnn": measured}))
    assert failed.outcome == "no" and ("recall(tarnn)", "88.43% (n=1)") in failed.values
    # a row from before the metric, re-measured from its checkpoint (the analysis ``recall``)
    analysed = R.Measurements({"tarnn": bounded}, {"tarnn": {"recall": {"accuracy": 0.9921}}})
    assert R.evaluate_check(copy, rule, analysed).passed
    # one seed measured, one only bounded: the bound still shows
    both = R.Measurements({"tarnn": [bounded, copy_row(0.0055, 8.88, "tarnn", seed=2)]})
    assert R.evaluate_check(copy, rule, both).outcome == "undecided"


def copy_runs(lstm_steps=4000, lstm_train=None, lstm_optim=None):
    """copy-500's judged runs trained as its presets do (TARNN and iRNN 4,000 steps, up to 3 rollbacks,
    Adam's beta2 0.95, iRNN's validation-loss limit), LSTM at the memoryless level as given."""
    guarded = {"steps": 4000, "rollbacks": 3}
    rows = {
        "tarnn": copy_row(0.0004, 10, "tarnn", train=guarded, optim={"beta2": 0.95}, steps=4000),
        "irnn": copy_row(0.0008, 10, "irnn", train={**guarded, "max_val_loss": 100}, optim={"beta2": 0.95}, steps=4000),
        "srnn": copy_row(1e-9, 10, "srnn", train={"steps": 10000}, steps=10000),
        "lstm": copy_row(
            0.0401, 1, "lstm", train=lstm_train or {"steps": lstm_steps}, optim=lstm_optim, steps=lstm_steps
        ),
    }
    return R.Measurements(rows)


def test_a_competitor_counts_only_if_trained_with_the_subjects_steps_and_stabilisers():
    copy = claim("copy-500")
    stays = next(c for c in copy.checks if c.says.startswith("LSTM stays"))
    # 2,000 steps against 4,000, and none of the stabilisers
    short = R.evaluate_check(copy, stays, copy_runs(lstm_steps=2000))
    assert short.outcome == "undecided"
    assert "lstm was not trained as irnn was (2,000 optimiser steps to 4,000; without up to 3 rollbacks" in short.text()
    # an LSTM that never took a step stays at the baseline trivially
    assert R.evaluate_check(copy, stays, copy_runs(lstm_steps=0)).outcome == "undecided"
    # as many steps, still without the rollbacks, beta2 and validation-loss limit
    unguarded = R.evaluate_check(copy, stays, copy_runs())
    assert unguarded.outcome == "undecided" and "without up to 3 rollbacks, Adam β2 0.95" in unguarded.text()
    alike = {"steps": 4000, "rollbacks": 3, "max_val_loss": 100}
    assert R.evaluate_check(copy, stays, copy_runs(lstm_train=alike, lstm_optim={"beta2": 0.95})).passed
    # so is a speed comparison with an LSTM given fewer steps (adding-200: iRNN 2,000, LSTM 1,000)
    adding = claim("adding-200")
    faster = next(c for c in adding.checks if c.expr.startswith("steps_to(irnn"))
    rows = {
        "irnn": row(0.001, [(100, 0.04)], higher=False, baseline=ADDING, cell="irnn", train={"steps": 2000}),
        "lstm": row(0.01, [(100, 0.1), (900, 0.04)], higher=False, baseline=ADDING, cell="lstm", train={"steps": 1000}),
    }
    assert R.evaluate_check(adding, faster, R.Measurements(rows)).outcome == "undecided"
    rows["lstm"]["config"]["train"]["steps"] = 2000
    rows["irnn"]["config"]["optim"]["clip_norm"] = rows["lstm"]["config"]["optim"]["clip_norm"] = 1.0
    assert R.evaluate_check(adding, faster, R.Measurements(rows)).passed


def test_partly_needs_an_effect_beyond_the_seed_noise():
    # K = 10's ratios 0.76, 0.79, 0.85 against K = 1's 0.80, 0.77, 0.68: 0.803 +- 0.045 vs 0.749 +- 0.064
    ablation = claim("irnn-identity-gradient")
    learned = [(100, 0.05), (450, 0.008)]
    rows = {
        k: [row(1e-4, learned, higher=False, baseline=ADDING, cell="irnn", seed=s) for s in SEEDS]
        for k in ("k1", "k5", "k10")
    }
    ratios = {"k1": (0.80, 0.77, 0.68), "k5": (0.67, 0.68, 0.68), "k10": (0.76, 0.79, 0.85)}
    analyses = {k: [{"jacobian_ratio": {"ratio": r}} for r in found] for k, found in ratios.items()}
    verdict = R.judge(ablation, R.Measurements(rows, analyses), "paper")
    closer = outcome(verdict, "K=10 closer to 1 than K=1")
    assert not closer.passed and closer.seeds == (1, 3)
    assert verdict.status == "not reproduced"


def test_a_variant_of_the_papers_cell_makes_a_claim_at_most_partly():
    copy = claim("copy-500")
    alike = {"steps": 4000, "rollbacks": 3, "max_val_loss": 100}
    found = copy_runs(lstm_train=alike, lstm_optim={"beta2": 0.95})
    verdict = R.verdicts.judge_rows(copy, found, "paper")
    assert all(r.passed for r in verdict.checks) and verdict.status == "partly"
    assert any("TARNN's update gate (authors' code): the iRNN paper has no gate" in c for c in verdict.capped)
    assert R.verdicts.judge_rows(without_variants(copy), found, "paper").status == "reproduced"


def test_every_setting_of_every_run_has_a_source():
    claims = R.load_claims()
    assert [problem for c in claims for problem in R.claims.untagged_settings(c)] == []
    copy = claim("copy-200")
    gate = next(c for c in copy.conditions if "gate" in c.keys[0])
    assert gate.source == "authors' code" and "anilkagak2/TARNN" in gate.where and gate.variant
    # a setting no condition names is reported by `ltdrnn reproduce check`
    bare = dataclasses.replace(copy, conditions=[c for c in copy.conditions if c is not gate])
    assert R.claims.untagged_settings(bare) == ["copy-200/irnn: conditions: no source for model.options.gate"]
    for bad, message in (
        ('{what: w, keys: ["*"], source: blog}', "conditions\\[0\\].source: expected one of paper"),
        ('{what: w, keys: ["*"], source: paper}', "a setting from the paper needs where it is printed"),
        ('{what: w, keys: ["*"], source: ours, runs: [c]}', "conditions\\[0\\].runs: unknown run label 'c'"),
    ):
        with pytest.raises(R.ClaimError, match=message):
            R.load_claims(demo_yaml_with_condition(bad))


def demo_yaml_with_condition(condition):
    from reproduce_helpers import CLAIM_YAML

    return (CLAIM_YAML % "metric(a) > 0").replace(
        """conditions: [{what: "the presets' settings", keys: ["*"], source: ours}]""", f"conditions: [{condition}]"
    )


# ---- a rule of each kind cannot pass on a run that learned nothing -------------------------------
AT_CHANCE, LEARNED = 0.26, 0.9  # accuracies against a trivial baseline of 0.25


@pytest.mark.parametrize(
    "expr, extra, analyses",
    [
        ("metric(a) >= 0.2", {}, None),
        ("best_val(a) >= 0.2", {}, None),
        ("metric(a) >= metric(b)", {}, None),
        ("steps_to(a, 0.2) < steps_to(b, 0.2)", {}, None),
        ("train_s(a) < train_s(b)", {"success": 0.8}, None),
        ("skip(a) >= 0.5", {"success": 0.8}, None),
        ("jac_ratio(a) > 0.9", {}, {"jacobian_ratio": {"ratio": 1.0}}),
        ("lag_ratio(a) > 0.9", {}, {"gradient_vs_lag": {"ratio": 1.0}}),
    ],
)
def test_no_rule_passes_on_a_subject_at_chance(expr, extra, analyses):
    rule = demo(expr, **extra)
    a = row(AT_CHANCE, [(10, 0.3)], skip=0.9, train_s=1.0)
    a["metrics"]["val_best"] = 0.3
    b = row(LEARNED, [(20, 0.3)], cell="lstm", train_s=5.0)
    found = R.Measurements({"a": a, "b": b}, {"a": analyses or {}, "b": analyses or {}})
    result = R.evaluate_check(rule, rule.checks[0], found)
    assert result.outcome == "no" and "a 26% (n=1) vs trivial baseline 25%: at chance" in result.text()


@pytest.mark.parametrize(
    "expr, extra",
    [
        ("metric(a) >= metric(b)", {}),
        ("steps_to(a, 0.5) < steps_to(b, 0.5)", {}),
        ("train_s(a) < train_s(b)", {"success": 0.8}),
        ("jac_ratio(a) > jac_ratio(b)", {}),
    ],
)
def test_a_comparison_with_a_competitor_at_chance_is_undecided(expr, extra):
    rule = demo(expr, versus="[b]", **extra)
    a = row(LEARNED, [(10, 0.6)], train_s=1.0)
    b = row(AT_CHANCE, [(10, 0.3), (1000, 0.3)], cell="lstm", train_s=5.0)
    ratios = {"jacobian_ratio": {"ratio": 1.0}}
    result = R.evaluate_check(rule, rule.checks[0], R.Measurements({"a": a, "b": b}, {"a": ratios, "b": ratios}))
    assert result.outcome == "undecided" and "where the paper has it learn" in result.text()
    if "train_s" in expr:  # a competitor that solved nothing has no time to a result either
        return
    # a competitor the paper itself reports at chance may be at chance here too
    reported = demo(expr, versus="[b]", may_fail='{b: "Table 1: 26%"}', **extra)
    found = R.Measurements({"a": a, "b": b}, {"a": ratios, "b": ratios})
    assert R.evaluate_check(reported, reported.checks[0], found).outcome in ("yes", "no")


@pytest.mark.parametrize("expr", ["train_s(a) < train_s(b)", "skip(a) >= 0.5"])
def test_a_derived_measure_of_an_unsolved_run_is_unknown(expr):
    rule = demo(expr, success=0.8, **({"versus": "[b]"} if "(b)" in expr else {}))
    a = row(0.7, skip=0.9, train_s=1.0)  # learned (70%), not solved (< 80%)
    b = row(0.85, cell="lstm", train_s=5.0)
    result = R.evaluate_check(rule, rule.checks[0], R.Measurements({"a": a, "b": b}))
    assert result.outcome == "undecided" and "misses the success threshold >= 80%" in result.text()
    a["metric"] = 0.9
    assert R.evaluate_check(rule, rule.checks[0], R.Measurements({"a": a, "b": b})).outcome == "yes"


def test_a_rule_letting_a_baseline_fail_counts_only_when_a_cell_of_its_paper_learned():
    noisy = claim("noisy-mnist")
    cells = ("tarnn", "srnn", "mist", "irnn", "sarnn", "lstm")
    everyone_at_chance = R.Measurements({label: row(0.10, baseline=0.11, cell=label) for label in cells})
    verdict = R.judge(noisy, everyone_at_chance, "paper")
    fails = next(r for r in verdict.checks if r.check.expr == "metric(lstm) <= 0.2")
    assert fails.outcome == "undecided" and "none did" in fails.text()
    learned = {label: row(0.10, baseline=0.11, cell=label) for label in cells}
    learned["tarnn"] = row(0.95, baseline=0.11)
    verdict = R.judge(noisy, R.Measurements(learned), "paper")
    assert next(r for r in verdict.checks if r.check.expr == "metric(lstm) <= 0.2").passed


def test_the_table_states_why_each_run_may_fail_and_which_paper_each_rule_tests():
    for c in R.load_claims():
        for check in c.checks:
            assert all(source.strip() for source in check.may_fail.values()), (c.id, check.expr)
            assert c.rule_papers(check) and set(c.rule_papers(check)) <= set(c.papers), (c.id, check.expr)
    with pytest.raises(R.ClaimError, match="expected the paper\\(s\\) this rule tests"):
        R.load_claims(
            """
claims:
  - id: two
    paper: TARNN, iRNN
    title: t
    claim: c
    paper_numbers: [{what: a, value: "1", source: "T1"}]
    runs: [{label: a, preset: reproduce/toy-tarnn}]
    budgets: {quick: {overrides: [], note: n}, paper: {overrides: [], note: n}}
    tuning: {how: h}
    checks: [{expr: "metric(a) > 0.5", says: s}]
"""
        )
    with pytest.raises(R.ClaimError, match="may_fail.b: expected where the paper reports b at chance"):
        demo("metric(a) > metric(b)", may_fail='{b: ""}')
    with pytest.raises(R.ClaimError, match="train_s counts only for runs that solve the task"):
        demo("train_s(a) < train_s(b)")


# ---- the arithmetic of censored numbers ------------------------------------------------------------
def evaluate(text, **bounds):
    return Expression(text).evaluate(lambda name, label, args: bounds[label])[0]


@pytest.mark.parametrize(
    "text, a, b, expected",
    [
        ("metric(a) < metric(b)", (5, 5), (1001, math.inf), True),  # reached before the other's horizon
        ("metric(a) < metric(b)", (5000, 5000), (1001, math.inf), None),  # needed more than it was given
        ("metric(a) < metric(b)", (1001, math.inf), (500, 500), False),  # never within more than b needed
        ("metric(a) < metric(b)", (1001, math.inf), (1001, math.inf), None),  # both never
        ("metric(a) < metric(b)", (math.inf, math.inf), (1001, math.inf), False),  # a diverged: never
        ("metric(a) <= metric(b) or metric(a) > 2", (1, 3), (2, 2), None),
        ("metric(a) < metric(b) and metric(a) > 10", (1001, math.inf), (500, 500), False),
        ("not metric(a) < metric(b)", (5000, 5000), (1001, math.inf), None),
        ("abs(metric(a) - 1) <= 0.1", (0.95, 0.95), (0, 0), True),
        ("max(metric(a), metric(b)) < 1200", (5, 5), (1001, math.inf), None),
        ("metric(a) == metric(b)", (2, 2), (2, 2), True),
        ("metric(a) > metric(b)", (math.nan, math.nan), (1, 1), False),
    ],
)
def test_comparisons_of_intervals_are_true_false_or_undecided(text, a, b, expected):
    assert evaluate(text, a=a, b=b) is expected


def test_steps_to_is_censored_at_the_last_evaluated_step_and_never_for_a_diverged_run():
    finished = row(0.1, [(25, 0.2), (50, 0.15), (75, 0.12)], higher=False, seed=2)
    assert R.measurements.steps_to_bounds(finished, 0.13) == (75, 75)
    assert R.measurements.steps_to_bounds(finished, 0.05) == (76, math.inf)
    diverged = row(0.1, [(25, 0.2)], higher=False, status="diverged")
    assert R.measurements.steps_to_bounds(diverged, 0.05) == (math.inf, math.inf)
    seeds = R.Measurements({"a": [row(0.1, [(100, 0.01)], higher=False, seed=1), finished]})
    found = seeds.summary("steps_to", "a", (0.05,))
    assert found.bounds == (88, math.inf)
    assert found.text(steps=True) == "≥ 88 (seed 2 not within 75 steps; seed 1 at 100)"


def test_a_rule_must_be_a_comparison():
    with pytest.raises(R.ClaimError, match="a rule must be a comparison"):
        Expression("metric(a) + 1")
    with pytest.raises(R.ClaimError, match="abs needs one argument"):
        Expression("abs(metric(a), 2) > 1")


def test_an_untuned_claim_is_judged_only_with_each_of_the_seeds_one_to_three():
    # a rule that holds in the one seed stored holds "in every seed", which says nothing beyond the seeds' noise
    rule = demo("metric(a) >= 0.9")
    one = R.Measurements({"a": [row(0.95, seed=1)], "b": [row(0.5, cell="lstm", seed=1)]})
    verdict = R.judge(rule, one, "paper")
    assert verdict.status == "not run yet" and verdict.checks[0].passed
    assert verdict.reason.startswith(
        "Every judged run needs seeds 1, 2, 3; not stored yet: a (seeds 2, 3), b (seeds 2, 3). On the seeds stored: "
        "reproduced."
    )
    every = {"a": [row(0.95, seed=s) for s in SEEDS], "b": [row(0.5, cell="lstm", seed=s) for s in SEEDS]}
    assert R.judge(rule, R.Measurements(every), "paper").status == "reproduced"
