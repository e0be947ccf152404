"""The API's documentation pages served from the installed package, never from a CDN (issue 38).

FastAPI's default ``/docs`` and ``/redoc`` load Swagger UI and ReDoc from a CDN, so they are blank
without internet. :func:`mount_offline_docs` serves both pages with their scripts and styles from
the ``fastapi-offline`` wheel's ``static/`` folder at ``/docs-static/{name}`` (FastAPI's
"self-hosting JavaScript and CSS for docs" recipe; only the four asset names are served), and
``/docs/oauth2-redirect`` as FastAPI's default does; the app must be built with ``docs_url=None,
redoc_url=None``.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI, HTTPException
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from starlette.responses import FileResponse, HTMLResponse

__all__ = ["STATIC_PATH", "mount_offline_docs"]

STATIC_PATH = "/docs-static"
"""Where the Swagger UI and ReDoc assets are served."""
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "redoc.standalone.js": "text/javascript",
    "favicon.png": "image/png",
}
"""The asset files served (name → content type); any other name is 404."""


def mount_offline_docs(app: FastAPI) -> None:
    """Serve ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) with assets from the package.

    Args:
        app: An app built with ``docs_url=None`` and ``redoc_url=None`` (else FastAPI's CDN pages
            answer first).

    Raises:
        RuntimeError: ``fastapi-offline`` (a dependency of crewlet) is not installed.
    """
    static = files("fastapi_offline") / "static"
    title = app.title

    @app.get(STATIC_PATH + "/{name}", include_in_schema=False)
    async def asset(name: str) -> FileResponse:
        if name not in ASSETS:
            raise HTTPException(404, {"error": "not_found", "detail": f"no docs asset {name!r}"})
        return FileResponse(str(static / name), media_type=ASSETS[name])

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def oauth2_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/docs", include_in_schema=False)
    async def swagger() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{title} - Swagger UI",
            swagger_js_url=f"{STATIC_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{STATIC_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{STATIC_PATH}/favicon.png",
            oauth2_redirect_url="/docs/oauth2-redirect",
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{title} - ReDoc",
            redoc_js_url=f"{STATIC_PATH}/redoc.standalone.js",
            redoc_favicon_url=f"{STATIC_PATH}/favicon.png",
            with_google_fonts=False,
        )
