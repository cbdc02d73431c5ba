"""Fill the OSWorld task cache so tasks that download files run offline.

``guigym osworld cache --tasks DIR [--cache-dir D] [--workers N]`` downloads every file the
tasks under ``DIR`` reference; ``--import SRC`` copies them from a folder someone else filled
(alone, from a folder in OSWorld's own cache layout, :func:`import_layout`; with ``--tasks``, also
matched by the URLs' basenames, :func:`import_dir`).
``D`` is what :class:`~guigym.envs.desktop.env.OSWorldEnv` takes as ``cache_dir``; files go
where the env looks for them:

* ``download`` setup steps (``config`` and ``evaluator.postconfig``):
  ``D/setup/<uuid5(NAMESPACE_URL, url)>_<basename(path)>`` (OSWorld's own cache name,
  :func:`~guigym.envs.desktop.setup.download_cache_path`);
* ``cloud_file`` getters (``path`` url(s), ``dest`` name(s)): ``D/eval/<task id>/<dest>``.

``D/manifest.json`` records every file the command wrote or checked::

    {"version": 1, "files": {"setup/<name>": {"url": str, "sha256": hex, "size": int}, ...}}

A re-run hashes each present file against it: equal -> skipped, different (a corrupted or
truncated file) -> downloaded again. Downloads go to ``<file>.part`` (resumed with an HTTP
``Range`` request when a previous run left one) and are renamed into place only when complete;
a ``sha256`` the server states (Hugging Face's ``X-Linked-Etag``) is checked before the rename.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from guigym.core.errors import ConfigError, EnvInfraError, TaskSpecError
from guigym.core.paths import confine
from guigym.envs.desktop.evaluators.base import atomic_write, download_cache_path

__all__ = ["CacheItem", "Manifest", "default_cache_dir", "download_targets", "cloud_file_targets",
           "collect_items", "download_all", "import_dir", "import_layout", "main"]

MANIFEST = "manifest.json"
_CHUNK = 1 << 16


def default_cache_dir() -> Path:
    """``$GUIGYM_DATA_DIR/osworld-cache`` or ``~/.cache/guigym/osworld-cache``."""
    base = os.environ.get("GUIGYM_DATA_DIR")
    return Path(base) / "osworld-cache" if base else Path.home() / ".cache" / "guigym" / "osworld-cache"


# --------------------------------------------------------------------------- what tasks reference


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def download_targets(task: Mapping[str, Any], cache_dir: Path) -> list[tuple[str, Path]]:
    """``(url, cache file)`` of every ``download`` step of a task object (config + postconfig)."""
    ev = task.get("evaluator") if isinstance(task.get("evaluator"), Mapping) else {}
    out: list[tuple[str, Path]] = []
    for step in list(task.get("config") or []) + list(ev.get("postconfig") or []):
        if not isinstance(step, Mapping) or step.get("type") != "download":
            continue
        params = step.get("parameters") if isinstance(step.get("parameters"), Mapping) else {}
        for f in params.get("files") or []:
            if isinstance(f, Mapping) and isinstance(f.get("url"), str) and isinstance(f.get("path"), str):
                out.append((f["url"], download_cache_path(Path(cache_dir) / "setup", f["url"], f["path"])))
    return out


def cloud_file_targets(task: Mapping[str, Any], cache_dir: Path) -> list[tuple[str, Path]]:
    """``(url, cache file)`` of every ``cloud_file`` getter in ``evaluator.result``/``expected``
    (``path``/``dest`` strings, or lists of equal length with ``multi``)."""
    ev = task.get("evaluator") if isinstance(task.get("evaluator"), Mapping) else {}
    task_id = str(task.get("id", ""))
    out: list[tuple[str, Path]] = []
    for key in ("result", "expected"):
        for spec in _as_list(ev.get(key)):
            if not isinstance(spec, Mapping) or spec.get("type") != "cloud_file":
                continue
            for url, dest in zip(_as_list(spec.get("path")), _as_list(spec.get("dest"))):
                if isinstance(url, str) and isinstance(dest, str) and task_id:
                    try:
                        target = confine(Path(cache_dir) / "eval" / task_id, dest, f"{key}.dest", "the cache")
                    except TaskSpecError:  # a dest leaving the cache is not cacheable ('tasks check' says why)
                        continue
                    out.append((url, target))
    return out


@dataclass(frozen=True)
class CacheItem:
    """One file to cache: ``url`` -> ``path`` (absolute); ``rel`` is ``path`` relative to the
    cache dir (the manifest key); ``task_id``/``kind`` (``download``/``cloud_file``) say why."""

    url: str
    path: Path
    rel: str
    task_id: str
    kind: str


def collect_items(tasks_dir: Path, cache_dir: Path) -> list[CacheItem]:
    """Every file the tasks under ``tasks_dir`` reference, one item per cache file."""
    from guigym.envs.desktop.tasks import find_task_files

    cache_dir = Path(cache_dir)
    items: dict[Path, CacheItem] = {}
    for _domain, f in find_task_files(Path(tasks_dir)):
        try:
            task = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # 'tasks coverage' reports unreadable files
        if not isinstance(task, Mapping):
            continue
        tid = str(task.get("id", f.stem))
        for kind, targets in (("download", download_targets(task, cache_dir)),
                              ("cloud_file", cloud_file_targets(task, cache_dir))):
            for url, path in targets:
                items.setdefault(path, CacheItem(url, path, path.relative_to(cache_dir).as_posix(), tid, kind))
    return sorted(items.values(), key=lambda i: i.rel)


# --------------------------------------------------------------------------- manifest


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


class Manifest:
    """``cache_dir/manifest.json``: thread-safe record of ``rel -> {url, sha256, size}``."""

    def __init__(self, cache_dir: Path) -> None:
        self.path = Path(cache_dir) / MANIFEST
        self._lock = threading.Lock()
        self.files: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
            except ValueError as e:
                raise ConfigError(f"{self.path}: manifest is not valid JSON ({e}); delete it to rebuild") from None
            files = data.get("files") if isinstance(data, Mapping) else None
            self.files = {str(k): dict(v) for k, v in (files or {}).items() if isinstance(v, Mapping)}

    def record(self, item: CacheItem, sha: str, size: int) -> None:
        with self._lock:
            self.files[item.rel] = {"url": item.url, "sha256": sha, "size": size}

    def save(self) -> None:
        with self._lock:
            body = json.dumps({"version": 1, "files": dict(sorted(self.files.items()))}, indent=1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, body.encode("utf-8"))

    def verify(self, item: CacheItem) -> Optional[bool]:
        """True: the file matches its manifest hash; False: it differs or is missing; None:
        the file exists but the manifest has no hash for it."""
        entry = self.files.get(item.rel)
        if not item.path.is_file():
            return False
        if not entry or not entry.get("sha256"):
            return None
        return entry.get("size") in (None, item.path.stat().st_size) and sha256_file(item.path) == entry["sha256"]


# --------------------------------------------------------------------------- downloading


def _stated_sha256(headers: Any) -> Optional[str]:
    """A sha256 the server states for the body (Hugging Face LFS: ``X-Linked-Etag``)."""
    for name in ("X-Linked-Etag", "X-Checksum-Sha256"):
        value = (headers.get(name) or "").strip().strip('"').lower()
        if len(value) == 64 and all(c in "0123456789abcdef" for c in value):
            return value
    return None


def fetch(item: CacheItem, timeout: float = 60.0) -> tuple[str, int]:
    """Download ``item.url`` to ``item.path`` through ``<path>.part`` (resumed when present);
    returns (sha256, size). Raises EnvInfraError naming the url on any failure."""
    if urllib.parse.urlsplit(item.url).scheme not in ("http", "https"):
        # urllib also reads file:// and ftp://; a task file must not copy host files into the cache
        raise EnvInfraError(f"{item.url}: not an http(s) url")
    part = item.path.with_name(item.path.name + ".part")
    item.path.parent.mkdir(parents=True, exist_ok=True)
    have = part.stat().st_size if part.is_file() else 0
    req = urllib.request.Request(item.url, headers={"User-Agent": "guigym-osworld-cache"})
    if have:
        req.add_header("Range", f"bytes={have}-")
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)  # http(s) only, checked above
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # the .part already holds everything
            resp = None
        else:
            raise EnvInfraError(f"{item.url}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        raise EnvInfraError(f"{item.url}: {getattr(e, 'reason', e)}") from None
    stated = None
    if resp is not None:
        with resp:
            stated = _stated_sha256(resp.headers)
            mode = "ab" if have and resp.status == 206 else "wb"  # 200: the server ignored Range
            try:
                with open(part, mode) as out:
                    for block in iter(lambda: resp.read(_CHUNK), b""):
                        out.write(block)
            except OSError as e:
                raise EnvInfraError(f"{item.url}: download interrupted ({e}); rerun to resume") from None
            length = resp.headers.get("Content-Length")
            if length is not None and resp.status in (200, 206):
                expect = int(length) + (have if mode == "ab" else 0)
                if part.stat().st_size < expect:
                    raise EnvInfraError(f"{item.url}: got {part.stat().st_size} of {expect} bytes; rerun to resume")
    sha = sha256_file(part)
    if stated and sha != stated:
        part.unlink()
        raise EnvInfraError(f"{item.url}: sha256 {sha} differs from the server's {stated}; partial file removed")
    size = part.stat().st_size
    os.replace(part, item.path)
    return sha, size


@dataclass
class Outcome:
    """What happened to one item: ``status`` is ``present`` (verified), ``downloaded``,
    ``redownloaded`` (a manifest mismatch), ``imported`` or ``missing``/``failed``."""

    item: CacheItem
    status: str
    detail: str = ""


def _ensure(item: CacheItem, manifest: Manifest, get: Callable[[CacheItem], tuple[str, int]]) -> Outcome:
    state = manifest.verify(item)
    if state is True:
        return Outcome(item, "present")
    if state is None:  # a file someone put here: trust it, record its hash
        manifest.record(item, sha256_file(item.path), item.path.stat().st_size)
        return Outcome(item, "present", "hashed (was not in the manifest)")
    redo = item.path.is_file()
    if redo:
        item.path.unlink()  # checksum mismatch: never resume onto a corrupt file
    try:
        sha, size = get(item)
    except EnvInfraError as e:
        return Outcome(item, "failed", str(e))
    manifest.record(item, sha, size)
    return Outcome(item, "redownloaded" if redo else "downloaded")


def _progress(total: int, quiet: bool, desc: str) -> Any:
    if quiet:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="file", desc=desc, file=sys.stderr)


def download_all(items: Sequence[CacheItem], cache_dir: Path, workers: int = 4, quiet: bool = True,
                 timeout: float = 60.0) -> list[Outcome]:
    """Make every item present and verified in ``cache_dir`` (parallel; manifest saved after
    each file, so an interrupted run keeps what it finished)."""
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    manifest = Manifest(cache_dir)
    bar = _progress(len(items), quiet, "osworld cache")
    outcomes: list[Outcome] = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(_ensure, it, manifest, lambda i: fetch(i, timeout)) for it in items]
        for fut in as_completed(futures):
            out = fut.result()
            outcomes.append(out)
            if out.status != "failed":
                manifest.save()
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    manifest.save()
    return sorted(outcomes, key=lambda o: o.item.rel)


def import_dir(items: Sequence[CacheItem], source: Path, cache_dir: Path) -> list[Outcome]:
    """Copy each item's file from ``source`` (searched recursively) into the cache.

    A file matches by OSWorld's cache name (``<uuid5>_<name>``, or ``<task id>/<dest>`` for a
    cloud file, as OSWorld's per-task cache folders hold them) or else by the url's basename;
    among several files with that basename the one inside a folder named after the task wins.
    Already-verified items are ``present``; the rest ``imported`` or ``missing``.
    """
    source = Path(source)
    if not source.is_dir():
        raise ConfigError(f"--import: {source} is not a directory")
    by_name: dict[str, list[Path]] = {}
    for p in sorted(source.rglob("*")):
        if p.is_file() and not p.name.endswith(".part"):
            by_name.setdefault(p.name, []).append(p)
    manifest = Manifest(cache_dir)
    outcomes: list[Outcome] = []
    for item in items:
        if manifest.verify(item) is True:
            outcomes.append(Outcome(item, "present"))
            continue
        found = None
        if item.kind == "cloud_file" and (source / item.task_id / item.path.name).is_file():
            found = source / item.task_id / item.path.name
        for name in (item.path.name, os.path.basename(urllib.parse.unquote(urllib.parse.urlsplit(item.url).path))):
            if found is None and name in by_name:
                cands = by_name[name]
                found = next((c for c in cands if c.parent.name == item.task_id), cands[0])
        if found is None:
            outcomes.append(Outcome(item, "missing", f"no file named {item.path.name} or the url's basename"))
            continue
        outcomes.append(_copy_in(found, item, manifest))
    manifest.save()
    return outcomes


def _copy_in(found: Path, item: "CacheItem", manifest: "Manifest") -> "Outcome":
    """Copy ``found`` to ``item.path`` (through a ``.part`` file, so a crash leaves no half file
    under the real name) and record its digest in ``manifest``."""
    item.path.parent.mkdir(parents=True, exist_ok=True)
    tmp = item.path.with_name(item.path.name + ".part")
    shutil.copyfile(found, tmp)
    os.replace(tmp, item.path)
    manifest.record(item, sha256_file(item.path), item.path.stat().st_size)
    return Outcome(item, "imported", str(found))


_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def import_layout(source: Path, cache_dir: Path) -> list[Outcome]:
    """Copy a folder in OSWorld's own cache layout into the cache, without the task files:
    ``<uuid5>_<name>`` files (a ``download`` step's cache name, anywhere under ``source``) go to
    ``setup/``, other files directly in a folder named by a task id (a UUID, OSWorld's
    ``cache/<task id>/<dest>`` of a ``cloud_file``) to ``eval/<task id>/``. Other files are
    left out (``--tasks`` matches those by the URLs' basenames)."""
    import re

    source = Path(source)
    if not source.is_dir():
        raise ConfigError(f"--import: {source} is not a directory")
    setup_name, task_dir = re.compile(rf"{_UUID}_.+"), re.compile(_UUID)
    manifest = Manifest(cache_dir)
    outcomes: list[Outcome] = []
    for found in sorted(source.rglob("*")):
        if not found.is_file() or found.name.endswith(".part"):
            continue
        if setup_name.fullmatch(found.name):
            rel = f"setup/{found.name}"
        elif task_dir.fullmatch(found.parent.name):
            rel = f"eval/{found.parent.name}/{found.name}"
        else:
            continue
        item = CacheItem("", Path(cache_dir) / rel, rel, found.parent.name, rel.split("/")[0])
        if manifest.verify(item) is True:
            outcomes.append(Outcome(item, "present"))
            continue
        outcomes.append(_copy_in(found, item, manifest))
    manifest.save()
    return outcomes


# --------------------------------------------------------------------------- CLI


def _report(outcomes: Sequence[Outcome], out: Any) -> int:
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    print(", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + f" (of {len(outcomes)} files)", file=out)
    bad = [o for o in outcomes if o.status in ("failed", "missing")]
    for o in bad[:50]:
        print(f"  {o.status}: {o.item.rel} <- {o.item.url} (task {o.item.task_id}): {o.detail}", file=out)
    if len(bad) > 50:
        print(f"  ... {len(bad) - 50} more", file=out)
    return 1 if bad else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``guigym osworld cache``; exit 0 when every file is cached, 1 when some are not, 2 on
    bad arguments."""
    p = argparse.ArgumentParser(prog="guigym osworld",
                                description="download (or --import) every file OSWorld tasks reference into "
                                            "the cache OSWorldEnv(cache_dir=...) reads")
    p.add_argument("action", choices=["cache"])
    p.add_argument("--tasks", default=None,
                   help="OSWorld evaluation_examples dir, examples dir or index JSON (required to download; with "
                        "--import it also matches files by their URLs' basenames)")
    p.add_argument("--cache-dir", default=None, help=f"cache folder (default {default_cache_dir()})")
    p.add_argument("--workers", type=int, default=4, help="parallel downloads")
    p.add_argument("--import", dest="import_dir", default=None, metavar="DIR",
                   help="copy files from DIR (matched by OSWorld cache name or url basename) instead of downloading")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per network read")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    cache_dir = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    try:
        if args.tasks is None:
            if not args.import_dir:
                raise ConfigError("--tasks DIR is needed to download (the task files name the URLs); "
                                  "--import DIR alone copies a folder in OSWorld's cache layout")
            cache_dir.mkdir(parents=True, exist_ok=True)
            outcomes = import_layout(Path(args.import_dir), cache_dir)
            print(f"cache {cache_dir}: ", end="")
            if not outcomes:
                print(f"no file of {args.import_dir} is in OSWorld's cache layout (<uuid5>_<name>, "
                      "<task id>/<name>); give --tasks DIR to match files by their URLs")
                return 1
            return _report(outcomes, sys.stdout)
        items = collect_items(Path(args.tasks), cache_dir)
        cache_dir.mkdir(parents=True, exist_ok=True)
        if args.import_dir:
            outcomes = import_dir(items, Path(args.import_dir), cache_dir)
        else:
            outcomes = download_all(items, cache_dir, workers=args.workers, quiet=args.quiet, timeout=args.timeout)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"cache {cache_dir}: ", end="")
    return _report(outcomes, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
