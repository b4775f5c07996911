//! Every test of the Vulkan tier in one binary (the GPU machine's bundle carries one test
//! executable, and each embeds the SPIR-V): the conformance suite, the plumbing, and the
//! mutations the suite must catch. Without a Vulkan loader or ICD each test says
//! "skipped: ..." (unless TESSERA_REQUIRE_BACKENDS=vulkan).

mod conformance;
mod device;
mod mutations;
