"""Errors that end a command with one clear line and exit code 2 (bad input, unusable setup)."""


class UsageError(ValueError):
    """The user asked for something that cannot be done as asked; the message says why."""
