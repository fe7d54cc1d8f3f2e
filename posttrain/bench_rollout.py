"""Rollout throughput: the batched KV-cache engine vs a plain loop of HF ``generate``.

Why this exists: post-training time is dominated by rollouts (TurnOPD's whole claim is about
wall-clock), so the engine's speed-up over the obvious implementation is measured, not assumed.

    python -m posttrain.bench_rollout [--scales tiny small] [--episodes 64] [--baseline-episodes 8]
        [--run RUN_DIR] [--data CORPUS_DIR] [--temperature 0.4] [--step-limit 10] [--max-turn-tokens 48]

For each scale, the same model (random weights of the preset, or the checkpoint of ``--run``),
the same tasks (``test_id`` rows, cycled) and the same sampling settings go through

* the engine (`posttrain.rollout`, all episodes in flight, one KV cache kept across turns), and
* the baseline: one episode at a time, each turn re-encodes the whole conversation text and
  calls ``model.generate`` (stop on ENV / EOS), then steps the environment.

It prints episodes/s and generated tokens/s of both and their ratio. The baseline runs on
``--baseline-episodes`` of the engine's tasks, evenly spread over them (it is slow; rates are per
episode and per token, so they compare directly; tokens/s is the steadier of the two). A random model rarely closes its turns, so most turns run to
``--max-turn-tokens``: a fixed, comparable amount of generation for both sides.
Exit status 2 with one ``error:`` line on bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from planning_gym.env import PlanningEnv
from planning_gym.text import AGENT, ENV, parse_action
from pretrain.config import UsageError, make_config
from pretrain.tokenizer import decode, encode, special_ids


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def baseline(model, tokenizer, tasks, cfg, seed: int) -> tuple[float, int]:
    """(seconds, generated tokens) of the re-encoding ``generate`` loop over ``tasks``."""
    special = special_ids(tokenizer)
    torch.manual_seed(seed)
    sampling = dict(do_sample=True, temperature=cfg.temperature, top_p=cfg.top_p, top_k=0) \
        if cfg.temperature > 0 else dict(do_sample=False)
    generated, start = 0, time.perf_counter()
    for world, task in tasks:
        env = PlanningEnv(world, max_steps=cfg.step_limit)
        obs, _ = env.reset(options={"task": task})
        text = ENV + obs + AGENT
        for _ in range(cfg.step_limit):
            ids = torch.tensor([encode(tokenizer, text)], device=model.device)
            if ids.shape[1] + 2 > cfg.max_total_tokens:
                break
            with torch.inference_mode():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=cfg.max_turn_tokens,
                                     eos_token_id=[special.env, special.eos], pad_token_id=special.pad, **sampling)
            new = out[0, ids.shape[1]:].tolist()
            generated += len(new)
            stopped = bool(new) and new[-1] in (special.env, special.eos)
            turn = decode(tokenizer, new[:-1] if stopped else new)
            action = parse_action(turn)
            obs, _, terminated, truncated, _ = env.step(action if action is not None else turn)
            if (stopped and new[-1] == special.eos) or terminated or truncated:
                break
            text += turn + ENV + obs + AGENT
    return time.perf_counter() - start, generated


def _tasks(data_dir: Path, n: int):
    from posttrain.evaluate import load_rows, load_worlds, task_for_row

    worlds = load_worlds(data_dir)
    rows = load_rows(data_dir, "test_id")
    return [task_for_row(worlds, rows[(i * len(rows) // n) % len(rows)]) for i in range(n)]   # every difficulty


def _data_dir(args, tmp: str) -> Path:
    if args.data:
        return Path(args.data)
    from planning_gym.make_data import main as make_data

    if make_data(["--domain", "fa", "--scale", "tiny", "--data-dir", tmp, "--quiet"]) != 0:
        raise UsageError("could not generate the tiny corpus")
    return Path(tmp) / "fa-tiny"


def run(args) -> list[dict]:
    from transformers.utils import logging as hf_logging

    from posttrain.backend import HFPolicy
    from posttrain.evaluate import load_model_and_tokenizer
    from posttrain.rollout import RolloutConfig, rollout
    from pretrain.data import read_texts
    from pretrain.model import build_model, count_params
    from pretrain.tokenizer import train_tokenizer

    hf_logging.set_verbosity_error()
    cfg = RolloutConfig(temperature=args.temperature, top_p=args.top_p, max_turn_tokens=args.max_turn_tokens,
                        step_limit=args.step_limit, max_total_tokens=args.max_total_tokens,
                        batch_size=args.batch_size)
    device = torch.device(args.device)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.run:
            model, tokenizer, data = load_model_and_tokenizer(Path(args.run))
            data_dir = Path(args.data) if args.data else data
            models = [("run", model)]
        else:
            data_dir = _data_dir(args, tmp)
            tokenizer = train_tokenizer(read_texts(data_dir / "pretrain.jsonl"), 3000)
            special = special_ids(tokenizer)
            models = [(s, build_model(make_config(s), len(tokenizer), special, seed=args.seed)) for s in args.scales]
        tasks = _tasks(data_dir, args.episodes)
        for name, model in models:
            model.to(device).eval()
            policy = HFPolicy(model, special_ids(tokenizer).pad)
            ro = rollout(policy, tokenizer, tasks, cfg, seed=args.seed)
            n_base = min(args.baseline_episodes, len(tasks))
            subset = [tasks[i * len(tasks) // n_base] for i in range(n_base)]     # spread over difficulties
            base_s, base_tok = baseline(model, tokenizer, subset, cfg, args.seed)
            row = {"model": name, "params": count_params(model), "device": device.type,
                   "engine_episodes": len(tasks), "engine_s": ro.seconds,
                   "engine_episodes_per_s": len(tasks) / ro.seconds,
                   "engine_tokens_per_s": ro.generated_tokens / ro.seconds,
                   "baseline_episodes": n_base, "baseline_s": base_s,
                   "baseline_episodes_per_s": n_base / base_s, "baseline_tokens_per_s": base_tok / base_s}
            row["speedup_episodes"] = row["engine_episodes_per_s"] / row["baseline_episodes_per_s"]
            row["speedup_tokens"] = row["engine_tokens_per_s"] / row["baseline_tokens_per_s"]
            results.append(row)
            print(f"{name}: {row['params'] / 1e6:.2f}M params on {device.type} | engine {row['engine_episodes_per_s']:.2f} "
                  f"ep/s, {row['engine_tokens_per_s']:.0f} tok/s ({len(tasks)} episodes, {ro.seconds:.1f} s) | "
                  f"generate loop {row['baseline_episodes_per_s']:.3f} ep/s, {row['baseline_tokens_per_s']:.0f} tok/s "
                  f"({n_base} episodes, {base_s:.1f} s) | speed-up {row['speedup_episodes']:.1f}x episodes/s, "
                  f"{row['speedup_tokens']:.1f}x tokens/s", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="python -m posttrain.bench_rollout", description=__doc__.split("\n\n")[0])
    p.add_argument("--scales", nargs="+", default=["tiny", "small"], choices=["tiny", "small", "paper"])
    p.add_argument("--run", help="benchmark this run's trained checkpoint instead of random presets")
    p.add_argument("--data", help="corpus folder (default: a fresh tiny fa corpus, or the run's)")
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--baseline-episodes", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.4)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--step-limit", type=int, default=10)
    p.add_argument("--max-turn-tokens", type=int, default=48)
    p.add_argument("--max-total-tokens", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--json", help="also write the results here")
    try:
        args = p.parse_args(argv)
        if min(args.episodes, args.baseline_episodes) < 1:
            raise UsageError("--episodes and --baseline-episodes must be positive")
        results = run(args)
    except (UsageError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
