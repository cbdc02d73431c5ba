"""Model code shared by agents, ``guigym serve`` and the trainer (the ``models`` layer: above
``envs``/``core``, below ``agents``, ``serve`` and ``train``; it imports neither of them).

* :mod:`.hf_policy` -- a Hugging Face Qwen2-VL / Qwen2.5-VL policy: ``from_pretrained`` loading,
  chat encoding, batched sampling with token ids + log-probs, teacher-forced log-probs,
  constrained decoding.
* :mod:`.logprobs` -- the masked log-softmax both sampling and the learner compute.
* :mod:`.constrain` -- candidate action strings and the token trie that restricts decoding to them.
* :mod:`.tiny` -- a tiny random Qwen2.5-VL + locally trained tokenizer for tests and CPU runs.

Importing this package does not import torch; its submodules do.
"""
