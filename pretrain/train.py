"""Pre-train a Qwen2 model from scratch on a planning-gym corpus: ``python -m pretrain.train``.

Why this exists: it is the middle of ``make pretrain`` (corpus -> tokenizer + model -> eval). One
entry point serves a laptop CPU and a GPU cluster:

    python -m pretrain.train --data data/fa-small --out runs/fa-small [--scale tiny|small|paper]
        [--steps N] [--loss-on all|agent] [--resume] [--set field=value ...]
    torchrun --nproc_per_node=8 -m pretrain.train --data ... --out ... [--fsdp]

It trains the run's tokenizer when the run folder has none, packs the corpus (`pretrain.data`),
and optimises with AdamW, linear warm-up + cosine decay, gradient accumulation and clipping (bf16
autocast + SDPA on CUDA, and on a CPU that multiplies bf16 natively with ``cpu_bf16``, small's
default; optional ``torch.compile``). Every ``ckpt_every`` steps it writes an
atomic checkpoint (`pretrain.checkpoint`); ``--resume`` continues from the newest one to the same
bits as an uninterrupted run (on the same hardware). Evaluation loss on ``test_id`` is logged to
``RUN/metrics.jsonl``; the config is ``RUN/train_config.json``; ``RUN/summary.json`` points at the
final checkpoint.

Exit status: 0 done; 2 bad input (one ``error:`` line on stderr, nothing overwritten);
3 the loss went non-finite (training stopped, the last good checkpoint kept).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

from planning_gym.cli import Parser, UsageError, append_jsonl, entry, fields_help, prepare_output
from pretrain import rundir
from pretrain.config import LOSS_ON, PRESETS, PretrainConfig, make_config, parse_set, resolve_scale
from pretrain.data import check_corpus

# Fields a resumed run may change: how the work is spread and logged, not what is computed.
RESUME_MAY_CHANGE = {"micro_batch", "compile", "fsdp", "log_every", "eval_every", "eval_blocks", "ckpt_every",
                     "keep_checkpoints", "tracker", "cpu_bf16"}

FLAGS = {  # CLI flag -> config field (None = use the preset's value)
    "steps": int, "batch_size": int, "micro_batch": int, "block_size": int, "lr": float,
    "warmup_steps": int, "eval_every": int, "ckpt_every": int, "log_every": int, "seed": int,
    "vocab_size": int,
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = Parser(prog="python -m pretrain.train", description=__doc__.split("\n\n")[0],
               epilog=fields_help(PretrainConfig, PRESETS))
    p.add_argument("--data", help="corpus folder holding pretrain.jsonl and test_id.jsonl")
    p.add_argument("--out", required=True, help="run folder (tokenizer, checkpoints, metrics)")
    p.add_argument("--scale", help="tiny | small | paper (default: paper with CUDA, else small)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its newest checkpoint")
    p.add_argument("--loss-on", dest="loss_on", choices=LOSS_ON, help="train on all tokens or agent turns only")
    for name, kind in FLAGS.items():
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=kind)
    p.add_argument("--compile", action="store_const", const=True, help="torch.compile the model")
    p.add_argument("--fsdp", action="store_const", const=True, help="FSDP2 sharding under torchrun (else DDP)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="any PretrainConfig field")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    return p.parse_args(argv)


def _overrides(args) -> dict:
    out = {k: getattr(args, k) for k in (*FLAGS, "loss_on", "compile", "fsdp") if getattr(args, k) is not None}
    out.update(parse_set(args.set))
    return out


def _read_run_config(run: Path) -> tuple[PretrainConfig, str]:
    saved = rundir.read_train_config(run)
    if saved is None:
        raise UsageError(f"{run} has no {rundir.TRAIN_CONFIG}; nothing to resume (drop --resume to start)")
    if saved.get("kind", "pretrain") != "pretrain":
        raise UsageError(f"{run} is a {saved['kind']} run; resume it with `python -m {saved['kind']}.train --resume`")
    try:
        return PretrainConfig.from_json(saved["config"]), str(saved["data"])
    except (KeyError, TypeError, UsageError) as exc:
        raise UsageError(f"corrupt run config {run / rundir.TRAIN_CONFIG}: {exc}") from None


def resolve_run(args, notes: list[str]) -> tuple[PretrainConfig, Path, Path | None]:
    """(config, corpus folder, checkpoint to resume or None), validating before any write.
    Lines worth telling the user (which scale was chosen) are appended to ``notes``."""
    from pretrain.checkpoint import latest_checkpoint

    run = Path(args.out)
    overrides = _overrides(args)
    if args.resume:
        if not run.is_dir():
            raise UsageError(f"run folder {run} does not exist; nothing to resume")
        cfg, data = _read_run_config(run)
        given = {**overrides, **({"scale": args.scale} if args.scale else {})}
        for key, value in given.items():
            if key not in RESUME_MAY_CHANGE and getattr(cfg, key) != value:
                raise UsageError(f"--resume: {key}={value!r} differs from the run's saved {key}={getattr(cfg, key)!r} "
                                 f"(only {', '.join(sorted(RESUME_MAY_CHANGE))} may change)")
        if args.data and Path(args.data).resolve() != Path(data).resolve():
            raise UsageError(f"--resume: --data {args.data} differs from the run's corpus {data}")
        cfg = PretrainConfig.from_json({**cfg.to_json(), **{k: v for k, v in given.items() if k in RESUME_MAY_CHANGE}})
        notes.append(f"scale: {cfg.scale} (from the run's saved config)")
        return cfg, Path(data), latest_checkpoint(run)
    if not args.data:
        raise UsageError("--data is required (a corpus folder from `make data`)")
    if latest_checkpoint(run) is not None:
        raise UsageError(f"{run} already holds checkpoints; pass --resume or choose another --out")
    scale = resolve_scale(args.scale, log=notes.append)
    return make_config(scale, **overrides), Path(args.data), None


def lr_schedule(optimizer, cfg: PretrainConfig):
    from transformers import get_cosine_with_min_lr_schedule_with_warmup

    return get_cosine_with_min_lr_schedule_with_warmup(
        optimizer, num_warmup_steps=cfg.warmup_steps, num_training_steps=cfg.steps, min_lr_rate=cfg.min_lr_ratio)


def make_optimizer(model, cfg: PretrainConfig):
    """AdamW; matrices decay, vectors (norms, biases) do not."""
    import torch

    params = {id(p): p for p in model.parameters() if p.requires_grad}.values()
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.adam_eps,
                             fused=not cfg.fsdp)


def _metrics_step(line: str) -> int | None:
    """The step of a metrics row; None for a line cut short by a kill."""
    try:
        return int(json.loads(line)["step"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def _fmt_duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def evaluate(model, data, cfg: PretrainConfig, ctx) -> dict:
    """Mean target cross-entropy on the first ``eval_blocks`` test blocks: on agent tokens and
    on all tokens. Blocks are split over ranks, every rank runs the same number of batches."""
    import torch
    import torch.nn.functional as F

    n = min(data.num_blocks, cfg.eval_blocks)
    mine = list(range(n))[ctx.rank::ctx.world]
    per_rank = math.ceil(n / ctx.world)
    weights = [1.0] * len(mine) + [0.0] * (per_rank - len(mine))
    mine += [0] * (per_rank - len(mine))
    sums = torch.zeros(4, dtype=torch.float64, device=ctx.device)  # agent sum, agent count, all sum, all count
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for i in range(0, per_rank, cfg.micro_batch):
            x, y, m = (torch.from_numpy(a.astype("int64")).to(ctx.device) for a in data.blocks(mine[i:i + cfg.micro_batch]))
            w = torch.tensor(weights[i:i + cfg.micro_batch], device=ctx.device, dtype=torch.float64)[:, None]
            with ctx.autocast(cfg.cpu_bf16):
                logits = model(input_ids=x, use_cache=False).logits
            nll = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none").view_as(y).double()
            sums += torch.stack([(nll * m * w).sum(), (m * w).sum(), (nll * w).sum(), w.sum() * y.shape[1]])
    model.train(was_training)
    ctx.all_reduce(sums)
    agent = (sums[0] / sums[1]).item() if sums[1] > 0 else float("nan")
    return {"eval_loss": agent if cfg.loss_on == "agent" else (sums[2] / sums[3]).item(),
            "eval_loss_agent": agent, "eval_loss_all": (sums[2] / sums[3]).item()}


def batch_tensors(data, blocks: list[int], loss_on: str, device="cpu"):
    """(inputs, targets) of packed blocks as int64 tensors; targets are -100 (ignored) outside
    agent turns when ``loss_on == "agent"``."""
    import torch

    x, y, m = (torch.from_numpy(a.astype("int64")) for a in data.blocks(blocks))
    if loss_on == "agent":
        y = torch.where(m.bool(), y, torch.full_like(y, -100))
    return x.to(device), y.to(device)


def micro_step(fwd, x, y, scale: float, autocast=contextlib.nullcontext):
    """Forward + backward of one packed micro-batch; returns the summed target loss (detached).

    ``y`` holds -100 where a position is not a target. The gradient is that of ``scale * sum``.
    """
    import torch.nn.functional as F

    with autocast():
        logits = fwd(input_ids=x, use_cache=False).logits
    lsum = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), ignore_index=-100, reduction="sum")
    (lsum * scale).backward()
    return lsum.detach()


def run(args) -> int:
    # cheap checks first: a wrong flag or path costs no torch/transformers import
    rank = int(os.environ.get("RANK", "0"))
    notes: list[str] = []
    cfg, data_dir, resume_from = resolve_run(args, notes)
    check_corpus(data_dir)
    run_dir = Path(args.out)
    if rank == 0:   # a file in the way or an unwritable folder fails now, not after training
        prepare_output(run_dir, exists_ok=True, what="run folder")
    tok_dir = run_dir / "tokenizer"
    if rank == 0:
        print("\n".join(notes), flush=True)
        notes.clear()

    import hashlib

    import torch
    from tqdm import tqdm
    from transformers.utils import logging as hf_logging

    from pretrain import checkpoint as ck
    from planning_gym.corpus import verify_corpus
    from pretrain.data import load_split, read_texts, save_split_cache
    from pretrain.distributed import Context, grad_sync, wrap_model
    from pretrain.model import build_model, count_params, cpu_description, matmul_peak_flops, train_flops_per_token
    from pretrain.tokenizer import load_tokenizer, save_tokenizer, special_ids, train_tokenizer

    hf_logging.disable_progress_bar()  # our own tqdm bar is the only one
    ctx = Context(args.device)

    # ---- phase 1: validate everything and build what is needed in memory; nothing is written.
    # Rank 0 does the corpus work (tokenizer training, packing); the other ranks pick up its
    # tokenizer and packed-corpus cache from the run folder once it has written them.
    cache_dir = run_dir / "cache"
    failure = tokenizer = train_data = eval_data = model = restored = fingerprint = None
    try:
        accum = cfg.grad_accum(ctx.world)
        restored = ck.read_checkpoint(resume_from, ctx.rank) if resume_from else None
        source = resume_from or (tok_dir if (tok_dir / "tokenizer.json").is_file() else None)
        if ctx.rank == 0:
            texts = None
            if source is None:
                texts = read_texts(data_dir / "pretrain.jsonl")
                tokenizer = train_tokenizer(texts, cfg.vocab_size)
                notes.append(f"trained a byte-level BPE on {len(texts)} documents: {len(tokenizer)} tokens "
                             f"(asked for at most {cfg.vocab_size}), saved in {tok_dir}")
            else:
                try:
                    tokenizer = load_tokenizer(source)
                except Exception as exc:
                    raise UsageError(f"cannot load the tokenizer in {source}: {exc}") from None
                if not resume_from:
                    if len(tokenizer) > cfg.vocab_size:
                        raise UsageError(f"{tok_dir} holds a {len(tokenizer)}-token tokenizer (from an earlier "
                                         f"start?), more than vocab_size {cfg.vocab_size}: delete it or set vocab_size")
                    notes.append(f"reusing the tokenizer in {tok_dir} ({len(tokenizer)} tokens)")
            special = special_ids(tokenizer)
            train_data = load_split(data_dir, "pretrain.jsonl", tokenizer, special, cfg.block_size, cfg.seed,
                                    cache_dir, texts=texts)
            eval_data = load_split(data_dir, "test_id.jsonl", tokenizer, special, cfg.block_size, cfg.seed, cache_dir)
            fingerprint = hashlib.sha1(train_data.stream.tobytes()).hexdigest()
            if restored and restored["state"].get("data_fingerprint") != fingerprint:
                raise UsageError(f"corpus {data_dir} changed since {resume_from} was written; resume needs the same data")
        model = ck.load_model(resume_from) if resume_from else None
    except UsageError as exc:
        failure = exc
    if not ctx.agree(failure is None):
        if failure is not None:
            raise failure
        raise UsageError("another process failed to start")

    # ---- phase 2: write the run folder (rank 0), then every rank has the same tokenizer and data
    for note in notes:
        ctx.say(note)
    if ctx.rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        if source is None:
            tmp = run_dir / ".tmp-tokenizer"
            shutil.rmtree(tmp, ignore_errors=True)
            save_tokenizer(tokenizer, tmp)
            shutil.rmtree(tok_dir, ignore_errors=True)  # a folder without tokenizer.json is debris
            os.replace(tmp, tok_dir)
        save_split_cache(train_data, data_dir, "pretrain.jsonl", tokenizer, cache_dir)
        save_split_cache(eval_data, data_dir, "test_id.jsonl", tokenizer, cache_dir)
        rundir.write_train_config(run_dir, {"kind": "pretrain", "data": str(data_dir),
                                            "corpus_digest": verify_corpus(data_dir), "config": cfg.to_json(),
                                            "tokenizer_size": len(tokenizer),
                                            "corpus_tokens": int(len(train_data.stream)),   # one epoch
                                            # CPU kernels sum in an order set by the instruction set and the
                                            # thread count: training again to the bit needs both (reproduce.store)
                                            "threads": torch.get_num_threads(), "cpu": cpu_description()})
        metrics_path = rundir.metrics_path(run_dir)
        kept = []
        if restored and metrics_path.is_file():  # drop rows the resumed steps will write again
            kept = [r for r in metrics_path.read_text().splitlines()
                    if _metrics_step(r) is not None and _metrics_step(r) <= restored["state"]["step"]]
        metrics_path.write_text("".join(r + "\n" for r in kept))
    ctx.barrier()
    if tokenizer is None:
        tokenizer = load_tokenizer(source or tok_dir)
        special = special_ids(tokenizer)
        train_data = load_split(data_dir, "pretrain.jsonl", tokenizer, special, cfg.block_size, cfg.seed, cache_dir)
        eval_data = load_split(data_dir, "test_id.jsonl", tokenizer, special, cfg.block_size, cfg.seed, cache_dir)
    if model is None:
        model = build_model(cfg, len(tokenizer), special)

    model.to(ctx.device).train()
    n_params = count_params(model)
    model = wrap_model(model, ctx, cfg.fsdp)
    fwd = torch.compile(model) if cfg.compile else model
    optimizer = make_optimizer(model, cfg)
    scheduler = lr_schedule(optimizer, cfg)
    step = 0
    if restored:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(model, optimizer, restored["optimizer"], options=StateDictOptions(full_state_dict=True))
        scheduler.load_state_dict(restored["state"]["scheduler"])
        step = restored["state"]["step"]
        if restored["rng"] is not None:
            ck.set_rng_state(*restored["rng"])

    tokens_per_step = cfg.batch_size * cfg.block_size
    peak = matmul_peak_flops(ctx.device, seconds=0.3)
    est = (cfg.steps - step) * tokens_per_step * train_flops_per_token(cfg, n_params) / (0.4 * peak * ctx.world)
    ctx.say(f"scale {cfg.scale}: {n_params:,} parameters, vocab {len(tokenizer)}, {train_data.num_blocks} blocks of "
            f"{cfg.block_size} tokens ({len(train_data.stream):,} tokens), global batch {cfg.batch_size} = "
            f"{ctx.world} process(es) x {cfg.micro_batch} x {accum} accumulation, loss on {cfg.loss_on} tokens, "
            f"device {ctx.device.type}{' (resuming at step %d)' % step if restored else ''}")
    ctx.say(f"estimated time for {cfg.steps - step} steps: ~{_fmt_duration(est)} (rough: 40% of a measured "
            f"{peak / 1e9:.0f} GFLOP/s matmul peak per process)")

    from pretrain.tracking import Tracker
    tracker = Tracker(cfg.tracker if ctx.rank == 0 else "none", run_dir)

    def log(row: dict):
        if ctx.rank == 0:
            append_jsonl(rundir.metrics_path(run_dir), row)
            tracker.log(row)

    def save(at: int):
        trainer_state = {"samples_seen": at * cfg.batch_size, "tokens_seen": at * tokens_per_step,
                         "epoch": at * cfg.batch_size // train_data.num_blocks, "data_fingerprint": fingerprint}
        ck.save_checkpoint(run_dir, at, model=model, optimizer=optimizer, scheduler=scheduler, tokenizer=tokenizer,
                           trainer_state=trainer_state, rank=ctx.rank, world=ctx.world, barrier=ctx.barrier)
        if ctx.rank == 0:
            ck.prune_checkpoints(run_dir, cfg.keep_checkpoints)

    last_eval = None
    if step == 0:
        last_eval = evaluate(fwd, eval_data, cfg, ctx)
        log({"step": 0, **last_eval})
    bar = tqdm(total=cfg.steps, initial=step, desc="pretrain", disable=ctx.rank != 0, mininterval=1.0,
               dynamic_ncols=True, file=sys.stderr)
    t_log, tokens_since = time.perf_counter(), 0
    while step < cfg.steps:
        count = max(1, train_data.target_count(step, cfg.batch_size, cfg.loss_on))
        loss_sum = torch.zeros((), dtype=torch.float64, device=ctx.device)
        for micro in range(accum):
            blocks = train_data.shard(step, cfg.batch_size, cfg.micro_batch, micro, ctx.rank, ctx.world)
            x, y = batch_tensors(train_data, blocks, cfg.loss_on, ctx.device)
            with grad_sync(model, micro == accum - 1):
                # scaled so that the DDP/FSDP average over ranks gives the global-batch mean
                loss_sum += micro_step(fwd, x, y, ctx.world / count, lambda: ctx.autocast(cfg.cpu_bf16)).double()
        loss = ctx.all_reduce(loss_sum).item() / count
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        grad_norm = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)
        if not (math.isfinite(loss) and math.isfinite(grad_norm)):
            bar.close()
            good = ck.latest_checkpoint(run_dir)
            ctx.say(f"error: non-finite {'loss' if not math.isfinite(loss) else 'gradient norm'} at step {step + 1} "
                    f"(loss={loss}, grad_norm={grad_norm}); stopped without saving. Last good checkpoint: "
                    f"{good if good else 'none (no checkpoint was written yet)'}", err=True)
            return 3
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        tokens_since += tokens_per_step
        bar.update(1)
        if step % cfg.log_every == 0 or step == cfg.steps:
            now = time.perf_counter()
            log({"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm, "tokens_seen": step * tokens_per_step,
                 "tok_per_s": tokens_since / max(now - t_log, 1e-9), "bf16": ctx.bf16(cfg.cpu_bf16)})
            bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}")
            t_log, tokens_since = now, 0
        if step % cfg.eval_every == 0 or step == cfg.steps:
            last_eval = evaluate(fwd, eval_data, cfg, ctx)
            log({"step": step, **last_eval})
        if step % cfg.ckpt_every == 0 or step == cfg.steps:
            save(step)
    bar.close()
    if last_eval is None:  # resumed at the very end
        last_eval = evaluate(fwd, eval_data, cfg, ctx)
    if ck.latest_checkpoint(run_dir) is None or ck.latest_checkpoint(run_dir).name != ck.step_dir_name(step):
        save(step)
    final = ck.latest_checkpoint(run_dir)
    tracker.close()
    if ctx.rank == 0:
        summary = {"checkpoint": ck.relative_checkpoint(final, run_dir), "step": step, "scale": cfg.scale,
                   "params": n_params, **last_eval}
        rundir.write_summary(run_dir, summary)
    ctx.say(f"final eval loss (test_id, {cfg.loss_on} tokens): {last_eval['eval_loss']:.4f} "
            f"[all tokens {last_eval['eval_loss_all']:.4f}, agent tokens {last_eval['eval_loss_agent']:.4f}]")
    ctx.say(f"checkpoint: {final}  (AutoModelForCausalLM / AutoTokenizer .from_pretrained)")
    return 0


def main(argv: list[str] | None = None) -> int:
    rank = int(os.environ.get("RANK", "0"))
    try:
        return entry(lambda: run(parse_args(argv)), rank0=rank == 0)
    finally:
        dist = sys.modules.get("torch.distributed")  # only loaded once training got going
        if dist is not None and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
