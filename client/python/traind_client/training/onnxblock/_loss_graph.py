"""A loss Block, built on a forward model, becomes the standalone ONNX graph the daemon takes as a CustomLoss.

ONNX Runtime builds losses by appending nodes to the forward model itself. traind does the same on a copy, then
cuts out what the blocks appended: their nodes and initializers, the targets they added as graph inputs, and, as
the loss graph's other inputs, the forward model's outputs the nodes read (the daemon binds those by name). The
graph's single output is the block's loss, reshaped to a scalar when it holds one element in a higher rank.
"""

import dataclasses
from typing import List

import onnx

from traind_client.training.onnxblock import _graph_utils, model_accessor


@dataclasses.dataclass
class LossGraph:
    model: onnx.ModelProto      # the loss graph
    target_names: List[str]     # its inputs that are new training inputs, in the order the blocks made them
    extra_outputs: List[str]    # further names the block returned (model outputs to expose beside the loss)


def _as_names(output):
    if isinstance(output, str):
        return [output]
    if isinstance(output, (tuple, list)) and output and all(isinstance(name, str) for name in output):
        return list(output)
    raise RuntimeError(f"a loss block must return the name of its loss (or a tuple of names), got {output!r}")


def build_loss_graph(forward, block, input_names):
    """Calls `block(*input_names)` on a copy of `forward` and returns the LossGraph of what it appended."""
    with model_accessor.base(forward) as accessor:
        names = _as_names(block(*input_names))
        built = accessor.model
    graph = forward.graph
    new_nodes = built.graph.node[len(graph.node):]
    new_initializers = built.graph.initializer[len(graph.initializer):]
    targets = built.graph.input[len(graph.input):]
    loss = names[0]

    produced = {output for node in new_nodes for output in node.output}
    produced.update(init.name for init in new_initializers)
    produced.update(target.name for target in targets)
    model_outputs = {output.name: output for output in graph.output}
    read = [name for node in new_nodes for name in node.input if name and name not in produced]
    if loss not in produced:
        read.append(loss)  # a loss that is a model output itself (no loss nodes: ONNX Runtime's PassThrough)
    bound = []
    for name in read:
        if name in model_outputs:
            if name not in bound:
                bound.append(name)
            continue
        what = ("an input" if any(v.name == name for v in graph.input) else
                "an initializer" if any(i.name == name for i in graph.initializer) else
                "an intermediate value" if _graph_utils.node_arg_exists(forward, name) else "unknown")
        raise RuntimeError(f"the loss reads '{name}', which is {what} of the model, not one of its outputs "
                           f"({', '.join(model_outputs)}); traind's loss graphs read model outputs and new targets")

    nodes = list(new_nodes)
    if loss not in produced:
        # ONNX Runtime's PassThrough: the model output is the loss. A graph output must come from a node.
        identity = _graph_utils.generate_graph_name("loss")
        nodes.append(onnx.helper.make_node("Identity", [loss], [identity],
                                           name=_graph_utils.generate_graph_name("Identity")))
        loss = identity
    inputs = [model_outputs[name] for name in sorted(bound, key=list(model_outputs).index)] + list(targets)
    loss_model = onnx.helper.make_model(
        onnx.helper.make_graph(nodes, "loss", inputs, [onnx.helper.make_empty_tensor_value_info(loss)],
                               initializer=list(new_initializers)),
        opset_imports=list(forward.opset_import), ir_version=forward.ir_version)
    loss_model = _scalar_loss(loss_model)
    onnx.checker.check_model(loss_model, full_check=True)
    return LossGraph(loss_model, [target.name for target in targets], names[1:])


def _scalar_loss(model):
    """Gives the output its inferred type; a one-element loss of rank > 0 (ONNX Runtime's [1]-shaped constants)
    is reshaped to a scalar."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    loss = model.graph.output[0].name
    info = next((value for value in list(inferred.graph.value_info) + list(inferred.graph.output)
                 if value.name == loss and value.type.HasField("tensor_type")), None)
    elem_type = info.type.tensor_type.elem_type if info is not None else onnx.TensorProto.FLOAT
    dims = info.type.tensor_type.shape.dim if info is not None and info.type.tensor_type.HasField("shape") else None
    if dims is not None and len(dims) > 0 and all(d.HasField("dim_value") and d.dim_value == 1 for d in dims):
        shape = _graph_utils.generate_graph_name("scalar_shape")
        scalar = _graph_utils.generate_graph_name("loss")
        model.graph.initializer.append(onnx.helper.make_tensor(shape, onnx.TensorProto.INT64, [0], []))
        model.graph.node.append(onnx.helper.make_node("Reshape", [loss, shape], [scalar],
                                                      name=_graph_utils.generate_graph_name("Reshape")))
        loss = scalar
        dims = []
    del model.graph.output[:]
    model.graph.output.append(onnx.helper.make_tensor_value_info(
        loss, elem_type, None if dims is None else [d.dim_value if d.HasField("dim_value") else d.dim_param or None
                                                    for d in dims]))
    return model
