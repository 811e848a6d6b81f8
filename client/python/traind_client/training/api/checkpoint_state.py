"""CheckpointState, Parameters, Parameter, Properties: onnxruntime.training.api.checkpoint_state over traind.

A CheckpointState starts as local data (load_checkpoint reads the file in Python). A Module binds it: from the
moment the Module's remote session exists, every read and write goes to the session (GetParameters,
SetParameters, GetSession, UpdateProperties, SaveCheckpoint); before that, and after Module.close(), it is local.
"""

import os

import numpy as np

from traind_client import _checkpoint


class CheckpointState:
    """The training state: parameters (with gradients), optimizer state, properties."""

    def __init__(self, state):
        if not isinstance(state, _checkpoint.Checkpoint):
            raise TypeError("use CheckpointState.load_checkpoint(path)")
        self._local = state
        self._module = None  # the Module bound to this state

    @classmethod
    def load_checkpoint(cls, checkpoint_uri):
        """Reads a checkpoint file (traind's format; written by generate_artifacts or save_checkpoint)."""
        return cls(_checkpoint.load_checkpoint(os.fspath(checkpoint_uri)))

    @classmethod
    def save_checkpoint(cls, state, checkpoint_uri, include_optimizer_state=False):
        """Writes the state to a checkpoint file (from the daemon when a Module trains it)."""
        path = os.fspath(checkpoint_uri)
        session = state._session()
        if session is None:
            _checkpoint.save_checkpoint(path, state._local, include_optimizer_state=include_optimizer_state,
                                        nominal=state._local.nominal)
            return
        client, session_id = session
        data = client.save_checkpoint(session_id, include_optimizer_state=include_optimizer_state,
                                      return_bytes=True).content
        _checkpoint.parse_checkpoint(data, source="the daemon's checkpoint")  # verified before it replaces a file
        _checkpoint.write_atomically(path, data)

    @property
    def parameters(self):
        return Parameters(self)

    @property
    def properties(self):
        return Properties(self)

    # ---- for Module ----

    def _session(self):
        """(client, session_id) while a Module's remote session holds this state, else None."""
        return self._module._live_session() if self._module is not None else None

    def _bind(self, module):
        if self._module is not None and self._module is not module:
            raise RuntimeError("this CheckpointState already belongs to another Module")
        self._module = module

    def _unbind(self, module, state):
        """The Module is done: its final state (a Checkpoint) becomes local again."""
        if self._module is module:
            self._module = None
            if state is not None:
                self._local = state

    def __repr__(self):
        where = "remote" if self._session() is not None else "local"
        return (f"CheckpointState({where}, {len(self._local.parameters)} parameters, "
                f"{len(self.properties)} properties)")


class Parameter:
    """One parameter of a CheckpointState: name, data, grad, requires_grad."""

    def __init__(self, parameter, state):
        self._name = parameter.name
        self._requires_grad = parameter.requires_grad
        self._state = state

    @property
    def name(self):
        return self._name

    @property
    def requires_grad(self):
        return self._requires_grad

    @property
    def data(self):
        session = self._state._session()
        if session is None:
            return _local_array(self._state._local.parameter(self._name).data, self._name)
        client, session_id = session
        return client.get_parameters(session_id, [self._name]).parameters[self._name]

    @data.setter
    def data(self, value):
        self._state.parameters[self._name] = value

    @property
    def grad(self):
        """The accumulated gradient (zeros before the first training step). RuntimeError for a frozen parameter."""
        if not self._requires_grad:
            raise RuntimeError(f"parameter '{self._name}' does not require a gradient, so it has none")
        session = self._state._session()
        if session is None:
            parameter = self._state._local.parameter(self._name)
            if parameter.grad is None:
                return np.zeros_like(_local_array(parameter.data, self._name))
            return _local_array(parameter.grad, self._name)
        client, session_id = session
        return client.get_parameters(session_id, [self._name], include_gradients=True).gradients[self._name]

    def __repr__(self):
        return f"Parameter(name={self._name}, requires_grad={self._requires_grad})"


class Parameters:
    """The parameters of a CheckpointState by name, in checkpoint order (a read/write mapping)."""

    def __init__(self, state):
        self._state = state

    def __getitem__(self, name):
        try:
            return Parameter(self._state._local.parameter(name), self._state)
        except KeyError:
            raise KeyError(f"parameter '{name}' is not in the checkpoint state") from None

    def __setitem__(self, name, value):
        if name not in self:
            raise KeyError(f"parameter '{name}' is not in the checkpoint state")
        value = np.asarray(value)
        session = self._state._session()
        if session is not None:
            client, session_id = session
            client.set_parameters(session_id, parameters={name: value})
            return
        parameter = self._state._local.parameter(name)
        if tuple(value.shape) != tuple(parameter.data.shape):
            raise ValueError(f"parameter '{name}' has shape {list(parameter.data.shape)}, the value "
                             f"{list(value.shape)}")
        parameter.data = _checkpoint.StoredTensor.from_array(value, parameter.data.onnx_type)

    def __contains__(self, name):
        return any(p.name == name for p in self._state._local.parameters)

    def __iter__(self):
        return iter([p.name for p in self._state._local.parameters])

    def __len__(self):
        return len(self._state._local.parameters)

    def __repr__(self):
        return f"Parameters({list(self)})"


class Properties:
    """The property bag of a CheckpointState: str -> int | float | str."""

    def __init__(self, state):
        self._state = state

    def _values(self):
        session = self._state._session()
        if session is None:
            return dict(self._state._local.properties)
        client, session_id = session
        return client.update_properties(session_id)

    def __getitem__(self, name):
        values = self._values()
        if name not in values:
            raise KeyError(f"property '{name}' is not in the checkpoint state")
        return values[name]

    def __setitem__(self, name, value):
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(f"properties are int, float or str; '{name}' is {type(value).__name__}")
        session = self._state._session()
        if session is None:
            self._state._local.properties[name] = value
            return
        client, session_id = session
        client.update_properties(session_id, {name: value})

    def __delitem__(self, name):
        if name not in self:
            raise KeyError(f"property '{name}' is not in the checkpoint state")
        session = self._state._session()
        if session is None:
            del self._state._local.properties[name]
            return
        client, session_id = session
        client.update_properties(session_id, remove=[name])

    def __contains__(self, name):
        return name in self._values()

    def __iter__(self):
        return iter(self._values())

    def __len__(self):
        return len(self._values())

    def __repr__(self):
        return f"Properties({self._values()})"


def _local_array(tensor, name):
    if tensor.nominal:
        raise RuntimeError(f"parameter '{name}' has no data (a nominal checkpoint)")
    return tensor.array.copy()

