//! What an experiment leaves behind: its figure, drawn here as SVG and
//! rasterised to PNG ([`plot`]), and the record it returns to the command
//! that writes `docs/results/NAME.json`, `docs/figures/NAME.{svg,png}` and
//! its section of `docs/RESULTS.md` ([`ExperimentOutput`]).

pub mod plot;

use serde_json::Value;

/// One experiment's measurements, figure and text.
pub struct ExperimentOutput {
    pub name: String,
    /// The command that produced it (quoted in the section).
    pub command: String,
    pub json: Value,
    pub figure_svg: String,
    /// Markdown for `docs/RESULTS.md`, without the figure link.
    pub markdown: String,
}
