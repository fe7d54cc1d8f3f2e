"""Post-train a pre-trained student: ``python -m posttrain.train --method grpo|opd|turnopd|tcod``.

    python -m posttrain.train --method opd --student runs/pretrain-fa-small --teacher runs/teacher-B \
        --out runs/opd-B [--scale small] [--set steps=60 --set topk=100 ...] [--resume]

One loop for every method (see `posttrain.config`).  Each step:
  1. draw ``tasks_per_step`` posttrain tasks from the ``(seed, step)`` stream, ``group_size`` copies each;
  2. roll them out with the KV-cached engine (depth-capped for TurnOPD / TCOD);
  3. score: the teacher's one forward pass per episode (OPD family), or outcome / process
     rewards and group-relative advantages (GRPO);
  4. update on agent tokens only, with losses normalised by the *global* agent-token count (or,
     for TurnOPD's turn-balanced loss, by the global episode count), in micro-batches.
Metrics per step go to ``RUN/metrics.jsonl`` with the wall-clock split into rollout / scoring /
update; checkpoints hold model, optimizer, RNG and the depth controller, so ``--resume`` continues
the same run.  The run folder looks like a pretrain run (``train_config.json``, ``summary.json``),
so `posttrain.evaluate` and a later MOPD stage can load it as a student.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from pathlib import Path

from posttrain.config import METHODS, PosttrainConfig, make_config
from pretrain.config import UsageError, parse_set, resolve_scale


def parse_overrides(items: list[str]) -> dict:
    """``--set field=value`` for `PosttrainConfig`, with the pre-trainer's typed parser."""
    return parse_set(items, PosttrainConfig)


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def parse_args(argv):
    p = _Parser(prog="python -m posttrain.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--method", help=" | ".join(METHODS) + " (required unless --resume)")
    p.add_argument("--student", help="run folder of the student (a pretrain or posttrain run)")
    p.add_argument("--teacher", help="run folder of the teacher (opd, turnopd, tcod)")
    p.add_argument("--out", required=True, help="run folder for this post-training run")
    p.add_argument("--data", help="corpus folder (default: the student's)")
    p.add_argument("--scale", help="tiny | small | paper (default: paper with CUDA, else small)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    p.add_argument("--resume", action="store_true")
    return p.parse_args(argv)


def check_same_vocabulary(student_tok, teacher_tok, student_model, teacher_model) -> None:
    """OPD compares distributions token by token: refuse a teacher with another vocabulary."""
    if student_tok.get_vocab() != teacher_tok.get_vocab():
        raise UsageError("the teacher's tokenizer differs from the student's; build teachers with "
                         "`python -m posttrain.teachers` so they share the student's tokenizer")
    if student_model.config.vocab_size != teacher_model.config.vocab_size:
        raise UsageError(f"vocabulary sizes differ: student {student_model.config.vocab_size}, "
                         f"teacher {teacher_model.config.vocab_size}")


def process_rewards(tasks: list, episodes: list, solvers: dict):
    """[B, K] step rewards from the solver: 1 where a turn shortened the remaining shortest plan."""
    import torch

    from planning_gym.env import apply_action
    from planning_gym.solver import Solver
    k = max((e.n_turns for e in episodes), default=0)
    out = torch.zeros(len(episodes), max(k, 1))
    for b, ((world, task), ep) in enumerate(zip(tasks, episodes)):
        solver = solvers.setdefault(id(world), Solver(world))
        inv = dict(task.inventory)
        dist = solver.plan_length(task.goal, inv)
        for t, action in enumerate(ep.actions):
            if action is None or apply_action(world, inv, action) is not None:
                continue
            new = solver.plan_length(task.goal, inv)
            out[b, t] = float(dist is not None and new is not None and new < dist)
            dist = new
    return out


def micro_batches(lengths, size: int) -> list:
    """``(episode rows, token length)`` per micro-batch: episodes grouped ``size`` at a time in
    order of length, each group cut to its own longest episode, so right padding beyond it is never
    run through the models. The loss and its gradient do not change (every loss is normalised by
    whole-batch counts); the update costs what the real tokens cost."""
    order = lengths.argsort(descending=True, stable=True)
    return [(rows, int(lengths[rows].max())) for rows in order.split(size)]


class Trainer:
    def __init__(self, cfg: PosttrainConfig, student_dir: Path, teacher_dir: Path | None, out: Path,
                 data: Path | None, resume: bool):
        import torch

        from posttrain.evaluate import load_model_and_tokenizer, load_rows, load_worlds, task_for_row
        from posttrain.turnopd import DepthController

        self.cfg, self.out = cfg, Path(out)
        self.model, self.tokenizer, student_data = load_model_and_tokenizer(run_dir=student_dir)
        self.data = Path(data or student_data or "")
        if not (self.data / "posttrain.jsonl").is_file():
            raise UsageError(f"corpus {self.data} has no posttrain.jsonl (pass --data)")
        self.teacher = None
        if cfg.method != "grpo":
            if teacher_dir is None:
                raise UsageError(f"--method {cfg.method} needs --teacher")
            self.teacher, teacher_tok, _ = load_model_and_tokenizer(run_dir=teacher_dir)
            check_same_vocabulary(self.tokenizer, teacher_tok, self.model, self.teacher)
            self.teacher.eval().requires_grad_(False)
        self.reference = None
        if cfg.method == "grpo" and cfg.kl_coef > 0:
            self.reference, _, _ = load_model_and_tokenizer(run_dir=student_dir)
            self.reference.eval().requires_grad_(False)
        worlds = load_worlds(self.data)
        domains = {d for d in cfg.domains.split(",") if d}
        bins = {d for d in cfg.difficulties.split(",") if d}
        rows = [r for r in load_rows(self.data, "posttrain")
                if (not domains or r["domain"] in domains) and (not bins or r["difficulty"] in bins)]
        if not rows:
            raise UsageError(f"no posttrain tasks for domains {sorted(domains) or 'all'} and difficulties "
                             f"{sorted(bins) or 'all'} in {self.data}")
        self.tasks = [task_for_row(worlds, r) for r in rows]
        self.solvers: dict = {}
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: 1.0)
        self.controller = DepthController(cfg.h_min, cfg.h_max, cfg.probe_interval, cfg.probe_warmup, cfg.ema_alpha)
        self.step, self.train_wall = 0, 0.0
        self.student_dir, self.teacher_dir = Path(student_dir), teacher_dir
        if resume:
            self._resume()

    # ----- bookkeeping ----------------------------------------------------------------------------
    def _resume(self) -> None:
        from pretrain.checkpoint import latest_checkpoint, load_model, read_checkpoint, set_rng_state
        ckpt = latest_checkpoint(self.out)
        if ckpt is None:
            raise UsageError(f"{self.out} has no checkpoint to resume")
        saved = read_checkpoint(ckpt)
        self.model.load_state_dict(load_model(ckpt).state_dict())
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["state"]["scheduler"])
        self.controller.load_state_dict(saved["state"]["controller"])
        self.step, self.train_wall = saved["state"]["step"], saved["state"]["train_wall"]
        if saved["rng"] is not None:
            set_rng_state(*saved["rng"])
        metrics = self.out / "metrics.jsonl"
        if metrics.exists():   # drop what the killed run logged after its last checkpoint
            keep = [l for l in metrics.read_text().splitlines() if json.loads(l).get("step", 0) <= self.step]
            metrics.write_text("".join(l + "\n" for l in keep))

    def save(self) -> Path:
        from pretrain.checkpoint import prune_checkpoints, save_checkpoint
        ckpt = save_checkpoint(self.out, self.step, model=self.model, optimizer=self.optimizer,
                               scheduler=self.scheduler, tokenizer=self.tokenizer,
                               trainer_state={"controller": self.controller.state_dict(),
                                              "train_wall": self.train_wall, "method": self.cfg.method})
        if self.cfg.keep_checkpoints:
            prune_checkpoints(self.out, self.cfg.keep_checkpoints)
        return ckpt

    def log(self, record: dict) -> None:
        with open(self.out / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")

    # ----- one step -------------------------------------------------------------------------------
    def depth_cap(self) -> tuple[int | None, bool]:
        """(turn cap for this step's rollouts, whether they are TurnOPD probes)."""
        from posttrain.turnopd import tcod_window
        if self.cfg.method == "turnopd" and self.cfg.adaptive_depth:
            probe = self.controller.should_probe(self.step)
            return (None if probe else self.controller.cap), probe
        if self.cfg.method == "tcod":
            return tcod_window(self.step, self.cfg.tcod_checkpoint_steps), False
        return None, False

    def train_step(self) -> dict:
        import torch

        from posttrain import losses
        from posttrain.backend import HFPolicy
        from posttrain.rollout import RolloutConfig, rollout
        from posttrain.turnopd import probe_statistics
        from pretrain.tokenizer import special_ids

        cfg, pad = self.cfg, special_ids(self.tokenizer).pad
        rng = random.Random(f"{cfg.seed}/posttrain/{self.step}")
        chosen = rng.sample(range(len(self.tasks)), min(cfg.tasks_per_step, len(self.tasks)))
        tasks = [self.tasks[i] for i in chosen for _ in range(cfg.group_size)]
        groups = torch.tensor([g for g in range(len(chosen)) for _ in range(cfg.group_size)])
        cap, probe = self.depth_cap()

        t0 = time.perf_counter()
        self.model.eval()
        ro_cfg = RolloutConfig(temperature=cfg.temperature, max_turn_tokens=cfg.max_turn_tokens,
                               step_limit=cfg.step_limit, batch_size=cfg.rollout_batch,
                               max_total_tokens=min(4096, self.model.config.max_position_embeddings))
        with torch.no_grad():
            ro = rollout(HFPolicy(self.model, pad), self.tokenizer, tasks, ro_cfg,
                         seed=cfg.seed * 1_000_003 + self.step, max_turns=cap)
        batch = ro.batch(pad)
        t_rollout = time.perf_counter() - t0

        # shift: position t of the records describes token t given tokens < t
        ids, attn = batch["input_ids"], batch["attention_mask"]
        mask, turn, old = batch["agent_mask"][:, 1:], batch["turn_index"][:, 1:], batch["logprobs"][:, 1:]
        n_tokens, n_eps = int(mask.sum()), ids.shape[0]
        advantages = None
        t_score = 0.0
        if cfg.method == "grpo":
            t1 = time.perf_counter()
            outcome = losses.grpo_advantages(batch["reward"], groups, cfg.scale_by_std)
            process = None
            if cfg.process_weight:
                rewards = process_rewards(tasks, ro.episodes, self.solvers)
                process = losses.process_advantages(rewards, turn, mask, groups, cfg.scale_by_std)
            advantages = losses.combine_advantages(outcome, mask, turn, process, cfg.process_weight)
            t_score += time.perf_counter() - t1
        alpha = losses.alpha_at(self.step, cfg.steps)

        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        t_update, total_loss, ent_sum = 0.0, 0.0, 0.0
        per_token_kl = torch.zeros(mask.shape)
        for rows, length in micro_batches(attn.sum(1), cfg.micro_batch):
            mb_ids, mb_attn, targets = ids[rows, :length], attn[rows, :length], ids[rows, 1:length, None]
            sl = (rows, slice(0, length - 1))      # this micro-batch's cells of the [B, T-1] records
            teacher_logits = ref_logp = None
            t1 = time.perf_counter()
            with torch.no_grad():
                if self.teacher is not None:   # one forward pass per episode, never per turn
                    teacher_logits = self.teacher(input_ids=mb_ids, attention_mask=mb_attn).logits[:, :-1]
                if self.reference is not None:
                    ref = self.reference(input_ids=mb_ids, attention_mask=mb_attn).logits[:, :-1]
                    ref_logp = torch.log_softmax(ref.float(), -1).gather(-1, targets).squeeze(-1)
            t_score += time.perf_counter() - t1
            t1 = time.perf_counter()
            logits = self.model(input_ids=mb_ids, attention_mask=mb_attn).logits[:, :-1]
            m = mask[sl]
            if cfg.method == "grpo":
                logp = torch.log_softmax(logits.float(), -1).gather(-1, targets).squeeze(-1)
                loss = losses.policy_gradient_loss(logp, old[sl], advantages[sl], m, cfg.clip_eps, n_tokens)
                if ref_logp is not None:
                    kl_tok = losses.kl_to_reference_per_token(logp, ref_logp, m, cfg.kl_estimator)
                    loss = loss + cfg.kl_coef * losses.masked_token_mean(kl_tok, m, n_tokens)
                    per_token_kl[sl] = kl_tok.detach()
            else:
                if cfg.topk:
                    kl_tok = losses.reverse_kl_topk(logits, m, cfg.topk, teacher_logits=teacher_logits)
                else:
                    kl_tok = losses.reverse_kl_full(logits, teacher_logits, m)
                per_token_kl[sl] = kl_tok.detach()
                if cfg.method == "turnopd" and cfg.turn_blend:
                    weights = losses.turn_weights(turn[sl], m, alpha)
                    loss = losses.weighted_episode_mean(kl_tok, weights, n_eps)
                else:
                    loss = losses.masked_token_mean(kl_tok, m, n_tokens)
            loss.backward()
            total_loss += float(loss.detach())
            ent_sum += float(losses.token_entropy(logits.detach(), m).sum())
            t_update += time.perf_counter() - t1
        t1 = time.perf_counter()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip))
        self.optimizer.step()
        self.scheduler.step()
        t_update += time.perf_counter() - t1

        if probe:
            stats = probe_statistics(per_token_kl, turn, mask)
            depths = [e.n_turns for e in ro.episodes if e.success]
            self.controller.update(stats.per_turn_kl, stats.survivors, depths, stats.num_episodes)
        kl_sum = float((per_token_kl * mask).sum())
        self.train_wall += t_rollout + t_score + t_update
        self.step += 1
        return {"step": self.step, "method": cfg.method, "loss": total_loss,
                "kl": kl_sum / max(n_tokens, 1) if (self.teacher is not None or self.reference is not None) else None,
                "entropy": ent_sum / max(n_tokens, 1), "reward": float(batch["reward"].mean()),
                "success": float(batch["success"].float().mean()), "depth": float(batch["n_turns"].float().mean()),
                "cap": cap, "probe": probe, "alpha": alpha if cfg.method == "turnopd" else None,
                "agent_tokens": n_tokens, "episodes": n_eps, "grad_norm": grad_norm,
                "rollout_s": t_rollout, "scoring_s": t_score, "update_s": t_update, "train_wall_s": self.train_wall}

    def evaluate(self) -> dict:
        from posttrain.evaluate import evaluate
        summary = evaluate(self.model, self.tokenizer, self.data, k=self.cfg.eval_k,
                           max_tasks_per_cell=self.cfg.eval_tasks_per_cell, seed=self.cfg.seed,
                           step_limit=self.cfg.step_limit, max_turn_tokens=self.cfg.max_turn_tokens,
                           splits=self.cfg.eval_split_list, difficulties=self.cfg.eval_difficulty_list,
                           out_dir=self.out / "eval" / f"step_{self.step:06d}", progress=False)
        k = self.cfg.eval_k
        record = {"step": self.step, "eval": True, "train_wall_s": self.train_wall}
        for split, vals in summary["overall"].items():
            record[f"{split}_avg@{k}"], record[f"{split}_pass@{k}"] = vals[f"avg@{k}"], vals[f"pass@{k}"]
            record[f"{split}_stuck"] = vals["stuck"]      # % of episodes that failed looping on one action
        return record

    def fit(self) -> dict:
        from tqdm import tqdm
        cfg = self.cfg
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "train_config.json").write_text(json.dumps(
            {"kind": "posttrain", "config": dataclasses.asdict(cfg), "data": str(self.data),
             "student": str(self.student_dir), "teacher": str(self.teacher_dir) if self.teacher_dir else None},
            indent=1))
        if self.step == 0 and cfg.eval_every and cfg.eval_at_start:
            self.log(self.evaluate())
        bar = tqdm(total=cfg.steps, initial=self.step, desc=cfg.method, unit="step", file=sys.stderr)
        while self.step < cfg.steps:
            record = self.train_step()
            self.log(record)
            bar.update(1)
            bar.set_postfix(loss=f"{record['loss']:.3f}", success=f"{record['success']:.2f}")
            if cfg.eval_every and self.step % cfg.eval_every == 0 and self.step < cfg.steps:
                self.log(self.evaluate())
            if cfg.ckpt_every and self.step % cfg.ckpt_every == 0 and self.step < cfg.steps:
                self.save()
        bar.close()
        final_eval = self.evaluate()
        self.log(final_eval)
        ckpt = self.save()
        summary = {"checkpoint": str(ckpt), "final_eval": final_eval, "train_wall_s": self.train_wall}
        (self.out / "summary.json").write_text(json.dumps(summary, indent=1))
        return summary


def run(argv=None) -> dict:
    args = parse_args(argv)
    if args.resume:
        try:
            saved = json.loads((Path(args.out) / "train_config.json").read_text())
        except (OSError, ValueError) as e:
            raise UsageError(f"cannot resume {args.out}: {e}") from None
        cfg = make_config(saved["config"]["method"], saved["config"]["scale"],
                          **{k: v for k, v in saved["config"].items() if k not in ("method", "scale")})
        args.student, args.teacher = saved["student"], saved["teacher"]   # the run's own, always
        args.data = args.data or saved["data"]
    else:
        if not args.student:
            raise UsageError("--student is required")
        scale = resolve_scale(args.scale, log=lambda m: print(m, file=sys.stderr))
        cfg = make_config(args.method or "", scale, **parse_overrides(args.set))
        from pretrain.checkpoint import latest_checkpoint
        if latest_checkpoint(Path(args.out)) is not None:
            raise UsageError(f"{args.out} already holds checkpoints; pass --resume or choose another --out")
    trainer = Trainer(cfg, Path(args.student), Path(args.teacher) if args.teacher else None, Path(args.out),
                      Path(args.data) if args.data else None, args.resume)
    summary = trainer.fit()
    k = cfg.eval_k
    ev = summary["final_eval"]
    print(f"{cfg.method}: {cfg.steps} steps, train wall {summary['train_wall_s']:.0f}s; "
          f"ID avg@{k} {ev.get(f'ID_avg@{k}', float('nan')):.3f}, "
          f"OOD avg@{k} {ev.get(f'OOD_avg@{k}', float('nan')):.3f}; checkpoint {summary['checkpoint']}")
    return summary


def guarded(fn, argv) -> int:
    """Run an entry point: a user mistake is one ``error:`` line and exit status 2."""
    try:
        fn(argv)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def main(argv=None) -> int:
    return guarded(run, argv)


if __name__ == "__main__":
    sys.exit(main())
