"""The scoreboard (reproduce.scoreboard) is written from published results only, and the one in
results/README.md is current."""
import json
from pathlib import Path

from reproduce import scoreboard

REPO = Path(__file__).resolve().parents[1]


def _publish(results: Path, table: str, paired: dict, name: str = "results.json") -> None:
    (results / "small" / table).mkdir(parents=True, exist_ok=True)
    (results / "small" / table / name).write_text(json.dumps({"contrasts": paired}))


def _contrast(delta, se, verdict, seeds=1):
    return {"delta": delta, "se": se, "tasks": 16, "seeds": seeds, "paper": None, "verdict": verdict, "per_task": {}}


def test_rows_come_from_published_paired_results_and_pooled_seeds_win(tmp_path):
    _publish(tmp_path, "fig6", {"4opt8sub/long": _contrast(-12.5, 4.1, "agrees")})
    _publish(tmp_path, "fig3-4", {"world model - direct, long": _contrast(3.0, 2.0, "cannot tell")})
    _publish(tmp_path, "fig3-4", {"world model - direct, long": _contrast(6.0, 2.5, "agrees", seeds=3)},
             "seeds_results.json")
    _publish(tmp_path, "table1", {})                         # published before it recorded paired comparisons
    rows = {r[0]: r[1:] for r in scoreboard.rows(tmp_path, "small")}
    fig6 = next(v for k, v in rows.items() if k.startswith("a 2:1 suboptimal"))
    assert fig6 == ["4opt8sub ≈ 0.0", "-12.5 ± 4.1 (16 tasks, 1 seed)", "agrees"]
    wm = next(v for k, v in rows.items() if k.startswith("world-model CoT"))
    assert wm == ["+45.8", "+6.0 ± 2.5 (16 tasks, 3 seeds)", "agrees"]
    assert next(v for k, v in rows.items() if "5 % long-horizon" in k)[1:] == ["not run", "–"]
    assert len(rows) == len(scoreboard.CLAIMS)


def test_the_board_replaces_only_its_block_and_check_says_when_it_is_stale(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"# Results\n\n{scoreboard.BEGIN}\nold\n{scoreboard.END}\n\nkept\n")
    assert scoreboard.main(["--results", str(tmp_path), "--check"]) == 1
    assert scoreboard.main(["--results", str(tmp_path)]) == 0
    text = readme.read_text()
    assert text.startswith("# Results\n\n") and text.endswith("\n\nkept\n") and "old" not in text
    assert scoreboard.main(["--results", str(tmp_path), "--check"]) == 0
    readme.write_text("# Results, no markers\n")
    assert scoreboard.main(["--results", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().startswith("error: ")


def test_the_published_scoreboard_is_current():
    assert scoreboard.write(REPO / "results" / "README.md", REPO / "results", "small", check=True), \
        "results/README.md's scoreboard is stale: run `python -m reproduce.scoreboard`"


def test_the_figure_shows_what_the_board_says_and_is_linked_from_it(tmp_path):
    _publish(tmp_path, "fig6", {"4opt8sub/long": _contrast(-12.5, 4.1, "agrees")})
    readme = tmp_path / "README.md"
    readme.write_text(f"{scoreboard.BEGIN}\n{scoreboard.END}\n")
    assert scoreboard.plot(tmp_path / "empty", "small") is None          # nothing measured, no figure
    scoreboard.write(readme, tmp_path, "small")
    png = tmp_path / "small" / "scoreboard.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "(small/scoreboard.png)" in readme.read_text()
