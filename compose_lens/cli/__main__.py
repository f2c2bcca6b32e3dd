"""``python -m compose_lens.cli``: the compose-lens command."""

from compose_lens.cli import command

raise SystemExit(command())
