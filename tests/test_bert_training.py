"""Training BERT's masked-language model: ``lazyburn.models.bert.BertForMaskedLM`` loads a Hugging
Face ``BertForMaskedLM`` (PyTorch CPU) and takes the same AdamW steps: the losses, gradients and
updated parameters match PyTorch's on every device (forward, backward through attention, layer
norm, GELU, the tied decoder and the embedding lookups, and the optimizer, one lazy graph a
step). The GPU benchmark (``benchmarks/train_gpu.py``) times this step at MiniLM's size."""
from __future__ import annotations

import os

import numpy as np
import pytest

import lazyburn as lb
from lazyburn.models.bert import BertConfig, BertForMaskedLM, checkpoint_name

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SIZE = dict(vocab_size=101, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=16, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)


def pair(device, seed):
    """A Hugging Face MLM with random weights (``seed``) and ours holding the same values."""
    torch.manual_seed(seed)
    ref = transformers.BertForMaskedLM(
        transformers.BertConfig(**SIZE, attn_implementation="eager"))
    model = BertForMaskedLM(BertConfig(**SIZE), device=device)
    named = {checkpoint_name(k): v.detach().numpy() for k, v in ref.state_dict().items()}
    model.load_state_dict({k: v for k, v in named.items() if k is not None})
    return ref, model


def test_checkpoint_names_cover_the_masked_lm_head():
    ref, model = pair("numpy", 0)
    ours = dict(model.named_parameters())
    names = {checkpoint_name(k) for k in ref.state_dict()} - {None}
    assert names == set(ours)
    assert "decoder_bias" in ours and "transform_norm.weight" in ours


def test_a_fresh_model_starts_from_berts_initialization(rng):
    """Weights from N(0, 0.02**2) (``initializer_range``), linear biases zero, the padding
    row zero: the first loss is about log(vocab), as for a uniform guess."""
    lb.manual_seed(int(rng.integers(2**31)))
    model = BertForMaskedLM(BertConfig(**{**SIZE, "vocab_size": 3000}), device="numpy")
    w = model.layers[0].intermediate.weight.numpy()
    assert abs(w.std() - 0.02) < 0.002 and abs(w.mean()) < 0.002
    assert not model.layers[1].attention.query.bias.numpy().any()
    assert not model.embeddings.word.weight.numpy()[0].any()
    ids = rng.integers(1, 3000, (4, 16))
    assert abs(model(ids, labels=ids).item() - np.log(3000)) < 0.3


def test_adamw_steps_match_pytorch(device, rng):
    if device.startswith("cuda") and os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("Triton's interpreter takes minutes for these matmuls: the GPU runs this "
                    "test (benchmarks/gpu_run.sh trust)")
    ref, model = pair(device, int(rng.integers(2**31)))
    # eps 1e-5 rather than PyTorch's 1e-8: Adam moves a weight by about lr * g / (|g| + eps),
    # so where g is small its rounding error (two correct summation orders differ by ~1e-9)
    # is amplified by lr / eps. Measured on opencl:0 over 31 seeds, the worst weight error
    # beyond 1e-4 |w| after three steps (tolerance 1e-5): 1.1e-5 with eps 1e-6 (one seed;
    # 1e-8 was worse), 7.7e-7 with 1e-5. Where a gradient cancels to near eps, its rounding
    # is larger (on webgpu:0, seed 2600695795: -8.64e-6 against PyTorch's -8.78e-6, its
    # weight 1.15e-5 off after three steps): each step's update moves by at most
    # lr / eps times the gradients' difference so far, which the weights' tolerance adds.
    hp = dict(lr=3e-3, weight_decay=0.01, eps=1e-5)
    opt = lb.optim.AdamW(model.parameters(), **hp)
    ropt = torch.optim.AdamW(ref.parameters(), **hp)
    drift = {}  # per parameter, the sum over steps of |our gradient - PyTorch's| so far
    moved = {}  # per parameter, the bound on its update's difference: lr / eps * drift
    for step in range(3):
        ids = rng.integers(0, SIZE["vocab_size"], (2, 9))
        labels = np.where(rng.random(ids.shape) < 0.3, ids, -100)
        labels[0, 0] = ids[0, 0]  # at least one predicted token
        mask = np.ones(ids.shape, bool)
        mask[1, -3:] = False  # padding in the second sequence
        loss = model(ids, mask=lb.nn.additive_attention_mask(mask, device=device),
                     labels=labels)
        opt.zero_grad()
        loss.backward()
        want = ref(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask),
                   labels=torch.tensor(labels)).loss
        ropt.zero_grad()
        want.backward()
        np.testing.assert_allclose(loss.item(), want.item(), rtol=2e-5)
        grads = {checkpoint_name(k): p.grad.numpy() for k, p in ref.named_parameters()}
        # relative to the largest gradient: the key bias's is zero but for rounding (softmax
        # does not change when every score of a row moves by the same q . b)
        scale = max(np.abs(g).max() for g in grads.values())
        for name, p in model.named_parameters():
            ours = p.grad.numpy()
            np.testing.assert_allclose(ours, grads[name], rtol=2e-3, atol=2e-5 * scale,
                                       err_msg=name)
            drift[name] = drift.get(name, 0.0) + np.abs(ours - grads[name])
            moved[name] = moved.get(name, 0.0) + hp["lr"] / hp["eps"] * drift[name]
        opt.step()
        ropt.step()
    new = {checkpoint_name(k): v.detach().numpy() for k, v in ref.state_dict().items()}
    for name, p in model.named_parameters():
        err = np.abs(p.numpy() - new[name])
        bound = 1e-5 + 1e-4 * np.abs(new[name]) + moved[name]
        assert (err <= bound).all(), (name, err.max(), bound.ravel()[err.argmax()])
        # most weights are held to 1e-5 + 1e-4 |w|: the gradients' rounding moves them little
        assert np.mean(err <= 1e-5 + 1e-4 * np.abs(new[name])) >= 0.999, name


def test_under_autocast_the_decoder_adds_its_bias_in_the_autocast_dtype(rng):
    """Under bfloat16 autocast the decoder is a linear layer in bfloat16, as Hugging Face's
    ``nn.Linear`` decoder is under ``torch.autocast``: the logits are bfloat16 and match
    PyTorch CPU's, and in a GPU's plan of the step the decoder bias's gradient sums the
    stored bfloat16 gradient of the logits (the products' operand) instead of recomputing
    the cross-entropy's ``exp`` from the logits for itself, in float32."""
    ref, model = pair("numpy", int(rng.integers(2**31)))
    ids = rng.integers(0, SIZE["vocab_size"], (2, 9))
    with lb.autocast(dtype=lb.bfloat16):
        logits = model(ids)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = ref(input_ids=torch.tensor(ids)).logits
    assert logits.dtype == lb.bfloat16 and want.dtype == torch.bfloat16
    want = want.detach().float().numpy()
    np.testing.assert_allclose(logits.astype("float32").numpy(), want,
                               atol=3e-2 * np.abs(want).max())

    model = pair("cuda:0", 0)[1]
    model.requires_grad_()
    labels = np.where(rng.random(ids.shape) < 0.3, ids, -100)
    labels[0, 0] = ids[0, 0]
    with lb.autocast(dtype=lb.bfloat16):
        loss = model(ids, labels=labels)
    loss.backward()
    v = SIZE["vocab_size"]
    grads = [p.grad for p in model.parameters()]  # (the products read the logits' gradient too)
    (bias_grad,) = [k for k in lb.explain(*grads).kernels
                    if any(o.role == "anchor" and o.op == "sum" and o.shape[-1] == v
                           for o in k.ops)]
    assert bias_grad.kind == "reduction"
    assert not {"exp", "log"} & {o.op for o in bias_grad.ops}, bias_grad
    (summed,) = [o for o in bias_grad.ops if o.role == "anchor"]
    assert summed.dtype == "bfloat16"
