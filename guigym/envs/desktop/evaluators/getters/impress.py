"""OSWorld Impress getters (``desktop_env/evaluators/getters/impress.py``): a medium file a
slide uses, taken out of a presentation on the desktop.

Both getters take ``ppt_file_path`` (the .pptx in the desktop), ``slide_index`` (0-based) and
``dest``. As OSWorld, the presentation is first copied into the cache under its own base name
(as ``vm_file`` does); then the slide's relationships (``ppt/slides/_rels/slide<N>.xml.rels``)
name the medium: one stored in the package is extracted, one linked with a ``file://`` url is
copied from the desktop. The result is the local path of the medium, or None when the
presentation is missing or unreadable, the slide does not exist or it has no such medium.

Differences from upstream, on purpose: the extracted medium is written to ``cache_dir/dest``
(OSWorld writes it to ``cache_dir/<path inside the zip>`` and uses ``dest`` only for linked
files); the slide is found in presentation order (OSWorld opens ``slide<index+1>.xml``, the same
part for LibreOffice output); a percent-encoded ``file://`` url is decoded.
"""
from __future__ import annotations

import logging
import os
import posixpath
import urllib.parse
import zipfile
from collections.abc import Mapping
from typing import Any, Optional
from xml.etree import ElementTree as ET

from guigym.core.errors import TaskSpecError
from guigym.envs.desktop.evaluators.base import (
    GETTERS,
    GetterContext,
    _cache_target,
    _need,
    atomic_write,
)
from guigym.envs.desktop.evaluators.metrics.impress import slide_part_names

log = logging.getLogger(__name__)

__all__ = ["get_audio_in_slide", "get_background_image_in_slide"]

_NS_A = "http://schemas.openxmlformats.org/drawingml/2006/main"
_NS_P = "http://schemas.openxmlformats.org/presentationml/2006/main"
_NS_R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_NS_PKG_REL = "http://schemas.openxmlformats.org/package/2006/relationships"


def _slide_index(spec: Mapping[str, Any]) -> int:
    raw = _need(spec, "slide_index", (int, str))
    try:
        index = int(raw)
    except ValueError:
        raise TaskSpecError(f"getter {spec['type']!r}: slide_index must be an integer, got {raw!r}") from None
    if index < 0:
        raise TaskSpecError(f"getter {spec['type']!r}: slide_index must be >= 0, got {index}")
    return index


def _fetch_presentation(ctx: GetterContext, ppt_path: str) -> Optional[str]:
    """The presentation copied to ``cache_dir/<its base name>``; None when it does not exist."""
    data = ctx.client.get_file(ppt_path)
    if data is None:
        log.info("%s does not exist in the desktop", ppt_path)
        return None
    target = _cache_target(ctx, os.path.basename(ppt_path.replace("\\", "/")) or "presentation.pptx")
    atomic_write(target, data)
    return str(target)


def _relationships(z: zipfile.ZipFile, part: str) -> list[ET.Element]:
    """The ``<Relationship>`` elements of ``part`` (none when it has no .rels)."""
    folder, name = posixpath.split(part)
    try:
        root = ET.fromstring(z.read(f"{folder}/_rels/{name}.rels"))
    except KeyError:
        return []
    return list(root.iter(f"{{{_NS_PKG_REL}}}Relationship"))


def _medium(ctx: GetterContext, z: zipfile.ZipFile, part: str, rel: ET.Element, dest: str) -> Optional[str]:
    """Save the target of ``rel`` (of ``part``) to ``cache_dir/dest``: a package member is
    extracted, a ``file://`` link is copied from the desktop. None when it is not there."""
    target_ref = rel.get("Target", "")
    target = _cache_target(ctx, dest)
    if rel.get("TargetMode") == "External" or "://" in target_ref:
        if not target_ref.startswith("file://"):
            log.info("linked medium %r is not a file url", target_ref)
            return None
        path = urllib.parse.unquote(urllib.parse.urlsplit(target_ref).path)
        data = ctx.client.get_file(path)
        if data is None:
            log.info("linked medium %s does not exist in the desktop", path)
            return None
    else:
        member = target_ref.lstrip("/") if target_ref.startswith("/") else \
            posixpath.normpath(posixpath.join(posixpath.dirname(part), target_ref))
        try:
            data = z.read(member)
        except KeyError:
            log.info("medium %s is not in the presentation", member)
            return None
    atomic_write(target, data)
    return str(target)


def _with_slide(ctx: GetterContext, spec: Mapping[str, Any], pick: Any) -> Optional[str]:
    """Fetch the presentation, find the slide and hand (zip, slide part) to ``pick``."""
    ppt_path, dest = _need(spec, "ppt_file_path"), _need(spec, "dest")
    index = _slide_index(spec)
    _cache_target(ctx, dest)  # refuse a bad dest before any transfer
    local = _fetch_presentation(ctx, ppt_path)
    if local is None:
        return None
    try:
        with zipfile.ZipFile(local) as z:
            parts = slide_part_names(z)
            if index >= len(parts):
                log.info("%s has no slide %d", ppt_path, index)
                return None
            return pick(z, parts[index], dest)
    except (zipfile.BadZipFile, ET.ParseError, KeyError) as e:
        log.info("%s is not a readable presentation: %s", ppt_path, e)
        return None


@GETTERS.register("audio_in_slide")
def get_audio_in_slide(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[str]:
    """The first audio the slide's relationships name (a relationship type containing
    ``audio``), saved to ``cache_dir/dest``; None when there is none."""
    def pick(z: zipfile.ZipFile, part: str, dest: str) -> Optional[str]:
        for rel in _relationships(z, part):
            if "audio" in rel.get("Type", ""):
                return _medium(ctx, z, part, rel, dest)
        return None

    return _with_slide(ctx, spec, pick)


@GETTERS.register("background_image_in_slide")
def get_background_image_in_slide(ctx: GetterContext, spec: Mapping[str, Any]) -> Optional[str]:
    """The picture of the slide's own background (the ``<a:blip r:embed>`` inside
    ``<p:bg><p:bgPr>``, looked up among the slide's image relationships), saved to
    ``cache_dir/dest``; None when the slide has no picture background of its own (a layout's or
    master's background is not looked at, as upstream)."""
    def pick(z: zipfile.ZipFile, part: str, dest: str) -> Optional[str]:
        root = ET.fromstring(z.read(part))
        image_id = None
        for bg in root.iter(f"{{{_NS_P}}}bgPr"):
            blip = next(bg.iter(f"{{{_NS_A}}}blip"), None)
            if blip is not None and blip.get(f"{{{_NS_R}}}embed"):
                image_id = blip.get(f"{{{_NS_R}}}embed")
                break
        if image_id is None:
            return None
        for rel in _relationships(z, part):
            if rel.get("Id") == image_id and "image" in rel.get("Type", ""):
                return _medium(ctx, z, part, rel, dest)
        return None

    return _with_slide(ctx, spec, pick)
