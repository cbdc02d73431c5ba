"""``guigym osworld cache``: downloads into OSWorld-named cache files, resumable and checksummed,
and ``--import`` from a copied folder, against a loopback HTTP server serving generated files."""
from __future__ import annotations

import hashlib
import http.server
import json
import os
import threading
import uuid
from pathlib import Path

import pytest

from guigym.cli import main as cli_main
from guigym.envs.desktop import cache as K
from guigym.envs.desktop import coverage as C
from guigym.envs.desktop.setup import download_cache_path


class Files(http.server.BaseHTTPRequestHandler):
    """Serves ``self.server.files`` (path -> bytes), honouring ``Range: bytes=N-``; logs each
    request's (path, Range header); ``self.server.etags`` (path -> str) sets X-Linked-Etag."""

    def do_GET(self):
        srv = self.server
        rng = self.headers.get("Range")
        with srv.lock:
            srv.log.append((self.path, rng))
        body = srv.files.get(self.path)
        if body is None:
            self.send_error(404, "no such file")
            return
        status, start = 200, 0
        if rng and rng.startswith("bytes="):
            start = int(rng[len("bytes="):].split("-")[0])
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
            body = body[start:]
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        if self.path in srv.etags:
            self.send_header("X-Linked-Etag", f'"{srv.etags[self.path]}"')
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture()
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Files)
    srv.files, srv.etags, srv.log, srv.lock = {}, {}, [], threading.Lock()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def blob(n: int, seed: int) -> bytes:
    return bytes((i * 7 + seed) % 251 for i in range(n))


def write_tasks(root: Path, base: str) -> dict[str, str]:
    """Two tasks (one shared url) with download steps and a cloud_file; returns url by name."""
    urls = {"a": f"{base}/data/a.xlsx", "b": f"{base}/data/b%20doc.docx", "gold": f"{base}/gold/g.xlsx"}
    t1 = {"id": "t1", "instruction": "x",
          "config": [{"type": "download", "parameters": {"files": [
              {"url": urls["a"], "path": "/home/user/a.xlsx"}, {"url": urls["b"], "path": "/home/user/b doc.docx"}]}}],
          "evaluator": {"func": "compare_table", "result": {"type": "vm_file", "path": "/home/user/a.xlsx", "dest": "a.xlsx"},
                        "expected": {"type": "cloud_file", "path": urls["gold"], "dest": "gold.xlsx"}}}
    t2 = {"id": "t2", "instruction": "y", "config": [],
          "evaluator": {"func": "exact_match", "result": {"type": "rule", "rules": {}},
                        "postconfig": [{"type": "download", "parameters": {"files": [
                            {"url": urls["a"], "path": "/home/user/a.xlsx"}]}}]}}
    (root / "examples" / "calc").mkdir(parents=True)
    for t in (t1, t2):
        (root / "examples" / "calc" / f"{t['id']}.json").write_text(json.dumps(t))
    return urls


@pytest.fixture()
def world(server, tmp_path):
    base = f"http://127.0.0.1:{server.server_port}"
    urls = write_tasks(tmp_path / "tasks", base)
    data = {"a": blob(200_000, 1), "b": blob(5_000, 2), "gold": blob(70_000, 3)}
    for k, u in urls.items():
        server.files[u[len(base):]] = data[k]
    cache = tmp_path / "cache"
    return tmp_path / "tasks", cache, urls, data


def paths(cache, urls):
    return {"a": download_cache_path(cache / "setup", urls["a"], "/home/user/a.xlsx"),
            "b": download_cache_path(cache / "setup", urls["b"], "/home/user/b doc.docx"),
            "gold": cache / "eval" / "t1" / "gold.xlsx"}


def statuses(outcomes):
    return {o.item.rel: o.status for o in outcomes}


def test_items_use_osworld_names_and_are_deduplicated(world):
    tasks, cache, urls, _ = world
    items = K.collect_items(tasks, cache)
    p = paths(cache, urls)
    assert sorted(i.path for i in items) == sorted(p.values())  # url a is shared by t1 and t2
    assert p["a"].name == f"{uuid.uuid5(uuid.NAMESPACE_URL, urls['a'])}_a.xlsx"  # OSWorld's cache name
    assert {i.kind for i in items} == {"download", "cloud_file"}


def test_download_verify_skip_and_coverage(world, server):
    tasks, cache, urls, data = world
    items = K.collect_items(tasks, cache)
    out = K.download_all(items, cache, workers=3)
    assert set(statuses(out).values()) == {"downloaded"}
    p = paths(cache, urls)
    for k in data:
        assert p[k].read_bytes() == data[k]
    manifest = json.loads((cache / "manifest.json").read_text())["files"]
    rel = p["b"].relative_to(cache).as_posix()
    assert manifest[rel] == {"url": urls["b"], "sha256": hashlib.sha256(data["b"]).hexdigest(), "size": 5000}
    assert not list(cache.rglob("*.part"))
    # a re-run verifies and downloads nothing
    n = len(server.log)
    assert set(statuses(K.download_all(items, cache)).values()) == {"present"}
    assert len(server.log) == n
    # the tasks are no longer blocked by the cache
    audits = C.audit_dir(tasks, cache, has_program=lambda p: True)
    assert all(a.runnable for a in audits)


def test_resume_from_a_partial_file(world, server):
    tasks, cache, urls, data = world
    items = K.collect_items(tasks, cache)
    p = paths(cache, urls)
    part = p["a"].with_name(p["a"].name + ".part")
    part.parent.mkdir(parents=True)
    part.write_bytes(data["a"][:123_456])
    out = statuses(K.download_all(items, cache, workers=2))
    assert out[p["a"].relative_to(cache).as_posix()] == "downloaded"
    assert p["a"].read_bytes() == data["a"] and not part.exists()
    ranges = [r for path, r in server.log if urls["a"].endswith(path)]
    assert ranges == ["bytes=123456-"]


def test_corrupted_file_is_downloaded_again(world, server):
    tasks, cache, urls, data = world
    items = K.collect_items(tasks, cache)
    K.download_all(items, cache)
    p = paths(cache, urls)
    p["gold"].write_bytes(b"\0" * len(data["gold"]))  # same size, wrong bytes
    out = statuses(K.download_all(items, cache))
    assert out[p["gold"].relative_to(cache).as_posix()] == "redownloaded"
    assert list(out.values()).count("present") == 2
    assert p["gold"].read_bytes() == data["gold"]


def test_server_checksum_mismatch_and_http_errors_fail(world, server):
    tasks, cache, urls, data = world
    base = f"http://127.0.0.1:{server.server_port}"
    server.etags[urls["b"][len(base):]] = "0" * 64  # not the body's sha256
    server.etags[urls["a"][len(base):]] = hashlib.sha256(data["a"]).hexdigest()  # right: accepted
    del server.files[urls["gold"][len(base):]]
    out = {o.item.rel: o for o in K.download_all(K.collect_items(tasks, cache), cache)}
    p = paths(cache, urls)
    rel = {k: v.relative_to(cache).as_posix() for k, v in p.items()}
    assert out[rel["a"]].status == "downloaded"
    assert out[rel["b"]].status == "failed" and "differs from the server's" in out[rel["b"]].detail
    assert not p["b"].exists() and not p["b"].with_name(p["b"].name + ".part").exists()
    assert out[rel["gold"]].status == "failed" and "HTTP 404" in out[rel["gold"]].detail
    assert rel["b"] not in json.loads((cache / "manifest.json").read_text())["files"]


def test_import_matches_osworld_names_url_basenames_and_task_folders(world, tmp_path):
    tasks, cache, urls, data = world
    p = paths(cache, urls)
    src = tmp_path / "copied"
    (src / "t1").mkdir(parents=True)
    (src / "deep").mkdir()
    (src / "deep" / p["a"].name).write_bytes(data["a"])  # OSWorld's cache name
    (src / "t1" / "gold.xlsx").write_bytes(data["gold"])  # OSWorld's per-task cloud file
    out = {o.item.rel: o for o in K.import_dir(K.collect_items(tasks, cache), src, cache)}
    rel = {k: v.relative_to(cache).as_posix() for k, v in p.items()}
    assert out[rel["a"]].status == "imported" and out[rel["gold"]].status == "imported"
    assert out[rel["b"]].status == "missing"
    assert p["a"].read_bytes() == data["a"] and p["gold"].read_bytes() == data["gold"]
    (src / "b doc.docx").write_bytes(data["b"])  # matched by the url's (unquoted) basename
    out = statuses(K.import_dir(K.collect_items(tasks, cache), src, cache))
    assert out == {rel["a"]: "present", rel["gold"]: "present", rel["b"]: "imported"}
    assert p["b"].read_bytes() == data["b"]


def test_cli_download_and_import(world, tmp_path, capsys):
    tasks, cache, urls, _ = world
    empty = tmp_path / "empty_src"
    empty.mkdir()
    assert cli_main(["osworld", "cache", "--tasks", str(tasks), "--cache-dir", str(cache), "--import", str(empty)]) == 1
    text = capsys.readouterr().out
    assert "missing 3" in text and urls["b"] in text
    assert cli_main(["osworld", "cache", "--tasks", str(tasks), "--cache-dir", str(cache), "--workers", "2",
                     "--quiet"]) == 0
    assert "downloaded 3 (of 3 files)" in capsys.readouterr().out
    assert cli_main(["osworld", "cache", "--tasks", str(tasks), "--cache-dir", str(cache), "--workers", "0"]) == 2
    os.remove(cache / "manifest.json")  # files someone placed: hashed and recorded, not fetched again
    assert cli_main(["osworld", "cache", "--tasks", str(tasks), "--cache-dir", str(cache), "--quiet"]) == 0
    assert "present 3" in capsys.readouterr().out
    assert len(json.loads((cache / "manifest.json").read_text())["files"]) == 3


def test_non_http_urls_are_refused(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host file")
    cache = tmp_path / "cache"
    item = K.CacheItem(secret.as_uri(), cache / "setup" / "x_secret.txt", "setup/x_secret.txt", "t", "download")
    (out,) = K.download_all([item], cache)
    assert out.status == "failed" and "not an http(s) url" in out.detail
    assert not list(cache.rglob("*secret*"))
