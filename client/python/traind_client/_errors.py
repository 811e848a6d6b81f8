"""Every failed call raises one exception type, TraindError, or the subclass for its status code.

The error carries the status code, the daemon's message and, where the daemon attached one, the machine-readable
traind.v1.ErrorDetail it sends as binary trailing metadata "traind-error-detail-bin" (for example the
gradient-coverage report of a model whose ops lack gradient rules).
"""

import grpc

from traind_client._proto import training_service_pb2 as pb

ERROR_DETAIL_KEY = "traind-error-detail-bin"


class TraindError(Exception):
    """A call to traind failed.

    Attributes:
      code: the grpc.StatusCode.
      message: the daemon's (or gRPC's) message.
      detail: the traind.v1.ErrorDetail the daemon attached, or None.
      method: the RPC that failed, e.g. "TrainStep".
    """

    def __init__(self, code, message, detail=None, method=""):
        self.code = code
        self.message = message
        self.detail = detail
        self.method = method
        where = f"{method}: " if method else ""
        reason = f" [{detail.reason}]" if detail is not None and detail.reason else ""
        super().__init__(f"{where}{code.name}: {message}{reason}")

    def __reduce__(self):  # picklable (multiprocessing), although __init__ takes more than the message
        return (type(self), (self.code, self.message, self.detail, self.method))

    @property
    def reason(self):
        """ErrorDetail.reason ("NO_GRADIENT_RULE", "SESSION_NOT_FOUND", ...), or "" without a detail."""
        return self.detail.reason if self.detail is not None else ""


class CancelledError(TraindError):
    pass


class UnknownError(TraindError):
    pass


class InvalidArgumentError(TraindError):
    pass


class DeadlineExceededError(TraindError):
    pass


class NotFoundError(TraindError):
    pass


class AlreadyExistsError(TraindError):
    pass


class PermissionDeniedError(TraindError):
    pass


class ResourceExhaustedError(TraindError):
    pass


class FailedPreconditionError(TraindError):
    pass


class AbortedError(TraindError):
    pass


class OutOfRangeError(TraindError):
    pass


class UnimplementedError(TraindError):
    pass


class InternalError(TraindError):
    pass


class UnavailableError(TraindError):
    pass


class DataLossError(TraindError):
    pass


class UnauthenticatedError(TraindError):
    pass


_BY_CODE = {
    grpc.StatusCode.CANCELLED: CancelledError,
    grpc.StatusCode.UNKNOWN: UnknownError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.ABORTED: AbortedError,
    grpc.StatusCode.OUT_OF_RANGE: OutOfRangeError,
    grpc.StatusCode.UNIMPLEMENTED: UnimplementedError,
    grpc.StatusCode.INTERNAL: InternalError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DATA_LOSS: DataLossError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
}


def error_class(code):
    """The TraindError subclass raised for a grpc.StatusCode."""
    return _BY_CODE.get(code, TraindError)


def _error_detail(rpc_error):
    """The ErrorDetail in the trailing metadata, or None (also when it does not parse: the status still tells)."""
    trailing = rpc_error.trailing_metadata() if hasattr(rpc_error, "trailing_metadata") else None
    for key, value in trailing or ():
        if key == ERROR_DETAIL_KEY:
            detail = pb.ErrorDetail()
            try:
                detail.ParseFromString(value)
            except Exception:  # a damaged detail must not hide the status behind a parse error
                return None
            return detail
    return None


def from_rpc_error(rpc_error, method=""):
    """The TraindError for a grpc.RpcError raised by a call of `method`."""
    code = rpc_error.code() if hasattr(rpc_error, "code") else grpc.StatusCode.UNKNOWN
    message = rpc_error.details() if hasattr(rpc_error, "details") else str(rpc_error)
    return error_class(code)(code, message or "", _error_detail(rpc_error), method)
