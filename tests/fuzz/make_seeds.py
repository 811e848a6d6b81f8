#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/), deterministically; committed, never
edited by hand. Run from anywhere: /usr/bin/python3 tests/fuzz/make_seeds.py

Seeds are small valid inputs that reach deep: models using most op families, trainable models, ONNX loss graphs,
checkpoints (written with the Python client's byte-identical writer), .npy / .npz files and TrainStepRequests.
Inputs that once crashed a target are added to its corpus by hand (never regenerated away): they live in
corpus/<target>/crash-*.
"""
import importlib.util
import io
import os
import shutil
import struct
import sys
import zipfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def load_checkpoint_module():
    path = os.path.join(ROOT, "client", "python", "traind_client", "_checkpoint.py")
    spec = importlib.util.spec_from_file_location("traind_checkpoint", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["traind_checkpoint"] = module
    spec.loader.exec_module(module)
    return module


def tensor(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def model(nodes, inputs, outputs, initializers=(), opset=17, extra_opsets=()):
    graph = helper.make_graph(nodes, "seed", inputs, outputs, list(initializers))
    imports = [helper.make_opsetid("", opset)] + list(extra_opsets)
    m = helper.make_model(graph, opset_imports=imports, producer_name="traind-fuzz-seeds")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m.SerializeToString()


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def i64(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.INT64, shape)


rng = np.random.default_rng(12)


def weights(*shape):
    return (rng.standard_normal(shape) * 0.3).astype(np.float32)


def mlp():
    return model([helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
                  helper.make_node("Relu", ["h"], ["r"]),
                  helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1)],
                 [f32("x", [4, 6])], [f32("y", [4, 3])],
                 [tensor("w1", weights(5, 6)), tensor("b1", weights(5)), tensor("w2", weights(3, 5)),
                  tensor("b2", weights(3))])


def cnn():
    return model([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1]),
                  helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"]),
                  helper.make_node("Relu", ["n"], ["r"]),
                  helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                  helper.make_node("Flatten", ["p"], ["f"]),
                  helper.make_node("MatMul", ["f", "w2"], ["y"])],
                 [f32("x", [2, 1, 4, 4])], [f32("y", [2, 2])],
                 [tensor("w", weights(3, 1, 3, 3)), tensor("b", weights(3)), tensor("s", np.ones(3, np.float32)),
                  tensor("bb", np.zeros(3, np.float32)), tensor("m", np.zeros(3, np.float32)),
                  tensor("v", np.ones(3, np.float32)), tensor("w2", weights(12, 2))])


def attention():
    return model([helper.make_node("MatMul", ["x", "wq"], ["q"]),
                  helper.make_node("MatMul", ["x", "wk"], ["k"]),
                  helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
                  helper.make_node("MatMul", ["q", "kt"], ["scores"]),
                  helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
                  helper.make_node("MatMul", ["p", "x"], ["a"]),
                  helper.make_node("LayerNormalization", ["a", "g", "beta"], ["ln"], axis=-1),
                  helper.make_node("Erf", ["ln"], ["e"]),
                  helper.make_node("Add", ["e", "ln"], ["y"])],
                 [f32("x", [2, 3, 4])], [f32("y", [2, 3, 4])],
                 [tensor("wq", weights(4, 4)), tensor("wk", weights(4, 4)), tensor("g", np.ones(4, np.float32)),
                  tensor("beta", np.zeros(4, np.float32))])


def gelu_qkv():
    """q, k, v = t[0], t[1], t[2] (one-slice Gathers whose gradients are concatenated) and exact GELU as PyTorch
    exports it, its constants in Constant nodes (one fused GeluGrad): the two patterns the gradient builder
    rewrites. Its own generator, so that adding it left the other seeds' bytes alone."""
    constants = [helper.make_node("Constant", [], [n], value=tensor(n, v))
                 for n, v in (("half", np.float32(0.5)), ("one", np.float32(1.0)), ("sqrt2", np.float32(np.sqrt(2))),
                              ("i0", np.int64(0)), ("i1", np.int64(1)), ("i2", np.int64(2)))]
    w = (np.random.default_rng(5).standard_normal((4, 12)) * 0.3).astype(np.float32)
    return model(constants + [helper.make_node("MatMul", ["x", "w"], ["h"]),
                              helper.make_node("Reshape", ["h", "shape"], ["r"]),
                              helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0, 2]),
                              helper.make_node("Gather", ["t", "i0"], ["q"]),
                              helper.make_node("Gather", ["t", "i1"], ["k"]),
                              helper.make_node("Gather", ["t", "i2"], ["v"]),
                              helper.make_node("Mul", ["q", "k"], ["qk"]),
                              helper.make_node("Add", ["qk", "v"], ["s"]),
                              helper.make_node("Div", ["s", "sqrt2"], ["d"]),
                              helper.make_node("Erf", ["d"], ["e"]),
                              helper.make_node("Add", ["e", "one"], ["p"]),
                              helper.make_node("Mul", ["s", "p"], ["m"]),
                              helper.make_node("Mul", ["m", "half"], ["y"])],
                 [f32("x", [2, 4])], [f32("y", [2, 4])],
                 [tensor("w", w), tensor("shape", np.array([2, 3, 4], np.int64))])


def multihead():
    """Multi-head self-attention written by hand: a packed q/k/v projection reshaped to [N, L, 3, H, D] and permuted,
    one-slice Gathers, q k^T scaled, Softmax, times v, heads transposed back: what attention fusion and its layout
    folding rewrite (engine/runtime/attention_fusion.h), and what the gradient builder fuses. Its own generator."""
    gen = np.random.default_rng(11)
    w = (gen.standard_normal((8, 24)) * 0.3).astype(np.float32)
    constants = [helper.make_node("Constant", [], [n], value=tensor(n, v))
                 for n, v in (("scale", np.float32(0.5)), ("i0", np.int64(0)), ("i1", np.int64(1)),
                              ("i2", np.int64(2)))]
    return model(constants + [helper.make_node("MatMul", ["x", "w"], ["h"]),
                              helper.make_node("Reshape", ["h", "split"], ["r"]),
                              helper.make_node("Transpose", ["r"], ["t"], perm=[2, 0, 3, 1, 4]),
                              helper.make_node("Gather", ["t", "i0"], ["q"]),
                              helper.make_node("Gather", ["t", "i1"], ["k"]),
                              helper.make_node("Gather", ["t", "i2"], ["v"]),
                              helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
                              helper.make_node("MatMul", ["q", "kt"], ["s"]),
                              helper.make_node("Mul", ["s", "scale"], ["ss"]),
                              helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
                              helper.make_node("MatMul", ["p", "v"], ["o"]),
                              helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
                              helper.make_node("Reshape", ["ot", "merge"], ["y"])],
                 [f32("x", [2, 3, 8])], [f32("y", [2, 3, 8])],
                 [tensor("w", w), tensor("split", np.array([2, 3, 3, 2, 4], np.int64)),
                  tensor("merge", np.array([2, 3, 8], np.int64))])


def linear_transposed(weight_is_input):
    """PyTorch's Linear, MatMul(x, Transpose(W)), then a FusedMatMul (traind's domain) reading its right operand
    transposed: what transpose folding rewrites (W not a constant: a graph input here, a trainable parameter once
    GenerateArtifacts has made the training graph) and the op the batched MatMul gradient emits. Its own generator."""
    gen = np.random.default_rng(7)
    w = (gen.standard_normal((5, 4)) * 0.3).astype(np.float32)
    w2 = (gen.standard_normal((6, 5)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["h"]),
             helper.make_node("FusedMatMul", ["h", "w2"], ["y"], domain="ai.traind.training", transB=1)]
    inputs = [f32("x", [2, 3, 4])] + ([f32("w", [5, 4])] if weight_is_input else [])
    initializers = [tensor("w2", w2)] + ([] if weight_is_input else [tensor("w", w)])
    return model(nodes, inputs, [f32("y", [2, 3, 6])], initializers,
                 extra_opsets=[helper.make_opsetid("ai.traind.training", 1)])


def shapes():
    # Shape arithmetic the runtime does from data: the resource-bomb ops at harmless sizes.
    return model([helper.make_node("Shape", ["x"], ["s"]),
                  helper.make_node("ConstantOfShape", ["s"], ["z"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5])),
                  helper.make_node("Expand", ["x", "e"], ["ex"]),
                  helper.make_node("Tile", ["x", "t"], ["ti"]),
                  helper.make_node("Range", ["r0", "r1", "r2"], ["rg"]),
                  helper.make_node("Cast", ["rg"], ["rf"], to=TensorProto.FLOAT),
                  helper.make_node("Reshape", ["ti", "rs"], ["re"]),
                  helper.make_node("Pad", ["x", "pads"], ["pd"], mode="reflect"),
                  helper.make_node("Slice", ["pd", "st", "en", "ax", "sp"], ["sl"]),
                  helper.make_node("ReduceSum", ["ex"], ["a"], keepdims=0),
                  helper.make_node("ReduceSum", ["re"], ["b"], keepdims=0),
                  helper.make_node("ReduceSum", ["rf"], ["c"], keepdims=0),
                  helper.make_node("ReduceMean", ["sl"], ["d"], keepdims=0),
                  helper.make_node("ReduceMax", ["z"], ["zz"], keepdims=0),
                  helper.make_node("Sum", ["a", "b", "c", "d", "zz"], ["y"])],
                 [f32("x", [2, 3])], [f32("y", [])],
                 [tensor("e", np.array([4, 2, 3], np.int64)), tensor("t", np.array([2, 2], np.int64)),
                  tensor("r0", np.array(0, np.int64)), tensor("r1", np.array(5, np.int64)),
                  tensor("r2", np.array(1, np.int64)), tensor("rs", np.array([3, -1], np.int64)),
                  tensor("pads", np.array([1, 1, 1, 1], np.int64)), tensor("st", np.array([0], np.int64)),
                  tensor("en", np.array([3], np.int64)), tensor("ax", np.array([1], np.int64)),
                  tensor("sp", np.array([2], np.int64))])


def indexing():
    return model([helper.make_node("Gather", ["x", "i"], ["g"], axis=1),
                  helper.make_node("GatherElements", ["x", "ie"], ["ge"], axis=0),
                  helper.make_node("OneHot", ["i", "depth", "values"], ["oh"], axis=-1),
                  helper.make_node("TopK", ["x", "k"], ["tv", "ti"], axis=1),
                  helper.make_node("CumSum", ["x", "axis"], ["cs"]),
                  helper.make_node("Concat", ["g", "ge"], ["cc"], axis=1),
                  helper.make_node("ReduceSum", ["cc"], ["s1"], keepdims=0),
                  helper.make_node("ReduceSum", ["oh"], ["s2"], keepdims=0),
                  helper.make_node("ReduceSum", ["tv"], ["s3"], keepdims=0),
                  helper.make_node("ReduceSum", ["cs"], ["s4"], keepdims=0),
                  helper.make_node("Sum", ["s1", "s2", "s3", "s4"], ["y"])],
                 [f32("x", [2, 3])], [f32("y", [])],
                 [tensor("i", np.array([0, 2], np.int64)), tensor("ie", np.array([[1, 0, 1]], np.int64)),
                  tensor("depth", np.array(3, np.int64)), tensor("values", np.array([0, 1], np.float32)),
                  tensor("k", np.array([2], np.int64)), tensor("axis", np.array(1, np.int64))])


def pooling():
    return model([helper.make_node("AveragePool", ["x"], ["a"], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1]),
                  helper.make_node("ConvTranspose", ["a", "w"], ["t"], strides=[2, 2], group=1),
                  helper.make_node("GlobalAveragePool", ["t"], ["g"]),
                  helper.make_node("InstanceNormalization", ["x", "s", "b"], ["n"]),
                  helper.make_node("GlobalMaxPool", ["n"], ["m"]),
                  helper.make_node("Add", ["g", "m"], ["y"])],
                 [f32("x", [1, 2, 4, 4])], [f32("y", [1, 2, 1, 1])],
                 [tensor("w", weights(2, 2, 2, 2)), tensor("s", np.ones(2, np.float32)),
                  tensor("b", np.zeros(2, np.float32))])


def legacy_opset():
    # Opset 6: broadcast attributes, BatchNormalization with is_test... through the legacy paths.
    return model([helper.make_node("Add", ["x", "b"], ["a"], broadcast=1, axis=1),
                  helper.make_node("Relu", ["a"], ["y"])],
                 [f32("x", [2, 3])], [f32("y", [2, 3])], [tensor("b", weights(3))], opset=6)


def losses():
    return model([helper.make_node("Gemm", ["x", "w"], ["logits"]),
                  helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["y"])],
                 [f32("x", [3, 4]), i64("labels", [3])], [f32("y", [])], [tensor("w", weights(4, 5))])


def loss_graph_mse():
    return model([helper.make_node("Sub", ["y", "target"], ["d"]),
                  helper.make_node("Mul", ["d", "d"], ["sq"]),
                  helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0)],
                 [f32("y", [2, 4]), f32("target", [2, 4])], [f32("loss", [])])


def loss_graph_l1_weighted():
    return model([helper.make_node("Sub", ["y", "target"], ["d"]),
                  helper.make_node("Abs", ["d"], ["a"]),
                  helper.make_node("Mul", ["a", "weight"], ["w"]),
                  helper.make_node("ReduceSum", ["w"], ["loss"], keepdims=0)],
                 [f32("y", [2, 4]), f32("target", [2, 4]), f32("weight", [1, 4])], [f32("loss", [])])


def loss_graph_softmax():
    return model([helper.make_node("LogSoftmax", ["y"], ["l"], axis=1),
                  helper.make_node("Mul", ["l", "target"], ["m"]),
                  helper.make_node("ReduceSum", ["m"], ["s"], keepdims=0),
                  helper.make_node("Neg", ["s"], ["loss"])],
                 [f32("y", [2, 4]), f32("target", [2, 4])], [f32("loss", [])], opset=13)


def checkpoints(ckpt):
    a = ckpt.StoredTensor.from_array(weights(3, 2))
    b = ckpt.StoredTensor.from_array(weights(2))
    plain = ckpt.Checkpoint(parameters=[ckpt.CheckpointParameter("w", a), ckpt.CheckpointParameter("b", b, False)],
                            properties={"epoch": 3, "lr": 0.5, "note": "seed"})
    with_state = ckpt.Checkpoint(
        parameters=[ckpt.CheckpointParameter("w", a, True, ckpt.StoredTensor.from_array(weights(3, 2)))],
        optimizer=ckpt.OptimizerState(7, 1e-3, 1e-2, {"w": {"momentum0": a, "momentum1": a}}),
        scheduler_kind="linear", scheduler_values={"warmup_steps": 2, "total_steps": 10})
    return {
        "plain": ckpt.serialize_checkpoint(plain),
        "optimizer": ckpt.serialize_checkpoint(with_state),
        "nominal": ckpt.serialize_checkpoint(plain, nominal=True),
    }


def npy_bytes(array, fortran=False):
    buffer = io.BytesIO()
    np.save(buffer, np.asfortranarray(array) if fortran else array)
    return buffer.getvalue()


def npz_bytes(compressed):
    buffer = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buffer, x=weights(2, 3), labels=np.arange(4, dtype=np.int64))
    return buffer.getvalue()


def varint(value):
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number, wire_type, payload):
    key = varint(number << 3 | wire_type)
    if wire_type == 2:
        return key + varint(len(payload)) + payload
    return key + payload


def wire_tensor(name, dtype, shape, data):
    # traind.v1.Tensor: name = 1, dtype = 2 (DataType enum), shape = 3 (packed int64), data = 4.
    return (field(1, 2, name.encode()) + field(2, 0, varint(dtype)) +
            field(3, 2, b"".join(varint(d) for d in shape)) + field(4, 2, data))


def train_step_requests():
    # traind.v1.TrainStepRequest: session_id = 1, inputs = 2; DataType values read from the proto (DATA_TYPES).
    x = weights(2, 3)
    return {
        "float": field(1, 2, b"s-seed") + field(2, 2, wire_tensor("x", DATA_TYPES["FLOAT32"], [2, 3], x.tobytes())),
        "two": field(2, 2, wire_tensor("x", DATA_TYPES["FLOAT32"], [3], weights(3).tobytes())) +
               field(2, 2, wire_tensor("labels", DATA_TYPES["INT64"], [2], np.array([1, 0], np.int64).tobytes())),
        "scalar": field(2, 2, wire_tensor("s", DATA_TYPES["FLOAT64"], [], np.array(2.5).tobytes())),
    }


def proto_enum_values():
    values = {}
    path = os.path.join(ROOT, "proto", "traind", "v1", "training_service.proto")
    inside = False
    for line in open(path):
        stripped = line.strip()
        if stripped.startswith("enum DataType"):
            inside = True
            continue
        if inside:
            if stripped.startswith("}"):
                break
            if "=" in stripped and not stripped.startswith("//"):
                name, number = stripped.rstrip(";").split("=")[:2]
                values[name.strip().replace("DATA_TYPE_", "")] = int(number.split(";")[0].strip())
    return values


DATA_TYPES = proto_enum_values()


def write(target, name, data):
    directory = os.path.join(CORPUS, target)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as out:
        out.write(data)


def main():
    # Regenerate the seeds, keep the crash reproducers.
    for target in os.listdir(CORPUS) if os.path.isdir(CORPUS) else []:
        for name in os.listdir(os.path.join(CORPUS, target)):
            if name.startswith("seed-"):
                os.remove(os.path.join(CORPUS, target, name))
    models = {"mlp": mlp(), "cnn": cnn(), "attention": attention(), "shapes": shapes(), "indexing": indexing(),
              "pooling": pooling(), "legacy_opset6": legacy_opset(), "losses": losses(), "gelu_qkv": gelu_qkv(),
              "linear_transposed": linear_transposed(True), "linear_transposed_trainable": linear_transposed(False),
              "multihead": multihead()}
    for name, data in models.items():
        write("model_fuzzer", f"seed-{name}.onnx", data)
    for name in ("mlp", "cnn", "attention", "pooling", "losses", "gelu_qkv", "linear_transposed_trainable", "multihead"):
        write("train_fuzzer", f"seed-{name}.onnx", models[name])
    for name, data in {"mse": loss_graph_mse(), "l1_weighted": loss_graph_l1_weighted(),
                       "softmax_opset13": loss_graph_softmax()}.items():
        write("loss_graph_fuzzer", f"seed-{name}.onnx", data)
    for name, data in checkpoints(load_checkpoint_module()).items():
        write("checkpoint_fuzzer", f"seed-{name}.ckpt", data)
    npys = {"f32": npy_bytes(weights(2, 3)), "fortran": npy_bytes(weights(3, 2), fortran=True),
            "i64": npy_bytes(np.arange(5, dtype=np.int64)), "bool": npy_bytes(np.array([True, False])),
            "f64_scalar": npy_bytes(np.float64(1.5)), "u8": npy_bytes(np.arange(6, dtype=np.uint8).reshape(2, 3)),
            "big_endian": npy_bytes(np.arange(3, dtype=">f4"))}
    for name, data in npys.items():
        write("npy_fuzzer", f"seed-{name}.npy", data)
    write("npy_fuzzer", "seed-stored.npz", npz_bytes(False))
    write("npy_fuzzer", "seed-deflated.npz", npz_bytes(True))
    for name, data in train_step_requests().items():
        write("tensor_fuzzer", f"seed-{name}.pb", data)


if __name__ == "__main__":
    main()
