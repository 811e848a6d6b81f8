#!/usr/bin/python3
"""Generates the hostile-model corpus: malformed and hostile ONNX models that traind must refuse with a precise
status (never a crash, a hang or an unbounded allocation), and resource bombs it must refuse before allocating.

    /usr/bin/python3 tests/fuzz/make_hostile_models.py OUT_DIR

writes OUT_DIR/<case>.onnx (external-data cases: OUT_DIR/<case>/model.onnx beside their data, symlinks, FIFOs)
and OUT_DIR/manifest.tsv: one line per case, "<path>\t<category>\t<expect>", where expect is
  refused    INVALID_ARGUMENT or FAILED_PRECONDITION (engine: kInvalidArgument, kUnimplemented, kFailedPrecondition)
  resource   RESOURCE_EXHAUSTED naming the limit it hit
Deterministic (seeded). tests/fuzz/hostile_models_test.cc (in process, external data included) and
tests/fuzz/hostile_daemon_test.cc (the real daemon over gRPC) consume it.
"""
import os
import random
import stat
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CASES = []  # (relative path, category, expect)
OUT = None


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def typed(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def make(nodes, inputs, outputs, initializers=(), opset=17, opsets=None, ir=8, check=False):
    graph = helper.make_graph(nodes, "hostile", inputs, outputs, list(initializers))
    imports = opsets if opsets is not None else [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=imports, producer_name="traind-hostile")
    model.ir_version = ir
    if check:
        onnx.checker.check_model(model)
    return model


def with_trainable_output(model):
    """y -> y * w_train with a float initializer w_train: something GenerateArtifacts can train."""
    graph = model.graph
    output = graph.output[0]
    inner = output.name + "_inner"
    for node in graph.node:
        node.output[:] = [inner if o == output.name else o for o in node.output]
        node.input[:] = [inner if i == output.name else i for i in node.input]
    graph.node.append(helper.make_node("Mul", [inner, "w_train"], [output.name]))
    graph.initializer.append(init("w_train", np.array(0.5, np.float32)))
    return model


def emit(name, category, data, expect="refused"):
    if isinstance(data, onnx.ModelProto) and category == "bomb":
        data = with_trainable_output(data)
    if isinstance(data, onnx.ModelProto):
        data = data.SerializeToString()
    path = f"{category}-{name}.onnx"
    with open(os.path.join(OUT, path), "wb") as out:
        out.write(data)
    CASES.append((path, category, expect))


# ---- valid bases, for truncation and bit flips ----

RNG = np.random.default_rng(7)


def weights(*shape):
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


def base_mlp():
    return make([helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
                 helper.make_node("Relu", ["h"], ["r"]),
                 helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1)],
                [f32("x", [4, 6])], [f32("y", [4, 3])],
                [init("w1", weights(5, 6)), init("b1", weights(5)), init("w2", weights(3, 5)), init("b2", weights(3))],
                check=True)


def base_cnn():
    return make([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["c"], ["r"]),
                 helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                 helper.make_node("Flatten", ["p"], ["f"]),
                 helper.make_node("MatMul", ["f", "w2"], ["y"])],
                [f32("x", [2, 1, 4, 4])], [f32("y", [2, 2])],
                [init("w", weights(3, 1, 3, 3)), init("w2", weights(12, 2))], check=True)


def base_attention():
    return make([helper.make_node("MatMul", ["x", "wq"], ["q"]),
                 helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
                 helper.make_node("MatMul", ["q", "xt"], ["s"]),
                 helper.make_node("Softmax", ["s"], ["p"], axis=-1),
                 helper.make_node("MatMul", ["p", "x"], ["a"]),
                 helper.make_node("LayerNormalization", ["a", "g", "b"], ["y"], axis=-1)],
                [f32("x", [2, 3, 4])], [f32("y", [2, 3, 4])],
                [init("wq", weights(4, 4)), init("g", np.ones(4, np.float32)), init("b", np.zeros(4, np.float32))],
                check=True)


BASES = {"mlp": base_mlp(), "cnn": base_cnn(), "attention": base_attention()}


def onnx_refuses(data):
    """True when onnx itself (the same C++ checker and strict shape inference traind runs) refuses the bytes."""
    try:
        model = onnx.load_from_string(data)
        onnx.checker.check_model(model, full_check=True)
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except Exception:
        return True
    return False


def truncations():
    for name, model in BASES.items():
        data = model.SerializeToString()
        cuts = sorted(set([1, 2, 3, 7, len(data) // 2, len(data) - 1, len(data) - 2, len(data) - 5] +
                          [int(len(data) * f) for f in (0.05, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9, 0.95)]))
        kept = 0
        for cut in cuts:
            if onnx_refuses(data[:cut]):
                emit(f"{name}-{cut}", "truncated", data[:cut])
                kept += 1
        emit(f"{name}-empty", "truncated", b"")


def bit_flips():
    rng = random.Random(1212)
    for name, model in BASES.items():
        data = model.SerializeToString()
        kept = 0
        tries = 0
        while kept < 25 and tries < 2000:
            tries += 1
            flipped = bytearray(data)
            for _ in range(rng.choice([1, 1, 2, 3])):
                position = rng.randrange(len(flipped))
                flipped[position] ^= 1 << rng.randrange(8)
            flipped = bytes(flipped)
            if onnx_refuses(flipped):
                emit(f"{name}-{kept}", "bitflip", flipped)
                kept += 1


def cycles():
    emit("two-node", "cycle", make([helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                                    helper.make_node("Add", ["x", "a"], ["y"])], [f32("x", [2])], [f32("y", [2])]))
    emit("self-loop", "cycle", make([helper.make_node("Add", ["x", "y"], ["y"])], [f32("x", [2])], [f32("y", [2])]))
    emit("three-node", "cycle", make([helper.make_node("Relu", ["c"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                                      helper.make_node("Relu", ["b"], ["c"]), helper.make_node("Add", ["x", "c"], ["y"])],
                                     [f32("x", [2])], [f32("y", [2])]))
    emit("through-output", "cycle", make([helper.make_node("Mul", ["x", "y"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
                                         [f32("x", [2])], [f32("y", [2])]))
    emit("long", "cycle", make([helper.make_node("Relu", [f"v{(i + 1) % 50}"], [f"v{i}"]) for i in range(50)] +
                               [helper.make_node("Add", ["x", "v0"], ["y"])], [f32("x", [2])], [f32("y", [2])]))


def dangling_and_duplicates():
    emit("undefined-input", "dangling", make([helper.make_node("Add", ["x", "ghost"], ["y"])], [f32("x", [2])], [f32("y", [2])]))
    emit("output-never-produced", "dangling", make([helper.make_node("Relu", ["x"], ["r"])], [f32("x", [2])], [f32("y", [2])]))
    emit("empty-output-name", "dangling", make([helper.make_node("Relu", ["x"], [""])], [f32("x", [2])], [f32("", [2])]))
    emit("input-used-before-defined-in-subgraph-only", "dangling",
         make([helper.make_node("Relu", ["later"], ["y"])], [f32("x", [2])], [f32("y", [2])]))
    emit("initializer-without-name", "dangling",
         make([helper.make_node("Add", ["x", ""], ["y"])], [f32("x", [2])], [f32("y", [2])], [init("", np.ones(2, np.float32))]))
    emit("graph-input-unused-output-missing", "dangling", make([], [f32("x", [2])], [f32("y", [2])]))
    emit("two-producers", "duplicate", make([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"])],
                                            [f32("x", [2])], [f32("y", [2])]))
    emit("initializer-twice", "duplicate", make([helper.make_node("Add", ["x", "w"], ["y"])], [f32("x", [2])], [f32("y", [2])],
                                                [init("w", np.ones(2, np.float32)), init("w", np.zeros(2, np.float32))]))
    emit("input-twice", "duplicate", make([helper.make_node("Relu", ["x"], ["y"])], [f32("x", [2]), f32("x", [2])], [f32("y", [2])]))
    emit("node-overwrites-input", "duplicate", make([helper.make_node("Relu", ["x"], ["x"]), helper.make_node("Relu", ["x"], ["y"])],
                                                    [f32("x", [2])], [f32("y", [2])]))
    emit("node-overwrites-initializer", "duplicate",
         make([helper.make_node("Relu", ["x"], ["w"]), helper.make_node("Add", ["x", "w"], ["y"])], [f32("x", [2])],
              [f32("y", [2])], [init("w", np.ones(2, np.float32))]))
    emit("output-twice-one-node", "duplicate",
         make([helper.make_node("TopK", ["x", "k"], ["y", "y"])], [f32("x", [4])], [f32("y", [2])],
              [init("k", np.array([2], np.int64))]))


# Ops with their normal arity (inputs, outputs) and a valid call, for arity mutations.
ARITY = {
    "Relu": (1, 1), "Add": (2, 1), "MatMul": (2, 1), "Gemm": (2, 1), "Conv": (2, 1), "Softmax": (1, 1),
    "Concat": (2, 1), "Reshape": (2, 1), "Transpose": (1, 1), "Gather": (2, 1), "Where": (3, 1), "Clip": (1, 1),
    "BatchNormalization": (5, 1), "LayerNormalization": (2, 1), "Split": (1, 2), "TopK": (2, 2), "Slice": (3, 1),
    "Expand": (2, 1), "Tile": (2, 1), "Range": (3, 1), "Pad": (2, 1), "ConstantOfShape": (1, 1), "OneHot": (3, 1),
    "ReduceSum": (1, 1), "Sum": (1, 1), "MaxPool": (1, 1), "Dropout": (1, 1), "CumSum": (2, 1), "Trilu": (1, 1),
    "ScatterND": (3, 1), "GatherND": (2, 1), "SoftmaxCrossEntropyLoss": (2, 1), "Pow": (2, 1), "Cast": (1, 1),
}


def wrong_arities():
    for op, (n_in, n_out) in sorted(ARITY.items()):
        inputs = [f"i{k}" for k in range(n_in)]
        attrs = {"to": TensorProto.FLOAT} if op == "Cast" else {}
        # Too many inputs: every declared input plus four more.
        many = inputs + ["x", "x", "x", "x", "x", "x", "x", "x"]
        emit(f"{op}-too-many-inputs", "arity",
             make([helper.make_node(op, many, ["y"] + [f"o{k}" for k in range(1, n_out)], **attrs)],
                  [f32("x", [2, 2])] + [f32(i, [2, 2]) for i in inputs], [f32("y", [2, 2])]))
        if n_in > 1 and op not in ("Sum",):
            emit(f"{op}-too-few-inputs", "arity",
                 make([helper.make_node(op, inputs[:1] if op != "Clip" else [], ["y"] + [f"o{k}" for k in range(1, n_out)], **attrs)],
                      [f32(i, [2, 2]) for i in inputs], [f32("y", [2, 2])]))
        emit(f"{op}-too-many-outputs", "arity",
             make([helper.make_node(op, inputs, ["y"] + [f"o{k}" for k in range(1, n_out + 6)], **attrs)],
                  [f32(i, [2, 2]) for i in inputs], [f32("y", [2, 2])]))
    emit("Relu-no-inputs", "arity", make([helper.make_node("Relu", [], ["y"])], [f32("x", [2])], [f32("y", [2])]))
    emit("Add-no-outputs", "arity", make([helper.make_node("Add", ["x", "x"], [])], [f32("x", [2])], [f32("x", [2])]))


def type_mismatches():
    cases = {
        "add-float-int64": ([helper.make_node("Add", ["x", "n"], ["y"])], [f32("x", [2]), typed("n", TensorProto.INT64, [2])]),
        "matmul-float-double": ([helper.make_node("MatMul", ["x", "d"], ["y"])], [f32("x", [2, 2]), typed("d", TensorProto.DOUBLE, [2, 2])]),
        "relu-bool": ([helper.make_node("Relu", ["b"], ["y"])], [typed("b", TensorProto.BOOL, [2])]),
        "relu-string": ([helper.make_node("Relu", ["s"], ["y"])], [typed("s", TensorProto.STRING, [2])]),
        "gather-float-indices": ([helper.make_node("Gather", ["x", "x"], ["y"])], [f32("x", [2])]),
        "where-float-condition": ([helper.make_node("Where", ["x", "x", "x"], ["y"])], [f32("x", [2])]),
        "conv-int-weights": ([helper.make_node("Conv", ["x", "n"], ["y"])], [f32("x", [1, 1, 3, 3]), typed("n", TensorProto.INT64, [1, 1, 1, 1])]),
        "reshape-float-shape": ([helper.make_node("Reshape", ["x", "x"], ["y"])], [f32("x", [2])]),
        "softmax-int": ([helper.make_node("Softmax", ["n"], ["y"])], [typed("n", TensorProto.INT32, [2])]),
        "concat-mixed": ([helper.make_node("Concat", ["x", "n"], ["y"], axis=0)], [f32("x", [2]), typed("n", TensorProto.INT64, [2])]),
        "pow-bool": ([helper.make_node("Pow", ["b", "b"], ["y"])], [typed("b", TensorProto.BOOL, [2])]),
        "and-float": ([helper.make_node("And", ["x", "x"], ["y"])], [f32("x", [2])]),
        "not-int": ([helper.make_node("Not", ["n"], ["y"])], [typed("n", TensorProto.INT64, [2])]),
        "expand-float-shape": ([helper.make_node("Expand", ["x", "x"], ["y"])], [f32("x", [2])]),
        "range-mixed": ([helper.make_node("Range", ["x", "n", "x"], ["y"])], [f32("x", []), typed("n", TensorProto.INT64, [])]),
        "onehot-float-depth-bool-values": ([helper.make_node("OneHot", ["x", "x", "b"], ["y"])], [f32("x", [2]), typed("b", TensorProto.BOOL, [2])]),
        "input-elem-type-999": ([helper.make_node("Relu", ["q"], ["y"])], [typed("q", 999, [2])]),
        "output-declared-int": ([helper.make_node("Relu", ["x"], ["y"])], [f32("x", [2])]),
    }
    for name, (nodes, inputs) in sorted(cases.items()):
        out_type = TensorProto.INT64 if name == "output-declared-int" else TensorProto.FLOAT
        emit(name, "types", make(nodes, inputs, [typed("y", out_type, None)]))
    emit("cast-to-999", "types", make([helper.make_node("Cast", ["x"], ["y"], to=999)], [f32("x", [2])], [f32("y", [2])]))
    emit("sequence-input", "types", make([helper.make_node("Identity", ["s"], ["y"])],
                                         [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])],
                                         [helper.make_tensor_sequence_value_info("y", TensorProto.FLOAT, [2])]))


def absurd_attributes():
    x4 = [f32("x", [1, 2, 4, 4])]
    w = init("w", weights(2, 2, 3, 3))
    big = 2 ** 62
    cases = []
    for group in (0, -1, 3, big):
        cases.append((f"conv-group-{group}", [helper.make_node("Conv", ["x", "w"], ["y"], group=group)], x4, [w]))
        cases.append((f"convtranspose-group-{group}", [helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=group)], x4, [w]))
    for key, values in [("strides", [0, 0]), ("strides", [-1, 1]), ("strides", [big, 1]), ("dilations", [0, 1]),
                        ("dilations", [-2, 1]), ("dilations", [big, big]), ("pads", [-1, 0, 0, 0]),
                        ("pads", [big, 0, 0, 0]), ("pads", [1, 1]), ("kernel_shape", [0, 3]), ("kernel_shape", [-3, 3]),
                        ("kernel_shape", [3]), ("kernel_shape", [big, big]), ("strides", [1, 1, 1])]:
        tag = "_".join(str(v) for v in values)
        cases.append((f"conv-{key}-{tag}", [helper.make_node("Conv", ["x", "w"], ["y"], **{key: values})], x4, [w]))
        if key != "dilations" or values != [0, 1]:
            pool_attrs = {"kernel_shape": [2, 2]}
            pool_attrs[key] = values
            cases.append((f"maxpool-{key}-{tag}", [helper.make_node("MaxPool", ["x"], ["y"], **pool_attrs)], x4, []))
            avg_attrs = dict(pool_attrs)
            avg_attrs.pop("dilations", None)
            if key != "dilations":
                cases.append((f"averagepool-{key}-{tag}", [helper.make_node("AveragePool", ["x"], ["y"], **avg_attrs)], x4, []))
    for output_padding in ([5, 5], [-1, 0], [big, 0]):
        cases.append((f"convtranspose-output-padding-{output_padding[0]}",
                      [helper.make_node("ConvTranspose", ["x", "w"], ["y"], output_padding=output_padding, strides=[2, 2])], x4, [w]))
    cases.append(("convtranspose-output-shape-negative",
                  [helper.make_node("ConvTranspose", ["x", "w"], ["y"], output_shape=[-5, -5])], x4, [w]))
    cases.append(("conv-auto-pad-bogus", [helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SIDEWAYS")], x4, [w]))
    cases.append(("maxpool-storage-order-7", [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], storage_order=7)], x4, []))
    cases.append(("maxpool-no-kernel", [helper.make_node("MaxPool", ["x"], ["y"])], x4, []))
    x2 = [f32("x", [2, 3])]
    for axis in (2, -3, 2 ** 31, -(2 ** 63)):
        for op in ("Softmax", "LogSoftmax", "Hardmax", "Flatten", "ArgMax", "ArgMin"):
            cases.append((f"{op.lower()}-axis-{axis}", [helper.make_node(op, ["x"], ["y"], axis=axis)], x2, []))
        cases.append((f"concat-axis-{axis}", [helper.make_node("Concat", ["x", "x"], ["y"], axis=axis)], x2, []))
        cases.append((f"gather-axis-{axis}", [helper.make_node("Gather", ["x", "i"], ["y"], axis=axis)], x2, [init("i", np.array([0], np.int64))]))
        cases.append((f"split-axis-{axis}", [helper.make_node("Split", ["x"], ["y", "z"], axis=axis)], x2, []))
        cases.append((f"layernorm-axis-{axis}", [helper.make_node("LayerNormalization", ["x", "g"], ["y"], axis=axis)], x2, [init("g", np.ones(3, np.float32))]))
        cases.append((f"onehot-axis-{axis}", [helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=axis)], x2,
                      [init("i", np.array([0, 1], np.int64)), init("d", np.array(3, np.int64)), init("v", np.array([0, 1], np.float32))]))
    for perm in ([0, 0], [0, 2], [1], [-1, 0], [0, 1, 2]):
        cases.append((f"transpose-perm-{'_'.join(map(str, perm))}", [helper.make_node("Transpose", ["x"], ["y"], perm=perm)], x2, []))
    for eps in (float("nan"), float("-inf"), -1.0, 0.0):
        cases.append((f"batchnorm-epsilon-{eps}", [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=eps)],
                      [f32("x", [2, 3, 2])], [init(n, np.zeros(3, np.float32)) for n in "sbm"] + [init("v", np.zeros(3, np.float32))]))
        cases.append((f"layernorm-epsilon-{eps}", [helper.make_node("LayerNormalization", ["x", "g"], ["y"], epsilon=eps)], x2,
                      [init("g", np.ones(3, np.float32))]))
        cases.append((f"instancenorm-epsilon-{eps}", [helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=eps)],
                      [f32("x", [1, 3, 2])], [init("s", np.ones(3, np.float32)), init("b", np.zeros(3, np.float32))]))
    for split in ([1, 1], [4, -1], [0, 3], [2 ** 62, 2 ** 62]):
        cases.append((f"split-sizes-{split[0]}_{split[1]}", [helper.make_node("Split", ["x", "s"], ["y", "z"], axis=1)], x2,
                      [init("s", np.array(split, np.int64))]))
    for mode in ("bogus", ""):
        cases.append((f"pad-mode-{mode or 'empty'}", [helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)], x2,
                      [init("p", np.array([0, 1, 0, 1], np.int64))]))
    cases.append(("dropout-ratio-1.5", [helper.make_node("Dropout", ["x", "r"], ["y"])], x2, [init("r", np.array(1.5, np.float32))]))
    cases.append(("dropout-ratio-nan", [helper.make_node("Dropout", ["x", "r"], ["y"])], x2, [init("r", np.array(np.nan, np.float32))]))
    cases.append(("cumsum-exclusive-5", [helper.make_node("CumSum", ["x", "a"], ["y"], exclusive=5)], x2, [init("a", np.array(1, np.int64))]))
    cases.append(("cumsum-axis-9", [helper.make_node("CumSum", ["x", "a"], ["y"])], x2, [init("a", np.array(9, np.int64))]))
    cases.append(("topk-k-negative", [helper.make_node("TopK", ["x", "k"], ["y", "i"])], x2, [init("k", np.array([-1], np.int64))]))
    cases.append(("topk-k-huge", [helper.make_node("TopK", ["x", "k"], ["y", "i"])], x2, [init("k", np.array([2 ** 40], np.int64))]))
    cases.append(("topk-axis-5", [helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=5)], x2, [init("k", np.array([1], np.int64))]))
    cases.append(("reducesum-axes-9", [helper.make_node("ReduceSum", ["x", "a"], ["y"])], x2, [init("a", np.array([9], np.int64))]))
    cases.append(("reducesum-axes-duplicate", [helper.make_node("ReduceSum", ["x", "a"], ["y"])], x2, [init("a", np.array([1, 1], np.int64))]))
    cases.append(("reducemean-axes-attr-9", [helper.make_node("ReduceMean", ["x"], ["y"], axes=[9])], x2, []))
    cases.append(("argmax-select-last-5", [helper.make_node("ArgMax", ["x"], ["y"], select_last_index=5)], x2, []))
    cases.append(("squeeze-axis-0-not-one", [helper.make_node("Squeeze", ["x", "a"], ["y"])], x2, [init("a", np.array([0], np.int64))]))
    cases.append(("unsqueeze-axis-9", [helper.make_node("Unsqueeze", ["x", "a"], ["y"])], x2, [init("a", np.array([9], np.int64))]))
    cases.append(("unsqueeze-axis-duplicate", [helper.make_node("Unsqueeze", ["x", "a"], ["y"])], x2, [init("a", np.array([0, 0], np.int64))]))
    cases.append(("reshape-two-minus-one", [helper.make_node("Reshape", ["x", "s"], ["y"])], x2, [init("s", np.array([-1, -1], np.int64))]))
    cases.append(("reshape-wrong-count", [helper.make_node("Reshape", ["x", "s"], ["y"])], x2, [init("s", np.array([7], np.int64))]))
    cases.append(("reshape-negative", [helper.make_node("Reshape", ["x", "s"], ["y"])], x2, [init("s", np.array([-6], np.int64))]))
    cases.append(("slice-step-0", [helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])], x2,
                  [init("s", np.array([0], np.int64)), init("e", np.array([2], np.int64)), init("a", np.array([1], np.int64)),
                   init("t", np.array([0], np.int64))]))
    cases.append(("slice-axis-duplicate", [helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])], x2,
                  [init("s", np.array([0, 0], np.int64)), init("e", np.array([1, 1], np.int64)), init("a", np.array([1, 1], np.int64))]))
    cases.append(("range-delta-0-int", [helper.make_node("Range", ["a", "b", "d"], ["y"])], [],
                  [init("a", np.array(0, np.int64)), init("b", np.array(10, np.int64)), init("d", np.array(0, np.int64))]))
    cases.append(("range-delta-0-float", [helper.make_node("Range", ["a", "b", "d"], ["y"])], [],
                  [init("a", np.array(0, np.float32)), init("b", np.array(10, np.float32)), init("d", np.array(0, np.float32))]))
    cases.append(("range-nan", [helper.make_node("Range", ["a", "b", "d"], ["y"])], [],
                  [init("a", np.array(0, np.float32)), init("b", np.array(np.nan, np.float32)), init("d", np.array(1, np.float32))]))
    cases.append(("div-int-by-zero", [helper.make_node("Div", ["a", "b"], ["y"])], [],
                  [init("a", np.array([7, 8], np.int64)), init("b", np.array([0, 0], np.int64))]))
    cases.append(("div-int-min-by-minus-one", [helper.make_node("Div", ["a", "b"], ["y"])], [],
                  [init("a", np.array([-(2 ** 63)], np.int64)), init("b", np.array([-1], np.int64))]))
    cases.append(("div-int32-by-zero", [helper.make_node("Div", ["a", "b"], ["y"])], [],
                  [init("a", np.array([7], np.int32)), init("b", np.array([0], np.int32))]))
    cases.append(("onehot-depth-0", [helper.make_node("OneHot", ["i", "d", "v"], ["y"])], [],
                  [init("i", np.array([0, 1], np.int64)), init("d", np.array(0, np.int64)), init("v", np.array([0, 1], np.float32))]))
    cases.append(("onehot-depth-negative", [helper.make_node("OneHot", ["i", "d", "v"], ["y"])], [],
                  [init("i", np.array([0, 1], np.int64)), init("d", np.array(-4, np.int64)), init("v", np.array([0, 1], np.float32))]))
    cases.append(("tile-repeats-negative", [helper.make_node("Tile", ["x", "r"], ["y"])], x2, [init("r", np.array([-1, 2], np.int64))]))
    cases.append(("expand-incompatible", [helper.make_node("Expand", ["x", "s"], ["y"])], x2, [init("s", np.array([5, 7], np.int64))]))
    cases.append(("gather-index-out-of-range", [helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], x2, [init("i", np.array([7], np.int64))]))
    cases.append(("gathernd-batch-dims-9", [helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=9)], x2, [init("i", np.array([[0]], np.int64))]))
    cases.append(("scatternd-index-out-of-range", [helper.make_node("ScatterND", ["x", "i", "u"], ["y"])], x2,
                  [init("i", np.array([[5]], np.int64)), init("u", np.ones((1, 3), np.float32))]))
    cases.append(("trilu-k-huge", [helper.make_node("Trilu", ["x", "k"], ["y"], upper=3)], x2, [init("k", np.array(2 ** 62, np.int64))]))
    cases.append(("clip-min-above-max-nan", [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], x2,
                  [init("lo", np.array(np.nan, np.float32)), init("hi", np.array(-np.inf, np.float32))]))
    cases.append(("constant-two-values", [helper.make_node("Constant", [], ["y"], value_float=1.0, value_int=2)], [], []))
    cases.append(("constant-no-value", [helper.make_node("Constant", [], ["y"])], [], []))
    cases.append(("gemm-transa-5", [helper.make_node("Gemm", ["x", "x"], ["y"], transA=5)], x2, []))
    cases.append(("leakyrelu-alpha-string", [helper.make_node("LeakyRelu", ["x"], ["y"], alpha="big")], x2, []))
    cases.append(("sce-reduction-bogus", [helper.make_node("SoftmaxCrossEntropyLoss", ["x", "l"], ["y"], reduction="most")],
                  x2, [init("l", np.array([0, 1], np.int64))]))
    cases.append(("nll-ignore-index-huge", [helper.make_node("NegativeLogLikelihoodLoss", ["x", "l"], ["y"], ignore_index=2 ** 62)],
                  x2, [init("l", np.array([7, 9], np.int64))]))
    cases.append(("sce-label-out-of-range", [helper.make_node("SoftmaxCrossEntropyLoss", ["x", "l"], ["y"])],
                  x2, [init("l", np.array([7, -9], np.int64))]))
    for name, nodes, inputs, initializers in cases:
        emit(name, "attributes", make(nodes, inputs, [f32("y", None)], initializers))


def dims():
    def raw(name, dims_, data_type=TensorProto.FLOAT, data=b""):
        t = TensorProto()
        t.name = name
        t.data_type = data_type
        t.dims.extend(dims_)
        t.raw_data = data
        return t
    add = [helper.make_node("Add", ["x", "w"], ["y"])]
    emit("initializer-dim-negative", "dims", make(add, [f32("x", [2])], [f32("y", [2])], [raw("w", [-2], data=b"\0" * 8)]))
    emit("initializer-dims-overflow", "dims", make(add, [f32("x", [2])], [f32("y", [2])], [raw("w", [2 ** 40, 2 ** 40])]))
    emit("initializer-dims-int64-wrap", "dims", make(add, [f32("x", [2])], [f32("y", [2])], [raw("w", [2 ** 62, 4])]))
    emit("initializer-raw-short", "dims", make(add, [f32("x", [2])], [f32("y", [2])], [raw("w", [2], data=b"\0" * 7)]))
    emit("initializer-raw-long", "dims", make(add, [f32("x", [2])], [f32("y", [2])], [raw("w", [2], data=b"\0" * 9)]))
    short = TensorProto()
    short.name = "w"
    short.data_type = TensorProto.FLOAT
    short.dims.append(3)
    short.float_data.append(1.0)
    emit("initializer-float-data-short", "dims", make(add, [f32("x", [2])], [f32("y", [2])], [short]))
    emit("initializer-bad-data-type", "dims", make(add, [f32("x", [2])], [f32("y", [2])], [raw("w", [2], data_type=77, data=b"\0" * 8)]))
    emit("initializer-data-type-0", "dims", make(add, [f32("x", [2])], [f32("y", [2])], [raw("w", [2], data_type=0, data=b"\0" * 8)]))
    emit("input-dim-negative", "dims", make([helper.make_node("Relu", ["x"], ["y"])], [f32("x", [-5])], [f32("y", [-5])]))
    emit("input-dim-huge", "dims", make([helper.make_node("Relu", ["x"], ["y"])], [f32("x", [2 ** 62])], [f32("y", [2 ** 62])]))
    emit("value-info-dim-negative", "dims", _with_value_info(make([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Relu", ["r"], ["y"])],
                                                                  [f32("x", [2])], [f32("y", [2])]), "r", [-3]))
    emit("value-info-contradicts", "dims", _with_value_info(make([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Relu", ["r"], ["y"])],
                                                                 [f32("x", [2])], [f32("y", [2])]), "r", [7]))
    emit("output-shape-contradicts", "dims", make([helper.make_node("Relu", ["x"], ["y"])], [f32("x", [2])], [f32("y", [3])]))
    emit("constant-attr-dims-overflow", "dims",
         make([helper.make_node("Constant", [], ["y"], value=raw("v", [2 ** 33, 2 ** 33]))], [], [f32("y", None)]))
    emit("sparse-initializer", "dims", _sparse_model())


def _with_value_info(model, name, shape):
    model.graph.value_info.append(f32(name, shape))
    return model


def _sparse_model():
    values = numpy_helper.from_array(np.array([1.0], np.float32), "w")
    indices = numpy_helper.from_array(np.array([5], np.int64), "")
    sparse = helper.make_sparse_tensor(values, indices, [2])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "sparse", [f32("x", [2])], [f32("y", [2])],
                              sparse_initializer=[sparse])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def nesting():
    def if_chain(depth):
        inner = helper.make_graph([helper.make_node("Identity", ["x"], ["o0"])], "leaf", [], [f32("o0", [2])])
        for level in range(depth):
            leaf = helper.make_graph([helper.make_node("Identity", ["x"], [f"o{level + 1}"])], "leaf", [],
                                     [f32(f"o{level + 1}", [2])])
            node = helper.make_node("If", ["c"], [f"o{level + 1}"], then_branch=inner, else_branch=leaf)
            inner = helper.make_graph([node], f"g{level}", [], [f32(f"o{level + 1}", [2])])
        return make(list(inner.node), [f32("x", [2]), typed("c", TensorProto.BOOL, [])], [f32(f"o{depth}", [2])])
    for depth in (1, 3, 9, 20, 40):
        emit(f"if-depth-{depth}", "nesting", if_chain(depth))
    # Protobuf nesting past its recursion limit: an attribute graph inside an attribute graph, 200 deep, by hand.
    graph = helper.make_graph([], "leaf", [], [])
    for level in range(200):
        graph = helper.make_graph([helper.make_node("If", ["c"], ["o"], then_branch=graph)], f"g{level}", [], [])
    emit("protobuf-depth-200", "nesting", make(list(graph.node), [typed("c", TensorProto.BOOL, [])], [f32("o", None)]))
    emit("loop-body-unsupported", "nesting",
         make([helper.make_node("Loop", ["n", "c"], ["y"], body=helper.make_graph(
             [helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
             [typed("i", TensorProto.INT64, []), typed("cond_in", TensorProto.BOOL, [])],
             [typed("cond_out", TensorProto.BOOL, [])]))],
              [typed("n", TensorProto.INT64, []), typed("c", TensorProto.BOOL, [])], [f32("y", None)]))
    # A function that calls itself.
    function = helper.make_function("local", "Recurse", ["a"], ["b"], [helper.make_node("Recurse", ["a"], ["b"], domain="local")],
                                    [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    model = make([helper.make_node("Recurse", ["x"], ["y"], domain="local")], [f32("x", [2])], [f32("y", [2])],
                 opsets=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    model.functions.append(function)
    emit("recursive-function", "nesting", model)


def opsets():
    relu = ([helper.make_node("Relu", ["x"], ["y"])], [f32("x", [2])], [f32("y", [2])])
    for version in (0, 18, 19, 10000, -1, 2 ** 40):
        emit(f"ai.onnx-{version}", "opset", make(*relu, opsets=[helper.make_opsetid("", version)]))
    emit("no-opset-import", "opset", make(*relu, opsets=[]))
    emit("onnx-ml-99", "opset", make(*relu, opsets=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 99)]))
    emit("unknown-domain", "opset", make([helper.make_node("Relu", ["x"], ["y"], domain="com.evil")], [f32("x", [2])], [f32("y", [2])],
                                         opsets=[helper.make_opsetid("", 17), helper.make_opsetid("com.evil", 1)]))
    emit("domain-not-imported", "opset", make([helper.make_node("Relu", ["x"], ["y"], domain="com.evil")], [f32("x", [2])], [f32("y", [2])]))
    emit("preview-training-2", "opset", make(*relu, opsets=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.preview.training", 2)]))
    emit("traind-training-99", "opset", make(*relu, opsets=[helper.make_opsetid("", 17), helper.make_opsetid("ai.traind.training", 99)]))
    emit("opset-imported-twice", "opset", make(*relu, opsets=[helper.make_opsetid("", 17), helper.make_opsetid("", 9)]))
    emit("op-newer-than-opset", "opset", make([helper.make_node("LayerNormalization", ["x", "g"], ["y"])], [f32("x", [2])],
                                              [f32("y", [2])], [init("g", np.ones(2, np.float32))], opset=13))
    emit("unknown-op", "opset", make([helper.make_node("FancyOp", ["x"], ["y"])], [f32("x", [2])], [f32("y", [2])]))
    emit("unsupported-op", "opset", make([helper.make_node("Resize", ["x", "", "s"], ["y"])], [f32("x", [1, 1, 2, 2])],
                                         [f32("y", None)], [init("s", np.array([1, 1, 2, 2], np.float32))]))
    for ir in (0, 2, 99):
        emit(f"ir-version-{ir}", "opset", make(*relu, ir=ir))


def misc():
    emit("no-graph", "misc", helper.make_model(helper.make_graph([], "g", [], []), opset_imports=[helper.make_opsetid("", 17)])
         .SerializeToString()[:0] + b"\x08\x08\x42\x02\x10\x11")  # ir_version 8, opset 17, no graph
    emit("empty-graph", "misc", make([], [], []))
    emit("only-inputs", "misc", make([], [f32("x", [2])], []))
    emit("not-a-model", "misc", b"this is not an ONNX model at all\n" * 4)
    emit("json", "misc", b'{"graph": {"node": []}}')
    emit("zeros", "misc", b"\0" * 64)
    emit("ones", "misc", b"\xff" * 64)
    emit("huge-length-prefix", "misc", b"\x3a\xff\xff\xff\xff\x0f")
    emit("group-wire-type", "misc", b"\x3b\x08\x01\x3c")
    emit("string-initializer", "misc", make([helper.make_node("Identity", ["s"], ["y"])], [], [typed("y", TensorProto.STRING, [1])],
                                            [helper.make_tensor("s", TensorProto.STRING, [1], [b"hello"])]))
    emit("complex-input", "misc", make([helper.make_node("Identity", ["x"], ["y"])], [typed("x", TensorProto.COMPLEX64, [2])],
                                       [typed("y", TensorProto.COMPLEX64, [2])]))
    emit("output-is-input", "misc", make([], [f32("x", [2])], [f32("x", [2])]))
    emit("attribute-type-mismatch", "misc", make([helper.make_node("Softmax", ["x"], ["y"], axis=1.5)], [f32("x", [2, 2])], [f32("y", [2, 2])]))
    emit("node-name-nul", "misc", make([helper.make_node("Relu", ["x"], ["y"], name="a\0b")], [f32("x", [2])], [f32("y", [1, 2, 3])]))
    no_loss = make([helper.make_node("Shape", ["x"], ["y"])], [f32("x", [2])], [typed("y", TensorProto.INT64, [1])])
    emit("nothing-to-train", "misc", no_loss)
    emit("no-float-output", "misc", make([helper.make_node("ArgMax", ["x"], ["y"])], [f32("x", [2, 3])],
                                         [typed("y", TensorProto.INT64, [1, 3])]))


def external_data():
    """External data: each case is a directory with model.onnx and what its tensor points at."""
    def model_with(location, offset=None, length=None, dims=(4,)):
        tensor = TensorProto()
        tensor.name = "w"
        tensor.data_type = TensorProto.FLOAT
        tensor.dims.extend(dims)
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", offset), ("length", length)):
            if value is not None:
                entry = tensor.external_data.add()
                entry.key = key
                entry.value = str(value)
        return make([helper.make_node("Add", ["x", "w"], ["y"])], [f32("x", list(dims))], [f32("y", list(dims))], [tensor])

    def case(name, model, setup):
        directory = os.path.join(OUT, f"external-{name}")
        os.makedirs(directory, exist_ok=True)
        setup(directory)
        with open(os.path.join(directory, "model.onnx"), "wb") as out:
            out.write(model.SerializeToString())
        CASES.append((f"external-{name}/model.onnx", "external", "refused"))

    def data_file(path, size=16):
        with open(path, "wb") as out:
            out.write(b"\0" * size)

    nothing = lambda d: None
    case("dotdot", model_with("../outside.bin"), lambda d: data_file(os.path.join(os.path.dirname(d), "outside.bin")))
    case("dotdot-deep", model_with("sub/../../outside.bin"), lambda d: os.makedirs(os.path.join(d, "sub"), exist_ok=True))
    case("absolute", model_with("/etc/passwd"), nothing)
    case("absolute-dev-zero", model_with("/dev/zero"), nothing)
    case("symlink-to-outside", model_with("link.bin"), lambda d: os.symlink("/etc/hostname", os.path.join(d, "link.bin")))
    case("symlink-to-dev-zero", model_with("zero.bin"), lambda d: os.symlink("/dev/zero", os.path.join(d, "zero.bin")))
    case("symlink-to-dev-urandom", model_with("random.bin", length=16),
         lambda d: os.symlink("/dev/urandom", os.path.join(d, "random.bin")))

    def symlinked_dir(d):
        os.makedirs(os.path.join(d, "real"), exist_ok=True)
        data_file(os.path.join(d, "real", "w.bin"))
        os.symlink("real", os.path.join(d, "dir"))
    case("symlinked-directory", model_with("dir/w.bin"), symlinked_dir)
    case("fifo", model_with("pipe.bin"), lambda d: os.mkfifo(os.path.join(d, "pipe.bin")))
    case("fifo-with-length", model_with("pipe.bin", offset=0, length=16), lambda d: os.mkfifo(os.path.join(d, "pipe.bin")))
    case("directory", model_with("adir"), lambda d: os.makedirs(os.path.join(d, "adir"), exist_ok=True))
    case("missing", model_with("nowhere.bin"), nothing)
    case("offset-beyond", model_with("w.bin", offset=1000), lambda d: data_file(os.path.join(d, "w.bin")))
    case("length-beyond", model_with("w.bin", offset=8, length=16), lambda d: data_file(os.path.join(d, "w.bin")))
    case("length-mismatch", model_with("w.bin", length=12), lambda d: data_file(os.path.join(d, "w.bin")))
    case("offset-negative", model_with("w.bin", offset=-4), lambda d: data_file(os.path.join(d, "w.bin")))
    case("offset-not-a-number", model_with("w.bin", offset="1e3"), lambda d: data_file(os.path.join(d, "w.bin")))
    case("length-huge", model_with("w.bin", length=2 ** 62), lambda d: data_file(os.path.join(d, "w.bin")))
    case("nul-in-location", model_with("w.bin\0../../etc/passwd"), lambda d: data_file(os.path.join(d, "w.bin")))
    case("empty-location", model_with(""), nothing)
    case("dot-only", model_with("./"), nothing)
    case("dims-need-more", model_with("w.bin", dims=(2 ** 20,)), lambda d: data_file(os.path.join(d, "w.bin")))
    case("socket-path", model_with("sock"), lambda d: _make_socket(os.path.join(d, "sock")))


def _make_socket(path):
    import socket
    here = os.getcwd()
    os.chdir(os.path.dirname(path))  # socket paths are limited to ~100 bytes: bind a relative one
    try:
        s = socket.socket(socket.AF_UNIX)
        s.bind(os.path.basename(path))
        s.close()
    finally:
        os.chdir(here)


def bombs():
    """Resource bombs: tiny models whose values are huge; refused before allocation with RESOURCE_EXHAUSTED."""
    def cos(name, shape, note=""):
        emit(name, "bomb", make([helper.make_node("ConstantOfShape", ["s"], ["z"],
                                                  value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
                                 helper.make_node("ReduceSum", ["z"], ["r"], keepdims=0),
                                 helper.make_node("Add", ["x", "r"], ["y"])],
                                [f32("x", [2])], [f32("y", [2])], [init("s", np.array(shape, np.int64))]), "resource")
    cos("constantofshape-8GiB", [2 ** 31])
    cos("constantofshape-just-under-element-limit", [2 ** 20, 2 ** 20 - 1])
    cos("constantofshape-overflow", [2 ** 40, 2 ** 40])
    # The shape computed from data, out of shape inference's sight.
    emit("constantofshape-from-input-shape", "bomb", make(
        [helper.make_node("Size", ["x"], ["n"]),
         helper.make_node("Mul", ["n", "big"], ["m"]),
         helper.make_node("Unsqueeze", ["m", "zero"], ["shape"]),
         helper.make_node("ConstantOfShape", ["shape"], ["z"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
         helper.make_node("ReduceSum", ["z"], ["r"], keepdims=0), helper.make_node("Add", ["x", "r"], ["y"])],
        [f32("x", [2])], [f32("y", [2])], [init("big", np.array(2 ** 33, np.int64)), init("zero", np.array([0], np.int64))]),
        "resource")
    emit("expand-huge", "bomb", make([helper.make_node("Expand", ["x", "s"], ["e"]), helper.make_node("ReduceSum", ["e"], ["y"], keepdims=0)],
                                     [f32("x", [1, 2])], [f32("y", [])], [init("s", np.array([2 ** 20, 2 ** 20, 2], np.int64))]),
         "resource")
    emit("tile-huge", "bomb", make([helper.make_node("Tile", ["x", "r"], ["t"]), helper.make_node("ReduceSum", ["t"], ["y"], keepdims=0)],
                                   [f32("x", [1, 2])], [f32("y", [])], [init("r", np.array([2 ** 30, 2 ** 10], np.int64))]),
         "resource")
    emit("reshape-from-expand", "bomb", make([helper.make_node("Expand", ["x", "s"], ["e"]), helper.make_node("Reshape", ["e", "m"], ["r"]),
                                              helper.make_node("ReduceMax", ["r"], ["y"], keepdims=0)],
                                             [f32("x", [1])], [f32("y", [])],
                                             [init("s", np.array([2 ** 17, 2 ** 17], np.int64)), init("m", np.array([-1], np.int64))]),
         "resource")
    emit("range-huge", "bomb", make([helper.make_node("Range", ["a", "b", "d"], ["r"]), helper.make_node("Cast", ["r"], ["c"], to=TensorProto.FLOAT),
                                     helper.make_node("ReduceSum", ["c"], ["s"], keepdims=0), helper.make_node("Add", ["x", "s"], ["y"])],
                                    [f32("x", [2])], [f32("y", [2])],
                                    [init("a", np.array(0, np.int64)), init("b", np.array(2 ** 40, np.int64)), init("d", np.array(1, np.int64))]),
         "resource")
    # Constants, not initializers: float initializers would be trainable parameters that the loss does not depend on.
    def const(name, value):
        return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, TensorProto.FLOAT, [], [value]))
    emit("range-float-tiny-delta", "bomb", make([const("a", 0.0), const("b", 1.0), const("d", 1e-12),
                                                 helper.make_node("Range", ["a", "b", "d"], ["r"]),
                                                 helper.make_node("ReduceSum", ["r"], ["s"], keepdims=0), helper.make_node("Add", ["x", "s"], ["y"])],
                                                [f32("x", [2])], [f32("y", [2])]), "resource")
    emit("pad-huge", "bomb", make([helper.make_node("Pad", ["x", "p"], ["q"]), helper.make_node("ReduceSum", ["q"], ["y"], keepdims=0)],
                                  [f32("x", [2, 2])], [f32("y", [])], [init("p", np.array([0, 0, 2 ** 20, 2 ** 20], np.int64))]),
         "resource")
    emit("huge-batch-input", "bomb", make([helper.make_node("Gemm", ["x", "w"], ["y"])], [f32("x", [2 ** 28, 64])], [f32("y", [2 ** 28, 2])],
                                          [init("w", weights(64, 2))]), "resource")
    # Doubling: 40 Concats of a value with itself; every intermediate shape known.
    nodes = [helper.make_node("Concat", [f"v{i}", f"v{i}"], [f"v{i + 1}"], axis=0) for i in range(40)]
    nodes[0].input[:] = ["x", "x"]
    nodes.append(helper.make_node("ReduceSum", ["v40"], ["y"], keepdims=0))
    emit("concat-doubling", "bomb", make(nodes, [f32("x", [4])], [f32("y", [])]), "resource")
    # Peak of a plan: 64 values of 16 MiB each alive at once (1 GiB), each small alone.
    nodes = [helper.make_node("Add", ["x", f"c{i}"], [f"a{i}"]) for i in range(64)]
    nodes += [helper.make_node("Sum", [f"a{i}" for i in range(64)], ["y"])]
    initializers = [init(f"c{i}", np.array([float(i)], np.float32)) for i in range(64)]
    emit("plan-peak", "bomb", make(nodes, [f32("x", [2 ** 22])], [f32("y", [2 ** 22])], initializers), "resource")
    # Millions of nodes (well under the 64 MiB message limit).
    graph = onnx.GraphProto()
    graph.name = "g"
    graph.input.append(f32("x", [1]))
    graph.output.append(f32("n0", [1]))
    node = onnx.NodeProto()
    node.op_type = "Relu"
    node.input.append("x")
    node.output.append("n0")
    one = node.SerializeToString()
    model = make([], [], [])
    model.graph.CopyFrom(graph)
    prefix = model.SerializeToString()
    # Append 1.2 million copies of a node (field 1 of GraphProto, inside ModelProto field 7) by hand.
    node_field = b"\x0a" + _varint(len(one)) + one
    graph_bytes = graph.SerializeToString() + node_field * 1_200_000
    data = b"".join(f for f in [_field(1, _varint(8)), _opset_field(), b"\x3a" + _varint(len(graph_bytes)) + graph_bytes])
    del prefix
    emit("million-nodes", "bomb", data, "resource")
    # Decoding bomb: one node with millions of empty input names (decoded, each is a std::string).
    node = onnx.NodeProto()
    node.op_type = "Sum"
    node.output.append("y")
    node_bytes = node.SerializeToString() + b"\x0a\x00" * 8_000_000
    graph_bytes = b"\x0a" + _varint(len(node_bytes)) + node_bytes
    data = _field(1, _varint(8)) + _opset_field() + b"\x3a" + _varint(len(graph_bytes)) + graph_bytes
    emit("empty-strings", "bomb", data, "resource")


def _varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number, payload_varint):
    return _varint(number << 3) + payload_varint


def _opset_field():
    opset = helper.make_opsetid("", 17).SerializeToString()
    return b"\x42" + _varint(len(opset)) + opset


def main():
    global OUT
    if len(sys.argv) != 2:
        sys.exit("usage: make_hostile_models.py OUT_DIR")
    OUT = sys.argv[1]
    os.makedirs(OUT, exist_ok=True)
    truncations()
    bit_flips()
    cycles()
    dangling_and_duplicates()
    wrong_arities()
    type_mismatches()
    absurd_attributes()
    dims()
    nesting()
    opsets()
    misc()
    external_data()
    bombs()
    with open(os.path.join(OUT, "manifest.tsv"), "w") as manifest:
        for path, category, expect in CASES:
            manifest.write(f"{path}\t{category}\t{expect}\n")
    counts = {}
    for _, category, _ in CASES:
        counts[category] = counts.get(category, 0) + 1
    print(f"{len(CASES)} cases: " + ", ".join(f"{c} {n}" for c, n in sorted(counts.items())), file=sys.stderr)


if __name__ == "__main__":
    main()
