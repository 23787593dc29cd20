//! A string's escaped stretch skipped 64 bytes at a time.
//!
//! A coding agent's text has an escape every ~17 bytes (`\n`, `\"`, `\t`),
//! so a scan that stops at each one spends its time starting and stopping.
//! Here a block of 64 bytes becomes three bit masks (quotes, backslashes,
//! control bytes; Wasm SIMD where the filter runs) and the backslash runs
//! are resolved with integer arithmetic: one pass per block, whatever the
//! number of escapes in it. Anything other than a plain escape (`\uXXXX`,
//! a bad escape, a control byte) hands the block back to the scanner's
//! byte-by-byte path, which says what is wrong exactly as before.

/// What [`skip`] found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Skip {
    /// The string's closing quote is at this index.
    End(usize),
    /// Stopped at `at`, a position that no escape spans. `until`: the
    /// bytes up to this index need the byte-by-byte path (an escape that
    /// is not plain, a control byte); `None`: fewer than 64 bytes are left.
    Stop { at: usize, until: Option<usize> },
}

const EVEN: u64 = 0x5555_5555_5555_5555;
const ODD: u64 = !EVEN;

/// Skips a string's bytes from `at` (inside the string, not escaped) by
/// whole blocks.
#[cfg_attr(target_arch = "wasm32", target_feature(enable = "simd128"))]
pub(super) fn skip(b: &[u8], mut at: usize) -> Skip {
    loop {
        let Some(block) = b.get(at..).and_then(|rest| rest.first_chunk::<64>()) else {
            return Skip::Stop { at, until: None };
        };
        let [quotes, backslashes, controls] = masks(block);
        let escaped = escaped_by_runs(backslashes);
        let closing = quotes & !escaped;
        // The string's bytes in this block: those before its closing quote.
        let inside = closing.wrapping_sub(1) & !closing;
        let mut trouble = controls & inside;
        // The escapes before any control byte: a plain one, or the
        // byte-by-byte path takes it (`\uXXXX`, a bad one).
        let mut plain = escaped & inside & !trouble.wrapping_neg();
        while plain != 0 {
            let i = plain.trailing_zeros();
            let c = block.get(i as usize).copied().unwrap_or(0);
            if !super::plain_escape(c) {
                trouble = 1 << i;
                break;
            }
            plain &= plain - 1;
        }
        if trouble != 0 {
            let until = at + trouble.trailing_zeros() as usize;
            return Skip::Stop {
                at,
                until: Some(until),
            };
        }
        if closing != 0 {
            return Skip::End(at + closing.trailing_zeros() as usize);
        }
        // A run of backslashes at the block's end escapes into the next
        // one: start the next block at that run.
        match backslashes.leading_ones() {
            64 => {
                return Skip::Stop {
                    at,
                    until: Some(at + 63),
                }
            }
            run => at += 64 - run as usize,
        }
    }
}

/// The bytes escaped by a backslash that is not itself escaped, other than
/// backslashes: the byte after each run of backslashes of odd length
/// (`\\\"`: the quote). The block starts outside any escape; a run that
/// reaches bit 63 escapes nothing here.
fn escaped_by_runs(backslashes: u64) -> u64 {
    let starts = backslashes & !(backslashes << 1);
    // Adding a run's lowest bit to the run carries to the byte after it.
    let after_even = backslashes.wrapping_add(starts & EVEN) & !backslashes;
    let after_odd = backslashes.wrapping_add(starts & ODD) & !backslashes;
    // A run of odd length from an even position ends before an odd one,
    // and the other way round.
    (after_even & ODD) | (after_odd & EVEN)
}

/// Bit i of each mask is byte i of the block: a quote, a backslash, a
/// control byte (below 0x20).
#[cfg(target_arch = "wasm32")]
#[target_feature(enable = "simd128")]
#[inline]
fn masks(block: &[u8; 64]) -> [u64; 3] {
    use core::arch::wasm32::{u8x16, u8x16_bitmask, u8x16_eq, u8x16_lt, u8x16_splat};
    let (quote, backslash, space) = (u8x16_splat(b'"'), u8x16_splat(b'\\'), u8x16_splat(0x20));
    let mut out = [0u64; 3];
    for (i, c) in block.as_chunks::<16>().0.iter().enumerate() {
        let v = u8x16(
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11], c[12], c[13],
            c[14], c[15],
        );
        let shift = 16 * i;
        out[0] |= u64::from(u8x16_bitmask(u8x16_eq(v, quote))) << shift;
        out[1] |= u64::from(u8x16_bitmask(u8x16_eq(v, backslash))) << shift;
        out[2] |= u64::from(u8x16_bitmask(u8x16_lt(v, space))) << shift;
    }
    out
}

#[cfg(not(target_arch = "wasm32"))]
fn masks(block: &[u8; 64]) -> [u64; 3] {
    use super::{HIGHS, ONES};
    const LOWS: u64 = !HIGHS;
    // Exact per byte (no borrow crosses a byte): the high bit of each byte
    // that is zero, or below 0x20.
    let zero = |w: u64| !(((w & LOWS) + LOWS) | w) & HIGHS;
    let control = |w: u64| !(((w & LOWS) + ONES * 0x60) | w) & HIGHS;
    // One bit per byte's high bit, gathered into the low eight bits.
    let gather = |flags: u64| (flags >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56;
    let mut out = [0u64; 3];
    for (i, c) in block.as_chunks::<8>().0.iter().enumerate() {
        let w = u64::from_le_bytes(*c);
        let shift = 8 * i;
        out[0] |= gather(zero(w ^ (ONES * u64::from(b'"')))) << shift;
        out[1] |= gather(zero(w ^ (ONES * u64::from(b'\\')))) << shift;
        out[2] |= gather(control(w)) << shift;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::keys::XorShift;

    /// 64 random bits.
    fn next(r: &mut XorShift) -> u64 {
        u64::from(r.next_u32()) << 32 | u64::from(r.next_u32())
    }

    #[test]
    fn masks_mark_quotes_backslashes_and_controls() {
        let mut r = XorShift::new(0x9e37_79b9_7f4a_7c15);
        let alphabet = [
            b'"', b'\\', b'a', 0x1f, 0x20, 0x00, 0x7f, 0x80, 0xa2, 0xdc, b'!', b']',
        ];
        for round in 0..20_000 {
            let mut block = [0u8; 64];
            for byte in &mut block {
                let x = next(&mut r);
                *byte = if round % 2 == 0 {
                    x as u8
                } else {
                    alphabet[x as usize % alphabet.len()]
                };
            }
            let mut want = [0u64; 3];
            for (i, &c) in block.iter().enumerate() {
                want[0] |= u64::from(c == b'"') << i;
                want[1] |= u64::from(c == b'\\') << i;
                want[2] |= u64::from(c < 0x20) << i;
            }
            assert_eq!(masks(&block), want, "{block:?}");
        }
    }

    #[test]
    fn escaped_bytes_follow_odd_runs_of_backslashes() {
        let mut r = XorShift::new(0x2545_f491_4f6c_dd1d);
        for round in 0..50_000u64 {
            let backslashes = match round % 3 {
                0 => next(&mut r),
                1 => next(&mut r) | next(&mut r),
                _ => next(&mut r) | next(&mut r) | next(&mut r),
            };
            let mut want = 0u64;
            let mut escape = false;
            for i in 0..64 {
                let slash = backslashes >> i & 1 == 1;
                if escape && !slash {
                    want |= 1 << i;
                }
                escape = slash && !escape;
            }
            assert_eq!(escaped_by_runs(backslashes), want, "{backslashes:064b}");
        }
    }
}
