"""traind_client.Client against the real daemon: every RPC of TrainingService through its method, numpy in and
out, and the daemon's refusals as TraindError subclasses with their ErrorDetail. TLS, mutual TLS and bearer
tokens over real sockets."""

import hashlib
import io
import os
import re
import subprocess
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import traind_client
from daemon import Daemon, runfile, scratch_dir
from traind_client import _checkpoint, _client, v1

GOLDEN = "tests/golden/data/mlp"


def golden(path):
    return runfile(f"{GOLDEN}/{path}")


def mlp_batch(seed=0):
    """input [5, 8] and class ids [5] for the golden MLP (logits [5, 4])."""
    rng = np.random.default_rng(seed)
    return {"input": rng.standard_normal((5, 8)).astype(np.float32), "target": rng.integers(0, 4, 5)}


def sin_model():
    """y = Sin(x @ w1) @ w2 + b: Sin has no gradient rule, so w1 cannot be trained."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Sin", ["h"], ["s"]),
             helper.make_node("MatMul", ["s", "w2"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
    graph = helper.make_graph(nodes, "sin", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
                              [numpy_helper.from_array(rng.standard_normal((3, 3)).astype(np.float32), "w1"),
                               numpy_helper.from_array(rng.standard_normal((3, 2)).astype(np.float32), "w2"),
                               numpy_helper.from_array(np.zeros(2, np.float32), "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def snake_case(name):
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # No OpenCL platform for this daemon (an empty ICD directory), so that asking for a GPU is the refusal below.
        cls.daemon = Daemon(env={"OCL_ICD_VENDORS": scratch_dir("no-icd")}).__enter__()
        cls.client = cls.daemon.client
        cls.model = onnx.load(golden("model.onnx"))
        cls.artifacts = cls.client.generate_artifacts(
            cls.model, loss={"builtin": {"type": "CROSS_ENTROPY"}}, optimizer={"adamw": {"lr": 0.01}},
            additional_output_names=["logits"], return_artifact_bytes=True)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.__exit__(None, None, None)

    def session(self, **options):
        session = self.client.create_session(self.artifacts.artifact_id, **options)
        self.addCleanup(lambda: self._close(session.session_id))
        return session

    def _close(self, session_id):
        try:
            self.client.close_session(session_id)
        except traind_client.NotFoundError:
            pass

    def test_one_method_per_rpc_and_the_daemon_serves_them_all(self):
        info = self.client.get_server_info()
        self.assertTrue(info.version)
        self.assertIn("CrossEntropyLoss", info.losses)
        for method in v1.DESCRIPTOR.services_by_name["TrainingService"].methods:
            self.assertTrue(callable(getattr(self.client, snake_case(method.name), None)), method.name)
            self.assertTrue(info.implemented_rpcs[method.name], method.name)

    def test_blobs_are_uploaded_once_by_digest_and_download_back(self):
        data = os.urandom(3 << 20)
        uploads = lambda: self.daemon.metric("traind_rpc_requests_total",
                                             method="/traind.v1.TrainingService/UploadBlob", code="OK")
        before = uploads()
        blob_id = self.client.ensure_blob(data)
        self.assertEqual(blob_id, hashlib.sha256(data).hexdigest())
        self.assertEqual(self.client.ensure_blob(data), blob_id)
        self.assertEqual(uploads(), before + 1)
        self.assertEqual(self.client.get_blob_info(blob_id).total_bytes, len(data))
        self.assertEqual(self.client.download(blob_id=blob_id, chunk_bytes=100_000), data)
        path = os.path.join(scratch_dir("blob"), "file")
        with open(path, "wb") as file:
            file.write(data[:1000])
        self.assertEqual(self.client.upload_blob(path).blob_id, hashlib.sha256(data[:1000]).hexdigest())
        with self.assertRaises(traind_client.NotFoundError) as raised:
            self.client.get_blob_info("0" * 64)
        self.assertEqual(raised.exception.reason, "BLOB_NOT_FOUND")

    def test_artifacts_are_stored_listed_downloaded_and_deleted(self):
        response = self.client.generate_artifacts(self.model, loss={"builtin": {"type": "MSE"}}, prefix="p_",
                                                  return_artifact_bytes=True)
        files = {f.kind: f for f in response.files}
        self.assertEqual(sorted(files), ["checkpoint", "eval_model", "optimizer_model", "training_model"])
        self.assertEqual(files["checkpoint"].file_name, "p_checkpoint")
        for kind, file in files.items():
            self.assertEqual(hashlib.sha256(file.content).hexdigest(), file.sha256_hex, kind)
            self.assertEqual(self.client.download(artifact_id=response.artifact_id, kind=kind), file.content)
        checkpoint = _checkpoint.parse_checkpoint(files["checkpoint"].content)
        self.assertEqual([p.name for p in checkpoint.parameters], list(response.trainable_parameters))
        self.assertIn(response.artifact_id, [a.artifact_id for a in self.client.list_artifacts()])
        self.assertEqual(len(self.client.get_artifact(response.artifact_id).files), 4)
        self.client.delete_artifact(response.artifact_id)
        self.assertNotIn(response.artifact_id, [a.artifact_id for a in self.client.list_artifacts()])
        with self.assertRaises(traind_client.NotFoundError):
            self.client.get_artifact(response.artifact_id)

    def test_a_large_model_travels_as_a_blob(self):
        inline = _client.INLINE_MODEL_BYTES
        _client.INLINE_MODEL_BYTES = 0
        try:
            source = self.client.model_source(self.model)
            self.assertEqual(source.WhichOneof("source"), "blob_id")
            response = self.client.generate_artifacts(self.model, loss={"builtin": {"type": "CROSS_ENTROPY"}})
        finally:
            _client.INLINE_MODEL_BYTES = inline
        self.assertEqual(source.blob_id, hashlib.sha256(self.model.SerializeToString()).hexdigest())
        self.assertTrue(response.artifact_id)

    def test_a_session_trains_evaluates_and_reports(self):
        session = self.session(seed=7, num_threads=1, display_name="mlp")
        self.assertEqual([i.name for i in session.training_inputs], ["input", "target"])
        self.assertEqual(list(session.output_names), ["loss", "logits"])
        self.assertTrue(session.has_optimizer and session.has_eval_model)
        self.assertEqual(session.num_threads, 1)
        sid = session.session_id
        step = self.client.train_step(sid, mlp_batch(0), fetch_outputs=["logits", "loss"])
        self.assertEqual(step.optimizer_step, 1)
        self.assertAlmostEqual(step.learning_rate, 0.01)
        self.assertEqual(step.outputs["logits"].shape, (5, 4))
        self.assertEqual(step.outputs["loss"].shape, ())
        self.assertEqual(float(step.outputs["loss"]), step.loss)
        self.assertFalse(step.skipped)
        accumulated = self.client.train_step(sid, mlp_batch(1), accumulate_only=True)
        self.assertEqual(accumulated.optimizer_step, 1)
        self.assertEqual(self.client.optimizer_step(sid).optimizer_step, 2)
        self.client.lazy_reset_grad(sid)
        evaluation = self.client.eval(sid, mlp_batch(2), fetch_outputs=["logits"])
        self.assertEqual(evaluation.outputs["logits"].dtype, np.float32)
        self.assertEqual(self.client.set_learning_rate(sid, 0.5).learning_rate, 0.5)
        self.assertEqual(self.client.get_learning_rate(sid).optimizer_step, 2)
        rate = self.client.set_scheduler(sid, {"linear_warmup_decay": {"warmup_steps": 4, "total_steps": 8}},
                                         initial_learning_rate=0.2, manual_step=True)
        self.assertAlmostEqual(rate.learning_rate, 0.2 * 2 / 4)  # applied at once at step 2 of the warm-up, as in ORT
        self.client.set_learning_rate(sid, 0.5)
        self.assertAlmostEqual(self.client.scheduler_step(sid).learning_rate, 0.2 * 2 / 4)
        info = self.client.get_session(sid)
        self.assertEqual((info.display_name, info.train_steps, info.optimizer_step), ("mlp", 2, 2))
        self.assertIn(sid, [s.session_id for s in self.client.list_sessions()])
        self.client.close_session(sid)
        with self.assertRaises(traind_client.NotFoundError) as raised:
            self.client.get_session(sid)
        self.assertEqual(raised.exception.reason, "SESSION_NOT_FOUND")

    def test_parameters_by_name_and_as_one_buffer(self):
        sid = self.session().session_id
        self.client.train_step(sid, mlp_batch(0), accumulate_only=True)
        whole = self.client.get_parameters(sid, include_gradients=True)
        layout = {s.name: s for s in whole.layout}
        names = [s.name for s in whole.layout]
        self.assertEqual(whole.buffer.dtype, np.float32)
        self.assertEqual(whole.buffer.size, sum(int(np.prod(s.shape)) for s in whole.layout))
        named = self.client.get_parameters(sid, names, include_gradients=True)
        for name in names:
            offset, shape = layout[name].offset, tuple(layout[name].shape)
            np.testing.assert_array_equal(named.parameters[name].ravel(),
                                          whole.buffer[offset:offset + int(np.prod(shape))])
            np.testing.assert_array_equal(named.gradients[name].ravel(),
                                          whole.gradient_buffer[offset:offset + int(np.prod(shape))])
            self.assertEqual(named.parameters[name].shape, shape)
            self.assertTrue(layout[name].has_gradient)
        doubled = whole.buffer * 2
        self.client.set_parameters(sid, buffer=doubled)
        np.testing.assert_array_equal(self.client.get_parameters(sid).buffer, doubled)
        first = names[0]
        self.client.set_parameters(sid, parameters={first: np.zeros_like(named.parameters[first])})
        self.assertFalse(self.client.get_parameters(sid, [first]).parameters[first].any())
        with self.assertRaises(traind_client.InvalidArgumentError):
            self.client.set_parameters(sid, buffer=doubled[:-1])
        with self.assertRaises(traind_client.InvalidArgumentError):
            self.client.get_parameters(sid, ["no.such.parameter"])

    def test_checkpoints_by_name_bytes_and_blob_and_properties(self):
        sid = self.session().session_id
        self.assertEqual(self.client.update_properties(sid, {"epoch": 3, "note": "x", "score": 0.5}),
                         {"epoch": 3, "note": "x", "score": 0.5})
        self.assertEqual(self.client.update_properties(sid, remove=["note"]), {"epoch": 3, "score": 0.5})
        before = self.client.get_parameters(sid).buffer
        saved = self.client.save_checkpoint(sid, "before", include_optimizer_state=True, return_bytes=True)
        self.assertEqual(saved.sha256_hex, hashlib.sha256(saved.content).hexdigest())
        self.assertIn("before", [c.name for c in self.client.list_checkpoints()])
        self.assertEqual(self.client.download(checkpoint_name="before"), saved.content)
        state = _checkpoint.parse_checkpoint(saved.content)
        self.assertEqual(state.properties, {"epoch": 3, "score": 0.5})
        self.client.train_step(sid, mlp_batch(0))
        self.assertFalse(np.array_equal(self.client.get_parameters(sid).buffer, before))
        for source in ({"name": "before"}, {"content": saved.content},
                       {"blob_id": self.client.ensure_blob(saved.content)}):
            self.client.train_step(sid, mlp_batch(1))
            restored = self.client.load_checkpoint(sid, **source)
            self.assertEqual(restored.optimizer_step, 0, source)
            np.testing.assert_array_equal(self.client.get_parameters(sid).buffer, before)
        damaged = bytearray(saved.content)
        damaged[-1] ^= 1
        self.client.train_step(sid, mlp_batch(1))
        trained = self.client.get_parameters(sid).buffer
        with self.assertRaises(traind_client.DataLossError) as raised:
            self.client.load_checkpoint(sid, content=bytes(damaged))
        self.assertEqual(raised.exception.reason, "CHECKPOINT_DIGEST_MISMATCH")
        np.testing.assert_array_equal(self.client.get_parameters(sid).buffer, trained)  # nothing changed
        self.client.delete_checkpoint("before")
        self.assertNotIn("before", [c.name for c in self.client.list_checkpoints()])
        other = self.session(checkpoint_blob_id=self.client.ensure_blob(saved.content))
        np.testing.assert_array_equal(self.client.get_parameters(other.session_id).buffer, before)

    def test_export_for_inference_gives_the_eval_outputs(self):
        sid = self.session().session_id
        self.client.train_step(sid, mlp_batch(0))
        exported = self.client.export_for_inference(sid, ["logits"])
        self.assertEqual(self.client.download(export={"session_id": sid, "output_names": ["logits"]}), exported)
        inference = onnx.load_from_string(exported)
        onnx.checker.check_model(inference, full_check=True)
        self.assertEqual([o.name for o in inference.graph.output], ["logits"])
        self.assertEqual([i.name for i in inference.graph.input], ["input"])
        # The exported model, trained no further, is the eval model: the engine gives it the same logits.
        check = self.client.generate_artifacts(inference, loss={"builtin": {"type": "CROSS_ENTROPY"}},
                                               additional_output_names=["logits"])
        other = self.client.create_session(check.artifact_id)
        self.addCleanup(lambda: self._close(other.session_id))
        batch = mlp_batch(3)
        np.testing.assert_array_equal(
            self.client.eval(other.session_id, batch, fetch_outputs=["logits"]).outputs["logits"],
            self.client.eval(sid, batch, fetch_outputs=["logits"]).outputs["logits"])

    def test_train_stream_equals_one_call_per_step(self):
        streamed = self.session(seed=1).session_id
        stepped = self.session(seed=1).session_id
        batches = [mlp_batch(seed) for seed in range(5)]
        results = list(self.client.train_stream(streamed, iter(batches), fetch_outputs=["logits"]))
        self.assertEqual([r.sequence for r in results], list(range(5)))
        for result, batch in zip(results, batches):
            step = self.client.train_step(stepped, batch, fetch_outputs=["logits"])
            self.assertEqual(result.step.loss, step.loss)
            np.testing.assert_array_equal(result.step.outputs["logits"], step.outputs["logits"])
        np.testing.assert_array_equal(self.client.get_parameters(streamed).buffer,
                                      self.client.get_parameters(stepped).buffer)
        bad = iter([mlp_batch(0), {"input": np.zeros((5, 8), np.float64), "target": np.zeros(5, np.int64)}])
        with self.assertRaises(traind_client.InvalidArgumentError) as raised:
            list(self.client.train_stream(streamed, bad))
        self.assertIn("request 1", raised.exception.message)

    def test_refusals_name_their_culprit(self):
        sid = self.session().session_id
        with self.assertRaises(traind_client.InvalidArgumentError) as raised:
            self.client.train_step(sid, {"input": np.zeros((5, 8), np.float32), "labels": np.zeros(5, np.int64)})
        self.assertIn("labels", raised.exception.message)
        with self.assertRaises(traind_client.InvalidArgumentError) as raised:
            self.client.train_step(sid, {"input": np.zeros((5, 7), np.float32), "target": np.zeros(5, np.int64)})
        self.assertIn("input", raised.exception.message)
        with self.assertRaises(traind_client.InvalidArgumentError) as raised:
            self.client.train_step(sid, {"input": np.zeros((5, 8), np.float32), "target": np.full(5, 9)})
        self.assertIn("target", raised.exception.message)
        with self.assertRaises(traind_client.NotFoundError):
            self.client.train_step("s-no-such-session", mlp_batch(0))
        with self.assertRaises(traind_client.NotFoundError):
            self.client.create_session("a-" + "0" * 32)
        with self.assertRaises(traind_client.FailedPreconditionError) as raised:
            self.client.create_session(self.artifacts.artifact_id, executor="gpu")
        self.assertEqual(raised.exception.reason, "NO_GPU")
        with self.assertRaises(traind_client.InvalidArgumentError):
            self.client.generate_artifacts(b"not onnx", loss={"builtin": {"type": "MSE"}})

    def test_an_op_without_a_gradient_rule_comes_with_the_coverage_report(self):
        with self.assertRaises(traind_client.FailedPreconditionError) as raised:
            self.client.generate_artifacts(sin_model(), loss={"builtin": {"type": "MSE"}})
        detail = raised.exception.detail
        self.assertEqual(detail.reason, "NO_GRADIENT_RULE")
        self.assertEqual((detail.op_type, detail.parameter), ("Sin", "w1"))
        self.assertEqual([(b.parameter, list(b.blocking_nodes)) for b in detail.coverage.blocked_parameters],
                         [("w1", ["ai.onnx::Sin"])])
        response = self.client.generate_artifacts(sin_model(), requires_grad=["w2", "b"],
                                                  loss={"builtin": {"type": "MSE"}})
        self.assertEqual(list(response.frozen_parameters), ["w1"])

    def test_a_training_job_runs_to_the_end_while_watched(self):
        rng = np.random.default_rng(9)
        buffer = io.BytesIO()
        np.savez(buffer, input=rng.standard_normal((20, 8)).astype(np.float32), target=rng.integers(0, 4, 20))
        job = self.client.submit_job({"artifact_id": self.artifacts.artifact_id,
                                      "train_data": {"npz_blob_id": self.client.ensure_blob(buffer.getvalue())},
                                      "epochs": 2, "batch_size": 5, "drop_last": True, "shuffle_seed": 3})
        states = [update.state for update in self.client.watch_job(job.job_id)]
        self.assertEqual(states[-1], v1.SUCCEEDED, self.client.get_job(job.job_id).message)
        finished = self.client.get_job(job.job_id)
        self.assertEqual((finished.step, finished.total_steps), (8, 8))
        self.assertIn(job.job_id, [j.job_id for j in self.client.list_jobs()])
        self.addCleanup(lambda: self._close(finished.session_id))
        with self.assertRaises(traind_client.NotFoundError):
            self.client.cancel_job("j-no-such-job")


def make_pki(directory):
    """A CA, a server certificate for 127.0.0.1 and a client certificate in `directory`, made with the openssl
    command."""
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    path = lambda name: os.path.join(directory, name)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca", "-keyout",
        path("ca.key"), "-out", path("ca.pem"))
    for name, extension in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", path(f"{name}.key"), "-out",
            path(f"{name}.csr"))
        with open(path(f"{name}.ext"), "w") as file:
            file.write(extension + "\n")
        run("x509", "-req", "-in", path(f"{name}.csr"), "-CA", path("ca.pem"), "-CAkey", path("ca.key"),
            "-CAcreateserial", "-days", "2", "-extfile", path(f"{name}.ext"), "-out", path(f"{name}.pem"))


class SecureConnectionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki_dir = scratch_dir("pki")
        make_pki(cls.pki_dir)

    def test_tls_and_mutual_tls(self):
        pki = lambda name: os.path.join(self.pki_dir, name)
        with Daemon(f"--tls_cert={pki('server.pem')}", f"--tls_key={pki('server.key')}") as daemon:
            with daemon.connect(tls_ca=pki("ca.pem")) as client:
                self.assertTrue(client.get_server_info().version)
            with daemon.connect(timeout=5) as client:  # plaintext to a TLS port
                with self.assertRaises(traind_client.UnavailableError):
                    client.get_server_info()
        with Daemon(f"--tls_cert={pki('server.pem')}", f"--tls_key={pki('server.key')}",
                    f"--tls_client_ca={pki('ca.pem')}") as daemon:
            with daemon.connect(tls_ca=pki("ca.pem"), tls_cert=pki("client.pem"),
                                tls_key=pki("client.key")) as client:
                self.assertTrue(client.get_server_info().version)
            with daemon.connect(tls_ca=pki("ca.pem"), timeout=5) as client:  # no client certificate
                with self.assertRaises(traind_client.UnavailableError):
                    client.get_server_info()

    def test_bearer_tokens(self):
        directory = scratch_dir("tenants")
        tenants = os.path.join(directory, "tenants")
        with open(tenants, "w") as file:
            file.write(f"[tenant alice]\ntoken_sha256 = {hashlib.sha256(b'alice-token').hexdigest()}\n")
        with Daemon(f"--tenants_file={tenants}") as daemon:
            with daemon.connect(token="alice-token") as client:
                self.assertEqual(client.list_sessions(), [])
            with daemon.connect(token="wrong") as client:
                with self.assertRaises(traind_client.UnauthenticatedError):
                    client.list_sessions()
            os.environ["TRAIND_TOKEN"] = "alice-token"
            try:
                with daemon.connect() as client:
                    self.assertEqual(client.list_sessions(), [])
            finally:
                del os.environ["TRAIND_TOKEN"]


if __name__ == "__main__":
    unittest.main()
