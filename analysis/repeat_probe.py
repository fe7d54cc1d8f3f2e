"""The repeat probe: at the same contexts, how often does each model repeat the previous action?

Why this exists: at `small`, OPD from a stronger teacher halves the student's invalid actions but
turns its failures into loops (the budget sweep's "stuck" column), and avg@8 does not move. Two
explanations predict different things. If the teacher also repeats in the student's contexts
(its correction "decays" deep in a student-made loop, as the TurnOPD paper argues for deep turns),
the teacher repeats as often as the student there. If the teacher disagrees but OPD has not yet
learnt it, the teacher repeats far less and the distilled student still repeats like the base.

Contexts are turns of one evaluation's failed episodes (``samples.jsonl``), so every model is
measured on the same prefixes and compared paired by context:

* ``--where any``: one random turn (the third or later) of each failed episode;
* ``--where loop``: one turn inside the loop a stuck episode ends in (its action already repeats
  the one before).

At each context every model writes its own turn ``--draws`` times (T=0.4, the evaluation's
temperature); a draw repeats when its parsed action equals the episode's previous action. The
prefix is the episode's text re-encoded (an approximation of the sampled token ids: only the
decision at the end of the prefix is measured). This is measurement: models are never updated.

    python -m analysis.repeat_probe --contexts runs/sweep-small/base --where any --n 60 \\
        --model base=runs/pretrain-fa-small/checkpoints/step_000400 --model teacher=runs/pretrain-fa-small \\
        --model opd=runs/sweep-small/opd-lr5e-05-steps12-kl0-ent0 --out runs/repeat-probe

Writes ``OUT/repeat.json`` (per model and context the share of repeating draws) and
``OUT/repeat.md`` (per model: repeat % ± SE; after a repeat / otherwise; the paired difference to
the first model). Exit status 2 with one ``error:`` line on bad input.
"""
from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from analysis.measures import seed_stat
from planning_gym.constants import EVAL_TEMPERATURE
from planning_gym.text import AGENT, ENV, parse_action
from pretrain.config import UsageError


@dataclass(frozen=True)
class Context:
    task: str
    prefix: str              # the episode's text up to and including the agent marker of the turn
    previous: str            # the action of the turn before
    after_repeat: bool       # the turn before already repeated the one before it


def turn_prefixes(text: str) -> list[str]:
    """The prefix that opens each agent turn: the text through the first agent marker after each
    observation (a marker a model sampled inside its own turn does not start a turn)."""
    prefixes, env = [], text.find(ENV)
    while env >= 0:
        agent, following = text.find(AGENT, env), text.find(ENV, env + len(ENV))
        if agent < 0 or (0 <= following < agent):
            break
        prefixes.append(text[:agent + len(AGENT)])
        env = following
    return prefixes


def contexts(samples: Sequence[dict], n: int, where: str = "any", seed: int = 0) -> list[Context]:
    """Up to ``n`` contexts, one per failed episode, chosen with ``seed``."""
    rng = random.Random(seed)
    found = []
    for s in sorted(samples, key=lambda s: (s["task"], s["sample"])):
        actions, prefixes = s["actions"], turn_prefixes(s["text"])
        if s["success"] or len(actions) < 3 or len(prefixes) != len(actions):
            continue
        turns = range(2, len(actions))
        if where == "loop":
            turns = [t for t in turns if actions[t] == actions[t - 1] and actions[t] is not None]
        if not turns:
            continue
        t = rng.choice(list(turns))
        if actions[t - 1] is not None:
            found.append(Context(s["task"], prefixes[t], actions[t - 1], actions[t - 1] == actions[t - 2]))
    rng.shuffle(found)
    return found[:n]


def hf_sampler(model_path: Path, draws: int, seed: int) -> Callable[[str], list[str]]:
    """A function that writes ``draws`` agent turns of the model at ``model_path`` after a prefix."""
    import torch

    from pretrain.checkpoint import load_model_and_tokenizer
    from pretrain.tokenizer import encode, special_ids

    model, tokenizer, _ = load_model_and_tokenizer(model_path)
    model.eval()
    special = special_ids(tokenizer)

    def sample(prefix: str) -> list[str]:
        ids = torch.tensor([encode(tokenizer, prefix)])
        torch.manual_seed(seed)                 # every model draws with the same seed at every context
        with torch.no_grad():
            out = model.generate(ids, do_sample=True, temperature=EVAL_TEMPERATURE, top_k=0, top_p=1.0,
                                 max_new_tokens=192, num_return_sequences=draws, eos_token_id=special.env,
                                 pad_token_id=special.pad)
        return [tokenizer.decode(row[ids.shape[1]:], skip_special_tokens=True) for row in out]
    return sample


def repeat_shares(points: Sequence[Context], sample: Callable[[str], list[str]]) -> list[float]:
    """Per context, the share of the model's draws whose action repeats the previous action."""
    from tqdm import tqdm

    shares = []
    for c in tqdm(points, desc="contexts", leave=False):
        turns = sample(c.prefix)
        shares.append(sum(parse_action(t) == c.previous for t in turns) / len(turns))
    return shares


def percent(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error over contexts, in percent."""
    stat = seed_stat(values)
    return 100 * stat.mean, 100 * stat.se


def markdown(points: Sequence[Context], shares: dict[str, list[float]]) -> str:
    names = list(shares)
    lines = [f"| model | repeats % ± SE | after a repeat % | otherwise % | Δ vs {names[0]} ± SE (paired) |",
             "|---|---|---|---|---|"]
    for name in names:
        s = shares[name]
        after = [v for v, c in zip(s, points) if c.after_repeat]
        other = [v for v, c in zip(s, points) if not c.after_repeat]
        pct = (lambda xs: f"{percent(xs)[0]:.1f} (n={len(xs)})" if xs else "-")
        delta = percent([a - b for a, b in zip(s, shares[names[0]])]) if name != names[0] else None
        lines.append(f"| {name} | {percent(s)[0]:.1f} ± {percent(s)[1]:.1f} | {pct(after)} | {pct(other)} | "
                     + (f"{delta[0]:+.1f} ± {delta[1]:.1f} |" if delta else "- |"))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from planning_gym.cli import Parser

    p = Parser(prog="python -m analysis.repeat_probe", description=__doc__.split("\n\n")[0])
    p.add_argument("--contexts", required=True, help="an evaluation folder (its samples.jsonl)")
    p.add_argument("--model", action="append", required=True, metavar="NAME=RUN", help="a model to probe (repeat)")
    p.add_argument("--where", choices=("any", "loop"), default="any")
    p.add_argument("--n", type=int, default=60, help="contexts (one per failed episode)")
    p.add_argument("--draws", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    try:
        args = p.parse_args(argv)
        if args.n < 1 or args.draws < 1:
            raise UsageError("--n and --draws must be >= 1")
        models = dict(m.split("=", 1) for m in args.model if "=" in m)
        if len(models) != len(args.model):
            raise UsageError("--model takes NAME=RUN (a run folder or checkpoint)")
        for name, path in models.items():
            if not Path(path).is_dir():
                raise UsageError(f"model {name}: {path} is not a run folder or checkpoint")
        samples_file = Path(args.contexts) / "samples.jsonl"
        if not samples_file.is_file():
            raise UsageError(f"{args.contexts} holds no samples.jsonl (an evaluation folder)")
        samples = [json.loads(line) for line in samples_file.read_text().splitlines() if line.strip()]
        points = contexts(samples, args.n, args.where, args.seed)
        if not points:
            raise UsageError(f"{samples_file} has no failed episode with a {args.where} context")
        shares = {name: repeat_shares(points, hf_sampler(Path(path), args.draws, args.seed))
                  for name, path in models.items()}
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        table = markdown(points, shares)
        (out / "repeat.json").write_text(json.dumps({
            "contexts": str(samples_file), "where": args.where, "draws": args.draws, "seed": args.seed,
            "models": models, "points": [{"task": c.task, "previous": c.previous, "after_repeat": c.after_repeat}
                                         for c in points], "repeat": shares}, indent=1))
        (out / "repeat.md").write_text(table)
    except (UsageError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
