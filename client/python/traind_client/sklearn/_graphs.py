"""The ONNX graphs the estimators train: forward models (a linear model, an MLP) with a symbolic batch dimension,
and scikit-learn's SGD losses as ONNX loss graphs (traind.v1.CustomLoss). Graphs only: the arithmetic of
training (gradients, penalties, learning-rate schedules) is the daemon's."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
BATCH = "N"  # the symbolic batch dimension
INPUT = "X"
TARGET = "target"


def _model(nodes, name, inputs, outputs, initializers):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8,
                             producer_name="traind_client.sklearn")


def _input(n_features):
    return helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, [BATCH, n_features])


def _output(name, width):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [BATCH, width])


def linear_model(coef, intercept, output="decision"):
    """decision = X @ coef + intercept; coef [n_features, n_outputs], intercept [n_outputs] (float32)."""
    coef = np.asarray(coef, np.float32)
    intercept = np.asarray(intercept, np.float32)
    nodes = [helper.make_node("Gemm", [INPUT, "coef", "intercept"], [output], name="linear")]
    return _model(nodes, "linear", [_input(coef.shape[0])], [_output(output, coef.shape[1])],
                  [numpy_helper.from_array(coef, "coef"), numpy_helper.from_array(intercept, "intercept")])


ACTIVATIONS = {"identity": "Identity", "logistic": "Sigmoid", "tanh": "Tanh", "relu": "Relu"}


def mlp_model(coefs, intercepts, activation, output_activation):
    """scikit-learn's MLP: hidden layers Gemm + activation, the last layer's pre-activation "logits" and its
    output activation ("identity", "logistic", "softmax") as "output". coefs_[i]: [fan_in, fan_out]."""
    nodes, initializers = [], []
    current = INPUT
    for layer, (coef, intercept) in enumerate(zip(coefs, intercepts)):
        weight, bias = f"coefs_{layer}", f"intercepts_{layer}"
        initializers += [numpy_helper.from_array(np.asarray(coef, np.float32), weight),
                         numpy_helper.from_array(np.asarray(intercept, np.float32), bias)]
        last = layer == len(coefs) - 1
        pre = "logits" if last else f"pre_{layer}"
        nodes.append(helper.make_node("Gemm", [current, weight, bias], [pre], name=f"layer_{layer}"))
        if not last:
            current = f"hidden_{layer}"
            nodes.append(helper.make_node(ACTIVATIONS[activation], [pre], [current], name=f"activation_{layer}"))
    out = np.asarray(coefs[-1]).shape[1]
    if output_activation == "softmax":
        nodes.append(helper.make_node("Softmax", ["logits"], ["output"], axis=1, name="output"))
    else:
        nodes.append(helper.make_node(ACTIVATIONS[output_activation], ["logits"], ["output"], name="output"))
    return _model(nodes, "mlp", [_input(np.asarray(coefs[0]).shape[0])], [_output("logits", out),
                                                                             _output("output", out)], initializers)


def _scalar(name, value):
    return numpy_helper.from_array(np.array(value, np.float32), name)


def sgd_loss_graph(loss, prediction, n_outputs, epsilon=0.1):
    """scikit-learn's SGD loss (sklearn/linear_model/_sgd_fast.pyx) as an ONNX loss graph: per example and
    output, with p the prediction and y the target (+1/-1 for classification losses), summed over the outputs
    (one-vs-all: the binary problems are independent) and averaged over the batch.

    hinge max(0, 1 - py) (gradient -y where py <= 1, as scikit-learn's); perceptron max(0, -py) (likewise at 0); squared_hinge max(0, 1 - py)^2; log_loss log(1 + exp(-py));
    modified_huber (1 - py)^2 for py >= -1 (0 beyond 1), -4py below; squared_error (p - y)^2 / 2;
    huber (p - y)^2 / 2 within epsilon, epsilon |p - y| - epsilon^2 / 2 beyond;
    epsilon_insensitive max(0, |y - p| - epsilon); squared_epsilon_insensitive max(0, |y - p| - epsilon)^2."""
    p, y = prediction, TARGET
    nodes, constants = [], [_scalar("one", 1.0), _scalar("half", 0.5), _scalar("epsilon", epsilon)]

    def node(op, inputs, output, **attributes):
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attributes))
        return output

    margin = lambda: node("Mul", [p, y], "margin")  # noqa: E731
    residual = lambda: node("Sub", [p, y], "residual")  # noqa: E731
    if loss in ("hinge", "perceptron"):
        # threshold - py where py <= threshold, else 0: scikit-learn's subgradient, -y, includes py == threshold
        # (a Relu's would be 0 there, and zero-initialised weights start exactly there).
        threshold = "one" if loss == "hinge" else "zero"
        constants.append(_scalar("zero", 0.0))
        z = margin()
        below = node("LessOrEqual", [z, threshold], "below_threshold")
        per_element = node("Where", [below, node("Sub", [threshold, z], "threshold_minus_margin"), "zero"],
                           "per_element")
    elif loss == "squared_hinge":
        hinge = node("Relu", [node("Sub", ["one", margin()], "one_minus_margin")], "hinge")
        per_element = node("Mul", [hinge, hinge], "per_element")
    elif loss == "log_loss":
        per_element = node("Softplus", [node("Neg", [margin()], "negative_margin")], "per_element")
    elif loss == "modified_huber":
        z = margin()
        constants += [_scalar("minus_one", -1.0), _scalar("minus_four", -4.0)]
        hinge = node("Relu", [node("Sub", ["one", z], "one_minus_margin")], "hinge")
        quadratic = node("Mul", [hinge, hinge], "quadratic")
        linear = node("Mul", [z, "minus_four"], "linear")
        inside = node("GreaterOrEqual", [z, "minus_one"], "inside")
        per_element = node("Where", [inside, quadratic, linear], "per_element")
    elif loss == "squared_error":
        r = residual()
        per_element = node("Mul", [node("Mul", [r, r], "squared"), "half"], "per_element")
    elif loss == "huber":
        r = residual()
        absolute = node("Abs", [r], "absolute")
        quadratic = node("Mul", [node("Mul", [r, r], "squared"), "half"], "quadratic")
        constants.append(_scalar("half_epsilon_squared", 0.5 * epsilon * epsilon))
        linear = node("Sub", [node("Mul", [absolute, "epsilon"], "scaled"), "half_epsilon_squared"], "linear")
        inside = node("LessOrEqual", [absolute, "epsilon"], "inside")
        per_element = node("Where", [inside, quadratic, linear], "per_element")
    elif loss in ("epsilon_insensitive", "squared_epsilon_insensitive"):
        absolute = node("Abs", [residual()], "absolute")
        excess = node("Relu", [node("Sub", [absolute, "epsilon"], "beyond")], "excess")
        per_element = excess if loss == "epsilon_insensitive" else node("Mul", [excess, excess], "per_element")
    else:
        raise ValueError(f"unknown loss {loss!r}")
    constants.append(numpy_helper.from_array(np.array([1], np.int64), "output_axis"))
    per_example = node("ReduceSum", [per_element, "output_axis"], "per_example", keepdims=0)
    node("ReduceMean", [per_example], "loss", keepdims=0)
    inputs = [helper.make_tensor_value_info(p, TensorProto.FLOAT, [BATCH, n_outputs]),
              helper.make_tensor_value_info(y, TensorProto.FLOAT, [BATCH, n_outputs])]
    used = {name for n in nodes for name in n.input}
    return _model(nodes, "sgd_loss", inputs, [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                  [c for c in constants if c.name in used])


def half_squared_error_graph(prediction, n_outputs):
    """scikit-learn MLPRegressor's training loss: sum over outputs of (p - y)^2 / 2, averaged over the batch (the
    gradient sklearn's backpropagation uses: delta = p - y, divided by the batch size)."""
    return sgd_loss_graph("squared_error", prediction, n_outputs)
