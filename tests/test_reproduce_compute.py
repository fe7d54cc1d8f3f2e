"""A table says what its artifacts cost when they were built, not only how long it took to
assemble them (a table rebuilt from carried artifacts takes seconds; its models took hours)."""
import json

from pretrain import rundir


def _run(path, rows, summary=None):
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if summary is not None:
        rundir.write_summary(path, summary)
    return path


def test_logged_wall_of_pretraining_and_posttraining(tmp_path):
    from reproduce.cli import logged_wall
    pre = _run(tmp_path / "pretrain" / "a", [
        {"step": 10, "loss": 1.0, "tokens_seen": 1000, "tok_per_s": 100.0},     # 10 s
        {"step": 20, "loss": 0.9, "tokens_seen": 3000, "tok_per_s": 400.0},     # 5 s
        {"step": 20, "loss": 0.9, "tokens_seen": 3000, "tok_per_s": 400.0},     # logged twice: no tokens between, nothing added
        {"step": 20, "eval_loss": 0.8}])                                         # not a training interval
    assert logged_wall(pre) == 15.0
    post = _run(tmp_path / "posttrain" / "b", [{"step": 1, "loss": 0.1}], {"train_wall_s": 42.0})
    assert logged_wall(post) == 42.0


def test_artifact_walls_count_each_run_once_and_the_line_shows_them(tmp_path):
    from reproduce.cli import artifact_walls, compute_line
    pre = _run(tmp_path / "pretrain" / "a", [{"step": 10, "loss": 1.0, "tokens_seen": 3600, "tok_per_s": 1.0}])
    post = _run(tmp_path / "posttrain" / "b", [{"step": 1, "loss": 0.1}], {"train_wall_s": 7200.0})
    runs = [pre, pre / "checkpoints" / "step_000010", post, post]     # a run and its checkpoint are one run
    walls = artifact_walls(runs, {"eval/x": 1800.0, "eval/y": 1800.0})
    assert walls == {"pre-training": 3600.0, "post-training": 7200.0, "evaluation": 3600.0}
    assert compute_line(walls, 30.0) == ("This command took 0.5 min; its artifacts logged pre-training 1.0 h, "
                                         "post-training 2.0 h, evaluation 1.0 h of wall-clock when they were built "
                                         "(one process each).")
    assert compute_line(artifact_walls([], {}), 6.0) == "This command took 0.1 min."


def test_the_store_notes_every_evaluation_it_reads(tmp_path):
    """A cached evaluation counts what it cost to build, as a fresh one does."""
    from reproduce.store import Store
    store = Store("tiny", tmp_path / "runs", tmp_path / "data")
    folder = store.home / "eval" / "m"
    folder.mkdir(parents=True)
    summary = {"k": 8, "seed": 0, "max_tasks_per_cell": store.budget["eval_tasks_per_cell"] or None,
               "seconds": 12.5, "splits": ["ID", "OOD"], "difficulties": None, "table": []}
    (folder / "summary.json").write_text(json.dumps(summary))
    store._eval_dir = lambda model, corpus: folder
    store._final_eval = lambda *a, **k: None
    store.evaluation(tmp_path / "model")
    assert store.evaluations_read == {str(folder): 12.5}
