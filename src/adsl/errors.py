"""Errors raised on bad input; each names the file, the field and what is allowed."""


class ConfigError(ValueError):
    """A configuration or catalogue value is missing, of the wrong type or out of range."""

    def __init__(self, file: str, field: str, message: str):
        self.file, self.field, self.reason = str(file), field, message
        super().__init__(f"{file}: {field or '<root>'}: {message}")
