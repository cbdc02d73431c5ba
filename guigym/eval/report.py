"""Reports of an eval run: ``results.csv`` (one row per episode) and a self-contained ``report.html``.

The HTML file needs nothing but itself: CSS is inline, screenshots are base64 PNG data URIs, and
there is no JavaScript. It shows the summary tables (overall, per domain, per task), an episode
index, and for each episode every step (the screenshot the agent saw, its raw output, the parsed
action, the action error highlighted, the reward), then the final screenshot and the verifier's
details. All text is escaped: agent output is untrusted.

Both files are rebuilt from ``results.jsonl`` and the trajectories, at the end of ``run_eval``
and by ``guigym report OUT``.
"""
from __future__ import annotations

import base64
import csv
import html
import io
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Optional

from PIL import Image

from guigym.core.paths import confine
from guigym.eval.files import read_jsonl, write_text_atomic
from guigym.eval.summary import androidlab_columns, latest_records, summarize

CSV_FIELDS = ("key", "task_id", "domain", "difficulty", "seed", "attempt", "status", "success", "score", "steps",
              "reference_steps", "ror", "wall_s", "error", "instruction", "trajectory_dir")

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{margin:0 0 .3em}h2{margin:1.2em 0 .4em;font-size:1.15em}
table{border-collapse:collapse;margin:.4em 0 1em}
th,td{border:1px solid #ccc;padding:3px 7px;vertical-align:top;text-align:left}
th{background:#eee}td.num{text-align:right}
.episode{background:#fff;border:1px solid #bbb;border-radius:6px;padding:.6em 1em;margin:1.2em 0}
.badge{display:inline-block;padding:0 .5em;border-radius:4px;font-size:.85em;color:#fff}
.ok{background:#2a7d2a}.fail{background:#b03030}.lost{background:#777}.unscorable{background:#a67c00}
pre{white-space:pre-wrap;word-break:break-all;margin:0;max-height:20em;overflow:auto;font-size:12px}
.err{background:#ffe3e3;border:1px solid #d33;color:#900;padding:2px 4px;font-weight:bold}
tr.has-error td{background:#fff4f4}
img.shot{max-width:640px;height:auto;border:1px solid #999}
.noshot{color:#888;font-style:italic}
.meta td:first-child{font-weight:bold}
"""


# ---- loading ------------------------------------------------------------------------------------
def _episode_order(record: dict[str, Any]) -> tuple[str, int, int]:
    """Sort key: task, seed, attempt."""
    return (str(record.get("task_id", "")), int(record.get("seed", 0)), int(record.get("attempt", 0)))


def select_episodes(records: Iterable[dict[str, Any]], max_episodes: Optional[int]) -> list[dict[str, Any]]:
    """The latest record of each episode, ordered by task, seed, attempt.

    Over ``max_episodes``, failed and lost episodes are kept first (they are what one debugs).
    """
    episodes = sorted(latest_records(records).values(), key=_episode_order)
    if max_episodes is None or len(episodes) <= max_episodes:
        return episodes
    ranked = sorted(episodes, key=lambda r: (r.get("status") == "done" and bool(r.get("success")), _episode_order(r)))
    return sorted(ranked[:max(0, max_episodes)], key=_episode_order)


def load_episode(out: Path, record: dict[str, Any]) -> tuple[Optional[Path], dict[str, Any]]:
    """(trajectory dir, ``episode.json`` contents) of a record; empty contents when unreadable.

    ``trajectory_dir`` must lie under ``out`` (TaskSpecError naming the record otherwise): a
    results file is data, and the report inlines the images it points at."""
    rel = record.get("trajectory_dir")
    if not rel:
        return None, {}
    tdir = confine(out, rel, f"results record {record.get('key')!r}: trajectory_dir", "the output directory")
    try:
        return tdir, json.loads((tdir / "episode.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return tdir, {}


def image_data_uri(path: Path, max_width: int = 800) -> Optional[str]:
    """A ``data:image/png;base64,...`` URI of a screenshot, downscaled to ``max_width`` pixels;
    None when the file is missing or not an image."""
    try:
        with Image.open(path) as im:
            if im.format == "PNG" and im.width <= max_width:
                data = path.read_bytes()
            else:
                im = im.convert("RGB")
                if im.width > max_width:
                    im = im.resize((max_width, max(1, round(im.height * max_width / im.width))))
                buf = io.BytesIO()
                im.save(buf, format="PNG")
                data = buf.getvalue()
    except (OSError, ValueError):
        return None
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


# ---- csv ----------------------------------------------------------------------------------------
def write_results_csv(out: Path, records: Iterable[dict[str, Any]]) -> Path:
    """``OUT/results.csv``: one row per episode (its latest record), columns :data:`CSV_FIELDS`."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in sorted(latest_records(records).values(), key=_episode_order):
        writer.writerow({f: ("" if r.get(f) is None else r.get(f)) for f in CSV_FIELDS})
    path = out / "results.csv"
    write_text_atomic(path, buf.getvalue())
    return path


# ---- html pieces --------------------------------------------------------------------------------
def _e(value: Any) -> str:
    """Escape any value for HTML text or a quoted attribute."""
    return html.escape("" if value is None else str(value), quote=True)


def _fmt(value: Any, pct: bool = False) -> str:
    """A number as ``0.50`` or ``50.0%``; ``-`` for None."""
    if value is None:
        return "-"
    return f"{100 * value:.1f}%" if pct else f"{value:.2f}"


def _stats_table(title: str, label: str, rows: dict[str, dict[str, Any]]) -> str:
    """One summary table (``label`` column, then episodes, lost, unscorable, SR, score, steps, pass@k,
    and AndroidLab's Sub-Goal SR / RRR / ROR where any row has them)."""
    lab = androidlab_columns(rows.values())
    columns = (label, "episodes", "lost", "unscorable", "success", "mean score", "mean steps", "pass@k",
               *(t for _, t, _ in lab))
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join(
        f"<tr><td>{_e(name)}</td><td class=num>{s['episodes']}</td><td class=num>{s['lost']}</td>"
        f"<td class=num>{s.get('unscorable', 0)}</td>"
        f"<td class=num>{_fmt(s['success_rate'], True)}</td><td class=num>{_fmt(s['mean_score'])}</td>"
        f"<td class=num>{_fmt(s['mean_steps'])}</td><td class=num>{_fmt(s['pass_at_k'], True)}</td>"
        + "".join(f'<td class=num data-metric="{k}">{_fmt(s.get(k), pct)}</td>' for k, _, pct in lab) + "</tr>"
        for name, s in rows.items())
    return f"<h2>{_e(title)}</h2><table><tr>{head}</tr>{body}</table>"


def _badge(record: dict[str, Any]) -> str:
    """A coloured success / failed / unscorable / lost label."""
    if record.get("status") == "unscorable":
        return '<span class="badge unscorable">unscorable</span>'
    if record.get("status") != "done":
        return '<span class="badge lost">lost</span>'
    if record.get("success"):
        return '<span class="badge ok">success</span>'
    return '<span class="badge fail">failed</span>'


def _index_table(episodes: list[dict[str, Any]]) -> str:
    """A table of the shown episodes linking to their sections."""
    rows = "".join(
        f'<tr><td><a href="#ep-{n}">{_e(r.get("key"))}</a></td><td>{_e(r.get("domain") or "-")}</td>'
        f'<td>{_badge(r)}</td><td class=num>{_fmt(r.get("score"))}</td><td class=num>{_e(r.get("steps"))}</td></tr>'
        for n, r in enumerate(episodes))
    return ("<h2>Episodes</h2><table><tr><th>episode</th><th>domain</th><th>result</th><th>score</th>"
            f"<th>steps</th></tr>{rows}</table>")


def _shot(tdir: Optional[Path], name: Optional[str], alt: str, max_width: int) -> str:
    """An inlined ``<img>`` of ``tdir/name``, or a note when there is none."""
    path = confine(tdir, name, f"{tdir}/episode.json: screenshot", "the trajectory directory") \
        if tdir is not None and name else None
    uri = image_data_uri(path, max_width) if path is not None else None
    if uri is None:
        return f'<span class="noshot">no screenshot{" (" + _e(name) + " unreadable)" if name and tdir else ""}</span>'
    return f'<img class="shot" alt="{_e(alt)}" src="{uri}">'


def _step_row(tdir: Optional[Path], step: dict[str, Any], max_width: int) -> str:
    """One ``<tr class="step">``: screenshot, raw output, parsed action, error, reward."""
    index = step.get("index", 0)
    error = step.get("action_error")
    err_html = f'<div class="err">{_e(error)}</div>' if error else ""
    parsed = f"<code>{_e(step['action'])}</code>" if step.get("action") else '<span class="noshot">(unparsed)</span>'
    return (f'<tr class="step{" has-error" if error else ""}" data-index="{_e(index)}">'
            f"<td class=num>{_e(index)}</td><td>{_shot(tdir, step.get('screenshot'), f'step {index}', max_width)}</td>"
            f'<td><pre class="raw">{_e(step.get("action_text", ""))}</pre></td><td>{parsed}</td>'
            f'<td class="error">{err_html}</td><td class=num>{_fmt(step.get("reward"))}</td></tr>')


def _final_screenshot_name(tdir: Optional[Path], steps: list[dict[str, Any]]) -> Optional[str]:
    """The observation after the last step (``step_<n>.png``) when it was saved."""
    name = f"step_{len(steps):03d}.png"
    return name if tdir is not None and (tdir / name).exists() else None


def _episode_section(n: int, out: Path, record: dict[str, Any], max_width: int) -> str:
    """One ``<section class="episode">`` with metadata, the steps table, final screenshot, verifier."""
    tdir, episode = load_episode(out, record)
    steps = episode.get("steps", [])
    meta = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in (
        ("instruction", record.get("instruction")), ("domain", record.get("domain") or "-"),
        ("score", _fmt(record.get("score"))), ("steps", record.get("steps")),
        ("wall time", f"{float(record.get('wall_s') or 0):.1f} s"), ("trajectory", record.get("trajectory_dir")),
    ))
    if record.get("error"):
        meta += f'<tr><td>error</td><td><div class="err">{_e(record["error"])}</div></td></tr>'
    rows = "".join(_step_row(tdir, s, max_width) for s in steps)
    missing = "" if episode else '<p class="noshot">episode.json not found or unreadable</p>'
    final = _final_screenshot_name(tdir, steps)
    final_html = (f'<h3>Final screenshot</h3><div class="final">{_shot(tdir, final, "final", max_width)}</div>'
                  if final else "")
    verifier = json.dumps(record.get("verifier") or {}, indent=2, ensure_ascii=False, default=str)
    return (f'<section class="episode" id="ep-{n}" data-key="{_e(record.get("key"))}">'
            f"<h2>{_e(record.get('key'))} {_badge(record)}</h2><table class=meta>{meta}</table>{missing}"
            "<table class=steps><tr><th>#</th><th>screenshot seen</th><th>agent output</th><th>parsed action</th>"
            f"<th>action error</th><th>reward</th></tr>{rows}</table>{final_html}"
            f'<h3>Verifier</h3><pre class="verifier">{_e(verifier)}</pre></section>')


def build_report_html(out: Path, records: list[dict[str, Any]], max_episodes: Optional[int] = 200,
                      max_image_width: int = 800) -> str:
    """The whole report as one HTML string (see the module docstring)."""
    out = Path(out)
    summary = summarize(records)
    episodes = select_episodes(records, max_episodes)
    total = len(latest_records(records))
    shown = (f"<p>Showing {len(episodes)} of {total} episodes (failed and lost first).</p>"
             if len(episodes) < total else "")
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f"<title>guigym eval: {_e(out.name)}</title><style>{_CSS}</style></head><body>",
        f"<h1>guigym eval report</h1><p>{_e(out)} &middot; generated {_e(generated)}</p>",
        _stats_table("Overall", "", {"all": summary["overall"]}),
        _stats_table("Per domain", "domain", summary["per_domain"]),
        _stats_table("Per difficulty", "difficulty", summary["per_difficulty"]) if "per_difficulty" in summary else "",
        _stats_table("Per task", "task", summary["per_task"]),
        shown, _index_table(episodes),
        *(_episode_section(n, out, r, max_image_width) for n, r in enumerate(episodes)),
        "</body></html>\n",
    ]
    return "".join(parts)


def write_reports(out: Path, records: Optional[list[dict[str, Any]]] = None,
                  max_episodes: Optional[int] = 200) -> tuple[Path, Path]:
    """Write ``OUT/results.csv`` and ``OUT/report.html`` (atomically); return their paths.

    ``records`` default to the lines of ``OUT/results.jsonl``; a missing file is a ``FileNotFoundError``.
    """
    out = Path(out)
    if records is None:
        if not (out / "results.jsonl").exists():
            raise FileNotFoundError(f"{out / 'results.jsonl'} not found: is {out} a guigym eval output directory?")
        records = read_jsonl(out / "results.jsonl")
    csv_path = write_results_csv(out, records)
    html_path = out / "report.html"
    write_text_atomic(html_path, build_report_html(out, records, max_episodes))
    return csv_path, html_path
