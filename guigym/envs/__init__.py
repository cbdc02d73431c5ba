"""Environments: the shared GUIEnv loop, platform controllers, the process EnvPool and the Ray backend
(RayEnvPool, RayVectorEnv: the ``ray`` extra)."""
__all__ = ["GUIEnv", "EnvPool", "RayEnvPool", "RayVectorEnv"]


def __getattr__(name: str):  # lazy: GUIEnv needs gymnasium, EnvPool multiprocessing machinery
    if name == "GUIEnv":
        from guigym.envs.base import GUIEnv

        return GUIEnv
    if name == "EnvPool":
        from guigym.envs.pool import EnvPool

        return EnvPool
    if name in ("RayEnvPool", "RayVectorEnv"):  # importable without ray; Ray is imported when one is built
        from guigym.envs import ray_backend

        return getattr(ray_backend, name)
    raise AttributeError(name)
