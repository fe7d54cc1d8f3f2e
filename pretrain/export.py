"""Export a run's model as a Hugging Face folder fit to publish: weights, config, generation
config, tokenizer (with its chat template) and a model card, nothing else.

Why this exists: a checkpoint folder also holds optimizer, RNG and trainer state (needed to
resume, not to use the model); uploading it as is publishes them, and vLLM refuses a folder
with extra ``*.safetensors``. The exported folder loads with plain `transformers`:

    python -m pretrain.export --run runs/pretrain-fa-small --out exports/fa-small [--force]

    tok = AutoTokenizer.from_pretrained(out); model = AutoModelForCausalLM.from_pretrained(out)
    prompt = tok.apply_chat_template([{"role": "environment", "content": obs}], add_generation_prompt=True)
    model.generate(...)        # stops at <|env|>: the end of the agent's turn

The card (``README.md``) names the corpus and its generator config, the model shape, the
training config and the latest evaluation of the run (avg@K / pass@K per split x difficulty).
Works for pre-training and post-training runs. The folder is written to a temporary sibling and
renamed into place; an existing non-empty ``--out`` is refused unless ``--force``.
Exit status 2 with one ``error:`` line on bad input.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from planning_gym.cli import Parser
from pretrain import rundir
from pretrain.config import UsageError

FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
         "chat_template.jinja", "README.md")


def latest_evaluation(run: Path) -> Path | None:
    """The run's most recent evaluation folder (one holding ``summary.json`` and ``results.md``)."""
    found = [p.parent for p in run.glob("eval*/**/summary.json") if (p.parent / "results.md").is_file()]
    return max(found, key=lambda p: (p.stat().st_mtime, str(p)), default=None)


def model_card(run: Path, model, params: int) -> str:
    config = rundir.read_train_config(run) or {}
    data = config.get("data") or config.get("config", {}).get("data")
    corpus = {}
    if data and (Path(data) / "config.json").is_file():
        corpus = json.loads((Path(data) / "config.json").read_text())
    shape = model.config
    lines = ["---", "library_name: transformers", "pipeline_tag: text-generation",
             "tags: [planning-gym, planning, synthetic]", "license: mit", "---", "",
             f"# planning-gym model: {run.name}", "",
             "A Qwen2-architecture language model trained from scratch by "
             "[planning-gym](https://github.com/) on a synthetic multi-turn planning corpus. It plays the "
             "gym's text protocol: `<|env|>observation<|agent|>turn<|env|>...`; the chat template writes "
             "exactly that (roles `environment` and `agent`), and generation stops at `<|env|>`.", "",
             "## Model", "",
             f"- parameters: {params:,}",
             f"- hidden {shape.hidden_size}, layers {shape.num_hidden_layers}, heads {shape.num_attention_heads} "
             f"(kv {shape.num_key_value_heads}), vocabulary {shape.vocab_size}", ""]
    if corpus:
        lines += ["## Data", "", f"Corpus `{data}`; generator config:", "", "```json",
                  json.dumps(corpus, indent=1, sort_keys=True), "```", ""]
    if config:
        lines += ["## Training config", "", "```json", json.dumps(config, indent=1, sort_keys=True, default=str),
                  "```", ""]
    evaluation = latest_evaluation(run)
    if evaluation is not None:
        lines += ["## Evaluation", "", f"From `{evaluation.relative_to(run)}`:", "",
                  (evaluation / "results.md").read_text().strip(), ""]
    else:
        lines += ["## Evaluation", "", "Not evaluated yet (`make eval RUN=...`).", ""]
    return "\n".join(lines)


def export(run: Path, out: Path, force: bool = False) -> Path:
    from pretrain.checkpoint import load_model_and_tokenizer, set_generation_stops
    from pretrain.model import count_params
    from pretrain.tokenizer import save_tokenizer

    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise UsageError(f"{out} exists and is not empty; pass --force to replace it")
    model, tokenizer, _ = load_model_and_tokenizer(run)
    tmp = out.with_name(f".tmp-{out.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        set_generation_stops(model, tokenizer)
        model.save_pretrained(str(tmp), safe_serialization=True)
        save_tokenizer(tokenizer, tmp)
        (tmp / "README.md").write_text(model_card(run, model, count_params(model)))
        extra = sorted(p.name for p in tmp.iterdir() if p.name not in FILES)
        if extra:
            raise RuntimeError(f"unexpected files in the export: {extra}")
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        tmp.rename(out)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UsageError(f"cannot write {out}: {exc}") from None
    return out


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m pretrain.export", description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, help="a pre-training or post-training run folder")
    p.add_argument("--out", required=True, help="the folder to write")
    p.add_argument("--force", action="store_true", help="replace a non-empty --out")
    try:
        args = p.parse_args(argv)
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        out = export(Path(args.run), Path(args.out), args.force)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out}: {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
