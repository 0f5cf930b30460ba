"""ADC's slugs: the npm package slugify 1.6.9 (what ADC 0.28.0 bundles), default options. The expected
slugs are what that package returns for the same text (node, ``require('slugify')(text)``)."""

from __future__ import annotations

import pytest

from gitsync.render.openapi.slug import slugify


@pytest.mark.parametrize(("text", "slug"), [
    ("httpbin.org", "httpbin.org"),
    ("/absolute-redirect/{n}", "absolute-redirectn"),  # ADC's "case 2": httpbin.org_absolute-redirectn_get
    ("My API v2 (beta) & co ÄÖ ß", "My-API-v2-(beta)-and-co-AO-ss"),
    ("/Über uns/$x|y%z<a>b", "Uber-unsdollarxorypercentzlessagreaterb"),
    ("/a--b/ c  d/", "a-b-c-d"),
    ("Ĳ ĳ Ñandú café™ Łódź", "Nandu-cafetm-Lodz"),
    ("/users/{id}/files/{name}.json", "usersidfilesname.json"),
])
def test_slugs_are_slugifys(text: str, slug: str) -> None:
    assert slugify(text) == slug
