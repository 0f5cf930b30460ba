"""The fields APISIX itself encrypts: every ``encrypt_fields`` list of APISIX 3.18's plugins, and the
fields of kinds it keeps secret by its own code.

A plugin declares ``encrypt_fields`` on its ``schema`` (a route's, service's… config), its
``consumer_schema`` (a consumer's or credential's) or its ``metadata_schema`` (its plugin_metadata).
A path is dotted, any depth; APISIX's walker (``process_encrypt_field``, ``apisix/plugin.lua``) goes
into every element of an array met on the way, and at the end encrypts a string, each string of an
array, or each string value of a mapping (one level). `gitsync.render.secrets` applies the same walk.

Read from the APISIX 3.18.0 source, each list from the loaded module; the file that declares each
list is kept with it (docs/architecture.md cites them). ``tests/data/apisix-3.18-encrypt-fields.json``
is that extraction as data: a test fails when a plugin gitsync knows has a list this table lacks.
"""

from __future__ import annotations

from typing import NamedTuple


class Declared(NamedTuple):
    """One plugin's encrypted fields, by the schema they are declared on, and the file declaring them."""

    file: str
    schema: tuple[str, ...] = ()
    consumer: tuple[str, ...] = ()
    metadata: tuple[str, ...] = ()


#: Plugin name → its ``encrypt_fields``, as APISIX 3.18 declares them.
ENCRYPT_FIELDS: dict[str, Declared] = {
    "ai-aliyun-content-moderation": Declared(
        "apisix/plugins/ai-aliyun-content-moderation.lua",
        schema=("access_key_secret",),
    ),
    "ai-aws-content-moderation": Declared(
        "apisix/plugins/ai-aws-content-moderation.lua",
        schema=("comprehend.secret_access_key",),
    ),
    "ai-cache": Declared(
        "apisix/plugins/ai-cache/schema.lua",
        schema=(
            "redis_password", "semantic.embedding.openai.api_key", "semantic.embedding.azure_openai.api_key",
        ),
    ),
    "ai-lakera-guard": Declared("apisix/plugins/ai-lakera-guard/schema.lua", schema=("api_key",)),
    "ai-proxy": Declared(
        "apisix/plugins/ai-proxy/schema.lua",
        schema=(
            "auth.header", "auth.query", "auth.gcp.service_account_json", "auth.aws.secret_access_key",
            "auth.aws.session_token",
        ),
    ),
    "ai-proxy-multi": Declared(
        "apisix/plugins/ai-proxy/schema.lua",
        schema=(
            "instances.auth.header", "instances.auth.query", "instances.auth.gcp.service_account_json",
            "instances.auth.aws.secret_access_key", "instances.auth.aws.session_token",
            "semantic_opts.embeddings.auth.header", "semantic_opts.embeddings.auth.query",
        ),
    ),
    "ai-rag": Declared(
        "apisix/plugins/ai-rag.lua",
        schema=("embeddings_provider.azure_openai.api_key", "vector_search_provider.azure_ai_search.api_key"),
    ),
    "ai-rate-limiting": Declared(
        "apisix/plugins/ai-rate-limiting.lua",
        schema=("redis_password", "sentinel_password"),
    ),
    "authz-casdoor": Declared("apisix/plugins/authz-casdoor.lua", schema=("client_secret",)),
    "authz-keycloak": Declared("apisix/plugins/authz-keycloak.lua", schema=("client_secret",)),
    "aws-lambda": Declared(
        "apisix/plugins/aws-lambda.lua",
        schema=("authorization.apikey", "authorization.iam.accesskey", "authorization.iam.secretkey"),
    ),
    "azure-functions": Declared(
        "apisix/plugins/azure-functions.lua",
        schema=("authorization.apikey",),
        metadata=("master_apikey",),
    ),
    "basic-auth": Declared("apisix/plugins/basic-auth.lua", consumer=("password",)),
    "cas-auth": Declared("apisix/plugins/cas-auth.lua", schema=("cookie.secret",)),
    "clickhouse-logger": Declared("apisix/plugins/clickhouse-logger.lua", schema=("password",)),
    "csrf": Declared("apisix/plugins/csrf.lua", schema=("key",)),
    "dingtalk-auth": Declared(
        "apisix/plugins/dingtalk-auth.lua",
        schema=("app_secret", "secret", "secret_fallbacks"),
    ),
    "elasticsearch-logger": Declared(
        "apisix/plugins/elasticsearch-logger.lua",
        schema=("auth.password", "headers"),
    ),
    "error-log-logger": Declared(
        "apisix/plugins/error-log-logger.lua",
        metadata=("clickhouse.password", "kafka.brokers.sasl_config.password"),
    ),
    "feishu-auth": Declared(
        "apisix/plugins/feishu-auth.lua",
        schema=("app_secret", "secret", "secret_fallbacks"),
    ),
    "google-cloud-logging": Declared(
        "apisix/plugins/google-cloud-logging.lua",
        schema=("auth_config.private_key",),
    ),
    "graphql-limit-count": Declared(
        "apisix/plugins/limit-count/init.lua",
        schema=("redis_password", "sentinel_password"),
    ),
    "hmac-auth": Declared("apisix/plugins/hmac-auth.lua", consumer=("secret_key",)),
    "http-logger": Declared("apisix/plugins/http-logger.lua", schema=("auth_header",)),
    "jwe-decrypt": Declared("apisix/plugins/jwe-decrypt.lua", consumer=("key", "secret")),
    "jwt-auth": Declared("apisix/plugins/jwt-auth.lua", consumer=("secret",)),
    "kafka-logger": Declared("apisix/plugins/kafka-logger.lua", schema=("brokers.sasl_config.password",)),
    "kafka-proxy": Declared("apisix/plugins/kafka-proxy.lua", schema=("sasl.password",)),
    "key-auth": Declared("apisix/plugins/key-auth.lua", consumer=("key",)),
    "lago": Declared("apisix/plugins/lago.lua", schema=("token",)),
    "ldap-auth-advanced": Declared("apisix/plugins/ldap-auth-advanced.lua", schema=("ldap_password",)),
    "limit-conn": Declared("apisix/plugins/limit-conn.lua", schema=("redis_password",)),
    "limit-count": Declared(
        "apisix/plugins/limit-count/init.lua",
        schema=("redis_password", "sentinel_password"),
    ),
    "limit-req": Declared("apisix/plugins/limit-req.lua", schema=("redis_password",)),
    "loggly": Declared("apisix/plugins/loggly.lua", schema=("customer_token",)),
    "loki-logger": Declared("apisix/plugins/loki-logger.lua", schema=("headers",)),
    "openfunction": Declared("apisix/plugins/openfunction.lua", schema=("authorization.service_token",)),
    "openid-connect": Declared(
        "apisix/plugins/openid-connect.lua",
        schema=(
            "client_secret", "client_rsa_private_key", "dpop.private_key", "session.secret",
            "session.redis.password",
        ),
    ),
    "openwhisk": Declared("apisix/plugins/openwhisk.lua", schema=("service_token",)),
    "rocketmq-logger": Declared("apisix/plugins/rocketmq-logger.lua", schema=("secret_key",)),
    "saml-auth": Declared(
        "apisix/plugins/saml-auth.lua",
        schema=("sp_private_key", "secret", "secret_fallbacks"),
    ),
    "sls-logger": Declared("apisix/plugins/sls-logger.lua", schema=("access_key_secret",)),
    "splunk-hec-logging": Declared("apisix/plugins/splunk-hec-logging.lua", schema=("endpoint.token",)),
    "tencent-cloud-cls": Declared("apisix/plugins/tencent-cloud-cls.lua", schema=("secret_key",)),
}

#: Per kind, the fields APISIX keeps secret by its own code, not by ``encrypt_fields``: an SSL's
#: private keys (``apisix/schema_def.lua``, encrypted by ``apisix/ssl.lua``), an upstream's client key
#: (``apisix/upstream.lua``). Secret managers (``apisix/secret/vault.lua``, ``aws.lua``, ``gcp.lua``)
#: are stored in clear by APISIX; their credentials are secret all the same.
KIND_FIELDS: dict[str, tuple[str, ...]] = {
    "ssls": ("key", "keys"),
    "upstreams": ("tls.client_key",),
    "routes": ("upstream.tls.client_key",),
    "services": ("upstream.tls.client_key",),
    "stream_routes": ("upstream.tls.client_key",),
}

#: A secret manager's credentials, by the manager its id starts with (``vault/…``, ``aws/…``, ``gcp/…``).
SECRET_MANAGER_FIELDS: dict[str, tuple[str, ...]] = {
    "vault": ("token",),
    "aws": ("access_key_id", "secret_access_key", "session_token"),
    "gcp": ("auth_config.private_key",),
}


def field_count() -> int:
    """How many (plugin, schema, path) entries the table holds."""
    return sum(len(d.schema) + len(d.consumer) + len(d.metadata) for d in ENCRYPT_FIELDS.values())


__all__ = ["ENCRYPT_FIELDS", "KIND_FIELDS", "SECRET_MANAGER_FIELDS", "Declared", "field_count"]
