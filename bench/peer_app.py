"""The peer for bench/heartbeat.py: a WSGI app that reads the body and
answers a fixed JSON object, under the same server and worker count. Its
rate is this machine's ceiling for any Python HTTP endpoint."""


def application(environ, start_response):  # type: ignore[no-untyped-def]
    length = int(environ.get("CONTENT_LENGTH") or 0)
    environ["wsgi.input"].read(length)
    body = b'{"node": "peer", "state": "Ready", "register": false}'
    start_response(
        "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]
