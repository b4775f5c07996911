//! The KV cache: per layer, what attention needs of every past position.
//!
//! GQA layers keep RoPE'd keys and values per KV head. MLA layers keep only the compressed
//! latent (after `kv_a_layernorm`) and the shared RoPE'd key part, which is what kv_b
//! absorption reads: kv_lora_rank + qk_rope_head_dim floats a position instead of
//! heads x (qk_head_dim + v_head_dim).

/// One layer's cache, rows appended position by position.
#[derive(Clone, Debug)]
pub enum LayerCache {
    /// k and v: [T, kv_heads * head_dim] each.
    Gqa {
        width: usize,
        k: Vec<f32>,
        v: Vec<f32>,
    },
    /// latent: [T, kv_lora_rank]; k_rot: [T, qk_rope_head_dim].
    Mla {
        rank: usize,
        rope: usize,
        latent: Vec<f32>,
        k_rot: Vec<f32>,
    },
}

impl LayerCache {
    pub fn gqa(width: usize) -> LayerCache {
        LayerCache::Gqa {
            width,
            k: Vec::new(),
            v: Vec::new(),
        }
    }

    pub fn mla(rank: usize, rope: usize) -> LayerCache {
        LayerCache::Mla {
            rank,
            rope,
            latent: Vec::new(),
            k_rot: Vec::new(),
        }
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        match self {
            LayerCache::Gqa { width, k, .. } => k.len() / width,
            LayerCache::Mla { rank, latent, .. } => latent.len() / rank,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The cache of a whole model: one [`LayerCache`] per layer, all the same length between
/// forward passes.
#[derive(Clone, Debug)]
pub struct KvCache {
    pub layers: Vec<LayerCache>,
}

impl KvCache {
    /// Positions cached (the position of the next token).
    pub fn len(&self) -> usize {
        self.layers.first().map_or(0, LayerCache::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every position.
    pub fn clear(&mut self) {
        for l in &mut self.layers {
            match l {
                LayerCache::Gqa { k, v, .. } => {
                    k.clear();
                    v.clear();
                }
                LayerCache::Mla { latent, k_rot, .. } => {
                    latent.clear();
                    k_rot.clear();
                }
            }
        }
    }
}
