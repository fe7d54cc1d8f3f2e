"""Corpus reading and sequence packing for causal-LM pre-training.

Why packing: trajectories range from a few dozen to over a thousand tokens. Padding each one to
the longest in its batch wastes most of the compute on short-horizon data (see `benchmarks.train`).
Instead every document is tokenised, followed by EOS, and all are concatenated into one stream.

Blocks: block ``i`` is ``stream[i*T : i*T + T + 1]``: inputs are its first T tokens, targets the
last T. Consecutive blocks overlap by one token, so every stream token except the first is a
target exactly once and no position is padding.

Order: the sample at global position ``p`` is block ``perm_e[p % n]`` with ``e = p // n`` and
``perm_e`` a permutation seeded by (seed, e). Position ``p`` alone fixes the sample, so a resumed
run needs only its step number ("data position") to continue the same order, and any world size
sees the same global batch: step ``s`` consumes positions ``s*G .. s*G+G-1`` for global batch G.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from planning_gym.corpus import verify_corpus
from pretrain.config import UsageError
from pretrain.tokenizer import SpecialIds, agent_mask, encode_batch

CORPUS_FILES = ("pretrain.jsonl", "test_id.jsonl")


def check_corpus(data_dir: str | Path) -> Path:
    """Return the corpus folder, or raise UsageError when it or a needed file is missing, or its
    files do not match its ``manifest.json`` (`planning_gym.corpus.verify_corpus`)."""
    folder = Path(data_dir)
    if not folder.is_dir():
        raise UsageError(f"corpus folder {folder} does not exist (generate it with `make data`)")
    for name in CORPUS_FILES:
        if not (folder / name).is_file():
            raise UsageError(f"corpus folder {folder} has no {name}")
    verify_corpus(folder)       # a truncated or edited split is refused, not trained on
    return folder


def read_texts(path: str | Path) -> list[str]:
    """The ``text`` field of every row of a JSONL file; UsageError names the first bad line."""
    path = Path(path)
    texts = []
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise UsageError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
                if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                    raise UsageError(f"{path}:{lineno}: row has no string 'text' field")
                texts.append(row["text"])
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    if not texts:
        raise UsageError(f"{path} holds no rows")
    return texts


@dataclass
class PackedData:
    """A token stream with its agent mask, cut into overlapping blocks of ``block_size + 1``."""

    stream: np.ndarray            # token ids (uint16, or int32 past 65536 tokens), documents joined by EOS
    mask: np.ndarray              # uint8, 1 where the token is inside an agent turn
    block_size: int
    seed: int = 0
    _perm_cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_texts(cls, texts: list[str], tokenizer, special: SpecialIds, block_size: int, seed: int = 0,
                   chunk: int = 4096) -> "PackedData":
        """Tokenise in chunks of documents, so that a paper-scale corpus (10^8+ tokens) never exists
        as Python int lists all at once. Each chunk ends with EOS, which resets the agent-mask
        state, so masking chunk by chunk equals masking the whole stream."""
        dtype = np.uint16 if len(tokenizer) <= 1 << 16 else np.int32
        streams, masks = [], []
        for start in range(0, len(texts), chunk):
            docs = encode_batch(tokenizer, texts[start:start + chunk])
            part = np.concatenate([np.asarray(d + [special.eos], dtype=dtype) for d in docs])
            streams.append(part)
            masks.append(agent_mask(part, special))
        return cls(stream=np.concatenate(streams), mask=np.concatenate(masks), block_size=block_size, seed=seed)

    @property
    def num_blocks(self) -> int:
        return max(0, (len(self.stream) - 1) // self.block_size)

    def block_of(self, position: int) -> int:
        """The block index served at global sample position ``position``."""
        n = self.num_blocks
        epoch, offset = divmod(position, n)
        perm = self._perm_cache.get(epoch)
        if perm is None:
            perm = np.random.default_rng([self.seed, epoch]).permutation(n)
            self._perm_cache = {epoch: perm}  # positions only move forward; keep one epoch
        return int(perm[offset])

    def blocks(self, block_ids: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(inputs, targets, target agent-mask), each of shape (len(block_ids), block_size)."""
        T = self.block_size
        rows = np.stack([self.stream[b * T: b * T + T + 1] for b in block_ids])
        masks = np.stack([self.mask[b * T + 1: b * T + T + 1] for b in block_ids])
        return rows[:, :-1], rows[:, 1:], masks

    def step_positions(self, step: int, batch_size: int) -> list[int]:
        """Global sample positions of optimiser step ``step`` (batch_size = global batch)."""
        return list(range(step * batch_size, (step + 1) * batch_size))

    def shard(self, step: int, batch_size: int, micro_batch: int, micro_step: int, rank: int, world: int) -> list[int]:
        """Block ids that process ``rank`` handles in micro-step ``micro_step`` of ``step``."""
        positions = self.step_positions(step, batch_size)
        start = (micro_step * world + rank) * micro_batch
        return [self.block_of(p) for p in positions[start:start + micro_batch]]

    def target_count(self, step: int, batch_size: int, loss_on: str) -> int:
        """Number of loss targets in the whole global batch of ``step`` (all ranks)."""
        if loss_on == "all":
            return batch_size * self.block_size
        ids = [self.block_of(p) for p in self.step_positions(step, batch_size)]
        return int(sum(int(self.mask[b * self.block_size + 1: (b + 1) * self.block_size + 1].sum()) for b in ids))


def _cache_key(path: Path, tokenizer) -> str:
    stat = path.stat()
    h = hashlib.sha1(tokenizer.backend_tokenizer.to_str().encode())
    h.update(f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return h.hexdigest()


def load_split(data_dir: Path, name: str, tokenizer, special: SpecialIds, block_size: int, seed: int,
               cache_dir: Path | None = None, texts: list[str] | None = None) -> PackedData:
    """Read, tokenise and pack ``data_dir/name``; UsageError when it cannot fill one block.

    With ``cache_dir``, a packed copy written by `save_split_cache` for the same file (path, size,
    mtime) and the same tokenizer is used instead, so that the ranks of a distributed run and a
    resumed run do not tokenise a large corpus again. ``texts``: the file's texts, if already read.
    """
    path = Path(data_dir) / name
    data = None
    cached = Path(cache_dir) / f"{Path(name).stem}.safetensors" if cache_dir else None
    if cached is not None and cached.is_file():
        from safetensors import safe_open

        try:
            with safe_open(str(cached), framework="numpy") as f:
                if (f.metadata() or {}).get("key") == _cache_key(path, tokenizer):
                    data = PackedData(f.get_tensor("stream"), f.get_tensor("mask"), block_size, seed)
        except Exception:  # an unreadable cache is only a cache: rebuild it
            data = None
    if data is None:
        data = PackedData.from_texts(texts if texts is not None else read_texts(path), tokenizer, special,
                                     block_size, seed)
    if data.num_blocks == 0:
        raise UsageError(f"{path} has {len(data.stream)} tokens, fewer than one block of "
                         f"{block_size + 1}; lower --block-size or add data")
    return data


def save_split_cache(data: PackedData, data_dir: Path, name: str, tokenizer, cache_dir: Path) -> Path:
    """Write the packed split for `load_split` to find (atomically: tmp file + rename)."""
    from safetensors.numpy import save_file

    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / f"{Path(name).stem}.safetensors"
    key = _cache_key(Path(data_dir) / name, tokenizer)
    if target.is_file():
        from safetensors import safe_open

        try:
            with safe_open(str(target), framework="numpy") as f:
                if (f.metadata() or {}).get("key") == key:
                    return target
        except Exception:
            pass
    tmp = target.with_suffix(".tmp")
    save_file({"stream": data.stream, "mask": data.mask}, str(tmp), metadata={"key": key})
    os.replace(tmp, target)
    return target
