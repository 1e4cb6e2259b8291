"""The transformers integration on tiny random models built from configs (nothing is downloaded):
Llama (GQA), Mistral (sliding window) and Gemma-2 (softcap + sliding window). Logits of a padded batch
and greedy generate() with a KV cache, attn_implementation="flashattn" against transformers' own
implementation (sdpa; eager for Gemma-2, whose logit softcapping sdpa does not apply)."""

import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch_support import DTYPE_NAMES, require_device, require_support  # noqa: E402

import flashattn  # noqa: E402
from flashattn.integrations import transformers as fa_transformers  # noqa: E402

COMMON = dict(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2, max_position_embeddings=128,
              head_dim=16, pad_token_id=0, bos_token_id=1, eos_token_id=2)  # fmt: skip

MODELS = {
    "llama_gqa": ("LlamaConfig", "LlamaForCausalLM", dict(num_attention_heads=4, num_key_value_heads=2), "sdpa"),
    "mistral_sliding_window": (
        "MistralConfig", "MistralForCausalLM", dict(num_attention_heads=4, num_key_value_heads=1, sliding_window=5),
        "sdpa",
    ),
    "gemma2_softcap": (
        "Gemma2Config", "Gemma2ForCausalLM",
        dict(num_attention_heads=4, num_key_value_heads=2, sliding_window=6, attn_logit_softcapping=2.0,
             final_logit_softcapping=None, query_pre_attn_scalar=16),
        "eager",
    ),
}  # fmt: skip

# Max |logits difference| relative to max |logits| of the reference implementation.
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 4e-2}
DEVICE_DTYPES = [("cuda", torch.float32), ("cuda", torch.bfloat16), ("cpu", torch.float32)]


@pytest.fixture(scope="module", autouse=True)
def registered():
    fa_transformers.register()


def build_pair(name, device, dtype):
    """The same random model twice: with transformers' reference attention and with flashattn."""
    config_name, model_name, extra, reference_impl = MODELS[name]
    config = getattr(transformers, config_name)(**COMMON, **extra)
    model_cls = getattr(transformers, model_name)
    torch.manual_seed(0)
    reference = model_cls._from_config(copy.deepcopy(config), attn_implementation=reference_impl)
    ours = model_cls._from_config(copy.deepcopy(config), attn_implementation=fa_transformers.NAME)
    ours.load_state_dict(reference.state_dict())
    return (reference.to(device=device, dtype=dtype).eval(), ours.to(device=device, dtype=dtype).eval())


def require_backend(device, dtype):
    q = torch.zeros(1, 4, 4, 16, device=device, dtype=dtype)
    require_support(flashattn.query_backends(q, q[:, :, :2], q[:, :, :2], causal=True))


def padded_batch(device, padding_side):
    """Three prompts of lengths 12, 9 and 4 (with a window of 5, padding and window both matter)."""
    gen = torch.Generator().manual_seed(1)
    lengths = [12, 9, 4]
    ids = torch.zeros(3, 12, dtype=torch.long)
    mask = torch.zeros(3, 12, dtype=torch.long)
    for row, n in enumerate(lengths):
        tokens = torch.randint(3, 97, (n,), generator=gen)
        span = slice(12 - n, 12) if padding_side == "left" else slice(0, n)
        ids[row, span] = tokens
        mask[row, span] = 1
    return ids.to(device), mask.to(device)


def _max_relative_difference(got, ref, mask):
    valid = mask.bool()
    return ((got - ref)[valid].abs().max() / ref[valid].abs().max()).item()


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES, ids=[f"{d}-{DTYPE_NAMES[t]}" for d, t in DEVICE_DTYPES])
@pytest.mark.parametrize("padding_side", ["left", "right"])
@pytest.mark.parametrize("name", MODELS)
def test_padded_batch_logits(name, padding_side, device, dtype):
    require_device(device)
    require_backend(device, dtype)
    reference, ours = build_pair(name, device, dtype)
    ids, mask = padded_batch(device, padding_side)
    with torch.no_grad():
        ref_logits = reference(input_ids=ids, attention_mask=mask).logits.float()
        our_logits = ours(input_ids=ids, attention_mask=mask).logits.float()
    assert torch.isfinite(our_logits[mask.bool()]).all()
    difference = _max_relative_difference(our_logits, ref_logits, mask)
    assert difference <= TOLERANCE[dtype], f"logits differ by {difference:.3g} (relative)"


@pytest.mark.parametrize("device,dtype", DEVICE_DTYPES, ids=[f"{d}-{DTYPE_NAMES[t]}" for d, t in DEVICE_DTYPES])
@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("name", MODELS)
def test_generate_with_kv_cache(name, cache, device, dtype):
    """Greedy generation from a left-padded batch. A static cache hands the attention keys for every slot of
    the cache, filled or not, and a padding mask that covers only the filled ones."""
    require_device(device)
    require_backend(device, dtype)
    reference, ours = build_pair(name, device, dtype)
    ids, mask = padded_batch(device, "left")
    settings = dict(max_new_tokens=8, do_sample=False, output_scores=True, return_dict_in_generate=True,
                    pad_token_id=0)  # fmt: skip
    if cache == "static":
        settings["cache_implementation"] = "static"
    with torch.no_grad():
        ref = reference.generate(input_ids=ids, attention_mask=mask, **settings)
        got = ours.generate(input_ids=ids, attention_mask=mask, **settings)
    tolerance = TOLERANCE[dtype]
    prompt = ids.shape[1]
    # Step by step: the scores agree while the sequences agree; greedy choices may only part ways where the
    # reference's top two scores were within the tolerance (a numerical tie).
    agreeing = torch.ones(ids.shape[0], dtype=torch.bool, device=ids.device)
    for step, (ref_scores, our_scores) in enumerate(zip(ref.scores, got.scores)):
        if not agreeing.any():
            break
        ref_s, our_s = ref_scores[agreeing].float(), our_scores[agreeing].float()
        difference = ((our_s - ref_s).abs().max() / ref_s.abs().max()).item()
        assert difference <= tolerance, f"step {step}: scores differ by {difference:.3g} (relative)"
        chosen_ref = ref.sequences[:, prompt + step]
        chosen_ours = got.sequences[:, prompt + step]
        parted = agreeing & (chosen_ref != chosen_ours)
        if parted.any():
            top2 = ref_scores[parted].float().topk(2, dim=-1).values
            margin = ((top2[:, 0] - top2[:, 1]) / ref_scores[parted].float().abs().max()).max().item()
            assert margin <= 2 * tolerance, f"step {step}: greedy choice differs with a clear margin {margin:.3g}"
        agreeing &= ~parted
    assert len(got.scores) == len(ref.scores) == settings["max_new_tokens"]


@pytest.mark.parametrize("device,dtype", [("cuda", torch.float32), ("cpu", torch.float32)], ids=["cuda", "cpu"])
def test_packed_sequences_from_position_ids(device, dtype):
    """Padding-free batches: three sequences in one row, told apart only by restarting position_ids."""
    require_device(device)
    require_backend(device, dtype)
    reference, ours = build_pair("llama_gqa", device, dtype)
    lengths = [5, 7, 4]
    ids = torch.randint(3, 97, (1, sum(lengths)), generator=torch.Generator().manual_seed(2)).to(device)
    positions = torch.cat([torch.arange(n) for n in lengths])[None].to(device)
    with torch.no_grad():
        packed = ours(input_ids=ids, position_ids=positions).logits.float()
        pieces, start = [], 0
        for n in lengths:
            pieces.append(reference(input_ids=ids[:, start : start + n]).logits.float())
            start += n
    separate = torch.cat(pieces, dim=1)
    difference = ((packed - separate).abs().max() / separate.abs().max()).item()
    assert difference <= TOLERANCE[dtype], f"packed logits differ by {difference:.3g} (relative)"


def test_mask_function_takes_the_arguments_of_every_supported_transformers():
    """transformers calls the mask function by keyword: (batch_size, q_length, kv_length, q_offset, kv_offset,
    ...) from 5.5 on, (batch_size, cache_position, kv_length, kv_offset, ...) in 4.53-5.4."""
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]], dtype=torch.bool)
    new = fa_transformers.padding_mask(batch_size=2, q_length=2, kv_length=3, q_offset=2, kv_offset=0,
                                       mask_function=None, attention_mask=mask)  # fmt: skip
    old = fa_transformers.padding_mask(batch_size=2, cache_position=torch.arange(2, 4), kv_length=3, kv_offset=0,
                                       mask_function=None, attention_mask=mask)  # fmt: skip
    assert torch.equal(new, mask[:, -3:]) and torch.equal(old, mask[:, -3:])
    full = torch.ones(2, 4, dtype=torch.bool)
    assert fa_transformers.padding_mask(batch_size=2, q_length=1, kv_length=4, attention_mask=full) is None
    # A static cache's keys outnumber the mask: the mask is returned so that the attention drops the rest.
    assert torch.equal(fa_transformers.padding_mask(batch_size=2, q_length=1, kv_length=8, attention_mask=full), full)


def test_attention_function_rejects_a_4d_mask():
    module = torch.nn.Module()
    q = torch.zeros(1, 2, 3, 16)
    with pytest.raises(ValueError, match="attention_mask: expected None or a 2D padding mask"):
        fa_transformers.attention_forward(module, q, q, q, torch.zeros(1, 1, 3, 3))


def test_padding_helpers_round_trip():
    from flashattn.integrations._padding import pad, unpad

    x = torch.arange(2 * 5 * 3, dtype=torch.float32).reshape(2, 5, 3)
    mask = torch.tensor([[0, 1, 1, 0, 1], [1, 1, 1, 1, 0]], dtype=torch.bool)
    rows, indices, cu, max_len = unpad(x, mask)
    assert rows.shape == (7, 3) and cu.tolist() == [0, 3, 7] and max_len == 4 and cu.dtype == torch.int32
    assert torch.equal(rows[0], x[0, 1]) and torch.equal(rows[3], x[1, 0])
    back = pad(rows, indices, 2, 5)
    assert torch.equal(back, x * mask[..., None])
