"""Hugging Face transformers with attn_implementation="flashattn" against "sdpa", side by side, on one model.

The model is a 1B-class Llama built from a config with random weights (no download): hidden 2048, 16 layers,
16 query / 8 KV heads, head dim 128, MLP 8192, vocabulary 128256, bf16. Measured, in interleaved rounds
(sdpa, flashattn, sdpa, ...) so that drift of the machine hits both alike:
  generate        greedy generate, batch 8, prompt 1024, 128 new tokens (exactly: no early stop):
                  new tokens per second (batch x 128 / time), prefill included as a user sees it;
  prefill_full    one forward of batch 4 x 4096 tokens, no padding: tokens per second;
  prefill_padded  the same batch left-padded (sequence b keeps 4096 - 512 b tokens): real tokens per second.
The same weights serve both implementations (the model switches implementation between calls). Outputs are
compared as well: the generated token ids agree (greedy; a mismatch is reported, not hidden: bf16 rounding
differences between two attention kernels can flip a near tie).

    python bench/hf_generate.py --rounds 3 --out hf_generate.json
    python bench/hf_generate.py --tiny --device cpu    # a tiny model on CPU: proves the script runs, nothing more
"""

import argparse
import json
import statistics
import sys
import time


def build_model(torch, tiny, device, dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    if tiny:
        sizes = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=16, vocab_size=256)  # fmt: skip
    else:
        sizes = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=16,
                     num_key_value_heads=8, head_dim=128, vocab_size=128256)  # fmt: skip
    config = LlamaConfig(**sizes, max_position_embeddings=8192, tie_word_embeddings=True, attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    return model.to(dtype).eval()


def use(model, implementation):
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(implementation)
    else:
        model.config._attn_implementation = implementation


def timed(torch, device, fn):
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    result = fn()
    sync()
    return time.perf_counter() - start, result


def workloads(torch, model, tiny, device):
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(1)
    batch, prompt, new = (2, 16, 4) if tiny else (8, 1024, 128)
    prompt_ids = torch.randint(1, vocab, (batch, prompt), generator=gen).to(device)
    prompt_mask = torch.ones_like(prompt_ids)
    pb, ps, step = (2, 32, 8) if tiny else (4, 4096, 512)
    prefill_ids = torch.randint(1, vocab, (pb, ps), generator=gen).to(device)
    full_mask = torch.ones_like(prefill_ids)
    padded_mask = torch.ones_like(prefill_ids)
    for b in range(pb):
        padded_mask[b, : b * step] = 0  # left padding
    real_tokens = int(padded_mask.sum())

    def generate():
        return model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, max_new_tokens=new,
                              min_new_tokens=new, do_sample=False, pad_token_id=0)  # fmt: skip

    def forward(mask):
        def run():
            return model(input_ids=prefill_ids, attention_mask=mask, use_cache=False).logits[:, -1]

        return run

    return [
        ("generate", generate, batch * new),
        ("prefill_full", forward(full_mask), pb * ps),
        ("prefill_padded", forward(padded_mask), real_tokens),
    ]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds per workload (default 3)")
    p.add_argument("--tiny", action="store_true", help="a tiny model and tiny workloads (a check that it runs)")
    p.add_argument("--out", help="JSON output path")
    args = p.parse_args(argv)
    import torch

    import flashattn.integrations.transformers as fa_hf

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("hf_generate.py: no CUDA device (--tiny --device cpu checks the script on CPU)")
    fa_hf.register()
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    model = build_model(torch, args.tiny, args.device, dtype)
    implementations = ("sdpa", "flashattn")
    rows = []
    print(f"{'workload':16s} {'sdpa tok/s':>12s} {'flashattn tok/s':>16s} {'ratio':>7s}  outputs")
    with torch.no_grad():
        for name, fn, tokens in workloads(torch, model, args.tiny, args.device):
            rates = {impl: [] for impl in implementations}
            results = {}
            for impl in implementations:  # warm-up (first calls, allocator growth, kernel selection)
                use(model, impl)
                results[impl] = fn()
            for _ in range(args.rounds):
                for impl in implementations:
                    use(model, impl)
                    seconds, _ = timed(torch, args.device, fn)
                    rates[impl].append(tokens / seconds)
            same = torch.equal(results["sdpa"], results["flashattn"]) if name == "generate" else None
            if name != "generate":
                diff = (results["sdpa"].float() - results["flashattn"].float()).abs().max().item()
                agreement = f"last-token logits max |diff| {diff:.3g}"
            else:
                agreement = "token ids equal" if same else "token ids differ"
            median = {impl: statistics.median(rates[impl]) for impl in implementations}
            ratio = median["flashattn"] / median["sdpa"]
            print(f"{name:16s} {median['sdpa']:12.1f} {median['flashattn']:16.1f} {ratio:7.3f}  {agreement}", flush=True)
            rows.append(dict(workload=name, tokens=tokens, rates=rates, median=median, ratio=ratio, outputs=agreement))
    if args.out:
        import transformers

        device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
        with open(args.out, "w") as f:
            json.dump(dict(device=device, torch=torch.__version__, transformers=transformers.__version__,
                           tiny=args.tiny, rounds=args.rounds, rows=rows), f, indent=1)  # fmt: skip


if __name__ == "__main__":
    main()
