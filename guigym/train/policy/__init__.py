"""Moved to :mod:`guigym.models` (issue 33): the tiny test model, the HF policy and the masked
log-probs now sit below agents, serve and the trainer. ``guigym.train.policy.{hf_policy,tiny,
logprobs}`` remain as aliases of the new modules for one release.

Importing this package does not import torch; its submodules do.
"""
