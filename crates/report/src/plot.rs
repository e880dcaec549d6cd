//! Figures for results: throughput over time with failure, detection and
//! recovery marked (the shape of Pandora Figs. 8–14), and bar charts
//! for comparisons. Each figure is written as SVG (hand-built, readable in any
//! browser) and as PNG (the same SVG rasterised by `resvg`, with an embedded
//! DejaVu Sans so text renders on machines without fonts).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One line of a timeline figure: throughput per bucket.
pub struct Series<'a> {
    pub label: &'a str,
    /// Transactions per second, one value per bucket.
    pub tps: &'a [f64],
}

const W: f64 = 900.0;
const H: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 80.0;
const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];
const MARK_COLORS: [&str; 4] = ["#d62728", "#ff7f0e", "#2ca02c", "#7f7f7f"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A round axis maximum and its tick step.
fn nice_max(v: f64) -> (f64, f64) {
    if v <= 0.0 || !v.is_finite() {
        return (1.0, 0.25);
    }
    let mag = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if v <= m * mag {
            let top = m * mag;
            return (top, top / 5.0);
        }
    }
    (10.0 * mag, 2.0 * mag)
}

/// A number as a label: SI suffixes, no digits that say nothing (`5`, not
/// `5.00`; `1.5k`, and never two ticks that print alike, as `2k` for 1.5k
/// and 2k would).
fn fmt_si(v: f64) -> String {
    let short = |x: f64, unit: &str| {
        let s = format!("{x:.1}");
        format!("{}{unit}", s.strip_suffix(".0").unwrap_or(&s))
    };
    if v == 0.0 {
        "0".into()
    } else if v >= 1e6 {
        short(v / 1e6, "M")
    } else if v >= 1e3 {
        short(v / 1e3, "k")
    } else if v >= 10.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn header(title: &str) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="DejaVu Sans, sans-serif"><rect width="100%" height="100%" fill="white"/><text x="{}" y="28" font-size="17" text-anchor="middle" font-weight="bold">{}</text>"#,
        W / 2.0,
        esc(title)
    );
    s
}

/// Horizontal grid lines with their y-axis labels, 0..=y_max every y_step.
fn y_grid(s: &mut String, y_max: f64, y_step: f64) {
    let steps = (y_max / y_step + 1e-9).floor() as usize;
    let lines = (0..=steps).map(|i| i as f64 * y_step);
    grid(s, lines.map(|v| (1.0 - v / y_max, fmt_si(v))));
}

/// Grid lines and labels at every power of ten from `10^lo` to `10^hi`.
fn log_grid(s: &mut String, lo: f64, hi: f64) {
    let decades = (hi - lo).round() as usize;
    let lines = (0..=decades).map(|i| lo + i as f64);
    grid(
        s,
        lines.map(|e| (1.0 - (e - lo) / (hi - lo), fmt_si(10f64.powf(e)))),
    );
}

/// Horizontal grid lines at fractions of the plot's height (0 = top), labelled.
fn grid(s: &mut String, lines: impl Iterator<Item = (f64, String)>) {
    for (frac, label) in lines {
        let y = TOP + (H - TOP - BOTTOM) * frac;
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#e0e0e0"/><text x="{2}" y="{3:.1}" font-size="12" text-anchor="end">{4}</text>"##,
            y,
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            label
        );
    }
}

/// Throughput over time: one polyline per series (bucket `bucket_ms` wide),
/// vertical markers for events at `(seconds, label)`; the y axis counts
/// committed transactions (see [`timeline_svg_of`]).
pub fn timeline_svg(
    title: &str,
    bucket_ms: u64,
    series: &[Series],
    events: &[(f64, String)],
) -> String {
    timeline_svg_of(title, "committed tx/s", bucket_ms, series, events)
}

/// [`timeline_svg`] with the y axis counting `unit` (e.g. "Kite calls/s").
pub fn timeline_svg_of(
    title: &str,
    unit: &str,
    bucket_ms: u64,
    series: &[Series],
    events: &[(f64, String)],
) -> String {
    let buckets = series.iter().map(|s| s.tps.len()).max().unwrap_or(0).max(1);
    let t_max = buckets as f64 * bucket_ms as f64 / 1000.0;
    let peak = series
        .iter()
        .flat_map(|s| s.tps.iter().copied())
        .fold(0.0, f64::max);
    let (y_max, y_step) = nice_max(peak * 1.1);
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let x = |t: f64| LEFT + pw * t / t_max;
    let y = |v: f64| TOP + ph * (1.0 - v / y_max);
    let mut s = header(title);
    // Axes and grid.
    y_grid(&mut s, y_max, y_step);
    let (_, t_step) = nice_max(t_max);
    let t_step = t_step.max(0.01);
    let mut t = 0.0;
    while t <= t_max + 1e-9 {
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{}" font-size="12" text-anchor="middle">{}</text>"#,
            x(t),
            H - BOTTOM + 18.0,
            fmt_si(t)
        );
        t += t_step;
    }
    let _ = write!(
        s,
        r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{0}" stroke="black"/><line x1="{LEFT}" y1="{0}" x2="{1}" y2="{0}" stroke="black"/><text x="{2}" y="{3}" font-size="13" text-anchor="middle">time since measurement start (s)</text><text x="18" y="{4}" font-size="13" text-anchor="middle" transform="rotate(-90 18 {4})">{6} ({5} ms buckets)</text>"##,
        H - BOTTOM,
        W - RIGHT,
        LEFT + pw / 2.0,
        H - 14.0,
        TOP + ph / 2.0,
        bucket_ms,
        unit
    );
    // Events: vertical dashed lines, labels staggered so they do not overlap.
    for (k, (at, label)) in events.iter().enumerate() {
        let c = MARK_COLORS[k % MARK_COLORS.len()];
        let ex = x(at.clamp(0.0, t_max));
        let _ = write!(
            s,
            r#"<line x1="{ex:.1}" y1="{TOP}" x2="{ex:.1}" y2="{0}" stroke="{c}" stroke-dasharray="5,4" stroke-width="1.5"/><text x="{1:.1}" y="{2:.1}" font-size="12" fill="{c}">{3}</text>"#,
            H - BOTTOM,
            ex + 4.0,
            TOP + 14.0 + 15.0 * k as f64,
            esc(label)
        );
    }
    for (k, se) in series.iter().enumerate() {
        let c = COLORS[k % COLORS.len()];
        let mut pts = String::new();
        for (i, &v) in se.tps.iter().enumerate() {
            let t = (i as f64 + 0.5) * bucket_ms as f64 / 1000.0;
            let _ = write!(pts, "{:.1},{:.1} ", x(t), y(v));
        }
        let _ = write!(
            s,
            r#"<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="1.5"/>"#
        );
        let ly = TOP + 14.0 + 16.0 * k as f64;
        let _ = write!(
            s,
            r#"<line x1="{0}" y1="{1:.1}" x2="{2}" y2="{1:.1}" stroke="{c}" stroke-width="3"/><text x="{3}" y="{4:.1}" font-size="12" text-anchor="end">{5}</text>"#,
            W - RIGHT - 30.0,
            ly - 4.0,
            W - RIGHT - 8.0,
            W - RIGHT - 36.0,
            ly,
            esc(se.label)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Lines over a categorical x axis (`xs` labels, evenly spaced), one per
/// `(label, values)` series; `None` leaves a gap.
pub fn lines_svg(
    title: &str,
    x_label: &str,
    y_label: &str,
    xs: &[String],
    series: &[(String, Vec<Option<f64>>)],
) -> String {
    lines_on(title, x_label, y_label, xs, series, false)
}

/// [`lines_svg`] with a logarithmic y axis (a decade per grid line), for
/// series that differ by orders of magnitude; values ≤ 0 are left out.
pub fn log_lines_svg(
    title: &str,
    x_label: &str,
    y_label: &str,
    xs: &[String],
    series: &[(String, Vec<Option<f64>>)],
) -> String {
    let series: Vec<(String, Vec<Option<f64>>)> = (series.iter())
        .map(|(l, v)| {
            (
                l.clone(),
                v.iter().map(|x| x.filter(|x| *x > 0.0)).collect(),
            )
        })
        .collect();
    lines_on(title, x_label, y_label, xs, &series, true)
}

fn lines_on(
    title: &str,
    x_label: &str,
    y_label: &str,
    xs: &[String],
    series: &[(String, Vec<Option<f64>>)],
    log: bool,
) -> String {
    let values = || series.iter().flat_map(|s| s.1.iter().flatten().copied());
    let peak = values().fold(0.0, f64::max);
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let n = xs.len().max(1) as f64;
    let x = |i: usize| LEFT + pw * (i as f64 + 0.5) / n;
    let mut s = header(title);
    let y: Box<dyn Fn(f64) -> f64> = if log {
        let lo = values()
            .fold(f64::INFINITY, f64::min)
            .max(1e-9)
            .log10()
            .floor();
        let hi = peak.max(1e-9).log10().ceil().max(lo + 1.0);
        log_grid(&mut s, lo, hi);
        Box::new(move |v: f64| TOP + ph * (1.0 - (v.log10() - lo) / (hi - lo)))
    } else {
        let (y_max, y_step) = nice_max(peak * 1.1);
        y_grid(&mut s, y_max, y_step);
        Box::new(move |v: f64| TOP + ph * (1.0 - v / y_max))
    };
    for (i, l) in xs.iter().enumerate() {
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{}" font-size="12" text-anchor="middle">{}</text>"#,
            x(i),
            H - BOTTOM + 18.0,
            esc(l)
        );
    }
    let _ = write!(
        s,
        r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{0}" stroke="black"/><line x1="{LEFT}" y1="{0}" x2="{1}" y2="{0}" stroke="black"/><text x="{2}" y="{3}" font-size="13" text-anchor="middle">{4}</text><text x="18" y="{5}" font-size="13" text-anchor="middle" transform="rotate(-90 18 {5})">{6}</text>"##,
        H - BOTTOM,
        W - RIGHT,
        LEFT + pw / 2.0,
        H - 14.0,
        esc(x_label),
        TOP + ph / 2.0,
        esc(y_label)
    );
    for (k, (label, vals)) in series.iter().enumerate() {
        let c = COLORS[k % COLORS.len()];
        let mut pts = String::new();
        for (i, v) in vals.iter().enumerate() {
            if let Some(v) = v {
                let _ = write!(pts, "{:.1},{:.1} ", x(i), y(*v));
                let _ = write!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{c}"/>"#,
                    x(i),
                    y(*v)
                );
            }
        }
        let _ = write!(
            s,
            r#"<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="1.5"/>"#
        );
        let ly = TOP + 14.0 + 16.0 * k as f64;
        let _ = write!(
            s,
            r#"<line x1="{0}" y1="{1:.1}" x2="{2}" y2="{1:.1}" stroke="{c}" stroke-width="3"/><text x="{3}" y="{4:.1}" font-size="12" text-anchor="start">{5}</text>"#,
            LEFT + 20.0,
            ly - 4.0,
            LEFT + 42.0,
            LEFT + 48.0,
            ly,
            esc(label)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// A heat map: `rows` x `cols` cells, each annotated with its value
/// (`None`: not measured, grey); darker is larger.
pub fn heatmap_svg(
    title: &str,
    rows: &[String],
    cols: &[String],
    values: &[Vec<Option<f64>>],
) -> String {
    let peak = values
        .iter()
        .flatten()
        .flatten()
        .copied()
        .fold(0.0, f64::max)
        .max(1e-9);
    let (pw, ph) = (W - LEFT - RIGHT - 60.0, H - TOP - BOTTOM);
    let (cw, ch) = (pw / cols.len().max(1) as f64, ph / rows.len().max(1) as f64);
    let mut s = header(title);
    for (r, row) in values.iter().enumerate() {
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" font-size="13" text-anchor="end">{}</text>"#,
            LEFT + 50.0,
            TOP + ch * (r as f64 + 0.55),
            esc(&rows[r])
        );
        for (c, v) in row.iter().enumerate() {
            let (x, y) = (LEFT + 60.0 + cw * c as f64, TOP + ch * r as f64);
            let (fill, label) = match v {
                Some(v) => {
                    let t = v / peak;
                    (
                        format!(
                            "rgb({},{},{})",
                            (255.0 - 200.0 * t) as u8,
                            (255.0 - 120.0 * t) as u8,
                            255
                        ),
                        format!("{v:.2}"),
                    )
                }
                None => ("#dddddd".to_string(), "n/a".to_string()),
            };
            let _ = write!(
                s,
                r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{fill}" stroke="white"/><text x="{:.1}" y="{:.1}" font-size="14" text-anchor="middle">{label}</text>"#,
                cw,
                ch,
                x + cw / 2.0,
                y + ch / 2.0 + 5.0
            );
        }
    }
    for (c, col) in cols.iter().enumerate() {
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{}" font-size="13" text-anchor="middle">{}</text>"#,
            LEFT + 60.0 + cw * (c as f64 + 0.5),
            H - BOTTOM + 18.0,
            esc(col)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Several panels stacked vertically into one SVG.
pub fn stack_svg(panels: &[String]) -> String {
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{}" viewBox="0 0 {W} {}">"#,
        H * panels.len() as f64,
        H * panels.len() as f64
    );
    for (k, p) in panels.iter().enumerate() {
        let inner = p.trim().trim_end_matches("</svg>");
        let _ = write!(
            s,
            r#"<g transform="translate(0 {})">{}</svg></g>"#,
            H * k as f64,
            inner
        );
    }
    s.push_str("</svg>\n");
    s
}

/// A bar chart: one bar per `(label, value)`, annotated with the value.
pub fn bars_svg(title: &str, unit: &str, bars: &[(String, f64)]) -> String {
    let n = bars.len().max(1) as f64;
    let peak = bars.iter().map(|b| b.1).fold(0.0, f64::max);
    let (y_max, y_step) = nice_max(peak * 1.1);
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let y = |v: f64| TOP + ph * (1.0 - v / y_max);
    let mut s = header(title);
    y_grid(&mut s, y_max, y_step);
    let slot = pw / n;
    for (k, (label, value)) in bars.iter().enumerate() {
        let bx = LEFT + slot * k as f64 + slot * 0.15;
        let bw = slot * 0.7;
        // A zero bar is no rectangle (renderers reject a zero height), only its labels.
        let height = (H - BOTTOM) - y(*value);
        if height > 0.05 {
            let _ = write!(
                s,
                r#"<rect x="{bx:.1}" y="{:.1}" width="{bw:.1}" height="{height:.1}" fill="{}"/>"#,
                y(*value),
                COLORS[k % COLORS.len()]
            );
        }
        let (cx, top, base) = (bx + bw / 2.0, y(*value) - 5.0, H - BOTTOM + 18.0);
        // Many bars: smaller type, labels slanted so that they do not overlap.
        let (size, slant) = if bars.len() > 10 {
            (
                10,
                format!(r#" transform="rotate(-30 {cx:.1} {base})" text-anchor="end""#),
            )
        } else {
            (12, r#" text-anchor="middle""#.to_string())
        };
        let _ = write!(
            s,
            r#"<text x="{cx:.1}" y="{top:.1}" font-size="{size}" text-anchor="middle">{}</text><text x="{cx:.1}" y="{base}" font-size="{size}"{slant}>{}</text>"#,
            fmt_si(*value),
            esc(label)
        );
    }
    let _ = write!(
        s,
        r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{0}" stroke="black"/><line x1="{LEFT}" y1="{0}" x2="{1}" y2="{0}" stroke="black"/><text x="18" y="{2}" font-size="13" text-anchor="middle" transform="rotate(-90 18 {2})">{3}</text>"##,
        H - BOTTOM,
        W - RIGHT,
        TOP + ph / 2.0,
        esc(unit)
    );
    s.push_str("</svg>\n");
    s
}

/// Rasterise an SVG built here into PNG bytes.
pub fn svg_to_png(svg: &str) -> Result<Vec<u8>, String> {
    let mut opt = resvg::usvg::Options::default();
    let db = opt.fontdb_mut();
    db.load_font_data(dejavu::sans::regular().to_vec());
    db.load_font_data(dejavu::sans::bold().to_vec());
    db.set_sans_serif_family("DejaVu Sans");
    let tree = resvg::usvg::Tree::from_str(svg, &opt).map_err(|e| format!("bad SVG: {e}"))?;
    let size = tree.size().to_int_size();
    let mut pixmap =
        resvg::tiny_skia::Pixmap::new(size.width(), size.height()).ok_or("empty figure")?;
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    pixmap.encode_png().map_err(|e| e.to_string())
}

/// Write `<stem>.svg` and `<stem>.png`; returns both paths.
pub fn write_figure(stem: &Path, svg: &str) -> Result<(PathBuf, PathBuf), String> {
    if let Some(dir) = stem.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let (svg_path, png_path) = (stem.with_extension("svg"), stem.with_extension("png"));
    std::fs::write(&svg_path, svg)
        .map_err(|e| format!("cannot write {}: {e}", svg_path.display()))?;
    let png = svg_to_png(svg)?;
    std::fs::write(&png_path, png)
        .map_err(|e| format!("cannot write {}: {e}", png_path.display()))?;
    Ok((svg_path, png_path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeline_renders_to_svg_and_png_with_its_events() {
        let tps: Vec<f64> = (0..100)
            .map(|i| if (40..45).contains(&i) { 500.0 } else { 1000.0 })
            .collect();
        let svg = timeline_svg(
            "recovery",
            10,
            &[Series {
                label: "pandora",
                tps: &tps,
            }],
            &[(0.4, "crash".into()), (0.45, "recovered".into())],
        );
        assert!(svg.contains("crash") && svg.contains("recovered") && svg.contains("polyline"));
        let png = svg_to_png(&svg).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        // Text is drawn (the embedded font is found): a figure with a long
        // title has more dark pixels than the same without.
        let dark = |svg: &str| {
            let p = resvg::tiny_skia::Pixmap::decode_png(&svg_to_png(svg).unwrap()).unwrap();
            p.pixels()
                .iter()
                .filter(|c| c.red() < 100 && c.green() < 100 && c.blue() < 100)
                .count()
        };
        assert!(
            dark(&bars_svg("A long title that must be drawn", "tx/s", &[]))
                > dark(&bars_svg("", "tx/s", &[])) + 100
        );
    }

    #[test]
    fn bars_carry_their_labels_and_values() {
        let svg = bars_svg(
            "compare",
            "tx/s",
            &[("tandem".into(), 120_000.0), ("postgres".into(), 9_000.0)],
        );
        assert!(svg.contains("tandem") && svg.contains("120k") && svg.contains("9k"));
    }
}
