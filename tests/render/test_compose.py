"""Several sources, one payload (gitsync.render.compose), as a hostile team tries it: a credential under
another team's consumer, a reference into an item the owner does not share, an id of another team's;
each refused at the attacker's file:line naming the owner, the owner's own items untouched. The agent
over real repos: tests/agent/test_repos.py; a team's own CI: tests/cli/test_render.py."""

from __future__ import annotations

from gitsync.ownership import Claim, Ownership, Share, owner_of
from gitsync.render import RenderOptions, render
from gitsync.render.compose import Part, dangling, external, facts_of, shared_kinds

PLATFORM = Ownership((Claim(("global_rules", "secrets")),
                      Claim(("upstreams", "plugin_configs"), "platform-")),
                     shares=(Share(("upstreams",), prefix="platform-"), Share(("secrets",), ("orders",))))
ORDERS = Ownership((Claim(("routes", "upstreams"), "orders-"),
                    Claim(("consumers", "consumer_groups"), "orders-", (("team", "orders"),))))
PAYMENTS = Ownership((Claim(("routes", "upstreams"), "payments-"),
                      Claim(("consumers", "consumer_groups"), "payments-", (("team", "payments"),))),
                     shares=(Share(("consumer_groups",), ("catalog",), ids=("payments-vip",)),))
SOURCES = (("platform", PLATFORM), ("orders", ORDERS), ("payments", PAYMENTS))
NOT_SHARED = "which does not share it with source 'orders' (see the shares of its [[sources]] table)"

PAYMENTS_FILES = {"c.yaml": "consumers:\n  - username: payments-alice\n    labels: {team: payments}\n"
                            "  - id: payments-alice/credentials/main\n"
                            "    plugins: {key-auth: {key: payments-alice-key-0001}}\n"
                            "consumer_groups:\n  - id: payments-vip\n    labels: {team: payments}\n"
                            "    plugins: {limit-count: {count: 100, time_window: 60}}\n"
                            "upstreams:\n  - id: payments-web\n    nodes: {\"127.0.0.1:1980\": 1}\n"}
PLATFORM_FILES = {"p.yaml": "upstreams:\n  - id: platform-web\n    nodes: {\"127.0.0.1:1980\": 1}\n"
                            "plugin_configs:\n  - id: platform-auth\n    plugins: {key-auth: {}}\n"
                            "secrets:\n  - id: vault/1\n    uri: http://127.0.0.1:8200\n"
                            "    prefix: kv/apisix\n    token: a-vault-token-for-the-test\n"}


def part(name: str, files: dict[str, str]) -> Part:
    owns = dict(SOURCES)[name]
    rendered = render({file: text.encode() for file, text in files.items()},
                      RenderOptions(unmanaged=shared_kinds(owns)))
    return Part(name, "0" * 40, rendered, owns)


def problems_of(orders_files: dict[str, str]) -> list[str]:
    """Every problem of orders' commit composed with the platform's and payments' (its own refusals
    first, then its references)."""
    parts = [part("platform", PLATFORM_FILES), part("orders", orders_files), part("payments", PAYMENTS_FILES)]
    facts = [facts_of(p, SOURCES) for p in parts]
    own = [str(problem) for f in facts for problem in f.problems]
    return own or [str(miss.problem) for miss in dangling(parts, facts)]


def test_a_credential_under_another_teams_consumer_is_refused_whatever_its_labels() -> None:
    backdoor = {"c.yaml": "consumers:\n  - id: payments-alice/credentials/backdoor\n"
                          "    labels: {team: orders}\n"
                          "    plugins: {key-auth: {key: orders-chose-this-key-1}}\n"}
    assert problems_of(backdoor) == [
        "c.yaml:2:5: consumers[payments-alice/credentials/backdoor]: source 'orders' may not declare this "
        "credential: a credential belongs to the source of its consumer, and it owns consumers with id "
        "prefix 'orders-' and label team=orders; consumer 'payments-alice' belongs to source 'payments'"]
    # its own consumer's credential needs no label of its own: it is its consumer's
    own = {"c.yaml": "consumers:\n  - username: orders-bob\n    labels: {team: orders}\n"
                     "  - id: orders-bob/credentials/main\n"
                     "    plugins: {key-auth: {key: orders-bob-key-00001}}\n"}
    assert problems_of(own) == []


def test_a_reference_into_an_item_the_owner_does_not_share_is_refused_naming_the_owner() -> None:
    files = {"r.yaml": "consumers:\n  - username: orders-bob\n    labels: {team: orders}\n"
                       "    group_id: payments-vip\n"
                       "routes:\n  - id: orders-a\n    uri: /a\n    upstream_id: payments-web\n"
                       "  - id: orders-b\n    uri: /b\n    upstream_id: platform-web\n"
                       "    plugin_config_id: platform-auth\n"
                       "  - id: orders-c\n    uri: /c\n    upstream_id: platform-web\n"
                       "    plugins: {consumer-restriction: {whitelist: [payments-alice]}}\n"}
    assert problems_of(files) == [  # in the payload's order: routes before consumers
        "orders:r.yaml:8:5: routes[orders-a].upstream_id: upstream_id 'payments-web' names upstreams of "
        "source 'payments', " + NOT_SHARED,
        "orders:r.yaml:12:5: routes[orders-b].plugin_config_id: plugin_config_id 'platform-auth' names "
        "plugin_configs of source 'platform', " + NOT_SHARED,
        "orders:r.yaml:16:50: routes[orders-c].plugins.consumer-restriction.whitelist[0]: whitelist entry "
        "'payments-alice' names consumers of source 'payments', " + NOT_SHARED,
        "orders:r.yaml:4:5: consumers[orders-bob].group_id: group_id 'payments-vip' names consumer_groups of "
        "source 'payments', " + NOT_SHARED]


def test_what_the_owner_shares_may_be_named_and_a_secret_manager_only_by_whom_it_is_shared_with() -> None:
    route = ("routes:\n  - id: orders-a\n    uri: /a\n    upstream_id: platform-web\n"
             "    plugins: {key-auth: {}, proxy-rewrite: {headers: {set: {X-K: \"$secret://vault/1/k/v\"}}}}\n")
    assert problems_of({"r.yaml": route}) == []
    theirs = {"r.yaml": route.replace("orders-", "payments-")}
    parts = [part("platform", PLATFORM_FILES), part("payments", theirs)]
    found = dangling(parts, [facts_of(p, SOURCES) for p in parts])
    assert [str(miss.problem).split(": ", 2)[2][:60] for miss in found] == [
        "secret reference 'vault/1' names secrets of source 'platform"]
    assert [(miss.source, miss.owner) for miss in found] == [("payments", "platform")]


def test_an_id_of_another_team_is_refused_where_it_is_declared_and_its_owner_known_from_settings() -> None:
    impostor = {"c.yaml": "consumers:\n  - username: payments-alice\n    labels: {team: orders}\n"
                          "    plugins: {key-auth: {key: orders-chose-this-key-1}}\n"}
    assert problems_of(impostor) == [
        "c.yaml:2:5: consumers[payments-alice]: source 'orders' may not declare this item: it owns consumers "
        "with id prefix 'orders-' and label team=orders; it belongs to source 'payments' (consumers with id "
        "prefix 'payments-' and label team=payments)"]
    assert owner_of("consumers", "payments-alice", SOURCES) == "payments"
    assert owner_of("consumers", "alice", SOURCES) is None
    # the owner's facts do not depend on the impostor: its commit has nothing to answer for
    assert facts_of(part("payments", PAYMENTS_FILES), SOURCES).problems == ()


def test_a_source_alone_takes_what_others_share_as_theirs_and_refuses_the_rest() -> None:
    files = {"r.yaml": "routes:\n  - id: orders-a\n    uri: /a\n    upstream_id: platform-web\n"
                       "  - id: orders-b\n    uri: /b\n    upstream_id: payments-web\n"
                       "  - id: orders-c\n    uri: /c\n    upstream_id: nobodys-web\n"
                       "  - id: orders-d\n    uri: /d\n    upstream_id: orders-gone\n"}
    alone = part("orders", files)
    found = external("orders", facts_of(alone, SOURCES), alone.rendered.source_map, SOURCES)
    assert [str(p) for p in found] == [
        "r.yaml:7:5: routes[orders-b].upstream_id: upstream_id 'payments-web' names upstreams of source "
        "'payments', " + NOT_SHARED,
        "r.yaml:10:5: routes[orders-c].upstream_id: upstream_id 'nobodys-web' names no item of upstreams",
        "r.yaml:13:5: routes[orders-d].upstream_id: upstream_id 'orders-gone' names no item of upstreams"]

