//! The Vulkan tier as a [`quant_core::capability::Backend`] ("vulkan"), so the one
//! conformance suite and `cargo xtask test-matrix` run it like any other backend.
//!
//! [`VulkanConformance::new`] touches no driver: the device is opened on the first
//! `probe`/`gemv` and kept, or the reason it could not be is kept and reported by `probe`.
//! Every adapter with the same options shares one device for the whole process
//! ([`Context::shared`]), as the wgpu tier's conformance adapters do: a test run opens a
//! handful of devices, not one per test.

use crate::caps::CAPABILITIES;
use crate::device::{AdapterInfo, Context, Options};
use crate::error::VulkanError;
use crate::gemv::VulkanBackend;
use quant_core::QTensor;
use quant_core::capability::{Backend, BackendError, Capability};
use std::sync::OnceLock;

/// The Vulkan backend for the conformance suite, opened lazily.
pub struct VulkanConformance {
    options: Result<Options, VulkanError>,
    #[cfg(feature = "mutation-test")]
    mutation: Option<crate::gemv::Mutation>,
    backend: OnceLock<Result<VulkanBackend, VulkanError>>,
}

impl VulkanConformance {
    /// The device `TESSERA_VK_ADAPTER` etc. select (see [`Options::from_env`]); cheap and
    /// infallible, the device is opened on first use.
    pub fn new() -> Self {
        VulkanConformance {
            options: Options::from_env(),
            #[cfg(feature = "mutation-test")]
            mutation: None,
            backend: OnceLock::new(),
        }
    }

    /// As [`VulkanConformance::new`], with explicit options (adapter, subgroups, wave).
    pub fn with_options(options: Options) -> Self {
        VulkanConformance {
            options: Ok(options),
            #[cfg(feature = "mutation-test")]
            mutation: None,
            backend: OnceLock::new(),
        }
    }

    /// A backend with a deliberate defect (mutation tests only).
    #[cfg(feature = "mutation-test")]
    pub fn with_mutation(options: Options, m: crate::gemv::Mutation) -> Self {
        VulkanConformance {
            options: Ok(options),
            mutation: Some(m),
            backend: OnceLock::new(),
        }
    }

    /// The backend, opening the device on first use.
    pub fn backend(&self) -> Result<&VulkanBackend, VulkanError> {
        self.backend
            .get_or_init(|| {
                let o = self.options.clone()?;
                let ctx = Context::shared(&o)?;
                #[cfg(feature = "mutation-test")]
                if let Some(m) = self.mutation {
                    return Ok(VulkanBackend::mutant(ctx, m));
                }
                Ok(VulkanBackend::with_context(ctx))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The adapter the backend runs on (opens the device), or why there is none.
    pub fn adapter(&self) -> Result<AdapterInfo, VulkanError> {
        self.backend().map(|b| b.info().clone())
    }
}

impl Default for VulkanConformance {
    fn default() -> Self {
        Self::new()
    }
}

impl Backend for VulkanConformance {
    fn name(&self) -> &'static str {
        "vulkan"
    }

    fn probe(&self) -> Result<(), BackendError> {
        self.backend().map(|_| ()).map_err(BackendError::from)
    }

    fn capabilities(&self) -> &'static [Capability] {
        CAPABILITIES
    }

    fn gemv(
        &self,
        t: &QTensor<'_>,
        x: &[f32],
        s: usize,
        y: &mut [f32],
    ) -> Result<(), BackendError> {
        let b = self.backend()?;
        if crate::caps::lookup(t.format(), s).is_none() {
            return Err(BackendError::NotImplemented {
                backend: "vulkan",
                op: "gemv",
                format: t.format(),
                s,
            });
        }
        if s.checked_mul(t.rows()) != Some(y.len()) {
            return Err(BackendError::Input(quant_core::QuantError::OutputSize {
                format: t.format(),
                s,
                rows: t.rows(),
                got: y.len(),
            }));
        }
        // The trait hands a borrowed tensor each call, so it is uploaded each call; users of
        // `VulkanBackend` upload once and keep the `DeviceTensor`.
        let w = b.upload(t)?;
        let out = b.gemv(&w, x, s)?;
        y.copy_from_slice(&out);
        Ok(())
    }
}
