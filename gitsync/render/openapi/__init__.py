"""OpenAPI specs in the config repo → services, upstreams and routes, as ADC's converter makes them.

(Being built: the pieces so far are the path matcher, ADC's slugs, ``$ref`` resolution and what
``adc sync`` writes for ADC's services and routes.)
"""
