"""Each forge client against a contract double that checks every request against the forge's published
API description (tests/data/forges/, README there: GitHub's OpenAPI description 1.1.4, Gitea's swagger,
GitLab's Grape endpoint and notes API documentation, Bitbucket Cloud's OpenAPI description)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gitsync.feedback.forge import (
    CommitStatus,
    Forge,
    ForgeAddress,
    ForgeAuthError,
    ForgeUnavailable,
    address_from_settings,
    bitbucket_key,
    forge_client,
    forge_of_host,
    repo_host_and_path,
)
from gitsync.feedback.outbox import PostedStatuses, post
from gitsync.log import register_secret
from gitsync.settings import Secret, SettingsError, load
from testkit.forges import FORGE_TOKEN, PROJECT, ForgeDouble

SHA = "3f786850e387550fdab836ed7e6dc881de23001b"
SECRET = "s3cr3t-value-in-a-problem"
LONG = f"conf/routes.yaml:3:5: routes[r1].uri: {SECRET} " + "x" * 300
FORGES = ["github", "gitlab", "gitea", "forgejo", "bitbucket"]
#: gitsync's state → what each forge shows.
SHOWN = {"github": {"pending": "pending", "success": "success", "failure": "failure", "error": "error"},
         "gitea": {"pending": "pending", "success": "success", "failure": "failure", "error": "error"},
         "gitlab": {"pending": "pending", "success": "success", "failure": "failed", "error": "failed"},
         "bitbucket": {"pending": "INPROGRESS", "success": "SUCCESSFUL", "failure": "FAILED",
                       "error": "FAILED"}}
LIMITS = {"github": 140, "gitea": 140, "gitlab": 255, "bitbucket": 255}


def client(double: ForgeDouble, token: str = FORGE_TOKEN) -> Forge:
    kind = "gitea" if double.kind == "gitea" else double.kind
    return forge_client(ForgeAddress(kind, double.url, double.api_url, double.project, Secret(token), 5.0))


@pytest.fixture(params=FORGES)
def double(request: pytest.FixtureRequest) -> Iterator[ForgeDouble]:
    kind = "gitea" if request.param == "forgejo" else request.param
    with ForgeDouble(kind, forgejo=request.param == "forgejo") as d:
        yield d


def test_every_state_is_posted_as_the_forge_names_it_within_its_limits(double: ForgeDouble) -> None:
    register_secret(SECRET)  # as settings and renders register every secret they read
    forge = client(double)
    for state in ("pending", "success", "failure", "error"):
        forge.post_status(CommitStatus(SHA, f"gitsync/{state}", state, LONG, "https://ui.example/", "main"))
    assert double.violations == []
    shown = double.latest(SHA)
    assert {c: s["state"] for c, s in shown.items()} == {f"gitsync/{s}": SHOWN[double.kind][s] for s in
                                                           ("pending", "success", "failure", "error")}
    limit = LIMITS[double.kind]
    for status in shown.values():
        assert len(status["description"]) <= limit and status["description"].endswith("…")
        assert SECRET not in status["description"] and "***" in status["description"]
    if double.kind in ("gitlab", "bitbucket"):  # no error state: the description says it
        assert shown["gitsync/error"]["description"].startswith("error: ")
    requests = [r for r in double.requests if r.operation]
    assert len(requests) == 4 and all(r.status in (200, 201) for r in requests)


def test_the_doubles_answer_as_the_forges_do_where_the_clients_must_cope() -> None:
    """The doubles themselves: GitHub refuses a long description (it does not cut it), GitLab a state
    posted again, Bitbucket a long key; what the clients send instead is accepted."""
    auth = {"Authorization": f"Bearer {FORGE_TOKEN}"}
    with ForgeDouble("github") as github:
        answer = httpx.post(f"{github.api_url}/repos/{PROJECT}/statuses/{SHA}", headers=auth,
                            json={"state": "failure", "description": "x" * 141, "context": "gitsync"})
        assert answer.status_code == 422
        assert answer.json()["errors"][0]["message"] == "description is too long (maximum is 140 characters)"
        client(github).post_status(CommitStatus(SHA, "gitsync", "failure", "x" * 141))
        assert len(github.latest(SHA)["gitsync"]["description"]) == 140
        assert httpx.post(f"{github.api_url}/repos/{PROJECT}/statuses/{SHA}", headers=auth,
                          json={"state": "done"}).status_code == 422  # not in the enum
        assert github.violations == ["repos/create-commit-status: 'done' is not one of "
                                     "['error', 'failure', 'pending', 'success'] at ['state']"]
    with ForgeDouble("gitlab") as gitlab:
        url = f"{gitlab.api_url}/projects/{PROJECT.replace('/', '%2F')}/statuses/{SHA}"
        body = {"state": "pending", "name": "gitsync", "ref": "main"}
        assert httpx.post(url, headers={"PRIVATE-TOKEN": FORGE_TOKEN}, json=body).status_code == 201
        again = httpx.post(url, headers={"PRIVATE-TOKEN": FORGE_TOKEN}, json=body)
        assert again.status_code == 400
        assert "Cannot transition status via :enqueue from :pending" in again.text
        client(gitlab).post_status(CommitStatus(SHA, "gitsync", "pending", "again", ref="main"))  # no error
        assert gitlab.violations == []
    with ForgeDouble("bitbucket") as bitbucket:
        answer = httpx.post(f"{bitbucket.api_url}/repositories/{PROJECT}/commit/{SHA}/statuses/build",
                            headers=auth, json={"key": "k" * 48, "state": "SUCCESSFUL",
                                                "url": "https://x.example/"})
        assert answer.status_code == 400 and "at most 40 characters (it has 48)" in answer.text


def test_gitlab_takes_the_project_path_encoded_and_a_pending_status_is_not_posted_twice(tmp_path):
    done = CommitStatus(SHA, "gitsync/eu", "success", "3/3 applied (3 gateways)", ref="main")
    with ForgeDouble("gitlab", project="group/sub/project") as gitlab:
        forge, posted = client(gitlab), PostedStatuses(tmp_path / "posted.json")
        post(forge, posted, CommitStatus(SHA, "gitsync/eu", "pending", "1/3 applied", ref="main"))
        post(forge, posted, CommitStatus(SHA, "gitsync/eu", "pending", "2/3 applied", ref="main"))
        post(forge, posted, done)
        post(forge, posted, done)
        assert gitlab.violations == []
        assert [s["state"] for s in gitlab.statuses[SHA]] == ["pending", "success"]
        assert gitlab.requests[0].path == f"/projects/group%2Fsub%2Fproject/statuses/{SHA}"
        # What was posted survives a restart: the same status is not posted again.
        post(client(gitlab), PostedStatuses(tmp_path / "posted.json"), done)
        assert len(gitlab.statuses[SHA]) == 2


def test_bitbucket_keys_fit_40_characters_and_a_user_app_password_is_basic_auth() -> None:
    context = "gitsync/a-group-name-that-is-much-longer-than-forty-characters"
    assert len(bitbucket_key(context)) <= 40 and bitbucket_key(context) != bitbucket_key(context + "x")
    assert bitbucket_key("gitsync/eu") == "gitsync-eu"
    with ForgeDouble("bitbucket", token="ci-bot:app-password-77") as bitbucket:
        client(bitbucket, "ci-bot:app-password-77").post_status(
            CommitStatus(SHA, context, "success", "applied", None, "main"))
        assert bitbucket.violations == []
        status = bitbucket.latest(SHA)[context]
        assert status["refname"] == "main" and status["target_url"].endswith(f"/commits/{SHA}")


@pytest.mark.parametrize("kind", ["github", "gitlab", "gitea", "bitbucket"])
def test_one_sticky_comment_is_created_then_updated_never_repeated(kind: str) -> None:
    marker = "<!-- gitsync-review -->"
    with ForgeDouble(kind) as double:
        double.seed_comment(7, "an earlier review by a person")
        double.seed_comment(7, "added 1 commit", system=True)
        for i in range(120):  # more than a page: the clients page through
            double.seed_comment(7, f"comment {i}")
        forge = client(double)
        assert forge.upsert_comment(7, f"{marker}\n/merge\nfirst", marker) == "created"
        assert forge.upsert_comment(7, f"{marker}\n/merge\nfirst", marker) == "unchanged"
        assert forge.upsert_comment(7, f"{marker}\nsecond", marker) == "updated"
        assert forge.upsert_comment(7, f"{marker}\nsecond", marker) == "unchanged"
        assert double.violations == []
        ours = [c for c in double.comments[7] if marker in c["body"]]
        assert len(ours) == 1 and ours[0]["body"].endswith("second")


def test_failures_map_to_one_exception_each_and_never_show_the_token() -> None:
    with ForgeDouble("github") as github:
        with pytest.raises(ForgeAuthError) as denied:
            client(github, "wrong-token-0000").post_status(CommitStatus(SHA, "gitsync", "success", "ok"))
        assert not denied.value.retry and "401" in str(denied.value)
        assert "wrong-token-0000" not in str(denied.value)
        github.failures.append(502)
        with pytest.raises(ForgeUnavailable) as down:
            client(github).post_status(CommitStatus(SHA, "gitsync", "success", "ok"))
        assert down.value.retry
    nowhere = forge_client(ForgeAddress("github", "http://127.0.0.1:9", "http://127.0.0.1:9/api/v3", PROJECT,
                                        Secret(FORGE_TOKEN), 2.0))
    with pytest.raises(ForgeUnavailable) as refused:  # nothing listens there
        nowhere.post_status(CommitStatus(SHA, "c", "success", "ok"))
    assert refused.value.retry and FORGE_TOKEN not in str(refused.value)


def test_the_forge_is_told_from_the_repo_url_or_set() -> None:
    assert repo_host_and_path("git@github.com:octo/config.git") == ("github.com", "octo/config")
    assert repo_host_and_path("https://gitlab.example.com/group/sub/proj.git") == ("gitlab.example.com",
                                                                                   "group/sub/proj")
    assert repo_host_and_path("ssh://git@bitbucket.org/ws/slug.git") == ("bitbucket.org", "ws/slug")
    assert [forge_of_host(h) for h in ("github.com", "gitlab.com", "bitbucket.org", "codeberg.org",
                                       "git.forgejo.example", "gitea.internal", "github.corp.example",
                                       "git.example.com")] == \
        ["github", "gitlab", "bitbucket", "gitea", "gitea", "gitea", "github", None]
    env = {"GITSYNC_FORGE_TOKEN": FORGE_TOKEN}
    github = address_from_settings(load(env=env | {"GITSYNC_REPO": "git@github.com:octo/config.git"},
                                        config="/dev/null"))
    assert github is not None and (github.kind, github.api_url, github.project) == (
        "github", "https://api.github.com", "octo/config")
    ghes = address_from_settings(load(env=env | {"GITSYNC_REPO": "https://github.corp.example/o/r.git",
                                                 "GITSYNC_FORGE_URL": "https://github.corp.example"},
                                      config="/dev/null"))
    assert ghes is not None and ghes.api_url == "https://github.corp.example/api/v3"
    gitlab = address_from_settings(load(env=env | {"GITSYNC_REPO": "https://git.example.com/g/p.git",
                                                   "GITSYNC_FORGE": "gitlab",
                                                   "GITSYNC_FORGE_URL": "https://git.example.com"},
                                        config="/dev/null"))
    assert gitlab is not None and gitlab.api_url == "https://git.example.com/api/v4"
    with pytest.raises(SettingsError, match=r"forge: cannot tell the forge from the repo URL's host git\.ex"):
        address_from_settings(load(env=env | {"GITSYNC_REPO": "https://git.example.com/g/p.git"},
                                   config="/dev/null"))
    with pytest.raises(SettingsError, match="forge_project"):
        address_from_settings(load(env=env | {"GITSYNC_REPO": "git://127.0.0.1:9418/repo.git",
                                              "GITSYNC_FORGE": "github"}, config="/dev/null"))
    no_token = load(env={"GITSYNC_REPO": "git@github.com:o/r.git"}, config="/dev/null")
    assert address_from_settings(no_token) is None


def test_the_forge_token_goes_only_to_a_named_or_well_known_api_host_and_never_over_plain_http() -> None:
    env = {"GITSYNC_FORGE_TOKEN": FORGE_TOKEN}
    for repo, api in (("git@github.com:o/r.git", "https://api.github.com"),
                      ("https://gitlab.com/g/p.git", "https://gitlab.com/api/v4"),
                      ("git@bitbucket.org:w/s.git", "https://api.bitbucket.org/2.0"),
                      ("https://codeberg.org/o/r.git", "https://codeberg.org/api/v1")):
        address = address_from_settings(load(env=env | {"GITSYNC_REPO": repo}, config="/dev/null"))
        assert address is not None and address.api_url == api, repo
    # the host of the repo URL alone (a mirror, a look-alike such as github.attacker.example) is no forge
    for repo in ("https://github.attacker.example/o/r.git", "https://gitea.internal/o/r.git"):
        with pytest.raises(SettingsError, match=r"forge_url: the forge token would go to https://\S+, a host "
                                                 r"taken from the repo URL: set forge_url"):
            address_from_settings(load(env=env | {"GITSYNC_REPO": repo}, config="/dev/null"))
    named = address_from_settings(load(env=env | {"GITSYNC_REPO": "https://gitea.internal/o/r.git",
                                                  "GITSYNC_FORGE_API_URL": "https://gitea.internal/api/v1"},
                                       config="/dev/null"))
    assert named is not None and named.api_url == "https://gitea.internal/api/v1"
    with pytest.raises(SettingsError, match=r"GITSYNC_FORGE_URL: forge_url is http://, so the forge token "
                                             r"would cross the network in clear"):
        load(env=env | {"GITSYNC_REPO": "https://gitea.internal/o/r.git",
                        "GITSYNC_FORGE_URL": "http://gitea.internal"}, config="/dev/null")
    allowed = load(env=env | {"GITSYNC_REPO": "https://gitea.internal/o/r.git",
                              "GITSYNC_FORGE_ALLOW_HTTP": "true", "GITSYNC_FORGE_URL": "http://127.0.0.1:3000"},
                   config="/dev/null")
    assert address_from_settings(allowed).api_url == "http://127.0.0.1:3000/api/v1"


def test_the_vendored_descriptions_name_their_sources() -> None:
    for kind in ("github", "gitea", "gitlab", "bitbucket"):
        path = Path(__file__).resolve().parents[1] / "data" / "forges" / f"{kind}.json"
        source = json.loads(path.read_text())["source"]
        assert source["repo"] and source["path"] and source["version"]
