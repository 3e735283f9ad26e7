"""Configs: schema, validation messages, overrides, files, presets."""

import inspect
import json

import pytest

from ltdrnn import limits
from ltdrnn.cells.registry import list_cells
from ltdrnn.config import (
    ConfigError,
    RunConfig,
    apply_overrides,
    deep_merge,
    from_dict,
    list_presets,
    load_config,
    parse_override,
    preset_data,
    save_config,
)
from ltdrnn.models import build_model
from ltdrnn.tasks import build_task, list_tasks

PAPER_GROUPS = ("tarnn", "irnn", "srnn", "mist", "sarnn", "lstm")


def test_defaults_need_a_length_of_training():
    with pytest.raises(ConfigError, match="train.epochs / train.steps"):
        from_dict({})
    assert from_dict({"train": {"steps": 5}}).optim.name == "adam"


@pytest.mark.parametrize(
    "data, key",
    [
        ({"train": {"steps": 1}, "modle": {}}, "'modle'"),
        ({"train": {"steps": 1, "stpes": 3}}, "'train.stpes'"),
        ({"train": {"steps": 1}, "optim": {"learning_rate": 0.1}}, "'optim.learning_rate'"),
    ],
)
def test_unknown_keys_are_rejected_with_the_valid_ones(data, key):
    with pytest.raises(ConfigError) as error:
        from_dict(data)
    message = str(error.value)
    assert key in message and "valid keys" in message
    section = key.strip("'").split(".")[0] if "." in key else None
    valid = {"train": "batch_size", "optim": "lr", None: "model"}[section]
    assert valid in message


def test_unknown_override_key_is_rejected():
    with pytest.raises(ConfigError, match=r"'optim.lrr'.*valid keys in optim: name, lr"):
        load_config({"train": {"steps": 1}}, ["optim.lrr=0.1"])


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.hidden_size=abc", "model.hidden_size: expected an integer, got 'abc'"),
        ("model.hidden_size=1.5", "model.hidden_size: expected an integer"),
        ("train.progress=3", "train.progress: expected true or false"),
        ("optim.lr=fast", "optim.lr: expected a number"),
        ("optim.name=adamw", "optim.name: expected one of adam, rmsprop, sgd, got 'adamw'"),
        ("optim.lr=-1", "optim.lr: expected a positive value"),
        ("model.dropout=1.0", "model.dropout: expected a probability"),
        ("train.loss_weights.budget=x", "train.loss_weights.budget: expected a number"),
        ("model.options=3", "model.options: expected a mapping"),
    ],
)
def test_values_are_type_checked(override, message):
    with pytest.raises(ConfigError) as error:
        load_config({"train": {"steps": 1}}, [override])
    assert message in str(error.value)


def test_overrides_are_read_as_yaml_values():
    assert parse_override("optim.lr=1e-3") == (["optim", "lr"], 1e-3)
    assert parse_override("optim.clip_norm=null") == (["optim", "clip_norm"], None)
    assert parse_override("model.options.K=5")[1] == 5
    assert parse_override("model.options.gate=outside")[1] == "outside"
    assert parse_override("train.progress=false")[1] is False
    cfg = load_config({"train": {"steps": 1}}, ["model.options.K=5", "train.loss_weights.budget=1e-4", "optim.lr=3"])
    assert cfg.model.options == {"K": 5} and cfg.train.loss_weights == {"budget": 1e-4}
    assert isinstance(cfg.optim.lr, float) and cfg.optim.lr == 3.0
    with pytest.raises(ConfigError, match="expected key.sub=value"):
        parse_override("optim.lr")


def test_override_into_a_scalar_is_an_error():
    with pytest.raises(ConfigError, match="optim.lr is not a mapping"):
        apply_overrides({"optim": {"lr": 1.0}}, ["optim.lr.x=2"])


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_file_round_trip(tmp_path, suffix):
    cfg = load_config({"train": {"steps": 7}, "model": {"options": {"K": 3}}})
    path = tmp_path / f"cfg{suffix}"
    save_config(cfg, path)
    assert load_config(path) == cfg
    assert load_config(path, ["train.steps=9"]).train.steps == 9


def test_extends_merges_mappings():
    assert deep_merge({"a": {"x": 1, "y": 2}, "b": 1}, {"a": {"y": 3}}) == {"a": {"x": 1, "y": 3}, "b": 1}
    toy = preset_data("quick/toy-lstm")
    assert toy["model"] == {"hidden_size": 2, "cell": "lstm"} and toy["task"]["name"] == "tarnn_toy"
    assert toy["preset"] == "quick/toy-lstm"


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ConfigError, match="quick/toy-lstm"):
        load_config("quick/nope")


def test_paper_groups_and_the_quick_group_have_presets():
    names = list_presets()
    for group in PAPER_GROUPS + ("quick",):
        assert any(n.startswith(group + "/") for n in names), group
    quick_cells = {load_config(n).model.cell for n in list_presets("quick")}
    assert quick_cells == {"tarnn", "srnn", "mist", "irnn", "sarnn", "lstm"}


_TASKS_BUILT = {}


def _small_task(name, options):
    """The preset's task, with split sizes cut down where the task takes them; built once per test run."""
    accepted = inspect.signature(build_task.__globals__["_TASKS"][name]).parameters
    small = dict(options)
    for key in ("n_train", "n_val", "n_test"):
        if key in accepted:
            small[key] = 4
    key = (name, json.dumps(small, sort_keys=True))
    if key not in _TASKS_BUILT:
        _TASKS_BUILT[key] = build_task(name, **small)
    return _TASKS_BUILT[key]


@pytest.mark.parametrize("name", list_presets())
def test_every_preset_validates_and_builds(name):
    cfg = load_config(name)
    assert cfg.preset == name
    assert json.loads(cfg.to_json())["model"]["cell"] == cfg.model.cell
    if cfg.model.cell not in list_cells():
        pytest.skip(f"cell {cfg.model.cell} not registered yet")
    if cfg.task.name not in list_tasks():
        pytest.skip(f"task {cfg.task.name} not registered yet")
    task = _small_task(cfg.task.name, cfg.task.options)
    model = build_model(cfg.model, task.info)
    x, y, lengths = task.collate([task.dataset("train")[i] for i in range(2)])
    out = model(x, lengths)
    assert out.shape[0] == 2 and out.shape[-1] == task.info.output_size
    missing = set(cfg.train.loss_weights) - set(model.losses())
    assert not missing, f"loss_weights names terms the model does not provide: {missing}"


def test_run_config_dict_is_json_serialisable():
    assert isinstance(RunConfig().to_json(), str)


def test_every_preset_asks_for_a_fifth_of_the_work_cap_at_most(monkeypatch):
    """Room under limits.MAX_SPLIT_STEPS: every preset still loads with the cap cut to a fifth (the
    largest split of all, copy-1000's training split, is 100,000 series of 1,000 steps as counted)."""
    monkeypatch.setattr(limits, "MAX_SPLIT_STEPS", limits.MAX_SPLIT_STEPS // 5)
    for name in list_presets():
        load_config(name)
    with pytest.raises(ConfigError, match="MAX_SPLIT_STEPS: 100,000,000 steps"):
        load_config("srnn/copy-1000", ["task.options.T=1001"])
