# cuBLAS bf16 GEMM peers for crates/kernels-cuda/examples/bench_gemm.rs (copied into .device/
# by device-bundle.sh): y[S, O] = x[S, I] . W^T via torch.nn.functional.linear, bf16 in and
# out, at the bench's shapes and batches, timed like bench_common: median of single
# launches between CUDA events (each followed by a synchronize), and queued (n launches
# between one event pair). Weight copies rotate through >= 256 MB. Writes anchor_gemm.json.
import json, os, sys, torch
torch.manual_seed(0)
dev = "cuda"
def single(fn, reps=30, warm=5):
    for _ in range(warm): fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    ts.sort(); return ts[len(ts) // 2] * 1e-3
def queued(fn, n=30):
    fn(); torch.cuda.synchronize()
    a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n): fn()
    b.record(); torch.cuda.synchronize(); return a.elapsed_time(b) * 1e-3 / n
shapes = [(4096, 4096), (14336, 4096), (4096, 14336), (6144, 16384), (16384, 6144)]
batches = [int(s) for s in (sys.argv[1] if len(sys.argv) > 1 else "512").split(",")]
out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": []}
for (O, I) in shapes:
    n = max(2, int(256e6 // (O * I * 2)))
    Ws = [torch.randn(O, I, device=dev, dtype=torch.bfloat16) for _ in range(n)]
    for S in batches:
        x = torch.randn(S, I, device=dev, dtype=torch.bfloat16)
        k = [0]
        def f():
            k[0] = (k[0] + 1) % n; return torch.nn.functional.linear(x, Ws[k[0]])
        t1, tq = single(f), queued(f)
        r = {"O": O, "I": I, "S": S, "bf16_us": t1 * 1e6, "bf16_us_queued": tq * 1e6,
             "bf16_TFLOPs_queued": 2 * S * O * I / tq / 1e12}
        out["rows"].append(r)
        print("%d x %d S=%d: %.1f us, queued %.1f us, %.0f TFLOP/s" % (O, I, S, t1 * 1e6, tq * 1e6, r["bf16_TFLOPs_queued"]))
    del Ws; torch.cuda.empty_cache()
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "anchor_gemm.json"), "w"), indent=1)
