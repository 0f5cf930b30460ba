"""OpenAPI specs in the config repo → services, upstreams and routes, as ADC's converter makes them.

A config file's ``openapi:`` section declares specs (`declaration`); at every render the spec stage
(`stage`, between loading and building) converts each (`convert`, pure): the document is read
(`spec`, its references followed within the repo and bounded: `refs`), turned into ADC's services as
``adc convert openapi`` 0.28.0 does (`adc`, with ADC's slugs: `slug`), and those into the APISIX items
``adc sync`` writes (`items`, with ADC's id rules: `adc_items`), each templated path matched exactly
(`uris`) and, when asked, requests validated (`validation`). Every generated item carries the
operation and the places it came from (`gitsync.render.sourcemap.Generated`). docs/openapi.md is the
user's side of it.
"""
