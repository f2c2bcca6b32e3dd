"""The errors compose-lens raises for bad input: one line a user can act on, exit 2.

Every check of a configuration, a command-line argument, a checkpoint or a token sequence
raises :class:`ComposeLensError` (or :class:`ConfigError` for a configuration value) with a
message that says what is wrong and how to fix it. The command line turns it into that one
line and exit status 2; any other exception is a bug and is reported as one (exit 70).

>>> str(ConfigError("modulus=1: the modulus must be at least 2"))
'modulus=1: the modulus must be at least 2'
"""


class ComposeLensError(Exception):
    """An error whose message is one line a user can act on (bad input, not a bug)."""


class ConfigError(ComposeLensError, ValueError):
    """A configuration value that cannot work."""
