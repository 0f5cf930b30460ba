"""Test tooling shipped with gitsync: the APISIX Admin API double (`apisix`), its data plane
(`dataplane`), its HTTP server (`http`) and lua-cjson's number encoding (`cjson`)."""
