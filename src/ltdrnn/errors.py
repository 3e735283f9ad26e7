"""The library's own error types that more than one layer raises."""


class ConfigError(ValueError):
    """A configuration key or value is invalid; the message names the key."""
