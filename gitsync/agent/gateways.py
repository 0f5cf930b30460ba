"""The agent's gateways, and what a push to them needs (`Gateways`): a client and a worker for each
(`gitsync.push.workers.GatewayPool`), the client of their data planes for the repo's health checks,
the plan's policy and the retries; and the daemon's two hooks into the waiting, when to stop waiting
for slow pushes and whom to tell when a push left running ends."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gitsync.agent.outcomes import Trigger
from gitsync.httpclient import HttpClient
from gitsync.push.admin_api import endpoints_from_settings
from gitsync.push.apply import RetryPolicy, policy_from_settings
from gitsync.push.plan import Policy
from gitsync.push.workers import GatewayPool
from gitsync.settings import Settings


@dataclass(frozen=True)
class Gateways:
    """The gateways of one agent (see the module); `close` ends their workers and clients."""

    pool: GatewayPool
    proxy: HttpClient  # the data planes, for the health checks
    proxy_urls: Mapping[str, str]  # gateway URL → its data plane's (`proxy_urls`)
    policy: Policy
    retry: RetryPolicy
    interrupted: Callable[[], bool]  # a new trigger came: stop waiting for slow pushes
    wake: Callable[[Trigger], None]  # a push left running by an earlier sync ended

    @classmethod
    def from_settings(cls, settings: Settings, interrupted: Callable[[], bool] = lambda: False,
                      wake: Callable[[Trigger], None] = lambda trigger: None, *, one_shot: bool = False,
                      ) -> Gateways:
        endpoints = endpoints_from_settings(settings)
        pool = GatewayPool(endpoints, settings.max_backoff, one_shot=one_shot)
        proxy_urls = {e.display_url: url for e, url in zip(endpoints, settings.proxy_urls, strict=False)}
        proxy = HttpClient(None, settings.gateway_timeout, max_connections=4 * max(1, len(endpoints)))
        return cls(pool, proxy, proxy_urls, policy_from_settings(settings),
                   RetryPolicy.from_settings(settings), interrupted, wake)

    @property
    def urls(self) -> list[str]:
        return self.pool.urls

    def close(self) -> None:
        self.pool.close()
        self.proxy.close()


__all__ = ["Gateways"]
