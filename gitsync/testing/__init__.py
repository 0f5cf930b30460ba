"""Test tooling shipped with gitsync: the APISIX Admin API double (`gitsync.testing.apisix`)."""
