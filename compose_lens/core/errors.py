"""The errors compose-lens raises for bad input: one line a user can act on, exit 2.

Every check of a configuration, a command-line argument, a checkpoint or a token sequence
raises :class:`ComposeLensError` (or :class:`ConfigError` for a configuration value) with a
message that says what is wrong and how to fix it. The Python API checks its arguments at the
door the same way: :class:`ArgumentTypeError` (a ``TypeError``) for an argument of the wrong
type, :class:`ArgumentError` (a ``ValueError``) for one out of range, so ``except ValueError``
and ``except ComposeLensError`` both catch them. The command line turns it into that one
line and exit status 2; any other exception is a bug and is reported as one (exit 70).

>>> str(ConfigError("modulus=1: the modulus must be at least 2"))
'modulus=1: the modulus must be at least 2'
"""


class ComposeLensError(Exception):
    """An error whose message is one line a user can act on (bad input, not a bug)."""


class ConfigError(ComposeLensError, ValueError):
    """A configuration value that cannot work."""


class ArgumentError(ComposeLensError, ValueError):
    """An argument of a public function that cannot work: a value out of range, a hook or head the model
    does not have, a token outside the vocabulary. Its message names the argument and the fix."""


class ArgumentTypeError(ComposeLensError, TypeError):
    """An argument of a public function of the wrong type: a string where a list is wanted, floats where
    token ids are. Its message names the argument and the fix."""
