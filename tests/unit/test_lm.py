"""The LM against an independent nanoGPT-style forward written out with plain tensor ops."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from tiny_models import perturb, tiny_lm

from expattn.nn.carriers import carrier_class
from expattn.nn.hooks import BlockHooks, cached
from expattn.nn.lm import LM, LMConfig


def reference_logits(model: LM, idx: torch.Tensor) -> torch.Tensor:
    """Pre-LayerNorm GPT forward with an explicit causal softmax (no fused kernel, no registry)."""
    cfg = model.cfg
    sd = {k: v for k, v in model.state_dict().items()}
    T = idx.shape[1]
    x = sd["tok.weight"][idx] + sd["pos.weight"][:T]
    causal = torch.ones(T, T, dtype=torch.bool).tril()

    def ln(x, prefix):
        return F.layer_norm(x, (cfg.dim,), sd[f"{prefix}.norm.weight"], sd.get(f"{prefix}.norm.bias"), eps=1e-5)

    def lin(x, prefix):
        return x @ sd[f"{prefix}.weight"].T + sd.get(f"{prefix}.bias", 0.0)

    for layer in range(cfg.layers):
        b = f"blocks.{0 if cfg.tied_layers else layer}"
        h = ln(x, f"{b}.norm1")
        w, bias = sd[f"{b}.attn.in_proj_weight"], sd.get(f"{b}.attn.in_proj_bias", 0.0)
        q, k, v = (h @ w.T + bias).split(cfg.dim, dim=-1)  # packed [W_q; W_k; W_v], as in nn.MultiheadAttention
        q, k, v = (t.unflatten(-1, (cfg.heads, -1)).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.mT / math.sqrt(cfg.dim // cfg.heads)).masked_fill(~causal, -torch.inf)
        y = (scores.softmax(-1) @ v).transpose(1, 2).flatten(-2)
        x = x + lin(y, f"{b}.attn.out_proj")
        m = lin(F.gelu(lin(ln(x, f"{b}.norm2"), f"{b}.mlp.fc")), f"{b}.mlp.out_proj")
        x = x + m
    return ln(x, "norm_f") @ sd["tok.weight"].T


@pytest.mark.parametrize(("tied", "bias"), [(False, True), (True, True), (False, False)])
def test_matches_reference_forward(gen, tied, bias):
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
    cfg = LMConfig(vocab_size=11, context=9, layers=3, heads=2, dim=8, tied_layers=tied, bias=bias)
    model = perturb(LM(cfg).double(), gen)
    idx = torch.randint(0, 11, (4, 9), generator=gen)
    logits, _ = model(idx)
    # float64 throughout; only summation order differs from the reference
    torch.testing.assert_close(logits, reference_logits(model, idx), rtol=1e-10, atol=1e-10)


def nanogpt_loss(params: dict[str, torch.Tensor], cfg: LMConfig, idx: torch.Tensor, targets: torch.Tensor):
    """nanoGPT's bias-free training loss written with the torch kernels it calls (fused layer norm, causal SDPA)."""
    B, T = idx.shape
    C, H = cfg.dim, cfg.heads
    x = F.embedding(idx, params["tok.weight"]) + F.embedding(torch.arange(T), params["pos.weight"])
    for layer in range(cfg.layers):
        b = f"blocks.{layer}"
        h = F.layer_norm(x, (C,), params[f"{b}.norm1.norm.weight"], None, 1e-5)
        q, k, v = F.linear(h, params[f"{b}.attn.in_proj_weight"]).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, params[f"{b}.attn.out_proj.weight"])
        h = F.layer_norm(x, (C,), params[f"{b}.norm2.norm.weight"], None, 1e-5)
        x = x + F.linear(F.gelu(F.linear(h, params[f"{b}.mlp.fc.weight"])), params[f"{b}.mlp.out_proj.weight"])
    logits = F.linear(F.layer_norm(x, (C,), params["norm_f.norm.weight"], None, 1e-5), params["tok.weight"])
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def test_bias_free_training_loss_and_gradients_are_bitwise_nanogpts(gen):
    """The same kernels in the same order: the LM adds no arithmetic of its own (tolerance 0)."""
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
    cfg = LMConfig(vocab_size=13, context=8, layers=2, heads=2, dim=16, bias=False)
    model = perturb(LM(cfg), gen)
    idx, targets = (torch.randint(0, 13, (3, 8), generator=gen) for _ in range(2))
    _, loss = model(idx, targets)
    loss.backward()
    params = {k: v.detach().clone().requires_grad_(True) for k, v in model.state_dict().items() if k != "head.weight"}
    expected = nanogpt_loss(params, cfg, idx, targets)
    expected.backward()
    torch.testing.assert_close(loss, expected, rtol=0, atol=0)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, params[name].grad, rtol=0, atol=0, msg=name)


def test_bias_free_model_counts_as_nanogpt_recipe():
    """bias=False: no bias anywhere; the count is nanoGPT's bias-free GPT (806,528 at its CPU recipe size)."""
    V, T, L, C = 84, 64, 4, 128
    model = LM(LMConfig(vocab_size=V, context=T, layers=L, heads=4, dim=C, bias=False))
    assert not [n for n, _ in model.named_parameters() if n.endswith("bias")]
    # embeddings (head tied) + per layer two LayerNorm gains, W_qkv, W_o, MLP 4C wide + final gain
    assert model.num_params() == V * C + T * C + L * (2 * C + 3 * C * C + C * C + 8 * C * C) + C == 806_528
    with_bias = LM(LMConfig(vocab_size=V, context=T, layers=L, heads=4, dim=C))
    assert with_bias.num_params() - model.num_params() == L * (2 * C + 3 * C + C + 4 * C + C) + C  # 5,760


def test_tied_layers_share_one_block(gen):
    untied = LM(LMConfig(vocab_size=7, context=5, layers=4, heads=2, dim=8))
    tied = LM(LMConfig(vocab_size=7, context=5, layers=4, heads=2, dim=8, tied_layers=True))
    assert len(tied.blocks) == 1 and len(untied.blocks) == 4
    block = sum(p.numel() for p in untied.blocks[0].parameters())
    assert untied.num_params() - tied.num_params() == 3 * block


def test_loss_is_mean_next_token_cross_entropy(gen):
    model = LM(LMConfig(vocab_size=13, context=6, layers=1, heads=1, dim=4)).double()
    idx = torch.randint(0, 13, (3, 6), generator=gen)
    targets = torch.randint(0, 13, (3, 6), generator=gen)
    logits, loss = model(idx, targets)
    manual = -(logits.log_softmax(-1).gather(-1, targets[..., None])).mean()
    torch.testing.assert_close(loss, manual, rtol=1e-12, atol=0)  # same float64 numbers, other order


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "sphere", "identity"])
@pytest.mark.parametrize("carrier", ["empirical", "gaussian_mixture", "mixture_lower_bound"])
def test_causal_no_logit_sees_the_future(gen, norm, carrier):
    model = perturb(tiny_lm(carrier=carrier, norm=norm), gen)
    model = model.double()
    idx = torch.randint(0, 9, (2, 8), generator=gen)
    changed = idx.clone()
    changed[:, 5:] = (idx[:, 5:] + 1) % 9
    a, _ = model(idx)
    b, _ = model(changed)
    assert torch.equal(a[:, :5], b[:, :5])  # positions before 5 cannot depend on tokens 5..7
    assert (a[:, 5:] - b[:, 5:]).abs().max() > 1e-6  # while later ones do


@pytest.mark.parametrize("carrier", ["empirical", "gaussian_mixture", "mixture_lower_bound"])
def test_every_parameter_gets_a_gradient(gen, carrier):
    model = tiny_lm(carrier=carrier)
    idx = torch.randint(0, 9, (2, 8), generator=gen)
    _, loss = model(idx, idx)
    loss.backward()
    for name, p in model.named_parameters():
        if not carrier_class(carrier).uses_keys and "k_proj" in name:
            # Jensen's bound weights atoms by pi only: keys are unused (the fused [W_q; W_k; W_v]
            # product hands them an exact zero gradient)
            assert p.grad is None or not p.grad.any(), name
        else:
            assert p.grad is not None and torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("tied", [False, True])
def test_hook_points_name_the_states(gen, tied):
    model = LM(LMConfig(vocab_size=5, context=4, layers=2, heads=2, dim=4, tied_layers=tied)).double()
    names = ("input", "norm1.input", "norm1.output", "attn.input", "attn.heads", "attn.output", "attn.residual",
             "norm2.input", "norm2.output", "mlp.input", "mlp.output", "output")
    points = model.hook_points()
    assert list(points) == [f"blocks.{i}.{n}" for i in range(2) for n in names]
    assert all(p.name == name for name, p in points.items())
    assert points["blocks.1.attn.output"] is model.hooks[1].get_submodule("attn.output")
    # no parameters, and outside the module tree (``parameters()`` does not walk them)
    assert not any(list(depth.parameters()) for depth in model.hooks)
    assert not any(isinstance(m, BlockHooks) for m in model.modules())
    assert not any(k.startswith("hooks") for k in model.state_dict())
    calls: list[str] = []
    handles = [p.register_forward_hook(lambda m, _a, _o: calls.append(m.name)) for p in points.values()]
    idx = torch.randint(0, 5, (2, 4), generator=gen)
    with torch.no_grad(), cached(points.values()) as cache:
        logits, _ = model(idx)
    for h in handles:
        h.remove()
    assert calls == list(points)  # every point once, in the block's order, depth by depth
    for i, block in enumerate(model.layer_blocks()):
        t = {n: cache[f"blocks.{i}.{n}"] for n in names}
        x = (model.tok(idx) + model.pos(torch.arange(4))) if i == 0 else cache[f"blocks.{i - 1}.output"]
        # the block assembled again from its modules and torch's kernel, in float64: 1e-12 relative allows for
        # a different summation order and still rejects any other tensor (they differ at order one)
        n1 = block.norm1(x)
        q, k, v = (F.linear(n1, block.attn.in_proj_weight, block.attn.in_proj_bias).view(2, 4, 3, 2, 2)
                   .permute(2, 0, 3, 1, 4))
        heads = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).flatten(-2)
        a = block.attn.out_proj(heads)
        h = x + a
        m = block.mlp(block.norm2(h))
        expected = {"input": x, "norm1.input": x, "norm1.output": n1, "attn.input": n1, "attn.heads": heads,
                    "attn.output": a, "attn.residual": h, "norm2.input": h, "norm2.output": block.norm2(h),
                    "mlp.input": block.norm2(h), "mlp.output": m, "output": h + m}
        for n in names:
            torch.testing.assert_close(t[n], expected[n], rtol=1e-12, atol=1e-14, msg=n)
    torch.testing.assert_close(logits, model.head(model.norm_f(cache["blocks.1.output"])), rtol=0, atol=0)


def test_only_observed_depths_call_their_hook_points(gen, monkeypatch):
    from expattn.nn.hooks import HookPoint

    model = LM(LMConfig(vocab_size=5, context=4, layers=3, heads=1, dim=4))
    idx = torch.randint(0, 5, (2, 4), generator=gen)
    called: list[str] = []
    identity = HookPoint.forward
    monkeypatch.setattr(HookPoint, "forward", lambda self, x: called.append(self.name) or identity(self, x))
    plain, _ = model(idx)
    assert called == []  # nothing observes: no identity module is called
    handle = model.hook_points()["blocks.1.mlp.output"].register_forward_hook(lambda *_: None)
    hooked, _ = model(idx)
    handle.remove()
    assert called == [p.name for p in model.hooks[1].points]  # depth 1 only
    called.clear()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda *_: None)  # a global hook sees every point
    model(idx)
    handle.remove()
    assert len(called) == 3 * 12
    torch.testing.assert_close(hooked, plain, rtol=0, atol=0)


def test_a_depth_knows_when_its_points_are_hooked_also_in_a_copy():
    import copy

    model = LM(LMConfig(vocab_size=5, context=4, layers=2, heads=1, dim=4))
    for m in (model, copy.deepcopy(model)):
        depth = m.hooks[1]
        assert not depth.hooked()
        for register in (depth.points[4].register_forward_hook, depth.points[4].register_forward_pre_hook):
            handle = register(lambda *_: None)
            assert depth.hooked() and not m.hooks[0].hooked()
            handle.remove()
            assert not depth.hooked()
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda *_: None)
    assert model.hooks[0].hooked()
    handle.remove()


def test_a_hook_point_can_replace_its_tensor(gen):
    model = LM(LMConfig(vocab_size=5, context=4, layers=2, heads=1, dim=4))
    idx = torch.randint(0, 5, (2, 4), generator=gen)
    handle = model.hook_points()["blocks.1.attn.output"].register_forward_hook(lambda _m, _a, out: 0 * out)
    with torch.no_grad(), cached([model.hook_points()["blocks.1.input"]]) as cache:
        ablated, _ = model(idx)
    handle.remove()
    block = model.blocks[1]
    x = cache["blocks.1.input"]
    with torch.no_grad():
        expected = model.head(model.norm_f(x + block.mlp(block.norm2(x))))  # depth 1 without its attention
    torch.testing.assert_close(ablated, expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"carrier": "nope"}, "carrier"),
        ({"norm": "batchnorm"}, "norm"),
        ({"dim": 10, "heads": 4}, "heads must divide dim"),
        ({"layers": 0}, "layers"),
        ({"dropout": 1.0}, "dropout"),
        ({"bias": "no"}, "bias must be a bool"),
    ],
)
def test_bad_config_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LMConfig(vocab_size=5, **kwargs)


def test_bad_input_raises(gen):
    model = LM(LMConfig(vocab_size=5, context=4, layers=1, heads=1, dim=4))
    with pytest.raises(ValueError, match="exceeds the model's context"):
        model(torch.randint(0, 5, (1, 5), generator=gen))
    with pytest.raises(TypeError, match="integer"):
        model(torch.rand(1, 4, generator=gen))
    with pytest.raises(ValueError, match="vocab_size"):
        LM(LMConfig())


def test_implicit_layers_reach_their_fixed_point_and_stay_causal(gen):
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
    model = tiny_lm(implicit=True).double()
    idx = torch.randint(0, 9, (3, 8), generator=gen)
    calls: list[str] = []
    handle = model.hook_points()["blocks.0.output"].register_forward_hook(lambda m, _a, _o: calls.append(m.name))
    with torch.no_grad():
        with cached(model.hook_points().values()) as cache:
            model(idx)
        assert calls == ["blocks.0.output"]  # once, at the fixed point: the solver's iterates pass no point
        handle.remove()
        for i, block in enumerate(model.layer_blocks()):
            x, z = cache[f"blocks.{i}.input"], cache[f"blocks.{i}.norm1.input"]
            torch.testing.assert_close(cache[f"blocks.{i}.output"], block(x, z=z), rtol=0, atol=0)
            residual = (block(x, z=z) - z).norm() / z.norm()
            assert residual < 1e-3  # solver tolerance 1e-4 on the relative residual, one more step applied
            assert (z - block(x)).norm() / z.norm() > 1e-4  # the fixed point is not one explicit step
        changed = idx.clone()
        changed[:, 5:] = (idx[:, 5:] + 1) % 9
        a, b = model(idx)[0], model(changed)[0]
    # fixed-point iteration keeps every iterate causal; only the stopping step may differ
    torch.testing.assert_close(a[:, :5], b[:, :5], rtol=0, atol=1e-3)


def test_implicit_gradient_matches_unrolled_iterations(gen):
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
    cfg = LMConfig(vocab_size=9, context=6, layers=1, heads=2, dim=8, implicit=True)
    model = LM(cfg).double()
    idx = torch.randint(0, 9, (2, 6), generator=gen)
    _, loss = model(idx, idx)
    implicit = torch.autograd.grad(loss, list(model.parameters()))
    # reference: backpropagate through 60 explicit iterations z <- f(z, x) from z = x
    block = model.blocks[0]
    x = model.tok(idx) + model.pos(torch.arange(6))
    z = x
    for _ in range(60):
        z = block(x, z=z)
    logits = model.head(model.norm_f(z))
    ref = torch.nn.functional.cross_entropy(logits.flatten(0, 1), idx.flatten())
    unrolled = torch.autograd.grad(ref, list(model.parameters()))
    for a, b in zip(implicit, unrolled, strict=True):
        # forward tol 1e-4 and adjoint tol 1e-4 bound the relative gradient error at ~1e-3
        torch.testing.assert_close(a, b, rtol=2e-3, atol=2e-5)
    with pytest.raises(ValueError, match="dropout"):
        LMConfig(vocab_size=5, implicit=True, dropout=0.1)


def test_implicit_lm_exposes_its_jacobian_penalty_only_when_training(gen):
    """Training mode: regularizer = jacobian_reg * sum of the layers' penalties, a differentiable scalar (its
    gradient needs attention's second derivative); eval mode, no-grad or jacobian_reg=0: None."""
    idx = torch.randint(0, 9, (2, 8), generator=gen)
    torch.manual_seed(0)
    model = tiny_lm(implicit=True, jacobian_reg=5.0)
    _, loss = model(idx, idx)
    reg = model.regularizer
    assert reg is not None and reg.ndim == 0 and reg.item() > 0
    (loss + reg).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    model(idx, idx)
    assert model.regularizer is None
    torch.manual_seed(0)
    off = tiny_lm(implicit=True, jacobian_reg=0.0)
    off(idx, idx)
    assert off.regularizer is None
    with pytest.raises(ValueError, match="jacobian_reg"):
        LMConfig(vocab_size=9, jacobian_reg=-1.0)
