"""`pagoda dequant` against gguf-py's numpy dequantization (gguf.quants.dequantize).

The reference is independent of pagoda: gguf-py's GGUFReader finds the tensors and its numpy
code dequantizes them. Every tensor of the default model must match within 1e-6 (max abs diff);
a synthetic file holding random blocks of every type pagoda dequantizes must match exactly
(NaN where the reference has NaN). Output goes to a temporary folder, a group of tensors at a
time, deleted as we go, so disk use stays around 100 MB.
"""
import pathlib
import shutil

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES  # noqa: E402

GROUP_ELEMS = 24 << 20  # about 96 MB of float32 per pagoda call


def reference(t):
    """Dequantized tensor in numpy shape (reversed ne), float32."""
    ne = [int(x) for x in t.shape]
    with np.errstate(all="ignore"):  # random blocks hold nan / inf scales
        want = gguf.quants.dequantize(t.data, t.tensor_type)
    return np.asarray(want, dtype=np.float32).reshape(tuple(reversed(ne)))


def load_f32(path, t):
    ne = [int(x) for x in t.shape]
    return np.fromfile(path, dtype="<f4").reshape(tuple(reversed(ne)))


def groups(tensors):
    group, n = [], 0
    for t in tensors:
        if group and n + int(t.n_elements) > GROUP_ELEMS:
            yield group
            group, n = [], 0
        group.append(t)
        n += int(t.n_elements)
    if group:
        yield group


def dequant_and_compare(run_pagoda, model, tensors, out, exact=False):
    """Runs pagoda dequant over `tensors` in groups; returns [(name, max abs diff)]."""
    diffs = []
    for group in groups(tensors):
        if out.exists():
            shutil.rmtree(out)
        args = ["dequant", "--model", model, "--out", out]
        for t in group:
            args += ["--tensor", t.name]
        run_pagoda(*args)
        for t in group:
            path = out / f"{t.name}.f32"
            got = load_f32(path, t)
            want = reference(t)
            assert got.shape == want.shape, t.name
            if exact:
                np.testing.assert_array_equal(got, want, err_msg=t.name)
                diffs.append((t.name, 0.0))
            else:
                assert np.array_equal(np.isnan(got), np.isnan(want)), t.name
                ok = ~np.isnan(want)
                d = float(np.max(np.abs(got[ok].astype(np.float64) - want[ok]), initial=0.0))
                diffs.append((t.name, d))
            path.unlink()
    if out.exists():
        shutil.rmtree(out)
    return diffs


def test_list_matches_reader(run_pagoda, model_path):
    reader = gguf.GGUFReader(model_path)
    p = run_pagoda("dequant", "--model", model_path, "--list")
    lines = p.stdout.decode().splitlines()
    assert len(lines) == len(reader.tensors)
    for line, t in zip(lines, reader.tensors):
        name, tname, dims = line.split("\t")
        assert name == t.name
        assert tname == t.tensor_type.name
        assert [int(x) for x in dims.split(",")] == [int(x) for x in t.shape]


def test_every_tensor_of_default_model(run_pagoda, model_path, tmp_path):
    reader = gguf.GGUFReader(model_path)
    assert len(reader.tensors) > 0
    diffs = dequant_and_compare(run_pagoda, model_path, reader.tensors, tmp_path / "out")
    assert len(diffs) == len(reader.tensors)
    bad = [(n, d) for n, d in diffs if not d <= 1e-6]
    assert not bad, bad[:10]


# Every type pagoda dequantizes and gguf-py can dequantize too.
SYNTH_TYPES = [QT.F32, QT.F16, QT.BF16, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0,
               QT.Q2_K, QT.Q3_K, QT.Q4_K, QT.Q5_K, QT.Q6_K]


def write_synthetic(path, alignment):
    """A GGUF with random blocks of each type in 1-D to 4-D shapes."""
    rng = np.random.default_rng(1234)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_custom_alignment(alignment)
    shapes = [(), (3,), (2, 5), (3, 1, 2)]  # outer dims (numpy order); ne0 is appended
    for qt in SYNTH_TYPES:
        block, tsize = GGML_QUANT_SIZES[qt]
        for k, outer in enumerate(shapes):
            nblocks = 2 if block > 1 else 7
            nrows = int(np.prod(outer))
            raw = rng.integers(0, 256, size=(nrows, nblocks * tsize), dtype=np.uint8)
            w.add_tensor(f"{qt.name}.{k}", raw.reshape((*outer, nblocks * tsize)), raw_dtype=qt)
    # every 16-bit pattern, as F16 and as BF16: the conversions are exact
    every = np.arange(1 << 16, dtype=np.uint16).view(np.uint8)
    w.add_tensor("F16.every", every.copy(), raw_dtype=QT.F16)
    w.add_tensor("BF16.every", every.copy(), raw_dtype=QT.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("alignment", [32, 64])
def test_every_type_random_blocks(run_pagoda, tmp_path, alignment):
    model = tmp_path / "synthetic.gguf"
    write_synthetic(model, alignment)
    reader = gguf.GGUFReader(str(model))
    assert len(reader.tensors) == 4 * len(SYNTH_TYPES) + 2
    seen = {t.tensor_type for t in reader.tensors}
    assert seen == set(SYNTH_TYPES)
    diffs = dequant_and_compare(run_pagoda, str(model), reader.tensors, tmp_path / "out",
                                exact=True)
    assert len(diffs) == len(reader.tensors)


def test_all_tensors_when_none_named(run_pagoda, tmp_path):
    model = tmp_path / "synthetic.gguf"
    write_synthetic(model, 32)
    out = tmp_path / "all"
    run_pagoda("dequant", "--model", model, "--out", out)
    reader = gguf.GGUFReader(str(model))
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{t.name}.f32" for t in reader.tensors)
    t = reader.tensors[5]
    np.testing.assert_array_equal(load_f32(out / f"{t.name}.f32", t), reference(t))


def test_corrupt_file_exits_1(run_pagoda, model_path, tmp_path):
    # a truncated copy of the real model: header and metadata intact, tensor data cut off
    bad = tmp_path / "truncated.gguf"
    with open(model_path, "rb") as f:
        bad.write_bytes(f.read(4 << 20))
    p = run_pagoda("dequant", "--model", bad, "--list", check=False)
    assert p.returncode == 1
    assert b"runs past the end of the file" in p.stderr

    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"NOTAGGUF" + bytes(64))
    p = run_pagoda("dequant", "--model", junk, "--out", tmp_path / "o", check=False)
    assert p.returncode == 1
    assert b"magic" in p.stderr
    assert not (tmp_path / "o").exists()


def test_unknown_tensor_and_usage(run_pagoda, model_path, tmp_path):
    p = run_pagoda("dequant", "--model", model_path, "--out", tmp_path / "o",
                   "--tensor", "no.such.tensor", check=False)
    assert p.returncode == 1
    assert b"no.such.tensor" in p.stderr
    p = run_pagoda("dequant", "--model", model_path, check=False)
    assert p.returncode == 2
    p = run_pagoda("dequant", "--bogus", check=False)
    assert p.returncode == 2
    p = run_pagoda("dequant", "--model", tmp_path / "missing.gguf", "--list", check=False)
    assert p.returncode == 1
    assert b"missing.gguf" in p.stderr
