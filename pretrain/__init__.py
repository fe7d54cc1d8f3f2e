"""From-scratch pre-training of Qwen2 models on planning-gym corpora (SPEC §4).

Why a package of its own: it turns a corpus folder into a tokenizer and a Hugging Face checkpoint
that the post-training code loads with plain `transformers`. Read the modules in this order:

1. `pretrain.config`      one flat `PretrainConfig`, the tiny/small/paper presets, `resolve_scale`
2. `pretrain.tokenizer`   byte-level BPE per corpus, role-marker special tokens, `agent_mask`
3. `pretrain.data`        corpus reading and sequence packing with a resumable sample order
4. `pretrain.model`       Qwen2ForCausalLM presets, parameter and FLOP counts (``python -m pretrain.model``)
5. `pretrain.checkpoint`  atomic, pickle-free checkpoints that are also HF model folders
6. `pretrain.train`       the trainer (``python -m pretrain.train``, also under ``torchrun``)
7. `pretrain.synthetic`   a small synthetic corpus in the gym's text protocol, for tests and benches
"""
