"""Weights in and out: Hugging Face GPT-2 checkpoints and torchvision ResNets, from files a user
has.

```python
model = load_hf_gpt2("gpt2/")  # config.json + model.safetensors -> frost.models.gpt.GPT
save_hf_gpt2(model, "out/")  # transformers.GPT2LMHeadModel.from_pretrained("out/") loads it
tok = frost.text.io.load_gpt2("gpt2/")  # vocab.json + merges.txt -> Frost's BPE, HF's ids
net = load_torch_resnet("resnet50.safetensors", "resnet50")  # torchvision names -> Frost ResNet
state = torch_state_dict(net)  # the reverse: {torchvision name: numpy array}
```

Nothing downloads. Each Frost leaf has a PyTree path (`blocks.0.qkv.weight`); a renaming rule
maps it to the peer's name (`transformer.h.0.attn.c_attn.weight`) and says whether the layout
differs: torch's Linear weight is (out, in) and Conv2d's (out, in, kh, kw), Frost's (in, out)
and (kh, kw, in, out); transformers' GPT-2 `Conv1D` is (in, out) already, so only an untied
`lm_head` is transposed there. Loading builds the model's shapes with `jax.eval_shape` (no
random initialisation), compares them with the file's, and reports every missing key,
unexpected key and differing shape in one `WeightsError` (a `frost.config.UsageError`).
"""

import json
import pathlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike
from safetensors.flax import load_file, save

from frost import atomic
from frost.config import UsageError, needs, optional, positive, whole
from frost.models import gpt, resnet
from frost.tree import names

GPT2_LAYERS = {
    "ln1": "ln_1",
    "ln2": "ln_2",
    "qkv": "attn.c_attn",
    "proj": "attn.c_proj",
    "fc": "mlp.c_fc",
    "out": "mlp.c_proj",
}
# activation_function -> tanh approximation?
GPT2_GELU = {"gelu_new": True, "gelu_pytorch_tanh": True, "gelu": False}
# Frost layout -> torch's, by rank: (in, out) -> (out, in); (kh, kw, in, out) -> (out, in, kh, kw);
# and back
TORCH_AXES = {2: (1, 0), 4: (3, 2, 0, 1)}
FROST_AXES = {2: (1, 0), 4: (2, 3, 1, 0)}
RESNETS = {"resnet18": resnet.resnet18, "resnet34": resnet.resnet34, "resnet50": resnet.resnet50}


class WeightsError(UsageError):
    """Weights that do not fit the model: missing, unexpected or differently shaped keys."""


def _named_leaves(tree, rename) -> list:
    """[(peer name, transposed?, leaf)] for the leaves of `tree` in order; `rename(path, ndim)`
    names them from their dotted PyTree path ('blocks.0.qkv.weight')."""
    return [(*rename(name, len(leaf.shape)), leaf) for name, leaf in names(tree)]


def _brief(keys, limit=8) -> str:
    keys = sorted(keys)
    more = f" (and {len(keys) - limit} more)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more or "none"


def read_weights(source: str | pathlib.Path | dict) -> dict[str, np.ndarray]:
    """A state dict from a safetensors file, a .pth/.bin file (read with
    torch.load(weights_only=True), when torch is installed), or a dict of arrays or torch
    tensors.

    Arguments:
        source: a file path (.safetensors, or .pth/.pt/.bin with torch), or a dict {name: numpy
            array or torch tensor}.

    Returns:
        {name: numpy array}: floating torch tensors as float32 (bfloat16 too); safetensors'
        bfloat16 kept as bfloat16.
    """
    if isinstance(source, dict):  # torch tensors (bf16 too) or arrays
        return {
            k: v.detach().cpu().float().numpy()
            if hasattr(v, "detach") and v.is_floating_point()
            else np.asarray(v)
            for k, v in source.items()
        }
    if not isinstance(source, (str, pathlib.Path)):
        raise UsageError(
            f"weights: expected a file path or a dict of arrays, got {type(source).__name__}"
            + (" (pass its .state_dict())" if hasattr(source, "state_dict") else "")
        )
    path = pathlib.Path(source)
    if not path.is_file():
        raise UsageError(f"{path}: no such weights file")
    if path.suffix in (".pth", ".pt", ".bin"):
        how = "torch, or convert the file to safetensors with safetensors.torch.save_file"
        needs("torch", f"{path}: reading a PyTorch file", how)
        import torch

        try:
            loaded = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:
            raise UsageError(f"{path}: not a readable PyTorch weights file ({e})") from None
        if not isinstance(loaded, dict):
            raise UsageError(f"{path}: holds a {type(loaded).__name__}, not a state dict")
        return read_weights(loaded)
    try:
        # the flax reader: bfloat16 too
        return {k: np.asarray(v) for k, v in load_file(str(path)).items()}
    except Exception as e:
        raise UsageError(f"{path}: not a readable safetensors file ({e})") from None


def read_json(path: str | pathlib.Path, checks: dict[str, Callable[[Any], str | None]]) -> dict:
    """The JSON object in the file `path`, each field named in `checks` allowed by its check; a
    UsageError naming the file and the field otherwise. The one validation of the JSON files a
    checkpoint folder brings.

    Arguments:
        path: the JSON file.
        checks: {field: check}, the checks of frost.config (`whole(1)`, `positive`, ...): a
            check returns None for a good value, else what is wrong with it. A field the file
            lacks is not checked.

    Returns:
        The file's object, as `json.loads` gives it.
    """
    try:
        value = json.loads(pathlib.Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"{path}: cannot read it as JSON ({e})") from None
    if not isinstance(value, dict):
        raise UsageError(f"{path}: holds a JSON {type(value).__name__}, not an object")
    for key, check in checks.items():
        problem = check(value[key]) if key in value else None
        if problem:
            raise UsageError(f"{path}: {key} {value[key]!r}: {problem}")
    return value


def _fill(template, weights: dict, rename, source, ignore=()):
    """`template` (a tree of ShapeDtypeStructs) filled from `weights` {peer name: array};
    `rename(path, ndim)` gives a leaf's (peer name, transposed?). Keys ending in `ignore` may be
    left over."""
    wanted = {}  # peer name -> (leaf, transposed?, peer's shape)
    for name, t, leaf in _named_leaves(template, rename):
        shape = tuple(leaf.shape[i] for i in TORCH_AXES[leaf.ndim]) if t else tuple(leaf.shape)
        wanted[name] = (leaf, t, shape)
    missing = set(wanted) - set(weights)
    unexpected = {k for k in set(weights) - set(wanted) if not k.endswith(tuple(ignore))}
    shapes = [
        f"{k} {list(weights[k].shape)} (the model's is {list(s)})"
        for k, (_, _, s) in wanted.items()
        if k in weights and tuple(weights[k].shape) != s
    ]
    if missing or unexpected or shapes:
        raise WeightsError(
            f"{source}: the weights do not fit the model: missing keys: {_brief(missing)}; "
            f"unexpected keys: {_brief(unexpected)}; shapes that differ: {_brief(shapes)}"
        )
    nonfinite = [k for k in wanted if not np.isfinite(weights[k]).all()]
    if nonfinite:
        raise WeightsError(
            f"{source}: non-finite values (NaN or inf) in {_brief(nonfinite)}; the weights are "
            "damaged, or come from a run that diverged"
        )
    leaves = []
    for k, (leaf, t, _) in wanted.items():
        array = weights[k].transpose(FROST_AXES[leaf.ndim]) if t else weights[k]
        leaves.append(jnp.asarray(array.astype(leaf.dtype)))
    return jax.tree.unflatten(jax.tree.structure(template), leaves)


def _export(model, rename) -> dict:
    return {
        name: np.array(np.asarray(leaf).transpose(TORCH_AXES[leaf.ndim]) if t else leaf, order="C")
        for name, t, leaf in _named_leaves(model, rename)
    }  # np.array: a writable copy


# --- GPT-2 (transformers' GPT2LMHeadModel) ---


def _gpt2_name(path: str, ndim: int) -> tuple[str, bool]:
    parts = path.split(".")
    if parts[0] == "blocks":  # blocks.3.qkv.weight -> transformer.h.3.attn.c_attn.weight
        return f"transformer.h.{parts[1]}.{GPT2_LAYERS[parts[2]]}.{parts[3]}", False
    if parts[0] == "head":
        return "lm_head.weight", True
    top = {"embed.weight": "transformer.wte.weight", "pos": "transformer.wpe.weight"}
    return top.get(path, "transformer." + path), False


def _gpt2_options(config: dict, source) -> dict:
    """GPT's constructor arguments for a transformers GPT2Config (its defaults fill missing
    fields)."""
    if config.get("model_type") != "gpt2":
        raise UsageError(
            f"{source}: model_type {config.get('model_type')!r}, but only 'gpt2' checkpoints load"
        )
    dim = config.get("n_embd", 768)
    act = config.get("activation_function", "gelu_new")
    unsupported = [
        f"{k}={config.get(k)!r}"
        for k, ok in [
            ("activation_function", act in GPT2_GELU),
            ("n_inner", config.get("n_inner") in (None, 4 * dim)),
            ("scale_attn_weights", config.get("scale_attn_weights", True)),
            ("scale_attn_by_inverse_layer_idx", not config.get("scale_attn_by_inverse_layer_idx")),
            ("add_cross_attention", not config.get("add_cross_attention")),
        ]
        if not ok
    ]
    if unsupported:
        raise UsageError(f"{source}: Frost's GPT does not support {', '.join(unsupported)}")
    if dim % config.get("n_head", 12):
        raise UsageError(f"{source}: n_head {config.get('n_head', 12)} must divide n_embd {dim}")
    return dict(
        vocab_size=config.get("vocab_size", 50257),
        dim=dim,
        depth=config.get("n_layer", 12),
        heads=config.get("n_head", 12),
        max_len=config.get("n_positions", 1024),
        rotary=False,
        tie_weights=config.get("tie_word_embeddings", True),
        gelu_approximate=GPT2_GELU[act],
        eps=config.get("layer_norm_epsilon", 1e-5),
    )


# the fields of a GPT2Config and of a sharded checkpoint's index that Frost reads, and their checks
GPT2_CONFIG = dict.fromkeys(("n_embd", "n_layer", "n_head", "n_positions", "vocab_size"), whole(1))
GPT2_CONFIG.update(layer_norm_epsilon=positive, n_inner=optional(whole(1)))


def _file_map(weight_map) -> str | None:
    ok = isinstance(weight_map, dict) and all(isinstance(f, str) for f in weight_map.values())
    return None if ok else "must map each weight's name to its file's name"


INDEX = {"weight_map": _file_map}


def load_hf_gpt2(path: str | pathlib.Path, dtype: DTypeLike = jnp.float32) -> gpt.GPT:
    """A transformers GPT-2 checkpoint folder -> a Frost GPT with the same logits.

    Arguments:
        path: the folder: config.json, and model.safetensors, a sharded checkpoint
            (model.safetensors.index.json and its files), or pytorch_model.bin (with torch).
        dtype: the dtype of the model's arrays.

    Returns:
        The `frost.models.gpt.GPT` (learned positions, GPT-2's GELU), tied or not as the config
        says.

    Raises:
        WeightsError: the weights do not fit the configuration (every missing, unexpected and
            differently shaped key named), or hold NaN or inf.
    """
    path = pathlib.Path(path)
    config = read_json(path / "config.json", GPT2_CONFIG)
    options = _gpt2_options(config, path / "config.json")
    index = path / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(read_json(index, INDEX).get("weight_map", {}).values()))
    else:
        found = [f for f in ("model.safetensors", "pytorch_model.bin") if (path / f).is_file()]
        files = found[:1] or ["model.safetensors"]
    weights = {k: v for f in files for k, v in read_weights(path / f).items()}
    if not any(k.startswith("transformer.") for k in weights):  # saved from GPT2Model: no prefix
        weights = {
            ("" if k.startswith("lm_head.") else "transformer.") + k: v for k, v in weights.items()
        }
    template = jax.eval_shape(lambda k: gpt.GPT(**options, key=k), jax.random.key(0))
    template = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, dtype), template)
    # the causal-mask buffers, and a tied model's lm_head (an untied one's is a wanted key)
    ignore = (".attn.bias", ".attn.masked_bias", "lm_head.weight")
    return _fill(template, weights, _gpt2_name, path, ignore)


def save_hf_gpt2(model: gpt.GPT, path: str | pathlib.Path) -> pathlib.Path:
    """Write `model` as a transformers GPT-2 checkpoint folder (config.json + model.safetensors),
    which `transformers.GPT2LMHeadModel.from_pretrained(path)` loads.

    Arguments:
        model: a GPT with learned positions (`GPT(rotary=False)`).
        path: the folder, made if missing.

    Returns:
        `path`, as a `pathlib.Path`.
    """
    if model.pos is None:
        raise UsageError(
            "save_hf_gpt2: this GPT uses rotary positions, which GPT-2 does not have; "
            "only a GPT(rotary=False) (learned positions) can be written as GPT-2"
        )
    block = model.blocks[0]
    vocab, dim = model.embed.weight.shape
    config = {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": vocab,
        "n_embd": dim,
        "n_positions": model.max_len,
        "n_layer": len(model.blocks),
        "n_head": block.heads,
        "n_inner": None,
        "activation_function": "gelu_new" if block.gelu_approximate else "gelu",
        "layer_norm_epsilon": block.ln1.eps,
        "tie_word_embeddings": model.head is None,
        "resid_pdrop": block.drop.p,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "bos_token_id": None,
        "eos_token_id": None,
        "dtype": np.dtype(model.embed.weight.dtype).name,
    }
    path = pathlib.Path(path)
    path.mkdir(parents=True, exist_ok=True)
    weights = {k: jnp.asarray(v) for k, v in _export(model, _gpt2_name).items()}
    atomic.write(path / "model.safetensors", save(weights, metadata={"format": "pt"}))
    atomic.write(path / "config.json", json.dumps(config, indent=1))
    return path


# --- torchvision ResNets ---


def _resnet_rename(model):
    """The renaming rule of `model`'s leaves. Each block's torchvision prefix ('layer2.0') comes
    from its position: a stage starts with the first block or a projection."""
    stages = []  # each block's prefix: "layer{stage}.{index in the stage}"
    stage = 0
    index = 0
    for i, block in enumerate(model.blocks):
        if i == 0 or block.shortcut is not None:  # the first block of a stage
            stage += 1
            index = 0
        else:
            index += 1
        stages.append(f"layer{stage}.{index}")

    def rename(path: str, ndim: int) -> tuple[str, bool]:
        """(torchvision name, transposed?): conv and fc weights (ndim >= 2) are transposed."""
        # stem.layers.1.running_mean, blocks.4.shortcut.layers.0.weight, head.bias
        p = path.split(".")
        if p[0] == "stem":
            return ("conv1." if p[2] == "0" else "bn1.") + p[3], ndim >= 2
        if p[0] == "head":
            return "fc." + p[1], ndim >= 2
        rest = ".".join(p[2:]).replace("shortcut.layers", "downsample")
        return f"{stages[int(p[1])]}.{rest}", ndim >= 2

    return rename


def load_torch_resnet(state_dict: str | pathlib.Path | dict, name: str) -> resnet.ResNet:
    """A torchvision-named ResNet-18/34/50 state dict -> the Frost ResNet with the same eval-mode
    outputs (BatchNorm statistics included). The number of classes and of input channels are
    read from the weights' `fc` and `conv1` shapes.

    Arguments:
        state_dict: a safetensors or .pth file, or a dict {torchvision name: array or tensor}.
        name: "resnet18", "resnet34" or "resnet50".

    Returns:
        The `frost.models.resnet.ResNet`, its arrays float32.

    Raises:
        WeightsError: the weights do not fit the model (every missing, unexpected and
            differently shaped key named), or hold NaN or inf.
    """
    if name not in RESNETS:
        raise UsageError(f"load_torch_resnet: name {name!r}: choose one of {', '.join(RESNETS)}")
    weights = read_weights(state_dict)
    fc = weights.get("fc.weight")  # (classes, features)
    conv1 = weights.get("conv1.weight")  # (out, channels, 7, 7)
    classes = fc.shape[0] if fc is not None and fc.ndim == 2 else 1000
    channels = conv1.shape[1] if conv1 is not None and conv1.ndim == 4 else 3
    template = jax.eval_shape(lambda k: RESNETS[name](classes, channels, key=k), jax.random.key(0))
    source = f"load_torch_resnet(..., {name!r})"
    if isinstance(state_dict, (str, pathlib.Path)):
        source = state_dict
    rename = _resnet_rename(template)
    return _fill(template, weights, rename, source, ignore=("num_batches_tracked",))


def torch_state_dict(model: resnet.ResNet) -> dict[str, np.ndarray]:
    """The torchvision state dict of an ImageNet-family Frost ResNet, for
    `torch_model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})`.

    Arguments:
        model: a resnet18, resnet34 or resnet50 (7x7 stem and max-pool; not the CIFAR ResNets).

    Returns:
        {torchvision name: numpy array}, in torch's layouts ((out, in) and (out, in, kh, kw)),
        with each BatchNorm's `num_batches_tracked` (0).
    """
    if len(model.stem) != 4:
        raise UsageError(
            "torch_state_dict: only the ImageNet ResNets (resnet18/34/50, 7x7 stem and max-pool) "
            "have torchvision names"
        )
    state = _export(model, _resnet_rename(model))
    for key in [k for k in state if k.endswith("running_var")]:
        state[key[: -len("running_var")] + "num_batches_tracked"] = np.zeros((), np.int64)
    return state
