"""Provider failures: transient ones are retried, permanent ones are not; none is a quality verdict."""
from __future__ import annotations


class ProviderError(Exception):
    """A call failed. ``status`` is the HTTP status when there was one."""

    transient = False

    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status, self.retry_after = status, retry_after


class RateLimited(ProviderError):
    transient = True


class ServerError(ProviderError):
    transient = True


class TransportError(ProviderError):
    """Connection refused or dropped, or a timeout: no answer came back."""

    transient = True


class AuthError(ProviderError):
    """401/403: a wrong or missing key does not fix itself."""


class ClientError(ProviderError):
    """400/404/422...: the request itself is wrong."""


class CertificateError(ProviderError):
    """The server's TLS certificate is not trusted (or not its name's): retrying does not change it."""


class BadResponse(ProviderError):
    """A 200 whose body is not a chat completion."""


def error_for_status(status: int, body: str, retry_after: float | None) -> ProviderError:
    text = body[:300]
    if status == 429:
        return RateLimited(f"HTTP 429 rate limited: {text}", status, retry_after)
    if status >= 500:
        return ServerError(f"HTTP {status}: {text}", status, retry_after)
    if status in (401, 403):
        return AuthError(f"HTTP {status}: {text}", status)
    if status == 408:
        return TransportError(f"HTTP 408 request timeout: {text}", status, retry_after)
    return ClientError(f"HTTP {status}: {text}", status)
