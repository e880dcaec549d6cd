//! `tandem compare --system kite`: run the comparison, print it, and write
//! its JSON and its `compare-kite` section of RESULTS.md when asked.

use std::path::Path;

use tandem_bench::kite_compare::{compare_kite, render, render_markdown, KiteCompareConfig};

use crate::args::write_json;

/// The section's name in RESULTS.md.
const SECTION: &str = "compare-kite";

pub fn run(cfg: KiteCompareConfig, json: Option<&str>, markdown: Option<&Path>) -> Result<(), String> {
    let c = compare_kite(&cfg)?;
    print!("{}", render(&c));
    if let Some(path) = json {
        write_json(path, &c)?;
        eprintln!("wrote {path}");
    }
    if let Some(md) = markdown {
        let cmd = std::env::args().skip(1).filter(|x| !x.starts_with("--markdown") && !x.ends_with(".md")).collect::<Vec<_>>().join(" ");
        let section = format!("### {SECTION}: Kite beside ZooKeeper and etcd (issue 12)\n\n{}", render_markdown(&c, &format!("tandem {cmd}")));
        crate::experiment_cmd::update_section(md, SECTION, &section)?;
        eprintln!("wrote the {SECTION} section of {}", md.display());
    }
    if !c.passed() {
        return Err("a system hit errors (see above)".into());
    }
    Ok(())
}
