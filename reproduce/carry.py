"""Carry a store's finished work from one machine (or working session) to the next, without weights.

    python -m reproduce.carry save|restore --scale small [--seed S] [--root runs/reproduce] [--results results]

Why this exists: a reproduction at ``small`` costs hundreds of core-hours, and a machine that keeps
nothing but the repository between working sessions (a CI-like sandbox, a preemptible job) loses
``runs/`` each time. The weights are what is large (a small model with its optimiser state is ~60 MB
a checkpoint); what the tables read is small: each finished run's records (config, summary, metrics,
tokenizer) and each evaluation (summary and per-episode outcomes: task, success, actions, pattern,
stop reason -- everything but the transcript, which only the repeat probe reads; a restored
store's samples have no ``text``). ``save`` copies exactly those of
every *finished* artifact of the store's home into ``results/<scale>/carry/<home>/`` (JSONL files
gzipped), with a manifest of the folders it came from; ``restore`` puts them back, never over a
local artifact. A half-trained run is not carried: its progress is its weights.

After a restore the store treats a carried run as built: a table that only needs its evaluations
costs nothing, and one that needs its weights (a student, a teacher, a new evaluation) makes the
store train that pre-training run again first, the same way (same corpus, preset, seed and steps;
`Store.weights`). On one machine that gives the same model (the logged losses agree to the bit), so
the carried evaluations still describe it; the store records the comparison in the run
(``retrained.json``) and warns where they differ. A carried post-training run cannot be retrained on
its own; it is used for its evaluations only, and the store says so if anything asks for its weights.

Where they differ (another CPU's kernels sum in another order), the run trained again is another
model: its carried evaluations, and the carried post-training runs that started from it, would be
paired with the runs that start from the new weights. The first such run sets them aside
(`set_aside`, to ``<home>/stale/``), so a table that needs them builds them again from the new
model, and ``save`` does not bring them back.
"""
from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

from planning_gym.cli import Parser, UsageError, entry
from pretrain import rundir

MANIFEST = "MANIFEST.json"
STALE = "stale"               # <home>/stale/: artifacts of a carried model that trained again differently
LEFT_OUT = ("*.safetensors", "*.bin", "*.pt", "*.png")     # weights, optimiser and RNG states; figures
LEFT_OUT_DIRS = ("cache",)                                  # token caches, rebuilt from the corpus
CHECKPOINT_RECORD = "trainer_state.json"                     # all a checkpoint folder keeps of itself
SAMPLES = "samples.jsonl"     # an evaluation's episodes: carried without their transcripts ("text"), ~90% of it


def carry_dir(results: Path, home: Path) -> Path:
    """``results/<scale>/carry/<home name>`` (the home is ``<scale>`` or ``<scale>-seed<s>``)."""
    return Path(results) / home.name.partition("-seed")[0] / "carry" / home.name


def finished_artifacts(home: Path) -> list[Path]:
    """Every finished artifact under ``home``: run folders with a summary, evaluation folders whose
    ``summary.json`` and samples agree (an evaluation that is still writing its samples is not finished)."""
    found = []
    for group in ("pretrain", "posttrain"):
        for run in sorted((home / group).glob("*")):
            if run.is_dir() and rundir.is_finished(run):
                found.append(run)
    found += [e for e in sorted((home / "eval").glob("*")) if _complete_evaluation(e)]
    return found


def set_aside(home: Path, model: Path) -> list[Path]:
    """Move what was measured on, or trained from, the old weights of ``model`` (a run of ``home``,
    or one checkpoint of it, that trained again into another model) to ``<home>/stale/``: its
    evaluations (``eval/<slug>...``), the finished post-training runs whose student lies in it, and
    theirs in turn (an MOPD cascade). A run that used it as its teacher keeps its place: it pairs
    with its own student. Returns the folders moved, in ``stale/``."""
    home = Path(home)
    moved, runs = [], [Path(model)]
    while runs:
        run = runs.pop()
        slug = str(run.resolve().relative_to(home.resolve())).replace("/", "__")
        for folder in sorted((home / "eval").glob(slug + "*")):
            if folder.name == slug or folder.name.startswith(slug + "__"):
                moved.append(_move(home, folder))
        for post in sorted((home / "posttrain").glob("*")):
            student = (rundir.read_train_config(post) or {}).get("student") if rundir.is_finished(post) else None
            if student and _within(str(Path(student).resolve()), str(run.resolve())):
                runs.append(post)        # then its evaluations and its students, named by where it was
                moved.append(_move(home, post))
    return moved


def _move(home: Path, folder: Path) -> Path:
    target = home / STALE / folder.relative_to(home)
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    folder.rename(target)
    return target


def _complete_evaluation(folder: Path) -> bool:
    try:
        episodes = json.loads((folder / "summary.json").read_text()).get("episodes")
        with open(folder / SAMPLES, "rb") as f:
            return episodes is None or sum(1 for _ in f) == episodes
    except (OSError, ValueError):
        return False


def _without_text(sample: dict) -> dict:
    return {k: v for k, v in sample.items() if k != "text"}


def _kept(path: Path, artifact: Path) -> bool:
    rel = path.relative_to(artifact)
    if rundir.CHECKPOINTS in rel.parts[:-1] and path.is_file() and path.name != CHECKPOINT_RECORD:
        return False       # a checkpoint is its weights; its record says it exists (Store.checkpoint)
    return not (any(rel.match(p) for p in LEFT_OUT) or any(part in LEFT_OUT_DIRS for part in rel.parts)
                or any(part.startswith((".tmp-", ".old-")) or part.endswith(".lock") for part in rel.parts))


def _copy(path: Path, dest: Path) -> None:
    """One file into the carry: JSONL gzipped (samples without their transcripts), the rest as is."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix != ".jsonl":
        shutil.copy2(path, dest)
        return
    with open(path, "rb") as src, gzip.GzipFile(dest.with_name(dest.name + ".gz"), "wb", mtime=0) as out:
        if path.name != SAMPLES:
            shutil.copyfileobj(src, out)
            return
        for n, line in enumerate(src, start=1):
            try:
                out.write((json.dumps(_without_text(json.loads(line))) + "\n").encode())
            except ValueError:
                raise UsageError(f"{path}: line {n} is not JSON; delete that evaluation folder and rerun it") from None


def _read_manifest(source: Path) -> dict:
    try:
        manifest = json.loads((source / MANIFEST).read_text())
        if not all(isinstance(manifest.get(k), list) for k in ("artifacts", "folders", "without_weights")):
            raise ValueError("it lacks the artifacts, folders or without_weights list")
        return manifest
    except (OSError, ValueError) as exc:
        raise UsageError(f"{source} holds no readable {MANIFEST} ({exc}): nothing carried there "
                         "(`python -m reproduce.carry save` writes it)") from None


def _within(rel: str, artifact: str) -> bool:
    return rel == artifact or rel.startswith(artifact + "/")


def save(home: Path, target: Path) -> dict:
    """Copy the finished artifacts of ``home`` (records and evaluations, no weights) to ``target``,
    replacing what was there in one rename; returns the manifest. An artifact the previous carry
    held that is no longer finished here (a carried run being trained again) keeps its carried copy:
    a carry never loses finished work."""
    home, target = Path(home), Path(target)
    if not home.is_dir():
        raise UsageError(f"{home} does not exist: nothing to carry (build something with `python -m reproduce` first)")
    tmp = target.parent / f".tmp-{target.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    manifest = {"home": home.name, "artifacts": [], "folders": [], "without_weights": []}
    for artifact in finished_artifacts(home):
        manifest["artifacts"].append(str(artifact.relative_to(home)))
        for path in sorted(artifact.rglob("*")):
            if not _kept(path, artifact):
                continue
            rel = str(path.relative_to(home))
            if path.is_dir():
                manifest["folders"].append(rel)
                if (path / CHECKPOINT_RECORD).is_file():     # with weights here, or restored without them
                    manifest["without_weights"].append(rel)
            else:
                _copy(path, tmp / rel)
    if (target / MANIFEST).is_file():
        old = _read_manifest(target)
        for artifact in (a for a in old["artifacts"] if a not in manifest["artifacts"]
                         and not (home / STALE / a).exists()):
            manifest["artifacts"].append(artifact)
            for key in ("folders", "without_weights"):
                manifest[key] += [f for f in old[key] if _within(f, artifact)]
            for path in (target / artifact).rglob("*") if (target / artifact).is_dir() else ():
                if path.is_file():
                    (tmp / path.relative_to(target)).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, tmp / path.relative_to(target))
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    if target.exists():
        shutil.rmtree(target)
    tmp.rename(target)
    return manifest


def restore(source: Path, home: Path) -> list[str]:
    """Put a carried store back under ``home``: each carried artifact of which nothing is there yet
    (a local one, finished or half-built, is left alone), JSONL files unzipped, its folders
    recreated (checkpoint folders without their weights). Returns the artifacts restored."""
    source, home = Path(source), Path(home)
    manifest = _read_manifest(source)
    restored = [a for a in manifest["artifacts"] if not (home / a).exists()]
    for artifact in restored:
        for folder in (f for f in manifest["folders"] if _within(f, artifact)):
            (home / folder).mkdir(parents=True, exist_ok=True)
        for path in sorted((source / artifact).rglob("*")):
            if path.is_dir():
                continue
            rel = path.relative_to(source)
            dest = home / (rel.with_suffix("") if path.suffix == ".gz" else rel)
            dest.parent.mkdir(parents=True, exist_ok=True)
            part = dest.with_name(f".tmp-{dest.name}")
            if path.suffix == ".gz":
                with gzip.open(path, "rb") as src, open(part, "wb") as out:
                    shutil.copyfileobj(src, out)
            else:
                shutil.copy2(path, part)
            part.rename(dest)
    return restored


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m reproduce.carry", description=__doc__.split("\n")[0])
    p.add_argument("action", choices=("save", "restore"))
    p.add_argument("--scale", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--root", default="runs/reproduce", help="the store's runs folder")
    p.add_argument("--results", default="results", help="the tracked folder that holds <scale>/carry/")

    def go() -> int:
        from planning_gym.scales import check_scale
        from reproduce.store import Store
        args = p.parse_args(argv)
        store = Store(check_scale(args.scale), Path(args.root), seed=args.seed)
        where = carry_dir(Path(args.results), store.home)
        if args.action == "save":
            m = save(store.home, where)
            size = sum(f.stat().st_size for f in where.rglob("*") if f.is_file())
            print(f"carried {len(m['artifacts'])} finished artifacts of {store.home} to {where} "
                  f"({size / 1e6:.1f} MB, no weights)")
        else:
            done = restore(where, store.home)
            print(f"restored {len(done)} artifacts into {store.home} from {where}"
                  + (" (runs are retrained when their weights are needed)" if done else ""))
        return 0
    return entry(go)


if __name__ == "__main__":
    sys.exit(main())
