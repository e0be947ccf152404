"""``python -m crewlet`` runs the CLI."""

from crewlet.cli import main

main()
