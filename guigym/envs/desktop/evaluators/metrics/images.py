"""OSWorld image metrics: SSIM comparisons (``vlc.py`` compare_images, ``gimp.py``
check_structure_sim) and the brightness check (``gimp.py``
check_brightness_decrease_and_structure_sim).

SSIM is computed here in numpy with scikit-image's defaults (``structural_similarity``: 7x7
uniform window, sample covariance, K1=0.01, K2=0.03, data range 255 for uint8, mean over the
windows that fit inside the image, mean over channels), so scikit-image is not a dependency.
Pillow is a core dependency.
"""
from __future__ import annotations

import os
from typing import Any, Optional

import numpy as np
from PIL import Image, ImageStat

from guigym.envs.desktop.evaluators.base import METRICS

__all__ = ["ssim", "channel_last_ssim", "structure_check_by_ssim", "compare_images", "check_structure_sim", "check_brightness_decrease_and_structure_sim"]


def _window_means(x: np.ndarray, win: tuple[int, int]) -> np.ndarray:
    """Mean over every ``win = (rows, cols)`` window that fits inside the 2-D array ``x``: shape
    ``(H - rows + 1, W - cols + 1)``, from an integral image."""
    wh, ww = win
    c = np.pad(np.cumsum(np.cumsum(x, axis=0), axis=1), ((1, 0), (1, 0)))
    total = c[wh:, ww:] - c[:-wh, ww:] - c[wh:, :-ww] + c[:-wh, :-ww]
    return total / float(wh * ww)


def _ssim_2d(a: np.ndarray, b: np.ndarray, win: tuple[int, int], data_range: float) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    ua, ub = _window_means(a, win), _window_means(b, win)
    uaa, ubb, uab = _window_means(a * a, win), _window_means(b * b, win), _window_means(a * b, win)
    n = win[0] * win[1]
    cov_norm = n / (n - 1.0)  # sample covariance, as skimage's default
    va, vb, vab = cov_norm * (uaa - ua * ua), cov_norm * (ubb - ub * ub), cov_norm * (uab - ua * ub)
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    s = ((2 * ua * ub + c1) * (2 * vab + c2)) / ((ua * ua + ub * ub + c1) * (va + vb + c2))
    return float(s.mean())


def _dtype_range(a: np.ndarray) -> float:
    """skimage's default data range: the integer dtype's span (255 for uint8)."""
    if not np.issubdtype(a.dtype, np.integer):
        raise ValueError("ssim: data_range is required for float images")
    info = np.iinfo(a.dtype)
    return float(info.max) - (0.0 if info.min >= 0 else float(info.min))


def ssim(a: np.ndarray, b: np.ndarray, win_size: int = 7, channel_axis: Optional[int] = None,
         data_range: Optional[float] = None) -> float:
    """Mean structural similarity of two equally shaped images (H x W, or with a channel axis).

    ``data_range`` defaults to the dtype's range (255 for uint8), as scikit-image; float input
    needs it given. Raises ValueError for different shapes or a window larger than the image.
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise ValueError(f"ssim: images have different shapes {a.shape} and {b.shape}")
    if data_range is None:
        data_range = _dtype_range(a)
    if channel_axis is not None:
        a, b = np.moveaxis(a, channel_axis, -1), np.moveaxis(b, channel_axis, -1)
        spatial = a.shape[:-1]
    else:
        spatial = a.shape
    if len(spatial) != 2 or min(spatial) < win_size or win_size % 2 == 0:
        raise ValueError(f"ssim: win_size {win_size} must be odd and fit the image {spatial}")
    win = (win_size, win_size)
    if channel_axis is None:
        return _ssim_2d(a, b, win, data_range)
    return float(np.mean([_ssim_2d(a[..., i], b[..., i], win, data_range) for i in range(a.shape[-1])]))


def channel_last_ssim(a: np.ndarray, b: np.ndarray, win_size: int = 7) -> float:
    """What gimp.py's ``structural_similarity(a, b, channel_axis=-1)`` computes for two equally
    shaped integer arrays. H x W x C: the mean over the C channels of the 2-D SSIM. H x W (an "L"
    or "P" image, or one HSV band): the last axis is taken as the channel axis, so each of the W
    columns is a 1-D signal of H samples with a ``win_size`` window, and the mean over columns is
    returned. Raises ValueError for different shapes or an image shorter than the window."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise ValueError(f"ssim: images have different shapes {a.shape} and {b.shape}")
    if a.ndim == 3:
        return ssim(a, b, win_size=win_size, channel_axis=2)
    if a.ndim != 2 or a.shape[0] < win_size or win_size % 2 == 0:
        raise ValueError(f"ssim: win_size {win_size} must be odd and fit the columns of {a.shape}")
    # a (win_size, 1) window over the rows == 1-D SSIM of every column; same mean
    return _ssim_2d(a, b, (win_size, 1), _dtype_range(a))


def _readable(path: Optional[str]) -> bool:
    return bool(path) and os.path.isfile(path) and os.path.getsize(path) > 0  # type: ignore[arg-type]


@METRICS.register("compare_images")
def compare_images(image1_path: Optional[str], image2_path: Optional[str], **options: Any) -> float:
    """vlc.py ``compare_images``: SSIM of the two images in grayscale, both resized (Lanczos) to
    ``min(size1, size2)`` (a tuple minimum, as upstream). With ``reference_base_result`` b the
    score is ``(ssim - b) / (1 - b)`` when ssim >= b + 0.01, else 0. Missing, empty or unreadable
    files, or images smaller than the 7x7 window, score 0."""
    if not (_readable(image1_path) and _readable(image2_path)):
        return 0.0
    try:
        img1 = Image.open(image1_path).convert("L")  # type: ignore[arg-type]
        img2 = Image.open(image2_path).convert("L")  # type: ignore[arg-type]
    except (OSError, ValueError):
        return 0.0
    size = min(img1.size, img2.size)
    a = np.asarray(img1.resize(size, Image.Resampling.LANCZOS))
    b = np.asarray(img2.resize(size, Image.Resampling.LANCZOS))
    try:
        score = ssim(a, b)
    except ValueError:
        return 0.0
    base = options.get("reference_base_result")
    if base is None:
        return score
    return (score - base) / (1 - base) if score >= base + 0.01 else 0.0


def structure_check_by_ssim(img1: Image.Image, img2: Image.Image, threshold: float = 0.9) -> bool:
    """gimp.py: :func:`channel_last_ssim` of the two images' pixel arrays (alpha included, a
    one-band image column by column, as upstream) >= ``threshold``. Images of different sizes,
    or smaller than the 7 px window, are not similar. **(differs)** two images of the same size
    whose arrays differ in shape (e.g. RGBA and RGB, or "P" and RGB) are both converted to RGB
    first, where upstream's SSIM raises."""
    if img1.size != img2.size:
        return False
    a, b = np.asarray(img1), np.asarray(img2)
    if a.shape != b.shape or a.dtype != b.dtype:
        a, b = np.asarray(img1.convert("RGB")), np.asarray(img2.convert("RGB"))
    try:
        return channel_last_ssim(a, b) >= threshold
    except ValueError:  # smaller than the window, or a non-integer mode such as "F"
        return False


@METRICS.register("check_structure_sim")
def check_structure_sim(src_path: Optional[str], tgt_path: Optional[str], **options: Any) -> float:
    """gimp.py: both images open, have the same size and an RGB SSIM >= 0.9; otherwise 0."""
    if src_path is None or tgt_path is None:
        return 0.0
    try:
        img_src, img_tgt = Image.open(src_path), Image.open(tgt_path)
        if img_src.size != img_tgt.size:
            return 0.0
        return float(structure_check_by_ssim(img_src, img_tgt))
    except (OSError, ValueError):
        return 0.0


def _brightness(image: Image.Image) -> float:
    """Mean of the grayscale ("L") image."""
    return float(ImageStat.Stat(image.convert("L")).mean[0])


def _normalise_brightness(image: Image.Image, target: float) -> Image.Image:
    """Scale every band so the grayscale mean becomes ``target`` (``int(x * factor)`` clipped to
    [0, 255], as gimp.py's point transform)."""
    factor = target / _brightness(image)
    return image.point([min(255, max(0, int(x * factor))) for x in range(256)] * len(image.getbands()))


def structure_check_by_mse(img1: Image.Image, img2: Image.Image, threshold: float = 0.03) -> bool:
    """gimp.py: MSE of the two RGB images scaled to [0, 1] is below ``threshold``; ``img1`` is
    resized (Lanczos) to ``img2``'s size first when they differ."""
    if img1.size != img2.size:
        img1 = img1.resize(img2.size, Image.Resampling.LANCZOS)
    a = np.asarray(img1.convert("RGB"), dtype=np.float32) / 255
    b = np.asarray(img2.convert("RGB"), dtype=np.float32) / 255
    return float(np.mean((a - b) ** 2)) < threshold


@METRICS.register("check_brightness_decrease_and_structure_sim")
def check_brightness_decrease_and_structure_sim(src_path: Optional[str], tgt_path: Optional[str],
                                                threshold: float = 0.03, **options: Any) -> float:
    """gimp.py: the result image ``src_path`` is darker (grayscale mean) than the original
    ``tgt_path``, and after normalising both to mean brightness 128 their MSE is below
    ``threshold`` (default 0.03). An all-black image or an unreadable file scores 0."""
    if src_path is None or tgt_path is None:
        return 0.0
    try:
        img_src, img_tgt = Image.open(src_path), Image.open(tgt_path)
        darker = _brightness(img_tgt) > _brightness(img_src)
        same = structure_check_by_mse(_normalise_brightness(img_src, 128), _normalise_brightness(img_tgt, 128),
                                      threshold=threshold)
    except (OSError, ValueError, ZeroDivisionError):
        return 0.0
    return float(darker and same)


@METRICS.register("check_image_size")
def check_image_size(src_path: Optional[str], rule: Any, **options: Any) -> float:
    """gimp.py ``check_image_size``: 1 when the image's width and height equal ``rule["width"]``
    and ``rule["height"]`` (a key that is absent or None is not checked). Missing image: 0.

    The size is the bounding box of the non-transparent pixels (0 x 0 when there are none), not
    the canvas, for an RGBA/LA image when ``rule["ignore_transparent"]`` is set, and, as OSWorld
    1.0.2 groups that condition, for any image with a ``transparency`` entry (a palette or RGB
    PNG with a tRNS chunk) even without the option."""
    if src_path is None or not os.path.exists(src_path):
        return 0.0
    with Image.open(src_path) as img:
        width, height = img.size
        if (rule.get("ignore_transparent", False) and img.mode in ("RGBA", "LA")) or "transparency" in img.info:
            bbox = img.convert("RGBA").getchannel("A").getbbox()
            width, height = (bbox[2] - bbox[0], bbox[3] - bbox[1]) if bbox else (0, 0)
    ok_w = rule.get("width") is None or width == rule["width"]
    ok_h = rule.get("height") is None or height == rule["height"]
    return float(ok_w and ok_h)


@METRICS.register("compare_image_list")
def compare_image_list(pred: Any, gold: Any, **options: Any) -> float:
    """gimp.py ``compare_image_list``: 1 when every predicted image is pixel-identical to its gold
    image (Pillow's difference has no non-zero pixel), pairing the two lists in order (a single
    path each is a one-item list; like upstream, pairs beyond the shorter list are not checked).
    A missing path scores 0. **(differs)** images of different sizes score 0 and modes are
    compared as RGBA, where upstream's ``ImageChops.difference`` raises on either."""
    from PIL import ImageChops

    preds = pred if isinstance(pred, list) else [pred]
    golds = gold if isinstance(gold, list) else [gold]
    for p, g in zip(preds, golds):
        if not p or not g or not os.path.exists(p) or not os.path.exists(g):
            return 0.0
        with Image.open(p) as a, Image.open(g) as b:
            if a.size != b.size:
                return 0.0
            # alpha_only=False: an RGBA difference's bbox would otherwise look at alpha alone
            if ImageChops.difference(a.convert("RGBA"), b.convert("RGBA")).getbbox(alpha_only=False):
                return 0.0
    return 1.0
