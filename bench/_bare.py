"""The bare FastAPI floor, run as its own process: ``python -m bench._bare --port P``.

Two endpoints and nothing else, served by uvicorn with the node's own settings (one worker,
``log_level=warning``, no access log, lifespan off; ``crewlet/node.py``):

- ``GET /ping`` → ``{"ok": true}``: a bare round trip (figure 5's floor);
- ``POST /hook`` reads the whole body and answers 202 ``{"status": "accepted"}`` (figure 8's floor).
"""

from __future__ import annotations

import argparse
from typing import Any

import uvicorn
from fastapi import FastAPI, Request

__all__ = ["app"]

app = FastAPI(title="bench bare floor")


@app.get("/ping")
async def ping() -> dict[str, Any]:
    """A bare round trip."""
    return {"ok": True}


@app.post("/hook", status_code=202)
async def hook(request: Request) -> dict[str, Any]:
    """Read the body, answer 202."""
    body = await request.body()
    return {"status": "accepted", "bytes": len(body)}


def main(argv: list[str] | None = None) -> None:
    """Serve on 127.0.0.1 until signalled."""
    ap = argparse.ArgumentParser(prog="python -m bench._bare")
    ap.add_argument("--port", type=int, required=True)
    opts = ap.parse_args(argv)
    uvicorn.run(app, host="127.0.0.1", port=opts.port, log_level="warning", access_log=False, lifespan="off")


if __name__ == "__main__":
    main()
