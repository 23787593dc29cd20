//! The seeded random source: latency samples and fault rolls. Deterministic
//! for a given seed and order of calls.

use crate::core::config::{Behavior, Dist};
use std::sync::atomic::{AtomicU64, Ordering};

/// splitmix64 over an atomic counter, shared by all requests.
pub struct Rng {
    state: AtomicU64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng {
            state: AtomicU64::new(seed),
        }
    }

    /// Uniform in [0, 1) (splitmix64 over an atomic counter).
    pub fn uniform(&self) -> f64 {
        let mut z = self
            .state
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn std_normal(&self) -> f64 {
        let u1 = self.uniform().max(f64::MIN_POSITIVE);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// One latency sample from a behaviour's distribution, ms.
    pub fn sample_latency(&self, b: &Behavior) -> u64 {
        let l = &b.latency;
        let v = match l.dist {
            Dist::Fixed => l.mean_ms,
            Dist::Normal => l.mean_ms + l.sd_ms * self.std_normal(),
            Dist::Lognormal => {
                if l.mean_ms <= 0.0 {
                    0.0
                } else {
                    // mean and sd are those of the lognormal itself.
                    let s2 = (1.0 + (l.sd_ms * l.sd_ms) / (l.mean_ms * l.mean_ms)).ln();
                    let mu = l.mean_ms.ln() - s2 / 2.0;
                    (mu + s2.sqrt() * self.std_normal()).exp()
                }
            }
        };
        if v.is_finite() && v > 0.0 {
            v.round() as u64
        } else {
            0
        }
    }
}
