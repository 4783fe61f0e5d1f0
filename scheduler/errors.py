"""One exception tree for labq. Each error carries the exit code the CLI should use (DESIGN §7)."""


class LabqError(Exception):
    exit_code = 1


class UsageError(LabqError):
    """Bad input: flags, durations, sizes, scripts, requests. Nothing was changed."""
    exit_code = 2


class ConfigError(UsageError):
    """A config key is missing, unknown or of the wrong shape; `key` names it."""

    def __init__(self, key: str, message: str):
        super().__init__(f"config: {key}: {message}")
        self.key = key


class RefusedError(LabqError):
    """Refused by policy (capacity, quota, budget, queue bound)."""
    exit_code = 3


class UnreachableError(LabqError):
    """Redis or the scheduler does not answer."""
    exit_code = 4


class StalePlanError(LabqError):
    """The store changed under a plan (leader lease lost); the daemon re-plans."""
