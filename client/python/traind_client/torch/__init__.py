"""traind_client.torch: an ONNX graph served by traind as one layer of a PyTorch model.

    import torch, traind_client.torch as traind_torch

    block = traind_torch.TraindModule(onnx_model, optimizer={"adamw": {"lr": 1e-3}})   # traind trains its weights
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), block, torch.nn.ReLU(), torch.nn.Linear(8, 3))
    optimizer = torch.optim.AdamW([p for n, p in model.named_parameters()], lr=1e-3)   # the other layers
    for x, y in batches:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(); block.zero_grad()
        loss.backward()               # through the daemon: Backward returns the block's input gradients
        optimizer.step(); block.step()  # block.step(): the daemon's optimizer step on the block's weights

The graph's forward pass runs on the daemon (Forward, training-mode when the module is in training mode and
autograd records), PyTorch computes the loss and trains its own layers, and the backward pass comes back through
Backward: `TraindFunction` is the torch.autograd.Function between the two. Two ways to train the graph's weights:

- optimizer="traind" style (the default when an `optimizer` spec is given): the daemon keeps the weights and its
  own optimizer (traind.v1.OptimizerSpec, e.g. {"sgd": {"lr": 0.1, "momentum": 0.9}}); Backward accumulates
  their gradients there and `step()` applies them (OptimizerStep + LazyResetGrad).
- parameters_in_torch=True: the weights are torch.nn.Parameters of this module (pulled from the daemon at
  creation), Backward returns their gradients to autograd, and any PyTorch optimizer updates them; changed
  values are pushed to the daemon (SetParameters) before the next forward.

Everything goes through traind_client.Client (never the stubs). The daemon bounds the passes it keeps for
Backward; a pass whose backward never comes (the outputs dropped, an exception) is released when PyTorch frees it.
"""

import threading

import numpy as np
import onnx
import torch

import traind_client

__all__ = ["TraindFunction", "TraindModule"]


class _PendingForward:
    """A forward handle awaiting Backward. When autograd frees the pass without running its backward, the handle
    is queued for release (no RPC from a finalizer: the module sends the queue with its next call)."""

    def __init__(self, module, handle):
        self.module = module
        self.handle = handle
        self.consumed = False

    def __del__(self):
        if not self.consumed and self.handle:
            self.module._queue_release(self.handle)


# Arguments of TraindFunction before the graph's inputs: the module, whether to keep the pass, the anchor.
_LEADING = 3


class TraindFunction(torch.autograd.Function):
    """forward(ctx, module, keep, anchor, *inputs_then_parameters): the module's Forward on the daemon (a pass
    kept for Backward when `keep`: autograd records); backward: its Backward. `anchor` is an empty tensor that
    requires grad, so that autograd calls backward even when no input does (the daemon's weights need their
    gradients); the parameters follow the inputs only with parameters_in_torch."""

    @staticmethod
    def forward(ctx, module, keep, anchor, *arguments):
        inputs = arguments[:len(module.input_names)]
        outputs, handle = module._run_forward(inputs, keep=keep)
        ctx.module = module
        ctx.pending = _PendingForward(module, handle) if handle else None
        ctx.output_meta = [(tensor.dtype, tensor.device) for tensor in outputs]
        ctx.input_meta = [(tensor.dtype, tensor.device) for tensor in inputs]
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grad_outputs):
        module = ctx.module
        pending = ctx.pending
        if pending is None:
            raise RuntimeError("traind_client.torch: this forward pass kept nothing for a backward pass (it ran "
                               "with autograd off or in eval mode)")
        wanted = [name for i, name in enumerate(module.input_names)
                  if ctx.needs_input_grad[_LEADING + i] and name in module.input_gradient_names]
        output_gradients = {}
        for name, gradient in zip(module.output_names, grad_outputs):
            if gradient is not None and name in module.differentiated_outputs:
                output_gradients[name] = gradient.detach().cpu().contiguous().numpy()
        pending.consumed = True
        result = module._client.backward(module.session_id, pending.handle, output_gradients,
                                         input_gradients=wanted,
                                         return_parameter_gradients=module.parameters_in_torch)
        returned = [None] * _LEADING
        for i, name in enumerate(module.input_names):
            gradient = result.input_gradients.get(name)
            if gradient is None or not ctx.needs_input_grad[_LEADING + i]:
                returned.append(None)
            else:
                dtype, device = ctx.input_meta[i]
                returned.append(torch.from_numpy(gradient).to(device=device, dtype=dtype))
        if module.parameters_in_torch:
            for name, parameter in zip(module.parameter_names, module._torch_parameters):
                gradient = result.parameter_gradients.get(name)
                returned.append(None if gradient is None else
                                torch.from_numpy(gradient).to(device=parameter.device, dtype=parameter.dtype))
        return tuple(returned)


class TraindModule(torch.nn.Module):
    """An ONNX graph (onnx.ModelProto, bytes or a path) served by traind as a torch.nn.Module.

    The daemon makes artifacts without a loss (GenerateArtifacts with loss {"no_loss": ...}) and opens a session;
    forward(*inputs) takes the graph's inputs in order (Session.forward_inputs) and returns its output (a tuple
    when it has several). `optimizer` is the daemon's optimizer (traind.v1.OptimizerSpec or its dict form; default
    torch.optim.SGD's lr 0.01) applied by step(); with parameters_in_torch=True the weights are torch Parameters
    of this module instead, for a PyTorch optimizer. `requires_grad` / `frozen_params` choose the trainable
    initializers as in GenerateArtifacts; `client` (else `address`, else $TRAIND_ADDRESS) is the daemon.
    """

    def __init__(self, onnx_model, *, optimizer=None, parameters_in_torch=False, requires_grad=(),
                 frozen_params=(), client=None, address=None, seed=0, num_threads=0, display_name="torch"):
        super().__init__()
        self._owns_client = client is None
        self._client = client if client is not None else traind_client.connect(address)
        self._release_lock = threading.Lock()
        self._to_release = []
        model = onnx_model if isinstance(onnx_model, onnx.ModelProto) else None
        if model is None and isinstance(onnx_model, (bytes, bytearray)):
            model = onnx.load_from_string(bytes(onnx_model))
        elif model is None:
            model = onnx.load(onnx_model)
        artifacts = self._client.generate_artifacts(
            model, loss={"no_loss": {}}, optimizer=optimizer if optimizer is not None else {"sgd": {"lr": 0.01}},
            requires_grad=requires_grad, frozen_params=frozen_params)
        self.artifact_id = artifacts.artifact_id
        session = self._client.create_session(artifacts.artifact_id, seed=seed, num_threads=num_threads,
                                              display_name=display_name)
        self.session_id = session.session_id
        self.input_names = list(session.forward_inputs)
        self.output_names = list(session.forward_outputs)
        self.differentiated_outputs = set(session.differentiated_outputs)
        self.input_gradient_names = set(session.input_gradients)
        self.parameter_names = list(artifacts.trainable_parameters)
        self.parameters_in_torch = parameters_in_torch
        # Leaf tensor (not a Parameter: no optimizer sees it) that makes every output require grad.
        self._anchor = torch.zeros(0, requires_grad=True)
        self._torch_parameters = torch.nn.ParameterList()
        self._pushed_versions = []
        if parameters_in_torch:
            values = self._client.get_parameters(self.session_id, self.parameter_names).parameters
            for name in self.parameter_names:
                self._torch_parameters.append(torch.nn.Parameter(torch.from_numpy(values[name].copy())))
            self._pushed_versions = [parameter._version for parameter in self._torch_parameters]

    # ---- torch.nn.Module ----

    def forward(self, *inputs):
        if len(inputs) != len(self.input_names):
            raise TypeError(f"{type(self).__name__} takes {len(self.input_names)} inputs "
                            f"({', '.join(self.input_names)}), got {len(inputs)}")
        self._flush_releases()
        if self.parameters_in_torch:
            self._push_changed_parameters()
        keep = self.training and torch.is_grad_enabled()  # decided here: autograd is off inside Function.forward
        outputs = TraindFunction.apply(self, keep, self._anchor, *inputs, *self._torch_parameters)
        return outputs[0] if len(outputs) == 1 else outputs

    def step(self):
        """The daemon's optimizer step on the graph's weights, then a lazy gradient reset (the next Backward
        overwrites the gradients). Returns traind.v1.OptimizerStepResponse."""
        if self.parameters_in_torch:
            raise RuntimeError("parameters_in_torch: a PyTorch optimizer updates these parameters")
        self._flush_releases()
        response = self._client.optimizer_step(self.session_id)
        self._client.lazy_reset_grad(self.session_id)
        return response

    def zero_grad(self, set_to_none=True):
        """As torch.nn.Module.zero_grad, and the daemon's gradients too (a lazy reset)."""
        super().zero_grad(set_to_none=set_to_none)
        if not self.parameters_in_torch:
            self._client.lazy_reset_grad(self.session_id)

    def named_graph_parameters(self):
        """{name: numpy array} of the graph's trainable weights as the daemon holds them."""
        if self.parameters_in_torch:
            self._push_changed_parameters()
        return self._client.get_parameters(self.session_id, self.parameter_names).parameters

    def export(self):
        """The graph as an inference ONNX model (bytes) with the current weights."""
        if self.parameters_in_torch:
            self._push_changed_parameters()
        return self._client.export_for_inference(self.session_id)

    def close(self):
        """Closes the daemon session (and the client, when this module made it)."""
        if self.session_id:
            try:
                self._client.close_session(self.session_id)
            finally:
                self.session_id = ""
                if self._owns_client:
                    self._client.close()

    def extra_repr(self):
        return (f"session={self.session_id!r}, inputs={self.input_names}, outputs={self.output_names}, "
                f"parameters_in_torch={self.parameters_in_torch}")

    # ---- plumbing ----

    def _run_forward(self, inputs, keep):
        arrays = {}
        for name, tensor in zip(self.input_names, inputs):
            if not isinstance(tensor, torch.Tensor):
                tensor = torch.as_tensor(tensor)
            arrays[name] = tensor.detach().cpu().contiguous().numpy()
        # In training mode the pass is a training-mode one even without autograd (BatchNormalization's running
        # statistics move as in PyTorch); its handle is then released at once.
        result = self._client.forward(self.session_id, arrays, training=self.training)
        if self.training and not keep and result.handle:
            self._queue_release(result.handle)
        device = inputs[0].device if inputs and isinstance(inputs[0], torch.Tensor) else torch.device("cpu")
        outputs = [torch.from_numpy(np.array(result.outputs[name])).to(device) for name in self.output_names]
        return outputs, (result.handle if keep else "")

    def _queue_release(self, handle):
        with self._release_lock:
            self._to_release.append(handle)

    def _flush_releases(self):
        with self._release_lock:
            handles, self._to_release = self._to_release, []
        if handles and self.session_id:
            self._client.release_forward(self.session_id, handles)

    def _push_changed_parameters(self):
        changed = {}
        for k, parameter in enumerate(self._torch_parameters):
            if parameter._version != self._pushed_versions[k]:
                changed[self.parameter_names[k]] = parameter.detach().cpu().contiguous().numpy()
        if changed:
            self._client.set_parameters(self.session_id, parameters=changed)
            self._pushed_versions = [parameter._version for parameter in self._torch_parameters]
