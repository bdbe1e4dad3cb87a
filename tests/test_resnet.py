"""ResNet-18/50 (lazyburn.models.resnet) against the same networks written in plain PyTorch with
torchvision's parameter names, on one set of random weights and non-trivial batch-norm running
statistics: logits on the NumPy device and the fused devices, the state dict's names and
shapes, loading through a safetensors file written by safetensors' torch and NumPy APIs and
the loader's errors, the eval-mode plan (what fuses into each convolution's kernel, kernels
per image), and ``lazyburn demo --model resnet18`` end to end."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

import torch_resnet
from fused_devices import FUSED_DEVICES
from torch_resnet import TORCH_MODELS, TorchResNet

import lazyburn as lb
from lazyburn.cli import main
from lazyburn.models import resnet
from lazyburn.nn import WeightsError

# cuda:0 runs under Triton's interpreter here: far too slow for a whole network's values (its
# plan is still checked below)
LOGIT_DEVICES = ["numpy"] + [d for d in FUSED_DEVICES if not d.startswith("cuda")]
SIZE = 64  # small images: every stage keeps at least 2x2 positions


# the reference: torchvision's ResNet in plain PyTorch ----------------------------------------
def random_state(name: str, seed: int) -> dict[str, np.ndarray]:
    """A torchvision-named state dict of fresh random values for model ``name``."""
    return torch_resnet.random_state(TorchResNet(*TORCH_MODELS[name]), seed)


def torch_logits(name: str, state: dict, x: np.ndarray) -> np.ndarray:
    model = TorchResNet(*TORCH_MODELS[name])
    model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    with torch.no_grad():
        return model.eval()(torch.from_numpy(x)).numpy()


def lazyburn_model(name: str, state: dict, device: str) -> resnet.ResNet:
    # the constructor's random initialization is replaced before it is ever computed
    return resnet.MODELS[name](device=device).load_state_dict(state)


@pytest.fixture(scope="module")
def state18():
    return random_state("resnet18", 18)


def images(rng, n=1, size=SIZE):
    return rng.standard_normal((n, 3, size, size)).astype(np.float32)


def assert_logits_close(got, want):
    # 1e-4 relative to the logits' scale: a single logit near zero is not a relative measure
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    err = float(np.abs(got - want).max())
    assert err <= 1e-4 * scale, f"max |diff| {err:.3g} against logits of scale {scale:.3g}"


# values --------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", LOGIT_DEVICES)
def test_resnet18_logits_match_pytorch(device, state18, rng):
    x = images(rng, 2)
    model = lazyburn_model("resnet18", state18, device)
    assert not model.training
    assert_logits_close(model(x).numpy(), torch_logits("resnet18", state18, x))


@pytest.mark.parametrize("device", [d for d in LOGIT_DEVICES if d in ("numpy", "opencl:0")])
def test_resnet50_logits_match_pytorch(device, rng):
    state = random_state("resnet50", 50)
    x = images(rng, 1)
    logits = lazyburn_model("resnet50", state, device)(lb.tensor(x, device=device))
    assert_logits_close(logits.numpy(), torch_logits("resnet50", state, x))


def test_train_mode_uses_batch_statistics(state18, rng):
    x = images(rng, 4)
    model = lazyburn_model("resnet18", state18, "numpy").train()
    reference = TorchResNet(*TORCH_MODELS["resnet18"])
    reference.load_state_dict({k: torch.from_numpy(v) for k, v in state18.items()})
    with lb.no_grad(), torch.no_grad():
        got, want = model(x).numpy(), reference.train()(torch.from_numpy(x)).numpy()
    assert_logits_close(got, want)
    # the running statistics took the batch's, as PyTorch's did
    np.testing.assert_allclose(model.layer1[0].bn1.running_var.numpy(),
                               reference.layer1[0].bn1.running_var.numpy(), rtol=1e-4)


# names and loading ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["resnet18", "resnet34", "resnet50"])
def test_state_dict_has_torchvisions_names_and_shapes(name):
    ours = resnet.MODELS[name](device="numpy")
    shapes = {k: p.shape for k, p in ours._named_tensors()}
    theirs = {k: tuple(t.shape) for k, t in TorchResNet(*TORCH_MODELS[name]).state_dict().items()}
    assert shapes == theirs
    assert list(shapes) == list(theirs)  # definition order too
    params = sum(math.prod(s) for k, s in shapes.items()
                 if not re.search(r"running_|num_batches", k))
    assert params == {"resnet18": 11_689_512, "resnet34": 21_797_672,
                      "resnet50": 25_557_032}[name]


def test_safetensors_round_trip(state18, tmp_path, rng):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    import safetensors.numpy

    reference = TorchResNet(*TORCH_MODELS["resnet18"])
    reference.load_state_dict({k: torch.from_numpy(v) for k, v in state18.items()})
    path = tmp_path / "resnet18.safetensors"
    safetensors_torch.save_file(reference.state_dict(), str(path))  # as a torchvision user would
    model = resnet.resnet18(device="numpy").load_safetensors(path)
    x = images(rng, 1)
    assert_logits_close(model(x).numpy(), torch_logits("resnet18", state18, x))
    saved = model.state_dict()
    assert saved["layer2.0.downsample.1.num_batches_tracked"] == \
        state18["layer2.0.downsample.1.num_batches_tracked"]
    again = tmp_path / "again.safetensors"
    safetensors.numpy.save_file(saved, str(again))
    back = safetensors.numpy.load_file(str(again))
    assert back.keys() == state18.keys()
    for k in state18:
        np.testing.assert_array_equal(back[k], state18[k], err_msg=k)


def test_loader_names_every_problem(state18, tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    state = dict(state18)
    del state["layer3.1.bn2.running_var"]
    state["fc.weight"] = state["fc.weight"][:10]
    state["layer1.0.conv1.weight"] = state["layer1.0.conv1.weight"].astype(np.int32)
    state["classifier.weight"] = np.zeros((2, 2), np.float32)
    path = tmp_path / "bad.safetensors"
    safetensors_numpy.save_file(state, str(path))
    model = resnet.resnet18(device="numpy")
    before = model.fc.weight
    with pytest.raises(WeightsError) as e:
        model.load_safetensors(path)
    text = str(e.value)
    assert e.value.missing == ["layer3.1.bn2.running_var"]
    assert e.value.unexpected == ["classifier.weight"]
    assert "tensor 'fc.weight': expected (1000, 512) float32, found (10, 512) float32" in text
    assert "tensor 'layer1.0.conv1.weight': expected (64, 64, 3, 3) float32, found " \
           "(64, 64, 3, 3) int32" in text
    assert model.fc.weight is before  # nothing replaced


# the plan ------------------------------------------------------------------------------------
def _planned(device, state, size=SIZE):
    model = lazyburn_model("resnet18", state, device)
    lb.graph.sync()  # the weights: computed once, not part of a forward pass
    x = lb.tensor(np.random.default_rng(0).standard_normal((1, 3, size, size)), "float32",
                  device=device)
    return lb.explain(model(x))


def _generated_matmul(plan) -> bool:
    return plan.library_calls == 0 and plan.generated_kernels > 0


def _residual_adds(kernel) -> list:
    return [o for o in kernel.ops if o.op == "add" and (o.origin or "").startswith("resnet.py")]


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_residual_block_end_is_one_convolution_kernel(device, state18):
    """bn2 + residual add + ReLU are fused on write into the kernel of the block's second
    convolution; the last block's are fused on read into the global average pool instead
    (one kernel either way)."""
    plan = _planned(device, state18)
    if not _generated_matmul(plan):
        pytest.skip(f"{device}: the matmul is a library call ({plan.library_calls}), its "
                    "epilogue a kernel apart")
    ends = [k for k in plan.kernels if k.kind == "matmul" and _residual_adds(k)]
    assert len(ends) == 7, str(plan)  # one per BasicBlock but the last: layer1..4 x 2 - 1
    for k in ends:
        roles = {(o.op, o.role) for o in k.ops}
        assert {("add", "fused on write"), ("rsqrt", "fused on write"),
                ("maximum", "fused on write")} <= roles, str(plan)
    pool = [k for k in plan.kernels if k.kind == "reduction" and _residual_adds(k)]
    assert len(pool) == 1 and {o.role for o in _residual_adds(pool[0])} == {"fused on read"}


@pytest.mark.parametrize("device", FUSED_DEVICES)
def test_kernels_per_image(device, state18):
    """Counted against one kernel per convolution, max pool, global average pool and fc (23
    for ResNet-18). Where the matmul is generated there is one more: the global average pool
    is two reductions (rows, then columns). Nothing else is a kernel of its own:

    - batch norm + ReLU between two convolutions is fused on write into the first one's
      kernel, and the next convolution reads its result through the window view (no im2col
      buffer);
    - a block's output, stored by its conv2's kernel, is read through views by the next
      block's conv1 and by the strided 1x1 downsample: a view of a stored buffer is never
      copied.
    """
    plan = _planned(device, state18)
    convolutions, pools, fc = 20, 2, 1
    print(f"\n{device}: resnet18 at {SIZE}x{SIZE}: {plan.kernel_count} kernels per image "
          f"({plan.generated_kernels} generated, {plan.library_calls} library calls) against "
          f"{convolutions + pools + fc} convolutions, pools and fc")
    kinds = plan.kinds()
    assert kinds.count("matmul") == convolutions + fc, str(plan)
    assert kinds.count("reduction") == pools + 1, str(plan)
    if _generated_matmul(plan):
        assert kinds.count("elementwise") == 0, str(plan)
        assert plan.kernel_count == convolutions + fc + pools + 1


@pytest.mark.parametrize("device", [d for d in FUSED_DEVICES if d != "opencl:0"])
def test_conv_batch_norm_relu_is_one_kernel(device, state18):
    """Each block's conv1 -> bn1 -> ReLU is one kernel (bn1 and ReLU fused on write), and its
    conv2 reads that result through the window view in its prologue: no element-wise kernel
    writes an im2col matrix or anything else in between."""
    plan = _planned(device, state18)
    assert plan.kinds().count("elementwise") == 0, str(plan)
    # a block's conv1: a ReLU and no residual add (the stem's goes into the max pool)
    firsts = [k for k in plan.kernels if k.kind == "matmul" and not _residual_adds(k) and
              any(o.op == "maximum" for o in k.ops)]
    assert len(firsts) == 8, str(plan)  # one per BasicBlock
    for k in firsts:
        roles = {(o.op, o.role) for o in k.ops}
        assert {("rsqrt", "fused on write"), ("maximum", "fused on write")} <= roles, str(plan)
    # every convolution reads its input through the window view: no im2col buffer
    windows = [k for k in plan.kernels if any(o.op == "window" for o in k.ops)]
    assert all(k.kind in ("matmul", "reduction") for k in windows), str(plan)


# preprocessing and the demo ------------------------------------------------------------------
def torch_preprocess(image: np.ndarray, size: int, resize: int) -> np.ndarray:
    """torchvision's Resize(resize) (bilinear, here without antialiasing), CenterCrop(size),
    ToTensor and Normalize(ImageNet) on an (H, W, 3) uint8 image, in plain PyTorch."""
    h, w = image.shape[:2]
    out = (resize, int(resize * w / h)) if h <= w else (int(resize * h / w), resize)
    x = torch.from_numpy(image).permute(2, 0, 1)[None].float() / 255.0
    x = torch.nn.functional.interpolate(x, size=out, mode="bilinear", align_corners=False)
    top, left = int(round((out[0] - size) / 2.0)), int(round((out[1] - size) / 2.0))
    x = x[:, :, top:top + size, left:left + size]
    mean = torch.tensor(resnet.IMAGENET_MEAN).reshape(1, 3, 1, 1)
    std = torch.tensor(resnet.IMAGENET_STD).reshape(1, 3, 1, 1)
    return ((x - mean) / std).numpy()


@pytest.mark.parametrize("shape", [(90, 120, 3), (131, 75, 3)])
def test_preprocess_matches_torchvisions_transform(shape, rng):
    image = rng.integers(0, 256, shape, dtype=np.uint8)
    got = resnet.preprocess(image, 64, 73, device="numpy").numpy()
    assert got.shape == (1, 3, 64, 64)
    np.testing.assert_allclose(got, torch_preprocess(image, 64, 73), rtol=1e-4, atol=5e-5)
    with pytest.raises(ValueError, match="RGB"):
        resnet.preprocess(image[..., 0])
    with pytest.raises(ValueError, match="does not fit"):
        resnet.preprocess(image, 300, 256)


@pytest.fixture
def photographs(monkeypatch, rng):
    """scikit-learn's sample photographs; where Pillow (which decodes them) is missing, two
    random images of their size under their names, so the command still runs end to end."""
    try:
        return lb.demo.sample_images()
    except ModuleNotFoundError:
        fake = [(name, rng.integers(0, 256, (427, 640, 3), dtype=np.uint8))
                for name in ("china.jpg", "flower.jpg")]
        monkeypatch.setattr(lb.demo, "sample_images", lambda: fake)
        return fake


def _top5(out: str) -> dict:
    """{image name: [(class index, probability, label)]} from the demo's output."""
    found = {}
    for name, body in re.findall(r"^(\S+): top 5\n((?:  class .*\n?){5})", out, re.M):
        found[name] = [(int(k), float(p), label) for k, p, label in
                       re.findall(r"class +(\d+) +(\d\.\d+) *(.*)", body)]
    return found


@pytest.mark.parametrize("device", [d for d in LOGIT_DEVICES if d in ("numpy", "opencl:0")])
def test_demo_classifies_the_sample_photographs(device, state18, photographs, tmp_path, capsys):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    weights, labels = tmp_path / "w.safetensors", tmp_path / "labels.txt"
    safetensors_numpy.save_file(state18, str(weights))
    labels.write_text("".join(f"name {i}\n" for i in range(1000)))
    assert main(["demo", "--model", "resnet18", "--device", device, "--image-size", "64",
                 "--weights", str(weights), "--labels", str(labels)]) == 0
    out = capsys.readouterr().out
    top = _top5(out)
    assert list(top) == [name for name, _ in photographs], out
    for name, image in photographs:
        logits = torch_logits("resnet18", state18, torch_preprocess(image, 64, 73))[0]
        p = np.exp(logits - logits.max())
        p /= p.sum()
        want = np.argsort(-p, kind="stable")[:5]
        got = top[name]
        np.testing.assert_allclose([q for _, q, _ in got], p[want], atol=2e-4)
        # an index may swap with a neighbour whose probability prints the same
        assert [k for k, _, _ in got] == list(want) or \
            np.allclose(sorted(p[[k for k, _, _ in got]]), sorted(p[want]), atol=1e-4), out
        assert all(label == f"name {k}" for k, _, label in got)
    match = re.search(r"per image \(64x64\): (\d+) (?:ops|groups)", out)
    assert match, out
    # one group per convolution, pool and fc, the average pool two (test_kernels_per_image)
    if device == "numpy":
        assert "a fused device runs 24 kernels" in out
    else:
        assert int(match.group(1)) == 24, out


@pytest.mark.skipif("opencl:0" not in FUSED_DEVICES, reason="no OpenCL device")
def test_demo_with_random_weights(photographs, capsys):
    assert main(["demo", "--model", "resnet18", "--device", "opencl:0",
                 "--image-size", "48"]) == 0
    out = capsys.readouterr().out
    assert "weights: random" in out and "indices shown" in out
    top = _top5(out)
    assert len(top) == 2 and all(len(v) == 5 and all(label == "" for *_, label in v)
                                 for v in top.values()), out
    for v in top.values():
        probs = [p for _, p, _ in v]
        assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1.0001


def test_demo_errors_are_one_line(tmp_path, capsys, monkeypatch):
    def usage_error(argv):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("lazyburn: error: "), err
        return err[0].removeprefix("lazyburn: error: ")

    base = ["demo", "--model", "resnet18", "--device", "numpy"]
    assert usage_error(base + ["--weights", str(tmp_path / "none.safetensors")]) == \
        f"--weights: weights file not found: {tmp_path / 'none.safetensors'}"
    (tmp_path / "labels.txt").write_text("a\nb\n")
    assert usage_error(base + ["--labels", str(tmp_path / "labels.txt")]) == \
        f"--labels: {tmp_path / 'labels.txt'}: expected 1000 class names, one per line, found 2"
    assert usage_error(base + ["a sentence"]) == \
        "sentences and --file apply to the MiniLM demo, not --model resnet18"
    assert usage_error(["demo", "--weights", "w.safetensors"]) == \
        "--weights applies to --model resnet18|resnet34|resnet50"

    def no_pillow():
        raise ImportError("The Python Imaging Library (PIL) is required")

    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    monkeypatch.setattr(sklearn_datasets, "load_sample_images", no_pillow)
    assert usage_error(base) == ("scikit-learn needs Pillow to read its sample photographs: "
                                 "pip install 'lazyburn[vision]'")
