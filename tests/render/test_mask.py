"""Masking for display (gitsync.render.mask): what the classifier finds and every known secret value,
as ``***``, wherever it appears; a secret that contains another is masked whole."""

from __future__ import annotations

import copy

import pytest

from gitsync.log import MASK
from gitsync.render.mask import mask_item, mask_known, mask_line, mask_secrets, masked_copy
from gitsync.render.secrets import Finding, SecretRules


@pytest.mark.parametrize("secrets", [["abc", "abcdef"], ["abcdef", "abc"]])
def test_a_secret_that_contains_another_is_masked_whole(secrets):
    assert mask_known("token=abcdef", secrets) == f"token={MASK}"
    assert mask_known("a=abc b=abcdef", secrets) == f"a={MASK} b={MASK}"


@pytest.mark.parametrize(("text", "secrets", "masked"), [
    ("token=s3cr3t", ["s3cr3t"], f"token={MASK}"),
    ("s3cr3t and s3cr3t", ["s3cr3t"], f"{MASK} and {MASK}"),
    ("nothing here", ["s3cr3t"], "nothing here"),
    ("x=one y=two", ["one", "two"], f"x={MASK} y={MASK}"),
    ("x=one", ["", "one"], f"x={MASK}"),  # an empty value is no secret (it is in every text)
    ("x=one", [""], "x=one"),
    ("x=one", [], "x=one"),
    ("x=one", ["one", "one"], f"x={MASK}"),
])
def test_known_values_are_masked_wherever_they_appear(text, secrets, masked):
    assert mask_known(text, secrets) == masked


def test_an_item_is_masked_by_the_classifier_then_by_known_values():
    item = {"id": "r1", "uri": "/s3cr3t/path", "plugins": {"key-auth": {"key": "the-consumer-key"}},
            "desc": ["abcdef", {"note": "abc"}, 5, None, True]}
    kept = copy.deepcopy(item)
    masked = mask_item("consumers", item, ["s3cr3t", "abc", "abcdef"])
    assert masked == {"id": "r1", "uri": f"/{MASK}/path", "plugins": {"key-auth": {"key": MASK}},
                      "desc": [MASK, {"note": MASK}, 5, None, True]}
    assert item == kept  # the item itself is left as it was


def test_an_item_without_known_values_keeps_its_other_strings():
    item = {"id": "c1", "username": "jack", "plugins": {"key-auth": {"key": "the-consumer-key"}}}
    assert mask_item("consumers", item) == {"id": "c1", "username": "jack",
                                            "plugins": {"key-auth": {"key": MASK}}}


def test_declared_secret_fields_are_masked():
    item = {"id": "r1", "plugins": {"my-plugin": {"conf": "visible", "hidden": "value"}}}
    rules = SecretRules.of(["my-plugin.hidden"])
    assert mask_item("routes", item, (), rules)["plugins"]["my-plugin"] == {"conf": "visible", "hidden": MASK}
    assert mask_item("routes", item)["plugins"]["my-plugin"] == {"conf": "visible", "hidden": "value"}


def test_a_payload_is_masked_kind_by_kind():
    payload = {"consumers": [{"username": "jack", "plugins": {"key-auth": {"key": "k-1"}}},
                             {"username": "s3cr3t-holder", "plugins": {}}],
               "lines": {"text": "password: s3cr3t"}}
    masked = mask_secrets(payload, ["s3cr3t"])
    assert masked == {"consumers": [{"username": "jack", "plugins": {"key-auth": {"key": MASK}}},
                                    {"username": f"{MASK}-holder", "plugins": {}}],
                      "lines": {"text": f"password: {MASK}"}}
    assert payload["consumers"][0]["plugins"]["key-auth"]["key"] == "k-1"


def test_a_payload_with_values_given_once_as_an_iterator_masks_every_kind():
    payload = {"routes": [{"id": "r1", "desc": "s3cr3t"}], "services": [{"id": "s1", "desc": "s3cr3t"}]}
    masked = mask_secrets(payload, iter(["s3cr3t"]))
    assert masked["routes"][0]["desc"] == MASK and masked["services"][0]["desc"] == MASK


def test_masked_copy_replaces_each_findings_part_in_a_copy():
    item = {"a": {"b": "keep SECRET keep"}, "c": ["x", "WHOLE"]}
    findings = [Finding(("a", "b"), ((5, 11),), "shape"), Finding(("c", 1), None, "name")]
    out = masked_copy(item, findings)
    assert out == {"a": {"b": f"keep {MASK} keep"}, "c": ["x", MASK]}
    assert item == {"a": {"b": "keep SECRET keep"}, "c": ["x", "WHOLE"]}


def test_masked_copy_of_a_bare_string_and_without_findings():
    assert masked_copy("Bearer abcdefgh12345678", [Finding((), ((7, 23),), "scheme")]) == f"Bearer {MASK}"
    assert masked_copy("whole", [Finding((), None, "name")]) == MASK
    item = {"a": "b"}
    assert masked_copy(item, []) is item


def test_a_line_is_masked_by_shape_and_by_known_values():
    line = "push failed: Authorization: Bearer abcdefghijklmnop1234 and s3cr3t"
    masked = mask_line(line, ["s3cr3t"])
    assert "abcdefghijklmnop1234" not in masked and "s3cr3t" not in masked
    assert masked.startswith("push failed: Authorization: Bearer ") and masked.endswith(f" and {MASK}")
    assert mask_line("nothing secret") == "nothing secret"
    assert mask_line("token=abcdef", ["abc", "abcdef"]) == f"token={MASK}"


def test_longest_first_is_by_length_not_by_spelling():
    """"bc" sorts after "abcd", and is inside it: by length, "abcd" goes first and is masked whole."""
    assert mask_known("x=abcd", ["bc", "abcd"]) == f"x={MASK}"
    assert mask_known("x=abcd y=bc", ["abcd", "bc"]) == f"x={MASK} y={MASK}"


def test_a_kind_that_is_not_a_list_is_masked_as_that_kind_with_the_rules():
    masked = mask_secrets({"ssls": {"id": "s1", "key": "the private key text"}}, [])
    assert masked == {"ssls": {"id": "s1", "key": MASK}}  # an SSL's key, by its kind
    rules = SecretRules.of(["routes.desc"])
    masked = mask_secrets({"routes": {"id": "r1", "desc": "v"}}, [], rules)
    assert masked == {"routes": {"id": "r1", "desc": MASK}}
