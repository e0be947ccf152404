"""Generated bad input against a running node's OpenAPI (issue 17): schemathesis, loopback only.

One real node (``crewlet run``, the example company, an embedded broker) is started for the module;
schemathesis reads its ``/openapi.json`` and sends every operation schema-valid and schema-breaking
requests (bounded: the coverage phase's schema-breaking boundary cases and a few generated examples
per operation, a fixed seed, no shrinking, no example database; about 900 requests).
Each answer must:

- never be a 5xx (``not_a_server_error``);
- have a documented status, content type, body and headers (``status_code_conformance``,
  ``content_type_conformance``, ``response_schema_conformance``, ``response_headers_conformance``);
- refuse input that breaks the schema with a 4xx (``negative_data_rejection``);
- be JSON ``{"error": code, "detail": ...}`` when it is a 4xx, a 400 or 422 naming the field
  (``detail`` a list of ``{path, ...}`` or an object with ``field``, or ``field`` beside a sentence,
  or ``issues`` with their paths), CO-27 (:func:`refusal_names_what`).

``positive_data_acceptance`` is left out: the schema types a work item key, a page id or a revision id
as a string, and the estate answers a string that is not one with 400 naming the field, which is the
refusal this module wants; a schema-valid key that names nothing answers 404.

Excluded operations, each because its effect would break the run itself or reach outside it:

- ``POST /backup``: writes a backup into the ``dir`` it is given, anywhere on this machine's disk;
- ``POST /fleet/broker/remove/{node}``, ``POST /fleet/broker/remove-peer/{peer}`` and
  ``POST /retention/evict``: a generated ``confirm`` equal to the target would take the only node
  out of its own broker or estate;
- ``PUT /config/llm-providers/{key}`` and ``PUT /config/mcp-servers/{name}``: a body that happens to
  be valid points the company at a model or tool server outside loopback (or starts a process).

Every other operation runs, writes included (work items, pages, comments, secrets, messages to the
example's offline seats).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from schemathesis.engine import Status, events

from tests.support.procs import TOKEN, Node, free_port

EXCLUDED = r"^/backup$|^/fleet/broker/remove|^/retention/evict$|^/config/llm-providers/|^/config/mcp-servers/"
"""Operations left out (see the module docstring for why)."""

AUTH = {"Authorization": f"Bearer {TOKEN}"}

EXAMPLES = 6
"""Generated requests per operation in the fuzzing phase (the coverage phase adds its boundary cases)."""

WEBHOOK_SECRET = "fuzz-webhook-secret-0123456789"
"""The example company's webhook secrets (``GITHUB_WEBHOOK_SECRET``, ``FORMS_WEBHOOK_SECRET``): set, so a
webhook without a valid signature answers 401 rather than 503 ``webhook_secret_unset``."""


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    d = tmp_path_factory.mktemp("fuzz")
    port = free_port()
    env = {"GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET, "FORMS_WEBHOOK_SECRET": WEBHOOK_SECRET}
    n = Node(["run", "--data-dir", str(d / "data"), "--port", str(port)], dir=d, port=port, env=env)
    try:
        n.wait_ready(60)
        yield n
    finally:
        n.stop()


@pytest.fixture(scope="module")
def api_schema(node: Node, tmp_path_factory: pytest.TempPathFactory) -> Any:
    cache = tmp_path_factory.mktemp("schemathesis")
    config = schemathesis.Config.from_dict(
        {
            "seed": 17,
            "headers": AUTH,
            "request-timeout": 30,
            "cache": {"enabled": False, "directory": str(cache)},
            "generation": {"max-examples": EXAMPLES, "no-shrink": True, "database": "none"},
            "phases": {
                "stateful": {"enabled": False},
                # boundary cases that break the schema (a bound + 1, a wrong type, a missing field),
                # and one method the path does not take (OPTIONS: a 405 with its Allow)
                "coverage": {"unexpected-methods": ["OPTIONS"], "generation": {"mode": "negative"}},
            },
            "checks": {"positive_data_acceptance": {"enabled": False}},
        }
    )
    return schemathesis.openapi.from_url(node.url + "/openapi.json", config=config, timeout=30)


@schemathesis.check
def refusal_names_what(ctx: schemathesis.CheckContext, response: schemathesis.Response, case: Any) -> None:
    """A 4xx is JSON ``{"error": code, "detail": ...}`` (CO-27); a 400/422 names the field it refuses."""
    if not 400 <= response.status_code < 500:
        return None
    try:
        body = response.json()
    except ValueError:
        raise AssertionError(f"a {response.status_code} that is not JSON: {response.text[:200]!r}") from None
    assert isinstance(body, dict) and isinstance(body.get("error"), str), body
    detail = body.get("detail")
    assert detail not in (None, "", [], {}), f"a refusal without detail: {body}"
    if response.status_code in (400, 422):
        issues = body.get("issues")  # PUT /config: every issue of the document, each with its path
        named = (
            isinstance(body.get("field"), str)
            or (isinstance(detail, dict) and bool(detail.get("field")))
            or (isinstance(detail, list) and all(isinstance(d, dict) and d.get("path") for d in detail))
            or (isinstance(issues, list) and bool(issues))
        )
        assert named, f"a refusal naming no field: {body}"
    return None


def failures_of(schema: Any) -> list[str]:
    """Run schemathesis's engine (its examples, coverage and fuzzing phases) over ``schema``; return one
    line per failed check or error, each with the request to reproduce it."""
    found: list[str] = []
    for event in schemathesis.engine.from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            for nodes in event.recorder.checks.values():
                for check in nodes:
                    if check.status == Status.FAILURE and check.failure_info is not None:
                        failure = check.failure_info.failure
                        found.append(
                            f"{event.recorder.label} [{check.name}] {failure.title}: {failure.message}\n"
                            f"    {check.failure_info.code_sample}"
                        )
        elif isinstance(event, events.NonFatalError | events.FatalError):
            found.append(f"{getattr(event, 'label', 'engine')}: {type(event.value).__name__}: {event.value}")
    return sorted(set(found))


def test_generated_input_is_answered_as_documented(api_schema: Any) -> None:
    failures = failures_of(api_schema.exclude(path_regex=EXCLUDED))
    assert not failures, f"{len(failures)} failed checks:\n" + "\n".join(failures)


def test_the_node_outlived_the_run(node: Node) -> None:
    """The node served the whole run (a crash mid-run shows here, not only as connection errors)."""
    assert node.popen.poll() is None, node.output()[-4000:]
    assert node.get("/ready", token=None).status_code == 200


# -- the faults issue 17 names, each kept as a test over every operation it applies to ---------------------


def _doc(node: Node) -> dict[str, Any]:
    r = httpx.get(node.url + "/openapi.json", timeout=10)
    assert r.status_code == 200, r.text
    doc: dict[str, Any] = r.json()
    return doc


def _operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(m.upper(), p, op) for p, ops in doc["paths"].items() for m, op in ops.items()]


def _concrete(path: str) -> str:
    """A path of the document with each ``{param}`` filled (a value no route refuses by its shape)."""
    fill = {"key": "SUP-1", "path": "notes.txt", "handle": "founder", "page_id": "p-1"}
    return re.sub(r"\{([^}]+)\}", lambda m: fill.get(m.group(1), "X1"), path)


def _body_properties(doc: dict[str, Any], op: dict[str, Any]) -> dict[str, Any]:
    schema = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    ref = schema.get("$ref", "")
    if ref:
        schema = doc["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    props: dict[str, Any] = schema.get("properties", {})
    return props


def _is_integer(schema: dict[str, Any]) -> bool:
    kinds = [schema, *schema.get("anyOf", [])]
    return any(k.get("type") == "integer" for k in kinds)


def _included(method: str, path: str) -> bool:
    return not re.search(EXCLUDED, path)


def test_every_integer_past_its_bound_is_refused_naming_it(node: Node) -> None:
    """An integer of 2**63 (past SQLite's 64-bit integers) or -1 where the bound is 0 or more, in any query
    parameter or JSON body field, answers 400 naming the field: never a 5xx or an OverflowError."""
    doc, tried, wrong = _doc(node), [], []
    with httpx.Client(base_url=node.url, headers=AUTH, timeout=30) as client:
        for method, path, op in _operations(doc):
            if not _included(method, path):
                continue
            for param in op.get("parameters", []):
                schema = param.get("schema", {})
                if param["in"] != "query" or not _is_integer(schema):
                    continue
                bounds = [s for s in (schema, *schema.get("anyOf", [])) if s.get("type") == "integer"][0]
                assert "maximum" in bounds, f"{method} {path}: ?{param['name']} has no documented bound"
                for value in (2**63, -1):
                    r = client.request(method, _concrete(path), params={param["name"]: str(value)})
                    tried.append(f"{method} {path}?{param['name']}={value}")
                    if r.status_code != 400 or f"query.{param['name']}" not in r.text:
                        wrong.append(
                            f"{method} {path}?{param['name']}={value}: {r.status_code} {r.text[:200]}"
                        )
            for name, schema in _body_properties(doc, op).items():
                if not _is_integer(schema):
                    continue
                r = client.request(
                    method,
                    _concrete(path),
                    content=f'{{"{name}": {2**63}}}',
                    headers={"Content-Type": "application/json", "X-Summary": "fuzz"},
                )
                tried.append(f"{method} {path} {{{name}}}")
                # 422 ``invalid_company`` is how PUT /config refuses a document, every issue with its path
                if r.status_code not in (400, 422) or name not in r.text:
                    wrong.append(f"{method} {path} {{{name}: 2**63}}: {r.status_code} {r.text[:200]}")
        r = client.put(
            "/projects/SUP/files/notes.txt", content=b"x", headers={"If-Match": str(2**63)}
        )  # a header read by the route itself
        if r.status_code != 400 or r.json().get("detail", {}).get("field") != "If-Match":
            wrong.append(f"PUT /projects/SUP/files/notes.txt If-Match 2**63: {r.status_code} {r.text[:200]}")
    assert len(tried) >= 12, tried  # offsets, limits, versions, days and if_match are all in the document
    assert not wrong, "\n".join(wrong)


def test_an_undeclared_query_parameter_is_refused_naming_it(node: Node) -> None:
    """Every documented read refuses a query parameter it does not declare (``?stauts=done`` used to
    list every item, as if no filter had been asked for): 400 naming ``query.<name>`` and what the
    route takes; a declared one still works."""
    doc, wrong = _doc(node), []
    with httpx.Client(base_url=node.url, headers=AUTH, timeout=30) as client:
        gets = [(m, p) for m, p, _ in _operations(doc) if m == "GET" and _included(m, p)]
        for method, path in gets:
            r = client.request(method, _concrete(path), params={"stauts": "done"})
            if r.status_code != 400 or r.json().get("field") != "query.stauts":
                wrong.append(f"{method} {path}?stauts=done: {r.status_code} {r.text[:200]}")
        r = client.get("/work", params={"status": "done", "limit": 5})
        assert r.status_code == 200, r.text
        r = client.get("/work", params={"stauts": "done"})
        assert "status" in r.json()["detail"][0]["message"], r.text  # it names what the route takes
    assert len(gets) >= 20, gets
    assert not wrong, "\n".join(wrong)


def test_a_lone_surrogate_in_any_body_string_is_refused_before_anything_is_written(node: Node) -> None:
    """``"\\ud800"`` in any string field of any JSON body (``op_id``, ``title``, ``body``, a label) answers
    400 naming the field; the tracker holds no item from the refused writes."""
    doc, wrong, tried = _doc(node), [], 0
    with httpx.Client(base_url=node.url, headers=AUTH, timeout=30) as client:
        before = client.get("/work", params={"project": "SUP", "limit": 100}).json()["count"]
        for method, path, op in _operations(doc):
            props = _body_properties(doc, op)
            if not _included(method, path) or not props:
                continue
            for name in props:
                for raw in (
                    b'"\\ud800"',
                    b'"x\\udfff"',
                    b'["ok", "\\udbff"]',
                    '"\udc80"'.encode("utf-8", "surrogatepass"),
                ):
                    body = (
                        b'{"project": "SUP", "title": "t", "space": "ENG", "body": "b", "text": "t", "%s": %s}'
                        % (
                            name.encode(),
                            raw,
                        )
                    )
                    r = client.request(
                        method, _concrete(path), content=body, headers={"Content-Type": "application/json"}
                    )
                    tried += 1
                    issues = r.json().get("detail") if r.status_code == 400 else None
                    if not (
                        isinstance(issues, list)
                        and issues
                        and str(issues[0].get("path", "")).startswith(name)
                    ):
                        wrong.append(f"{method} {path} {name}={raw!r}: {r.status_code} {r.text[:200]}")
            # a lone surrogate in a key, also a nested one: the refusal names the key escaped
            for body in (b'{"project": "SUP", "title": "t", "\\ud800": 1}', b'{"labels": [{"\\ud800x": 1}]}'):
                r = client.request(
                    method, _concrete(path), content=body, headers={"Content-Type": "application/json"}
                )
                tried += 1
                issues = r.json().get("detail") if r.status_code == 400 else None
                if not (isinstance(issues, list) and issues and "\\ud800" in str(issues[0].get("path", ""))):
                    wrong.append(f"{method} {path} key {body!r}: {r.status_code} {r.text[:200]}")
        after = client.get("/work", params={"project": "SUP", "limit": 100}).json()["count"]
    assert tried >= 40, tried
    assert not wrong, "\n".join(wrong)
    assert after == before


def test_a_wrong_method_answers_405_allowing_every_method_of_the_path(node: Node) -> None:
    """``Allow`` lists every method the document gives the path (``GET, POST`` on ``/work``), not only the
    first route's."""
    doc, wrong = _doc(node), []
    with httpx.Client(base_url=node.url, headers=AUTH, timeout=30) as client:
        for path, ops in doc["paths"].items():
            documented = {m.upper() for m in ops}
            r = client.request("OPTIONS", _concrete(path))
            allow = {m.strip() for m in r.headers.get("allow", "").split(",") if m.strip()}
            if r.status_code != 405 or allow != documented:
                wrong.append(f"OPTIONS {path}: {r.status_code} Allow {sorted(allow)} != {sorted(documented)}")
    assert not wrong, "\n".join(wrong)


def test_the_document_names_the_refusals_the_api_sends(node: Node) -> None:
    """No operation documents FastAPI's 422 ``HTTPValidationError`` (the API answers 400 ``invalid_request``);
    every operation with input documents 400, every guarded one 401 and 403 with its grant."""
    doc = _doc(node)
    assert "HTTPValidationError" not in str(doc)
    for method, path, op in _operations(doc):
        responses = op["responses"]
        if op.get("parameters") or "requestBody" in op:
            assert responses["400"]["content"]["application/json"]["schema"]["$ref"].endswith("/BadRequest")
        if "x-grant" in op:
            assert {"401", "403"} <= set(responses), f"{method} {path}"
            assert op["security"] == [{"bearer": []}]
        assert "default" in responses, f"{method} {path}"
