"""OSWorld metrics diff_text_file, check_csv (general.py), check_image_size, compare_image_list
(gimp.py) and is_expected_tabs (chrome.py) on files generated here: each scores 1 on a match and
0 (or the partial ratio, for diff_text_file) on a specific difference."""
from __future__ import annotations

import difflib

import pytest
from PIL import Image

from guigym.envs.desktop.evaluators import get_metric


def test_diff_text_file_is_the_line_sequence_ratio(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("one\ntwo\nthree\n")
    b.write_text("one\ntwo\nthree\n")
    f = get_metric("diff_text_file")
    assert f(str(a), str(b)) == 1.0
    b.write_text("one\n2\nthree\nfour\n")
    # 2 of 3 + 4 lines match: 2 * 2 / 7
    assert f(str(a), str(b)) == pytest.approx(4 / 7)
    assert f(str(a), str(b)) == pytest.approx(difflib.SequenceMatcher(a=["one", "two", "three"],
                                                                      b=["one", "2", "three", "four"]).ratio())
    assert f(None, str(b)) == 0.0


def test_check_csv_expect_and_unexpect_rows(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("name,qty\napple,3\npear,5\n")
    f = get_metric("check_csv")
    assert f(str(p), {"expect": [{"name": "apple", "qty": "3"}, {"name": "pear"}]}) == 1.0
    assert f(str(p), {"expect": [{"name": "apple", "qty": "4"}]}) == 0.0       # value differs
    assert f(str(p), {"expect": [{"colour": "red"}]}) == 0.0                    # no such column
    assert f(str(p), {"expect": [{"name": "apple"}], "unexpect": [{"name": "pear"}]}) == 0.0
    assert f(str(p), {"expect": [{"name": "apple"}], "unexpect": [{"name": "plum"}]}) == 1.0
    assert f(None, {"expect": []}) == 0.0


def test_check_image_size_checks_only_the_given_sides(tmp_path):
    p = tmp_path / "i.png"
    Image.new("RGB", (40, 30), "white").save(p)
    f = get_metric("check_image_size")
    assert f(str(p), {"width": 40, "height": 30}) == 1.0
    assert f(str(p), {"width": 40}) == 1.0
    assert f(str(p), {"height": 31}) == 0.0
    assert f(str(tmp_path / "missing.png"), {"width": 40}) == 0.0


def test_check_image_size_ignore_transparent_measures_the_opaque_content(tmp_path):
    # OSWorld 1.0.2 (gimp.py): with rule["ignore_transparent"] an image with alpha is measured by
    # the bounding box of its non-transparent pixels (a canvas resized with a transparent border)
    img = Image.new("RGBA", (50, 40), (0, 0, 0, 0))
    img.paste(Image.new("RGBA", (20, 10), (255, 0, 0, 255)), (5, 7))
    p = tmp_path / "padded.png"
    img.save(p)
    f = get_metric("check_image_size")
    assert f(str(p), {"width": 20, "height": 10, "ignore_transparent": True}) == 1.0
    assert f(str(p), {"width": 50, "height": 40, "ignore_transparent": True}) == 0.0
    assert f(str(p), {"width": 50, "height": 40}) == 1.0          # without the option: the canvas
    assert f(str(p), {"width": 20, "height": 10}) == 0.0
    Image.new("RGBA", (8, 8), (0, 0, 0, 0)).save(tmp_path / "clear.png")
    assert f(str(tmp_path / "clear.png"), {"width": 0, "ignore_transparent": True}) == 1.0  # all transparent


def test_compare_image_list_needs_every_pair_pixel_identical(tmp_path):
    def img(name, colour, px=None):
        im = Image.new("RGB", (8, 8), colour)
        if px:
            im.putpixel(px, (0, 0, 0))
        im.save(tmp_path / name)
        return str(tmp_path / name)

    a, a2, b, c = img("a.png", "red"), img("a2.png", "red"), img("b.png", "blue"), img("c.png", "blue", (3, 3))
    f = get_metric("compare_image_list")
    assert f([a, b], [a2, b]) == 1.0
    assert f(a, a2) == 1.0
    assert f([a, c], [a2, b]) == 0.0          # one pixel differs in the second pair
    assert f([a, None], [a2, b]) == 0.0
    Image.new("RGB", (9, 8), "red").save(tmp_path / "wide.png")
    assert f(a, str(tmp_path / "wide.png")) == 0.0   # another size


def test_is_expected_tabs_compares_urls_as_osworld_does():
    f = get_metric("is_expected_tabs")
    tabs = [{"url": "https://www.example.com/"}, {"url": "https://docs.python.org/3/"}]
    rule = {"type": "url", "urls": ["https://example.com", "https://docs.python.org/3/"]}
    assert f(tabs, rule) == 1.0                                         # "www." and a bare "/" folded
    assert f(tabs, {"type": "url", "urls": ["http://example.com", "https://docs.python.org/3/"]}) == 0.0
    assert f(tabs[:1], rule) == 0.0                                     # a tab missing
    assert f(tabs, {"type": "url", "urls": ["https://example.com", "https://pypi.org/"]}) == 0.0
    assert f(tabs, {"type": "title", "urls": []}) == 0.0
    assert f(None, rule) == 0.0


def test_is_expected_bookmarks_three_rule_types():
    f = get_metric("is_expected_bookmarks")
    roots = {"bookmark_bar": {"children": [
        {"type": "folder", "name": "Work", "children": []},
        {"type": "folder", "name": "Liked Authors", "children": [
            {"type": "url", "url": "https://a.example/"}, {"type": "url", "url": "https://b.example/"}]},
        {"type": "url", "url": "https://news.example/"}]}}
    assert f(roots, {"type": "bookmark_bar_folders_names", "names": ["Liked Authors", "Work"]}) == 1.0
    assert f(roots, {"type": "bookmark_bar_folders_names", "names": ["Work"]}) == 0.0
    assert f(roots, {"type": "bookmark_bar_websites_urls", "urls": ["https://news.example/"]}) == 1.0
    assert f(roots, {"type": "bookmark_bar_websites_urls", "urls": ["https://news.example"]}) == 0.0  # exact urls
    liked = {"type": "liked_authors_websites_urls"}
    assert f(roots, {**liked, "urls": [["https://x.example/", "https://a.example/"], "https://b.example/"]}) == 1.0
    assert f(roots, {**liked, "urls": ["https://a.example/"]}) == 0.0      # one bookmark too many
    assert f({}, {**liked, "urls": []}) == 0.0
    with pytest.raises(ValueError, match="rule type"):
        f(roots, {"type": "bookmark_other"})


def test_compare_config_is_exact_text(tmp_path):
    p = tmp_path / "settings.json"
    p.write_text('{"a": 1}\n')
    f = get_metric("compare_config")
    assert f(str(p), {"expected": '{"a": 1}\n'}) == 1.0
    assert f(str(p), {"expected": '{"a": 1}'}) == 0.0       # the newline counts
    assert f(None, {"expected": ""}) == 0.0
