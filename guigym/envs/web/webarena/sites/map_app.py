"""The embedded map's web app: place search, place pages and walking/driving directions over real
OpenStreetMap data (osm_data.py), with OpenStreetMap.org's URL scheme so WebArena's ``url_match``
works on it (``/search?query=``, ``/node/<id>``,
``/directions?engine=fossgis_osrm_{foot,car}&route=LAT,LON;LAT,LON``).

Run as ``python -m guigym.envs.web.webarena.sites.map_app --pbf FILE --port N`` (osm_map.py does);
it serves on 127.0.0.1 only. The map itself is Leaflet from Debian's ``libjs-leaflet`` drawing the
road network as vector lines (no tile server exists offline); every fact an agent needs is also
in the page text.

Routing (networkx shortest paths, weight = seconds):
* ``foot``: every ``highway`` way except motorways, both directions, 5 km/h;
* ``car``: the road classes of :data:`CAR_KMH` at those speeds, ``oneway`` respected.
Lengths are great-circle distances between consecutive way nodes (haversine, R = 6,371,008.8 m).
"""
from __future__ import annotations

import argparse
import html
import json
import math
import re
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional

import networkx as nx
import numpy as np

#: car speeds (km/h) by highway class: the urban limits of Finland's road traffic act, rounded
CAR_KMH = {"motorway": 80, "motorway_link": 50, "trunk": 60, "trunk_link": 40, "primary": 50, "primary_link": 40,
           "secondary": 40, "secondary_link": 30, "tertiary": 30, "tertiary_link": 30, "unclassified": 30,
           "residential": 30, "living_street": 20, "service": 20}
FOOT_KMH = 5.0
NO_FOOT = {"motorway", "motorway_link", "construction", "proposed"}
PLACE_KEYS = ("amenity", "shop", "tourism", "leisure", "historic")
ENGINES = {"fossgis_osrm_foot": "foot", "fossgis_osrm_car": "car"}
LEAFLET_DIR = Path("/usr/share/javascript/leaflet")
#: Debian's minified build (the same library as leaflet.js, a third of its size to parse)
LEAFLET_JS = "leaflet.min.js" if (LEAFLET_DIR / "leaflet.min.js").exists() else "leaflet.js"
LEAFLET_FILES = ("leaflet.js", "leaflet.min.js", "leaflet.css")
EARTH_R_M = 6_371_008.8


def haversine_m(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance in metres."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    a = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lon2 - lon1) / 2) ** 2
    return 2 * EARTH_R_M * math.asin(math.sqrt(a))


@dataclass
class Place:
    """A named OSM node with a place-like tag."""

    id: int
    name: str
    kind: str
    lat: float
    lon: float
    tags: dict[str, str]

    @property
    def address(self) -> str:
        street, number = self.tags.get("addr:street", ""), self.tags.get("addr:housenumber", "")
        return f"{street} {number}".strip()


@dataclass
class MapData:
    """Everything the app serves, built once from the .pbf."""

    places: dict[int, Place] = field(default_factory=dict)
    coords: dict[int, tuple[float, float]] = field(default_factory=dict)  # graph node id -> (lat, lon)
    graphs: dict[str, nx.DiGraph] = field(default_factory=dict)  # "foot" / "car"
    streets: dict[str, list[int]] = field(default_factory=dict)  # street name (lower) -> its node ids
    roads: list[list[tuple[float, float]]] = field(default_factory=list)  # polylines for the map

    @classmethod
    def load(cls, pbf: Path) -> "MapData":
        import osmium

        data = cls()
        data.graphs = {"foot": nx.DiGraph(), "car": nx.DiGraph()}

        class Reader(osmium.SimpleHandler):  # osmium calls these per object
            def node(self, n: Any) -> None:
                name = n.tags.get("name")
                kind = next((n.tags.get(k) for k in PLACE_KEYS if k in n.tags), None)
                if name and kind and n.location.valid():
                    data.places[n.id] = Place(n.id, name, kind, n.location.lat, n.location.lon,
                                              {t.k: t.v for t in n.tags})

            def way(self, w: Any) -> None:
                hw = w.tags.get("highway")
                if not hw:
                    return
                pts = [(nd.ref, nd.location.lat, nd.location.lon) for nd in w.nodes if nd.location.valid()]
                if len(pts) < 2:
                    return
                data.roads.append([(lat, lon) for _, lat, lon in pts])
                for ref, lat, lon in pts:
                    data.coords[ref] = (lat, lon)
                name = w.tags.get("name")
                if name:
                    data.streets.setdefault(name.lower(), []).extend(ref for ref, _, _ in pts)
                oneway = w.tags.get("oneway", "no")
                for (a, la, lo), (b, lb, lob) in zip(pts, pts[1:]):
                    m = haversine_m(la, lo, lb, lob)
                    if hw not in NO_FOOT:
                        for u, v in ((a, b), (b, a)):
                            data.graphs["foot"].add_edge(u, v, s=m / (FOOT_KMH / 3.6), m=m, street=name or "")
                    if hw in CAR_KMH:
                        pairs = [(a, b)] if oneway in ("yes", "1", "true") else [(b, a)] if oneway == "-1" else [(a, b), (b, a)]
                        for u, v in pairs:
                            data.graphs["car"].add_edge(u, v, s=m / (CAR_KMH[hw] / 3.6), m=m, street=name or "")

        Reader().apply_file(str(pbf), locations=True)
        # keep each profile's largest strongly connected part, so every snapped point can reach every other
        for k, g in data.graphs.items():
            keep = max(nx.strongly_connected_components(g), key=len)
            data.graphs[k] = g.subgraph(keep).copy()
        return data

    def nearest(self, profile: str, lat: float, lon: float) -> int:
        """The graph node of ``profile`` nearest to (lat, lon) (equirectangular metric, fine at city scale)."""
        g = self.graphs[profile]
        ids = np.fromiter(g.nodes, dtype=np.int64)
        pts = np.array([self.coords[int(i)] for i in ids])
        dx = (pts[:, 1] - lon) * math.cos(math.radians(lat))
        return int(ids[int(np.argmin(dx * dx + (pts[:, 0] - lat) ** 2))])

    def geocode(self, text: str) -> Optional[tuple[float, float]]:
        """A place name (exact, case-insensitive), else a street name (its middle node), else None."""
        q = text.strip().lower()
        if not q:
            return None
        for p in sorted(self.places.values(), key=lambda p: p.id):
            if p.name.lower() == q:
                return (p.lat, p.lon)
        refs = self.streets.get(q)
        if refs:
            return self.coords[refs[len(refs) // 2]]
        return None

    def route(self, profile: str, a: tuple[float, float], b: tuple[float, float]) -> dict[str, Any]:
        """Fastest path between the nodes nearest ``a`` and ``b``: metres, seconds, streets, polyline."""
        g = self.graphs[profile]
        s, t = self.nearest(profile, *a), self.nearest(profile, *b)
        path = nx.shortest_path(g, s, t, weight="s")
        edges = [g.edges[u, v] for u, v in zip(path, path[1:])]
        streets: list[str] = []
        for e in edges:
            if e["street"] and (not streets or streets[-1] != e["street"]):
                streets.append(e["street"])
        return {"m": sum(e["m"] for e in edges), "s": sum(e["s"] for e in edges), "streets": streets,
                "line": [self.coords[n] for n in path]}

    def search(self, query: str, limit: int = 200) -> list[Place]:
        """Places whose name contains ``query`` or whose kind equals it (case-insensitive), by name."""
        q = query.strip().lower()
        if not q:
            return []
        hits = [p for p in self.places.values() if q in p.name.lower() or p.kind.lower() == q]
        return sorted(hits, key=lambda p: (p.name.lower(), p.id))[:limit]


def fmt_duration(seconds: float) -> str:
    """``H:MM`` (minutes rounded), as OpenStreetMap.org's directions panel shows times."""
    minutes = int(round(seconds / 60))
    return f"{minutes // 60}:{minutes % 60:02d}"


def route_param(a: tuple[float, float], b: tuple[float, float]) -> str:
    return f"{a[0]:.5f},{a[1]:.5f};{b[0]:.5f},{b[1]:.5f}"


def _parse_route(value: str) -> Optional[tuple[tuple[float, float], tuple[float, float]]]:
    m = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?),(-?\d+(?:\.\d+)?);(-?\d+(?:\.\d+)?),(-?\d+(?:\.\d+)?)\s*", value)
    if not m:
        return None
    la, lo, lb, lob = (float(x) for x in m.groups())
    return (la, lo), (lb, lob)


class App:
    """Renders the pages (pure: request path + query -> status, headers, body)."""

    def __init__(self, data: MapData, attribution: str) -> None:
        self.data, self.attribution = data, attribution

    def page(self, title: str, body: str, script: str = "") -> str:
        e = html.escape
        return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{e(title)} | OpenStreetMap</title>"
                f"<link rel=\"stylesheet\" href=\"/leaflet/leaflet.css\"><script src=\"/leaflet/{LEAFLET_JS}\"></script>"
                f"<style>#map{{height:360px;width:100%;background:#eef}}</style></head><body>"
                f"<header><a href=\"/\">OpenStreetMap</a> <a href=\"/directions\">Directions</a>"
                f"<form action=\"/search\" method=\"get\"><input name=\"query\" aria-label=\"Search\" placeholder=\"Search\">"
                f"<button type=\"submit\">Go</button></form></header><main><h1>{e(title)}</h1>{body}"
                f"<div id=\"map\"></div></main><footer>Map data {e(self.attribution)}</footer>"
                f"<script>{script}</script></body></html>")

    @staticmethod
    def _map_js(lines: list[list[tuple[float, float]]], markers: list[tuple[float, float]]) -> str:
        # one canvas instead of an SVG element per road: the start page draws 1,500 roads, which
        # as SVG took ~100 ms more of the browser's time per load (bench/webarena_sites.py)
        return ("if (window.L) { var m = L.map('map', {preferCanvas: true}); var g = L.featureGroup().addTo(m);"
                f"{json.dumps(lines)}.forEach(function (l) {{ L.polyline(l, {{weight: 3}}).addTo(g); }});"
                f"{json.dumps(markers)}.forEach(function (p) {{ L.circleMarker(p).addTo(g); }});"
                "if (g.getLayers().length) m.fitBounds(g.getBounds()); else m.setView([60.17, 24.94], 14); }")

    def handle(self, path: str, query: dict[str, list[str]]) -> tuple[int, dict[str, str], bytes]:
        e = html.escape
        q = {k: v[0] for k, v in query.items() if v}
        if path == "/":
            body = "<p>Search for a place or get directions in central Helsinki.</p>"
            return self._ok(self.page("OpenStreetMap", body, self._map_js(self.data.roads[:1500], [])))
        if path == "/search":
            hits = self.data.search(q.get("query", ""))
            items = "".join(f"<li><a href=\"/node/{p.id}\">{e(p.name)}</a> ({e(p.kind)})</li>" for p in hits)
            body = f"<p>{len(hits)} results for \u201c{e(q.get('query', ''))}\u201d</p><ul>{items}</ul>"
            return self._ok(self.page("Search results", body, self._map_js([], [(p.lat, p.lon) for p in hits])))
        m = re.fullmatch(r"/node/(\d+)", path)
        if m:
            p = self.data.places.get(int(m.group(1)))
            if p is None:
                return self._error(404, "No such place")
            rows = [("Type", p.kind), ("Address", p.address), ("Opening hours", p.tags.get("opening_hours", "")),
                    ("Cuisine", p.tags.get("cuisine", "")), ("Coordinates", f"{p.lat:.5f}, {p.lon:.5f}")]
            table = "".join(f"<tr><th>{k}</th><td>{e(v)}</td></tr>" for k, v in rows if v)
            link = "/directions?" + urllib.parse.urlencode({"from": p.name})
            body = f"<table>{table}</table><p><a href=\"{e(link)}\">Directions from here</a></p>"
            return self._ok(self.page(p.name, body, self._map_js([], [(p.lat, p.lon)])))
        if path == "/directions":
            return self._directions(q)
        if path.startswith("/leaflet/") and path[len("/leaflet/"):] in LEAFLET_FILES:
            f = LEAFLET_DIR / path[len("/leaflet/"):]
            if f.exists():
                ctype = "text/javascript" if f.suffix == ".js" else "text/css"
                return 200, {"Content-Type": f"{ctype}; charset=utf-8"}, f.read_bytes()
        return self._error(404, "Not found")

    def _directions(self, q: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        e = html.escape
        engine = q.get("engine", "fossgis_osrm_foot")
        if engine not in ENGINES:
            return self._error(400, f"unknown engine {engine}")
        frm, to = q.get("from", ""), q.get("to", "")
        form = (f"<form action=\"/directions\" method=\"get\"><label>From <input name=\"from\" value=\"{e(frm)}\"></label>"
                f"<label>To <input name=\"to\" value=\"{e(to)}\"></label>"
                f"<button name=\"engine\" value=\"fossgis_osrm_foot\">Walk</button>"
                f"<button name=\"engine\" value=\"fossgis_osrm_car\">Drive</button></form>")
        route = _parse_route(q.get("route", ""))
        if route is None and frm and to:
            a, b = self.data.geocode(frm), self.data.geocode(to)
            missing = [t for t, c in ((frm, a), (to, b)) if c is None]
            if missing:
                body = form + "".join(f"<p>No place or street named \u201c{e(t)}\u201d.</p>" for t in missing)
                return self._ok(self.page("Directions", body))
            assert a is not None and b is not None
            loc = "/directions?" + urllib.parse.urlencode({"engine": engine, "route": route_param(a, b)})
            return 302, {"Location": loc}, b""
        if route is None:
            return self._ok(self.page("Directions", form))
        r = self.data.route(ENGINES[engine], *route)
        mode = "Walking" if ENGINES[engine] == "foot" else "Driving"
        steps = "".join(f"<li>{e(s)}</li>" for s in r["streets"])
        body = (form + f"<h2>{mode} directions</h2><p>Distance: {r['m'] / 1000:.2f} km</p>"
                f"<p>Time: {fmt_duration(r['s'])}</p><ol>{steps}</ol>")
        return self._ok(self.page("Directions", body, self._map_js([r["line"]], [route[0], route[1]])))

    @staticmethod
    def _ok(text: str) -> tuple[int, dict[str, str], bytes]:
        return 200, {"Content-Type": "text/html; charset=utf-8"}, text.encode()

    def _error(self, status: int, message: str) -> tuple[int, dict[str, str], bytes]:
        return status, {"Content-Type": "text/html; charset=utf-8"}, self.page(message, "").encode()


def serve(pbf: Path, port: int, attribution: str) -> None:
    app = App(MapData.load(pbf), attribution)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            url = urllib.parse.urlsplit(self.path)
            status, headers, body = app.handle(url.path, urllib.parse.parse_qs(url.query))
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:  # quiet
            pass

    ThreadingHTTPServer.daemon_threads = True
    with ThreadingHTTPServer(("127.0.0.1", port), Handler) as httpd:
        httpd.serve_forever()


def main(argv: Optional[list[str]] = None) -> None:
    from guigym.envs.web.webarena.sites.osm_data import ATTRIBUTION

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pbf", required=True, type=Path)
    p.add_argument("--port", required=True, type=int)
    args = p.parse_args(argv)
    serve(args.pbf, args.port, ATTRIBUTION)


if __name__ == "__main__":  # pragma: no cover
    main()
