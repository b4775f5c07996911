#!/usr/bin/env python3
"""gguf-py as an oracle for tessera's GGML block codecs (crates/container-io/tests/gguf_vs_gguf_py.rs).

Usage:
  gguf_py_oracle.py check
      exit 0 if the gguf and numpy packages import (prints their versions), 3 otherwise
  gguf_py_oracle.py dequantize TYPE_ID IN.bin OUT.f32
      IN.bin: whole blocks of GGML type TYPE_ID; OUT.f32: gguf.quants.dequantize's f32 output
  gguf_py_oracle.py quantize TYPE_ID ROW_LEN IN.f32 OUT.bin
      IN.f32: rows of ROW_LEN f32 values; OUT.bin: gguf.quants.quantize's blocks
  gguf_py_oracle.py tensors FILE.gguf OUT_DIR
      every tensor of a GGUF file, dequantized by gguf-py, as OUT_DIR/<name>.f32
"""
import sys


def main() -> int:
    try:
        import numpy as np
        import gguf
        from gguf import GGMLQuantizationType as T
        from gguf.quants import dequantize, quantize
    except Exception as e:  # noqa: BLE001 - any import failure means "skip"
        print(f"gguf-py unavailable: {e}")
        return 3
    cmd = sys.argv[1]
    if cmd == "check":
        import importlib.metadata as md
        print(f"gguf {md.version('gguf')} numpy {np.__version__}")
        return 0
    if cmd == "dequantize":
        qtype = T(int(sys.argv[2]))
        raw = np.fromfile(sys.argv[3], dtype=np.uint8)
        if qtype == T.BF16:
            raw = raw.view(np.uint8)
        out = dequantize(raw, qtype).astype(np.float32)
        out.tofile(sys.argv[4])
        return 0
    if cmd == "quantize":
        qtype = T(int(sys.argv[2]))
        row = int(sys.argv[3])
        x = np.fromfile(sys.argv[4], dtype=np.float32).reshape((-1, row))
        q = quantize(x, qtype)
        np.ascontiguousarray(q).view(np.uint8).tofile(sys.argv[5])
        return 0
    if cmd == "tensors":
        r = gguf.GGUFReader(sys.argv[2])
        import os
        for t in r.tensors:
            out = dequantize(t.data, t.tensor_type).astype(np.float32)
            out.tofile(os.path.join(sys.argv[3], t.name + ".f32"))
        return 0
    print(f"unknown command {cmd!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
