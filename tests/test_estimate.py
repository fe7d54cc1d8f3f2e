"""reproduce.estimate: the GPU-hour table adds up, scales with its assumptions, and refuses bad input."""
import json
import subprocess
import sys

import pytest

from reproduce.estimate import main


def rows(tmp_path, *argv):
    out = tmp_path / "est.json"
    assert main([*argv, "--json", str(out)]) == 0
    return {r["table"]: r for r in json.loads(out.read_text())["rows"]}


def test_totals_positive_and_sum_of_rows(tmp_path):
    r = rows(tmp_path)
    total = r.pop("total")
    for key in ("pretrain_gpu_h", "posttrain_gpu_h", "eval_gpu_h", "total_gpu_h"):
        assert total[key] > 0
        assert total[key] == pytest.approx(sum(row[key] for row in r.values()))
    for row in r.values():
        assert row["total_gpu_h"] == pytest.approx(row["pretrain_gpu_h"] + row["posttrain_gpu_h"] + row["eval_gpu_h"])


def test_doubling_mfu_halves_training_hours(tmp_path):
    base, fast = rows(tmp_path, "--mfu", "0.3")["total"], rows(tmp_path, "--mfu", "0.6")["total"]
    for key in ("pretrain_gpu_h", "posttrain_update_gpu_h"):
        assert fast[key] == pytest.approx(base[key] / 2)
    assert fast["eval_gpu_h"] == pytest.approx(base["eval_gpu_h"])      # rollouts have their own rate


def test_paper_costs_more_than_small(tmp_path):
    assert rows(tmp_path, "--scale", "paper")["total"]["total_gpu_h"] > \
        rows(tmp_path, "--scale", "small")["total"]["total_gpu_h"]


@pytest.mark.parametrize("argv", [["--scale", "huge"], ["--mfu", "0"], ["--mfu", "1.5"], ["--gpu-flops", "-1"],
                                  ["--rollout-tok-s", "0"]])
def test_bad_input_exits_2_with_one_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")


def test_command_line_exit_status():
    done = subprocess.run([sys.executable, "-m", "reproduce.estimate", "--scale", "nope"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.strip().startswith("error: ") and len(done.stderr.strip().splitlines()) == 1


def test_remaining_leaves_out_what_the_store_has_built(tmp_path):
    """--remaining costs only the artifacts the store lacks: a finished pre-training of the base
    model, the cached evaluation of its student checkpoint (today's protocol) and a post-training
    run built under today's settings drop out and are counted as built; a run built under another
    budget does not."""
    import dataclasses

    from reproduce.store import Store
    store = Store("tiny", tmp_path / "runs", tmp_path / "data")
    base = store.home / "pretrain" / store.corpus_config().name
    for step in (200, 300):                          # tiny: student_step 200, the final checkpoint 300
        (base / "checkpoints" / f"step_{step:06d}").mkdir(parents=True)
        (base / "checkpoints" / f"step_{step:06d}" / "model.safetensors").write_bytes(b"\0")   # built here
    (base / "summary.json").write_text("{}")
    ev = store._eval_dir(base / "checkpoints" / "step_000200", None)
    ev.mkdir(parents=True)
    ev.joinpath("summary.json").write_text(json.dumps({"k": 8, "seed": 0, "max_tasks_per_cell": 1,
                                                       "splits": ["ID", "OOD"], "table": []}))
    for name, lr in (("turnopd-main-opd", None), ("turnopd-main-turnopd", 9e-4)):
        method = name.rsplit("-", 1)[1]
        cfg = store.posttrain_config(method, topk=50, eval_at_start=False, **({"lr": lr} if lr else {}))
        run = store.home / "posttrain" / name
        run.mkdir(parents=True)
        (run / "train_config.json").write_text(json.dumps({"config": dataclasses.asdict(cfg)}))
        (run / "summary.json").write_text("{}")
    argv = ["--scale", "tiny", "--root", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data"),
            "--rollout-tok-s", "100"]
    full, left = rows(tmp_path, *argv), rows(tmp_path, *argv, "--remaining")
    # fig3-4: the base model and its step-200 evaluation; fig7: that evaluation as the student's
    assert (left["fig3-4"]["built"], left["fig7"]["built"], full["fig3-4"]["built"]) == (2, 1, 0)
    assert left["fig3-4"]["pretrain_gpu_h"] < full["fig3-4"]["pretrain_gpu_h"]
    assert left["fig7"]["eval_gpu_h"] < full["fig7"]["eval_gpu_h"]
    assert left["turnopd"]["built"] == 1 and "(+1 already built)" in left["turnopd"]["artifacts"]
    assert 0 < left["turnopd"]["posttrain_gpu_h"] < full["turnopd"]["posttrain_gpu_h"]    # TurnOPD: other lr
    assert left["total"]["built"] == 4


def test_measured_prices_what_is_left_at_the_stores_own_rates(tmp_path):
    """--measured: seconds per training step, per evaluation episode and per pre-training token
    come from the store's logs; a run cut off at a checkpoint costs only its steps left."""
    import dataclasses

    from reproduce.store import Store
    store = Store("tiny", tmp_path / "runs", tmp_path / "data")
    (store.home / "pretrain" / "x").mkdir(parents=True)
    (store.home / "pretrain" / "x" / "metrics.jsonl").write_text(json.dumps({"step": 10, "tok_per_s": 1000.0}) + "\n")
    (store.home / "eval" / "x").mkdir(parents=True)
    (store.home / "eval" / "x" / "summary.json").write_text(json.dumps({"seconds": 100.0, "episodes": 50}))
    cfg = store.posttrain_config("opd", topk=50, eval_at_start=False)       # turnopd's vanilla-OPD arm
    run = store.home / "posttrain" / "turnopd-main-opd"
    run.mkdir(parents=True)
    (run / "train_config.json").write_text(json.dumps({"config": dataclasses.asdict(cfg)}))
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "rollout_s": 1.0, "scoring_s": 2.0, "update_s": 3.0}))
    argv = ["--scale", "tiny", "--root", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data"),
            "--remaining", "--measured"]
    before = rows(tmp_path, *argv)
    (run / "checkpoints" / "step_000004").mkdir(parents=True)               # cut off after 4 of its steps
    after = rows(tmp_path, *argv)
    assert (before["turnopd"]["measured_core_h"] - after["turnopd"]["measured_core_h"]) * 3600 == pytest.approx(4 * 6.0)
    assert "1 of them cut off at a checkpoint" in after["turnopd"]["artifacts"]
    total = after.pop("total")
    assert total["measured_core_h"] == pytest.approx(sum(r["measured_core_h"] for r in after.values()))
    assert after["table1"]["measured_core_h"] > 0               # its pre-trainings at 1000 tokens/s, evaluations at 2 s
    assert main(argv[:-2] + ["--measured"]) == 2                # without --remaining
    (run / "metrics.jsonl").unlink()
    assert main(argv) == 2                                      # nothing measured yet: one error line


def test_remaining_prices_training_a_carried_model_again_before_work_loads_it(tmp_path):
    """After `make restore` a finished pre-training run holds no weights, and the first run still to build
    that loads it (a post-training student, a teacher, a new evaluation) trains it again first: --remaining
    prices that once, in the first table that needs it; a run with its weights costs nothing."""
    from reproduce.store import Store
    store = Store("tiny", tmp_path / "runs", tmp_path / "data")
    base = store.home / "pretrain" / store.corpus_config().name
    for step in (200, 300):
        (base / "checkpoints" / f"step_{step:06d}").mkdir(parents=True)
        (base / "checkpoints" / f"step_{step:06d}" / "trainer_state.json").write_text(json.dumps({"step": step}))
    (base / "summary.json").write_text(json.dumps({"checkpoint": "checkpoints/step_000300"}))
    argv = ["--scale", "tiny", "--root", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data"),
            "--rollout-tok-s", "100", "--remaining"]
    carried = rows(tmp_path, *argv)
    for step in (200, 300):
        (base / "checkpoints" / f"step_{step:06d}" / "model.safetensors").write_bytes(b"\0")
    local = rows(tmp_path, *argv)
    again = [t for t, r in carried.items() if "(+1 carried, trained again for the weights)" in r["artifacts"]]
    assert again == ["fig3-4"]                     # its step-200 evaluation is the first work to load it; once
    assert not [t for t, r in local.items() if "trained again" in r["artifacts"]]
    assert carried["fig3-4"]["pretrain_gpu_h"] > local["fig3-4"]["pretrain_gpu_h"]
    assert carried["fig7"]["pretrain_gpu_h"] == local["fig7"]["pretrain_gpu_h"]
