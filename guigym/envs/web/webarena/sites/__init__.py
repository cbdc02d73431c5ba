"""Embedded sites: real self-hosted applications that WebArena-v0 starts when it is given no URLs.

Each site is a class with one contract (see ``fossil.FossilSite``)::

    site = SiteClass(workdir: Path)   # its own directory; ``site.key`` is the WebArena site key
    site.start() -> str               # build the seed if missing, restore it, serve on 127.0.0.1
    site.url                          # its base URL once started
    site.urls                         # optional: key -> URL when it serves several site keys
    site.logins                       # optional: key -> login.LoginRecipe for its own login page
    site.resets_sessions              # optional: True when reset() logs everyone out (sessions
                                      #   live in the restored database): the env logs in again
    site.reset() -> float             # restore the seed state between requests; seconds taken
    site.read_only                    # optional: True when no request can change what it serves
                                      #   (reset() restores nothing), so the env may open the
                                      #   next episode's start page ahead, in the agent's turn
    site.close()                      # stop the server (idempotent)

:data:`EMBEDDED` names each site, the class, the suite of WebArena-format tasks written for it
(``suite/<name>/tasks.json`` with ``reference_solutions.json`` beside it) and the programs it needs.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from guigym.core.errors import ConfigError
from guigym.envs.web.webarena.sites.base import site_urls  # noqa: F401  (re-exported)

SUITE_DIR = Path(__file__).resolve().parent.parent / "suite"


@dataclass(frozen=True)
class EmbeddedSite:
    """Where an embedded site's code, tasks and requirements are.

    Attributes:
        name: what ``--embedded`` and ``embedded=`` call it.
        target: ``"module:Class"`` of the site class (imported only when the site is used).
        programs: executables it needs on PATH (the install hint names the Debian package).
        modules: Python modules it needs (the ``web-sites`` extra).
        hint: how to install what is missing.
        data: a callable listing missing data files (e.g. the map's OpenStreetMap extract).
        cached_build: modules whose source defines the seed; when given, the built site directory
            is kept in :func:`build_cache_dir` under a hash of their source and copied for every new
            site, so a slow build (migrations, seeding) happens once per code version, not per env.
    """

    name: str
    target: str
    programs: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    hint: str = "scripts/install.sh"
    data: Optional[Callable[[], list[str]]] = None
    cached_build: tuple[str, ...] = ()

    @property
    def suite(self) -> Path:
        return SUITE_DIR / self.name / "tasks.json"

    def missing(self) -> list[str]:
        """What this machine lacks to run the site (empty when it can run)."""
        out = [p for p in self.programs if shutil.which(p) is None]
        for mod in self.modules:  # found, not imported: some (Django apps) need settings to import
            if importlib.util.find_spec(mod) is None:
                out.append(f"python module {mod}")
        if self.data is not None:
            out += self.data()
        return out

    def load(self) -> type:
        module, _, cls = self.target.partition(":")
        return getattr(importlib.import_module(module), cls)


EMBEDDED: dict[str, EmbeddedSite] = {
    "fossil": EmbeddedSite("fossil", "guigym.envs.web.webarena.sites.fossil:FossilSite", programs=("fossil",),
                           hint="Debian package 'fossil' (scripts/install.sh)"),
    "kiwix": EmbeddedSite("kiwix", "guigym.envs.web.webarena.sites.kiwix:KiwixSite", programs=("kiwix-serve",),
                          modules=("libzim",), hint="Debian package 'kiwix-tools' and pip install guigym[web-sites] "
                                                    "(scripts/install.sh)"),
    "spirit": EmbeddedSite("spirit", "guigym.envs.web.webarena.sites.spirit:SpiritSite",
                           modules=("spirit", "gunicorn", "haystack", "whoosh"),
                           cached_build=("guigym.envs.web.webarena.sites.spirit",
                                         "guigym.envs.web.webarena.sites.spirit_seed"),
                           hint="pip install guigym[web-sites] (scripts/install.sh)"),
    "oscar": EmbeddedSite("oscar", "guigym.envs.web.webarena.sites.oscar_shop:OscarShopSite",
                          modules=("oscar", "sorl", "gunicorn", "haystack", "whoosh"),
                          cached_build=("guigym.envs.web.webarena.sites.oscar_shop",
                                        "guigym.envs.web.webarena.sites.oscar_seed"),
                          hint="pip install guigym[web-sites] (scripts/install.sh)"),
    "map": EmbeddedSite("map", "guigym.envs.web.webarena.sites.osm_map:MapSite", modules=("osmium", "networkx"),
                        data=lambda: _osm_missing(),
                        hint="pip install guigym[web-sites], then python -m guigym.envs.web.webarena.sites.osm_data "
                             "(scripts/install.sh does both)"),
}


def _osm_missing() -> list[str]:
    from guigym.envs.web.webarena.sites.osm_data import cache_dir, pbf_path

    return [] if pbf_path(required=False) else [f"OpenStreetMap data in {cache_dir()}"]


def spec(name: str) -> EmbeddedSite:
    if name not in EMBEDDED:
        raise ConfigError(f"embedded: no embedded site named {name!r}; known: {sorted(EMBEDDED)}")
    return EMBEDDED[name]


def available(names: Optional[Iterable[str]] = None) -> list[str]:
    """The embedded sites (of ``names``, default all) this machine can run."""
    return [n for n in (names if names is not None else EMBEDDED) if not spec(n).missing()]


def select(given: Iterable[str]) -> tuple[list[str], dict[str, str]]:
    """``--embedded`` values -> (the named sites this machine can run, {site: why it cannot}).

    Each value is a site name, a comma-separated list of names, or ``all`` (every site of
    :data:`EMBEDDED`, not only those that can run: "all" means all, and the ones that cannot are
    returned with their reason, for the caller to report as skipped). ConfigError naming an
    unknown site."""
    names: list[str] = []
    for value in given:
        for name in (n.strip() for n in str(value).split(",")):
            if name:
                names += list(EMBEDDED) if name == "all" else [spec(name).name]
    runnable: list[str] = []
    skipped: dict[str, str] = {}
    for name in dict.fromkeys(names):
        lacking = EMBEDDED[name].missing()
        if lacking:
            skipped[name] = f"needs {', '.join(lacking)} ({EMBEDDED[name].hint})"
        else:
            runnable.append(name)
    return runnable, skipped


def suite_task_count(name: str) -> int:
    """How many tasks the suite written for embedded site ``name`` holds."""
    from guigym.envs.web.webarena.tasks import load_configs

    return len(load_configs(spec(name).suite))


def build_cache_dir() -> Path:
    """``$GUIGYM_DATA_DIR/webarena-sites`` or ``~/.cache/guigym/webarena-sites``."""
    base = os.environ.get("GUIGYM_DATA_DIR") or str(Path.home() / ".cache" / "guigym")
    return Path(base) / "webarena-sites"


def _source_hash(modules: Sequence[str]) -> str:
    h = hashlib.sha256()
    for mod in modules:
        found = importlib.util.find_spec(mod)
        if found is None or found.origin is None:
            raise ConfigError(f"cached_build: no module {mod!r}")
        h.update(Path(found.origin).read_bytes())
    return h.hexdigest()[:16]


def prepare_workdir(s: EmbeddedSite, workdir: Path) -> None:
    """Fill ``workdir`` with the site's built seed from the cache, building it there first (into a
    scratch directory renamed into place, so concurrent envs never see half a build)."""
    if not s.cached_build:
        return
    root = build_cache_dir()
    built = root / f"{s.name}-{_source_hash(s.cached_build)}"
    if not built.exists():
        root.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{s.name}-", dir=root))
        try:
            s.load()(scratch / "site").build()
            try:
                os.rename(scratch / "site", built)
            except OSError:  # another process built it first: keep theirs
                if not built.exists():
                    raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(built, workdir, symlinks=True)


def start_sites(names: Sequence[str], workdir: Path, standby: int = 0) -> list[Any]:
    """Start the named sites, each in ``workdir/<name>``; all or none (a failure closes the rest).

    ``standby``: how many standby instances a site that is not ``read_only`` runs besides its
    live one, behind its URLs (:class:`~guigym.envs.web.webarena.sites.standby.StandbySite`, in
    ``<name>/a``, ``<name>/b``, ...), so the env can restore them and open the next episodes'
    start pages on them during an episode; 0: one instance."""
    from guigym.envs.web.webarena.sites.standby import StandbySite

    started: list[Any] = []
    try:
        for name in names:
            s = spec(name)
            lacking = s.missing()
            if lacking:
                raise ConfigError(f"embedded site {name!r} needs {', '.join(lacking)}: {s.hint}")
            site = s.load()(Path(workdir) / name)
            if standby and not getattr(site, "read_only", False):
                site = StandbySite(s.load(), Path(workdir) / name, prepare=lambda d, s=s: prepare_workdir(s, d),
                                   instances=1 + int(standby))
            else:
                prepare_workdir(s, Path(workdir) / name)
            started.append(site)
            site.start()
    except BaseException:
        for site in started:
            site.close()
        raise
    return started
