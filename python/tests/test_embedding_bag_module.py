"""shapejit.EmbeddingBag in place of torch.nn.EmbeddingBag: same constructor and state, same
forward results (bitwise), the same argument errors."""
import random
import warnings

import pytest
import torch

from helpers import assert_same_tensor, replay


def pair(seed, **kwargs):
    """A torch.nn.EmbeddingBag and a shapejit.EmbeddingBag with the same weight and settings."""
    import shapejit
    torch.manual_seed(seed)
    ref = torch.nn.EmbeddingBag(**kwargs)
    ours = shapejit.EmbeddingBag(**kwargs)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def random_call(g, gen, num_embeddings, include_last_offset, mode):
    """input, offsets and per_sample_weights of one forward call (1-D or 2-D form)."""
    weighted = mode == "sum" and g.random() < 0.5
    if not include_last_offset and g.random() < 0.4:  # 2-D: fixed-length bags
        inp = torch.randint(0, num_embeddings, (g.randrange(1, 9), g.randrange(1, 6)), generator=gen)
        return inp, None, torch.randn(inp.shape, generator=gen) if weighted else None
    n = g.randrange(0, 60)
    inp = torch.randint(0, num_embeddings, (n,), generator=gen)
    cuts = sorted(g.randrange(0, n + 1) for _ in range(g.randrange(0, 8)))
    offsets = torch.tensor([0] + cuts + ([n] if include_last_offset else []))
    return inp, offsets, torch.randn(n, generator=gen) if weighted else None


def test_is_an_nn_embedding_bag_with_the_same_state(sj):
    ours = sj.EmbeddingBag(10, 4, mode="max", padding_idx=-2)
    assert isinstance(ours, torch.nn.EmbeddingBag)
    assert ours.padding_idx == 8 and ours.mode == "max"
    assert set(ours.state_dict()) == {"weight"}
    assert torch.equal(ours.weight[8], torch.zeros(4))


def test_random_modules_match_torch(sj, seed):
    g = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    for i in range(60):
        kwargs = dict(num_embeddings=g.choice([1, 5, 40]), embedding_dim=g.choice([1, 7, 16, 33, 128]),
                      mode=g.choice(["sum", "mean", "max"]), include_last_offset=g.random() < 0.3)
        if g.random() < 0.4:
            kwargs["padding_idx"] = g.randrange(-kwargs["num_embeddings"], kwargs["num_embeddings"])
        ref, ours = pair(g.randrange(1 << 30), **kwargs)
        for j in range(3):
            inp, offsets, psw = random_call(g, gen, kwargs["num_embeddings"], kwargs["include_last_offset"],
                                            kwargs["mode"])
            with torch.no_grad():
                expected = ref(inp, offsets, psw)
                actual = ours(inp, offsets, psw)
            # Weighted with padding_idx: torch and shapejit both round each product first.
            assert_same_tensor(actual, expected, "module {} {} call {}: input {} offsets {}".format(
                i, kwargs, j, tuple(inp.shape), None if offsets is None else offsets.tolist()))


def test_from_pretrained_and_from_torch(sj, seed):
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(20, 9, generator=gen)
    inp = torch.randint(0, 20, (4, 3), generator=gen)
    for mode in ("sum", "mean", "max"):
        ref = torch.nn.EmbeddingBag.from_pretrained(weight, mode=mode, padding_idx=2)
        ours = sj.EmbeddingBag.from_pretrained(weight, mode=mode, padding_idx=2)
        assert type(ours) is sj.EmbeddingBag and not ours.weight.requires_grad
        assert_same_tensor(ours(inp), ref(inp), "from_pretrained " + mode)
        converted = sj.EmbeddingBag.from_torch(ref)
        assert converted.weight is ref.weight
        assert_same_tensor(converted(inp), ref(inp), "from_torch " + mode)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_from_torch_takes_half_precision_modules(sj, seed, dtype):
    """What the torch module returns, bit for bit (bf16: rule H6; padding_idx is set, so torch
    and shapejit take ATen's loop's rules)."""
    gen = torch.Generator().manual_seed(seed)
    inp = torch.randint(0, 20, (6, 4), generator=gen)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for mode in ("sum", "mean", "max"):
            ref = torch.nn.EmbeddingBag(20, 9, mode=mode, padding_idx=2, _weight=torch.randn(20, 9, generator=gen))
            ref = ref.to(dtype).requires_grad_(False)
            ours = sj.EmbeddingBag.from_torch(ref)
            assert ours.weight is ref.weight and ours.weight.dtype == dtype
            psw = torch.randn(6, 4, generator=gen).to(dtype) if mode == "sum" else None
            expected = ref(inp, None, psw)
            assert_same_tensor(ours(inp, None, psw), expected, "from_torch {} {}".format(dtype, mode))
    finally:
        torch.set_num_threads(threads)


def test_from_torch_refuses_other_modules(sj):
    with pytest.raises(TypeError, match="EmbeddingBag"):
        sj.EmbeddingBag.from_torch(torch.nn.Embedding(3, 4))


def test_argument_errors_match_torch(sj):
    ref, ours = pair(0, num_embeddings=10, embedding_dim=3, mode="mean")
    calls = [
        (torch.tensor([1, 2]), None, None),                         # 1-D without offsets
        (torch.tensor([[1, 2]]), torch.tensor([0]), None),          # 2-D with offsets
        (torch.tensor([[[1]]]), None, None),                        # 3-D
        (torch.tensor([1, 2]), torch.tensor([[0]]), None),          # 2-D offsets
        (torch.tensor([1, 2]), torch.tensor([0]), torch.ones(3)),   # weights of another shape
        (torch.tensor([1, 2]), torch.tensor([0]), torch.ones(2)),   # weights with mode mean
    ]
    for inp, offsets, psw in calls:
        with torch.no_grad():
            with pytest.raises(Exception) as expected:
                ref(inp, offsets, psw)
            with pytest.raises(expected.type):
                ours(inp, offsets, psw)


def test_gradient_reaches_the_weight_without_warnings(sj):
    """A weight requiring grad gets torch's gradient (test_autograd.py compares many cases); with
    grad disabled the output-only op runs and nothing requires grad."""
    ref = torch.nn.EmbeddingBag(10, 3, mode="max")
    ours = sj.EmbeddingBag.from_torch(torch.nn.EmbeddingBag(10, 3, mode="max", _weight=ref.weight.detach().clone()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = ours(torch.tensor([[1, 2], [4, 4]]))
        assert out.requires_grad
        out.sum().backward()
        ref(torch.tensor([[1, 2], [4, 4]])).sum().backward()
        assert torch.equal(ours.weight.grad, ref.weight.grad)
        with torch.no_grad():
            assert not ours(torch.tensor([[1, 2]])).requires_grad


@pytest.mark.parametrize("norm_type", [1.0, 2.0, 3.5])
def test_max_norm_renormalises_rows_as_torch(sj, seed, norm_type):
    """max_norm scales the rows a call names in place before the lookup, as torch does: after
    every call the weights and the outputs (and, training, the gradients) are torch's bit for bit."""
    gen = torch.Generator().manual_seed(seed)
    g = random.Random(seed)
    for mode in ("sum", "mean", "max"):
        weight = torch.randn(30, 7, generator=gen) * 3
        kwargs = dict(mode=mode, max_norm=1.5, norm_type=norm_type, padding_idx=2 if mode == "mean" else None)
        ref = torch.nn.EmbeddingBag.from_pretrained(weight.clone(), freeze=False, **kwargs)
        ours = sj.EmbeddingBag.from_pretrained(weight.clone(), freeze=False, **kwargs)
        for call in range(4):
            if call % 2:
                inp, offsets = torch.randint(0, 30, (5, 3), generator=gen), None
            else:
                inp = torch.randint(0, 30, (9,), generator=gen)
                offsets = torch.tensor(sorted([0] + [g.randrange(0, 10) for _ in range(2)]))
            psw = torch.randn(inp.shape, generator=gen) if mode == "sum" and call == 2 else None
            what = "max_norm {} norm_type {} call {}".format(mode, norm_type, call)
            expected, actual = ref(inp, offsets, psw), ours(inp, offsets, psw)
            assert_same_tensor(actual, expected, what + " output")
            assert_same_tensor(ours.weight.detach(), ref.weight.detach(), what + " weight after the call")
            expected.sum().backward()
            actual.sum().backward()
            assert_same_tensor(ours.weight.grad, ref.weight.grad, what + " gradient")
        assert not torch.equal(ours.weight.detach(), weight), replay("no row was renormalised: the test proves nothing")


def test_max_norm_bag_is_refused_in_a_group(sj):
    bags = [torch.nn.EmbeddingBag(10, 3), torch.nn.EmbeddingBag(10, 3, max_norm=1.0)]
    with torch.no_grad():
        bags[1].weight.mul_(10)  # every row's norm above max_norm
    weight_before = bags[1].weight.detach().clone()
    group = sj.EmbeddingBagGroup(bags)
    with pytest.raises(NotImplementedError, match=r"bags\[1\]: max_norm must be None in a group"):
        group([torch.tensor([[1, 2]]), torch.tensor([[1, 2]])])
    assert torch.equal(bags[1].weight.detach(), weight_before)  # refused before any row is renormalised


def test_inside_a_model(sj, seed):
    """A model whose nn.EmbeddingBag is swapped for shapejit's gives the same output."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential()
    model.add_module("bag", torch.nn.EmbeddingBag(1000, 64, mode="sum"))
    model.add_module("fc", torch.nn.Linear(64, 8))
    inp = torch.randint(0, 1000, (32, 20))
    with torch.no_grad():
        expected = model(inp)
        model.bag = sj.EmbeddingBag.from_torch(model.bag)
        actual = model(inp)
    assert torch.equal(actual, expected), replay("model output differs")


@pytest.mark.parametrize("how", ["pickle", "torch.save"])
def test_serialisation_round_trip(sj, seed, how):
    import io
    import pickle
    torch.manual_seed(seed)
    bag = sj.EmbeddingBag(30, 6, mode="max", padding_idx=1).requires_grad_(False)
    if how == "pickle":
        loaded = pickle.loads(pickle.dumps(bag))
    else:
        buf = io.BytesIO()
        torch.save(bag, buf)
        buf.seek(0)
        loaded = torch.load(buf, weights_only=False)  # a whole module: torch 2.6+ needs it said
    inp = torch.randint(0, 30, (4, 5))
    assert type(loaded) is sj.EmbeddingBag and torch.equal(loaded(inp), bag(inp)), replay(how)
    state = dict(loaded.__dict__)
    del state["_mode"]  # a module pickled before the mode number existed
    old = sj.EmbeddingBag.__new__(sj.EmbeddingBag)
    old.__setstate__(state)
    assert torch.equal(old(inp), bag(inp)), replay("state without _mode")


def test_mode_changes_after_construction_are_followed(sj, seed):
    gen = torch.Generator().manual_seed(seed)
    ref, ours = pair(seed, num_embeddings=20, embedding_dim=5, mode="sum")
    inp = torch.randint(0, 20, (3, 4), generator=gen)
    for mode in ("mean", "max", "sum"):
        ref.mode = ours.mode = mode
        with torch.no_grad():
            assert_same_tensor(ours(inp), ref(inp), "mode changed to " + mode)
    ours.mode = "median"
    with pytest.raises(ValueError, match="median"):
        ours(inp)
