"""GRPO-family algorithm pieces: advantages, losses and the trainer's plug-in registries.

``advantages`` and ``losses`` are pure functions on torch tensors (shapes and source equations in
their docstrings); ``registry`` holds REWARD_SHAPERS, GROUP_BUILDERS, TASK_SAMPLERS, STEP_FILTERS,
EXTRA_LOSSES, ROLLOUT_PLANNERS, CONDITIONERS, TASK_SOURCES and TRAJECTORY_SOURCES with the
plain-GRPO behaviour registered as ``"default"``; ``estimators`` ADVANTAGE_ESTIMATORS and
``policy_losses`` POLICY_LOSSES. Plug-in API v2: ``context`` (what a plug-in sees), ``compose``
(chains of plug-ins of one kind), ``policy_handle`` (read-only policy queries). Paper plug-ins:
``dart`` (DART sec. 4 data curation), ``adagrpo`` (MobileRL sec. 2.2), ``bepa`` (BEPA LEVEL-2 cache),
``uimem`` (UI-Mem sec. 3: experience memory, stratified guidance, guidance-aware reward),
``webrl`` / ``webrl_orm`` / ``webrl_replay`` (WebRL sec. 2: critic + eq. 9 / GAE, self-evolving
curriculum, ORM, replay of earlier phases' successes).
"""
from __future__ import annotations

from guigym.train.algorithms.advantages import grpo_advantages, group_index, stepwise_grpo_advantages
from guigym.train.algorithms.losses import (
    LOSS_TYPES,
    TRL_LOSS_TYPES,
    aggregate_loss,
    kl_penalty,
    policy_loss,
    resolve_loss_type,
    truncated_is_weight,
)
from guigym.train.algorithms.context import Guidance, NewTask, Plugin, PluginContext, RolloutPlan, TaskOutcome
from guigym.train.algorithms.estimators import ADVANTAGE_ESTIMATORS
from guigym.train.algorithms.policy_losses import POLICY_LOSSES, PolicyLossInputs
from guigym.train.algorithms.registry import (
    CONDITIONERS,
    EXTRA_LOSSES,
    GROUP_BUILDERS,
    REWARD_SHAPERS,
    ROLLOUT_PLANNERS,
    STEP_FILTERS,
    TASK_SAMPLERS,
    TASK_SOURCES,
    TRAJECTORY_SOURCES,
    ExtraLoss,
    GroupBuilder,
    LossInputs,
    PluginRegistry,
    RewardShaper,
    StepFilter,
    TaskSampler,
)

# paper plug-ins register themselves in the registries above on import
from guigym.train.algorithms import adagrpo, bepa, bepa_plans, dart, uimem, webrl, webrl_orm, webrl_replay  # noqa: E402,F401

__all__ = [
    "ADVANTAGE_ESTIMATORS", "CONDITIONERS", "POLICY_LOSSES", "ROLLOUT_PLANNERS", "TASK_SOURCES",
    "TRAJECTORY_SOURCES", "Guidance", "NewTask", "Plugin", "PluginContext", "PolicyLossInputs", "RolloutPlan",
    "TaskOutcome",
    "EXTRA_LOSSES", "GROUP_BUILDERS", "LOSS_TYPES", "REWARD_SHAPERS", "STEP_FILTERS", "TASK_SAMPLERS",
    "TRL_LOSS_TYPES", "ExtraLoss", "GroupBuilder", "LossInputs", "PluginRegistry", "RewardShaper",
    "StepFilter", "TaskSampler", "aggregate_loss", "grpo_advantages", "group_index", "kl_penalty",
    "policy_loss", "resolve_loss_type", "stepwise_grpo_advantages", "truncated_is_weight",
]
