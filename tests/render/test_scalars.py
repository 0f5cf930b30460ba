"""The repo format's one scalar schema: plain scalars read as YAML 1.2's core schema (as ADC and the editors
read them), and a note where YAML 1.1 reads them otherwise; the file's parse pinned to that reading."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gitsync.render.load import parse
from gitsync.render.scalars import number_text, plain_value, read, read_tagged
from testkit import yamlforms
from testkit.profiles import examples

#: The forms the parity matrix found read otherwise by ADC and gitsync, and their kin: (text, value read,
#: what a YAML 1.1 tool reads, the form the note says to write).
DIFFERENT_IN_YAML_11 = [
    ("1_000", "1_000", "the number 1000",
     'quote it ("1_000") to keep the text, or write 1000 for the number'),
    ("0b101", "0b101", "the number 5", 'quote it ("0b101") to keep the text, or write 5 for the number'),
    ("0x_1F", "0x_1F", "the number 31", 'quote it ("0x_1F") to keep the text, or write 31 for the number'),
    ("1_0.5", "1_0.5", "the number 10.5",
     'quote it ("1_0.5") to keep the text, or write 10.5 for the number'),
    ("0777", 777, "the number 511", 'write 777 for what gitsync reads, 511 for what YAML 1.1 reads, or '
                                    'quote it ("0777") for the text'),
    ("yes", "yes", "the boolean true", 'quote it ("yes") to keep the text, or write true for the boolean'),
    ("Off", "Off", "the boolean false", 'quote it ("Off") to keep the text, or write false for the boolean'),
    ("y", "y", "the boolean true", 'quote it ("y") to keep the text, or write true for the boolean'),
    ("1:20", "1:20", "the number 80", 'quote it ("1:20") to keep the text, or write 80 for the number'),
    ("2024-01-02", "2024-01-02", "a date", 'quote it ("2024-01-02")'),
    ("0o17", 15, 'the text "0o17"', 'write 15 for the number, or quote it ("0o17") for the text'),
    ("08", 8, 'the text "08"', 'write 8 for the number, or quote it ("08") for the text'),
    ("1e3", 1000.0, 'the text "1e3"', 'write 1000 for the number, or quote it ("1e3") for the text'),
    ("-.5", -0.5, 'the text "-.5"', 'write -0.5 for the number, or quote it ("-.5") for the text'),
]


@pytest.mark.parametrize("text, value, yaml11, advice", DIFFERENT_IN_YAML_11)
def test_a_scalar_yaml_11_reads_otherwise_is_read_as_yaml_12_with_a_note_naming_what_to_write(
        text: str, value: object, yaml11: str, advice: str) -> None:
    reading = read(text)
    assert (type(reading.value), reading.value) == (type(value), value)
    assert reading.error is None
    assert reading.note is not None
    assert f"in YAML 1.2 (how gitsync, ADC and editors read it) but {yaml11} in YAML 1.1" in reading.note
    assert reading.note.endswith(advice)


@pytest.mark.parametrize("text, value", [
    ("8080", 8080), ("0", 0), ("-12", -12), ("+3", 3), ("1.5", 1.5), ("0x1F", 31), ("00", 0),
    ("true", True), ("FALSE", False), ("~", None), ("", None), ("Null", None), ("0o1_7", "0o1_7"),
    ("nginx", "nginx"), ("tRue", "tRue"), ("1.2.3", "1.2.3"), ("0X1F", "0X1F"), ("-0o17", "-0o17"),
])
def test_a_scalar_both_schemas_read_alike_has_no_note(text: str, value: object) -> None:
    reading = read(text)
    assert (type(reading.value), reading.value) == (type(value), value)
    assert (reading.error, reading.note) == (None, None)


@pytest.mark.parametrize("text, error", [
    (".inf", "is not a number JSON can carry"), ("-.Inf", "is not a number JSON can carry"),
    (".NaN", "is not a number JSON can carry"), ("1e309", "is too large"), ("9" * 400, "is too large"),
    ("<<", "merge keys (<<) are not supported"),
])
def test_what_json_cannot_carry_and_the_merge_key_are_refused(text: str, error: str) -> None:
    reading = read(text)
    assert reading.error is not None and error in reading.error
    assert plain_value(text) == text  # an unquoted ${{ vars.X }} of such a value stays text


def test_gitsync_reads_every_recorded_form_as_adcs_and_the_editors_parsers_read_it() -> None:
    """tests/data/yaml-forms: 4,476 plain scalars as js-yaml 5.2.0 (ADC 0.28.0) and yaml 2.9.0
    (yaml-language-server) read them; gitsync reads the same, refusing only what JSON cannot carry."""
    compared = 0
    for form in yamlforms.recorded():
        kind, value = form.js_yaml
        if kind == "error" or form.yaml[0] == "error":
            continue  # not one plain scalar after "k: " for them
        parsed = parse(b"k: " + form.text.encode() + b"\n")
        if parsed.issues and "syntax error" in parsed.issues[0].message:
            continue  # not a plain scalar for libyaml either
        reading = read(form.text)
        if kind in ("inf", "nan") or form.yaml[0] in ("inf", "nan"):
            assert reading.error is not None, form
            continue
        if form.text == "<<":
            assert reading.error is not None
            continue
        ours = reading.value
        if kind == "number":
            assert type(ours) in (int, float) and math.isclose(ours, value, rel_tol=1e-15), form
        else:
            assert (kind, ours) == ({"text": "text", "bool": "bool", "null": "null"}[kind], value), form
            assert type(ours) is {"text": str, "bool": bool, "null": type(None)}[kind], form
        assert form.yaml == form.js_yaml, form
        compared += 1
    assert compared > 4000


@examples(5)
@given(yamlforms.plain_texts())
@pytest.mark.slow
@example("0o1_7")
@example("-0x1F")
@example("0_")
@example("0b_")
@example("=")
@example("2001-12-14 21:59:43.10 -5")
@example("1__0.")
@example("190:20:30")
def test_the_reading_of_any_text_is_the_core_schemas_with_a_note_exactly_where_yaml_11_differs(
        text: str) -> None:
    """The pin: against the spec's own regular expressions (YAML 1.2) and PyYAML (YAML 1.1)."""
    expected = yamlforms.expected_reading(text)
    reading = read(text)
    assert (reading.error is not None) == expected.refused, (text, reading)
    if not expected.refused:
        assert (type(reading.value), reading.value) == (type(expected.value), expected.value), text
        assert (reading.note is not None) == expected.noted, (text, reading.note)


@examples(3)
@given(st.one_of(st.integers(-10**20, 10**20), st.floats(allow_nan=False, allow_infinity=False)))
@pytest.mark.slow
def test_the_typed_form_a_note_suggests_reads_alike_in_both_schemas(number: float) -> None:
    text = number_text(number)
    reading = read(text)
    assert reading.note is None and reading.error is None, (text, reading)
    assert reading.value == number
    assert yamlforms.yaml11_reading(text)[1] == number


@examples(0.5)
@given(yamlforms.documents())
@pytest.mark.slow
def test_a_files_parse_gives_each_scalars_reading_at_its_place(case: yamlforms.Case) -> None:
    """What a faster parser must give too: the documents' content, the places of keys and items, every
    refusal and every note at its scalar."""
    parsed = parse(case.data)
    refused = tuple((i.line, i.col) for i in parsed.issues)
    assert refused == case.refused_at, case.data.decode()
    assert tuple((w.line, w.col) for w in parsed.warnings) == case.noted_at, case.data.decode()
    [document] = parsed.documents
    assert yamlforms._typed(document.data) == yamlforms._typed(case.content), case.data.decode()
    assert document.key_pos == case.key_pos
    assert document.item_pos == case.item_pos
    yamlforms.assert_same_parse(parsed, parse(case.data))


def test_a_note_is_a_warning_at_its_scalar_for_keys_values_and_flow_items() -> None:
    parsed = parse(b"routes:\n  - id: r1\n    vars: [[arg_b, '==', 1_000]]\n    labels: {yes: on}\n")
    assert parsed.issues == ()
    assert parsed.documents[0].data == {"routes": [{"id": "r1", "vars": [["arg_b", "==", "1_000"]],
                                                    "labels": {"yes": "on"}}]}
    assert [(w.line, w.col) for w in parsed.warnings] == [(3, 26), (4, 14), (4, 19)]
    assert parsed.warnings[0].message.startswith('unquoted 1_000 is the text "1_000" in YAML 1.2')


@pytest.mark.parametrize("tag, text, value", [
    ("int", "12", 12), ("int", "0x1F", 31), ("float", "1", 1.0), ("float", "1e3", 1000.0),
    ("bool", "True", True), ("null", "~", None),
])
def test_an_explicit_core_tag_reads_its_text_by_the_same_table(tag: str, text: str, value: object) -> None:
    reading = read_tagged(tag, text)
    assert (type(reading.value), reading.value, reading.error) == (type(value), value, None)


@pytest.mark.parametrize("tag, text", [("int", "1_000"), ("int", "1.5"), ("bool", "yes"), ("null", "0"),
                                       ("float", "0b1")])
def test_an_explicit_core_tag_that_does_not_fit_its_text_is_refused(tag: str, text: str) -> None:
    reading = read_tagged(tag, text)
    assert reading.error is not None and f"the tag !!{tag} does not fit" in reading.error
    assert parse(f"a: !!{tag} {text}\n".encode()).issues[0].message == reading.error
