//! A zeroed, fixed-length buffer whose first element sits on a 64-byte (cache-line)
//! boundary: the activation side of the int8 path ([`super::QActs`]) is read with 32- and
//! 64-byte loads at multiples of their size, and a `Vec`'s 16-byte alignment made about half
//! of them split two cache lines. Measured (2026-11-30, this Zen 4, one thread, in cache,
//! [512 x 4096], per-thread CPU time, unaligned and aligned builds back to back on a
//! machine other builds shared): int8-row 94.5 -> 84.9 ns a row, int4-g64 89.6 -> 84.2,
//! mq4-g256-v2 97.1 -> 92.8, fp8 132.8 -> 125.3; q4_k, q6_k, q8_0 unchanged.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// One cache line of storage.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Element types for which every bit pattern (all zeros in particular) is a valid value
/// and whose alignment divides 64.
///
/// # Safety
/// Implement only for such types.
pub(crate) unsafe trait Plain: Copy {}
// SAFETY: integers and floats: every bit pattern is a value; alignment <= 8.
unsafe impl Plain for i8 {}
// SAFETY: as above.
unsafe impl Plain for u16 {}
// SAFETY: as above.
unsafe impl Plain for i32 {}
// SAFETY: as above.
unsafe impl Plain for f32 {}

/// `len` values of `T`, zeroed, starting on a 64-byte boundary.
pub(crate) struct Lines<T: Plain> {
    lines: Vec<Line>,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Plain> Lines<T> {
    pub(crate) fn zeroed(len: usize) -> Lines<T> {
        let bytes = len.saturating_mul(size_of::<T>());
        Lines {
            lines: vec![Line([0; 64]); bytes.div_ceil(64)],
            len,
            _t: PhantomData,
        }
    }
}

impl<T: Plain> Deref for Lines<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: the lines hold at least `len * size_of::<T>()` initialised bytes, aligned
        // to 64, which divides T's alignment; every bit pattern is a T (`Plain`).
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast(), self.len) }
    }
}

impl<T: Plain> DerefMut for Lines<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as `deref`, borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_on_a_line_and_holds_zeroed_writable_values() {
        for len in [0, 1, 15, 16, 17, 1000] {
            let mut v = Lines::<f32>::zeroed(len);
            assert_eq!(v.len(), len);
            assert_eq!(v.as_ptr() as usize % 64, 0);
            assert!(v.iter().all(|&x| x == 0.0));
            for (i, x) in v.iter_mut().enumerate() {
                *x = i as f32;
            }
            assert!(v.iter().enumerate().all(|(i, &x)| x == i as f32));
        }
        let q = Lines::<i8>::zeroed(3);
        assert_eq!(q.as_ptr() as usize % 64, 0);
    }
}
