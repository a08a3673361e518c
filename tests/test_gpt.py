"""The GPT against a small PyTorch reference with the same weights, and KV-cache generation
against recomputing the whole sequence."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from frost.models import gpt


def torch_rotary(x, positions):  # (B, T, H, D)
    d = x.shape[-1] // 2
    freqs = 1.0 / (10000 ** (torch.arange(d, dtype=torch.float32) / d))
    angles = positions.float()[:, None] * freqs[None, :]
    cos, sin = angles.cos()[None, :, None, :], angles.sin()[None, :, None, :]
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


class TorchGPT(torch.nn.Module):
    """nanoGPT's model, written independently: pre-norm blocks, causal attention, GELU MLP."""

    def __init__(self, V, C, L, H, T, use_rotary):
        super().__init__()
        self.H, self.use_rotary = H, use_rotary
        self.wte = torch.nn.Embedding(V, C)
        self.wpe = None if use_rotary else torch.nn.Parameter(torch.zeros(T, C))
        self.blocks = torch.nn.ModuleList()
        for _ in range(L):
            b = torch.nn.Module()
            b.ln1, b.ln2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
            b.qkv, b.proj = torch.nn.Linear(C, 3 * C), torch.nn.Linear(C, C)
            b.fc, b.out = torch.nn.Linear(C, 4 * C), torch.nn.Linear(4 * C, C)
            self.blocks.append(b)
        self.ln_f = torch.nn.LayerNorm(C)

    def forward(self, ids):
        B, T = ids.shape
        pos = torch.arange(T)
        x = self.wte(ids) + (0 if self.wpe is None else self.wpe[:T][None])
        for b in self.blocks:
            h = b.ln1(x)
            q, k, v = b.qkv(h).split(h.shape[-1], dim=2)
            q, k, v = (t.view(B, T, self.H, -1) for t in (q, k, v))
            if self.use_rotary:
                q, k = torch_rotary(q, pos), torch_rotary(k, pos)
            att = (q.transpose(1, 2) @ k.transpose(1, 2).transpose(-1, -2)) / math.sqrt(q.shape[-1])
            att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
            y = (att.softmax(-1) @ v.transpose(1, 2)).transpose(1, 2).reshape(B, T, -1)
            x = x + b.proj(y)
            x = x + b.out(F.gelu(b.fc(b.ln2(x))))
        return self.ln_f(x) @ self.wte.weight.T


def copy_weights(model, ref):
    with torch.no_grad():
        ref.wte.weight.copy_(torch.tensor(np.asarray(model.embed.weight)))
        if model.pos is not None:
            ref.wpe.copy_(torch.tensor(np.asarray(model.pos)))
        for b, tb in zip(model.blocks, ref.blocks):
            for name in ("ln1", "ln2"):
                getattr(tb, name).weight.copy_(torch.tensor(np.asarray(getattr(b, name).weight)))
                getattr(tb, name).bias.copy_(torch.tensor(np.asarray(getattr(b, name).bias) + 0.1))
            for name in ("qkv", "proj", "fc", "out"):
                getattr(tb, name).weight.copy_(torch.tensor(np.asarray(getattr(b, name).weight).T))
                getattr(tb, name).bias.copy_(torch.tensor(np.asarray(getattr(b, name).bias)))
    # Give the frost LayerNorm biases the same non-zero values.
    blocks = tuple(
        b.replace(
            ln1=b.ln1.replace(bias=b.ln1.bias + 0.1), ln2=b.ln2.replace(bias=b.ln2.bias + 0.1)
        )
        for b in model.blocks
    )
    return model.replace(blocks=blocks)


@pytest.mark.parametrize("use_rotary", [False, True])
def test_logits_match_torch(key, use_rotary):
    V, C, L, H, T = 50, 32, 2, 4, 16
    model = gpt.GPT(V, C, L, H, T, rotary=use_rotary, key=key)
    ref = TorchGPT(V, C, L, H, T, use_rotary)
    model = copy_weights(model, ref)
    ids = np.random.default_rng(0).integers(0, V, (2, 11))
    logits = jax.jit(lambda m, i: m(i))(model, jnp.asarray(ids, jnp.int32))
    expected = ref(torch.tensor(ids)).detach().numpy()
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)


def test_kv_cache_generation_equals_full_recompute(key):
    model = gpt.GPT(40, 32, 2, 2, 24, rotary=True, key=key)
    prompt = jnp.asarray(np.random.default_rng(1).integers(0, 40, (2, 5)), jnp.int32)
    out = gpt.generate(model, prompt, 8, key=key, temperature=0.0)
    # the whole sequence recomputed for each token, at one length (13: one compile, not eight): the
    # model is causal, so the positions from t on (zeros still) do not change logits[:, t - 1]
    tokens = jnp.zeros((2, 13), jnp.int32).at[:, :5].set(prompt)
    full = jax.jit(lambda m, t: m(t))
    for t in range(5, 13):
        nxt = jnp.argmax(full(model, tokens)[:, t - 1], -1).astype(jnp.int32)
        tokens = tokens.at[:, t].set(nxt)
    np.testing.assert_array_equal(out, tokens)


def test_sampling_respects_top_k_and_is_deterministic_per_key(key):
    logits = jnp.asarray(np.random.default_rng(0).standard_normal((4, 30)), jnp.float32)
    draws = jnp.stack(
        [gpt.sample_token(logits, jax.random.key(i), 1.0, top_k=3) for i in range(50)]
    )
    top3 = np.argsort(-np.asarray(logits), axis=1)[:, :3]
    assert all(int(d) in top3[b] for row in np.asarray(draws) for b, d in enumerate(row))
    np.testing.assert_array_equal(
        gpt.sample_token(logits, key, 0.7, 5), gpt.sample_token(logits, key, 0.7, 5)
    )


def test_errors(key):
    model = gpt.GPT(10, 16, 1, 2, 8, key=key)
    with pytest.raises(
        ValueError, match=r"GPT\(max_len=8\) expected input \(B, T\) token ids with T <= max_len=8"
    ):
        model(jnp.zeros((1, 9), jnp.int32))
    with pytest.raises(ValueError, match="exceeds max_len=8"):
        gpt.generate(model, jnp.zeros((1, 4), jnp.int32), 5, key=key)
    with pytest.raises(ValueError, match="heads=3 must divide dim=16"):
        gpt.GPT(10, 16, 1, 3, 8, key=key)


def build(make, key):
    """make(key) compiled without XLA's backend optimisation: CPU compiles random-number code ~10x
    faster so."""
    return jax.jit(make, compiler_options={"xla_backend_optimization_level": 0})(key)


def test_gpt2_initialisation(key):
    depth = 3
    model = build(lambda k: gpt.GPT(256, 128, depth, 4, 128, tie_weights=False, key=k), key)
    b = model.blocks[depth - 1]
    residual = 0.02 / math.sqrt(2 * depth)
    for name, w, std in [
        ("embed", model.embed.weight, 0.02),
        ("pos", model.pos, 0.02),
        ("head", model.head.weight, 0.02),
        ("qkv", b.qkv.weight, 0.02),
        ("fc", b.fc.weight, 0.02),
        ("proj", b.proj.weight, residual),
        ("out", b.out.weight, residual),
    ]:
        w = np.asarray(w)
        assert abs(w.std() / std - 1) < 0.03 and abs(w.mean()) < 0.05 * std, name
    for layer in (b.qkv, b.proj, b.fc, b.out, b.ln1):
        assert not np.any(np.asarray(layer.bias))
    assert model.head.bias is None and np.all(np.asarray(b.ln2.weight) == 1)


def test_generate_compiles_once_per_shape(key):
    model, other = (
        build(lambda k: gpt.GPT(30, 16, 1, 2, 16, key=k), k) for k in (key, jax.random.key(5))
    )
    rng = np.random.default_rng(2)
    prompts = [jnp.asarray(rng.integers(0, 30, (2, 3)), jnp.int32) for _ in range(3)]
    first = gpt.generate(model, prompts[0], 5, key=key, top_k=4)
    compiled = gpt._generate._cache_size()
    second = gpt.generate(other, prompts[1], 5, key=jax.random.key(1), top_k=4)
    gpt.generate(model, prompts[2], 5, key=jax.random.key(2), top_k=4)
    assert gpt._generate._cache_size() == compiled
    assert first.shape == second.shape == (2, 8) and not np.array_equal(first, second)
