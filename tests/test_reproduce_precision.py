"""How the reproductions treat precision: a run's device and bf16 setting are how it executes, not
what it is; a seed's pre-trainings share one precision; a table says at what precision it trained."""
import json

from reproduce.store import Store


def test_every_pretraining_of_a_home_runs_at_one_precision(tmp_path):
    """small pre-trains in bf16 on a CPU that can, except in a home (a seed) where a pre-training
    already ran in fp32: the models a table pairs are then always trained alike."""
    from reproduce.store import Store
    store = Store("small", tmp_path / "runs", tmp_path / "data")
    assert store.pretrain_cpu_bf16()                                  # a new home
    for name, flag in (("a", True), ("b", None)):
        (store.home / "pretrain" / name).mkdir(parents=True)
        config = {"steps": 1000, **({"cpu_bf16": flag} if flag is not None else {})}
        (store.home / "pretrain" / name / "train_config.json").write_text(json.dumps({"config": config}))
        assert store.pretrain_cpu_bf16() == bool(flag)                # b predates the setting: fp32
    assert not Store("tiny", tmp_path / "runs", tmp_path / "data", seed=1).pretrain_cpu_bf16()   # tiny: fp32
    other = Store("small", tmp_path / "runs", tmp_path / "data", seed=2)     # asked for bf16 on a CPU without it
    (other.home / "pretrain" / "c").mkdir(parents=True)
    (other.home / "pretrain" / "c" / "train_config.json").write_text(json.dumps({"config": {"cpu_bf16": True}}))
    (other.home / "pretrain" / "c" / "metrics.jsonl").write_text(json.dumps({"step": 10, "loss": 1.0, "bf16": False}))
    assert not other.pretrain_cpu_bf16()


def test_a_run_built_on_another_device_or_precision_is_the_same_artifact(tmp_path):
    """A run trained in fp32 on a CPU is reused (and resumed) where the store now asks for bf16 or
    another device; a setting of what a step computes is not."""
    from reproduce.store import _changes
    record = tmp_path / "train_config.json"
    record.write_text(json.dumps({"student": "s", "config": {"lr": 1e-4, "device": "cpu", "bf16": True}}))
    wanted = {"student": "s", "config": {"lr": 1e-4, "device": "auto", "bf16": False, "cpu_bf16": True}}
    assert _changes(record, wanted, {"cpu_bf16": False}) == ""
    assert "lr=" in _changes(record, {**wanted, "config": {**wanted["config"], "lr": 3e-4}}, {"cpu_bf16": False})


def test_a_table_says_at_what_precision_its_runs_trained(tmp_path):
    """Steps logged before `cpu_bf16` existed carry no flag and ran fp32; a run that switched
    on resume is named with its count."""
    from reproduce.cli import precision_line
    runs = {"posttrain/old": [None, None], "posttrain/switched": [None, True, True], "pretrain/base": [None]}
    for name, flags in runs.items():
        (tmp_path / name).mkdir(parents=True)
        rows = [{"step": i + 1, "loss": 0.1, **({} if f is None else {"bf16": f})} for i, f in enumerate(flags)]
        rows.append({"step": len(flags), "eval": True, "loss": 0.0, "bf16": True})        # not a training step
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    line = precision_line([tmp_path / name for name in runs])
    assert line == ("Precision of training: post-training mixed (2 of 5 logged steps in bf16; switched 2 of 3); "
                    "pre-training fp32; rollouts and evaluations fp32.")
    assert precision_line([tmp_path / "posttrain" / "old"]).startswith("Precision of training: post-training fp32;")
    assert precision_line([]) == ""
