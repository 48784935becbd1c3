//! Sorting through one compiled sort. `slice::sort_by` is generic over the element and the
//! comparison, so every call site stamps out its own copy of the whole sort algorithm (about
//! 2–3 KB of wasm each: the browser app carried ~90 such functions). These sort the items'
//! positions instead, through one non-generic function, then move the items into that order; all
//! that is generic per call is the small move. Stable, like `sort_by`. Both sides of the wire use
//! them, so the page and the server order alike; `clippy.toml` steers other sorts here.

use std::cmp::Ordering;

/// `items` sorted by `compare`, stably.
pub fn sort_by<T>(items: &mut [T], mut compare: impl FnMut(&T, &T) -> Ordering) {
    if items.len() < 2 {
        return;
    }
    let mut order: Vec<usize> = (0..items.len()).collect();
    sort_positions(&mut order, &mut |a, b| compare(&items[a], &items[b]));
    permute(items, order);
}

/// `items` sorted by the key `key` gives each, stably.
pub fn sort_by_key<T, K: Ord>(items: &mut [T], mut key: impl FnMut(&T) -> K) {
    sort_by(items, |a, b| key(a).cmp(&key(b)));
}

/// `items` in ascending order.
pub fn sort<T: Ord>(items: &mut [T]) {
    sort_by(items, T::cmp);
}

/// The one compiled sort: positions, compared through `compare`.
#[inline(never)]
#[expect(clippy::disallowed_methods, reason = "the one sort the others go through")]
fn sort_positions(order: &mut [usize], compare: &mut dyn FnMut(usize, usize) -> Ordering) {
    order.sort_by(|&a, &b| compare(a, b));
}

/// Moves `items` so that position `i` holds the item that was at `order[i]`, following each cycle
/// of the permutation with swaps.
fn permute<T>(items: &mut [T], mut order: Vec<usize>) {
    for start in 0..items.len() {
        let mut at = start;
        // Visited positions point at themselves.
        while order[at] != start {
            let from = order[at];
            items.swap(at, from);
            order[at] = at;
            at = from;
        }
        order[at] = at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_like_the_standard_sort_and_keeps_equal_items_in_order() {
        // Pairs sorted by their first half only: the second half shows the order kept among equals.
        let mut seed = 0x2545_f491_u32;
        for len in [0, 1, 2, 3, 7, 31, 100, 257] {
            let items: Vec<(u8, usize)> = (0..len)
                .map(|i| {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                    ((seed >> 24) as u8 % 5, i)
                })
                .collect();
            let mut ours = items.clone();
            sort_by_key(&mut ours, |p| p.0);
            let mut standard = items.clone();
            #[expect(clippy::disallowed_methods, reason = "the reference")]
            standard.sort_by_key(|p| p.0);
            assert_eq!(ours, standard, "length {len}");
        }
    }

    #[test]
    fn sorts_strings_and_reverse_orders() {
        let mut words = vec!["ana".to_owned(), "bo".to_owned(), "al".to_owned(), "zed".to_owned()];
        sort(&mut words);
        assert_eq!(words, ["al", "ana", "bo", "zed"]);
        sort_by(&mut words, |a, b| b.cmp(a));
        assert_eq!(words, ["zed", "bo", "ana", "al"]);
    }
}
