"""Gymnasium registration of guigym's envs (entry points are imported lazily by gym.make)."""
from __future__ import annotations

import gymnasium as gym

ENVS = {
    "MiniWoB-v0": "guigym.envs.web.miniwob:MiniWoBEnv",
    "OSWorld-v0": "guigym.envs.desktop.env:OSWorldEnv",
    "WebArena-v0": "guigym.envs.web.webarena.env:WebArenaEnv",
    "AndroidLab-v0": "guigym.envs.android.env:AndroidLabEnv",
    "AndroidWorld-v0": "guigym.envs.android.env:AndroidWorldEnv",
    # stand-in with recorded reset/step latencies, for scale-out benchmarks (issue 16)
    "LatencyModel-v0": "guigym.envs.latency_model:LatencyModelEnv",
}

#: ids whose ``gym.make_vec`` needs per-env arguments (one adb serial per Android sub-env)
VECTOR_ENTRY_POINTS = {
    "AndroidLab-v0": "guigym.envs.android.env:make_androidlab_vec",
    "AndroidWorld-v0": "guigym.envs.android.env:make_androidworld_vec",
}

#: envs whose observations are not bit-identical across resets with the same seed: a real
#: desktop repaints with its own timing (text cursors, app start-up), so Gymnasium's checker
#: must not demand identical screenshots for the same seed; WebArena's element ids are
#: Chromium's AX node ids, which a fresh renderer numbers as it pleases; a phone repaints like a desktop
NONDETERMINISTIC = frozenset({"OSWorld-v0", "WebArena-v0", "AndroidLab-v0", "AndroidWorld-v0"})


def register_envs() -> None:
    for env_id, entry_point in ENVS.items():
        if env_id not in gym.registry:
            # no TimeLimit wrapper: GUIEnv truncates at the task's own step budget and scores it
            gym.register(id=env_id, entry_point=entry_point, max_episode_steps=None, disable_env_checker=True,
                         nondeterministic=env_id in NONDETERMINISTIC,
                         vector_entry_point=VECTOR_ENTRY_POINTS.get(env_id))
