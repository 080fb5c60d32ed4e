"""Which MongoDB driver errors may go away on retry: by exception type, error label and error code.

Transient: network trouble and server selection (pymongo's ``ConnectionFailure`` family, which covers
"not primary" replies), the labels the server or driver attaches to retryable failures, pymongo's own
set of retryable read codes (imported, so it follows the driver), and codes that end one cursor but
not a re-read of the chunk (cursor killed or timed out, operation interrupted, time limit). Everything
else (bad query, unknown operator, authorization, a missing namespace) is permanent and fails fast.
"""

from __future__ import annotations

from pymongo.helpers_shared import _RETRYABLE_ERROR_CODES  # not-primary, shutdown, network codes

TRANSIENT_LABELS = frozenset({"RetryableWriteError", "TransientTransactionError", "ResumableChangeStreamError",
                              "RetryableError", "SystemOverloadedError"})
# 43 CursorNotFound, 50 MaxTimeMSExpired, 237 CursorKilled, 11601 Interrupted
TRANSIENT_CODES = frozenset(_RETRYABLE_ERROR_CODES) | {43, 50, 237, 11601}


def is_transient(exc: BaseException) -> bool:
    """Whether a pymongo error may go away when the operation (a chunk read) runs again."""
    from pymongo import errors

    if isinstance(exc, errors.ConnectionFailure):
        return True
    if not isinstance(exc, errors.PyMongoError):
        return False
    if any(exc.has_error_label(label) for label in TRANSIENT_LABELS):
        return True
    return getattr(exc, "code", None) in TRANSIENT_CODES
