"""What a commit shows on GitHub, drawn from a GitHub contract double's recorded requests: for each
commit, the last status posted per context (as GitHub's commit page and pull request show them), with
how many were posted. A page of plain HTML and CSS, for a test to check and a person to look at (the
closing notes render it to PNG with headless Chromium)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from testkit.forges import Recorded

_ICON = {"success": ("✓", "#1a7f37"), "failure": ("✗", "#d1242f"), "error": ("!", "#d1242f"),
         "pending": ("●", "#9a6700")}


def posted_statuses(requests: Sequence[Recorded]) -> dict[str, list[dict[str, Any]]]:
    """sha → the statuses posted on it, in order, from the recorded ``POST …/statuses/{sha}``."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in requests:
        if r.operation == "repos/create-commit-status" and r.status == 201:
            out.setdefault(r.path.rsplit("/", 1)[1], []).append(r.body)
    return out


def commit_page(commits: Sequence[tuple[str, str, str]], requests: Sequence[Recorded]) -> str:
    """`commits`: (sha, subject, what happened); one box per commit, as GitHub draws its checks."""
    posted = posted_statuses(requests)
    boxes = []
    for sha, subject, caption in commits:
        shown: dict[str, dict[str, Any]] = {}
        for status in posted.get(sha, []):
            shown[status.get("context") or "default"] = status
        rows = []
        for context, status in shown.items():
            icon, colour = _ICON.get(status["state"], ("?", "#59636e"))
            count = sum(1 for s in posted.get(sha, []) if (s.get("context") or "default") == context)
            link = status.get("target_url") or ""
            description = html.escape(status.get("description") or "")
            rows.append(
                f'<div class="row"><span class="icon" style="color:{colour}">{icon}</span>'
                f'<b>{html.escape(context)}</b> <span class="desc">— {description}</span>'
                f'<span class="details" title="{html.escape(link)}">Details</span>'
                f'<div class="meta">{count} status(es) posted: '
                f'{html.escape(" → ".join(s["state"] for s in posted[sha] if s.get("context") == context))}'
                f"</div></div>")
        states = {s["state"] for s in shown.values()}
        verdict = ("All checks have passed" if states == {"success"} else
                   "Some checks were not successful" if states & {"failure", "error"} else
                   "Some checks haven't completed yet")
        boxes.append(f'<section><h2>{html.escape(caption)}</h2><div class="commit"><code>{sha[:7]}</code> '
                     f'{html.escape(subject)}</div><div class="box"><div class="head">{verdict}</div>'
                     f'{"".join(rows)}</div></section>')
    return ("<!doctype html><meta charset=utf-8><title>gitsync commit statuses</title><style>"
            "body{font:14px -apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:16px;color:#1f2328;"
            "width:900px}h1{font-size:18px}h2{font-size:13px;color:#59636e;margin:14px 0 4px}"
            ".commit{margin:2px 0 6px}.box{border:1px solid #d1d9e0;border-radius:6px}"
            ".head{padding:8px 12px;background:#f6f8fa;font-weight:600;border-bottom:1px solid #d1d9e0}"
            ".row{padding:8px 80px 8px 12px;border-top:1px solid #eef1f4;position:relative}"
            ".row:first-of-type{border:0}"
            ".icon{display:inline-block;width:18px;font-weight:700}.desc{color:#59636e}"
            ".details{position:absolute;right:12px;top:8px;color:#0969da}"
            ".meta{color:#818b98;font-size:12px;margin-left:18px}</style>"
            "<h1>What each commit shows on GitHub (from the contract double's recorded requests)</h1>"
            + "".join(boxes))
