"""OSWorld Impress metrics (slides.py), the LibreOffice-settings metrics, the Impress getters
audio_in_slide / background_image_in_slide, and compare_table's sheet-setting rules (freeze, zoom,
data_validation, row_props, col_props, filter, sparkline).

Inputs are real files made here: presentations with python-pptx (transitions, backgrounds and
media parts added at the XML/part level, as LibreOffice writes them), workbooks with openpyxl,
``registrymodifications.xcu`` written by a real LibreOffice (a Basic macro sets the options
through the configuration API) when soffice is installed. Getters run against a fake client that
serves desktop files.
"""
from __future__ import annotations

import io
import math
import shutil
import subprocess
import wave
import zipfile
from pathlib import Path
from typing import Any, Optional

import pytest

from guigym.core.errors import TaskSpecError
from guigym.envs.desktop.evaluators import get
from guigym.envs.desktop.evaluators import get_metric
from guigym.envs.desktop.evaluators.metrics.table import compare_table

pptx = pytest.importorskip("pptx", reason="python-pptx (desktop extra) is not installed")
openpyxl = pytest.importorskip("openpyxl", reason="openpyxl (desktop extra) is not installed")
pytest.importorskip("pandas", reason="pandas (desktop extra) is not installed")

from lxml import etree  # noqa: E402  (python-pptx depends on lxml)
from pptx.dml.color import RGBColor  # noqa: E402
from pptx.opc.constants import RELATIONSHIP_TYPE as RT  # noqa: E402
from pptx.opc.package import Part  # noqa: E402
from pptx.opc.packuri import PackURI  # noqa: E402
from pptx.util import Inches  # noqa: E402

NS_P = "http://schemas.openxmlformats.org/presentationml/2006/main"
NS_A = "http://schemas.openxmlformats.org/drawingml/2006/main"
NS_R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"


def m(name: str):
    return get_metric(name)


def _deck(n: int = 2) -> Any:
    prs = pptx.Presentation()
    for i in range(n):
        prs.slides.add_slide(prs.slide_layouts[6]).shapes.add_textbox(0, 0, Inches(2), Inches(1)).text = f"s{i}"
    return prs


def _save(prs: Any, path: Path) -> str:
    prs.save(str(path))
    return str(path)


# --------------------------------------------------------------------------- registrymodifications.xcu

XCU_HEAD = ('<?xml version="1.0" encoding="UTF-8"?>\n<oor:items xmlns:oor="http://openoffice.org/2001/registry" '
            'xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">\n')

_MACRO = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE script:module PUBLIC "-//OpenOffice.org//DTD OfficeDocument 1.0//EN" "module.dtd">
<script:module xmlns:script="http://openoffice.org/2000/script" script:name="Module1" script:language="StarBasic">
Sub SetOpt(node As String, prop As String, v As Variant)
  Dim args(0) As New com.sun.star.beans.PropertyValue
  args(0).Name = &quot;nodepath&quot;
  args(0).Value = node
  cp = createUnoService(&quot;com.sun.star.configuration.ConfigurationProvider&quot;)
  acc = cp.createInstanceWithArguments(&quot;com.sun.star.configuration.ConfigurationUpdateAccess&quot;, args())
  acc.replaceByName(prop, v)
  acc.commitChanges()
End Sub
Sub Main
  SetOpt(&quot;/org.openoffice.Office.Common/Save/Document&quot;, &quot;AutoSaveTimeIntervall&quot;, MINUTES)
  SetOpt(&quot;/org.openoffice.Office.Impress/Misc/Start&quot;, &quot;EnablePresenterScreen&quot;, PRESENTER)
End Sub
</script:module>
"""


def _soffice(profile: Path, *args: str) -> None:
    subprocess.run(["soffice", f"-env:UserInstallation={profile.as_uri()}", "--headless", "--norestore", *args],
                   check=True, timeout=180, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def lo_xcu(tmp_path_factory) -> dict[str, str]:
    """registrymodifications.xcu files written by LibreOffice itself: ``fresh`` (first start),
    ``set`` (autosave 3 min, presenter screen off), ``other`` (autosave 10 min, presenter on)."""
    if shutil.which("soffice") is None:
        pytest.skip("LibreOffice (soffice) is not installed; cannot make a real registrymodifications.xcu")
    base = tmp_path_factory.mktemp("lo")
    out: dict[str, str] = {}
    for key, minutes, presenter in (("set", 3, "False"), ("other", 10, "True")):
        profile = base / key
        _soffice(profile, "--terminate_after_init")  # first start writes a fresh profile
        xcu = profile / "user" / "registrymodifications.xcu"
        if "fresh" not in out:
            shutil.copy(xcu, base / "fresh.xcu")
            out["fresh"] = str(base / "fresh.xcu")
        module = profile / "user" / "basic" / "Standard" / "Module1.xba"
        module.write_text(_MACRO.replace("MINUTES", str(minutes)).replace("PRESENTER", presenter))
        _soffice(profile, "macro:///Standard.Module1.Main")
        out[key] = str(xcu)
    return out


def test_settings_metrics_on_libreoffice_written_xcu(lo_xcu: dict[str, str]) -> None:
    assert "AutoSaveTimeIntervall" in Path(lo_xcu["set"]).read_text()  # LibreOffice wrote the settings
    assert m("check_auto_saving_time")(lo_xcu["set"], {"minutes": 3}) == 1.0
    assert m("check_auto_saving_time")(lo_xcu["set"], {"minutes": 5}) == 0.0
    assert m("check_auto_saving_time")(lo_xcu["other"], {"minutes": 3}) == 0.0
    assert m("check_auto_saving_time")(lo_xcu["fresh"], {"minutes": 10}) == 0.0  # default not written
    assert m("check_presenter_console_disable")(lo_xcu["set"]) == 1.0
    assert m("check_presenter_console_disable")(lo_xcu["other"]) == 0.0          # explicitly enabled
    assert m("check_presenter_console_disable")(lo_xcu["fresh"]) == 0.0          # default: enabled


def test_settings_metrics_on_hand_written_xcu(tmp_path: Path) -> None:
    def xcu(body: str) -> str:
        p = tmp_path / f"r{len(list(tmp_path.iterdir()))}.xcu"
        p.write_text(XCU_HEAD + body + "\n</oor:items>\n")
        return str(p)

    presenter = ('<item oor:path="/org.openoffice.Office.Impress/Misc/Start"><prop oor:name="EnablePresenterScreen" '
                 'oor:op="fuse"><value>{}</value></prop></item>')
    autosave = ('<item oor:path="/org.openoffice.Office.Common/Save/Document"><prop oor:name="AutoSaveTimeIntervall" '
                'oor:op="fuse"><value>{}</value></prop></item>')
    f_pres, f_auto = m("check_presenter_console_disable"), m("check_auto_saving_time")
    assert f_pres(xcu(presenter.format("FALSE"))) == 1.0
    assert f_pres(xcu(presenter.format("true"))) == 0.0
    # the same prop name on another path does not count
    assert f_pres(xcu(presenter.format("false").replace("Misc/Start", "Misc/Other"))) == 0.0
    assert f_auto(xcu(autosave.format("7")), {"minutes": 7}) == 1.0
    assert f_auto(xcu(autosave.format("7") + autosave.format("8")), {"minutes": 8}) == 1.0  # the last one wins
    assert f_auto(xcu(autosave.format("soon")), {"minutes": 7}) == 0.0
    # a prop inside a nested node belongs to another path
    nested = ('<item oor:path="/org.openoffice.Office.Common/Save/Document"><node oor:name="X">'
              '<prop oor:name="AutoSaveTimeIntervall"><value>7</value></prop></node></item>')
    assert f_auto(xcu(nested), {"minutes": 7}) == 0.0
    broken = tmp_path / "broken.xcu"
    broken.write_text(XCU_HEAD + autosave.format("7"))  # truncated file
    assert f_auto(str(broken), {"minutes": 7}) == 0.0 and f_pres(str(broken)) == 0.0
    assert f_auto(str(tmp_path / "missing.xcu"), {"minutes": 7}) == 0.0 and f_pres(None) == 0.0


# --------------------------------------------------------------------------- accessibility tree

NEW_NS = ('xmlns:st="https://accessibility.ubuntu.example.org/ns/state" '
          'xmlns:cp="https://accessibility.ubuntu.example.org/ns/component"')


def _impress_tree(pane: str, ns: str = NEW_NS) -> str:
    return (f'<desktop-frame {ns}><application name="soffice"><frame name="x.pptx - LibreOffice Impress">'
            f'<root-pane st:visible="true" cp:screencoord="(0, 0)"><panel cp:screencoord="(0, 64)">'
            f'<panel cp:screencoord="(0, 64)">{pane}<document-presentation/></panel>'
            f'</panel></root-pane></frame></application></desktop-frame>')


def test_check_left_panel_current_and_legacy_trees() -> None:
    f = m("check_left_panel")
    assert f(_impress_tree('<split-pane st:visible="true" cp:screencoord="(0, 64)" cp:size="(200, 900)"/>')) == 1.0
    # a pane elsewhere (the slide pane is closed; only the sidebar's split pane is left)
    assert f(_impress_tree('<split-pane st:visible="true" cp:screencoord="(1500, 64)"/>')) == 0.0
    assert f(_impress_tree('<split-pane cp:screencoord="(0, 64)"/>')) == 0.0           # not visible
    assert f(_impress_tree('<split-pane st:visible="false" cp:screencoord="(0, 64)"/>')) == 0.0
    assert f(_impress_tree("")) == 0.0
    # a split pane outside any root-pane does not count
    assert f(f'<desktop-frame {NEW_NS}><panel><split-pane st:visible="true" cp:screencoord="(0, 0)"/>'
             '</panel></desktop-frame>') == 0.0
    legacy = 'xmlns:st="uri:deskat:state.at-spi.gnome.org" xmlns:cp="uri:deskat:component.at-spi.gnome.org"'
    assert f(_impress_tree('<split-pane st:visible="true" cp:parentcoord="(0, 0)"/>', legacy)) == 1.0
    assert f(_impress_tree('<split-pane st:visible="true" cp:parentcoord="(0, 30)"/>', legacy)) == 0.0
    assert f("<desktop-frame><root-pane>") == 0.0 and f(None) == 0.0


# --------------------------------------------------------------------------- presentations


def test_check_slide_orientation_portrait(tmp_path: Path) -> None:
    f = m("check_slide_orientation_Portrait")
    prs = _deck(1)
    assert f(_save(prs, tmp_path / "landscape.pptx")) == 0.0  # python-pptx's default 10 x 7.5 in
    prs.slide_width, prs.slide_height = Inches(7.5), Inches(10)
    assert f(_save(prs, tmp_path / "portrait.pptx")) == 1.0
    prs.slide_width = prs.slide_height
    assert f(_save(prs, tmp_path / "square.pptx")) == 0.0
    (tmp_path / "junk.pptx").write_bytes(b"not a zip")
    assert f(str(tmp_path / "junk.pptx")) == 0.0


def test_fill_to_rgb_distance(tmp_path: Path) -> None:
    f = m("evaluate_presentation_fill_to_rgb_distance")
    blue = {"rgb": [0, 0, 255]}
    prs = _deck(2)
    for slide in prs.slides:
        slide.background.fill.solid()
        slide.background.fill.fore_color.rgb = RGBColor(0, 0, 255)
    assert f(_save(prs, tmp_path / "blue.pptx"), blue) == pytest.approx(1.0)

    prs.slides[1].background.fill.fore_color.rgb = RGBColor(255, 255, 255)  # one slide left white
    white_distance = math.sqrt(2 * 255 ** 2) / math.sqrt(3 * 255 ** 2)
    assert f(_save(prs, tmp_path / "half.pptx"), blue) == pytest.approx(1 - white_distance / 2)

    prs = _deck(2)  # no own background: the master's solid fill shows
    prs.slide_master.background.fill.solid()
    prs.slide_master.background.fill.fore_color.rgb = RGBColor(0, 0, 255)
    assert f(_save(prs, tmp_path / "master.pptx"), blue) == pytest.approx(1.0)

    prs.slides[0].background.fill.gradient()  # a gradient is at distance 1
    assert f(_save(prs, tmp_path / "gradient.pptx"), blue) == pytest.approx(0.5)
    assert f(_save(_deck(2), tmp_path / "plain.pptx"), blue) == 0.0  # no solid fill anywhere
    assert f(_save(_deck(0), tmp_path / "empty.pptx"), blue) == 0.0
    assert f(None, blue) == 0.0


def _add_transition(slide: Any, xml: str) -> None:
    """Insert a transition element after <p:clrMapOvr> (the schema's place for it)."""
    el = etree.fromstring(xml)
    sld = slide._element
    anchor = sld.find(f"{{{NS_P}}}clrMapOvr")
    (anchor if anchor is not None else sld.find(f"{{{NS_P}}}cSld")).addnext(el)


DISSOLVE = f'<p:transition xmlns:p="{NS_P}" spd="med"><p:dissolve/></p:transition>'
FADE = f'<p:transition xmlns:p="{NS_P}" spd="med"><p:fade/></p:transition>'
# LibreOffice wraps transitions that carry p14 attributes in mc:AlternateContent
LO_DISSOLVE = ('<mc:AlternateContent xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006" '
               'xmlns:p14="http://schemas.microsoft.com/office/powerpoint/2010/main">'
               f'<mc:Choice Requires="p14"><p:transition xmlns:p="{NS_P}" spd="slow" p14:dur="2000">'
               '<p:dissolve/></p:transition></mc:Choice>'
               f'<mc:Fallback><p:transition xmlns:p="{NS_P}" spd="slow"><p:dissolve/></p:transition></mc:Fallback>'
               '</mc:AlternateContent>')


def test_check_transition(tmp_path: Path) -> None:
    f = m("check_transition")
    rules = {"slide_idx": 0, "transition_type": "dissolve"}
    prs = _deck(2)
    _add_transition(prs.slides[0], DISSOLVE)
    path = _save(prs, tmp_path / "t.pptx")
    assert f(path, rules) == 1.0
    assert f(path, {**rules, "transition_type": "fade"}) == 0.0
    assert f(path, {**rules, "slide_idx": 1}) == 0.0  # slide 2 has none
    assert f(path, {**rules, "slide_idx": 7}) == 0.0

    prs = _deck(2)
    _add_transition(prs.slides[0], FADE)
    _add_transition(prs.slides[1], DISSOLVE)
    path = _save(prs, tmp_path / "wrong_slide.pptx")
    assert f(path, rules) == 0.0 and f(path, {**rules, "slide_idx": 1}) == 1.0

    # slides are counted in presentation order: move the second slide (slide2.xml) to the front
    ids = prs.slides._sldIdLst
    second = list(ids)[1]
    ids.remove(second)
    ids.insert(0, second)
    assert f(_save(prs, tmp_path / "moved.pptx"), rules) == 1.0

    prs = _deck(1)
    _add_transition(prs.slides[0], LO_DISSOLVE)
    assert f(_save(prs, tmp_path / "lo.pptx"), rules) == 1.0
    assert f(None, rules) == 0.0


def _master_colours(tmp_path: Path, number_rgb: str, name: str) -> str:
    """A deck whose master has the slide-number placeholder coloured ``number_rgb`` and, after it
    in the shape tree, the footer coloured black: the slide number's colour is the second-to-last
    srgbClr of the master, as in LibreOffice's export OSWorld's check reads."""
    prs = _deck(1)
    master = prs.slide_master
    by_type = {ph.placeholder_format.type: ph for ph in master.placeholders}
    from pptx.enum.shapes import PP_PLACEHOLDER

    number, footer = by_type[PP_PLACEHOLDER.SLIDE_NUMBER], by_type[PP_PLACEHOLDER.FOOTER]
    number.text_frame.paragraphs[0].font.color.rgb = RGBColor.from_string(number_rgb)
    footer.text_frame.paragraphs[0].font.color.rgb = RGBColor.from_string("000000")
    tree = number._element.getparent()
    tree.remove(footer._element)
    number._element.addnext(footer._element)
    return _save(prs, tmp_path / name)


def test_check_page_number_colors(tmp_path: Path) -> None:
    f = m("check_page_number_colors")
    red = _master_colours(tmp_path, "FF0000", "red.pptx")
    assert f(red, {"color": "red"}) == 1.0
    assert f(red, {"color": "blue"}) == 0.0
    assert f(red, {"color": "black"}) == 0.0
    # dark red counts as red (OSWorld reads the hex one digit off and would say no)
    assert f(_master_colours(tmp_path, "C00000", "dark.pptx"), {"color": "red"}) == 1.0
    blue = _master_colours(tmp_path, "1F4E9F", "blue.pptx")
    assert f(blue, {"color": "blue"}) == 1.0 and f(blue, {"color": "red"}) == 0.0
    assert f(_master_colours(tmp_path, "202020", "black.pptx"), {"color": "black"}) == 1.0
    # python-pptx's own master has no RGB colours at all: nothing to read
    assert f(_save(_deck(1), tmp_path / "plain.pptx"), {"color": "red"}) == 0.0
    assert f(None, {"color": "red"}) == 0.0


# --------------------------------------------------------------------------- getters


class FakeClient:
    """Serves desktop files from a dict; records the paths asked for."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.asked: list[str] = []

    def get_file(self, path: str) -> Optional[bytes]:
        self.asked.append(path)
        return self.files.get(path)


def _wav(seconds: float = 0.1, rate: int = 8000) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\x01\x02" * int(seconds * rate))
    return buf.getvalue()


def _png(colour: str) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (16, 9), colour).save(buf, format="PNG")
    return buf.getvalue()


def _audio_deck(path: Path, wav: bytes, external: Optional[str] = None) -> bytes:
    """Two slides; the first relates to an audio part (or an external file url)."""
    prs = _deck(2)
    slide_part = prs.slides[0].part
    if external:
        slide_part.relate_to(external, RT.AUDIO, is_external=True)
    else:
        media = Part(PackURI("/ppt/media/media1.wav"), "audio/x-wav", slide_part.package, wav)
        slide_part.relate_to(media, RT.AUDIO)
    prs.save(str(path))
    return path.read_bytes()


def test_audio_in_slide_extracts_the_embedded_audio(tmp_path: Path) -> None:
    wav = _wav()
    deck = _audio_deck(tmp_path / "src.pptx", wav)
    client = FakeClient({"/home/user/Desktop/Baseball.pptx": deck})
    spec = {"type": "audio_in_slide", "ppt_file_path": "/home/user/Desktop/Baseball.pptx", "slide_index": 0,
            "dest": "Baseball.mp3"}
    cache = tmp_path / "cache"
    got = get(client, spec, cache)
    assert got == str((cache / "Baseball.mp3").resolve())
    assert Path(got).read_bytes() == wav
    assert (cache / "Baseball.pptx").read_bytes() == deck  # the presentation as vm_file would copy it
    assert get(client, {**spec, "slide_index": 1}, cache) is None   # second slide has no audio
    assert get(client, {**spec, "slide_index": "5"}, cache) is None  # no such slide
    assert get(FakeClient({}), spec, cache) is None                   # presentation missing
    assert get(FakeClient({spec["ppt_file_path"]: b"not a zip"}), spec, cache) is None
    with pytest.raises(TaskSpecError, match="slide_index"):
        get(client, {k: v for k, v in spec.items() if k != "slide_index"}, cache)
    with pytest.raises(TaskSpecError, match="outside"):
        get(client, {**spec, "dest": "../escape.wav"}, cache)


def test_audio_in_slide_copies_a_linked_audio_from_the_desktop(tmp_path: Path) -> None:
    wav = _wav(0.2)
    deck = _audio_deck(tmp_path / "src.pptx", wav, external="file:///home/user/Music/planet%20song.wav")
    client = FakeClient({"/home/user/Desktop/talk.pptx": deck, "/home/user/Music/planet song.wav": wav})
    spec = {"type": "audio_in_slide", "ppt_file_path": "/home/user/Desktop/talk.pptx", "slide_index": 0,
            "dest": "planet.wav"}
    got = get(client, spec, tmp_path / "cache")
    assert Path(got).read_bytes() == wav
    assert client.asked == ["/home/user/Desktop/talk.pptx", "/home/user/Music/planet song.wav"]
    del client.files["/home/user/Music/planet song.wav"]  # the linked file is gone
    assert get(client, spec, tmp_path / "cache2") is None


def _background_deck(path: Path, image: bytes, slide_no: int = 1, as_picture_shape: bool = False) -> bytes:
    """Two slides; slide ``slide_no`` gets ``image`` as its own background (``<p:bg>``) or, with
    ``as_picture_shape``, as an ordinary picture on the slide."""
    prs = _deck(2)
    slide = prs.slides[slide_no]
    if as_picture_shape:
        slide.shapes.add_picture(io.BytesIO(image), 0, 0)
    else:
        _, rid = slide.part.get_or_add_image_part(io.BytesIO(image))
        bg = etree.fromstring(
            f'<p:bg xmlns:p="{NS_P}" xmlns:a="{NS_A}" xmlns:r="{NS_R}"><p:bgPr><a:blipFill dpi="0" rotWithShape="1">'
            f'<a:blip r:embed="{rid}"/><a:srcRect/><a:stretch><a:fillRect/></a:stretch></a:blipFill>'
            '<a:effectLst/></p:bgPr></p:bg>')
        slide._element.find(f"{{{NS_P}}}cSld").insert(0, bg)
    prs.save(str(path))
    return path.read_bytes()


def test_background_image_in_slide(tmp_path: Path) -> None:
    landscape = _png("green")
    deck = _background_deck(tmp_path / "src.pptx", landscape, slide_no=1)
    client = FakeClient({"/home/user/Desktop/Robotic.pptx": deck})
    spec = {"type": "background_image_in_slide", "ppt_file_path": "/home/user/Desktop/Robotic.pptx",
            "slide_index": 1, "dest": "landscape.png"}
    got = get(client, spec, tmp_path / "cache")
    assert Path(got).name == "landscape.png" and Path(got).read_bytes() == landscape
    assert get(client, {**spec, "slide_index": 0}, tmp_path / "cache") is None  # no background there
    # the picture placed on the slide instead of as its background does not count
    shape_deck = _background_deck(tmp_path / "shape.pptx", landscape, slide_no=1, as_picture_shape=True)
    assert get(FakeClient({spec["ppt_file_path"]: shape_deck}), spec, tmp_path / "cache") is None
    assert get(FakeClient({}), spec, tmp_path / "cache") is None


# --------------------------------------------------------------------------- compare_table sheet settings


def _book(path: Path, edit=None) -> str:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Sheet1"
    for r in range(1, 31):
        ws.append([f"name{r}", r, r * 2, "Pass" if r % 2 else "Fail"])
    if edit is not None:
        edit(ws)
    wb.save(path)
    return str(path)


def test_compare_table_freeze(tmp_path: Path) -> None:
    def freeze(cell):
        return lambda ws: setattr(ws, "freeze_panes", cell)

    gold = _book(tmp_path / "gold.xlsx", freeze("B2"))
    rules = [{"type": "freeze", "sheet_idx0": 0, "sheet_idx1": "EI0"}]
    assert compare_table(_book(tmp_path / "ok.xlsx", freeze("B2")), gold, rules=rules) == 1.0
    assert compare_table(_book(tmp_path / "row.xlsx", freeze("A2")), gold, rules=rules) == 0.0
    assert compare_table(_book(tmp_path / "none.xlsx"), gold, rules=rules) == 0.0
    assert compare_table(_book(tmp_path / "ok2.xlsx", freeze("B2")), gold,
                         rules=[{"type": "freeze", "sheet_idx0": "RNNope", "sheet_idx1": "EI0"}]) == 0.0


def test_compare_table_zoom(tmp_path: Path) -> None:
    def zoom(scale):
        return lambda ws: setattr(ws.sheet_view, "zoomScale", scale)

    rules = [{"type": "zoom", "sheet_idx": 0, "method": "lt", "ref": 260}]
    assert compare_table(_book(tmp_path / "a.xlsx", zoom(200)), rules=rules) == 1.0
    assert compare_table(_book(tmp_path / "b.xlsx", zoom(300)), rules=rules) == 0.0
    assert compare_table(_book(tmp_path / "c.xlsx"), rules=rules) == 1.0  # unset: 100 %
    assert compare_table(_book(tmp_path / "d.xlsx", zoom(150)),
                         rules=[{**rules[0], "method": "approx:1", "ref": 150}]) == 1.0


# the rule of OSWorld task ecb0df7a (a Pass/Fail/Held drop-down over D2:D29)
DV_RULE = {"type": "data_validation", "sheet_idx": 0, "dv_props": [
    {"ranges": {"method": "spreadsheet_range", "ref": ["D2:D29", "D2:D1048576"]},
     "type": {"method": "eq", "ref": "list"},
     "formula1": {"method": "str_set_eq", "ref": ["Pass", "Fail", "Held"]}}]}


def _dv(sqref: str, formula: str, kind: str = "list"):
    from openpyxl.worksheet.datavalidation import DataValidation

    def edit(ws):
        dv = DataValidation(type=kind, formula1=formula, allow_blank=True)
        dv.add(sqref)
        ws.add_data_validation(dv)
    return edit


def test_compare_table_data_validation(tmp_path: Path) -> None:
    rules = [DV_RULE]
    assert compare_table(_book(tmp_path / "ok.xlsx", _dv("D2:D29", '"Held,Pass,Fail"')), rules=rules) == 1.0
    assert compare_table(_book(tmp_path / "col.xlsx", _dv("D2:D1048576", '"Pass,Fail,Held"')), rules=rules) == 1.0
    assert compare_table(_book(tmp_path / "short.xlsx", _dv("D2:D10", '"Pass,Fail,Held"')), rules=rules) == 0.0
    assert compare_table(_book(tmp_path / "wide.xlsx", _dv("C2:D29", '"Pass,Fail,Held"')), rules=rules) == 0.0
    assert compare_table(_book(tmp_path / "two.xlsx", _dv("D2:D29", '"Pass,Fail"')), rules=rules) == 0.0
    assert compare_table(_book(tmp_path / "whole.xlsx", _dv("D2:D29", "0", kind="whole")), rules=rules) == 0.0
    assert compare_table(_book(tmp_path / "none.xlsx"), rules=rules) == 0.0
    assert compare_table(_book(tmp_path / "noformula.xlsx", _dv("D2:D29", None)), rules=rules) == 0.0

    def both(ws):  # an extra validation that matches no entry fails the rule, as upstream
        _dv("D2:D29", '"Pass,Fail,Held"')(ws)
        _dv("B2:B29", "0", kind="whole")(ws)
    assert compare_table(_book(tmp_path / "extra.xlsx", both), rules=rules) == 0.0


def test_compare_table_row_and_col_props(tmp_path: Path) -> None:
    def hide(*rows, width=None):
        def edit(ws):
            for r in rows:
                ws.row_dimensions[r].hidden = True
            if width is not None:
                ws.column_dimensions["B"].width = width
        return edit

    gold = _book(tmp_path / "gold.xlsx", hide(3, 5, width=30))
    rows = [{"type": "row_props", "sheet_idx0": 0, "sheet_idx1": "EI0", "props": ["hidden"]}]
    cols = [{"type": "col_props", "sheet_idx0": 0, "sheet_idx1": "EI0", "props": ["width", "hidden"]}]
    ok = _book(tmp_path / "ok.xlsx", hide(3, 5, width=30))
    assert compare_table(ok, gold, rules=rows + cols) == 1.0
    assert compare_table(_book(tmp_path / "one.xlsx", hide(3, width=30)), gold, rules=rows) == 0.0
    assert compare_table(_book(tmp_path / "more.xlsx", hide(3, 4, 5, width=30)), gold, rules=rows) == 0.0
    assert compare_table(_book(tmp_path / "narrow.xlsx", hide(3, 5, width=12)), gold, rules=cols) == 0.0


def test_compare_table_filter(tmp_path: Path) -> None:
    def autofilter(values, sort_desc=None):
        def edit(ws):
            ws.auto_filter.ref = "A1:D30"
            ws.auto_filter.add_filter_column(3, values)
            if sort_desc is not None:
                ws.auto_filter.add_sort_condition("B2:B30", descending=sort_desc)
        return edit

    gold = _book(tmp_path / "gold.xlsx", autofilter(["Pass"], sort_desc=True))
    rules = [{"type": "filter", "sheet_idx0": 0, "sheet_idx1": "EI0"}]
    assert compare_table(_book(tmp_path / "ok.xlsx", autofilter(["Pass"], sort_desc=True)), gold, rules=rules) == 1.0
    assert compare_table(_book(tmp_path / "fail.xlsx", autofilter(["Fail"], sort_desc=True)), gold, rules=rules) == 0.0
    assert compare_table(_book(tmp_path / "asc.xlsx", autofilter(["Pass"], sort_desc=False)), gold, rules=rules) == 0.0
    assert compare_table(_book(tmp_path / "none.xlsx"), gold, rules=rules) == 0.0


SPARKLINES = ('<extLst><ext uri="{{05C60535-1F16-4fd2-B633-F4F36F0B64E0}}" '
              'xmlns:x14="http://schemas.microsoft.com/office/spreadsheetml/2009/9/main">'
              '<x14:sparklineGroups xmlns:xm="http://schemas.microsoft.com/office/excel/2006/main">'
              '<x14:sparklineGroup><x14:sparklines>{}</x14:sparklines></x14:sparklineGroup>'
              '</x14:sparklineGroups></ext></extLst>')


def _with_sparklines(path: Path, lines: dict[str, str]) -> str:
    """Add x14 sparklines (cell -> data range) to sheet1's XML, as Excel/LibreOffice write them
    (openpyxl cannot write sparklines)."""
    src = _book(path.with_suffix(".plain.xlsx"))
    body = "".join(f"<x14:sparkline><xm:f>{rng}</xm:f><xm:sqref>{cell}</xm:sqref></x14:sparkline>"
                   for cell, rng in lines.items())
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(path, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename == "xl/worksheets/sheet1.xml" and lines:
                data = data.replace(b"</worksheet>", SPARKLINES.format(body).encode() + b"</worksheet>")
            zout.writestr(item, data)
    return str(path)


def test_compare_table_sparkline(tmp_path: Path) -> None:
    from guigym.envs.desktop.evaluators.metrics.table_rules import load_sparklines

    gold = _with_sparklines(tmp_path / "gold.xlsx", {"E1": "Sheet1!B1:C1", "E2": "Sheet1!B2:C2"})
    assert load_sparklines(gold, "Sheet1") == {"E1": "Sheet1!B1:C1", "E2": "Sheet1!B2:C2"}
    rules = [{"type": "sparkline", "sheet_idx0": 0, "sheet_idx1": "EI0"}]
    ok = _with_sparklines(tmp_path / "ok.xlsx", {"E2": "Sheet1!B2:C2", "E1": "Sheet1!B1:C1"})
    assert compare_table(ok, gold, rules=rules) == 1.0
    other = _with_sparklines(tmp_path / "other.xlsx", {"E1": "Sheet1!B1:D1", "E2": "Sheet1!B2:C2"})
    assert compare_table(other, gold, rules=rules) == 0.0
    assert compare_table(_with_sparklines(tmp_path / "none.xlsx", {}), gold, rules=rules) == 0.0
    assert load_sparklines(gold, "Nope") == {}


@pytest.fixture(scope="module")
def lo_saved(tmp_path_factory) -> dict[str, str]:
    """Workbooks made with openpyxl and saved again by LibreOffice Calc (its own xlsx writer).
    A headless conversion has no view, so freeze panes and zoom are not kept; validation and
    hidden rows are."""
    if shutil.which("soffice") is None:
        pytest.skip("LibreOffice (soffice) is not installed; cannot save workbooks with Calc")
    base = tmp_path_factory.mktemp("calc")
    src = base / "src"
    src.mkdir()

    def settings(hidden_rows):
        def edit(ws):
            _dv("D2:D29", '"Pass,Fail,Held"')(ws)
            for r in hidden_rows:
                ws.row_dimensions[r].hidden = True
        return edit

    names = {"gold": (3,), "same": (3,), "other": (4,)}
    for name, rows in names.items():
        _book(src / f"{name}.xlsx", settings(rows))
    out = base / "out"
    profile = base / "profile"
    _soffice(profile, "--convert-to", "xlsx:Calc MS Excel 2007 XML", "--outdir", str(out),
             *[str(src / f"{n}.xlsx") for n in names])
    for n in names:
        if not (out / f"{n}.xlsx").exists():
            pytest.skip("LibreOffice did not convert the workbooks")
    return {n: str(out / f"{n}.xlsx") for n in names}


def test_compare_table_rules_on_libreoffice_saved_books(lo_saved: dict[str, str]) -> None:
    rows = {"type": "row_props", "sheet_idx0": 0, "sheet_idx1": "EI0", "props": ["hidden"]}
    assert compare_table(lo_saved["same"], lo_saved["gold"], rules=[DV_RULE, rows]) == 1.0
    assert compare_table(lo_saved["other"], lo_saved["gold"], rules=[DV_RULE]) == 1.0
    assert compare_table(lo_saved["other"], lo_saved["gold"], rules=[DV_RULE, rows]) == 0.0  # row 4 hidden, not 3
    gold_ws = openpyxl.load_workbook(lo_saved["gold"]).active
    assert gold_ws.row_dimensions[3].hidden and len(gold_ws.data_validations.dataValidation) == 1  # Calc wrote them
