//! Weighted key choice. Weights are expanded once at config time into a
//! slot table, so the common case is one modulo and one index; the random
//! source is a parameter so tests are deterministic.
//!
//! A request with a session ([`crate::session`]) is placed by weighted
//! rendezvous hashing instead ([`KeyPool::pick_affine`]): each key scores
//! `weight / -ln(u)` with `u` uniform from the hash of (session, key id),
//! and the best available key wins. Every worker and replica computes the
//! same choice; over many sessions each key gets its weight's share; a key
//! that cools moves only its own sessions (each to its next-best key), and
//! they come back when it recovers.

/// Keys allowed for one model, weights expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPool {
    /// One entry per unit of weight: a key index into `Provider::keys`.
    slots: Vec<u16>,
    /// (key index, weight) for the slow path (some keys cooling down).
    weights: Vec<(u16, u32)>,
}

impl KeyPool {
    pub fn new(weights: &[(u16, u32)]) -> KeyPool {
        let mut slots = Vec::new();
        for &(k, w) in weights {
            for _ in 0..w {
                slots.push(k);
            }
        }
        KeyPool {
            slots,
            weights: weights.to_vec(),
        }
    }

    pub fn len(&self) -> usize {
        self.weights.len()
    }

    pub fn is_empty(&self) -> bool {
        self.weights.is_empty()
    }

    /// Key indices in this pool.
    pub fn keys(&self) -> impl Iterator<Item = usize> + '_ {
        self.weights.iter().map(|&(k, _)| k as usize)
    }

    /// Pick a key index. `random` is any uniformly random u32; `available`
    /// says whether a key is usable (not cooling down). Returns `None` when
    /// every key is cooling down.
    pub fn pick(&self, random: u32, available: impl Fn(usize) -> bool) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let first = *self.slots.get(random as usize % self.slots.len())? as usize;
        if available(first) {
            return Some(first);
        }
        // Slow path: weighted choice among the keys still available.
        let live: Vec<(u16, u32)> = self
            .weights
            .iter()
            .copied()
            .filter(|&(k, _)| available(k as usize))
            .collect();
        let total: u64 = live.iter().map(|&(_, w)| w as u64).sum();
        if total == 0 {
            return None;
        }
        let mut r = (random as u64).wrapping_mul(2654435761) % total;
        for (k, w) in live {
            if r < w as u64 {
                return Some(k as usize);
            }
            r -= w as u64;
        }
        None
    }
}

impl KeyPool {
    /// The key of a session: the available key with the highest weighted
    /// rendezvous score for `session` (`key_seed`: a fixed hash of each
    /// key's id, so scores do not depend on the keys' order or secrets).
    /// `None` when every key is cooling down.
    pub fn pick_affine(
        &self,
        session: u64,
        key_seed: impl Fn(usize) -> u64,
        available: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        // Best score first; availability (a host call per key in the
        // filter) is asked only until a key is usable.
        let mut ranked: Vec<(f64, usize)> = self
            .weights
            .iter()
            .filter(|&&(_, w)| w > 0)
            .map(|&(k, w)| {
                (
                    rendezvous_score(session, key_seed(k as usize), w),
                    k as usize,
                )
            })
            .collect();
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
        ranked.into_iter().map(|(_, k)| k).find(|&k| available(k))
    }
}

/// `weight / -ln(u)`, `u` in (0, 1) from the mixed hash of session and key:
/// the largest of these is key i's with probability weight_i / total.
fn rendezvous_score(session: u64, key_seed: u64, weight: u32) -> f64 {
    let h = crate::hash::mix(session ^ key_seed.rotate_left(17));
    // 53 random bits, never 0 or 1.
    let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    f64::from(weight) / -u.ln()
}

/// Small deterministic PRNG (xorshift64*), used where the host gives no
/// randomness and by tests.
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> XorShift {
        XorShift(seed | 1)
    }
    pub fn next_u32(&mut self) -> u32 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_slots() {
        let p = KeyPool::new(&[(0, 3), (1, 1)]);
        let picks: Vec<_> = (0..4).map(|r| p.pick(r, |_| true).unwrap()).collect();
        assert_eq!(picks, vec![0, 0, 0, 1]);
    }

    #[test]
    fn skips_cooling_keys() {
        let p = KeyPool::new(&[(0, 3), (1, 1)]);
        for r in 0..100 {
            assert_eq!(p.pick(r, |k| k != 0), Some(1));
        }
        assert_eq!(p.pick(7, |_| false), None);
    }

    #[test]
    fn weighted_split_statistical() {
        let p = KeyPool::new(&[(0, 3), (1, 1)]);
        let mut rng = XorShift::new(42);
        let mut n0 = 0;
        for _ in 0..10_000 {
            if p.pick(rng.next_u32(), |_| true) == Some(0) {
                n0 += 1;
            }
        }
        assert!((7_000..8_000).contains(&n0), "n0={n0}");
    }

    #[test]
    fn affine_choice_keeps_weights_and_moves_only_a_cooling_keys_sessions() {
        let p = KeyPool::new(&[(0, 1), (1, 2), (2, 1)]);
        let seed = |k: usize| crate::hash::hash_bytes(0, format!("key-{k}").as_bytes());
        let mut rng = XorShift::new(3);
        let sessions: Vec<u64> = (0..10_000)
            .map(|_| (u64::from(rng.next_u32()) << 32) | u64::from(rng.next_u32()))
            .collect();
        let all: Vec<usize> = sessions
            .iter()
            .map(|&s| p.pick_affine(s, seed, |_| true).unwrap())
            .collect();
        // Each key's share of sessions is its weight's, within 5 %.
        for (k, share) in [(0, 0.25), (1, 0.5), (2, 0.25)] {
            let n = all.iter().filter(|&&c| c == k).count() as f64 / 10_000.0;
            assert!((n - share).abs() < 0.05 * share, "key {k}: {n}");
        }
        // The same session always lands on the same key.
        assert_eq!(p.pick_affine(sessions[0], seed, |_| true), Some(all[0]));
        // Key 1 cools: only its sessions move; the others stay.
        for (s, &before) in sessions.iter().zip(&all) {
            let now = p.pick_affine(*s, seed, |k| k != 1).unwrap();
            if before == 1 {
                assert_ne!(now, 1);
            } else {
                assert_eq!(now, before);
            }
        }
        assert_eq!(p.pick_affine(1, seed, |_| false), None);
    }

    #[test]
    fn slow_path_keeps_weights() {
        let p = KeyPool::new(&[(0, 1), (1, 3), (2, 1)]);
        let mut rng = XorShift::new(7);
        let mut n1 = 0;
        for _ in 0..10_000 {
            match p.pick(rng.next_u32(), |k| k != 0) {
                Some(1) => n1 += 1,
                Some(2) => {}
                other => panic!("{other:?}"),
            }
        }
        assert!((7_000..8_000).contains(&n1), "n1={n1}");
    }
}
