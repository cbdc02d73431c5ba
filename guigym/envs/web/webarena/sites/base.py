"""The bottom of the embedded sites: helpers over the site contract (see the package docstring)
that both the registry (``sites/__init__.py``) and :mod:`.standby` use; imports nothing above it.
"""
from __future__ import annotations

from typing import Any


def site_urls(site: Any) -> dict[str, str]:
    """Site key -> base URL of a started site: its ``urls`` mapping when it serves several keys
    (a shop and its admin dashboard), else ``{site.key: site.url}``."""
    urls = getattr(site, "urls", None)
    return dict(urls) if urls else {site.key: site.url}
