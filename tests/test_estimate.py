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
