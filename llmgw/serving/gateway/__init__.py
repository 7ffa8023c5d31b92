"""The OpenAI-compatible gateway: /v1/ routed to ready replicas.

A bare ASGI app in front of Django (llmgw/asgi.py sends it every path that
starts with /v1/): a request touches no SQL and no Django middleware. Keys
and the routing table are read from the database by a background loop and
swapped in whole; the engines' queue depths are scraped off the request
path. `app.Gateway` is the app (its key table in `keys`, a request's body
checked in `body`, its turn taken in `flow`, the queue per model it waits
in for a free or a first replica, sent to the engines by `proxy`),
`load.queue_depth` the
per-model load the reconciler reads, `metrics.GatewayCollector` its
Prometheus figures.
"""
