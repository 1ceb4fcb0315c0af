//! Time words in a query ("in April", "at the end of May", "this summer") turned into the
//! calendar months they point at, so retrieval can favour memories from then.
//!
//! Why: neither BM25 nor a sentence embedding knows that a turn stamped 2024-04-08 is
//! "in April"; the month lives in the memory's time, not in its text.

/// Months (1–12) named or implied by `query`, sorted and unique.
pub fn query_months(query: &str) -> Vec<u32> {
    const MONTHS: [(&str, &str); 12] = [
        ("january", "jan"),
        ("february", "feb"),
        ("march", "mar"),
        ("april", "apr"),
        ("may", "may"),
        ("june", "jun"),
        ("july", "jul"),
        ("august", "aug"),
        ("september", "sep"),
        ("october", "oct"),
        ("november", "nov"),
        ("december", "dec"),
    ];
    let words: Vec<String> = super::keyword::words(query).collect();
    let mut months = Vec::new();
    for (i, w) in words.iter().enumerate() {
        for (m, (long, short)) in MONTHS.iter().enumerate() {
            // "may" is also a verb: count it only after a preposition or with "end of".
            let is_may = m == 4;
            let named = w == long || (w == short && !is_may && short.len() == 3 && w != "mar" && w != "dec");
            if named && (!is_may || i > 0 && matches!(words[i - 1].as_str(), "in" | "of" | "during" | "since" | "early" | "late" | "mid")) {
                months.push(m as u32 + 1);
            }
        }
        let season: &[u32] = match w.as_str() {
            "spring" => &[3, 4, 5],
            "summer" => &[6, 7, 8],
            "autumn" | "fall" if w == "autumn" || i > 0 && words[i - 1] == "the" => &[9, 10, 11],
            "winter" => &[12, 1, 2],
            _ => &[],
        };
        months.extend_from_slice(season);
    }
    months.sort_unstable();
    months.dedup();
    months
}

/// The month (1–12) of a stored RFC 3339 time, if it has one.
pub fn month_of(time: &str) -> Option<u32> {
    let month = time.get(5..7)?;
    if time.as_bytes().get(4) != Some(&b'-') {
        return None;
    }
    month.parse().ok().filter(|m| (1..=12).contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_and_seasons_are_found() {
        assert_eq!(query_months("What did the user announce in April?"), vec![4]);
        assert_eq!(query_months("What happens at the end of May?"), vec![5]);
        assert_eq!(query_months("You may go"), Vec::<u32>::new());
        assert_eq!(query_months("Where were we this summer?"), vec![6, 7, 8]);
        assert_eq!(query_months("Between Jan and Aug"), vec![1, 8]);
        assert_eq!(query_months("a leaf may fall"), Vec::<u32>::new());
    }

    #[test]
    fn month_of_reads_stored_times_only() {
        assert_eq!(month_of("2024-04-08T18:04:00Z"), Some(4));
        assert_eq!(month_of("the third day of Frostmoon"), None);
        assert_eq!(month_of("2024"), None);
    }
}
