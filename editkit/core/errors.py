"""One exception type for everything a user can get wrong.

The CLI prints its message without a traceback and exits with status 2; the pages show it in an error box.
Anything else that escapes is a bug in editkit.
"""


class EditkitError(ValueError):
    """A clear, user-facing error: bad input, a missing model, a corrupt file."""


class Cancelled(EditkitError):
    """A long computation stopped because its owner cancelled it (a job's Cancel button, a trace's cancel flag);
    every `with` block it was in unwinds, so hooks, edits and cache writes are left as they were."""


class CacheWarning(UserWarning):
    """A cache entry could not be read: it was set aside (never deleted) and is rebuilt."""
