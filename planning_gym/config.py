"""Corpus configuration: one flat dataclass, one dial (``scale``) that derives the rest.

    cfg = CorpusConfig.from_scale("small", domains=("fa",), horizon_mix=(100, 100, 5))

``horizon_mix`` is the paper's Table-1 S/M/L ladder: the percentage of ``n_pretrain_per_bin``
drawn from each difficulty bin (100/0/0 is short-only; 100/5/0 adds 5 % mid data; ...).
``patterns`` is the Opt:Sub quality dial (``1opt``, ``4opt``, ``4opt4sub``, ``4opt8sub``).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
from dataclasses import dataclass, field

from .graph import GraphParams
from .patterns import mixture_weights
from .trajectory import COT_FORMATS
from .world import load_domain

SCALES = ("tiny", "small", "paper")
SPLITS = ("pretrain", "posttrain", "test_id", "test_ood")

_GRAPHS = {
    "tiny": GraphParams(n_base=6, items_per_level=(5, 4, 3)),
    "small": GraphParams(n_base=8, items_per_level=(8, 6, 5)),
    # ~330 crafted items with 1-2 alternatives each: about 500 rules per domain, as in the paper.
    "paper": GraphParams(n_base=40, items_per_level=(100, 90, 80, 60)),
}
_SIZES = {  # pretrain rows per bin at 100 %, posttrain rows per bin, test tasks per bin
    "tiny": (200, 32, 16),
    "small": (3000, 160, 160),
    "paper": (40000, 2000, 160),
}


def scale_graph(scale: str) -> GraphParams:
    if scale not in SCALES:
        raise ConfigError(f"unknown scale '{scale}' (choose from {', '.join(SCALES)})")
    return _GRAPHS[scale]


class ConfigError(ValueError):
    """A configuration that cannot be generated."""


def cuda_present() -> bool:
    """Whether a CUDA device is visible, without making the gym depend on torch."""
    if importlib.util.find_spec("torch") is not None:
        import torch
        return bool(torch.cuda.is_available())
    return os.path.exists("/proc/driver/nvidia/version")


def resolve_scale(scale: str | None, announce=print) -> str:
    """Explicit scale, else ``paper`` with CUDA and ``small`` without; says which it chose."""
    if scale:
        if scale not in SCALES:
            raise ConfigError(f"unknown scale '{scale}' (choose from {', '.join(SCALES)})")
        return scale
    chosen = "paper" if cuda_present() else "small"
    announce(f"SCALE not given: using '{chosen}' ({'a CUDA device is present' if chosen == 'paper' else 'no CUDA device'})")
    return chosen


@dataclass(frozen=True)
class CorpusConfig:
    scale: str = "tiny"
    domains: tuple[str, ...] = ("fa",)
    recipe: str = "A"
    cot_format: str = "world_model"
    patterns: str = "4opt"
    horizon_mix: tuple[int, int, int] = (100, 100, 100)
    seed: int = 0
    n_pretrain_per_bin: int = 0          # 0: derived from scale
    n_posttrain_per_bin: int = 0
    n_test_per_bin: int = 0
    ood_fraction: float = 0.15
    graph: GraphParams = field(default_factory=GraphParams)

    @classmethod
    def from_scale(cls, scale: str, **overrides) -> "CorpusConfig":
        if scale not in SCALES:
            raise ConfigError(f"unknown scale '{scale}' (choose from {', '.join(SCALES)})")
        n_pre, n_post, n_test = _SIZES[scale]
        base = dict(scale=scale, graph=_GRAPHS[scale], n_pretrain_per_bin=n_pre,
                    n_posttrain_per_bin=n_post, n_test_per_bin=n_test)
        base.update({k: v for k, v in overrides.items() if v is not None})
        cfg = cls(**base)
        cfg.check()
        return cfg

    def check(self) -> None:
        for d in self.domains:
            load_domain(d)                      # raises DomainError with the known domains
        if len(set(self.domains)) != len(self.domains) or not self.domains:
            raise ConfigError("domains must be a non-empty list without repeats")
        if self.cot_format not in COT_FORMATS:
            raise ConfigError(f"unknown cot_format '{self.cot_format}' (choose from {', '.join(COT_FORMATS)})")
        try:
            mixture_weights(self.patterns)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if len(self.horizon_mix) != 3 or any(p < 0 for p in self.horizon_mix) or sum(self.horizon_mix) == 0:
            raise ConfigError(f"horizon_mix must be three non-negative percentages S/M/L, got {self.horizon_mix}")
        if not 0 < self.ood_fraction < 1:
            raise ConfigError(f"ood_fraction must be in (0, 1), got {self.ood_fraction}")
        if not self.recipe or not self.recipe.isalnum():
            raise ConfigError(f"recipe must be a short alphanumeric name like A or B, got '{self.recipe}'")
        if min(self.n_pretrain_per_bin, self.n_test_per_bin) < 1 or self.n_posttrain_per_bin < 0:
            raise ConfigError("pool sizes must be positive")
        self.graph.check()

    @property
    def name(self) -> str:
        """Folder name: domains and scale, plus every setting that differs from the default."""
        parts = ["+".join(self.domains), self.scale]
        if self.recipe != "A":
            parts.append(f"recipe{self.recipe}")
        if self.cot_format != "world_model":
            parts.append(self.cot_format)
        if self.patterns != "4opt":
            parts.append(self.patterns.replace(":", "x"))
        if tuple(self.horizon_mix) != (100, 100, 100):
            parts.append("mix" + "-".join(str(p) for p in self.horizon_mix))
        if self.seed != 0:
            parts.append(f"seed{self.seed}")
        return "-".join(parts)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "CorpusConfig":
        """Inverse of `to_dict` (a corpus's config.json; extra keys such as ``generator`` ignored)."""
        def tuples(d: dict, names) -> dict:
            return {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in names}
        graph = GraphParams(**tuples(data["graph"], {f.name for f in dataclasses.fields(GraphParams)}))
        return cls(**{**tuples(data, {f.name for f in dataclasses.fields(cls)}), "graph": graph})


if __name__ == "__main__":   # `python -m planning_gym.config [SCALE]` prints the resolved scale
    import sys
    try:
        print(resolve_scale(sys.argv[1] if len(sys.argv) > 1 else None,
                            announce=lambda m: print(m, file=sys.stderr)))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
