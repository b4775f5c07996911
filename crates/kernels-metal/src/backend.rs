//! The wgpu tier as a [`quant_core::capability::Backend`] ("wgpu"), so the one conformance
//! suite and `cargo xtask test-matrix` run it like any other backend.
//!
//! [`WgpuConformance::new`] is cheap and infallible: the adapter is opened on first use
//! (`probe` or `gemv`), once per process for the default options, and a missing adapter or
//! feature is reported by `probe` as `BackendError::Unavailable { why }`.

use crate::caps::CAPABILITIES;
use crate::device::{Options, WgpuBackend};
use quant_core::QTensor;
use quant_core::capability::{Backend, BackendError, Capability};
use std::sync::{Arc, OnceLock};

type Opened = Result<Arc<WgpuBackend>, BackendError>;

/// The wgpu backend for the conformance suite.
pub struct WgpuConformance {
    /// `None`: the process-wide backend opened with [`Options::from_env`].
    options: Option<Options>,
    own: OnceLock<Opened>,
}

/// The backend every default [`WgpuConformance`] of this process shares, so pipelines are
/// compiled once per process.
fn shared() -> &'static Opened {
    static SHARED: OnceLock<Opened> = OnceLock::new();
    SHARED.get_or_init(|| WgpuBackend::new().map(Arc::new))
}

impl WgpuConformance {
    /// The backend with [`Options::from_env`]; opens nothing until first used.
    pub fn new() -> Self {
        WgpuConformance {
            options: None,
            own: OnceLock::new(),
        }
    }

    /// A backend with its own device, opened with `options` on first use.
    pub fn with_options(options: Options) -> Self {
        WgpuConformance {
            options: Some(options),
            own: OnceLock::new(),
        }
    }

    /// The opened backend, or why there is none.
    pub fn backend(&self) -> Result<&WgpuBackend, BackendError> {
        let opened = match &self.options {
            None => shared(),
            Some(o) => self
                .own
                .get_or_init(|| WgpuBackend::with_options(o).map(Arc::new)),
        };
        match opened {
            Ok(b) => Ok(b),
            Err(e) => Err(e.clone()),
        }
    }
}

impl Default for WgpuConformance {
    fn default() -> Self {
        Self::new()
    }
}

impl Backend for WgpuConformance {
    fn name(&self) -> &'static str {
        "wgpu"
    }

    fn probe(&self) -> Result<(), BackendError> {
        self.backend().map(|_| ())
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
        if quant_core::capability::lookup(
            CAPABILITIES,
            quant_core::capability::Op::Gemv,
            t.format(),
            s,
        )
        .is_none()
        {
            return Err(BackendError::NotImplemented {
                backend: "wgpu",
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
        let w = b.upload(t)?;
        let out = b.gemv(&w, x, s)?;
        y.copy_from_slice(&out);
        Ok(())
    }
}
