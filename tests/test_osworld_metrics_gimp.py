"""OSWorld GIMP/image metrics (metrics_gimp.py) on PNG/PPTX/PDF files generated here with Pillow,
python-pptx and pypdf: each scores 1 on what a correct agent leaves and 0 on what a wrong one
leaves (unchanged copy, wrong edit, different picture, missing file)."""
from __future__ import annotations

import shutil
import sys

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageEnhance, ImageFont, ImageOps

from guigym.envs.desktop.evaluators.metrics import gimp as G
from guigym.envs.desktop.evaluators import METRICS, get_metric
from guigym.envs.desktop.evaluators.metrics.images import (
    channel_last_ssim,
    structure_check_by_ssim,
)
from guigym.envs.desktop.evaluators.base import MetricDependencyError

NAMES = ("check_saturation_increase_and_structure_sim", "check_file_exists_and_structure_sim",
         "check_triangle_position", "check_structure_sim_resized", "check_palette_and_structure_sim",
         "check_textbox_on_leftside", "check_contrast_increase_and_structure_sim", "check_image_mirror",
         "check_green_background", "check_image_stretch_and_center", "check_image_file_size",
         "compare_pdf_images", "compare_image_text")


def photo(size=(96, 64), seed=0) -> Image.Image:
    """A smooth, asymmetric, moderately saturated colour picture (gradients + shapes + mild noise)."""
    w, h = size
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    rng = np.random.default_rng(seed)
    r = 110 + 60 * np.sin(x / 9.0) + 20 * (y / h)
    g = 100 + 50 * np.cos(y / 7.0) + 30 * (x / w)
    b = 90 + 40 * np.sin((x + 2 * y) / 13.0)
    arr = np.stack([r, g, b], axis=2) + rng.normal(0, 3, (h, w, 3))
    img = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")
    d = ImageDraw.Draw(img)
    d.rectangle([w // 8, h // 5, w // 3, h // 2], fill=(200, 60, 40))
    d.ellipse([w // 2, h // 3, w - 8, h - 6], fill=(40, 90, 190))
    return img


def save(img: Image.Image, path) -> str:
    img.save(path)
    return str(path)


def test_all_registered():
    for name in NAMES:
        assert METRICS.get(name) is getattr(G, name)


# --------------------------------------------------------------------------- shared SSIM helper


def test_channel_last_ssim_on_one_band_is_column_wise():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (30, 20), dtype=np.uint8)
    assert channel_last_ssim(a, a) == pytest.approx(1.0)
    # a 2-D array is 20 one-dimensional column signals: a permutation of the columns permutes
    # the per-column scores and keeps their mean, which a 2-D window would not
    b = np.clip(a.astype(int) + rng.integers(-40, 40, a.shape), 0, 255).astype(np.uint8)
    perm = rng.permutation(20)
    assert channel_last_ssim(a[:, perm], b[:, perm]) == pytest.approx(channel_last_ssim(a, b))
    with pytest.raises(ValueError):
        channel_last_ssim(a[:6], a[:6])  # shorter than the 7-sample window


def test_structure_check_unifies_modes_of_the_same_size():
    img = photo()
    assert structure_check_by_ssim(img, img.convert("RGBA"))  # upstream's SSIM would raise here
    assert not structure_check_by_ssim(img, img.resize((95, 64)))


# --------------------------------------------------------------------------- gimp.py


def saturate(img: Image.Image, factor: float) -> Image.Image:
    """``img`` with its HSV saturation scaled by ``factor`` (hue and value kept)."""
    h, s, v = img.convert("HSV").split()
    s = s.point(lambda x: min(255, int(x * factor)))
    return Image.merge("HSV", (h, s, v)).convert("RGB")


def test_check_saturation_increase_and_structure_sim(tmp_path):
    f = get_metric("check_saturation_increase_and_structure_sim")
    original = photo()
    orig = save(original, tmp_path / "orig.png")
    assert f(save(saturate(original, 1.5), tmp_path / "vivid.png"), orig) == 1.0
    assert f(save(ImageEnhance.Color(original).enhance(1.2), tmp_path / "enh.png"), orig) == 1.0
    assert f(save(original, tmp_path / "copy.png"), orig) == 0.0  # unchanged: not more saturated
    assert f(save(saturate(original, 0.5), tmp_path / "dull.png"), orig) == 0.0
    # more saturated but another picture: hue/value structure differs
    other = saturate(photo(seed=5).transpose(Image.Transpose.ROTATE_180), 1.5)
    assert f(save(other, tmp_path / "other.png"), orig) == 0.0
    assert f(str(tmp_path / "missing.png"), orig) == 0.0
    assert f(None, orig) == 0.0


def test_check_file_exists_and_structure_sim(tmp_path):
    f = get_metric("check_file_exists_and_structure_sim")
    original = photo()
    orig = save(original, tmp_path / "orig.jpg")
    export = tmp_path / "export.jpg"
    shutil.copy(orig, export)
    assert f(str(export), orig) == 1.0
    assert f(save(original.convert("RGB"), tmp_path / "export2.jpg"), orig) == 1.0  # re-encoded JPEG
    assert f(str(tmp_path / "nothing.jpg"), orig) == 0.0  # not exported
    assert f(save(ImageOps.invert(original), tmp_path / "wrong.jpg"), orig) == 0.0


def _triangle_image(path, centre, half=12, size=(120, 100), marker=True) -> str:
    img = Image.new("RGB", size, (255, 255, 255))
    d = ImageDraw.Draw(img)
    cx, cy = centre
    d.polygon([(cx - half, cy + half), (cx + half, cy + half), (cx, cy - half)], fill=(255, 220, 0))
    if marker:  # a rarer third colour, so the triangle is index 1 of the ascending count order
        d.point([(2, 2), (3, 2)], fill=(0, 0, 0))
    return save(img, path)


def test_check_triangle_position(tmp_path):
    f = get_metric("check_triangle_position")
    # the polygon's centroid is a third of the way up from its base: put that at the centre
    assert f(_triangle_image(tmp_path / "mid.png", (60, 50 - 4))) == 1.0
    assert f(_triangle_image(tmp_path / "corner.png", (20, 20))) == 0.0
    assert f(_triangle_image(tmp_path / "right.png", (95, 46))) == 0.0  # centred vertically only
    # two colours: index 1 is the background (upstream's order), which a big triangle in the
    # corner still pulls off centre
    assert f(_triangle_image(tmp_path / "mid2.png", (60, 46), marker=False)) == 1.0
    assert f(_triangle_image(tmp_path / "big_corner.png", (40, 40), half=40, marker=False)) == 0.0
    assert f(save(Image.new("RGB", (50, 50), "white"), tmp_path / "blank.png")) == 0.0
    assert f(None) == 0.0


def test_check_structure_sim_resized(tmp_path):
    f = get_metric("check_structure_sim_resized")
    original = photo((128, 96))
    orig = save(original, tmp_path / "dog.png")
    resized = save(original.resize((683, 512), Image.Resampling.LANCZOS), tmp_path / "resized.png")
    assert f(orig, resized) == 1.0
    # right size, wrong content (another picture)
    other = save(photo((128, 96), seed=3).transpose(Image.Transpose.ROTATE_180).resize((683, 512)),
                 tmp_path / "other.png")
    assert f(orig, other) == 0.0
    assert f(orig, str(tmp_path / "missing.png")) == 0.0


def test_check_palette_and_structure_sim(tmp_path):
    f = get_metric("check_palette_and_structure_sim")
    original = photo()
    orig = save(original, tmp_path / "computer.png")
    palette = original.convert("P", palette=Image.Palette.ADAPTIVE, colors=256)
    assert palette.mode == "P"
    assert f(save(palette, tmp_path / "palette.png"), orig) == 1.0
    assert f(save(original, tmp_path / "rgb.png"), orig) == 0.0  # still RGB
    wrong = ImageOps.mirror(original).convert("P", palette=Image.Palette.ADAPTIVE)
    assert f(save(wrong, tmp_path / "wrong.png"), orig) == 0.0  # palette, but picture changed


def _text_image(path, x) -> str:
    img = Image.new("RGB", (200, 80), (230, 230, 230))
    ImageDraw.Draw(img).text((x, 25), "Hello", fill=(0, 0, 0), font=ImageFont.load_default(size=24))
    return save(img, path)


def test_check_textbox_on_leftside(tmp_path):
    f = get_metric("check_textbox_on_leftside")
    assert f(_text_image(tmp_path / "left.png", 2)) == 1.0
    assert f(_text_image(tmp_path / "middle.png", 80)) == 0.0
    assert f(save(Image.new("RGB", (200, 80), "white"), tmp_path / "no_text.png")) == 0.0
    assert f(str(tmp_path / "missing.png")) == 0.0


def test_check_contrast_increase_and_structure_sim(tmp_path):
    f = get_metric("check_contrast_increase_and_structure_sim")
    original = photo()
    orig = save(original, tmp_path / "berries.png")
    assert f(save(ImageEnhance.Contrast(original).enhance(1.5), tmp_path / "more.png"), orig) == 1.0
    assert f(save(ImageEnhance.Contrast(original).enhance(0.6), tmp_path / "less.png"), orig) == 0.0
    assert f(save(original, tmp_path / "same.png"), orig) == 0.0  # not higher
    noise = np.random.default_rng(2).integers(0, 256, (64, 96, 3), dtype=np.uint8)
    assert f(save(Image.fromarray(noise), tmp_path / "noise.png"), orig) == 0.0  # contrasty, wrong picture


def test_check_image_mirror(tmp_path):
    f = get_metric("check_image_mirror")
    original = photo()
    orig = save(original, tmp_path / "berry.png")
    assert f(orig, save(ImageOps.mirror(original), tmp_path / "mirror.png")) == 1.0
    assert f(orig, save(original, tmp_path / "same.png")) == 0.0
    assert f(orig, save(ImageOps.flip(original), tmp_path / "flip.png")) == 0.0  # vertical flip
    assert f(orig, str(tmp_path / "missing.png")) == 0.0


def test_check_green_background(tmp_path):
    f = get_metric("check_green_background")
    white = Image.new("RGB", (60, 40), (255, 255, 255))
    ImageDraw.Draw(white).ellipse([20, 10, 40, 30], fill=(0, 0, 0))
    tgt = save(white, tmp_path / "white_background_with_object.png")
    green = Image.new("RGBA", (60, 40), (30, 200, 40, 255))
    ImageDraw.Draw(green).ellipse([20, 10, 40, 30], fill=(0, 0, 0, 255))
    assert f(save(green, tmp_path / "green.png"), tgt) == 1.0
    assert f(tgt, tgt) == 0.0  # still white
    blue = Image.new("RGB", (60, 40), (30, 40, 200))
    assert f(save(blue, tmp_path / "blue.png"), tgt) == 0.0
    partly = green.copy()
    ImageDraw.Draw(partly).rectangle([0, 0, 5, 5], fill=(255, 255, 255, 255))  # a corner left white
    assert f(save(partly, tmp_path / "partly.png"), tgt) == 0.0
    # the object itself may be anything: only non-black target pixels are checked
    object_green = Image.new("RGB", (60, 40), (30, 200, 40))
    assert f(save(object_green, tmp_path / "all_green.png"), tgt) == 1.0
    assert f(save(Image.new("RGB", (61, 40), (0, 255, 0)), tmp_path / "size.png"), tgt) == 0.0


def test_check_image_file_size(tmp_path):
    f = get_metric("check_image_file_size")
    p = tmp_path / "compressed.jpeg"
    photo((400, 300)).save(p, quality=30)
    size = p.stat().st_size
    assert f(str(p), {"max_size": size + 1}) == 1.0
    assert f(str(p), {"max_size": size}) == 0.0  # strictly smaller
    assert f(str(tmp_path / "missing.jpeg"), {"max_size": 600000}) == 0.0
    assert f(None, {"max_size": 600000}) == 0.0


# --------------------------------------------------------------------------- slides.py


def _deck(path, pic_png, geometry=None) -> str:
    from pptx import Presentation
    from pptx.util import Inches

    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[6])
    left, top, width, height = geometry or (Inches(1), Inches(1), Inches(3), Inches(2))
    slide.shapes.add_picture(str(pic_png), left, top, width, height)
    prs.save(path)
    return str(path)


def test_check_image_stretch_and_center(tmp_path):
    pytest.importorskip("pptx", reason="python-pptx is not installed")
    from pptx.util import Inches

    f = get_metric("check_image_stretch_and_center")
    pic = save(photo(), tmp_path / "columbus.png")
    original = _deck(tmp_path / "original.pptx", pic)
    # default deck 10 x 7.5 in: a picture filling it, within the 0.5 in tolerance
    stretched = _deck(tmp_path / "stretched.pptx", pic, (Inches(0.1), Inches(0), Inches(9.8), Inches(7.5)))
    assert f(stretched, original) == 1.0
    assert f(original, original) == 0.0  # untouched
    off_centre = _deck(tmp_path / "off.pptx", pic, (Inches(1.5), Inches(0), Inches(10), Inches(7.5)))
    assert f(off_centre, original) == 0.0
    other_pic = save(ImageOps.invert(photo()), tmp_path / "other.png")
    swapped = _deck(tmp_path / "swapped.pptx", other_pic, (0, 0, Inches(10), Inches(7.5)))
    assert f(swapped, original) == 0.0  # the original image is gone
    assert f(str(tmp_path / "missing.pptx"), original) == 0.0


# --------------------------------------------------------------------------- chrome.py


def _pdf(path, images, page_size=None) -> str:
    """A PDF with one page per image (Pillow's writer embeds each image)."""
    imgs = [im.convert("RGB") for im in images]
    kwargs = {"resolution": 72.0} if page_size is None else {"resolution": page_size}
    imgs[0].save(path, "PDF", save_all=True, append_images=imgs[1:], **kwargs)
    return str(path)


def test_compare_pdf_images(tmp_path):
    pytest.importorskip("pypdf", reason="pypdf is not installed")
    f = get_metric("compare_pdf_images")
    receipt = photo((120, 160))
    gold = _pdf(tmp_path / "gold.pdf", [receipt])
    assert f(_pdf(tmp_path / "same.pdf", [receipt]), gold) == 1.0
    edited = receipt.copy()
    edited.putpixel((5, 5), (0, 0, 0))
    assert f(_pdf(tmp_path / "edited.pdf", [edited]), gold) == 0.0  # one pixel differs
    assert f(_pdf(tmp_path / "two.pdf", [receipt, receipt]), gold) == 0.0  # extra page
    assert f(_pdf(tmp_path / "scaled.pdf", [receipt], page_size=144.0), gold) == 0.0  # other page size
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(b"not a pdf")
    assert f(str(bad), gold) == 0.0
    assert f(None, gold) == 0.0


# --------------------------------------------------------------------------- docs.py


def _terminal_shot(path, command_line) -> str:
    img = Image.new("RGB", (700, 160), (0, 0, 0))
    d = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=32)
    d.text((10, 10), command_line, fill=(255, 255, 255), font=font)
    d.text((10, 70), "Desktop  Documents  Music", fill=(255, 255, 255), font=font)
    return save(img, path)


def test_compare_image_text_reads_the_screenshot(tmp_path):
    pytest.importorskip("pytesseract", reason="pytesseract is not installed (pip install pytesseract)")
    if shutil.which("tesseract") is None:
        pytest.skip("the tesseract binary is not installed (apt-get install tesseract-ocr)")
    f = get_metric("compare_image_text")
    rule = {"type": "text", "text": " Ls"}  # the task's rule (easyocr's reading of "ls")
    assert f(_terminal_shot(tmp_path / "ls.png", "user@ubuntu:~$ ls"), rule) == 1.0
    assert f(_terminal_shot(tmp_path / "pwd.png", "user@ubuntu:~$ pwd"), rule) == 0.0
    assert f(str(tmp_path / "missing.png"), rule) == 0.0
    with pytest.raises(ValueError):
        f(str(tmp_path / "ls.png"), {"type": "regex", "text": "ls"})


def test_compare_image_text_names_a_missing_ocr(tmp_path, monkeypatch):
    shot = _terminal_shot(tmp_path / "ls.png", "user@ubuntu:~$ ls")
    f = get_metric("compare_image_text")
    monkeypatch.setitem(sys.modules, "pytesseract", None)  # import raises ImportError
    with pytest.raises(MetricDependencyError, match="pytesseract"):
        f(shot, {"type": "text", "text": "ls"})
    monkeypatch.undo()
    pytesseract = pytest.importorskip("pytesseract", reason="pytesseract is not installed")
    monkeypatch.setattr(pytesseract.pytesseract, "tesseract_cmd", str(tmp_path / "no-tesseract"))
    with pytest.raises(MetricDependencyError, match="tesseract-ocr"):
        f(shot, {"type": "text", "text": "ls"})
