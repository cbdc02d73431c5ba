"""The embedded map (map_app.py over real OpenStreetMap data of central Helsinki) behind
WebArena-v0's ``map`` key: its WebArena-format tasks pass ``guigym tasks check``; routes obey the
geometry and the road rules they claim to; URLs follow OpenStreetMap.org's scheme."""
from __future__ import annotations

import json
import math
import urllib.parse

import pytest

from guigym.cli import main
from guigym.envs.web.webarena import sites as S

pytestmark = pytest.mark.skipif(bool(S.EMBEDDED["map"].missing()),
                                reason=f"the map site needs {', '.join(S.EMBEDDED['map'].missing())} "
                                       "(scripts/install.sh)")
SUITE = S.EMBEDDED["map"].suite


@pytest.fixture(scope="module")
def data():
    from guigym.envs.web.webarena.sites.map_app import MapData
    from guigym.envs.web.webarena.sites.osm_data import pbf_path

    return MapData.load(pbf_path())


def test_the_map_suite_passes_tasks_check(tmp_path):
    out = tmp_path / "rows.json"
    code = main(["tasks", "check", "--env", "WebArena-v0", "--embedded", "map", "--json", str(out)])
    rows = json.loads(out.read_text())
    assert code == 0, rows
    assert [(r["noop"], r["reference"], r["status"]) for r in rows] == [(0.0, 1.0, "ok")] * len(json.loads(SUITE.read_text()))


def test_haversine_matches_the_length_of_a_degree_of_latitude():
    from guigym.envs.web.webarena.sites.map_app import EARTH_R_M, haversine_m

    assert haversine_m(60.0, 24.9, 61.0, 24.9) == pytest.approx(2 * math.pi * EARTH_R_M / 360, rel=1e-9)
    # a degree of longitude at 60 N is half as long (cos 60 = 0.5)
    assert haversine_m(60.0, 24.0, 60.0, 25.0) == pytest.approx(math.pi * EARTH_R_M / 360, rel=2e-3)


def test_routes_are_never_shorter_than_the_straight_line_and_cars_keep_to_one_way_streets(data):
    from guigym.envs.web.webarena.sites.map_app import haversine_m

    places = sorted(data.places.values(), key=lambda p: p.id)
    for a, b in zip(places[::97], places[40::97]):
        crow = haversine_m(a.lat, a.lon, b.lat, b.lon)
        for profile in ("foot", "car"):
            r = data.route(profile, (a.lat, a.lon), (b.lat, b.lon))
            snap = sum(haversine_m(*p, *q) for p, q in (((a.lat, a.lon), r["line"][0]), (r["line"][-1], (b.lat, b.lon))))
            assert r["m"] + snap >= crow * (1 - 1e-9)
    car, foot = data.graphs["car"], data.graphs["foot"]
    one_way = [(u, v) for u, v in car.edges if not car.has_edge(v, u)]
    assert one_way, "central Helsinki has one-way streets"
    assert all(foot.has_edge(v, u) for u, v in one_way if foot.has_edge(u, v))


def test_directions_redirect_to_the_openstreetmap_url_and_unknown_places_are_named(data):
    from guigym.envs.web.webarena.sites.map_app import App

    app = App(data, "test")
    a, b = sorted(data.places.values(), key=lambda p: p.id)[:2]
    status, headers, _ = app.handle("/directions", {"from": [a.name], "to": [b.name], "engine": ["fossgis_osrm_car"]})
    assert status == 302
    loc = urllib.parse.urlsplit(headers["Location"])
    q = urllib.parse.parse_qs(loc.query)
    assert loc.path == "/directions" and q["engine"] == ["fossgis_osrm_car"]
    (la, lo), (lb, lob) = (tuple(map(float, pt.split(","))) for pt in q["route"][0].split(";"))
    assert (la, lo) == pytest.approx((a.lat, a.lon), abs=1e-5) and (lb, lob) == pytest.approx((b.lat, b.lon), abs=1e-5)
    status, _, body = app.handle("/directions", {"from": ["Nowhere Street 99"], "to": [b.name]})
    assert status == 200 and "No place or street named \u201cNowhere Street 99\u201d" in body.decode()
    assert app.handle("/directions", {"engine": ["teleport"]})[0] == 400
