//! `.npy` files of little-endian f32 (format version 1.0), as `numpy.save` writes and
//! `numpy.load` reads: what `--logits-out` writes and what the parity tests read the
//! reference logits from. Only C-order `<f4` arrays are read; anything else is refused.

use crate::error::{EngineError, Result};

const MAGIC: &[u8] = b"\x93NUMPY";

/// The bytes of a C-order f32 array of `shape` (product must equal data.len()).
pub fn to_bytes(shape: &[usize], data: &[f32]) -> Result<Vec<u8>> {
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if n != Some(data.len()) {
        return Err(EngineError::Input(format!(
            "npy: shape {shape:?} does not hold {} values",
            data.len()
        )));
    }
    let dims = match shape {
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {dims}, }}");
    // numpy pads the header with spaces and a newline so the data starts 64-byte aligned.
    let unpadded = MAGIC.len() + 2 + 2 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let hlen = u16::try_from(header.len())
        .map_err(|_| EngineError::Input("npy: header too long".to_string()))?;
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + header.len() + data.len() * 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&hlen.to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in data {
        out.extend_from_slice(&v.to_le_bytes());
    }
    Ok(out)
}

/// Writes [`to_bytes`] to `path`.
pub fn write(path: &std::path::Path, shape: &[usize], data: &[f32]) -> Result<()> {
    let bytes = to_bytes(shape, data)?;
    std::fs::write(path, bytes).map_err(|e| EngineError::Io {
        file: path.display().to_string(),
        msg: format!("cannot write: {e}"),
    })
}

/// Parses a C-order `<f4` array: (shape, values).
pub fn from_bytes(file: &str, b: &[u8]) -> Result<(Vec<usize>, Vec<f32>)> {
    let bad = |msg: &str| EngineError::Io {
        file: file.to_string(),
        msg: format!("not a readable .npy: {msg}"),
    };
    if b.len() < 10 || &b[..6] != MAGIC {
        return Err(bad("no \\x93NUMPY magic"));
    }
    let (hlen, start): (usize, usize) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        _ => return Err(bad("unknown version")),
    };
    let end = start
        .checked_add(hlen)
        .filter(|&e| e <= b.len())
        .ok_or_else(|| bad("header runs past the end"))?;
    let header = std::str::from_utf8(&b[start..end]).map_err(|_| bad("header is not text"))?;
    if !header.contains("'descr': '<f4'") {
        return Err(bad("dtype is not <f4"));
    }
    if !header.contains("'fortran_order': False") {
        return Err(bad("fortran order"));
    }
    let shape_text = header
        .split("'shape': (")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .ok_or_else(|| bad("no shape"))?;
    let shape = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| bad("shape is not integers")))
        .collect::<Result<Vec<_>>>()?;
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| bad("shape overflows"))?;
    let data = &b[end..];
    if Some(data.len()) != n.checked_mul(4) {
        return Err(bad(&format!(
            "{} data bytes for shape {shape:?}",
            data.len()
        )));
    }
    let values = data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok((shape, values))
}

/// Reads a `.npy` file with [`from_bytes`].
pub fn read(path: &std::path::Path) -> Result<(Vec<usize>, Vec<f32>)> {
    let file = path.display().to_string();
    let b = std::fs::read(path).map_err(|e| EngineError::Io {
        file: file.clone(),
        msg: format!("cannot read: {e}"),
    })?;
    from_bytes(&file, &b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_alignment() {
        let data: Vec<f32> = (0..12).map(|i| i as f32 * 0.5).collect();
        let b = to_bytes(&[3, 4], &data).unwrap();
        let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        let (shape, back) = from_bytes("x.npy", &b).unwrap();
        assert_eq!(shape, vec![3, 4]);
        assert_eq!(back, data);
        assert!(to_bytes(&[5, 4], &data).is_err());
        assert!(from_bytes("x.npy", &b[..b.len() - 1]).is_err());
    }
}
