//! Format stamps: what tessera writes into `__metadata__` for every tensor it stores.
//!
//! Key `tessera.<name>`, value a compact JSON object (safetensors metadata values are
//! strings), e.g. `{"format":"int4-g64","shape":[4096,7168],"group":64,"rotation":"none",
//! "scales":"f32","version":1}`. The format name is the identity; the other fields repeat
//! what the registry says about that format so a reader (or a person) can cross-check them,
//! and any that disagree with the registry are refused by name.

use crate::error::{ContainerError, Result};
use quant_core::{Format, Rotation};
use serde::{Deserialize, Serialize};

/// Version of the container layout written by this build.
pub const CONTAINER_VERSION: u32 = 1;

/// Metadata key prefix of per-tensor stamps.
pub const STAMP_PREFIX: &str = "tessera.";

/// Suffix of a quantized tensor's scale sidecar.
pub const SIDECAR_SUFFIX: &str = ".qs";

/// The metadata key of `tensor`'s stamp.
pub fn stamp_key(tensor: &str) -> String {
    format!("{STAMP_PREFIX}{tensor}")
}

/// The sidecar name of `tensor`.
pub fn sidecar_name(tensor: &str) -> String {
    format!("{tensor}{SIDECAR_SUFFIX}")
}

/// The stamp as written (JSON field names are the wire format).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
struct StampWire {
    format: String,
    shape: Vec<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    group: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rotation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scales: Option<String>,
    version: u32,
}

/// A validated stamp: the format and logical [O, I] of one tensor.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub format: Format,
    pub rows: usize,
    pub cols: usize,
    /// FWHT seed for rotated formats (the registry default for the others).
    pub seed: u64,
}

impl Stamp {
    pub fn new(format: Format, rows: usize, cols: usize, seed: u64) -> Self {
        Stamp {
            format,
            rows,
            cols,
            seed,
        }
    }

    /// The compact JSON written into `__metadata__`.
    pub fn to_json(&self) -> String {
        let spec = self.format.spec();
        let rotated = match spec.rotation {
            Rotation::None => false,
            Rotation::Fwht256 => true,
        };
        let w = StampWire {
            format: spec.name.to_string(),
            shape: vec![self.rows as u64, self.cols as u64],
            group: spec.group_size(),
            rotation: Some(spec.rotation.name().to_string()),
            seed: rotated.then_some(self.seed),
            scales: spec.scale_encoding().map(|e| e.name().to_string()),
            version: CONTAINER_VERSION,
        };
        // A struct of strings and integers always serializes.
        serde_json::to_string(&w).unwrap_or_default()
    }

    /// Parses and cross-checks a stamp against the registry.
    pub fn parse(file: &str, tensor: &str, json: &str) -> Result<Stamp> {
        let bad = |msg: String| ContainerError::StampJson {
            file: file.to_string(),
            tensor: tensor.to_string(),
            msg,
        };
        let w: StampWire = serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
        if w.version != CONTAINER_VERSION {
            return Err(bad(format!(
                "version {} is not {CONTAINER_VERSION}, the version this build reads",
                w.version
            )));
        }
        let format: Format = w
            .format
            .parse()
            .map_err(|_| ContainerError::StampUnknownFormat {
                file: file.to_string(),
                tensor: tensor.to_string(),
                name: w.format.clone(),
            })?;
        let spec = format.spec();
        let incons = |field: &'static str, stamp: String, registry: String| {
            ContainerError::StampInconsistent {
                file: file.to_string(),
                tensor: tensor.to_string(),
                format,
                field,
                stamp,
                registry,
            }
        };
        let show = |v: Option<String>| v.unwrap_or_else(|| "none".to_string());
        if let Some(g) = w.group
            && spec.group_size() != Some(g)
        {
            return Err(incons(
                "group",
                g.to_string(),
                show(spec.group_size().map(|g| g.to_string())),
            ));
        }
        if let Some(r) = &w.rotation
            && r != spec.rotation.name()
        {
            return Err(incons(
                "rotation",
                r.clone(),
                spec.rotation.name().to_string(),
            ));
        }
        if let Some(s) = &w.scales {
            let want = spec.scale_encoding().map(|e| e.name().to_string());
            if want.as_deref() != Some(s.as_str()) {
                return Err(incons("scales", s.clone(), show(want)));
            }
        }
        let (rows, cols) = match w.shape.as_slice() {
            [o, i] => (*o, *i),
            other => return Err(bad(format!("shape {other:?} is not [O, I]"))),
        };
        let to_usize = |v: u64| {
            usize::try_from(v).map_err(|_| bad(format!("dimension {v} does not fit this machine")))
        };
        let (rows, cols) = (to_usize(rows)?, to_usize(cols)?);
        spec.check_shape(rows, cols)
            .map_err(|source| ContainerError::Quant {
                file: file.to_string(),
                tensor: tensor.to_string(),
                source,
            })?;
        let seed = match spec.rotation {
            Rotation::None => w
                .seed
                .unwrap_or(quant_core::registry::DEFAULT_ROTATION_SEED),
            Rotation::Fwht256 => w
                .seed
                .ok_or_else(|| bad(format!("{format} is rotated but the stamp has no seed")))?,
        };
        Ok(Stamp {
            format,
            rows,
            cols,
            seed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_format() {
        for f in Format::all() {
            let s = Stamp::new(f, 7, 512, 1234);
            let back = Stamp::parse("f", "t", &s.to_json()).unwrap();
            assert_eq!(back.format, f);
            assert_eq!((back.rows, back.cols), (7, 512));
        }
    }

    #[test]
    fn example_is_compact() {
        let s = Stamp::new(Format::Int4G64, 4096, 7168, 42);
        assert_eq!(
            s.to_json(),
            r#"{"format":"int4-g64","shape":[4096,7168],"group":64,"rotation":"none","scales":"f32","version":1}"#
        );
    }
}
