"""``crewlet init [DIR]``: a company of one's own to start from (issue 38).

Writes three files into ``DIR`` (default ``./my-company``), refusing to overwrite any that exists
unless ``--force``:

- ``company.yaml``: a minimal company — a human founder and one team of three agent seats
  (``lead``, ``builder``, ``support``) with a project and a knowledge space, on the ``offline``
  provider (no key, no network), and a commented ``openai-compatible`` entry to switch to;
- ``offline-script.yaml``: rules whose default *answers* (a message gets a reply naming what was
  asked), whose question rules answer ``support`` by reading the tracker or the knowledge base,
  and whose work rules comment on the item they were woken for, so assigned work ends
  ``delivered`` rather than stalling;
- ``crewlet.yaml``: a one-node file (all four roles, embedded broker, store under ``DIR/.crewlet``).

It prints the next commands: ``crewlet validate``, ``crewlet node --node DIR/crewlet.yaml --company
DIR/company.yaml``, a message with ``crewlet send``, and how to switch a seat to a real model with
``crewlet secrets set``. Exit 0 written; 2 when a file exists (named) or ``DIR`` cannot be written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["COMPANY", "NODE", "SCRIPT", "init"]

COMPANY = """\
# company.yaml (Tier B): your company. `crewlet validate --company company.yaml` checks it.
name: "My Company"
mission: "Answer every request within a day"
timezone: UTC

providers:
  llm:
    default:
      type: offline                  # no key, no network: rule-driven answers labelled [offline]
      model: crewlet-offline-1
      script: ./offline-script.yaml
    # A real model: set its key once with
    #   printf %s "$KEY" | crewlet secrets set MODEL_API_KEY
    # then uncomment this entry and set `llm: [openai]` on a seat below.
    # openai:
    #   type: openai-compatible
    #   model: gpt-4o-mini
    #   base_url: "https://api.openai.com/v1/"
    #   api_keys: ["${MODEL_API_KEY}"]

roles:
  - name: Founder
    handle: founder
    kind: human
    manages: [lead]

units:
  - id: core
    name: Core team
    type: team
    lead: lead
    project: CORE
    space: CORE
    roles:
      - name: Team Lead
        handle: lead
        llm: [default]
        goal: "Turn requests into clear work items and keep them moving"
      - name: Builder
        handle: builder
        llm: [default]
        goal: "Do the work assigned to you and report on the item"
      - name: Support
        handle: support
        llm: [default]
        goal: "Answer people's questions and file what needs work"
"""

SCRIPT = """\
# offline-script.yaml: the offline provider's rules (first match wins; see crewlet's README).
rules:
  # work assigned to a seat: acknowledge on the item (the reply a work item is owed)
  - when: { source: work, reason: assigned }
    steps:
      - tool: comment_on_work_item
        args: { key: "{trigger.work_item.key}", body: "On it: {trigger.work_item.key} is mine now." }
    final: "Took {trigger.work_item.key}."
  # a comment or a mention on an item: answer on the item
  - when: { source: work }
    steps:
      - tool: comment_on_work_item
        args: { key: "{trigger.work_item.key}", body: "Noted on {trigger.work_item.key}." }
    final: "Answered on {trigger.work_item.key}."
  # a question to support is answered by reading: what is open lists CORE's open items, any other
  # question (ending in "?" or starting with who/how/...) names the top knowledge pages
  - when: { seat: support, text_matches: '(?i)^\\s*what\\b.*\\bopen\\b' }
    steps:
      - tool: list_work_items
        args: { project: CORE, limit: 20 }
    final: "Open on CORE: {result[0].items:open}"
  - when: { seat: support, text_matches: '(?i)^\\s*(what|who|when|where|why|how|is|are|which|can|do|does)\\b|\\?\\s*$' }
    steps:
      - tool: search_knowledge
        args: { query: "{trigger.text}", limit: 3 }
    final: "From the knowledge base: {result[0].hits}"
  # a message to support that reports a bug is filed for the lead
  - when: { seat: support, text_contains: "bug" }
    steps:
      - tool: create_work_item
        args: { project: CORE, type: task, title: "{trigger.first_line}", body: "{trigger.text}", assignee: lead }
    final: "Filed {result[0].key} for the lead."
default:
  # any other message gets an answer naming what was asked
  final: "Hello from {seat.handle}. You asked: {trigger.first_line}"
"""

NODE = """\
# crewlet.yaml (Tier A): one node with every role on an embedded broker.
node:
  id: node-1
stream:
  type: embedded
store:
  dir: ./.crewlet/node-1
retention:
  backup_owner: "me (a single trial node)"
api:
  host: 127.0.0.1
  port: 8080
  auth:
    tokens: [{id: operator, token: "${CREWLET_API_TOKEN}"}]
"""


def init(
    directory: Annotated[Path, typer.Argument(help="Where to write the files")] = Path("my-company"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite files that exist")] = False,
) -> None:
    """Write a minimal company, its offline rules and a node file to start from."""
    files = {"company.yaml": COMPANY, "offline-script.yaml": SCRIPT, "crewlet.yaml": NODE}
    existing = [str(directory / name) for name in files if (directory / name).exists()]
    if existing and not force:
        typer.echo(f"not overwriting {', '.join(existing)} (use --force)", err=True)
        raise typer.Exit(2)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (directory / name).write_text(text)
    except OSError as e:
        typer.echo(f"cannot write into {directory}: {e.strerror or e}", err=True)
        raise typer.Exit(2) from None
    d = str(directory)
    typer.echo(f"wrote {d}/company.yaml, {d}/offline-script.yaml and {d}/crewlet.yaml\n")
    typer.echo("Next:")
    typer.echo(f"  crewlet validate --company {d}/company.yaml --node {d}/crewlet.yaml")
    typer.echo("  export CREWLET_API_TOKEN=$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))')")
    typer.echo(f"  cd {d} && crewlet node --node crewlet.yaml --company company.yaml")
    typer.echo("  crewlet send support 'Hello' --wait                # in another shell")
    typer.echo("A real model: see the comment under providers.llm in company.yaml.")
