"""Small helpers the blocks share: fresh names, and lookups of graph inputs and outputs."""

import itertools

_counter = itertools.count()


def generate_graph_name(token):
    """A name no other block has made in this process: "<token>::<n>"."""
    return f"{token}::{next(_counter)}"


def node_arg_exists(model, name):
    """True when `name` is a graph input, output, initializer or node output of the model."""
    graph = model.graph
    return (any(value.name == name for value in graph.input) or any(value.name == name for value in graph.output)
            or any(init.name == name for init in graph.initializer)
            or any(name in node.output for node in graph.node))


def get_output_from_output_name(model, name):
    for output in model.graph.output:
        if output.name == name:
            return output
    raise LookupError(f"{name} is not an output of the model")


def get_input_from_input_name(model, name):
    for value in model.graph.input:
        if value.name == name:
            return value
    raise LookupError(f"{name} is not an input of the model")
