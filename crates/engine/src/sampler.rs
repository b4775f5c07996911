//! Token choice. Greedy only (temperature 0): the argmax, first index on ties.

/// The greedy choice from one row of logits.
pub fn greedy(logits: &[f32]) -> u32 {
    // Vocabularies are far below u32::MAX; the config check bounds them.
    crate::ops::argmax(logits) as u32
}
