"""Render: a config repo's files → one APISIX standalone payload, with a source map."""
