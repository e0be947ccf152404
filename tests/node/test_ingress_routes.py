"""The ingress routes' registration (issue 26): every handler is a resource's bound method, registered
by its module's ``router(ctx)``; a parameter declared ``= GRANTED`` is bound to its grant there."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.routing import iter_route_contexts

import services.ingress as ingress
from services.ingress.api.routes import _common
from shared.config import NodeConfig
from shared.runtime import NodeContext, install_error_handlers


def _app() -> FastAPI:
    cfg = NodeConfig.model_validate(
        {"node": {"id": "node-a"}, "api": {"auth": {"tokens": [{"id": "op", "token": "t" * 32}]}}}
    )
    app = FastAPI()
    install_error_handlers(app)
    router = ingress.service(NodeContext(cfg)).router
    assert router is not None
    app.include_router(router)
    return app


def test_no_granted_parameter_is_left_unbound() -> None:
    routes = [r for r in iter_route_contexts(_app().routes) if getattr(r, "dependant", None) is not None]
    assert len(routes) > 50
    for route in routes:
        todo = list(route.dependant.dependencies)
        while todo:
            dep = todo.pop()
            assert dep.call is not _common._unbound, f"{route.path_format}: a GRANTED parameter is unbound"
            todo.extend(dep.dependencies)


def test_a_bound_parameter_keeps_the_handler_name_and_its_grant() -> None:
    app = _app()
    routes = {(r.path_format, m): r for r in iter_route_contexts(app.routes) for m in (r.methods or ())}
    assert routes[("/work", "POST")].name == "create_work"
    operation = app.openapi()["paths"]["/work"]["post"]
    assert operation["operationId"] == "create_work_work_post"
    assert operation["x-grant"] == "work:write"
