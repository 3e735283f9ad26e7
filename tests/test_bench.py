"""The benchmark's bookkeeping: schema, coverage of the registry, ratios, targets and the report.

Nothing here asserts a speed: the runs use tiny shapes (T=8, B=2, H=4) and only the consistency of
what the benchmark derives from its own measurements is checked.
"""

import json

import pytest
import torch

import ltdrnn
from ltdrnn import bench
from ltdrnn.cli import main

SECTIONS = "train,inference,stream,scaling,flops,skip"


def tiny_argv(tmp_path, *extra):
    options = [
        f"--option={name}.{key}={value!r}"
        for name in ltdrnn.list_cells()
        for key, value in ltdrnn.entry(name).test_options.items()
    ]
    return [
        "--shapes",
        "8x3",
        "--batch",
        "2",
        "--hidden",
        "4",
        "--repeats",
        "2",
        "--warmup",
        "1",
        "--lengths",
        "4,8",
        "--scaling-shape",
        "8x3",
        "--stream-steps",
        "2",
        "--skip-fractions",
        "0,0.5",
        "--threads",
        "1",
        "--no-malloc-tuning",
        "--sections",
        SECTIONS,
        "--option=irnn[K=1,lowrank].rank=2",
        *options,
        "--out",
        str(tmp_path / "bench.json"),
        "--markdown",
        str(tmp_path / "bench.md"),
        *extra,
    ]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """One tiny benchmark run over the whole registry, without the references' alone pass (its fresh
    processes are tested below): (JSON result, markdown text)."""
    tmp_path = tmp_path_factory.mktemp("bench")
    threads = torch.get_num_threads()
    try:
        assert main(["bench", *tiny_argv(tmp_path, "--no-alone-reference")]) == 0
    finally:  # the benchmark sets both for the whole process; give the other tests torch's defaults
        torch.set_num_threads(threads)
        torch.set_flush_denormal(False)
    return json.loads((tmp_path / "bench.json").read_text()), (tmp_path / "bench.md").read_text()


def test_json_has_the_machine_settings_and_every_section(report):
    result, _ = report
    assert result["schema"] == bench.SCHEMA
    machine = result["machine"]
    assert machine["torch"] == torch.__version__ and machine["torch_threads"] == 1
    assert machine["matmul_peak"]["gflops"] > 0 and machine["cpu"]
    assert result["settings"]["shapes"] == ["8x3"] and result["settings"]["batch"] == 2
    for section in SECTIONS.split(","):
        assert result[section], section
    assert "memory" not in result and "malloc" not in result
    for record in result["train"] + result["inference"]:
        assert len(record["samples"]) == 2 and record["median"] == pytest.approx(
            sorted(record["samples"])[0] / 2 + sorted(record["samples"])[1] / 2
        )


def test_every_registered_cell_and_variant_is_measured(report):
    result, _ = report
    named = set(result["subjects"]) | {a for info in result["subjects"].values() for a in info["aliases"]}
    assert set(ltdrnn.list_cells()) | {v.name for v in bench.VARIANTS} | {"nn.LSTM", "nn.GRU"} <= named
    assert result["errors"] == []
    for section in ("train", "inference", "stream"):
        assert {r["subject"] for r in result[section]} == set(result["subjects"]), section
    assert {r["subject"] for r in result["scaling"]} == set(result["subjects"])


def test_ratios_are_the_quotients_of_the_medians(report):
    result, _ = report
    for section in ("train", "inference"):
        medians = {r["subject"]: r["median"] for r in result[section]}
        for record in result[section]:
            assert record["ratio_lstm"] == pytest.approx(record["median"] / medians["nn.LSTM"])
            assert record["ratio_gru"] == pytest.approx(record["median"] / medians["nn.GRU"])
    stream = {r["subject"]: r for r in result["stream"]}
    for record in result["stream"]:
        assert record["ratio_lstmcell"] == pytest.approx(record["cell_median"] / stream["nn.LSTM"]["cell_median"])
        assert record["ratio_lstm_layer"] == pytest.approx(record["layer_median"] / stream["nn.LSTM"]["layer_median"])
    lstm = next(r["medians"] for r in result["scaling"] if r["subject"] == "nn.LSTM")
    for record in result["scaling"]:
        assert record["ratio_lstm"] == pytest.approx([s / b for s, b in zip(record["medians"], lstm)])
        assert record["per_step"] == pytest.approx([s / t for s, t in zip(record["medians"], record["lengths"])])
        assert record["slope"] == pytest.approx(bench.loglog_slope(record["lengths"], record["medians"]))


def test_flops_use_the_measured_medians(report):
    result, _ = report
    train = {r["subject"]: r["median"] for r in result["train"]}
    peak = result["machine"]["matmul_peak"]["gflops"]
    for record in result["flops"]:
        expected = 3 * record["forward_flops_per_sequence"] * 2 / train[record["subject"]] / 1e9
        assert record["train_gflops"] == pytest.approx(expected)
        assert record["train_peak_fraction"] == pytest.approx(expected / peak)
    lstm = next(r for r in result["flops"] if r["subject"] == "nn.LSTM")
    # 8 steps of the 4H x (d + H) weights, one multiply-add (2 FLOPs) each
    assert lstm["forward_flops_per_sequence"] == 2 * 8 * 4 * 4 * (3 + 4)


def test_arithmetic_limit_ratio_is_the_flops_quotient_to_lstm(report):
    result, markdown = report
    flops = {r["subject"]: r for r in result["flops"]}
    lstm = flops["nn.LSTM"]["forward_flops_per_sequence"]
    for record in result["flops"]:
        assert record["ratio_lstm_flops"] == pytest.approx(record["forward_flops_per_sequence"] / lstm)
    # a GRU unit has 3 of the LSTM's 4 gate rows, whatever d and H
    assert flops["nn.GRU"]["ratio_lstm_flops"] == pytest.approx(0.75)
    # TARNN K=1 (H=4, d=3): 3Hd + 3H^2 + 2H against 4H(d + H)
    assert flops["tarnn[K=1]"]["ratio_lstm_flops"] == pytest.approx((36 + 48 + 8) / 112)
    assert "FLOPs x nn.LSTM" in markdown and f"| {flops['nn.GRU']['ratio_lstm_flops']:.3g} |" in markdown


def test_targets_follow_from_the_measurements(report):
    result, _ = report
    rows = result["targets"]
    labels = {r["target"] for r in rows}
    assert {t.label for t in bench.TRAIN_TARGETS + bench.RATE_TARGETS} <= labels
    assert {f"{name} streaming step, batch 1" for name in ltdrnn.list_cells("source")} <= labels
    train = {r["subject"]: r["median"] for r in result["train"]}
    rates = {r["subject"]: r["train_gflops"] for r in result["flops"]}
    layer_steps = {r["subject"]: r["layer_median"] for r in result["stream"]}
    cell_steps = {r["subject"]: r["cell_median"] for r in result["stream"]}
    for row in rows:
        if row["section"] == "stream":  # Recurrent.step against nn.LSTMCell's step
            expected = layer_steps[row["measured_as"]] / cell_steps[row["baseline"]]
        elif row["section"] == "flops":  # GFLOP/s against nn.LSTM's: at least the limit
            expected = rates[row["measured_as"]] / rates[row["baseline"]]
        else:
            expected = train[row["measured_as"]] / train[row["baseline"]]
        assert row["measured"] == pytest.approx(expected)
        within = row["measured"] >= row["limit"] if row["at_least"] else row["measured"] <= row["limit"]
        assert row["passed"] == within
        if not row["passed"]:
            assert row["miss_percent"] == pytest.approx(100 * abs(row["measured"] / row["limit"] - 1))


def test_json_records_the_host_and_the_health_of_the_run(report):
    """ISA flags, library versions, load at both ends, nn.LSTM's share of the sgemm peak."""
    result, markdown = report
    machine, health = result["machine"], result["health"]
    assert machine["isa"] in ("AMX", "AVX-512", "AVX2", "other")
    assert set(machine["isa_flags"]) <= set(bench.host.ISA_FLAGS)
    assert machine["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert machine["load_average_end"] is None or len(machine["load_average_end"]) == 3
    lstm = next(r for r in result["flops"] if r["subject"] == "nn.LSTM")
    assert health["lstm"] == [
        {
            "shape": "8x3",
            "train_gflops": lstm["train_gflops"],
            "train_peak_fraction": lstm["train_peak_fraction"],
            "usual_peak_fraction": None,  # only pixel-MNIST shape has a usual share
            "far_below_usual": None,
        }
    ]
    assert health["quiet_load_limit"] == 1 + bench.host.QUIET_LOAD_MARGIN
    assert "Host: " in markdown and ("## Warnings" in markdown) == bool(health["warnings"])


def fake_result(isa, load, lstm_fraction):
    machine = {"torch_threads": 2, "isa": isa, "load_average": [load, 0, 0], "load_average_end": [1.5, 0, 0]}
    return {"machine": machine}, [{"shape": "pixel_mnist", "train_gflops": 1.0, "train_peak_fraction": lstm_fraction}]


@pytest.mark.parametrize(
    "isa, load, fraction, warned",
    [
        ("AVX-512", 1.9, 0.95, []),
        ("AVX-512", 3.5, 0.95, ["not quiet"]),
        ("AVX-512", 1.9, 0.5, ["far below"]),
        ("AVX-512", 8.0, 0.45, ["not quiet", "far below"]),
        ("AVX2", 1.9, 0.5, []),  # no usual share known for AVX2 hosts: no verdict on nn.LSTM
    ],
)
def test_health_warns_on_a_busy_machine_and_a_slow_lstm(isa, load, fraction, warned):
    result, lstm = fake_result(isa, load, fraction)
    health = bench.host.health(result, lstm)
    assert [next(w for w in warned if w in text) for text in health["warnings"]] == warned
    assert health["quiet"] == ("not quiet" not in warned)
    assert health["lstm"][0]["far_below_usual"] == ("far below" in warned if isa == "AVX-512" else None)


def test_a_host_kept_below_its_isa_gets_no_verdict_on_nn_lstm(monkeypatch):
    """ONEDNN_MAX_CPU_ISA=AVX2 on an AVX-512 CPU times another kind of host: its nn.LSTM is not judged by
    the AVX-512 share, and the run records the limits."""
    for name in (*bench.host.ISA_LIMITS, "LTDRNN_KERNEL_ARCH"):
        monkeypatch.delenv(name, raising=False)
    assert bench.host.isa_limits() == {}
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("LTDRNN_KERNEL_ARCH", "x86-64-v3")
    assert bench.host.isa_limits() == {"ONEDNN_MAX_CPU_ISA": "AVX2", "LTDRNN_KERNEL_ARCH": "x86-64-v3"}
    result, lstm = fake_result("AVX-512", 1.9, 0.5)
    result["machine"]["isa_limits"] = bench.host.isa_limits()
    health = bench.host.health(result, lstm)
    assert health["warnings"] == [] and health["lstm"][0]["far_below_usual"] is None
    line = bench.report.limited(result["machine"])
    assert line == ", limited by ONEDNN_MAX_CPU_ISA=AVX2 LTDRNN_KERNEL_ARCH=x86-64-v3"


def test_markdown_has_the_target_rows_and_the_tables(report):
    result, markdown = report
    assert result["command"] in markdown
    for row in result["targets"]:
        assert row["target"] in markdown
    assert markdown.count("| pass |") + markdown.count("**miss** by") == len(result["targets"])
    for title in (
        "## Targets",
        "## Training step",
        "## Inference",
        "## Streaming step",
        "## Scaling in T",
        "## SA-RNN skipping inference",
    ):
        assert title in markdown


def test_skip_section_forces_the_requested_fraction(report):
    result, _ = report
    records = result["skip"]
    assert {r["backend"] for r in records} == {"sparse", "cpp"} and {r["batch"] for r in records} == {1, 2}
    for record in records:
        assert record["measured_skip"] == pytest.approx(record["target_skip"])


def test_variant_equal_to_the_defaults_is_an_alias():
    subjects = {s.name: s for s in bench.registry_subjects(["srnn", "srnn[relu]", "tarnn[K=1]"], {})}
    assert "srnn[relu]" in subjects["srnn"].aliases and "srnn[relu]" not in subjects
    assert subjects["tarnn[K=1]"].options == {"K": 1}
    assert list(subjects)[:2] == ["nn.LSTM", "nn.GRU"]


def test_options_apply_per_cell_and_a_variant_keeps_its_own():
    options = bench.parse_options(["tarnn.K=2", "tarnn.eta=0.5", "tarnn[K=1].backend=reference"])
    assert options == {"tarnn": {"K": 2, "eta": 0.5}, "tarnn[K=1]": {"backend": "reference"}}
    subjects = {s.name: s for s in bench.registry_subjects(["tarnn", "tarnn[K=1]"], options)}
    assert subjects["tarnn"].options == {"K": 2, "eta": 0.5}
    assert subjects["tarnn[K=1]"].options == {"K": 1, "eta": 0.5, "backend": "reference"}


def test_cell_list_keeps_commas_inside_variant_names():
    assert bench.split_names("srnn, irnn[K=1,lowrank],tarnn[K=1]") == ["srnn", "irnn[K=1,lowrank]", "tarnn[K=1]"]


def test_unknown_names_and_options_are_reported():
    with pytest.raises(ValueError, match="unknown name"):
        bench.registry_subjects(["no_such_cell"], {})
    subject = bench.registry_subjects(["srnn"], {"srnn": {"no_such_option": 1}})[-1]
    assert "no_such_option" in subject.error
    with pytest.raises(ValueError, match="NAME.KEY=VALUE"):
        bench.parse_options(["tarnn=1"])
    with pytest.raises(ValueError, match="unknown shape"):
        bench.parse_shapes("adding,nope")
    assert bench.parse_shapes("adding,12x5")[1] == bench.Shape("12x5", 12, 5)


def test_missing_cell_gives_an_unmeasured_target_row():
    settings = {"shapes": ["s"], "sections": ["train", "stream"]}
    result = {
        "settings": settings,
        "errors": [],
        "train": [
            {"subject": "nn.LSTM", "shape": "s", "median": 2.0},
            {"subject": "mist", "shape": "s", "median": 3.0},
        ],
        "subjects": {
            "nn.LSTM": {"family": "torch", "cell": None, "aliases": [], "error": None},
            "mist": {"family": "source", "cell": "mist", "aliases": [], "error": None},
        },
    }
    rows = {r["target"]: r for r in bench.evaluate_targets(result)}
    mist = rows["MIST training step"]
    assert mist["measured"] == 1.5 and mist["passed"] is False
    limit = next(t.limit for t in bench.TRAIN_TARGETS if t.subject == "mist")
    assert mist["limit"] == limit and mist["miss_percent"] == pytest.approx(100 * (1.5 / limit - 1))
    assert rows["SRNN (relu) training step"]["passed"] is None
    assert "not selected" in rows["SRNN (relu) training step"]["note"]
    assert "not measured" in bench.target_verdict(rows["mist streaming step, batch 1"])


def test_loglog_slope_recovers_the_power():
    lengths = [250, 1000, 4000]
    assert bench.loglog_slope(lengths, [3e-4 * t for t in lengths]) == pytest.approx(1.0)
    assert bench.loglog_slope(lengths, [1e-6 * t * t for t in lengths]) == pytest.approx(2.0)


def test_copy_shape_is_one_hot():
    x = bench.SHAPES["copy"].batch(3, steps=5)
    assert x.shape == (3, 5, 10) and torch.equal(x.sum(-1), torch.ones(3, 5))


def test_memory_probe_counts_at_least_the_output_tensor():
    spec = {
        "subject": bench.subject_spec(bench.Subject("nn.LSTM", None)),
        "shape": {"name": "s", "steps": 200, "input_size": 3, "one_hot": False},
        "batch": 64,
        "hidden": 64,
        "threads": 1,
        "malloc_tuning": False,
    }
    result = bench.run_probe("memory", spec)
    output_mb = 200 * 64 * 64 * 4 / 2**20
    assert result["inference_peak_mb"] >= output_mb
    assert result["train_peak_mb"] > result["inference_peak_mb"]


def test_render_reproduces_the_markdown_from_the_json(report, tmp_path, capsys):
    result, markdown = report
    (tmp_path / "in.json").write_text(json.dumps(result))
    assert main(["bench", "--render", str(tmp_path / "in.json"), "--markdown", str(tmp_path / "out.md")]) == 0
    assert (tmp_path / "out.md").read_text() == markdown


def test_render_refuses_a_run_of_another_schema_naming_it(report, tmp_path, capsys):
    result, _ = report
    (tmp_path / "old.json").write_text(json.dumps({**result, "schema": "ltdrnn.bench/1"}))
    assert main(["bench", "--render", str(tmp_path / "old.json")]) == 2
    err = capsys.readouterr().err
    assert "--render: expected a benchmark result of schema 'ltdrnn.bench/2'" in err and "'ltdrnn.bench/1'" in err
    assert "Traceback" not in err


def test_a_failing_run_is_dropped_and_recorded():
    def broken():
        raise RuntimeError("boom")

    calls = []
    errors = []
    samples = bench.interleaved_samples(
        {("bad", "cell"): broken, "good": lambda: calls.append(1)},
        repeats=3,
        warmup=1,
        errors=errors,
        context={"section": "stream"},
    )
    assert list(samples) == ["good"] and len(samples["good"]) == 3 and len(calls) == 4
    assert errors == [{"section": "stream", "subject": "bad", "error": "RuntimeError: boom"}]


def test_timing_probe_reports_a_median_per_subject():
    spec = {
        "subjects": [
            bench.subject_spec(bench.Subject("nn.LSTM", None)),
            bench.subject_spec(bench.registry_subjects(["srnn"], {})[-1]),
        ],
        "shape": {"name": "s", "steps": 8, "input_size": 3, "one_hot": False},
        "batch": 2,
        "hidden": 4,
        "threads": torch.get_num_threads(),
        "repeats": 2,
        "warmup": 1,
        "mode": "default",
    }
    try:
        medians = bench.timing_probe(spec)
    finally:
        torch.set_flush_denormal(False)
    assert set(medians) == {"nn.LSTM", "srnn"} and all(m > 0 for m in medians.values())


# ---- the profile section: where a step's time goes ---------------------------------------------------
def test_profile_split_puts_a_product_under_matmul_and_counts_dispatches():
    from ltdrnn.bench.profile import profile_split

    a, b = torch.randn(256, 256), torch.randn(256, 256)
    steps = 50

    def loop() -> None:  # per step: one product and one elementwise op, both called from Python
        for _ in range(steps):
            torch.mm(a, b).add_(1.0)

    split = profile_split(loop, steps)
    assert split["dispatches_per_step"] == pytest.approx(2.0)
    assert split["matmul_ms"] > split["other_ops_ms"] > 0
    parts = split["matmul_ms"] + split["compiled_ms"] + split["other_ops_ms"] + split["outside_ops_ms"]
    assert parts == pytest.approx(split["wall_ms"], rel=0.05)
    assert split["costliest_ops"][0]["op"] == "aten::mm"


def test_profile_split_counts_python_time_outside_the_operators():
    from ltdrnn.bench.profile import profile_split

    x = torch.zeros(4)

    def busy_python() -> None:
        total = 0
        for i in range(500_000):  # pure Python: no operator runs
            total += i
        x.add_(total)

    busy_python()  # a first call spent ~9 ms in aten::_to_copy, once per process (measured)
    split = profile_split(busy_python, 1)
    assert split["outside_ops_ms"] > 10 * (split["matmul_ms"] + split["other_ops_ms"])
    assert split["dispatches_per_step"] == 1.0


def test_profile_section_reports_every_subject(tmp_path):
    argv = tiny_argv(tmp_path, "--cells", "srnn")
    argv[argv.index("--sections") + 1] = "profile"
    threads = torch.get_num_threads()
    try:
        assert main(["bench", *argv]) == 0
    finally:
        torch.set_num_threads(threads)
        torch.set_flush_denormal(False)
    result = json.loads((tmp_path / "bench.json").read_text())
    assert {r["subject"] for r in result["profile"]} == {"srnn", "nn.LSTM", "nn.GRU"}
    assert "Where a training step's time goes" in (tmp_path / "bench.md").read_text()


def test_a_run_of_variants_only_still_holds_every_source_cells_streaming_step_to_lstmcell():
    # `--cells 'srnn[relu],tarnn[K=1],tarnn[K=5]'` measures no subject named after its cell
    source = {"family": "source", "aliases": [], "error": None}
    subjects = {
        "nn.LSTM": {"family": "torch", "cell": None, "aliases": [], "error": None},
        "srnn[relu]": {**source, "cell": "srnn"},
        "tarnn[K=1]": {**source, "cell": "tarnn"},
        "tarnn[K=5]": {**source, "cell": "tarnn"},
    }
    assert bench.stream_subjects(subjects) == {"srnn": "srnn[relu]", "tarnn": "tarnn[K=1]"}
    assert bench.stream_subjects({**subjects, "tarnn": {**source, "cell": "tarnn"}})["tarnn"] == "tarnn"
    stream = [
        {"subject": "nn.LSTM", "shape": "s", "cell_median": 2.0},
        {"subject": "srnn[relu]", "shape": "s", "layer_median": 3.0},
        {"subject": "tarnn[K=1]", "shape": "s", "layer_median": 1.0},
    ]
    result = {"settings": {"shapes": ["s"], "sections": ["stream"]}, "errors": [], "stream": stream}
    rows = {r["target"]: r for r in bench.evaluate_targets({**result, "subjects": subjects})}
    assert rows["srnn[relu] streaming step, batch 1"]["passed"] is False
    assert rows["tarnn[K=1] streaming step, batch 1"]["passed"] is True


# ---- the references alone: nn.LSTM and nn.GRU at their best --------------------------------------------
def tiny_settings(sections, alone=True):
    return bench.timing.Settings(
        shapes=[bench.Shape("s", 8, 3)],
        batch=2,
        hidden=4,
        repeats=2,
        warmup=1,
        lengths=[4, 8],
        scaling_shape=bench.Shape("s", 8, 3),
        stream_steps=2,
        skip_fractions=[0.0],
        sections=sections,
        threads=1,
        malloc_tuning=False,
        alone_reference=alone,
    )


def inject_timings(monkeypatch, interleaved, alone):
    """Interleaved samples of ``interleaved[name]`` seconds (``[name][part]`` when a run is keyed by part),
    and alone probes that answer ``alone[name]``; returns the specs the probes received."""
    specs = []

    def fake_samples(runs, repeats, warmup, errors, context):
        return {
            key: [interleaved[key]] * repeats if isinstance(key, str) else [interleaved[key[0]][key[1]]] * repeats
            for key in runs
        }

    def fake_probe(kind, spec, env=None):
        specs.append((kind, spec))
        return alone[spec["subject"]["name"]]

    monkeypatch.setattr(bench.sections, "interleaved_samples", fake_samples)
    monkeypatch.setattr(bench.alone, "run_probe", fake_probe)
    return specs


@pytest.mark.parametrize(
    "lstm_interleaved, lstm_alone, used, slowed",
    [(0.40, 0.30, "alone", True), (0.32, 0.30, "alone", False), (0.30, 0.33, "interleaved", False)],
)
def test_ratios_divide_by_the_faster_reference_time(monkeypatch, lstm_interleaved, lstm_alone, used, slowed):
    interleaved = {"nn.LSTM": lstm_interleaved, "nn.GRU": 0.50, "srnn[relu]": 0.03}
    specs = inject_timings(
        monkeypatch, interleaved, {"nn.LSTM": {"run": [lstm_alone] * 2}, "nn.GRU": {"run": [0.60] * 2}}
    )
    subjects = bench.registry_subjects(["srnn[relu]"], {})
    settings = tiny_settings(["train"])
    errors = []
    timings = bench.sections.measure_sequences(subjects, settings, errors)
    assert errors == []
    # the alone pass: one probe per reference, each given that reference only, none of our cells
    assert sorted(spec["subject"]["name"] for _, spec in specs) == ["nn.GRU", "nn.LSTM"]
    assert all(kind == "alone" and spec["section"] == "train" and "subjects" not in spec for kind, spec in specs)
    records = {r["subject"]: r for r in timings["train"]}
    best = min(lstm_interleaved, lstm_alone)
    lstm, gru = records["nn.LSTM"], records["nn.GRU"]
    assert (lstm["median"], lstm["alone_median"], lstm["reference"]) == (lstm_interleaved, lstm_alone, used)
    assert gru["alone_samples"] == [0.60, 0.60] and gru["reference"] == "interleaved"
    assert records["srnn[relu]"]["ratio_lstm"] == pytest.approx(0.03 / best)
    assert records["srnn[relu]"]["ratio_gru"] == pytest.approx(0.03 / 0.50)
    # the GFLOP/s comparison and the targets' verdicts use the same time
    flops = {r["subject"]: r for r in bench.sections.flops_records(subjects, settings, timings, 100.0, errors)}
    assert flops["nn.LSTM"]["train_gflops"] == pytest.approx(
        3 * flops["nn.LSTM"]["forward_flops_per_sequence"] * 2 / best / 1e9
    )
    assert flops["nn.LSTM"]["train_reference"] == used and "train_reference" not in flops["srnn[relu]"]
    result = {
        "settings": {"shapes": ["s"], "sections": ["train"]},
        "errors": [],
        "subjects": {
            s.name: {"family": s.family, "cell": s.cell, "aliases": s.aliases, "error": None} for s in subjects
        },
        **timings,
    }
    row = next(r for r in bench.evaluate_targets(result) if r["subject"] == "srnn[relu]")
    assert row["measured"] == pytest.approx(0.03 / best) and row["baseline_reference"] == used
    assert bench.report.target_limit(row).endswith(f"x nn.LSTM ({used})")
    # the warning: interleaved more than 10% slower than alone
    checks = {r["subject"]: r for r in bench.reference_checks(result)}
    assert checks["nn.LSTM"]["slowdown"] == pytest.approx(lstm_interleaved / lstm_alone)
    assert checks["nn.LSTM"]["slowed"] is slowed and checks["nn.GRU"]["slowed"] is False


def test_the_streaming_references_are_timed_alone_too(monkeypatch):
    interleaved = {
        "nn.LSTM": {"cell": 0.8, "layer": 2.0},
        "nn.GRU": {"cell": 0.7, "layer": 1.5},
        "srnn": {"cell": 0.6, "layer": 1.0},
    }
    alone = {"nn.LSTM": {"cell": [0.6, 0.6], "layer": [2.2, 2.2]}, "nn.GRU": {"cell": [0.5, 0.5], "layer": [1.4, 1.4]}}
    specs = inject_timings(monkeypatch, interleaved, alone)
    subjects = bench.registry_subjects(["srnn"], {})
    records = {r["subject"]: r for r in bench.sections.measure_stream(subjects, tiny_settings(["stream"]), [])}
    assert sorted(spec["subject"]["name"] for _, spec in specs) == ["nn.GRU", "nn.LSTM"]
    lstm = records["nn.LSTM"]  # 2 steps per sample: seconds per step are half a sample
    assert (lstm["alone_cell_median"], lstm["cell_reference"]) == (0.3, "alone")
    assert (lstm["alone_layer_median"], lstm["layer_reference"]) == (1.1, "interleaved")
    assert records["srnn"]["ratio_lstmcell"] == pytest.approx(0.3 / 0.3)
    assert records["srnn"]["ratio_lstm_layer"] == pytest.approx(0.5 / 1.0)
    slowed = {
        (r["subject"], r["key"]) for r in bench.reference_checks({"stream": list(records.values())}) if r["slowed"]
    }
    assert slowed == {("nn.LSTM", "cell_median"), ("nn.GRU", "cell_median")}  # 0.4 / 0.3, 0.35 / 0.25


def test_reference_times_read_in_seconds_milliseconds_or_microseconds():
    assert [bench.alone.seconds(t) for t in (27.53, 0.3021, 4.759e-4, None)] == ["27.53 s", "302.1 ms", "475.9 µs", "-"]


def test_no_alone_reference_runs_no_probe(monkeypatch):
    def refuse(kind, spec, env=None):
        raise AssertionError("a probe ran")

    monkeypatch.setattr(bench.alone, "run_probe", refuse)
    assert (
        bench.alone.measure_alone(
            bench.registry_subjects(["srnn"], {}),
            "train",
            bench.Shape("s", 8, 3),
            tiny_settings(["train"], alone=False),
            [],
        )
        == {}
    )


def test_the_alone_probe_builds_only_its_subject_on_the_shared_seeded_input(monkeypatch):
    built, inputs = [], []
    layer = bench.Subject.layer
    monkeypatch.setattr(bench.Subject, "layer", lambda self, d, h: built.append(self.name) or layer(self, d, h))
    monkeypatch.setattr(bench.alone, "train_step", lambda module, x: inputs.append(x) or (lambda: None))
    spec = {
        "section": "train",
        "subject": bench.subject_spec(bench.Subject("nn.GRU", None)),
        "shape": {"name": "s", "steps": 8, "input_size": 3, "one_hot": False},
        "batch": 2,
        "hidden": 4,
        "threads": torch.get_num_threads(),
        "malloc_tuning": False,
        "repeats": 3,
        "warmup": 1,
        "stream_steps": 2,
    }
    try:
        samples = bench.alone_probe(spec)
    finally:
        torch.set_flush_denormal(False)
    assert built == ["nn.GRU"] and list(samples) == ["run"] and len(samples["run"]) == 3
    torch.manual_seed(123)  # the input does not depend on what the process drew before
    assert torch.equal(inputs[0], bench.Shape("s", 8, 3).batch(2, seed=bench.timing.INPUT_SEED))


def test_a_json_from_before_the_alone_pass_renders_as_before(report):
    result, markdown = report
    old = json.loads(json.dumps(result))
    del old["settings"]["alone_reference"], old["health"]["references"]
    for row in old["targets"]:
        del row["baseline_reference"]
    assert bench.render_markdown(old) + "\n" == markdown  # the file ends with a newline
    assert "divides by" not in markdown and "also each alone" not in markdown
    assert result["settings"]["alone_reference"] is False and result["health"]["references"] == []
    assert not any(key.startswith("alone_") for r in result["train"] + result["stream"] for key in r)


@pytest.mark.slow
def test_the_references_are_timed_alone_in_fresh_processes(tmp_path):
    argv = tiny_argv(tmp_path, "--cells", "srnn")
    argv[argv.index("--sections") + 1] = "train,stream"
    threads = torch.get_num_threads()
    try:
        assert main(["bench", *argv]) == 0
    finally:
        torch.set_num_threads(threads)
        torch.set_flush_denormal(False)
    result = json.loads((tmp_path / "bench.json").read_text())
    markdown = (tmp_path / "bench.md").read_text()
    assert result["errors"] == [] and result["settings"]["alone_reference"] is True
    train = {r["subject"]: r for r in result["train"]}
    for name in ("nn.LSTM", "nn.GRU"):
        record = train[name]
        assert len(record["alone_samples"]) == 2 and record["alone_median"] == pytest.approx(
            sum(record["alone_samples"]) / 2
        )
        assert record["reference"] == ("alone" if record["alone_median"] < record["median"] else "interleaved")
    assert "alone_samples" not in train["srnn"]
    lstm = train["nn.LSTM"]
    assert train["srnn"]["ratio_lstm"] == pytest.approx(
        train["srnn"]["median"] / min(lstm["median"], lstm["alone_median"])
    )
    checks = result["health"]["references"]
    assert len(checks) == 2 + 2 * 2  # train; cell and layer streaming steps, for each reference
    slowed = [r for r in checks if r["slowed"]]
    assert len(result["health"]["warnings"]) - (0 if result["health"]["quiet"] else 1) == len(slowed)
    assert (
        f"`x nn.LSTM` divides by nn.LSTM {lstm['reference']}" in markdown and "`x nn.LSTMCell` divides by" in markdown
    )
