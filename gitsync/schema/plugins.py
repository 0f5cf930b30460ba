"""APISIX's plugin names (3.18), which auth plugins exist, and which run on stream routes.

APISIX rejects a plugin name it does not know (``unknown plugin [x]``). It checks
against the plugins enabled in its ``config.yaml``; gitsync cannot know a
gateway's list, so it takes every plugin APISIX 3.18 ships (the default-enabled
list of ``apisix/cli/config.lua`` plus the ones shipped but disabled by
default). A typo is still caught; a real plugin is never refused.
"""

from __future__ import annotations

#: Enabled by default in APISIX 3.18's ``config.lua``.
DEFAULT_ENABLED: tuple[str, ...] = (
    "real-ip", "ai", "client-control", "proxy-control", "request-id", "zipkin",
    "ext-plugin-pre-req", "fault-injection", "mocking", "serverless-pre-function", "cors",
    "ip-restriction", "ua-restriction", "referer-restriction", "csrf", "uri-blocker",
    "request-validation", "chaitin-waf", "multi-auth", "openid-connect", "cas-auth",
    "authz-casbin", "authz-casdoor", "wolf-rbac", "ldap-auth", "hmac-auth", "basic-auth",
    "jwt-auth", "jwe-decrypt", "key-auth", "consumer-restriction", "attach-consumer-label",
    "forward-auth", "opa", "authz-keycloak", "proxy-cache", "body-transformer",
    "ai-prompt-template", "ai-prompt-decorator", "ai-prompt-guard", "ai-rag",
    "ai-rate-limiting", "ai-proxy-multi", "ai-proxy", "ai-aws-content-moderation",
    "ai-aliyun-content-moderation", "proxy-mirror", "proxy-rewrite", "workflow", "api-breaker",
    "limit-conn", "limit-count", "limit-req", "gzip", "traffic-split", "redirect",
    "response-rewrite", "mcp-bridge", "degraphql", "kafka-proxy", "grpc-transcode", "grpc-web",
    "http-dubbo", "public-api", "prometheus", "datadog", "etcd-logger", "lago", "loki-logger",
    "elasticsearch-logger", "echo", "loggly", "http-logger", "splunk-hec-logging",
    "skywalking-logger", "google-cloud-logging", "sls-logger", "tcp-logger", "kafka-logger",
    "rocketmq-logger", "syslog", "udp-logger", "file-logger", "clickhouse-logger",
    "tencent-cloud-cls", "inspect", "example-plugin", "aws-lambda", "azure-functions",
    "openwhisk", "openfunction", "serverless-post-function", "ext-plugin-post-req",
    "ext-plugin-post-resp", "ai-request-rewrite",
    # Also default-enabled in 3.18, and each declares encrypt_fields (gitsync.schema.encrypt_fields):
    # known here so that their secret fields are known wherever they are used.
    "ai-cache", "ai-lakera-guard", "dingtalk-auth", "feishu-auth", "graphql-limit-count",
    "ldap-auth-advanced", "saml-auth",
)

#: Shipped with APISIX but disabled in the default ``config.lua``.
SHIPPED_DISABLED: tuple[str, ...] = (
    "batch-requests", "brotli", "dubbo-proxy", "error-log-logger", "gm", "log-rotate",
    "node-status", "opentelemetry", "server-info", "skywalking",
)

#: Every HTTP plugin name gitsync and the double accept.
PLUGINS: frozenset[str] = frozenset(DEFAULT_ENABLED + SHIPPED_DISABLED)

#: Plugins of ``type = 'auth'``: the only ones a consumer credential may carry.
AUTH_PLUGINS: frozenset[str] = frozenset({
    "basic-auth", "hmac-auth", "jwt-auth", "key-auth", "ldap-auth", "wolf-rbac",
    "jwe-decrypt", "multi-auth", "authz-keycloak",
})

#: Plugins that run on stream routes (``stream_plugins``, plus stream prometheus).
STREAM_PLUGINS: frozenset[str] = frozenset({
    "ip-restriction", "limit-conn", "mqtt-proxy", "syslog", "prometheus",
})

#: The field APISIX 3.18 compares between consumers to refuse a shared credential.
AUTH_KEY_FIELDS: dict[str, str] = {
    "key-auth": "key",
    "basic-auth": "username",
    "jwt-auth": "key",
    "hmac-auth": "key_id",
    "ldap-auth": "user_dn",
    "ldap-auth-advanced": "user_dn",
}
