"""Throughput benchmark of the packed trainer: ``python -m benchmarks.train``.

Why this exists: packing is the trainer's main systems claim, so it is measured, in one run, on
one model and one corpus, against the plain Hugging Face recipe (one trajectory per row, padded
to the longest row of the batch by `DataCollatorForLanguageModeling`, pads masked out of the
loss, the model's own loss). A padded batch holds about as many real tokens as a packed one
(rows = micro_batch * block / mean document length), plus its padding. Reported:

* useful (non-pad) tokens per second of each, and their ratio (target >= 1.5x);
* achieved FLOP/s of our training step, (6N + causal attention) x tokens/s, as a fraction of
  a large fp32 ``torch.mm`` timed in the same process, before and after, the higher one kept
  (target >= 50% on CPU).

The two trainers step alternately and the figures are medians over the timed steps, which keeps
them stable on a shared machine.

    python -m benchmarks.train [--data data/fa-small] [--scale small] [--steps 8] [--device cpu|cuda]
        [--json bench/pretrain.json]
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import random
import statistics
import sys
import time
from pathlib import Path


def run_bench(texts: list[str], scale: str = "small", steps: int = 8, warmup: int = 2,
              block_size: int | None = None, micro_batch: int | None = None, seed: int = 0,
              peak_seconds: float = 1.0, device: str = "cpu") -> dict:
    """Time both trainers on ``texts``; return the measured figures (see module docstring)."""
    import numpy as np
    import torch
    from transformers import DataCollatorForLanguageModeling

    from pretrain.config import make_config
    from pretrain.data import PackedData
    from pretrain.model import build_model, count_params, matmul_peak_flops, train_flops_per_token
    from pretrain.tokenizer import encode_batch, special_ids, train_tokenizer
    from pretrain.train import make_optimizer, micro_step

    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if cuda else contextlib.nullcontext
    peak_before = matmul_peak_flops(device, seconds=peak_seconds)
    cfg = make_config(scale, block_size=block_size, micro_batch=micro_batch, batch_size=micro_batch, seed=seed)
    tokenizer = train_tokenizer(texts, cfg.vocab_size)
    special = special_ids(tokenizer)
    base = build_model(cfg, len(tokenizer), special).to(device)
    n_params = count_params(base)
    T, B = cfg.block_size, cfg.micro_batch
    n_batches = warmup + steps

    # ours: packed blocks, every position a target
    packed = PackedData.from_texts(texts, tokenizer, special, T, seed)
    packed_batches = []
    for s in range(n_batches):
        x, y, _ = packed.blocks([packed.block_of(p) for p in range(s * B, (s + 1) * B)])
        packed_batches.append((torch.from_numpy(x.astype(np.int64)).to(device),
                               torch.from_numpy(y.astype(np.int64)).to(device)))
    packed_model = copy.deepcopy(base).train()
    packed_opt = make_optimizer(packed_model, cfg)

    def packed_step(batch):
        x, y = batch
        micro_step(packed_model, x, y, 1.0 / y.numel(), autocast)
        torch.nn.utils.clip_grad_norm_(packed_model.parameters(), cfg.grad_clip)
        packed_opt.step()
        packed_opt.zero_grad(set_to_none=True)
        return x.numel()

    # baseline: one document per row (cut at the block size), padded by the HF collator, HF loss
    docs = [d[:T] + ([special.eos] if len(d) < T else []) for d in encode_batch(tokenizer, texts)]
    mean_len = sum(map(len, docs)) / len(docs)
    rows = max(1, round(B * T / mean_len))
    collator = DataCollatorForLanguageModeling(tokenizer, mlm=False, return_tensors="pt")
    rng = random.Random(seed)
    padded_batches = [{k: v.to(device) for k, v in collator([{"input_ids": d} for d in rng.sample(docs, rows)]).items()}
                      for _ in range(n_batches)]
    padded_model = copy.deepcopy(base).train()
    padded_opt = make_optimizer(padded_model, cfg)

    def padded_step(batch):
        with autocast():
            out = padded_model(**batch, use_cache=False)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(padded_model.parameters(), cfg.grad_clip)
        padded_opt.step()
        padded_opt.zero_grad(set_to_none=True)
        return int(batch["attention_mask"].sum())

    # interleaved, so that a busy spell on a shared machine slows both trainers alike
    times = {"packed": [], "padded": []}
    rates = {"packed": [], "padded": []}
    for i in range(n_batches):
        for name, step, batch in (("packed", packed_step, packed_batches[i]), ("padded", padded_step, padded_batches[i])):
            sync()
            start = time.perf_counter()
            useful = step(batch)
            sync()
            if i >= warmup:
                times[name].append(time.perf_counter() - start)
                rates[name].append(useful / times[name][-1])
    timed = padded_batches[warmup:]
    pad_fraction = 1 - sum(int(b["attention_mask"].sum()) for b in timed) / sum(b["input_ids"].numel() for b in timed)
    mean_padded_len = statistics.mean(b["input_ids"].shape[1] for b in timed)
    padded_useful = statistics.mean(int(b["attention_mask"].sum()) for b in timed)

    # the higher of two probes (before and after), so that a busy machine cannot inflate utilisation
    peak = max(peak_before, matmul_peak_flops(device, seconds=peak_seconds))
    packed_tps = statistics.median(rates["packed"])
    padded_tps = statistics.median(rates["padded"])
    packed_flops = packed_tps * train_flops_per_token(cfg, n_params, T)
    padded_flops = padded_tps * train_flops_per_token(cfg, n_params, int(mean_padded_len))
    return {
        "scale": scale, "device": device, "params": n_params, "vocab": len(tokenizer), "block_size": T, "micro_batch": B,
        "padded_rows": rows, "mean_doc_tokens": mean_len, "threads": torch.get_num_threads(),
        "packed_step_s": statistics.median(times["packed"]), "padded_step_s": statistics.median(times["padded"]),
        "packed_tokens_per_s": packed_tps, "padded_tokens_per_s": padded_tps,
        "padded_pad_fraction": pad_fraction, "padded_mean_len": mean_padded_len,
        "padded_useful_per_step": padded_useful, "packed_useful_per_step": B * T, "speedup": packed_tps / padded_tps,
        "matmul_peak_flops": peak, "packed_flops": packed_flops, "padded_flops": padded_flops,
        "packed_mfu": packed_flops / peak, "padded_mfu": padded_flops / peak,
    }


def format_table(r: dict) -> str:
    lines = [
        f"model: {r['scale']} preset, {r['params']:,} parameters, vocab {r['vocab']}, device {r['device']}, "
        f"{r['threads']} CPU threads",
        f"packed: {r['micro_batch']} x {r['block_size']} tokens per step; padded: {r['padded_rows']} rows "
        f"per step (mean document {r['mean_doc_tokens']:.0f} tokens)",
        "",
        "| trainer | step (s, median) | useful tokens/s (median) | pad fraction | GFLOP/s | % of matmul peak |",
        "|---|---|---|---|---|---|",
        f"| packed (ours) | {r['packed_step_s']:.3f} | {r['packed_tokens_per_s']:,.0f} | 0.00 "
        f"| {r['packed_flops'] / 1e9:.1f} | {100 * r['packed_mfu']:.1f}% |",
        f"| padded (HF style) | {r['padded_step_s']:.3f} | {r['padded_tokens_per_s']:,.0f} "
        f"| {r['padded_pad_fraction']:.2f} | {r['padded_flops'] / 1e9:.1f} | {100 * r['padded_mfu']:.1f}% |",
        "",
        f"matmul peak (large square torch.mm, {'bf16' if r['device'] == 'cuda' else 'fp32'}, same process): "
        f"{r['matmul_peak_flops'] / 1e9:.1f} GFLOP/s",
        f"packed / padded useful tokens/s: {r['speedup']:.2f}x (target >= 1.5x) "
        f"{'OK' if r['speedup'] >= 1.5 else 'BELOW TARGET'}",
        f"packed step FLOP/s / matmul peak: {100 * r['packed_mfu']:.1f}% (target >= 50%) "
        f"{'OK' if r['packed_mfu'] >= 0.5 else 'BELOW TARGET'}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from pretrain.config import SCALES, UsageError

    p = argparse.ArgumentParser(prog="python -m benchmarks.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="corpus folder (default: a synthetic corpus made on the fly)")
    p.add_argument("--scale", default="small", choices=SCALES)
    p.add_argument("--steps", type=int, default=8, help="timed steps per trainer")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--block-size", type=int)
    p.add_argument("--micro-batch", type=int)
    p.add_argument("--docs", type=int, default=800, help="synthetic corpus size when --data is absent")
    p.add_argument("--peak-seconds", type=float, default=1.0, help="duration of each matmul-peak probe")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="cuda: bf16 autocast, bf16 matmul peak")
    p.add_argument("--json", help="also write the figures to this JSON file")
    args = p.parse_args(argv)
    try:
        if args.data:
            from pretrain.data import check_corpus, read_texts

            texts = read_texts(check_corpus(args.data) / "pretrain.jsonl")
        else:
            from pretrain.synthetic import synthetic_rows

            texts = [r["text"] for r in synthetic_rows(args.docs)]
        if args.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise UsageError("--device cuda given but no CUDA device is available")
        result = run_bench(texts, args.scale, args.steps, args.warmup, args.block_size, args.micro_batch,
                           peak_seconds=args.peak_seconds, device=args.device)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_table(result))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
