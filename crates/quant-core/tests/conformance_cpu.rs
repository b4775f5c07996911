//! The conformance suite on the CPU backend: one test per registry format, each running
//! every op, shape class and batch against the f64 oracle (see `quant_core::conformance`).
//!
//! `TESSERA_SEED=<seed>` replays a run; the seed is printed with `--nocapture`.

quant_core::conformance_tests!(quant_core::cpu_backend::CpuBackend);
