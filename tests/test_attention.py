"""Flash attention (frost.kernels) in Pallas interpret mode against the plain-jnp reference at the
end of its file: outputs and gradients for q, k, v, on small random shapes with sequence lengths
that do and do not divide the block size, causal or not, with and without a key padding mask,
fp32 / bf16 / fp16. Plus the frost.nn dispatch switch.

Tolerances (max abs error, on N(0, 1) inputs and cotangents; the reference computes in fp32):
  fp32: 1e-5 + 1e-5 |ref|    - the same math in another order
  fp16: 4e-3 + 4e-3 |ref|    - inputs, p and ds rounded to fp16 (11-bit mantissa) before each dot
  bf16: 3e-2 + 3e-2 |ref|    - likewise with bf16's 8-bit mantissa (2^-8 = 3.9e-3 per rounding)
Each case is one jitted value-and-grad, so one compile covers the forward and both backward
kernels; tiny blocks (16) keep several blocks per sequence in play.
"""

import jax
import jax.export
import jax.numpy as jnp
import numpy as np
import pytest

from frost.kernels import BlockSizes, attention_reference, flash_attention
from frost.nn import attention as nn_attention

TOL = {jnp.float32: 1e-5, jnp.float16: 4e-3, jnp.bfloat16: 3e-2}
SMALL = BlockSizes(16, 16, 16, 16, 16, 16)
MIXED = BlockSizes(
    block_q=32, block_k=16, block_q_dkv=16, block_k_dkv=32, block_q_dq=32, block_k_dq=16
)


def inputs(key, b, t, s, h, d, dtype, masked):
    kq, kk, kv, kdo, km = jax.random.split(key, 5)
    q = jax.random.normal(kq, (b, t, h, d), dtype)
    k = jax.random.normal(kk, (b, s, h, d), dtype)
    v = jax.random.normal(kv, (b, s, h, d), dtype)
    do = jax.random.normal(kdo, (b, t, h, d), dtype)
    mask = None
    if masked:  # ~30% of keys dropped; batch 0 keeps none, so all its rows are empty
        mask = jax.random.bernoulli(km, 0.7, (b, s)).at[0].set(b == 1)
    return q, k, v, do, mask


# Interpret mode makes big XLA programs that run in milliseconds: compile them without LLVM's
# expensive optimisations (halves the time of this file).
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def value_and_grads(fn, q, k, v, do):
    """Output and d<out, do>/d(q, k, v), in one jitted call."""

    def loss(q, k, v):
        out = fn(q, k, v)
        return jnp.sum(out.astype(jnp.float32) * do.astype(jnp.float32)), out

    step = (
        jax.jit(jax.value_and_grad(loss, (0, 1, 2), has_aux=True))
        .lower(q, k, v)
        .compile(FAST_COMPILE)
    )
    (_, out), grads = step(q, k, v)
    return (out, *grads)


def assert_close(got, want, dtype, names=("out", "dq", "dk", "dv")):
    tol = TOL[dtype]
    for name, a, b in zip(names, got, want):
        assert a.dtype == dtype, (name, a.dtype)
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=name)


CASES = [  # b, t, s, h, d, causal, masked, dtype, blocks
    (1, 16, 16, 1, 64, False, False, jnp.float32, SMALL),  # one block exactly
    (2, 67, 67, 1, 64, True, True, jnp.float32, SMALL),  # 67 = 4.2 blocks
    (
        2,
        67,
        40,
        2,
        64,
        True,
        True,
        jnp.float32,
        SMALL,
    ),  # cross-attention, T > S: late rows see every key
    (1, 40, 67, 1, 128, True, False, jnp.float32, SMALL),  # T < S, causal aligned top-left
    (2, 40, 40, 1, 80, False, True, jnp.float32, SMALL),  # head dim 80 padded to 128 in the tiles
    (1, 67, 67, 2, 64, True, True, jnp.float32, MIXED),  # unequal blocks: the causal loop bounds
    (1, 67, 67, 2, 64, True, False, jnp.bfloat16, SMALL),
    (2, 40, 40, 1, 128, False, True, jnp.bfloat16, SMALL),
    (1, 40, 40, 1, 64, True, False, jnp.float16, SMALL),
    (1, 67, 67, 1, 64, True, True, jnp.bfloat16, None),  # default blocks, shrunk to fit
]


@pytest.mark.parametrize("b,t,s,h,d,causal,masked,dtype,blocks", CASES)
def test_kernel_matches_reference(key, b, t, s, h, d, causal, masked, dtype, blocks):
    q, k, v, do, mask = inputs(key, b, t, s, h, d, dtype, masked)

    def kernel(q, k, v):
        return flash_attention(
            q,
            k,
            v,
            causal=causal,
            key_padding_mask=mask,
            block_sizes=blocks,
            interpret=True,
        )

    reference = lambda q, k, v: attention_reference(q, k, v, causal=causal, key_padding_mask=mask)  # noqa: E731
    got = value_and_grads(kernel, q, k, v, do)
    assert_close(got, value_and_grads(reference, q, k, v, do), dtype)
    if masked and b > 1:  # batch 0 attends to nothing: zeros out, zero gradients
        for a in got:
            assert not np.asarray(a[0], np.float32).any()


@pytest.mark.parametrize(
    "d,causal,masked,dtype", [(64, True, True, jnp.bfloat16), (80, False, False, jnp.float16)]
)
def test_lowers_to_triton(d, causal, masked, dtype):
    """The three kernels lower through Pallas's Triton backend (no GPU needed: export for "cuda"
    runs the lowering; compiling the Triton IR to PTX is left to a real GPU)."""
    q = jax.ShapeDtypeStruct((2, 300, 2, d), dtype)
    mask = jax.ShapeDtypeStruct((2, 300), jnp.bool_) if masked else None

    def loss(q, k, v, mask):
        def attend(q, k, v):
            return flash_attention(
                q,
                k,
                v,
                causal=causal,
                key_padding_mask=mask,
                interpret=False,
            )

        out, vjp = jax.vjp(attend, q, k, v)
        return vjp(out)

    triton = jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")
    exported = jax.export.export(jax.jit(loss), platforms=["cuda"], disabled_checks=[triton])(
        q, q, q, mask
    )
    text = exported.mlir_module()
    for name in ("frost_flash_forward", "frost_flash_dkdv", "frost_flash_dq"):
        assert f'name = "{name}"' in text


def test_reference_matches_jax_nn(key):
    q, k, v, _, mask = inputs(key, 2, 24, 24, 2, 32, jnp.float32, True)
    mask = mask.at[:, 0].set(True)  # no empty rows: there jax.nn averages v and we give zeros
    for causal in (False, True):
        want = jax.jit(jax.nn.dot_product_attention, static_argnames="is_causal")(
            q, k, v, mask=mask[:, None, None, :], is_causal=causal
        )
        got = jax.jit(attention_reference, static_argnames="causal")(
            q, k, v, causal=causal, key_padding_mask=mask
        )
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_custom_scale(key):
    q, k, v, _, _ = inputs(key, 1, 16, 16, 1, 64, jnp.float32, False)
    got = flash_attention(q, k, v, scale=0.3, block_sizes=SMALL)
    np.testing.assert_allclose(got, attention_reference(q, k, v, scale=0.3), rtol=1e-5, atol=1e-5)


def test_dispatch_switch(key, monkeypatch):
    q, k, v, _, mask = inputs(key, 2, 16, 16, 1, 64, jnp.float32, True)
    mask = mask.at[1, :5].set(False)  # batch 0 and batch 1's first 5 causal rows are empty
    assert nn_attention.attention_implementation() == "xla"  # the CPU default when nothing is set
    called = []
    real = nn_attention.flash_attention
    monkeypatch.setattr(
        nn_attention, "flash_attention", lambda *a, **kw: called.append(1) or real(*a, **kw)
    )
    attend = jax.jit(
        nn_attention.dot_product_attention, static_argnames=("causal", "implementation")
    )
    want = attention_reference(q, k, v, causal=True, key_padding_mask=mask)
    for impl in ("xla", "pallas"):  # the same function, empty rows (zeros) included
        got = attend(q, k, v, causal=True, key_padding_mask=mask, implementation=impl)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=impl)
    assert called == [1]
    previous = nn_attention.set_attention_implementation("pallas")
    try:
        assert nn_attention.attention_implementation() == "pallas"
        assert nn_attention.attention_implementation("xla") == "xla"  # the argument wins
        nn_attention.dot_product_attention(q, k, v, causal=True, key_padding_mask=mask)
        assert called == [1, 1]
    finally:
        nn_attention.set_attention_implementation(previous)
    with pytest.raises(ValueError, match="one of"):
        nn_attention.dot_product_attention(q, k, v, causal=False, implementation="cuda")
    with pytest.raises(ValueError, match="one of"):
        nn_attention.set_attention_implementation("triton")


def test_errors_teach(key):
    q, k, v, _, _ = inputs(key, 1, 16, 16, 1, 64, jnp.float32, False)
    with pytest.raises(ValueError, match=r"k, v \(B, S, H, D\)"):
        flash_attention(q, k[:, :, :, :32], v)
    with pytest.raises(ValueError, match="one float dtype"):
        flash_attention(q, k.astype(jnp.bfloat16), v)
    with pytest.raises(ValueError, match=r"key_padding_mask must be \(B, S\)"):
        flash_attention(q, k, v, key_padding_mask=jnp.ones((1, 15), bool))
    with pytest.raises(ValueError, match="power of two"):
        BlockSizes(block_q=48)
