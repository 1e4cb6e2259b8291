"""Quick correctness of one installed build (arm): flash_attn_with_kvcache against an fp32 reference,
repeated calls (the self-resetting counters), contiguous streaming configurations."""
import torch, flashattn
torch.manual_seed(0)
worst = 0.0
for d in (64, 128, 256):
    for b, s in ((1, 4096), (1, 32768), (4, 4096), (16, 4096), (1, 1000)):
        hq, hk = (32, 8) if d < 256 else (16, 8)
        k = torch.randn(b, s, hk, d, dtype=torch.bfloat16, device="cuda")
        v = torch.randn(b, s, hk, d, dtype=torch.bfloat16, device="cuda")
        q = torch.randn(b, 1, hq, d, dtype=torch.bfloat16, device="cuda")
        lens = torch.randint(1, s + 1, (b,), dtype=torch.int32, device="cuda")
        lens[0] = s
        kr = k.float().repeat_interleave(hq // hk, dim=2).transpose(1, 2)
        vr = v.float().repeat_interleave(hq // hk, dim=2).transpose(1, 2)
        sc = (q.float().transpose(1, 2) @ kr.transpose(-1, -2)) / d ** 0.5
        mask = torch.arange(s, device="cuda")[None, None, None, :] >= lens[:, None, None, None]
        ref = torch.softmax(sc.masked_fill(mask, float("-inf")), -1) @ vr
        ref = ref.transpose(1, 2)
        for rep in range(3):
            out = flashattn.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens)
            err = (out.float() - ref).abs().max().item()
            worst = max(worst, err)
            if err > 2e-2:
                print(f"FAIL D{d} B{b} S{s} rep{rep}: max err {err}")
print(f"checked; worst max err {worst:.2e}")
