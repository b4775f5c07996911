//! The shared conformance suite (quant_core::conformance), one test per format, on the CUDA
//! tier. Without a GPU every test says "skipped: ..." (unless TESSERA_REQUIRE_BACKENDS=cuda).
quant_core::conformance_tests!(kernels_cuda::CudaConformance::new());
