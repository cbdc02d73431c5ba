"""OSWorld image metrics from ``gimp.py`` (saturation, contrast, palette, mirror, triangle,
text box, green background, resized, exported copy, file size), plus the image checks that live
elsewhere upstream: ``slides.py`` check_image_stretch_and_center, ``chrome.py``
compare_pdf_images and ``docs.py`` compare_image_text.

Every metric takes ``(result, expected_or_rule, **options)`` paths as OSWorld's and returns 0/1.
The SSIM is the numpy one of :mod:`.images` (skimage's ``channel_axis=-1`` semantics).
A missing or unreadable file scores 0 (upstream raises, which OSWorld's runner scores 0).
Optional libraries: python-pptx, pypdf, pytesseract + the ``tesseract`` binary (apt
``tesseract-ocr``); a missing one raises :class:`~guigym.envs.desktop.evaluators.base.MetricDependencyError`.
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Optional

import numpy as np
from PIL import Image

from guigym.envs.desktop.evaluators.base import METRICS, MetricDependencyError, require
from guigym.envs.desktop.evaluators.metrics.images import structure_check_by_ssim

__all__ = ["check_saturation_increase_and_structure_sim", "check_file_exists_and_structure_sim",
           "check_triangle_position", "check_structure_sim_resized", "check_palette_and_structure_sim",
           "check_textbox_on_leftside", "check_contrast_increase_and_structure_sim", "check_image_mirror",
           "check_green_background", "check_image_stretch_and_center", "check_image_file_size",
           "compare_pdf_images", "compare_image_text"]

#: what a broken or absent image file raises in Pillow / numpy
_IMAGE_ERRORS = (OSError, ValueError, SyntaxError)


def _open(path: Optional[str]) -> Optional[Image.Image]:
    """The image at ``path``, fully loaded, or None when the path is None, missing or not an
    image (upstream raises there; its runner scores the task 0)."""
    if not path or not os.path.isfile(path):
        return None
    try:
        with Image.open(path) as img:
            img.load()
            return img
    except _IMAGE_ERRORS:
        return None


def _open_pair(src_path: Optional[str], tgt_path: Optional[str]) -> Optional[tuple[Image.Image, Image.Image]]:
    src, tgt = _open(src_path), _open(tgt_path)
    return None if src is None or tgt is None else (src, tgt)


# --------------------------------------------------------------------------- gimp.py


@METRICS.register("check_saturation_increase_and_structure_sim")
def check_saturation_increase_and_structure_sim(src_path: Optional[str], tgt_path: Optional[str],
                                                **options: Any) -> float:
    """1 when the result ``src_path`` has a higher mean HSV saturation (Pillow's "HSV", S in
    0..255) than the original ``tgt_path`` and both its H and its V band are SSIM >= 0.9 to the
    original's (each band column by column, as upstream's ``channel_axis=-1`` on a 2-D array)."""
    pair = _open_pair(src_path, tgt_path)
    if pair is None:
        return 0.0
    h1, s1, v1 = pair[0].convert("HSV").split()
    h2, s2, v2 = pair[1].convert("HSV").split()
    more_saturated = float(np.mean(np.asarray(s2))) < float(np.mean(np.asarray(s1)))
    same = structure_check_by_ssim(h1, h2) and structure_check_by_ssim(v1, v2)
    return float(more_saturated and same)


@METRICS.register("check_file_exists_and_structure_sim")
def check_file_exists_and_structure_sim(src_path: Optional[str], tgt_path: Optional[str],
                                        **options: Any) -> float:
    """1 when the exported file ``src_path`` exists and is SSIM >= 0.9 to the original
    ``tgt_path`` (same size; see :func:`structure_check_by_ssim`)."""
    pair = _open_pair(src_path, tgt_path)
    return float(pair is not None and structure_check_by_ssim(*pair))


@METRICS.register("check_triangle_position")
def check_triangle_position(tgt_path: Optional[str], **options: Any) -> float:
    """1 when the "triangle" colour's pixels have a centroid within 5% of the height and of the
    width from the image centre (``shape / 2``). As upstream, that colour is the one at index 1
    of the distinct colours (every band, alpha included) sorted by *ascending* pixel count
    (``np.argsort``): with exactly two colours it is the more common one, the background, whose
    centroid moves only slightly with the triangle; with a third, rarer colour it is the triangle.
    An image with a single colour scores 0. **(differs)** a one-band image ("L", "P") is read as
    RGB, where upstream raises."""
    img = _open(tgt_path)
    if img is None:
        return 0.0
    arr = np.asarray(img)
    if arr.ndim != 3:
        arr = np.asarray(img.convert("RGB"))
    colours, counts = np.unique(arr.reshape(-1, arr.shape[2]), axis=0, return_counts=True)
    if len(colours) < 2:
        return 0.0
    triangle = colours[np.argsort(counts)][1]
    coords = np.argwhere(np.all(arr == triangle, axis=2))
    centroid = coords.mean(axis=0)
    shape = np.array(arr.shape[:2], dtype=np.float64)
    return float(np.all(np.abs(centroid - shape / 2) < 0.05 * shape))


@METRICS.register("check_structure_sim_resized")
def check_structure_sim_resized(src_path: Optional[str], tgt_path: Optional[str], **options: Any) -> float:
    """1 when ``src_path`` resized to ``tgt_path``'s size (Pillow's default filter) is SSIM >= 0.9
    to it: the resized image keeps the original's picture."""
    pair = _open_pair(src_path, tgt_path)
    if pair is None:
        return 0.0
    src, tgt = pair
    return float(structure_check_by_ssim(src.resize(tgt.size), tgt))


@METRICS.register("check_palette_and_structure_sim")
def check_palette_and_structure_sim(src_path: Optional[str], tgt_path: Optional[str], **options: Any) -> float:
    """1 when the result ``src_path`` is a palette ("P" mode) image and, converted to RGB, is
    SSIM >= 0.9 to the original ``tgt_path``."""
    pair = _open_pair(src_path, tgt_path)
    if pair is None:
        return 0.0
    src, tgt = pair
    return float(src.mode == "P" and structure_check_by_ssim(src.convert("RGB"), tgt))


@METRICS.register("check_textbox_on_leftside")
def check_textbox_on_leftside(src_path: Optional[str], **options: Any) -> float:
    """1 when the leftmost dark pixel (grayscale < 128) lies in the left 5% of the width
    (``x < 0.05 * width``). An image with no dark pixel scores 0."""
    img = _open(src_path)
    if img is None:
        return 0.0
    dark_columns = np.flatnonzero((np.asarray(img.convert("L")) < 128).any(axis=0))
    leftmost = int(dark_columns[0]) if dark_columns.size else img.width
    return float(leftmost < img.width * 0.05)


@METRICS.register("check_contrast_increase_and_structure_sim")
def check_contrast_increase_and_structure_sim(src_path: Optional[str], tgt_path: Optional[str],
                                              **options: Any) -> float:
    """1 when the result ``src_path`` has a higher contrast (standard deviation of all its pixel
    values, every band) than the original ``tgt_path`` and is SSIM >= 0.65 to it."""
    pair = _open_pair(src_path, tgt_path)
    if pair is None:
        return 0.0
    src, tgt = pair
    higher = float(np.std(np.asarray(tgt, dtype=np.float32))) < float(np.std(np.asarray(src, dtype=np.float32)))
    return float(higher and structure_check_by_ssim(src, tgt, threshold=0.65))


@METRICS.register("check_image_mirror")
def check_image_mirror(src_path: Optional[str], tgt_path: Optional[str], **options: Any) -> float:
    """1 when ``src_path`` flipped left-right is SSIM >= 0.99 to ``tgt_path`` (OSWorld passes the
    original as ``src_path`` and the agent's mirrored export as ``tgt_path``)."""
    pair = _open_pair(src_path, tgt_path)
    if pair is None:
        return 0.0
    src, tgt = pair
    return float(structure_check_by_ssim(src.transpose(Image.Transpose.FLIP_LEFT_RIGHT), tgt, 0.99))


def _rgb(img: Image.Image) -> np.ndarray:
    """The first three bands of an RGB/RGBA image (H x W x 3), other modes converted to RGB."""
    arr = np.asarray(img)
    if arr.ndim == 3 and arr.shape[2] >= 3:
        return arr[..., :3]
    return np.asarray(img.convert("RGB"))


@METRICS.register("check_green_background")
def check_green_background(src_path: Optional[str], tgt_path: Optional[str], **options: Any) -> float:
    """1 when every pixel that is not pure black (0, 0, 0) in the original ``tgt_path`` (the
    background; the black object is left alone) is green in the result ``src_path``: G > R and
    G > B. Alpha is ignored. **(differs)** images of different sizes score 0 and non-square
    images are checked whole, where upstream's transposed indexing raises on them."""
    pair = _open_pair(src_path, tgt_path)
    if pair is None or pair[0].size != pair[1].size:
        return 0.0
    src, tgt = _rgb(pair[0]), _rgb(pair[1])
    background = np.any(tgt != 0, axis=2)
    r, g, b = src[..., 0], src[..., 1], src[..., 2]
    green = (g > r) & (g > b)
    return float(np.all(green[background]))


@METRICS.register("check_image_file_size")
def check_image_file_size(src_path: Optional[str], rule: Mapping[str, Any], **options: Any) -> float:
    """1 when the file is smaller than ``rule["max_size"]`` bytes (strictly). Missing file: 0."""
    if not src_path or not os.path.isfile(src_path):
        return 0.0
    return float(os.path.getsize(src_path) < rule["max_size"])


# --------------------------------------------------------------------------- slides.py

_EMU_PER_INCH = 914400
_PICTURE = 13  # MSO_SHAPE_TYPE.PICTURE, the value upstream compares shape_type with


@METRICS.register("check_image_stretch_and_center")
def check_image_stretch_and_center(modified_ppt: Optional[str], original_ppt: Optional[str],
                                   **options: Any) -> float:
    """slides.py: the first picture on the original's first slide is found on the modified
    first slide (the last top-level picture with the same image bytes) and fills the slide: its
    width and height are within 0.5 inch of the original's slide size and its left/top within
    0.5 inch of centring it (``(slide - size) / 2``). No such picture, or an unreadable file: 0."""
    if not modified_ppt or not original_ppt:
        return 0.0
    pptx = require("pptx", "python-pptx", "check_image_stretch_and_center")
    try:
        original, modified = pptx.Presentation(original_ppt), pptx.Presentation(modified_ppt)
        wanted = [s for s in original.slides[0].shapes if s.shape_type == _PICTURE][0].image.blob
        found = None
        for shape in modified.slides[0].shapes:
            if shape.shape_type == _PICTURE and shape.image.blob == wanted:
                found = shape
    except Exception:  # python-pptx raises many types on a broken package; IndexError: no slide/picture
        return 0.0
    if found is None:
        return 0.0
    tol = 0.5 * _EMU_PER_INCH
    sw, sh = original.slide_width, original.slide_height
    return float(abs(found.width - sw) <= tol and abs(found.height - sh) <= tol
                 and abs(found.left - (sw - found.width) / 2) <= tol
                 and abs(found.top - (sh - found.height) / 2) <= tol)


# --------------------------------------------------------------------------- chrome.py


def _pdf_pages(path: str) -> list[tuple[tuple[int, int], list[Image.Image]]]:
    """Per page: its size in points (rounded, swapped for a 90/270 rotation; the size of
    upstream's 72-dpi page render) and the page's embedded images, decoded by pypdf."""
    pypdf = require("pypdf", "pypdf", "compare_pdf_images")
    pages = []
    for page in pypdf.PdfReader(path).pages:
        box = page.cropbox
        size = (round(float(box.width)), round(float(box.height)))
        if (page.rotation or 0) % 180 == 90:
            size = size[::-1]
        pages.append((size, [f.image for f in page.images]))
    return pages


def _same_pixels(a: Image.Image, b: Image.Image) -> bool:
    if a.size != b.size:
        return False
    if a.mode != b.mode:  # e.g. one PDF stores the image as RGB, the other as a palette
        a, b = a.convert("RGBA"), b.convert("RGBA")
    return a.tobytes() == b.tobytes()


@METRICS.register("compare_pdf_images")
def compare_pdf_images(pdf1_path: Optional[str], pdf2_path: Optional[str], **options: Any) -> float:
    """chrome.py: 1 when the two PDFs look the same. **(differs)** upstream renders every page
    (PyMuPDF, 72 dpi) and compares the raw pixels; with no renderer here, the PDFs must have the
    same number of pages, the same page sizes, and per page the same number of embedded images,
    pixel-identical in order (modes unified to RGBA when they differ). Text and vector drawing
    are not compared. An unreadable PDF scores 0."""
    if not pdf1_path or not pdf2_path:
        return 0.0
    require("pypdf", "pypdf", "compare_pdf_images")
    try:
        pages1, pages2 = _pdf_pages(pdf1_path), _pdf_pages(pdf2_path)
    except MetricDependencyError:
        raise
    except Exception:  # pypdf/Pillow raise many types on a broken file or image stream
        return 0.0
    if len(pages1) != len(pages2):
        return 0.0
    for (size1, images1), (size2, images2) in zip(pages1, pages2):
        if size1 != size2 or len(images1) != len(images2):
            return 0.0
        if not all(_same_pixels(a, b) for a, b in zip(images1, images2)):
            return 0.0
    return 1.0


# --------------------------------------------------------------------------- docs.py


def ocr_text(image_path: str, metric: str = "compare_image_text") -> str:
    """The text tesseract reads in the image (English), through pytesseract. Raises
    MetricDependencyError when pytesseract or the ``tesseract`` binary is missing."""
    pytesseract = require("pytesseract", "pytesseract", metric)
    try:
        return str(pytesseract.image_to_string(image_path, lang="eng"))
    except pytesseract.TesseractNotFoundError:
        raise MetricDependencyError(
            f"metric {metric!r} needs the 'tesseract' OCR binary, which is not installed "
            "(apt-get install tesseract-ocr)") from None


def _fold(text: str) -> str:
    return re.sub(r"\s+", " ", text).casefold()


@METRICS.register("compare_image_text")
def compare_image_text(image_path: Optional[str], rule: Mapping[str, Any], **options: Any) -> float:
    """docs.py: 1 when ``rule["text"]`` (``rule["type"]`` must be "text") occurs in the text OCR
    reads in the image. **(differs)** upstream's OCR is easyocr (words joined by spaces); here it
    is tesseract, whose line breaks and letter case differ, so both texts have whitespace runs
    collapsed to one space and are case-folded (the task's " Ls" is easyocr's reading of "ls"),
    and the OCR text gets a space at each end.
    A missing or unreadable image scores 0; another rule type raises ValueError, as upstream."""
    if rule.get("type") != "text":
        raise ValueError(f"compare_image_text: unsupported rule type {rule.get('type')!r} (only 'text')")
    if _open(image_path) is None:
        return 0.0
    return float(_fold(rule["text"]) in _fold(" " + ocr_text(image_path) + " "))  # type: ignore[arg-type]
