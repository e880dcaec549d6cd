//! `tandem compare --system ddp`: run the comparison, print it, and write
//! its JSON and its `compare-ddp` section of RESULTS.md when asked.

use std::path::Path;

use tandem_peers::ddp_compare::{compare_ddp, render, render_markdown, DdpCompareConfig};

use crate::args::write_json;

/// The section's name in RESULTS.md.
const SECTION: &str = "compare-ddp";

pub fn run(cfg: DdpCompareConfig, json: Option<&str>, markdown: Option<&Path>) -> Result<(), String> {
    let c = compare_ddp(&cfg)?;
    print!("{}", render(&c));
    if let Some(path) = json {
        write_json(path, &c)?;
        eprintln!("wrote {path}");
    }
    if let Some(md) = markdown {
        let cmd = std::env::args().skip(1).filter(|x| !x.starts_with("--markdown") && !x.ends_with(".md")).collect::<Vec<_>>().join(" ");
        let section = format!("### {SECTION}: DDP beside etcd and Redis (issue 10)\n\n{}", render_markdown(&c, &format!("tandem {cmd}")));
        crate::experiment_cmd::update_section(md, SECTION, &section)?;
        eprintln!("wrote the {SECTION} section of {}", md.display());
    }
    if !c.passed() {
        return Err("a system hit errors or a lin-synch history was not linearizable (see above)".into());
    }
    Ok(())
}
