"""A web server of the test's own on a free local port, for the swarm to post to."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.Response]]


@asynccontextmanager
async def serving(posts: Mapping[str, Handler]) -> AsyncIterator[str]:
    """Its URL, answering a POST to each path of `posts` with its handler."""
    app = web.Application()
    for path, handler in posts.items():
        app.router.add_post(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        # uvicorn's backlog: hundreds of nodes connecting at once are queued,
        # not dropped for the client to try again a second later.
        await web.TCPSite(runner, "127.0.0.1", 0, backlog=2048).start()
        # Port 0 asked the kernel for one: the runner knows which it gave.
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
