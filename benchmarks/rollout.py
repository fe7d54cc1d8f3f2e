"""Rollout throughput, side by side in one process: the engine with each backend, batched HF
``generate``, one-at-a-time ``generate``, and vLLM when its extra is installed.

Why this exists: every experiment here is rollout-bound, so speed claims are measured against
what a user would otherwise write, on the same model, tasks and sampling, in the same run:

* ``engine/lean``, ``engine/hf`` (and ``engine/vllm``): `engine.rollout` with that backend (all
  episodes in flight, one KV cache kept across turns, continuous batching);
* ``generate/batched``: each turn, all live episodes are re-encoded from their text, left-padded
  and sent through one ``model.generate`` call (stop on ENV / EOS): the obvious batched loop;
* ``generate/one``: one episode at a time, each turn re-encoded and generated (on
  ``--baseline-episodes`` of the tasks, spread over difficulties: it is slow).

    python -m benchmarks.rollout [--scales tiny small paper] [--run RUN_DIR] [--episodes 64]
        [--threads 1] [--loops engine/lean engine/hf generate/batched generate/one engine/vllm]

Reported per loop: generated tokens/s, episodes/s, the ratio to batched ``generate``, and for
the engine the achieved model FLOP/s as a share of the fp32 matmul peak measured in the same
process (weights: 2 FLOPs per non-embedding parameter plus the LM head per processed token;
attention: 4 x heads x head_dim x position per layer per token), with the weights-only share
beside it; and the bytes a decode step must read (every weight, plus each sampled token's
keys/values over all its earlier positions) as a share of the read bandwidth measured in the
same process: at these sizes decode is bound by that memory roof, not by the matmul peak. Random weights rarely close a turn, so most turns run to ``--max-turn-tokens``: a
fixed, comparable amount of generation for every loop. Exit status 2 with one ``error:`` line
on bad input (an unknown loop, vLLM asked for but not installed).
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from planning_gym.env import PlanningEnv
from planning_gym.text import AGENT, ENV, parse_action
from planning_gym.cli import Parser
from pretrain.config import UsageError, make_config
from pretrain.tokenizer import decode, encode, special_ids


LOOPS = ("engine/lean", "engine/hf", "generate/batched", "generate/one", "engine/vllm")


def _sampling(cfg) -> dict:
    if cfg.temperature > 0:
        return dict(do_sample=True, temperature=cfg.temperature, top_p=cfg.top_p, top_k=0)
    return dict(do_sample=False)


def generate_one(model, tokenizer, tasks, cfg, seed: int) -> tuple[float, int]:
    """(seconds, generated tokens) of the one-episode-at-a-time, re-encoding ``generate`` loop."""
    special = special_ids(tokenizer)
    torch.manual_seed(seed)
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
                                     eos_token_id=[special.env, special.eos], pad_token_id=special.pad,
                                     **_sampling(cfg))
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


def generate_batched(model, tokenizer, tasks, cfg, seed: int) -> tuple[float, int]:
    """(seconds, generated tokens) of the batched loop a user writes first: every turn, all live
    episodes re-encoded from text, left-padded, one ``generate`` call (up to ``batch_size`` rows)."""
    special = special_ids(tokenizer)
    torch.manual_seed(seed)
    stops = (special.env, special.eos)
    generated, start = 0, time.perf_counter()
    episodes = []
    for world, task in tasks:
        env = PlanningEnv(world, max_steps=cfg.step_limit)
        obs, _ = env.reset(options={"task": task})
        episodes.append([env, ENV + obs + AGENT])
    live = list(range(len(episodes)))
    while live:
        batch, live = live[:cfg.batch_size], live[cfg.batch_size:]
        encoded = [encode(tokenizer, episodes[i][1]) for i in batch]
        width = max(map(len, encoded))
        ids = torch.full((len(batch), width), special.pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, e in enumerate(encoded):
            ids[row, width - len(e):] = torch.tensor(e)
            mask[row, width - len(e):] = 1
        with torch.inference_mode():
            out = model.generate(ids.to(model.device), attention_mask=mask.to(model.device),
                                 max_new_tokens=cfg.max_turn_tokens, eos_token_id=list(stops),
                                 pad_token_id=special.pad, **_sampling(cfg))
        still = []
        for row, i in enumerate(batch):
            new = out[row, width:].tolist()
            end = next((j + 1 for j, t in enumerate(new) if t in stops), len(new))
            new = new[:end]
            generated += len(new)
            stopped = bool(new) and new[-1] in stops
            turn = decode(tokenizer, new[:-1] if stopped else new)
            action = parse_action(turn)
            env, text = episodes[i]
            obs, _, terminated, truncated, _ = env.step(action if action is not None else turn)
            text += turn + ENV + obs + AGENT
            episodes[i][1] = text
            done = (stopped and new[-1] == special.eos) or terminated or truncated
            if not done and len(encode(tokenizer, text)) + 2 <= cfg.max_total_tokens:
                still.append(i)
        live = still + live
    return time.perf_counter() - start, generated


def read_bandwidth(device: torch.device, mbytes: int = 400, seconds: float = 0.5) -> float:
    """Measured bytes/s of summing a large fp32 tensor (one pass over memory) on ``device``."""
    x = torch.ones(mbytes * 2**20 // 4, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    x.sum()
    sync()
    reps, start = 0, time.perf_counter()
    while True:
        x.sum()
        reps += 1
        sync()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and reps >= 2:
            return x.numel() * 4 * reps / elapsed


def decode_bytes(model, ro, decode_steps: int) -> float:
    """Bytes the engine's decode must read at least: all weights once per decode step, and for each
    sampled token the keys and values of every earlier position (prefill reads are not counted)."""
    cfg = model.config.get_text_config()
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    param = next(model.parameters())
    slot = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * param.element_size()
    weights = sum(p.numel() for p in model.parameters()) * param.element_size()
    positions = sum(t for e in ro.episodes for t, m in enumerate(e.mask) if m)
    return decode_steps * weights + positions * slot


def model_flops(model, ro) -> tuple[float, float]:
    """(all, weights-only) forward FLOPs of the engine's rollout ``ro``: every token of every
    episode is processed once (prompt and observations by prefill, sampled tokens by decode)."""
    cfg = model.config.get_text_config()
    from pretrain.model import count_params

    embed, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    # every weight is a matmul except the input lookup; a tied LM head shares its tensor with it
    per_token = 2 * (count_params(model) - embed.numel() + (head.numel() if head is embed else 0))
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    tokens = sum(len(e.ids) for e in ro.episodes)
    positions = sum(n * (n - 1) / 2 for n in (len(e.ids) for e in ro.episodes))
    attention = 4 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim * positions
    return per_token * tokens + attention, per_token * tokens


def _tasks(data_dir: Path, n: int):
    from engine.evaluate import load_rows, load_worlds, task_for_row

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


def bench_model(name, model, tokenizer, tasks, cfg, args, peak: float, bandwidth: float) -> list[dict]:
    from engine.backend import make_policy
    from engine.rollout import rollout
    from pretrain.model import count_params

    special = special_ids(tokenizer)
    rows = []

    def record(loop, seconds, tokens, episodes, **extra):
        row = {"model": name, "params": count_params(model), "loop": loop, "episodes": episodes, "seconds": seconds,
               "tokens": tokens, "tokens_per_s": tokens / seconds, "episodes_per_s": episodes / seconds, **extra}
        rows.append(row)
        share = (f" | {row['flops_per_s'] / 1e9:.1f} GFLOP/s = {100 * row['peak_share']:.1f}% of peak "
                 f"(weights only {100 * row['peak_share_weights']:.1f}%), decode reads "
                 f"{row['read_bytes_per_s'] / 1e9:.1f} GB/s = {100 * row['bandwidth_share']:.0f}% of the measured "
                 f"bandwidth" if "flops_per_s" in row else "")
        print(f"  {name:>5} {loop:<17} {row['tokens_per_s']:8.0f} tok/s {row['episodes_per_s']:7.3f} ep/s "
              f"({episodes} episodes, {seconds:.1f} s){share}", flush=True)

    for loop in args.loops:
        if loop.startswith("engine/"):
            backend = loop.split("/")[1]
            t0 = time.perf_counter()
            policy = make_policy(model, backend, special.pad, max_num_seqs=cfg.batch_size)
            load_s = time.perf_counter() - t0
            rollout(policy, tokenizer, tasks[:2], cfg, seed=args.seed)              # warm-up
            steps_before = dict(getattr(policy, "forwards", {}))
            ro = rollout(policy, tokenizer, tasks, cfg, seed=args.seed)
            flops, weights = model_flops(model, ro)
            steps = getattr(policy, "forwards", {}).get("decode", 0) - steps_before.get("decode", 0)
            read = decode_bytes(model, ro, steps) / ro.seconds
            record(loop, ro.seconds, ro.generated_tokens, len(tasks), load_s=load_s, flops_per_s=flops / ro.seconds,
                   peak_share=flops / ro.seconds / peak, peak_share_weights=weights / ro.seconds / peak,
                   read_bytes_per_s=read, bandwidth_share=read / bandwidth,
                   mean_episode_tokens=sum(len(e.ids) for e in ro.episodes) / len(tasks))
        elif loop == "generate/batched":
            seconds, tokens = generate_batched(model, tokenizer, tasks, cfg, args.seed)
            record(loop, seconds, tokens, len(tasks))
        else:
            n = min(args.baseline_episodes, len(tasks))
            subset = [tasks[i * len(tasks) // n] for i in range(n)]                # spread over difficulties
            seconds, tokens = generate_one(model, tokenizer, subset, cfg, args.seed)
            record(loop, seconds, tokens, n)
    base = next((r for r in rows if r["loop"] == "generate/batched"), None)
    for r in rows:
        r["vs_batched_generate"] = r["tokens_per_s"] / base["tokens_per_s"] if base else None
    return rows


def run(args) -> list[dict]:
    from transformers.utils import logging as hf_logging

    from engine.evaluate import load_model_and_tokenizer
    from engine.rollout import RolloutConfig
    from pretrain.data import read_texts
    from pretrain.model import build_model, matmul_peak_flops
    from pretrain.tokenizer import train_tokenizer

    hf_logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    peak = matmul_peak_flops(device)
    bandwidth = read_bandwidth(device)
    print(f"matmul peak on {device.type} with {args.threads} thread(s): {peak / 1e9:.1f} GFLOP/s; "
          f"read bandwidth {bandwidth / 1e9:.1f} GB/s", flush=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.run:
            model, tokenizer, data = load_model_and_tokenizer(Path(args.run))
            data_dir = Path(args.data) if args.data else data
            models = [("run", lambda: model)]
        else:
            data_dir = _data_dir(args, tmp)
            tokenizer = train_tokenizer(read_texts(data_dir / "pretrain.jsonl"), 3000)
            special = special_ids(tokenizer)
            models = [(s, lambda s=s: build_model(make_config(s), len(tokenizer), special, seed=args.seed))
                      for s in args.scales]
        for name, build in models:
            model = build().to(device).eval()
            n = args.episodes if name != "paper" else min(args.episodes, args.paper_episodes)
            cfg = RolloutConfig(temperature=args.temperature, top_p=args.top_p, max_turn_tokens=args.max_turn_tokens,
                                step_limit=args.step_limit, max_total_tokens=args.max_total_tokens,
                                batch_size=args.batch_size)
            for row in bench_model(name, model, tokenizer, _tasks(data_dir, n), cfg, args, peak, bandwidth):
                results.append({**row, "device": device.type, "threads": args.threads, "peak_flops": peak,
                                "read_bandwidth": bandwidth})
            del model
    print()
    print(markdown(results))
    return results


def markdown(results: list[dict]) -> str:
    lines = ["| model | params | loop | tok/s | episodes/s | vs batched generate | share of matmul peak (weights only) "
             "| share of read bandwidth |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        ratio = f"{r['vs_batched_generate']:.2f}x" if r.get("vs_batched_generate") else "-"
        share = (f"{100 * r['peak_share']:.1f}% ({100 * r['peak_share_weights']:.1f}%)" if "peak_share" in r else "-")
        band = f"{100 * r['bandwidth_share']:.0f}%" if "bandwidth_share" in r else "-"
        lines.append(f"| {r['model']} | {r['params'] / 1e6:.2f}M | {r['loop']} | {r['tokens_per_s']:.0f} | "
                     f"{r['episodes_per_s']:.3f} | {ratio} | {share} | {band} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m benchmarks.rollout", description=__doc__.split("\n\n")[0])
    p.add_argument("--scales", nargs="+", default=["tiny", "small"], choices=["tiny", "small", "paper"])
    p.add_argument("--run", help="benchmark this run's trained checkpoint instead of random presets")
    p.add_argument("--data", help="corpus folder (default: a fresh tiny fa corpus, or the run's)")
    p.add_argument("--loops", nargs="+", default=None, help=f"loops to run (default: all available of {', '.join(LOOPS)})")
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--paper-episodes", type=int, default=16, help="episodes at the paper preset (it is slow on a CPU)")
    p.add_argument("--baseline-episodes", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: one core)")
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
        from engine.vllm_backend import vllm_available

        if args.loops is None:
            args.loops = [x for x in LOOPS if x != "engine/vllm" or vllm_available()]
        bad = sorted(set(args.loops) - set(LOOPS))
        if bad:
            raise UsageError(f"unknown loop {', '.join(bad)}; choose from {', '.join(LOOPS)}")
        if "engine/vllm" in args.loops and not vllm_available():
            raise UsageError("engine/vllm needs the vllm extra: run `make vllm` and use .venv-vllm/bin/python")
        if min(args.episodes, args.baseline_episodes, args.paper_episodes, args.threads) < 1:
            raise UsageError("--episodes, --paper-episodes, --baseline-episodes and --threads must be positive")
        results = run(args)
    except (UsageError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
