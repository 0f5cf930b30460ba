"""OpenAPI paths → the uri, vars and priority that match exactly that path on every APISIX router."""

from __future__ import annotations

import re

import pytest

from gitsync.render.openapi.uris import Matcher, matcher, template_key


@pytest.mark.parametrize(("path", "expected"), [
    ("/anything", Matcher("/anything")),
    ("/users/{id}", Matcher("/users/*", "^/users/[^/]+$", len("/users/"))),
    ("/users/{id}/files/{name}.json", Matcher("/users/*", "^/users/[^/]+/files/[^/]+\\.json$", 19)),
    ("/caf%C3%A9/{x}", Matcher("/café/*", "^/café/[^/]+$", 6)),  # APISIX matches the decoded uri
    ("/a/*", Matcher("/a/*", "^/a/\\*$", 4)),  # a literal star is no prefix match
    ("/a:b", Matcher("/a*", "^/a\\:b$", 4)),  # nor a colon a parameter (radixtree_uri_with_parameter)
])
def test_a_path_becomes_a_matcher(path: str, expected: Matcher) -> None:
    assert matcher(path) == expected


@pytest.mark.parametrize(("path", "why"), [
    ("users", "does not start with '/'"),
    ("/a/{", "does not open or close a template"),
    ("/a/}b", "does not open or close a template"),
    ("/a/{}", "an empty template"),
    ("/a?b=1", "a query"),
    ("/a#b", "a fragment"),
    ("/a\nb", "a control character"),
])
def test_a_path_that_cannot_be_matched_says_why(path: str, why: str) -> None:
    found = matcher(path)
    assert isinstance(found, str) and why in found


@pytest.mark.parametrize(("request_path", "matches"), [
    ("/users/42/files/report.json", True),
    ("/users/42/files/report.jsonx", False),
    ("/users/42/files/.json", False),  # a template is at least one character
    ("/users//files/a.json", False),
    ("/users/4/2/files/a.json", False),  # and never a '/'
    ("/users/42/files/a.json/", False),
])
def test_the_regex_matches_the_paths_requests_and_no_other(request_path: str, matches: bool) -> None:
    found = matcher("/users/{id}/files/{name}.json")
    assert isinstance(found, Matcher) and found.regex is not None
    assert request_path.startswith(found.uri[:-1])
    assert (re.search(found.regex, request_path) is not None) == matches


def test_the_more_literal_of_two_overlapping_templates_is_tried_first() -> None:
    concrete, general = matcher("/a/{x}/c"), matcher("/a/{x}/{y}")
    assert isinstance(concrete, Matcher) and isinstance(general, Matcher)
    assert concrete.uri == general.uri and (concrete.priority or 0) > (general.priority or 0)


def test_templates_with_other_names_are_the_same_path() -> None:
    assert template_key("/users/{id}") == template_key("/users/{name}") != template_key("/users/me")
