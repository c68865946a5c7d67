"""Exceptions of megamoe. The C++ errors map onto these, message kept (python/megamoe/_ext/errors.cpp).

Each is also a standard Python exception, so generic handlers keep working:
InvalidArgument is a ValueError, Unsupported a NotImplementedError, CudaError and DeviceFault
RuntimeErrors.
"""


class Error(Exception):
    """Base of every megamoe error."""


class InvalidArgument(Error, ValueError):
    """Bad input caught on the host; `argument` names it and `rule` says what it broke."""

    def __init__(self, message, argument=None, rule=None):
        super().__init__(message)
        self.argument = argument
        self.rule = rule


class Unsupported(Error, NotImplementedError):
    """A request the library understands but does not (yet) support."""


class CudaError(Error, RuntimeError):
    """The CUDA driver, NVRTC or NCCL failed, or no GPU is present where one is needed."""


class DeviceFault(Error, RuntimeError):
    """A fault detected on the device: bad expert ids, a cross-rank timeout."""
