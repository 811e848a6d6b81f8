"""Low-rank adapters (LoRA, Hu et al. 2021) on an ONNX model, for fine-tuning a small part of a big frozen one.

    import onnx, traind_client
    from traind_client import lora

    model = onnx.load("encoder.onnx")
    targets = lora.find_targets(model, r"layers\\.\\d+\\.(q|k|v|o)\\.weight")     # MatMul / Gemm weights
    adapted, trainable = lora.add_lora(model, targets, rank=8, alpha=16)
    onnx.save(adapted, "encoder_lora.onnx")
    with traind_client.connect() as client:
        art = client.generate_artifacts("encoder_lora.onnx", requires_grad=trainable + ["head.weight"], ...)
        ...                                                         # train: only the adapters (and the head) learn
        client.export_model(session_id, "trained.onnx")           # still with its adapters
    merged = lora.merge_lora(onnx.load("trained.onnx"))             # plain weights: W + scaling * A @ B
    onnx.save(merged, "merged.onnx")

add_lora edits the forward graph before GenerateArtifacts: for every chosen weight W of a MatMul (Y = X @ W, W of
shape [in, out]) or a Gemm (Y = alpha * op(X) @ op(W) + beta * C, op(W) of shape [in, out]) it adds two
initializers, `<W>.lora_A` [in, rank] (uniform in +-1/sqrt(in), as PEFT's Kaiming-uniform) and `<W>.lora_B`
[rank, out] (zeros, so the adapted model starts as the original one), and the nodes
Y = Y_base + (alpha_gemm * scaling) * ((X @ A) @ B), with scaling = alpha / rank. Only A and B need training:
the frozen W then costs no gradient, no optimizer state and no weight-gradient pass (traind computes gradients for
the trainable values only). The adapters are recorded in the model's metadata ("traind.lora"), which traind's
export keeps, so merge_lora finds them again in the trained, exported model and folds them into plain weights
(op(W') = op(W) + scaling * A @ B), removing the adapter nodes: the merged model has exactly the original graph.
"""

import json
import os
import re
import tempfile

import numpy as np

METADATA_KEY = "traind.lora"


def _onnx():
    import onnx  # Debian's python3-onnx; only the LoRA helpers need it

    return onnx


def find_targets(model, pattern):
    """Names of the initializers matching the regular expression `pattern` (re.fullmatch) that some MatMul reads
    as its second input or some Gemm as its B: the weights add_lora can adapt."""
    regex = re.compile(pattern)
    weights = []
    for node in model.graph.node:
        if node.op_type in ("MatMul", "Gemm") and len(node.input) > 1 and node.input[1] not in weights:
            weights.append(node.input[1])
    initializers = {t.name for t in model.graph.initializer}
    return [w for w in weights if w in initializers and regex.fullmatch(w)]


def _attribute(node, name, default):
    for attribute in node.attribute:
        if attribute.name == name:
            onnx = _onnx()
            return onnx.helper.get_attribute_value(attribute)
    return default



def _has_external_data(model):
    onnx = _onnx()
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)


def _check(model, base_dir):
    """onnx's checker on the edited model. Its external data files are named relative to the model's folder, which
    a ModelProto does not know: with `base_dir` (that folder) the model is checked as a file written there (the
    checker then finds the data files); without it, a model with external data is checked by the checker's
    graph rules only, its external tensors left to the loader that reads them."""
    onnx = _onnx()
    if not _has_external_data(model):
        onnx.checker.check_model(model)
        return
    if base_dir is not None:
        handle, path = tempfile.mkstemp(suffix=".onnx", dir=base_dir)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(model.SerializeToString())
            onnx.checker.check_model(path)
        finally:
            os.remove(path)
        return
    shallow = onnx.ModelProto()
    shallow.CopyFrom(model)
    for tensor in shallow.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            # Stand-in data of the right size is not needed by the graph rules: an empty tensor of the same type.
            del tensor.external_data[:]
            tensor.data_location = onnx.TensorProto.DEFAULT
            del tensor.dims[:]
            tensor.dims.append(0)
    onnx.checker.check_model(shallow)

def add_lora(model, targets, rank=8, alpha=16.0, *, seed=0, base_dir=None):
    """Returns (adapted copy of `model`, the adapter initializers' names to train). `targets`: weight names (see
    find_targets). ValueError for a name that is no float initializer, or one some node reads other than as a
    MatMul's second input or a Gemm's B, for rank < 1, and for a model already adapted. `base_dir`: the folder of a
    model whose weights are external data, so that onnx's checker reads them too (without it they are not checked
    here)."""
    onnx = _onnx()
    from onnx import helper, numpy_helper

    if rank < 1:
        raise ValueError("rank must be >= 1")
    if any(p.key == METADATA_KEY for p in model.metadata_props):
        raise ValueError("the model already has LoRA adapters")
    adapted = onnx.ModelProto()
    adapted.CopyFrom(model)
    graph = adapted.graph
    initializers = {t.name: t for t in graph.initializer}
    taken = {t.name for t in graph.initializer} | {i.name for i in graph.input}
    for node in graph.node:
        taken.update(node.output)
    rng = np.random.RandomState(seed)
    scaling = float(alpha) / rank
    entries, trainable, nodes = [], [], []
    targets = list(dict.fromkeys(targets))
    for weight in targets:
        tensor = initializers.get(weight)
        if tensor is None or tensor.data_type not in (onnx.TensorProto.FLOAT,) or len(tensor.dims) != 2:
            raise ValueError(f"'{weight}' is not a 2-D float32 initializer of the model")
        transposed = None
        for node in graph.node:
            if weight not in node.input:
                continue
            if node.op_type not in ("MatMul", "Gemm") or list(node.input).index(weight) != 1 or \
                    list(node.input).count(weight) != 1:
                raise ValueError(f"'{weight}' is read by {node.op_type} '{node.name}' other than as the weight of a "
                                 "MatMul (its second input) or Gemm (its B)")
            node_transposed = node.op_type == "Gemm" and _attribute(node, "transB", 0) == 1
            if transposed is not None and transposed != node_transposed:
                raise ValueError(f"'{weight}' is used both transposed and not")
            transposed = node_transposed
        if transposed is None:
            raise ValueError(f"no MatMul or Gemm reads '{weight}'")
        fan_out, fan_in = tensor.dims if transposed else tensor.dims[::-1]
        a_name, b_name = weight + ".lora_A", weight + ".lora_B"
        if a_name in taken or b_name in taken:
            raise ValueError(f"the model already has a value named '{a_name}' or '{b_name}'")
        bound = 1.0 / np.sqrt(fan_in)
        graph.initializer.append(numpy_helper.from_array(
            rng.uniform(-bound, bound, size=(fan_in, rank)).astype(np.float32), a_name))
        graph.initializer.append(numpy_helper.from_array(np.zeros((rank, fan_out), np.float32), b_name))
        entries.append(dict(weight=weight, a=a_name, b=b_name, scaling=scaling, transposed=bool(transposed),
                            rank=rank, outputs=[]))
        trainable += [a_name, b_name]

    by_weight = {e["weight"]: e for e in entries}
    new_nodes = []
    for index, node in enumerate(graph.node):
        new_nodes.append(node)
        weight = node.input[1] if node.op_type in ("MatMul", "Gemm") and len(node.input) > 1 else None
        entry = by_weight.get(weight)
        if entry is None:
            continue
        output = node.output[0]
        base = f"{output}/lora_base"
        prefix = f"lora/{weight}/{index}"
        x = node.input[0]
        factor = entry["scaling"]
        if node.op_type == "Gemm":
            if _attribute(node, "transA", 0) == 1:
                new_nodes.append(helper.make_node("Transpose", [x], [f"{prefix}/x_t"], name=f"{prefix}/transpose"))
                x = f"{prefix}/x_t"
            factor *= float(_attribute(node, "alpha", 1.0))
        node.output[0] = base
        scale_name = f"{prefix}/scaling"
        new_nodes += [
            # A Constant node, not an initializer: initializers become (frozen) parameters of the artifacts.
            helper.make_node("Constant", [], [scale_name], name=scale_name,
                             value=numpy_helper.from_array(np.array(factor, np.float32), scale_name)),
            helper.make_node("MatMul", [x, entry["a"]], [f"{prefix}/xa"], name=f"{prefix}/xa"),
            helper.make_node("MatMul", [f"{prefix}/xa", entry["b"]], [f"{prefix}/xab"], name=f"{prefix}/xab"),
            helper.make_node("Mul", [f"{prefix}/xab", scale_name], [f"{prefix}/delta"], name=f"{prefix}/scale"),
            helper.make_node("Add", [base, f"{prefix}/delta"], [output], name=f"{prefix}/add"),
        ]
        entry["outputs"].append(output)
    del graph.node[:]
    graph.node.extend(new_nodes)
    adapted.metadata_props.append(onnx.StringStringEntryProto(key=METADATA_KEY, value=json.dumps(entries)))
    _check(adapted, base_dir)
    return adapted, trainable


def merge_lora(model, *, base_dir=None):
    """A copy of `model` (add_lora's, possibly trained and exported) with every adapter folded into its weight
    (op(W) + scaling * A @ B, in float64 then rounded to float32) and the adapter nodes, initializers and metadata
    removed. ValueError when the model has no adapters or they are not where add_lora put them. `base_dir`: as for
    add_lora."""
    onnx = _onnx()
    from onnx import numpy_helper

    meta = {p.key: p.value for p in model.metadata_props}
    if METADATA_KEY not in meta:
        raise ValueError("the model has no LoRA adapters (no 'traind.lora' metadata)")
    entries = json.loads(meta[METADATA_KEY])
    merged = onnx.ModelProto()
    merged.CopyFrom(model)
    graph = merged.graph
    index = {t.name: i for i, t in enumerate(graph.initializer)}
    values = {}
    for entry in entries:
        for name in (entry["weight"], entry["a"], entry["b"]):
            if name not in index:
                raise ValueError(f"the adapter's initializer '{name}' is missing")
            values[name] = numpy_helper.to_array(graph.initializer[index[name]])
        w = values[entry["weight"]].astype(np.float64)
        delta = entry["scaling"] * (values[entry["a"]].astype(np.float64) @ values[entry["b"]].astype(np.float64))
        w = w + (delta.T if entry["transposed"] else delta)
        graph.initializer[index[entry["weight"]]].CopyFrom(
            numpy_helper.from_array(w.astype(np.float32), entry["weight"]))

    # Nodes: drop the adapter nodes; the base MatMul / Gemm gets its output name back.
    renamed = {}
    for entry in entries:
        for output in entry["outputs"]:
            renamed[f"{output}/lora_base"] = output
    adapter_prefixes = tuple(f"lora/{e['weight']}/" for e in entries)
    kept = []
    for node in graph.node:
        if node.name.startswith(adapter_prefixes):
            continue
        for i, output in enumerate(node.output):
            if output in renamed:
                node.output[i] = renamed[output]
        kept.append(node)
    if any(name not in {o for n in kept for o in n.output} for name in renamed.values()):
        raise ValueError("an adapted weight's output is no longer produced: the adapters were edited")
    del graph.node[:]
    graph.node.extend(kept)
    dropped = {e["a"] for e in entries} | {e["b"] for e in entries}
    initializers = [t for t in graph.initializer if t.name not in dropped]
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    inputs = [i for i in graph.input if i.name not in dropped]
    del graph.input[:]
    graph.input.extend(inputs)
    value_infos = [v for v in graph.value_info if not v.name.startswith("lora/") and v.name not in renamed]
    del graph.value_info[:]
    graph.value_info.extend(value_infos)
    props = [p for p in merged.metadata_props if p.key != METADATA_KEY]
    del merged.metadata_props[:]
    merged.metadata_props.extend(props)
    _check(merged, base_dir)
    return merged
