//! What one DART run found (docs/DESIGN.md §5, "Output": runs, transactions,
//! crashes, violations with a replayable seed), whichever harness ran it.

use crate::history::TxRecord;

#[derive(Debug, Default)]
pub struct RunReport {
    pub committed: u64,
    pub aborted: u64,
    pub unknown: u64,
    /// Assert transactions that committed and were checked.
    pub asserts_checked: u64,
    /// Compute-node crashes injected (and recovered from).
    pub crashes: u32,
    /// What was crashed, when (for the replay message).
    pub crash_note: Option<String>,
    /// (test, description): failed assertions, history anomalies, harness failures.
    pub violations: Vec<(String, String)>,
    pub history: Vec<TxRecord>,
    /// Simulated time the run took (0 off the simulator).
    pub sim_time_ns: u64,
}

impl RunReport {
    pub fn transactions(&self) -> u64 {
        self.committed + self.aborted + self.unknown
    }

    /// Fold the clients' logs in (a transaction cut by a crash stays counted
    /// as unknown in its client's log).
    pub fn absorb(&mut self, logs: &[crate::recorder::SharedLog]) {
        for log in logs {
            let mut l = log.borrow_mut();
            self.committed += l.committed;
            self.aborted += l.aborted;
            self.unknown += l.unknown;
            self.asserts_checked += l.asserts_checked;
            self.violations.append(&mut l.violations);
            self.history.append(&mut l.records);
        }
    }

    /// Run the history checker and add what it finds, attributed to the
    /// test owning the first key involved.
    pub fn check_history(&mut self, suite: &crate::suite::Suite) {
        for a in crate::checker::Checker::check(&self.history).anomalies {
            let test = a
                .keys
                .first()
                .and_then(|&k| suite.test_of_key(k))
                .unwrap_or("history");
            self.violations.push((
                test.to_string(),
                format!("history {}: {}", a.kind, a.description),
            ));
        }
    }
}
