"""One exception type for everything a user can get wrong.

The CLI prints its message without a traceback and exits with status 2; the pages show it in an error box.
Anything else that escapes is a bug in editkit.
"""


class EditkitError(ValueError):
    """A clear, user-facing error: bad input, a missing model, a corrupt file."""
