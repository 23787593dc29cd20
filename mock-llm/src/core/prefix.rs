//! Each provider's prompt cache, simulated per key: a prefix the same key
//! sent within the TTL is answered as cached tokens, in the provider's own
//! usage fields (the provider modules write them).
//!
//! Trade-off: the mock is benchmarked for CPU per request, so the simulation
//! costs nothing below a model's smallest cacheable prompt (one comparison);
//! above it, one hash pass over the prompt's blocks and one lock of the
//! store. Prefixes are compared at block boundaries (a message, an input
//! item, a content block), not token by token: agents grow a conversation
//! by appending blocks, so the longest cached prefix of a turn always ends
//! on one, and the figures match a token-level cache for them.
//!
//! The rules, from the providers' documentation:
//! - [`Rule::Automatic`] (OpenAI, Azure, Gemini 2.5+): every prompt of at
//!   least the model's minimum (OpenAI 1,024 tokens) is cached; a later
//!   prompt reads back its longest cached prefix, OpenAI in 128-token
//!   increments. OpenAI routes by `prompt_cache_key` with the prefix, so the
//!   provider modules hash the key in first: another key, another cache.
//! - [`Rule::Breakpoints`] (Anthropic `cache_control`, Bedrock `cachePoint`):
//!   only the prefixes ending at a breakpoint are written (of at least the
//!   model's minimum); each breakpoint reads the longest entry among the
//!   [`LOOKBACK_BLOCKS`] block boundaries before it. What is read counts as
//!   cache reads, what the last breakpoint adds beyond it as cache writes,
//!   the rest as plain input.
//!
//! Memory is bounded: the store keeps at most `max_entries` prefixes in two
//! generations (new entries and hits go to the young one; when it is full
//! the old one is dropped and the young one becomes old), an LRU
//! approximation in O(1) per operation. An entry lives `ttl` after its last
//! use. The clock is a parameter, so tests never sleep.

use serde_json::Value;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;

/// Block boundaries a breakpoint looks back over for an earlier entry
/// (Anthropic's documented window).
pub const LOOKBACK_BLOCKS: usize = 20;

/// How a provider decides what it caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Every prefix; read back in increments of `step` tokens.
    Automatic { step: u64 },
    /// Only prefixes ending at a breakpoint.
    Breakpoints,
}

/// Tokens of a prefix of `chars` characters (the counting rule, rounded
/// down so a prefix never counts more than the whole prompt).
fn prefix_tokens(chars: usize) -> u64 {
    (chars / 4) as u64
}

/// The end of one block of a prompt: the hash of everything up to it, the
/// prompt characters up to it and, at a breakpoint, the entry's TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    pub hash: u64,
    pub chars: usize,
    pub ttl_ms: Option<u64>,
}

enum Item<'v> {
    /// Hashed into the prefix, no boundary (tools, a cache routing key).
    Feed(&'v Value),
    /// A block ending at byte `end` of the provider's prompt text.
    Block(&'v Value, usize),
    /// The block before is a breakpoint.
    Breakpoint(u64),
}

/// A prompt's blocks in the order the provider caches them, collected while
/// the provider module reads the request; hashed only when the cache is
/// asked ([`Blocks::marks`]).
#[derive(Default)]
pub struct Blocks<'v> {
    items: Vec<Item<'v>>,
    breakpoints: usize,
}

impl<'v> Blocks<'v> {
    pub fn new() -> Blocks<'v> {
        Blocks::default()
    }
    /// Content that is part of the prefix but ends no block.
    pub fn feed(&mut self, v: &'v Value) {
        self.items.push(Item::Feed(v));
    }
    /// A block whose text ends at byte `end` of the prompt text given to
    /// [`Blocks::marks`] (blocks without text repeat the last end).
    pub fn block(&mut self, v: &'v Value, end: usize) {
        self.items.push(Item::Block(v, end));
    }
    /// The last block is a breakpoint whose entry lives `ttl_ms`.
    pub fn breakpoint(&mut self, ttl_ms: u64) {
        self.items.push(Item::Breakpoint(ttl_ms));
        self.breakpoints += 1;
    }
    pub fn has_breakpoint(&self) -> bool {
        self.breakpoints > 0
    }

    /// Hash the blocks: one mark per block, its hash covering everything
    /// before it. `text` is the provider's prompt text the block ends point
    /// into; characters are counted once, block by block.
    pub fn marks(&self, text: &str) -> Vec<Mark> {
        let mut marks: Vec<Mark> = Vec::new();
        let mut h: u64 = 0x6d6f_636b_2d6c_6c6d;
        let (mut at, mut chars) = (0usize, 0usize);
        for item in &self.items {
            match *item {
                Item::Feed(v) => h = hash_value(h, v),
                Item::Block(v, end) => {
                    h = hash_value(h, v);
                    if end > at {
                        chars += text.get(at..end).map_or(0, |s| s.chars().count());
                        at = end;
                    }
                    marks.push(Mark {
                        hash: mix(h),
                        chars,
                        ttl_ms: None,
                    });
                }
                Item::Breakpoint(ttl) => {
                    if let Some(m) = marks.last_mut() {
                        m.ttl_ms = Some(m.ttl_ms.map_or(ttl, |t| t.max(ttl)));
                    }
                }
            }
        }
        marks
    }
}

const K: u64 = 0x9E37_79B9_7F4A_7C15;

fn step(h: u64, w: u64) -> u64 {
    (h ^ w).wrapping_mul(K).rotate_left(29)
}

/// splitmix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn hash_bytes(mut h: u64, b: &[u8]) -> u64 {
    h = step(h, b.len() as u64);
    let mut words = b.chunks_exact(8);
    for w in &mut words {
        let mut a = [0u8; 8];
        a.copy_from_slice(w);
        h = step(h, u64::from_le_bytes(a));
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut a = [0u8; 8];
        a[..rest.len()].copy_from_slice(rest);
        h = step(h, u64::from_le_bytes(a));
    }
    h
}

/// A hash of a JSON value's content. `cache_control` members are left out:
/// a breakpoint marks where a prefix ends, it is not part of it (Claude
/// Code moves its breakpoint to the newest turn, and the turns before must
/// still match).
pub fn hash_value(h: u64, v: &Value) -> u64 {
    match v {
        Value::Null => step(h, 1),
        Value::Bool(b) => step(h, 2 + u64::from(*b)),
        Value::Number(n) => {
            let bits = n
                .as_u64()
                .or_else(|| n.as_i64().map(|i| i as u64))
                .unwrap_or_else(|| n.as_f64().unwrap_or(0.0).to_bits());
            step(step(h, 4), bits)
        }
        Value::String(s) => hash_bytes(step(h, 5), s.as_bytes()),
        Value::Array(a) => a.iter().fold(step(h, 6), hash_value),
        Value::Object(o) => o
            .iter()
            .filter(|(k, _)| k.as_str() != "cache_control")
            .fold(step(h, 7), |h, (k, v)| {
                hash_value(hash_bytes(h, k.as_bytes()), v)
            }),
    }
}

/// A hash of a string (a model name, a key name) for seeds.
pub fn hash_str(s: &str) -> u64 {
    mix(hash_bytes(0, s.as_bytes()))
}

/// What the cache did for one request, in tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheUse {
    /// Read from the cache (OpenAI `cached_tokens`, Anthropic
    /// `cache_read_input_tokens`, …).
    pub read: u64,
    /// Written to the cache (breakpoint rule only).
    pub write: u64,
}

/// The keys are already mixed hashes: no second hashing.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[derive(Clone, Copy)]
struct Entry {
    expires_ms: u64,
    ttl_ms: u64,
}

type Map = HashMap<u64, Entry, BuildHasherDefault<Identity>>;

#[derive(Default)]
struct Generations {
    young: Map,
    old: Map,
}

impl Generations {
    /// Whether `k` is cached at `now`; a hit moves to the young generation
    /// and lives its TTL again.
    fn hit(&mut self, k: u64, now: u64, half: usize) -> bool {
        if let Some(e) = self.young.get_mut(&k) {
            if e.expires_ms > now {
                e.expires_ms = now.saturating_add(e.ttl_ms);
                return true;
            }
            self.young.remove(&k);
            return false;
        }
        match self.old.remove(&k) {
            Some(e) if e.expires_ms > now => {
                self.put(k, now, e.ttl_ms, half);
                true
            }
            _ => false,
        }
    }

    /// Cache `k` from `now` for `ttl_ms` (the longer TTL wins for an entry
    /// already there).
    fn put(&mut self, k: u64, now: u64, ttl_ms: u64, half: usize) {
        if let Some(e) = self.young.get_mut(&k) {
            e.ttl_ms = e.ttl_ms.max(ttl_ms);
            e.expires_ms = now.saturating_add(e.ttl_ms);
            return;
        }
        let ttl_ms = match self.old.remove(&k) {
            Some(e) if e.expires_ms > now => e.ttl_ms.max(ttl_ms),
            _ => ttl_ms,
        };
        if self.young.len() >= half {
            self.old = std::mem::take(&mut self.young);
        }
        self.young.insert(
            k,
            Entry {
                expires_ms: now.saturating_add(ttl_ms),
                ttl_ms,
            },
        );
    }
}

/// Every key's cached prefixes, at most `max_entries` of them.
pub struct PrefixCache {
    half: usize,
    inner: Mutex<Generations>,
}

/// One request's view of the cache: the store, the key (and model) it is
/// kept for, and the provider's rule.
#[derive(Clone, Copy)]
pub struct KeyCache<'a> {
    pub store: &'a PrefixCache,
    /// Hash of (provider, key, model): every key has its own cache.
    pub seed: u64,
    pub rule: Rule,
    /// The model's smallest cacheable prefix, tokens.
    pub min_tokens: u64,
    /// Entry lifetime after its last use (breakpoints may ask longer).
    pub ttl_ms: u64,
}

impl KeyCache<'_> {
    /// Whether a prompt of `chars` characters can use the cache at all.
    pub fn applies(&self, chars: usize) -> bool {
        prefix_tokens(chars) >= self.min_tokens.max(1)
    }

    /// Look the prompt up and write what the rule writes, at `now_ms`.
    pub fn apply(&self, marks: &[Mark], now_ms: u64) -> CacheUse {
        self.store.apply(self, marks, now_ms)
    }
}

impl PrefixCache {
    pub fn new(max_entries: usize) -> PrefixCache {
        PrefixCache {
            half: (max_entries / 2).max(1),
            inner: Mutex::new(Generations::default()),
        }
    }

    /// Entries held (both generations).
    pub fn len(&self) -> usize {
        self.inner.lock().map_or(0, |g| g.young.len() + g.old.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn clear(&self) {
        if let Ok(mut g) = self.inner.lock() {
            *g = Generations::default();
        }
    }

    fn apply(&self, kc: &KeyCache<'_>, marks: &[Mark], now: u64) -> CacheUse {
        let min = kc.min_tokens.max(1);
        let key = |m: &Mark| mix(kc.seed ^ m.hash);
        let Ok(mut g) = self.inner.lock() else {
            return CacheUse::default();
        };
        match kc.rule {
            Rule::Automatic { step } => {
                let mut read = 0;
                for m in marks.iter().rev() {
                    let t = prefix_tokens(m.chars);
                    if t < min {
                        break;
                    }
                    if g.hit(key(m), now, self.half) {
                        read = t - t % step.max(1);
                        break;
                    }
                }
                for m in marks.iter().filter(|m| prefix_tokens(m.chars) >= min) {
                    g.put(key(m), now, kc.ttl_ms, self.half);
                }
                CacheUse { read, write: 0 }
            }
            Rule::Breakpoints => {
                let mut best: Option<usize> = None;
                for (b, _) in marks.iter().enumerate().filter(|(_, m)| m.ttl_ms.is_some()) {
                    for j in (b.saturating_sub(LOOKBACK_BLOCKS)..=b).rev() {
                        if best.is_some_and(|x| x >= j) || prefix_tokens(marks[j].chars) < min {
                            break;
                        }
                        if g.hit(key(&marks[j]), now, self.half) {
                            best = Some(j);
                            break;
                        }
                    }
                }
                let read = best.map_or(0, |j| prefix_tokens(marks[j].chars));
                let mut last = read;
                for m in marks.iter().filter(|m| prefix_tokens(m.chars) >= min) {
                    if let Some(ttl) = m.ttl_ms {
                        g.put(key(m), now, ttl, self.half);
                        last = last.max(prefix_tokens(m.chars));
                    }
                }
                CacheUse {
                    read,
                    write: last - read,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MIN: u64 = 1024;
    const TTL: u64 = 300_000;

    /// A prompt of `n` messages of `chars` characters each.
    fn conversation(n: usize, chars: usize) -> (Vec<Value>, String) {
        let msgs: Vec<Value> = (0..n)
            .map(|i| json!({"role": if i % 2 == 0 {"user"} else {"assistant"}, "content": format!("{i:04}{}", "x".repeat(chars - 4))}))
            .collect();
        let text: String = msgs.iter().filter_map(|m| m["content"].as_str()).collect();
        (msgs, text)
    }

    fn marks(msgs: &[Value], text: &str, bp_last: bool) -> Vec<Mark> {
        let mut b = Blocks::new();
        let mut end = 0;
        for m in msgs {
            end += m["content"].as_str().map_or(0, str::len);
            b.block(m, end);
        }
        if bp_last {
            b.breakpoint(TTL);
        }
        b.marks(text)
    }

    fn kc(store: &PrefixCache, seed: u64, rule: Rule) -> KeyCache<'_> {
        KeyCache {
            store,
            seed,
            rule,
            min_tokens: MIN,
            ttl_ms: TTL,
        }
    }

    #[test]
    fn automatic_reads_the_longest_prefix_in_steps_on_the_same_key_only() {
        let store = PrefixCache::new(1000);
        let openai = Rule::Automatic { step: 128 };
        let (msgs, text) = conversation(6, 2000); // 500 tokens a message
        let (k1, k2) = (kc(&store, 1, openai), kc(&store, 2, openai));
        // Turn 1: three messages, 1,500 tokens: nothing cached yet.
        let t1 = marks(&msgs[..3], &text, false);
        assert_eq!(k1.apply(&t1, 0), CacheUse::default());
        // Turn 2 on the same key reads turn 1 (1,500 → 1,408 in 128s).
        let t2 = marks(&msgs[..5], &text, false);
        assert_eq!(k1.apply(&t2, 1000).read, 1408);
        // The same turn on another key reads nothing.
        assert_eq!(k2.apply(&t2, 1000).read, 0);
        // The whole prompt again: all of it, in 128s.
        assert_eq!(k1.apply(&t2, 2000).read, 2432);
        // Prompts under the minimum are never cached.
        let short = marks(&msgs[..2], &text, false);
        assert!(!k1.applies(2000 * 2));
        assert_eq!(k1.apply(&short, 3000).read, 0);
        // Expired after the TTL without use.
        assert_eq!(k1.apply(&t2, 2000 + TTL + 1).read, 0);
    }

    #[test]
    fn breakpoints_write_then_read_within_the_lookback() {
        let store = PrefixCache::new(1000);
        let k = kc(&store, 7, Rule::Breakpoints);
        let (msgs, text) = conversation(30, 2000);
        // No breakpoint: nothing read or written.
        assert_eq!(
            k.apply(&marks(&msgs[..3], &text, false), 0),
            CacheUse::default()
        );
        // (turns, then read, written): turn 1 writes its prefix at the
        // breakpoint; turn 2 (two blocks more) reads turn 1 and writes the
        // rest; the same again reads all; 25 blocks later the last entry is
        // beyond the 20-block lookback.
        for (turns, read, write) in [(3, 0, 1500), (5, 1500, 1000), (5, 2500, 0), (30, 0, 15000)] {
            let m = marks(&msgs[..turns], &text, true);
            assert_eq!(k.apply(&m, 10), CacheUse { read, write }, "{turns} turns");
        }
    }

    #[test]
    fn a_breakpoint_below_the_minimum_is_not_written() {
        let store = PrefixCache::new(1000);
        let k = kc(&store, 7, Rule::Breakpoints);
        let (msgs, text) = conversation(2, 2000); // 1,000 tokens
        let m = marks(&msgs, &text, true);
        assert_eq!(k.apply(&m, 0), CacheUse::default());
        assert_eq!(k.apply(&m, 1), CacheUse::default());
        assert!(store.is_empty());
    }

    #[test]
    fn cache_control_is_not_part_of_the_prefix() {
        let a = json!({"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}});
        let b = json!({"type": "text", "text": "hi"});
        assert_eq!(hash_value(0, &a), hash_value(0, &b));
        assert_ne!(
            hash_value(0, &b),
            hash_value(0, &json!({"type": "text", "text": "ho"}))
        );
        assert_ne!(
            hash_value(0, &json!(["ab", "c"])),
            hash_value(0, &json!(["a", "bc"]))
        );
    }

    #[test]
    fn memory_is_bounded_and_recent_entries_survive() {
        let store = PrefixCache::new(100);
        let k = kc(&store, 1, Rule::Automatic { step: 1 });
        let (msgs, text) = conversation(3, 2000);
        let keep = marks(&msgs, &text, false);
        k.apply(&keep, 0);
        for i in 0..1000u64 {
            let m = [Mark {
                hash: i,
                chars: 8000,
                ttl_ms: None,
            }];
            k.apply(&m, 1);
            assert!(store.len() <= 100);
            // An entry in use stays (its hits move it to the young generation).
            if i % 40 == 0 {
                assert!(k.apply(&keep, 2).read > 0, "lost after {i}");
            }
        }
    }
}
