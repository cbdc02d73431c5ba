"""One embedded WebArena site, started and reset for BrowserGym tasks (the guigym side).

Run by :class:`guigym.compat.browsergym.tasks.SiteHost` with guigym's own Python, because the
sites need guigym's installed programs and libraries (Django, Oscar, Fossil, kiwix-serve, ...)
that a BrowserGym venv does not have::

    python -m guigym.compat.browsergym.host --site kiwix

It starts the site with :func:`guigym.envs.web.webarena.sites.start_sites` (its servers bind
127.0.0.1, as under ``WebArena-v0``) in a private temporary directory, and is controlled over its
stdin/stdout only (no socket of its own), one JSON object per line:

* first stdout line: ``{"ok": true, "site": name, "urls": {key: url}, "logins": {key: recipe},
  "read_only": bool, "start_s": seconds}`` (or ``{"ok": false, "error": ...}``);
* stdin ``{"op": "reset"}``: the site's own ``reset()`` (the seed state restored, milliseconds for
  most sites), answered ``{"ok": true, "reset_s": seconds}``;
* EOF on stdin stops the site and exits.

Nothing of a task (answers, reference solutions) ever reaches this process.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional, Sequence, TextIO


#: the control channel: the process's original stdout (main() points fd 1 at stderr, so a site's
#: server that prints, or a child that inherits fd 1, cannot corrupt it)
_control: Optional[TextIO] = None


def _say(obj: dict[str, Any]) -> None:
    out = _control or sys.stdout
    out.write(json.dumps(obj) + "\n")
    out.flush()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m guigym.compat.browsergym.host", description=__doc__.splitlines()[0])
    p.add_argument("--site", required=True, help="embedded site name (guigym.envs.web.webarena.sites.EMBEDDED)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    global _control
    args = build_parser().parse_args(argv)
    _control = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    from guigym.envs.web.webarena.sites import site_urls, start_sites

    with tempfile.TemporaryDirectory(prefix=f"guigym-bgym-{args.site}-") as work:
        t0 = time.perf_counter()
        try:
            (site,) = start_sites([args.site], Path(work))
        except Exception as exc:  # noqa: BLE001 - reported to the task, which raises it
            _say({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
            return 1
        try:
            _say({"ok": True, "site": args.site, "urls": site_urls(site),
                  "logins": {k: dataclasses.asdict(r) for k, r in getattr(site, "logins", {}).items()},
                  "read_only": bool(getattr(site, "read_only", False)), "start_s": time.perf_counter() - t0})
            for line in sys.stdin:
                if not line.strip():
                    continue
                try:
                    op = json.loads(line).get("op")
                    if op != "reset":
                        raise ValueError(f"unknown op {op!r}; the only op is 'reset'")
                    _say({"ok": True, "reset_s": float(site.reset())})
                except Exception as exc:  # noqa: BLE001 - one bad request does not stop the site
                    _say({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        finally:
            site.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
