"""Independent, named random streams.

reasoning-gym derives per-item randomness as ``Random(seed + i)``, so seed s+1 replays seed s
shifted by one item.  Here every stream is seeded by a hash of the seed *and* the stream's name
(``("graph",)``, ``("surface", "fa")``, ``("row", "pretrain", 17)`` ...), so the streams for
structure, wording and task sampling are independent of each other and of neighbouring seeds,
and any row can be generated alone (which is what lets several processes write identical files).
"""
from __future__ import annotations

import hashlib
import random


def stream_seed(seed: int, *names: object) -> int:
    key = "/".join([str(int(seed))] + [str(n) for n in names]).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little")


def stream(seed: int, *names: object) -> random.Random:
    """A ``random.Random`` for the stream ``names`` under ``seed``."""
    return random.Random(stream_seed(seed, *names))


def unit_hash(seed: int, *names: object) -> float:
    """A deterministic number in [0, 1) for a key: used for held-out membership tests."""
    return stream_seed(seed, *names) / 2.0**64
