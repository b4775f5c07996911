"""The engine benchmark's ceiling and peer, measured in the same call as `tessera run`.

Usage: python3 peer_transformers.py MODEL_DIR [TOKENS]
- copy: a 1 GiB device-to-device torch copy, timed with CUDA events, read + write bytes
  counted (the same definition as the CUDA tier's ceiling);
- peer: transformers' LlamaForCausalLM built from MODEL_DIR/config.json in bf16 on the GPU
  (random weights: only the speed is compared), greedy decode of TOKENS tokens at batch 1.
Prints one JSON line.
"""
import json
import sys
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def copy_gbps():
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 20
    s.record()
    for _ in range(reps):
        b.copy_(a)
    e.record()
    torch.cuda.synchronize()
    return 2 * n * reps / (s.elapsed_time(e) / 1e3) / 1e9


def main():
    model_dir = sys.argv[1]
    tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    out = {"copy_gbps": copy_gbps(), "torch": torch.__version__}
    cfg = AutoConfig.from_pretrained(model_dir)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.eval()
    ids = torch.tensor([[1, 2, 3]], device="cuda")
    with torch.no_grad():
        model.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.generate(ids, max_new_tokens=1, min_new_tokens=1, do_sample=False)
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        model.generate(ids, max_new_tokens=tokens + 1, min_new_tokens=tokens + 1, do_sample=False)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
    decode = (t2 - t1) - (t1 - t0)
    params = sum(p.numel() for p in model.parameters())
    out.update(
        {
            "peer": "transformers bf16 generate (greedy)",
            "params": params,
            "tokens": tokens,
            "decode_s": decode,
            "tokens_per_s": tokens / decode,
        }
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
