"""Corpus configuration: one flat dataclass, one dial (``scale``) that derives the rest.

    cfg = CorpusConfig.from_scale("small", domains=("fa",), horizon_mix=(100, 100, 5))

``horizon_mix`` is the paper's Table-1 S/M/L ladder: the percentage of ``n_pretrain_per_bin``
drawn from each difficulty bin (100/0/0 is short-only; 100/5/0 adds 5 % mid data; ...).
``patterns`` is the Opt:Sub quality dial (``1opt``, ``4opt``, ``4opt4sub``, ``4opt8sub``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from .cli import UsageError
from .scales import CORPUS, SCALES, check_scale, cuda_present, resolve_scale  # noqa: F401  (re-exported)
from .graph import GraphParams
from .patterns import canonical_mixture, mixture_weights
from .tasks import BINS, GOAL_MIN_PLAN, bins_from
from .trajectory import COT_FORMATS
from .world import ERROR_DETAILS, PATHS, load_domain

SPLITS = ("pretrain", "posttrain", "test_id", "test_ood")


def scale_graph(scale: str) -> GraphParams:
    """The skill graph's generator settings at ``scale`` (`planning_gym.scales.CORPUS`)."""
    return GraphParams(**CORPUS[check_scale(scale)]["graph"])


MAX_POOL_PER_BIN = 10**6


class ConfigError(UsageError, ValueError):
    """A configuration that cannot be generated."""


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
    ood_fraction: float = 0.15           # share of (goal, intermediate) pairs reserved for test_ood
    errors: str = "terse"                # error detail: terse | full (lists the missing inputs)
    paths: str = "multi"                 # multi: A's and B's rules both exist; single: only the recipe's
    goal_min_plan: int = GOAL_MIN_PLAN   # goals need at least this many steps from an empty inventory
    defect_every: int = 6                # a suboptimal row has 1 + horizon // defect_every defects
    task_seed: int | None = None         # task stream (None: seed); a new one resamples tasks on the same graph
    row_seed: int | None = None          # pattern / defect stream of the rows (None: seed)
    horizon_bins: tuple[tuple[int, int], ...] = tuple(BINS.values())   # short, mid, long plan lengths
    graph: GraphParams = field(default_factory=GraphParams)

    def __post_init__(self):
        object.__setattr__(self, "patterns", canonical_mixture(self.patterns))   # one spelling, one folder

    @property
    def bins(self) -> dict[str, tuple[int, int]]:
        return bins_from(self.horizon_bins)

    @property
    def max_horizon(self) -> int:
        return self.horizon_bins[-1][1]

    @property
    def tasks_seed(self) -> int:
        return self.seed if self.task_seed is None else self.task_seed

    @property
    def rows_seed(self) -> int:
        return self.seed if self.row_seed is None else self.row_seed

    @classmethod
    def from_scale(cls, scale: str, **overrides) -> "CorpusConfig":
        sizes = CORPUS[check_scale(scale)]
        base = dict(scale=scale, graph=scale_graph(scale), n_pretrain_per_bin=sizes["pretrain"],
                    n_posttrain_per_bin=sizes["posttrain"], n_test_per_bin=sizes["test"])
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
        if self.errors not in ERROR_DETAILS:
            raise ConfigError(f"errors must be one of {', '.join(ERROR_DETAILS)}, got '{self.errors}'")
        if self.paths not in PATHS:
            raise ConfigError(f"paths must be one of {', '.join(PATHS)}, got '{self.paths}'")
        if self.paths == "multi" and 2 * self.graph.rules_per_item[1] > self.graph.n_verbs:
            raise ConfigError(f"a multi-path world gives each recipe its own verbs per item: rules_per_item max "
                              f"{self.graph.rules_per_item[1]} needs n_verbs >= {2 * self.graph.rules_per_item[1]} "
                              f"(have {self.graph.n_verbs}); use --paths single")
        bins = [tuple(b) for b in self.horizon_bins]
        if len(bins) != 3 or any(len(b) != 2 for b in bins) or bins[0][0] < 1 \
                or any(lo > hi for lo, hi in bins) or any(bins[k][1] + 1 != bins[k + 1][0] for k in range(2)):
            raise ConfigError(f"horizon_bins must be three adjacent ranges short, mid, long from 1 up, "
                              f"like 1-5,6-8,9-13; got {self.horizon_bins}")
        from .env import EVAL_STEP_LIMIT
        if bins[-1][1] > EVAL_STEP_LIMIT:
            raise ConfigError(f"the longest bin ends at {bins[-1][1]} steps, beyond the {EVAL_STEP_LIMIT}-step limit "
                              f"of evaluation: such tasks cannot be solved")
        if self.goal_min_plan < 1 or self.defect_every < 1:
            raise ConfigError("goal_min_plan and defect_every must be positive")
        if not self.recipe or not self.recipe.isalnum():
            raise ConfigError(f"recipe must be a short alphanumeric name like A or B, got '{self.recipe}'")
        if min(self.n_pretrain_per_bin, self.n_test_per_bin) < 1 or self.n_posttrain_per_bin < 0:
            raise ConfigError("pool sizes must be positive")
        if max(self.n_pretrain_per_bin, self.n_posttrain_per_bin, self.n_test_per_bin) > MAX_POOL_PER_BIN:
            raise ConfigError(f"pool sizes are at most {MAX_POOL_PER_BIN:,} rows per bin (the paper scale uses "
                              "far fewer); a larger corpus is a mistake more often than a wish")
        self.graph.check()

    @property
    def name(self) -> str:
        """Folder name: domains and scale, plus every setting that differs from the scale's
        default, so two different corpora never share a folder."""
        parts = ["+".join(load_domain(d)["key"] for d in self.domains), self.scale]
        default = CorpusConfig.from_scale(self.scale, domains=self.domains)
        short = {"recipe": "recipe{}", "cot_format": "{}", "patterns": "{}", "errors": "errors-{}",
                 "paths": "{}path", "goal_min_plan": "goal{}", "defect_every": "defect{}",
                 "ood_fraction": "ood{}", "n_pretrain_per_bin": "pre{}", "n_posttrain_per_bin": "post{}",
                 "n_test_per_bin": "test{}", "seed": "seed{}", "task_seed": "tasks{}", "row_seed": "rows{}",
                 "horizon_bins": "bins{}"}
        for f, fmt in short.items():
            value = getattr(self, f)
            if value != getattr(default, f):
                if f == "horizon_bins":
                    value = "-".join(f"{lo}to{hi}" for lo, hi in value)
                parts.append(fmt.format(value).replace(":", "x"))
            if f == "patterns" and tuple(self.horizon_mix) != tuple(default.horizon_mix):
                parts.append("mix" + "-".join(str(p) for p in self.horizon_mix))
        for f in dataclasses.fields(GraphParams):
            value = getattr(self.graph, f.name)
            if value != getattr(default.graph, f.name):
                text = "x".join(map(str, value)) if isinstance(value, tuple) else str(value)
                parts.append(f"{f.name.replace('_', '')}{text}")
        return "-".join(parts)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "CorpusConfig":
        """Inverse of `to_dict` (a corpus's config.json; extra keys such as ``generator`` ignored)."""
        def tup(v):
            return tuple(tup(x) for x in v) if isinstance(v, list) else v

        def tuples(d: dict, names) -> dict:
            return {k: tup(v) for k, v in d.items() if k in names}
        graph = GraphParams(**tuples(data["graph"], {f.name for f in dataclasses.fields(GraphParams)}))
        return cls(**{**tuples(data, {f.name for f in dataclasses.fields(cls)}), "graph": graph})
