#!/usr/bin/env python3
"""Writes the .npz files npz_test.cc reads, with numpy itself (the reference writer). Deterministic; run with
Debian's /usr/bin/python3 from the repository root: /usr/bin/python3 engine/io/testdata/make_npz.py"""
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(7)
arrays = {
    "input": rng.standard_normal((5, 3)).astype(np.float32),
    "target": np.arange(5, dtype=np.int64),
    "mask": np.array([True, False, True], dtype=np.bool_),
    "scalar": np.float64(2.5),
}
np.savez(os.path.join(HERE, "stored.npz"), **arrays)
np.savez_compressed(os.path.join(HERE, "compressed.npz"), **arrays)
for name, value in arrays.items():
    np.save(os.path.join(HERE, f"expected_{name}.npy"), value)
