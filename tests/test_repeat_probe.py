"""The repeat probe: contexts open real agent turns, and repeats are counted and paired correctly."""
import json

import pytest

from analysis.repeat_probe import Context, contexts, main, markdown, repeat_shares, turn_prefixes

E, A = "<|env|>", "<|agent|>"


def episode(task, actions, success=False, inner_marker_at=None):
    text = ""
    for i, action in enumerate(actions):
        turn = f"Reason: r{i}\nAction: {action}" if action else "Step 11/6"
        if i == inner_marker_at:
            turn = "Step 11/6" + A             # a marker sampled inside the turn ends it early
        text += f"{E}Obs {i}{A}{turn}"
    text += f"{E}Final"
    return {"task": task, "sample": 0, "success": success, "actions": actions, "text": text}


def test_turn_prefixes_open_each_agent_turn_even_after_a_sampled_marker():
    ep = episode("t", ["gather a", None, "gather b", "gather b"], inner_marker_at=1)
    prefixes = turn_prefixes(ep["text"])
    assert len(prefixes) == 4 and all(p.endswith(A) for p in prefixes)
    assert prefixes[2].endswith(f"{E}Obs 2{A}") and prefixes[3].endswith(f"{E}Obs 3{A}")


def test_contexts_come_from_failed_episodes_and_loop_contexts_already_repeat():
    eps = [episode(f"t{i}", ["gather a", "gather b", "gather c", "gather c", "gather c"]) for i in range(5)]
    eps.append(episode("won", ["gather a", "gather b", "forge x"], success=True))
    loop = contexts(eps, 10, "loop", seed=0)
    assert len(loop) == 5 and all(c.task != "won" for c in loop)
    for c in loop:                           # the turn's predecessor is already 'gather c'
        assert c.previous == "gather c" and c.prefix.endswith(A)
        assert c.prefix.count(E) - 1 >= 3
    anywhere = contexts(eps, 3, "any", seed=0)
    assert len(anywhere) == 3 and contexts(eps, 3, "any", seed=0) == anywhere


def test_repeat_shares_and_the_paired_table():
    points = [Context("a", f"{E}x{A}", "gather a", after_repeat=True), Context("b", f"{E}y{A}", "gather b", False)]
    always = repeat_shares(points, lambda prefix: ["Action: gather a", "Action: gather b"])
    assert always == [0.5, 0.5]
    never = repeat_shares(points, lambda prefix: ["Action: forge z"] * 2)
    assert never == [0.0, 0.0]
    table = markdown(points, {"base": always, "teacher": never})
    assert "| base | 50.0 ± 0.0 | 50.0 (n=1) | 50.0 (n=1) | - |" in table
    assert "| teacher | 0.0 ± 0.0 | 0.0 (n=1) | 0.0 (n=1) | -50.0 ± 0.0 |" in table


def test_bad_input_is_one_error_line(tmp_path, capsys):
    assert main(["--contexts", str(tmp_path), "--model", "m=" + str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.startswith("error: ") and not (tmp_path / "o").exists()
    assert main(["--contexts", str(tmp_path), "--model", "nameless", "--out", str(tmp_path / "o")]) == 2
    assert "NAME=RUN" in capsys.readouterr().err
