"""OSWorld's GIMP getter (``desktop_env/evaluators/getters/gimp.py``): a file of
``~/.config/GIMP/2.10`` copied into ``cache_dir``.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from guigym.core.errors import TaskSpecError
from guigym.envs.desktop.evaluators.base import GETTERS, GetterContext, _need
from guigym.envs.desktop.evaluators.getters.general import _home_file_to_cache

@GETTERS.register("gimp_config_file")
def get_gimp_config_file(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[str]:
    """``~/.config/GIMP/2.10/<file_name>`` copied to ``cache_dir/dest`` (None when missing)."""
    name = _need(spec, "file_name")
    if "/" in name or name in ("", ".", ".."):
        raise TaskSpecError(f"getter 'gimp_config_file': file_name must be a plain file name, got {name!r}")
    return _home_file_to_cache(ctx, f".config/GIMP/2.10/{name}", _need(spec, "dest"))
