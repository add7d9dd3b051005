"""Errors raised on bad input; each names the file, the field and what is allowed.

Every such error derives from ``AdslError``: a workflow job or the command line stops on one with its
message alone (no traceback) and a non-zero exit status."""


def shorten(text: str, limit: int = 400) -> str:
    """``text`` on one line, its middle cut when longer than ``limit`` characters (a value echoed in a
    message may be a 10 MB string; its start says what it is and its end what is allowed)."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    half = (limit - 40) // 2
    return f"{text[:half]} ... [{len(text) - 2 * half} characters cut] ... {text[-half:]}"


def shown(value, limit: int = 80) -> str:
    """A value for a message: as Python writes it (1.5, not np.float64(1.5)), cut at ``limit`` characters."""
    plain = value.item() if hasattr(value, "item") and getattr(value, "shape", None) == () else value
    return shorten(repr(plain), limit)


class AdslError(Exception):
    """Bad input a user can fix (a configuration value, a data file, a model file)."""


class ConfigError(AdslError, ValueError):
    """A configuration or catalogue value is missing, of the wrong type or out of range."""

    def __init__(self, file: str, field: str, message: str):
        self.file, self.field, self.reason = shorten(file, 200), shorten(field, 200), shorten(message)
        super().__init__(f"{self.file}: {self.field or '<root>'}: {self.reason}")
