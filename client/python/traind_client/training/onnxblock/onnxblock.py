"""ForwardBlock and TrainingBlock: blocks that turn their build() into whole models.

ForwardBlock registers what build() returns as the model's output (to_model_proto() gives the forward model).
TrainingBlock marks what build() returns as the loss and asks the daemon for the training and eval models over
it (GenerateArtifacts with the loss as a CustomLoss graph), as ONNX Runtime's TrainingBlock builds the gradient
graph in process.
"""

import copy

import onnx

from traind_client import v1
from traind_client.training import _connection
from traind_client.training.onnxblock import _loss_graph, blocks, model_accessor


class ForwardBlock(blocks.Block):
    """A block whose build() output becomes the graph output of the base model."""

    def __init__(self):
        super().__init__()
        self._model = None

    def __call__(self, *args, **kwargs):
        output = super().__call__(*args, **kwargs)
        names = [output] if isinstance(output, str) else list(output)
        inferred = onnx.shape_inference.infer_shapes(self.base)
        known = {value.name: value for value in list(inferred.graph.value_info) + list(inferred.graph.output)}
        existing = {value.name for value in self.base.graph.output}
        for name in names:
            if name not in existing:
                self.base.graph.output.append(copy.deepcopy(known[name]) if name in known
                                              else onnx.helper.make_empty_tensor_value_info(name))
        onnx.checker.check_model(self.base, full_check=True)
        self._model = self.base
        return output

    def to_model_proto(self):
        if self._model is None:
            raise RuntimeError("build the block first (call it inside `with onnxblock.base(model):`)")
        return self._model


class TrainingBlock(blocks.Block):
    """A block whose build() returns the loss (or a tuple: the loss, then model outputs to keep); calling it
    inside `with onnxblock.base(model):` makes the training and eval models of that loss with the daemon."""

    def __init__(self):
        super().__init__()
        self._requires_grad = set()
        self._frozen = set()
        self._artifacts = None
        self._forward = None

    def requires_grad(self, argument_name, value=True):
        (self._requires_grad if value else self._frozen).add(argument_name)
        (self._frozen if value else self._requires_grad).discard(argument_name)

    def __call__(self, *args, **kwargs):
        forward = model_accessor.current().model
        graph = _loss_graph.build_loss_graph(forward, _CallBuild(self, kwargs), args)
        client = _connection.default_client()
        self._artifacts = client.generate_artifacts(
            forward, requires_grad=sorted(self._requires_grad), frozen_params=sorted(self._frozen),
            loss=v1.LossSpec(custom=v1.CustomLoss(graph=v1.ModelSource(onnx_bytes=graph.model.SerializeToString()),
                                                  target_names=graph.target_names)),
            additional_output_names=graph.extra_outputs, return_artifact_bytes=True)
        self._forward = forward
        return graph.model.graph.output[0].name

    def _file(self, kind):
        if self._artifacts is None:
            raise RuntimeError("build the block first (call it inside `with onnxblock.base(model):`)")
        return next(f.content for f in self._artifacts.files if f.kind == kind)

    def to_model_proto(self):
        """(training model, eval model)."""
        return (onnx.load_from_string(self._file("training_model")), onnx.load_from_string(self._file("eval_model")))

    def parameters(self):
        """(trainable parameters, frozen parameters) as onnx.TensorProto lists, from the base model."""
        if self._artifacts is None:
            raise RuntimeError("build the block first (call it inside `with onnxblock.base(model):`)")
        initializers = {init.name: init for init in self._forward.graph.initializer}
        return ([initializers[name] for name in self._artifacts.trainable_parameters],
                [initializers[name] for name in self._artifacts.frozen_parameters])


class _CallBuild(blocks.Block):
    """Runs a TrainingBlock's own build() as a plain block (the loss graph builder calls it)."""

    def __init__(self, owner, kwargs):
        super().__init__()
        self._owner = owner
        self._kwargs = kwargs

    def build(self, *args):
        self._owner.base = self.base
        return self._owner.build(*args, **self._kwargs)
