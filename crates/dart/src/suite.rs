//! A selection of litmus tests (`--tests all|1|2|3|ext`), each with its
//! instance count, laid out in one key space (Pandora paper §5, thesis §5.4:
//! basic tests plus extended ones with more variables).

use crate::litmus::{Litmus, Pattern};

#[derive(Clone, Debug)]
pub struct Suite {
    pub tests: Vec<Litmus>,
}

/// (selector, name, pattern, variables)
const CATALOG: [(&str, &str, Pattern, u32); 7] = [
    ("1", "litmus-1", Pattern::DirectWrite, 2),
    ("1", "litmus-1-insert-delete", Pattern::InsertDelete, 2),
    ("2", "litmus-2", Pattern::WriteSkew, 2),
    ("3", "litmus-3", Pattern::IndirectWrite, 3),
    ("ext", "ext-1", Pattern::DirectWrite, 4),
    ("ext", "ext-2", Pattern::WriteSkew, 3),
    ("ext", "ext-3", Pattern::IndirectWrite, 4),
];

impl Suite {
    /// `selector`: a comma-separated list of `all`, `1`, `2`, `3`, `ext`, or
    /// test names (`litmus-1-insert-delete`, `ext-2`, ...).
    pub fn parse(selector: &str, instances: u32) -> Result<Suite, String> {
        if instances == 0 || instances >= 1 << 16 {
            return Err("--instances must be between 1 and 65535".into());
        }
        let wanted: Vec<&str> = selector.split(',').map(str::trim).collect();
        for w in &wanted {
            if !matches!(*w, "all" | "1" | "2" | "3" | "ext") && !CATALOG.iter().any(|c| c.1 == *w)
            {
                let names: Vec<&str> = CATALOG.iter().map(|c| c.1).collect();
                return Err(format!(
                    "unknown litmus test '{w}' (expected all, 1, 2, 3, ext or a name: {})",
                    names.join(", ")
                ));
            }
        }
        let tests: Vec<Litmus> = CATALOG
            .iter()
            .filter(|(sel, name, ..)| wanted.iter().any(|w| *w == "all" || w == sel || w == name))
            .enumerate()
            .map(|(index, &(_, name, pattern, vars))| Litmus {
                name: name.into(),
                pattern,
                vars,
                instances,
                index: index as u32,
            })
            .collect();
        if tests.is_empty() {
            return Err("no litmus test selected".into());
        }
        Ok(Suite { tests })
    }

    /// The name of every test in the catalog.
    pub fn names() -> Vec<&'static str> {
        CATALOG.iter().map(|c| c.1).collect()
    }

    /// Every key any test may hold (the store's capacity), if the run
    /// creates at most `max_new_pairs` insert/delete pairs per test.
    pub fn key_count(&self, max_new_pairs: u64) -> u64 {
        self.tests.iter().map(|t| t.key_count(max_new_pairs)).sum()
    }

    /// The name of the test a key belongs to.
    pub fn test_of_key(&self, key: u64) -> Option<&str> {
        Litmus::index_of_key(key)
            .and_then(|i| self.tests.get(i as usize))
            .map(|t| t.name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_pick_tests_and_keys_map_back() {
        let all = Suite::parse("all", 3).unwrap();
        assert_eq!(all.tests.len(), 7);
        assert_eq!(all.key_count(10), 3 * (2 + 2 + 3 + 4 + 3 + 4) + 2 * 10);
        let two = Suite::parse("2,ext", 1).unwrap();
        assert_eq!(
            two.tests
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>(),
            ["litmus-2", "ext-1", "ext-2", "ext-3"]
        );
        for t in &all.tests {
            for k in t.keys().into_iter().chain([t.key(77, 1)]) {
                assert_eq!(all.test_of_key(k), Some(t.name.as_str()));
            }
        }
        assert!(Suite::parse("4", 1)
            .unwrap_err()
            .contains("unknown litmus test"));
        assert!(Suite::parse("1", 0).is_err());
    }
}
