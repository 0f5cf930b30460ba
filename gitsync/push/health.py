"""Health checks run against a gateway's data plane after a push: one client per data plane, each
check with its retries, each answer judged against what the repo expects (`gitsync.render.healthchecks`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from gitsync.httpclient import Answer, HttpClient, HttpError
from gitsync.log import redact
from gitsync.push.results import CheckResult, ChecksVerdict
from gitsync.render.healthchecks import Check, status_text

BODY_SHOWN = 200  # bytes of an answer's body a failure quotes
MAX_BODY_READ = 1 << 20


def judge(check: Check, answer: Answer) -> str | None:
    """Why `answer` fails this check, or None when it passes."""
    if not any(low <= answer.status <= high for low, high in check.status):
        return f"status {answer.status}, expected {status_text(check.status)}"
    for name, pattern in check.expect_headers:
        value = answer.headers.get(name.lower())
        if value is None or not pattern.search(value):
            return f"header {name}: {value!r} does not match {pattern.pattern!r}"
    if check.expect_body is not None and not check.expect_body.search(answer.text):
        return f"body does not match {check.expect_body.pattern!r}"
    return None


def run_checks(checks: Sequence[Check], base_url: str, client: HttpClient,
               sleep: Callable[[float], None] = time.sleep) -> ChecksVerdict:
    """Every check against one gateway's data plane (`base_url`), each with its retries."""
    return ChecksVerdict(tuple(run_check(check, base_url, client, sleep) for check in checks))


def run_check(check: Check, base_url: str, client: HttpClient,
              sleep: Callable[[float], None] = time.sleep) -> CheckResult:
    headers = [(k.encode(), v.encode()) for k, v in check.headers]
    if check.host:
        headers.insert(0, (b"Host", check.host.encode()))
    url = base_url.rstrip("/") + check.path
    body = check.body.encode() if check.body is not None else None
    why, status, shown = "no attempt", None, ""
    for attempt in range(1, check.retries + 2):
        try:
            answer = client.request(check.method, url, headers=headers, body=body, limit=MAX_BODY_READ,
                                    timeout=check.timeout)
        except HttpError as exc:
            why, status, shown = f"no answer: {exc}", None, ""
        else:
            failure = judge(check, answer)
            if failure is None:
                return CheckResult(check.name, str(check.location), True, attempt, answer.status)
            why, status = failure, answer.status
            shown = redact(answer.body[:BODY_SHOWN].decode("utf-8", "replace"))
        if attempt <= check.retries:
            sleep(check.interval)
    return CheckResult(check.name, str(check.location), False, check.retries + 1, status, shown, why)


def proxy_urls(gateways: Sequence[str], proxies: Sequence[str]) -> Mapping[str, str]:
    """Each gateway's data-plane base URL, paired by position (like status_urls)."""
    return {gateway: proxy for gateway, proxy in zip(gateways, proxies, strict=False)}
