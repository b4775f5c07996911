//! kernels-cuda: the CUDA tier of tessera.
//!
//! It will hold CUDA C kernels (sources in `shaders/cuda/`) compiled by NVRTC through cudarc,
//! with libcuda loaded dynamically: GEMV for S = 1..16 for every registry format, GEMM for
//! S >= 32 on tensor cores, the MoE grouped GEMV, and its capability table as data. Where no
//! GPU exists every entry will return a typed "unavailable: why". Nothing is implemented
//! yet (issue 4); this crate intentionally exports nothing until it is.
