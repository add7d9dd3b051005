"""Errors raised on bad input; each names the file, the field and what is allowed.

Every such error derives from ``AdslError``: a workflow job or the command line stops on one with its
message alone (no traceback) and a non-zero exit status."""


class AdslError(Exception):
    """Bad input a user can fix (a configuration value, a data file, a model file)."""


class ConfigError(AdslError, ValueError):
    """A configuration or catalogue value is missing, of the wrong type or out of range."""

    def __init__(self, file: str, field: str, message: str):
        self.file, self.field, self.reason = str(file), field, message
        super().__init__(f"{file}: {field or '<root>'}: {message}")
