"""Update cost of an OPD step: length-sorted micro-batches cut to their own length vs padded batches,
and scored with or without an attention mask.

Why this exists: on CPU a post-training step is dominated by the update (teacher forward, student
forward and backward) over whole multi-turn episodes, whose lengths differ several-fold (a solved
task stops early, a failed one runs to the step limit). Padding every episode to the longest one
spends compute on pad tokens; `posttrain.train.micro_batches` groups episodes by length and cuts
each group to its own longest. This measures it against one padded batch (our old default) and
against micro-batches of the same size in rollout order, padded to the batch's longest episode
(which separates the effect of cutting from that of the batch size): same model, same episodes,
same run. The trainers score these right-padded micro-batches without an attention mask
(`engine.rollout.next_token_logits`: causal attention alone gives every real token the same
logits), so SDPA runs its causal kernel; one arm passes the mask, as the trainers did before. The
last arm autocasts the forward passes to bf16 (`cpu_bf16`, the small preset's setting on a CPU that
multiplies bf16 natively; `pretrain.model.cpu_has_bf16`), as CUDA runs do with `bf16`.

    python -m benchmarks.update [--scale small] [--episodes 8] [--min-len 600] [--max-len 2400]
        [--micro-batch 2] [--repeats 2]

Episodes are random token ids with lengths spread evenly over [min-len, max-len] (our small OPD
runs: about 600 to 2 400 tokens) and every position counted as an agent token; weights are the
preset's random initialisation. Prints seconds per update of each and the ratios.
Exit status 2 with one ``error:`` line on bad input.
"""
from __future__ import annotations

import contextlib
import json
import sys
import time

import torch

from engine.rollout import next_token_logits
from planning_gym.cli import Parser
from posttrain import losses
from posttrain.train import micro_batches
from pretrain.config import UsageError, make_config
from pretrain.model import build_model, cpu_has_bf16


def masked_logits(model, ids, attn):
    """The previous scoring: the attention mask always passed."""
    return model(input_ids=ids, attention_mask=attn).logits[:, :-1]


def bf16():
    return torch.autocast("cpu", dtype=torch.bfloat16)


def update_seconds(student, teacher, ids, attn, groups, topk: int = 50, score=next_token_logits,
                   precision=contextlib.nullcontext) -> float:
    """Wall seconds of one OPD update (teacher forward, student forward + backward) over ``groups``
    of ``(rows, length)``, each model scored by ``score(model, ids, attn)`` under ``precision()``."""
    mask, n_tokens = attn[:, 1:], int(attn[:, 1:].sum())
    student.zero_grad(set_to_none=True)
    start = time.perf_counter()
    for rows, length in groups:
        mb_ids, mb_attn = ids[rows, :length], attn[rows, :length]
        with torch.no_grad(), precision():
            t_logits = score(teacher, mb_ids, mb_attn)
        with precision():
            logits = score(student, mb_ids, mb_attn)
        kl = losses.reverse_kl_topk(logits, mask[rows, :length - 1], topk, teacher_logits=t_logits)
        losses.masked_token_mean(kl, mask[rows, :length - 1], n_tokens).backward()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m benchmarks.update", description=__doc__.split("\n")[0])
    p.add_argument("--scale", default="small", choices=["tiny", "small", "paper"])
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--min-len", type=int, default=600)
    p.add_argument("--max-len", type=int, default=2400)
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", default=None, help="also write the figures to this file")
    try:
        args = p.parse_args(argv)
        if not 2 <= args.min_len <= args.max_len or args.episodes < 1 or args.micro_batch < 1 or args.repeats < 1:
            raise UsageError("need 2 <= --min-len <= --max-len and positive --episodes, --micro-batch, --repeats")
        cfg = make_config(args.scale)
        if args.max_len > cfg.max_position_embeddings:
            raise UsageError(f"--max-len {args.max_len} exceeds the {args.scale} context of {cfg.max_position_embeddings}")
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    student, teacher = build_model(cfg, seed=0).train(), build_model(cfg, seed=1).eval()
    lengths = torch.linspace(args.min_len, args.max_len, args.episodes).round().long()
    lengths = lengths[torch.randperm(args.episodes)]           # rollouts come in no particular order
    ids = torch.randint(0, cfg.vocab_size, (args.episodes, args.max_len))
    attn = (torch.arange(args.max_len)[None] < lengths[:, None]).long()
    plans = {"padded": [(torch.arange(args.episodes), args.max_len)],          # one batch, all padded
             "padded_micro": [(rows, args.max_len) for rows in torch.arange(args.episodes).split(args.micro_batch)],
             "cut": micro_batches(lengths, args.micro_batch)}
    arms = {**{name: (plan, next_token_logits, contextlib.nullcontext) for name, plan in plans.items()},
            "cut_masked": (plans["cut"], masked_logits, contextlib.nullcontext),
            "cut_bf16": (plans["cut"], next_token_logits, bf16)}
    times = {name: [] for name in arms}
    for _ in range(args.repeats):                               # interleaved: all see the same load
        for name, (plan, score, precision) in arms.items():
            times[name].append(update_seconds(student, teacher, ids, attn, plan, score=score, precision=precision))
    best = {name: min(v) for name, v in times.items()}
    real = int(lengths.sum())
    result = {"scale": args.scale, "episodes": args.episodes, "micro_batch": args.micro_batch,
              "real_tokens": real, "padded_tokens": args.episodes * args.max_len,
              "cut_tokens": sum(len(r) * n for r, n in plans["cut"]), "threads": torch.get_num_threads(),
              "padded_s": best["padded"], "padded_micro_s": best["padded_micro"], "cut_s": best["cut"],
              "cut_masked_s": best["cut_masked"], "speedup": best["padded"] / best["cut"],
              "speedup_same_micro": best["padded_micro"] / best["cut"], "speedup_no_mask": best["cut_masked"] / best["cut"],
              "cut_bf16_s": best["cut_bf16"], "native_bf16": cpu_has_bf16(), "speedup_bf16": best["cut"] / best["cut_bf16"]}
    print(f"OPD update, {args.scale}, {args.episodes} episodes of {args.min_len}-{args.max_len} tokens, "
          f"{torch.get_num_threads()} thread(s); {real} real tokens")
    print(f"  one padded batch:                   {best['padded']:7.2f} s  ({result['padded_tokens']} token slots)")
    print(f"  micro-batches of {args.micro_batch}, padded:         {best['padded_micro']:7.2f} s  "
          f"({result['padded_tokens']} token slots)")
    print(f"  micro-batches of {args.micro_batch}, sorted and cut: {best['cut']:7.2f} s  "
          f"({result['cut_tokens']} token slots)")
    print(f"  the same, scored with the mask:     {best['cut_masked']:7.2f} s")
    print(f"  sorted and cut, bf16 autocast:      {best['cut_bf16']:7.2f} s  "
          f"({'native' if result['native_bf16'] else 'emulated: this CPU has no native'} bf16 matmul)")
    print(f"  speed-up: {result['speedup']:.2f}x over one padded batch, "
          f"{result['speedup_same_micro']:.2f}x over padded micro-batches of {args.micro_batch}, "
          f"{result['speedup_no_mask']:.2f}x over passing the mask; bf16 {result['speedup_bf16']:.2f}x over fp32")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
