"""frost.interop against transformers' GPT-2 and a torchvision-named ResNet written here, and
frost.text.io.load_gpt2 against transformers' GPT2Tokenizer: random weights, nothing downloaded."""

import json
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch
import torch.nn.functional as F
import transformers

from frost import interop, text
from frost.config import UsageError
from frost.models import gpt
from frost.text import io as text_io

transformers.logging.set_verbosity_error()
forward = jax.jit(lambda model, x: model(x))


def build(make, key):
    """make(key) compiled without XLA's backend optimisation: CPU compiles random-number code ~10x
    faster so."""
    return jax.jit(make, compiler_options={"xla_backend_optimization_level": 0})(key)


def close(actual, expected, rtol=1e-4):
    """Equal within rtol of the largest magnitude (fp32 through different kernels)."""
    expected = np.asarray(expected)
    np.testing.assert_allclose(
        np.asarray(actual), expected, rtol=rtol, atol=rtol * np.abs(expected).max()
    )


def randomise(module, seed):
    """Random weights everywhere (biases and LayerNorm too), large enough that GELU's tanh
    approximation and every bias change the logits."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(
                torch.randn_like(p) * (0.3 if p.ndim >= 2 else 0.2)
                + (name.endswith("ln_1.weight") or name.endswith("ln_2.weight"))
            )


# --- GPT-2 ---


@pytest.fixture(scope="module")
def hf_gpt2(tmp_path_factory):
    config = transformers.GPT2Config(
        vocab_size=96,
        n_positions=24,
        n_embd=32,
        n_layer=2,
        n_head=4,
        bos_token_id=0,
        eos_token_id=0,
    )
    ref = transformers.GPT2LMHeadModel(config).eval()
    randomise(ref, 0)
    path = tmp_path_factory.mktemp("gpt2")
    ref.save_pretrained(path)
    return ref, path


def hf_logits(ref, ids):
    with torch.no_grad():
        return ref(torch.tensor(np.asarray(ids))).logits.numpy()


def test_hf_gpt2_loads_with_the_same_logits(hf_gpt2):
    ref, path = hf_gpt2
    model = interop.load_hf_gpt2(path)
    assert model.blocks[0].gelu_approximate and model.head is None and model.pos.shape == (24, 32)
    ids = np.random.default_rng(0).integers(0, 96, (2, 24))
    close(forward(model, jnp.asarray(ids, jnp.int32)), hf_logits(ref, ids))


def test_frost_gpt_saves_as_hf_gpt2_and_loads_back(tmp_path, key):
    model = build(lambda k: gpt.GPT(50, 32, 2, 4, 16, tie_weights=False, key=k), key)
    rng = np.random.default_rng(1)
    model = jax.tree.map(
        lambda a: a + jnp.asarray(0.2 * rng.standard_normal(a.shape), a.dtype), model
    )
    interop.save_hf_gpt2(model, tmp_path)
    ref = transformers.GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    assert ref.config.activation_function == "gelu" and not ref.config.tie_word_embeddings
    ids = np.random.default_rng(1).integers(0, 50, (3, 16))
    close(forward(model, jnp.asarray(ids, jnp.int32)), hf_logits(ref, ids))
    back = interop.load_hf_gpt2(tmp_path)
    for a, b in zip(jax.tree.leaves(model), jax.tree.leaves(back)):
        np.testing.assert_array_equal(a, b)


def test_gpt2_mismatches_are_one_error(hf_gpt2, tmp_path, key):
    _, path = hf_gpt2
    weights = safetensors.numpy.load_file(str(path / "model.safetensors"))
    weights["transformer.h.0.mlp.c_fc.weight"] = weights["transformer.h.0.mlp.c_fc.weight"][
        :, :-1
    ].copy()
    del weights["transformer.ln_f.bias"]
    weights["transformer.h.9.attn.c_attn.weight"] = weights["transformer.h.1.attn.c_attn.weight"]
    safetensors.numpy.save_file(
        weights, str(tmp_path / "model.safetensors"), metadata={"format": "pt"}
    )
    config = json.loads((path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UsageError) as error:
        interop.load_hf_gpt2(tmp_path)
    assert str(error.value) == (
        f"{tmp_path}: the weights do not fit the model: missing keys: transformer.ln_f.bias; "
        "unexpected keys: transformer.h.9.attn.c_attn.weight; shapes that differ: "
        "transformer.h.0.mlp.c_fc.weight [32, 127] (the model's is [32, 128])"
    )
    (tmp_path / "config.json").write_text(json.dumps({**config, "activation_function": "relu"}))
    with pytest.raises(
        UsageError, match=r"config.json: Frost's GPT does not support activation_function='relu'"
    ):
        interop.load_hf_gpt2(tmp_path)
    with pytest.raises(UsageError, match="config.json: cannot read it as JSON"):
        interop.load_hf_gpt2(tmp_path / "nowhere")
    with pytest.raises(UsageError, match="rotary positions"):
        interop.save_hf_gpt2(
            jax.eval_shape(lambda k: gpt.GPT(10, 16, 1, 2, 8, rotary=True, key=k), key), tmp_path
        )


def write_gpt2_tokenizer_files(tok, folder, seed=0):
    """vocab.json + merges.txt of a Frost tokenizer, its ids shuffled (HF's files number tokens
    freely)."""
    chars = text_io._byte_chars()
    names = ["".join(chars[b] for b in token) for token in tok.vocab] + list(tok.special)
    order = list(range(len(names)))
    random.Random(seed).shuffle(order)
    (folder / "vocab.json").write_text(
        json.dumps(dict(zip(names, order)), ensure_ascii=False), encoding="utf-8"
    )
    lines = ["#version: 0.2"] + [f"{names[a]} {names[b]}" for a, b, _ in tok.merges]
    (folder / "merges.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_gpt2_tokenizer_files_give_hf_ids(tmp_path):
    corpus = (
        text.kjv_text()[:30000] + "\nCafé naïve 日本語 ünïcödé — isn't it? I'll've 12345 678\n" * 20
    )
    tok = text.train(corpus, 600, pattern=text_io.GPT2_PATTERN, special_tokens=["<|endoftext|>"])
    write_gpt2_tokenizer_files(tok, tmp_path)
    ours = text_io.load_gpt2(tmp_path)
    hf = transformers.GPT2Tokenizer.from_pretrained(tmp_path)
    samples = [
        "In the beginning God created the heaven and the earth.",
        "  two  spaces,\n\nnewlines\t tabs ",
        "isn't it? we'll've 2024 and 3.14159",
        "Café 日本語 🙂 naïve — ünïcödé",
        corpus[5000:9000],
    ]
    for s in samples:
        ids = ours.encode(s)
        assert ids == hf.encode(s), s
        assert ours.decode(ids) == s
    both = "the end<|endoftext|>The beginning"
    assert ours.encode(both, special="allow") == hf.encode(both)
    (tmp_path / "merges.txt").write_text("#version: 0.2\nq\u0120 zz\n", encoding="utf-8")
    with pytest.raises(
        UsageError, match=r"merges.txt line 2: 'qĠ zz' is not a merge of two earlier tokens"
    ):
        text_io.load_gpt2(tmp_path)


def test_frost_sample_hf_samples_from_a_gpt2_folder(tmp_path, capsys):
    from frost.cli import main as cli

    tok = text.train(
        text.kjv_text()[:20000], 320, pattern=text_io.GPT2_PATTERN, special_tokens=["<|endoftext|>"]
    )
    write_gpt2_tokenizer_files(tok, tmp_path)
    config = transformers.GPT2Config(
        vocab_size=tok.vocab_size, n_positions=32, n_embd=32, n_layer=1, n_head=2
    )
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path)
    assert cli(["sample", "--hf", str(tmp_path), "--prompt", "And God said", "--tokens", "6"]) == 0
    assert capsys.readouterr().out.startswith("And God said")
    # a run directory or --hf, not both
    assert cli(["sample", "--hf", str(tmp_path), str(tmp_path)]) == 2
    assert "one of them" in capsys.readouterr().err


# --- torchvision ResNets ---


class Basic(torch.nn.Module):
    expansion = 1

    def __init__(self, cin, width, stride):
        super().__init__()
        self.conv1, self.bn1 = (
            torch.nn.Conv2d(cin, width, 3, stride, 1, bias=False),
            torch.nn.BatchNorm2d(width),
        )
        self.conv2, self.bn2 = (
            torch.nn.Conv2d(width, width, 3, 1, 1, bias=False),
            torch.nn.BatchNorm2d(width),
        )
        self.downsample = (
            None
            if stride == 1 and cin == width
            else torch.nn.Sequential(
                torch.nn.Conv2d(cin, width, 1, stride, bias=False), torch.nn.BatchNorm2d(width)
            )
        )

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (x if self.downsample is None else self.downsample(x)))


class Bottleneck(torch.nn.Module):
    expansion = 4

    def __init__(self, cin, width, stride):
        super().__init__()
        self.conv1, self.bn1 = (
            torch.nn.Conv2d(cin, width, 1, bias=False),
            torch.nn.BatchNorm2d(width),
        )
        self.conv2, self.bn2 = (
            torch.nn.Conv2d(width, width, 3, stride, 1, bias=False),
            torch.nn.BatchNorm2d(width),
        )
        self.conv3, self.bn3 = (
            torch.nn.Conv2d(width, 4 * width, 1, bias=False),
            torch.nn.BatchNorm2d(4 * width),
        )
        self.downsample = (
            None
            if stride == 1 and cin == 4 * width
            else torch.nn.Sequential(
                torch.nn.Conv2d(cin, 4 * width, 1, stride, bias=False),
                torch.nn.BatchNorm2d(4 * width),
            )
        )

    def forward(self, x):
        y = F.relu(self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))
        return F.relu(
            self.bn3(self.conv3(y)) + (x if self.downsample is None else self.downsample(x))
        )


class TorchvisionResNet(torch.nn.Module):
    """torchvision.models.resnet's module names and layout (torchvision is not installed here)."""

    def __init__(self, block, depths, classes):
        super().__init__()
        self.conv1, self.bn1 = torch.nn.Conv2d(3, 64, 7, 2, 3, bias=False), torch.nn.BatchNorm2d(64)
        self.relu, self.maxpool = torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1)
        cin = 64
        for stage, (depth, width) in enumerate(zip(depths, (64, 128, 256, 512))):
            blocks = []
            for i in range(depth):
                blocks.append(block(cin, width, 2 if stage > 0 and i == 0 else 1))
                cin = width * block.expansion
            setattr(self, f"layer{stage + 1}", torch.nn.Sequential(*blocks))
        self.avgpool, self.fc = torch.nn.AdaptiveAvgPool2d(1), torch.nn.Linear(cin, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


TORCH_RESNETS = {
    "resnet18": (Basic, (2, 2, 2, 2)),
    "resnet34": (Basic, (3, 4, 6, 3)),
    "resnet50": (Bottleneck, (3, 4, 6, 3)),
}


def torch_resnet(name, classes=7, seed=0):
    torch.manual_seed(seed)
    model = TorchvisionResNet(*TORCH_RESNETS[name], classes)
    with torch.no_grad():  # non-trivial BatchNorm statistics and affine parameters
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.2), m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5), m.bias.normal_(0, 0.2)
    return model.eval()


@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
def test_torchvision_resnet_loads_and_round_trips(name, tmp_path):
    ref = torch_resnet(name)
    x = np.random.default_rng(0).standard_normal((2, 40, 40, 3)).astype(np.float32)
    with torch.no_grad():
        expected = ref(torch.tensor(x.transpose(0, 3, 1, 2))).numpy()
    state = ref.state_dict()
    safetensors.torch.save_file(state, str(tmp_path / "w.safetensors"))
    torch.save(state, tmp_path / "w.pth")
    sources = [tmp_path / "w.safetensors"] + (
        [state, tmp_path / "w.pth"] if name == "resnet18" else []
    )
    for source in sources:
        model = interop.load_torch_resnet(source, name)
        close(forward(model, jnp.asarray(x)), expected)
    back = interop.torch_state_dict(model)
    assert set(back) == set(state)
    for k, v in state.items():
        np.testing.assert_array_equal(
            back[k], v.numpy() if "num_batches" not in k else 0, err_msg=k
        )
    fresh = TorchvisionResNet(*TORCH_RESNETS[name], 7).eval()
    fresh.load_state_dict({k: torch.from_numpy(v) for k, v in back.items()}, strict=True)
    with torch.no_grad():
        np.testing.assert_array_equal(
            fresh(torch.tensor(x.transpose(0, 3, 1, 2))).numpy(), expected
        )


def test_resnet_mismatches_are_one_error(key, tmp_path):
    ref = torch_resnet("resnet18")
    state = {k: v.numpy() for k, v in ref.state_dict().items()}
    with pytest.raises(UsageError, match=r"got TorchvisionResNet \(pass its .state_dict\(\)\)"):
        interop.load_torch_resnet(ref, "resnet18")
    (tmp_path / "junk.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(UsageError, match="junk.safetensors: not a readable safetensors file"):
        interop.load_torch_resnet(tmp_path / "junk.safetensors", "resnet18")
    with pytest.raises(
        UsageError,
        match=r"missing keys: layer1.2.bn1.bias, .* \(and \d+ more\); unexpected keys: none",
    ):
        interop.load_torch_resnet(state, "resnet34")
    nan = dict(state, **{"layer3.1.bn2.weight": np.full(256, np.nan, np.float32)})
    with pytest.raises(interop.WeightsError, match=r"non-finite values \(NaN or inf\) in layer3"):
        interop.load_torch_resnet(nan, "resnet18")
    state["layer2.0.conv1.weight"] = state["layer2.0.conv1.weight"][:, :, :1, :1]
    state["layer5.0.conv1.weight"] = state.pop("layer4.1.conv2.weight")
    with pytest.raises(UsageError) as error:
        interop.load_torch_resnet(state, "resnet18")
    assert str(error.value).endswith(
        "missing keys: layer4.1.conv2.weight; unexpected keys: layer5.0.conv1.weight; shapes that "
        "differ: layer2.0.conv1.weight [128, 64, 1, 1] (the model's is [128, 64, 3, 3])"
    )
    with pytest.raises(
        UsageError, match="name 'resnet20': choose one of resnet18, resnet34, resnet50"
    ):
        interop.load_torch_resnet(state, "resnet20")
    with pytest.raises(UsageError, match="only the ImageNet ResNets"):
        interop.torch_state_dict(jax.eval_shape(lambda k: interop.resnet.resnet20(key=k), key))
