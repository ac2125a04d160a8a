"""shapejit.MultiheadAttention with inputs and settings beyond the numerical tests of
test_attention.py: torch's default dtype set to float64, and nested tensors."""
import warnings

import pytest
import torch


@pytest.fixture
def float64_default():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def test_builds_under_a_float64_default_dtype(sj, float64_default):
    # The parameters follow the default dtype (float64, as torch's do); the group's stand-in
    # weights must still be float32, or construction fails in the group.
    m = sj.MultiheadAttention(4, 2)
    assert m.in_proj_weight.dtype == torch.float64
    m = sj.MultiheadAttention(4, 2, kdim=3, vdim=5)  # separate q/k/v weights: three stand-ins
    assert m.q_proj_weight.dtype == torch.float64


def test_optimize_of_a_float32_module_under_a_float64_default_dtype(sj, float64_default, seed):
    torch.manual_seed(seed)
    mha = torch.nn.MultiheadAttention(8, 2, dtype=torch.float32).eval()
    model, report = sj.optimize(mha)
    assert [s.now for s in report.swapped] == ["MultiheadAttention"], str(report)
    x = torch.randint(-3, 4, (5, 2, 8)).float()
    with torch.no_grad():
        out, weights = model(x, x, x)
        ref, ref_weights = mha(x, x, x)
    assert out.dtype == torch.float32
    # Small-integer inputs: the in-projection sums are exact and both paths differ only by the
    # rounding of torch's own ops after it; the numerical bound is test_attention.py's job.
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(weights, ref_weights, rtol=1e-5, atol=1e-6)


def _nested(*lengths):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's prototype-API warning for strided nested tensors
        return torch.nested.nested_tensor([torch.randn(n, 4) for n in lengths])


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("which", ["query", "key", "value"])
def test_nested_tensor_input_is_refused_by_name(sj, train, which):
    m = sj.MultiheadAttention(4, 2, batch_first=True).train(train)
    dense, nested = torch.randn(2, 3, 4), _nested(3, 3)
    args = {"query": dense, "key": dense, "value": dense}
    args[which] = nested
    with torch.no_grad(), pytest.raises(NotImplementedError,
                                        match=r"shapejit\.MultiheadAttention: {} is a nested tensor".format(which)):
        m(args["query"], args["key"], args["value"], need_weights=False)


def test_nested_tensor_input_is_refused_when_scripted(sj):
    m = torch.jit.script(sj.MultiheadAttention(4, 2, batch_first=True).eval())
    nested = _nested(3, 2)
    with torch.no_grad(), pytest.raises(Exception, match=r"query is a nested tensor"):
        m(nested, nested, nested, need_weights=False)
