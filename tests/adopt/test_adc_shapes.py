"""ADC's schema types, and text in its number fields read as ADC's lint reads it
(`gitsync.adopt.adc_shapes`)."""

from __future__ import annotations

import pytest

from gitsync.adopt.adc_shapes import js_number, numbers_read, wrong_types
from gitsync.adopt.repo_writer import NumberReference

#: JavaScript's Number() of each text, as Node 24.16.0 gave it (ADC's lint: z.coerce.number), JSON-encoded as
#: ADC writes the result; None: NaN or an infinity, which zod refuses.
NODE_NUMBER = [
    ("18390", 18390), (" 5 ", 5), ("\u00a05\u2028", 5), ("0x1F", 31), ("0X1f", 31), ("0o17", 15), ("0B1", 1),
    ("", 0), ("  ", 0), ("2.5", 2.5), ("5.0", 5), ("5.", 5), (".5", 0.5), ("+5", 5), ("-0", 0), ("1e3", 1000),
    ("-.5e-3", -0.0005), ("00017", 17), ("1_000", None), ("fast", None), ("-0x1F", None), ("Infinity", None),
    ("1e400", None), ("0x", None), ("1e", None), ("+-1", None), ("1 2", None), ("\u00855", None),
]


@pytest.mark.parametrize("text, number", NODE_NUMBER)
def test_text_in_a_number_field_is_what_javascripts_number_makes_of_it(text: str,
                                                                       number: float | None) -> None:
    found = js_number(text)
    assert found == number and type(found) is type(number)


def test_numbers_written_as_text_become_numbers_and_env_references_typed_references() -> None:
    data = {"services": [{"name": "s", "upstream": {
        "nodes": [{"host": "a", "port": "18390", "weight": " 1 "},
                  {"host": "b", "port": "${PORT}", "weight": 1}],
        "timeout": {"connect": "2.5", "send": "${T}", "read": 5}, "retries": "1_000",
        "keepalive_pool": {"size": "1.5"}},
        "routes": [{"name": "r", "uris": ["/r"], "priority": "0x10", "vars": [["arg_b", "==", "1000"]],
                    "plugins": {"limit-count": {"count": "100"}}}]}]}
    found, problems = numbers_read(data)
    assert problems == []
    assert [(n.path[-1], n.value, n.variable) for n in found] == [
        ("port", 18390, None), ("weight", 1, None), ("port", "${{ number(vars.PORT) }}", "PORT"),
        ("connect", 2.5, None), ("send", "${{ number(vars.T) }}", "T"), ("priority", 16, None)]
    upstream = data["services"][0]["upstream"]
    assert upstream["nodes"][0] == {"host": "a", "port": 18390, "weight": 1}
    assert isinstance(upstream["nodes"][1]["port"], NumberReference)
    # Not numbers to ADC's lint: left as they are, and refused as wrong types (with what Number() says).
    assert upstream["retries"] == "1_000" and upstream["keepalive_pool"]["size"] == "1.5"
    assert [message for _, message in wrong_types(data)] == [
        "services[0].upstream.retries: expected an integer, got text '1_000', which JavaScript's Number() "
        "(ADC's lint) does not read as an integer either",
        "services[0].upstream.keepalive_pool.size: expected an integer, got text '1.5', which JavaScript's "
        "Number() (ADC's lint) does not read as an integer either"]
    # What is not a number field of ADC's schema (a route's vars, a plugin) stays text.
    route = data["services"][0]["routes"][0]
    assert route["vars"] == [["arg_b", "==", "1000"]] and route["plugins"]["limit-count"]["count"] == "100"


@pytest.mark.parametrize("text", ["p${PORT}", "${A}${B}", "${PORT}0"])
def test_a_reference_that_is_only_part_of_a_number_field_is_a_problem(text: str) -> None:
    data = {"services": [{"name": "s", "upstream": {"nodes": [{"host": "a", "port": text, "weight": 1}]}}]}
    found, problems = numbers_read(data)
    assert found == []
    assert [path for path, _ in problems] == [("services", 0, "upstream", "nodes", 0, "port")]
    assert "into a number field with other text" in problems[0][1]


def test_an_escaped_reference_in_a_number_field_stays_text_as_adc_keeps_it() -> None:
    node = {"host": "a", "port": "\\${PORT}", "weight": 1}
    data = {"services": [{"name": "s", "upstream": {"nodes": [node]}}]}
    assert numbers_read(data) == ([], [])
    assert "expected an integer, got text" in wrong_types(data)[0][1]
