"""Atomic, pickle-free training checkpoints that are also plain Hugging Face model folders.

Why this exists: a pre-training run must survive being killed at any instant and resume to the
same bits, and its checkpoints must load with `AutoModelForCausalLM.from_pretrained` without our
code. A checkpoint ``RUN/checkpoints/step_000300/`` holds

* ``config.json``, ``generation_config.json``, ``model.safetensors`` - the HF model;
* ``tokenizer.json``, ``tokenizer_config.json`` - the HF tokenizer;
* ``optimizer.safetensors`` (every optimiser state tensor, keyed ``state::<param name>::<key>``)
  and ``optimizer.json`` (param groups and non-tensor state);
* ``rng_rank<r>.safetensors`` - each process's torch CPU/CUDA generator states as tensors, the
  Python and NumPy generator states as JSON metadata;
* ``trainer_state.json`` - step, data position, scheduler state, world size; written last.

It is written under ``checkpoints/.tmp-step_.../`` and renamed into place, so a reader only ever
sees complete checkpoints; a half-written tmp folder from a killed run is ignored and cleaned up.
Every rank writes its own RNG file into the tmp folder, so on several nodes the run folder must be
on storage that all of them see (as it must be anyway for a resume).
No file is a pickle: optimiser state is gathered with `torch.distributed.checkpoint.state_dict`
(full state dict, parameter names as keys), which works the same for plain, DDP and FSDP models.
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from pretrain import rundir
from pretrain.config import UsageError
from pretrain.tokenizer import save_tokenizer

STEP_DIR = re.compile(r"^step_(\d{6,})$")
FORMAT = 1


def step_dir_name(step: int) -> str:
    return f"step_{step:06d}"


def checkpoint_dirs(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / rundir.CHECKPOINTS
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := STEP_DIR.match(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run, or None."""
    dirs = checkpoint_dirs(run_dir)
    return dirs[-1] if dirs else None


def final_checkpoint(run_dir: str | Path) -> Path | None:
    """The checkpoint a finished run's ``summary.json`` names (recorded relative to the run, and
    only its name is trusted, so a moved or copied run is self-contained), else the newest one."""
    run_dir = Path(run_dir)
    try:
        named = run_dir / rundir.CHECKPOINTS / Path(rundir.read_summary(run_dir)["checkpoint"]).name
        if named.is_dir():
            return named
    except (KeyError, TypeError):
        pass
    return latest_checkpoint(run_dir)


def relative_checkpoint(ckpt: Path, run_dir: str | Path) -> str:
    """How ``summary.json`` records a checkpoint: ``checkpoints/step_N``, relative to the run."""
    return f"{rundir.CHECKPOINTS}/{Path(ckpt).name}"


# ---------------------------------------------------------------- optimiser state <-> safetensors
def flatten_optimizer_state(osd: dict) -> tuple[dict, dict]:
    """Split a (name-keyed) optimiser state dict into tensors and a JSON-able remainder."""
    import torch

    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for name, entry in osd["state"].items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state::{name}::{key}"] = value.detach().to("cpu").contiguous()
            else:
                scalars.setdefault(str(name), {})[key] = value
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()} for g in osd["param_groups"]]
    return tensors, {"param_groups": groups, "scalars": scalars}


def unflatten_optimizer_state(tensors: dict, meta: dict) -> dict:
    """Inverse of `flatten_optimizer_state`."""
    state: dict[str, dict[str, Any]] = {}
    for flat, value in tensors.items():
        _, name, key = flat.split("::")
        state.setdefault(name, {})[key] = value
    for name, entry in meta["scalars"].items():
        state.setdefault(name, {}).update(entry)
    groups = [{k: (tuple(v) if k == "betas" else v) for k, v in g.items()} for g in meta["param_groups"]]
    return {"state": state, "param_groups": groups}


# ---------------------------------------------------------------- RNG state <-> safetensors
def rng_state() -> tuple[dict, dict[str, str]]:
    """Every generator's state: torch ones as tensors, Python/NumPy ones as JSON metadata."""
    import torch

    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch_cuda_{i}"] = s
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    meta = {
        "python": json.dumps([version, list(internal), gauss]),
        "numpy": json.dumps([kind, keys.tolist(), int(pos), int(has_gauss), float(cached)]),
    }
    return tensors, meta


def set_rng_state(tensors: dict, meta: dict[str, str]) -> None:
    import torch

    torch.set_rng_state(tensors["torch_cpu"])
    if torch.cuda.is_available():
        states = [tensors[k] for k in sorted(tensors, key=lambda k: int(k.rsplit("_", 1)[1])) if k.startswith("torch_cuda_")]
        if states:
            torch.cuda.set_rng_state_all(states)
    version, internal, gauss = json.loads(meta["python"])
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = json.loads(meta["numpy"])
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))


# ---------------------------------------------------------------- writing
def _fsync_tree(folder: Path) -> None:
    for p in sorted(folder.iterdir()):
        if p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def set_generation_stops(model, tokenizer) -> None:
    """Plain ``model.generate`` stops where an agent turn ends: at ``<|env|>`` (the environment's
    turn) or ``<|eos|>``, and pads with ``<|pad|>`` (written to ``generation_config.json``)."""
    from pretrain.tokenizer import special_ids

    special = special_ids(tokenizer)
    model.generation_config.eos_token_id = [special.env, special.eos]
    model.generation_config.pad_token_id = special.pad


def save_checkpoint(run_dir: Path, step: int, *, model, optimizer, scheduler, tokenizer,
                    trainer_state: dict, rank: int = 0, world: int = 1, barrier=lambda: None) -> Path:
    """Write checkpoint ``step`` atomically; collective when distributed (all ranks call it)."""
    from safetensors.torch import save_file
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         get_optimizer_state_dict)

    root = Path(run_dir) / rundir.CHECKPOINTS
    final = root / step_dir_name(step)
    tmp = root / f".tmp-{step_dir_name(step)}"
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        for stale in root.glob(".tmp-*"):  # leftovers of a run killed while saving
            shutil.rmtree(stale, ignore_errors=True)
        tmp.mkdir()
    barrier()
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_sd = get_model_state_dict(model, options=options)
    optim_sd = get_optimizer_state_dict(model, optimizer, options=options)
    tensors, meta = rng_state()
    save_file(tensors, str(tmp / f"rng_rank{rank}.safetensors"), metadata=meta)
    barrier()
    if rank == 0:
        base = getattr(model, "module", model)
        base = getattr(base, "_orig_mod", base)  # torch.compile wrapper
        if base.config.tie_word_embeddings:  # gathered (FSDP) state dicts hold the tied copy twice
            model_sd.pop("lm_head.weight", None)
        set_generation_stops(base, tokenizer)
        base.save_pretrained(str(tmp), state_dict=model_sd)
        save_tokenizer(tokenizer, tmp)
        opt_tensors, opt_meta = flatten_optimizer_state(optim_sd)
        save_file(opt_tensors, str(tmp / "optimizer.safetensors"))
        (tmp / "optimizer.json").write_text(json.dumps(opt_meta))
        state = {"format": FORMAT, "step": step, "world_size": world,
                 "scheduler": scheduler.state_dict(), **trainer_state}
        (tmp / "trainer_state.json").write_text(json.dumps(state, indent=1))
        _fsync_tree(tmp)
        if final.exists():  # only after a resume from an older checkpoint re-reaches this step
            old = root / f".old-{final.name}"
            shutil.rmtree(old, ignore_errors=True)
            os.rename(final, old)
            shutil.rmtree(old, ignore_errors=True)
        os.rename(tmp, final)
    barrier()
    return final


def prune_checkpoints(run_dir: Path, keep: int) -> None:
    for old in checkpoint_dirs(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


# ---------------------------------------------------------------- reading
def read_checkpoint(ckpt: Path, rank: int = 0) -> dict:
    """Load and validate everything but the model weights; UsageError when anything is corrupt."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    try:
        state = json.loads((ckpt / "trainer_state.json").read_text())
        if state.get("format") != FORMAT or not isinstance(state.get("step"), int):
            raise ValueError("trainer_state.json has no valid format/step")
        opt_meta = json.loads((ckpt / "optimizer.json").read_text())
        opt_tensors = load_file(str(ckpt / "optimizer.safetensors"))
        optim = unflatten_optimizer_state(opt_tensors, opt_meta)
        rng = None
        rng_path = ckpt / f"rng_rank{rank}.safetensors"
        if rng_path.is_file():
            with safe_open(str(rng_path), framework="pt") as f:
                rng = ({k: f.get_tensor(k) for k in f.keys()}, f.metadata())
        with safe_open(str(ckpt / "model.safetensors"), framework="pt") as f:
            if not list(f.keys()):
                raise ValueError("model.safetensors holds no tensors")
        json.loads((ckpt / "config.json").read_text())
    except UsageError:
        raise
    except Exception as exc:  # any unreadable piece makes the whole checkpoint unusable
        raise UsageError(f"corrupt checkpoint {ckpt}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    return {"state": state, "optimizer": optim, "rng": rng}


def load_model(ckpt: Path):
    """The checkpoint's model, fp32, SDPA attention; UsageError when the weights do not load."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            str(ckpt), dtype=torch.float32, attn_implementation="sdpa", output_loading_info=True)
    except Exception as exc:
        raise UsageError(f"corrupt checkpoint {ckpt}: cannot load model ({type(exc).__name__})") from None
    bad = {k: sorted(v) for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if bad:  # a resume from partially random weights would silently not be a resume
        raise UsageError(f"corrupt checkpoint {ckpt}: model weights do not match its config ({bad})")
    return model


def split_run_path(run_dir: Path) -> tuple[Path, Path | None]:
    """(run folder, checkpoint or None): ``RUN/checkpoints/step_N`` names a checkpoint of ``RUN``."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UsageError(f"run folder {run_dir} does not exist")
    if (run_dir / "trainer_state.json").is_file():
        return run_dir.parent.parent, run_dir
    return run_dir, None


def run_corpus(run_dir: Path) -> Path | None:
    """The corpus folder a run (or one of its checkpoints) was trained on, refused if it changed since."""
    run_dir = split_run_path(run_dir)[0]
    saved = rundir.read_train_config(run_dir)
    try:
        data, digest = (Path(saved["data"]), saved.get("corpus_digest")) if saved else (None, None)
    except (KeyError, TypeError) as exc:
        raise UsageError(f"corrupt run config {run_dir / rundir.TRAIN_CONFIG}: {exc}") from None
    if digest and data.is_dir():     # the run's own corpus must be the one it was trained on
        from planning_gym.corpus import corpus_digests
        if digest not in corpus_digests(data):
            raise UsageError(f"corpus {data} changed since {run_dir} was trained on it (regenerated with "
                             "other settings?); pass the intended corpus explicitly or rebuild the run")
    return data


def load_model_and_tokenizer(run_dir: Path | None = None, model_dir: Path | None = None):
    """(model, tokenizer, corpus folder or None) of a run folder (its final checkpoint), of one of its
    checkpoints (``RUN/checkpoints/step_N`` passed as ``run_dir``), or of a bare checkpoint folder."""
    from pretrain.tokenizer import load_tokenizer

    data = None
    if run_dir is not None:
        data = run_corpus(run_dir)
        run_dir, checkpoint = split_run_path(run_dir)
        model_dir = checkpoint or model_dir
        ckpt = Path(model_dir) if model_dir is not None else final_checkpoint(run_dir)
        if ckpt is None:
            raise UsageError(f"run folder {run_dir} has no checkpoint (train it with `python -m pretrain.train`)")
        tok_dirs = [ckpt, run_dir / rundir.TOKENIZER]
    else:
        ckpt = Path(model_dir)
        if not ckpt.is_dir():
            raise UsageError(f"model folder {ckpt} does not exist")
        tok_dirs = [ckpt]
    model = load_model(ckpt)
    for folder in tok_dirs:
        if (folder / "tokenizer.json").is_file():
            try:
                return model, load_tokenizer(folder), data
            except Exception as exc:
                raise UsageError(f"cannot load the tokenizer in {folder}: {exc}") from None
    raise UsageError(f"no tokenizer.json in {' or '.join(str(d) for d in tok_dirs)}")
