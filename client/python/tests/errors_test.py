"""Every failed call becomes a TraindError subclass with status, message and ErrorDetail; deadlines, tokens,
retries and uploads as the daemon sees them. The daemon's side is a real gRPC server in this process, serving
the generated TrainingService with answers chosen per test (the real daemon cannot be made to fail with every
status code; tests/python_client runs everything against it)."""

import concurrent.futures
import hashlib
import os
import pickle
import threading
import time
import unittest

import grpc
import numpy as np

import traind_client
from traind_client import _client, _errors, v1
from traind_client._proto import training_service_pb2_grpc as pb_grpc

CODES = [code for code in grpc.StatusCode if code is not grpc.StatusCode.OK]


class ScriptedService(pb_grpc.TrainingServiceServicer):
    """Answers as the test sets `self.behaviour[method]`: a callable (request, context) -> response."""

    def __init__(self):
        self.behaviour = {}
        self.calls = []
        self.lock = threading.Lock()

    def _run(self, method, request, context):
        with self.lock:
            self.calls.append((method, dict(context.invocation_metadata()), context.time_remaining()))
        return self.behaviour[method](request, context)

    def GetServerInfo(self, request, context):
        return self._run("GetServerInfo", request, context)

    def GetSession(self, request, context):
        return self._run("GetSession", request, context)

    def TrainStep(self, request, context):
        return self._run("TrainStep", request, context)

    def GetBlobInfo(self, request, context):
        return self._run("GetBlobInfo", request, context)

    def UploadBlob(self, request_iterator, context):
        return self._run("UploadBlob", list(request_iterator), context)

    def WatchJob(self, request, context):
        return self._run("WatchJob", request, context)

    def GetParameters(self, request, context):
        return self._run("GetParameters", request, context)


def fail(code, message, detail=None):
    def behaviour(request, context):
        if detail is not None:
            context.set_trailing_metadata([(_errors.ERROR_DETAIL_KEY, detail)])
        context.abort(code, message)
    return behaviour


class ClientErrorsTest(unittest.TestCase):
    def setUp(self):
        self.service = ScriptedService()
        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_TrainingServiceServicer_to_server(self.service, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.address = f"127.0.0.1:{port}"
        self.client = traind_client.connect(self.address)

    def tearDown(self):
        self.client.close()
        self.server.stop(None)

    def test_every_status_code_raises_its_subclass_with_message_and_detail(self):
        for code in CODES:
            detail = v1.ErrorDetail(reason=f"R_{code.name}", input_name="x", parameter="w")
            self.service.behaviour["GetSession"] = fail(code, f"message for {code.name}", detail.SerializeToString())
            with self.assertRaises(traind_client.TraindError) as raised:
                self.client.get_session("s-1")
            error = raised.exception
            self.assertIs(type(error), _errors.error_class(code))
            self.assertIsNot(type(error), traind_client.TraindError, code)
            self.assertEqual(error.code, code)
            self.assertEqual(error.message, f"message for {code.name}")
            self.assertEqual(error.method, "GetSession")
            self.assertEqual(error.detail, detail)
            self.assertEqual(error.reason, f"R_{code.name}")
            self.assertIn(f"GetSession: {code.name}: message for {code.name} [R_{code.name}]", str(error))
            self.assertIsNone(error.__cause__)  # raised `from None`: no grpc traceback in the user's face
            copy = pickle.loads(pickle.dumps(error))
            self.assertEqual((type(copy), copy.code, copy.detail, str(copy)), (type(error), code, detail, str(error)))
        self.assertIs(_errors.error_class(grpc.StatusCode.NOT_FOUND), traind_client.NotFoundError)
        self.assertIs(_errors.error_class(grpc.StatusCode.DATA_LOSS), traind_client.DataLossError)

    def test_coverage_report_travels_in_the_detail(self):
        detail = v1.ErrorDetail(reason="NO_GRADIENT_RULE", op_type="Sin", parameter="w1")
        blocked = detail.coverage.blocked_parameters.add(parameter="w1")
        blocked.blocking_nodes.append("ai.onnx::Sin")
        self.service.behaviour["GetSession"] = fail(grpc.StatusCode.FAILED_PRECONDITION, "no rule",
                                                    detail.SerializeToString())
        with self.assertRaises(traind_client.FailedPreconditionError) as raised:
            self.client.get_session("s")
        self.assertEqual(list(raised.exception.detail.coverage.blocked_parameters[0].blocking_nodes),
                         ["ai.onnx::Sin"])

    def test_without_or_with_a_damaged_detail_the_status_still_tells(self):
        self.service.behaviour["GetSession"] = fail(grpc.StatusCode.NOT_FOUND, "gone")
        with self.assertRaises(traind_client.NotFoundError) as raised:
            self.client.get_session("s")
        self.assertIsNone(raised.exception.detail)
        self.assertEqual(raised.exception.reason, "")
        self.service.behaviour["GetSession"] = fail(grpc.StatusCode.DATA_LOSS, "torn", b"\xff\xff\xff")
        with self.assertRaises(traind_client.DataLossError) as raised:
            self.client.get_session("s")
        self.assertIsNone(raised.exception.detail)

    def test_stream_errors_are_raised_while_iterating(self):
        def watch(request, context):
            yield v1.Job(job_id=request.job_id, state=v1.RUNNING)
            context.abort(grpc.StatusCode.NOT_FOUND, "the job went away")
        self.service.behaviour["WatchJob"] = watch
        jobs = self.client.watch_job("j-1")
        self.assertEqual(next(jobs).state, v1.RUNNING)
        with self.assertRaises(traind_client.NotFoundError) as raised:
            next(jobs)
        self.assertEqual(raised.exception.method, "WatchJob")

    def test_every_call_has_a_finite_deadline(self):
        self.service.behaviour["GetSession"] = lambda request, context: v1.Session(session_id=request.session_id)
        self.service.behaviour["TrainStep"] = lambda request, context: v1.TrainStepResponse(loss=1.5)
        self.assertEqual(self.client.get_session("s-7").session_id, "s-7")
        self.assertEqual(self.client.train_step("s-7", {"x": np.ones(2, np.float32)}).loss, 1.5)
        remaining = {method: left for method, _, left in self.service.calls}
        self.assertTrue(0 < remaining["GetSession"] <= 61, remaining)  # deadlines travel rounded up
        self.assertTrue(100 < remaining["TrainStep"] <= 601, remaining)
        self.client.get_session("s-7", timeout=5)
        self.assertLessEqual(self.service.calls[-1][2], 6)

    def test_a_call_past_its_deadline_raises_deadline_exceeded(self):
        def slow(request, context):
            time.sleep(1.0)
            return v1.Session()
        self.service.behaviour["GetSession"] = slow
        with self.assertRaises(traind_client.DeadlineExceededError):
            self.client.get_session("s", timeout=0.2)

    def test_the_token_goes_with_every_call(self):
        self.service.behaviour["GetServerInfo"] = lambda request, context: v1.ServerInfo(version="x")
        with traind_client.connect(self.address, token="s3cret") as client:
            client.get_server_info()
        self.assertEqual(self.service.calls[-1][1].get("authorization"), "Bearer s3cret")
        os.environ["TRAIND_TOKEN"] = "from-env"
        try:
            with traind_client.connect(self.address) as client:
                client.get_server_info()
        finally:
            del os.environ["TRAIND_TOKEN"]
        self.assertEqual(self.service.calls[-1][1].get("authorization"), "Bearer from-env")
        self.client.get_server_info()
        self.assertNotIn("authorization", self.service.calls[-1][1])

    def test_reads_are_retried_when_unavailable_and_steps_never_are(self):
        attempts = {"GetServerInfo": 0, "TrainStep": 0}

        def flaky(method, answer):
            def behaviour(request, context):
                attempts[method] += 1
                if attempts[method] < 3:
                    context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")
                return answer
            return behaviour
        self.service.behaviour["GetServerInfo"] = flaky("GetServerInfo", v1.ServerInfo(version="1"))
        self.service.behaviour["TrainStep"] = flaky("TrainStep", v1.TrainStepResponse())
        self.assertEqual(self.client.get_server_info().version, "1")
        self.assertEqual(attempts["GetServerInfo"], 3)
        with self.assertRaises(traind_client.UnavailableError):
            self.client.train_step("s", {})
        self.assertEqual(attempts["TrainStep"], 1)

    def test_nothing_listening_is_unavailable(self):
        with traind_client.connect("127.0.0.1:1", timeout=5) as client:
            with self.assertRaises(traind_client.UnavailableError):
                client.get_session("s")

    def test_uploads_stream_a_verified_header_then_bounded_chunks_once(self):
        received = {}

        def upload(requests, context):
            header = requests[0].header
            received["header"] = header
            received["chunks"] = [len(r.chunk) for r in requests[1:]]
            content = b"".join(r.chunk for r in requests[1:])
            received["content"] = content
            return v1.UploadBlobResponse(blob_id=hashlib.sha256(content).hexdigest(), total_bytes=len(content))

        stored = set()

        def blob_info(request, context):
            if request.blob_id not in stored:
                context.abort(grpc.StatusCode.NOT_FOUND, "no such blob")
            return v1.UploadBlobResponse(blob_id=request.blob_id)
        self.service.behaviour["UploadBlob"] = upload
        self.service.behaviour["GetBlobInfo"] = blob_info
        data = os.urandom(2_500_000)
        digest = hashlib.sha256(data).hexdigest()
        self.assertEqual(self.client.ensure_blob(data), digest)
        self.assertEqual(received["header"].total_bytes, len(data))
        self.assertEqual(received["header"].sha256_hex, digest)
        self.assertEqual(received["chunks"], [1 << 20, 1 << 20, len(data) - (2 << 20)])
        self.assertEqual(received["content"], data)
        stored.add(digest)
        uploads = sum(1 for method, _, _ in self.service.calls if method == "UploadBlob")
        self.assertEqual(self.client.ensure_blob(data), digest)  # the daemon has it: no second upload
        self.assertEqual(sum(1 for method, _, _ in self.service.calls if method == "UploadBlob"), uploads)

    def test_frozen_parameters_have_no_gradient(self):
        def parameters(request, context):
            response = v1.GetParametersResponse()
            response.parameters.add(name="w", dtype=v1.FLOAT32, shape=[1], data=np.float32([2]).tobytes())
            response.gradients.add(name="w")  # a frozen parameter: an empty tensor with its name
            return response
        self.service.behaviour["GetParameters"] = parameters
        result = self.client.get_parameters("s", ["w"], include_gradients=True)
        np.testing.assert_array_equal(result.parameters["w"], [2.0])
        self.assertIsNone(result.gradients["w"])

    def test_dict_specs_take_raw_bytes(self):
        loss = _client._message({"custom": {"graph": {"onnx_bytes": b"\x08\x07raw"}, "target_names": ["t"]}},
                                v1.LossSpec, "loss")
        self.assertEqual(loss.custom.graph.onnx_bytes, b"\x08\x07raw")
        self.assertEqual(list(loss.custom.target_names), ["t"])

    def test_arguments_are_checked_before_anything_is_sent(self):
        with self.assertRaises(ValueError):
            self.client.create_session()
        with self.assertRaises(ValueError):
            self.client.create_session("a", executor="tpu")
        with self.assertRaises(ValueError):
            self.client.set_parameters("s")
        with self.assertRaises(ValueError):
            self.client.load_checkpoint("s", name="a", content=b"b")
        with self.assertRaises(TypeError):
            self.client.update_properties("s", {"flag": True})
        with self.assertRaises(ValueError):
            self.client.generate_artifacts(b"model", loss={"builtin": {"type": "NO_SUCH_LOSS"}})
        with self.assertRaises(ValueError):
            traind_client.connect(self.address, tls_cert="cert.pem")
        self.assertEqual(self.service.calls, [])


if __name__ == "__main__":
    unittest.main()
