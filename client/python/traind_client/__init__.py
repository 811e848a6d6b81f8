"""traind_client: the Python client of traind.

    import traind_client
    with traind_client.connect() as client:          # $TRAIND_ADDRESS, else 127.0.0.1:50051
        print(client.get_server_info().version)

Client has one method per TrainingService RPC (numpy arrays in and out); every failure raises a TraindError
subclass carrying the status code, the daemon's message and its ErrorDetail. traind_client.training mirrors
onnxruntime.training; traind_client.torch makes a served ONNX graph a layer of a PyTorch model (Forward /
Backward); traind_client.sklearn has scikit-learn estimators that train on the daemon; traind_client.v1 holds the
wire messages (traind.v1).
"""

from traind_client._channel import DEFAULT_ADDRESS, connect
from traind_client._client import (BackwardResult, Client, EvalResult, ForwardResult, Parameters, TrainStepResult,
                                   TrainStreamResult)
from traind_client._errors import (AbortedError, AlreadyExistsError, CancelledError, DataLossError,
                                   DeadlineExceededError, FailedPreconditionError, InternalError,
                                   InvalidArgumentError, NotFoundError, OutOfRangeError, PermissionDeniedError,
                                   ResourceExhaustedError, TraindError, UnauthenticatedError, UnavailableError,
                                   UnimplementedError, UnknownError)
from traind_client._ortvalue import OrtValue
from traind_client._proto import training_service_pb2 as v1
from traind_client.training.api.module import SessionOptions

__version__ = "0.1.0"

__all__ = [
    "AbortedError", "AlreadyExistsError", "BackwardResult", "CancelledError", "Client", "DEFAULT_ADDRESS", "DataLossError",
    "DeadlineExceededError", "EvalResult", "FailedPreconditionError", "ForwardResult", "InternalError", "InvalidArgumentError",
    "NotFoundError", "OrtValue", "OutOfRangeError", "Parameters", "PermissionDeniedError", "ResourceExhaustedError",
    "TrainStepResult", "TrainStreamResult", "TraindError", "UnauthenticatedError", "UnavailableError",
    "UnimplementedError", "UnknownError", "connect", "v1",
]
