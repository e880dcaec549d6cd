//! Figures for results, drawn with [`plotters`] on its SVG backend:
//! throughput over time with failure, detection and recovery marked (the
//! shape of Pandora Figs. 8–14), lines and bars for comparisons, and heat
//! maps for a grid of models. Each figure is written as SVG (self-contained,
//! readable in any browser) and as PNG (the same SVG rasterised by `resvg`).
//! The embedded DejaVu Sans serves both: plotters measures text with it to
//! lay a figure out, and `resvg` draws with it, so text renders as measured
//! on machines without fonts.
//!
//! Labels carry no digit that says nothing (`5`, not `5.00`), large numbers
//! take SI suffixes (`1.5k`, `2M`), and no two ticks of an axis print alike.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::register_font;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// One line of a timeline figure: throughput per bucket.
pub struct Series<'a> {
    pub label: &'a str,
    /// Transactions per second, one value per bucket.
    pub tps: &'a [f64],
}

/// Width and height of a figure, and of each panel of a stack.
const W: u32 = 900;
const H: u32 = 420;
/// Space around the chart; the right one leaves room for the last tick label.
const MARGIN: u32 = 10;
const MARGIN_RIGHT: u32 = 24;
/// The family the SVG names, and the name plotters measures it by (the
/// embedded DejaVu Sans, registered by `style`).
const FONT: &str = "DejaVu Sans, sans-serif";
const COLORS: [RGBColor; 6] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];
const MARK_COLORS: [RGBColor; 4] = [
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x7f, 0x7f, 0x7f),
];
const GRID: RGBColor = RGBColor(0xe0, 0xe0, 0xe0);
/// A heat-map cell without a value, and its text.
const NA_FILL: RGBColor = RGBColor(0xd0, 0xd0, 0xd0);
const NA_TEXT: RGBColor = RGBColor(0x50, 0x50, 0x50);

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Drawn = Result<(), DrawingAreaErrorKind<std::io::Error>>;
type Chart<'a, 'b, X, Y> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<X, Y>>;

/// Text drawn `px` pixels high (plotters writes `font-size` as its size
/// divided by 1.24).
fn style(px: f64, weight: FontStyle) -> TextStyle<'static> {
    static FONTS: Once = Once::new();
    FONTS.call_once(|| {
        let normal = register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
        let bold = register_font(FONT, FontStyle::Bold, dejavu::sans::bold());
        assert!(normal.is_ok() && bold.is_ok(), "DejaVu Sans parses");
    });
    (FONT, px * 1.24, weight).into_font().color(&BLACK)
}

fn font(px: f64) -> TextStyle<'static> {
    style(px, FontStyle::Normal)
}

fn title_font() -> TextStyle<'static> {
    style(17.0, FontStyle::Bold)
}

/// How wide `text` is drawn in `style`, in pixels.
fn text_width(text: &str, style: &TextStyle) -> u32 {
    style.font.box_size(text).map_or(0, |(w, _)| w)
}

/// An SVG `W` wide and `height` high, drawn on a white ground by `draw`. A
/// figure that cannot be drawn says why instead.
fn render(height: u32, draw: impl FnOnce(&Area<'_>) -> Drawn) -> String {
    let mut svg = String::new();
    let drawn = {
        let root = SVGBackend::with_string(&mut svg, (W, height)).into_drawing_area();
        root.fill(&WHITE)
            .and_then(|()| draw(&root))
            .and_then(|()| root.present())
    };
    if let Err(e) = drawn {
        svg.clear();
        let root = SVGBackend::with_string(&mut svg, (W, height)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let _ = root.draw_text(&format!("figure not drawn: {e}"), &font(14.0), (20, 20));
        let _ = root.present();
    }
    svg
}

/// A chart with `title` above it, `y_area` pixels for the y axis's labels
/// and `x_area` for the x axis's.
fn builder<'a, 'b>(
    root: &'a Area<'b>,
    title: &str,
    y_area: u32,
    x_area: u32,
) -> ChartBuilder<'a, 'static, SVGBackend<'b>> {
    let mut b = ChartBuilder::on(root);
    b.margin(MARGIN)
        .margin_right(MARGIN_RIGHT)
        .caption(title, title_font())
        .y_label_area_size(y_area)
        .x_label_area_size(x_area);
    b
}

/// The width of the plot of a chart whose y labels take `y_area` pixels.
fn plot_width(y_area: u32) -> u32 {
    W - MARGIN - MARGIN_RIGHT - y_area
}

/// Pixels for y-axis labels: the widest, its distance from the axis, and
/// the axis description beside them.
fn y_area(labels: &[String]) -> u32 {
    let widest = labels.iter().map(|l| text_width(l, &font(12.0))).max();
    widest.unwrap_or(0) + 16 + 24
}

/// Series legend in the corner of the plot where it hides the fewest
/// `marks` (pixels the figure draws on), the first of `corners` on a tie; on
/// a ground that keeps it legible over what it still hides.
fn legend<'a, X: Ranged, Y: Ranged>(
    chart: &mut Chart<'a, 'a, X, Y>,
    labels: &[&str],
    marks: &[(i32, i32)],
    corners: [Corner; 4],
) -> Drawn {
    // The box plotters draws: 30 pixels of line, 10 of margin around
    // lines 1.25 of the font's size apart.
    let style = font(12.0);
    let widest = labels.iter().map(|l| text_width(l, &style)).max();
    let w = widest.unwrap_or(0) as i32 + 30 + 20;
    let h = (labels.len() as f64 * 12.0 * 1.24 * 1.25) as i32 + 20;
    let (xs, ys) = chart.plotting_area().get_pixel_range();
    let place = |c: Corner| {
        let x = match c {
            Corner::UpperLeft | Corner::LowerLeft => xs.start + 5,
            Corner::UpperRight | Corner::LowerRight => xs.end - w - 5,
        };
        let y = match c {
            Corner::UpperLeft | Corner::UpperRight => ys.start + 5,
            Corner::LowerLeft | Corner::LowerRight => ys.end - h - 5,
        };
        (x, y)
    };
    let hidden = |c: Corner| {
        let (x, y) = place(c);
        let inside = |&&(mx, my): &&(i32, i32)| {
            (x - 4..=x + w + 4).contains(&mx) && (y - 4..=y + h + 4).contains(&my)
        };
        marks.iter().filter(inside).count()
    };
    let best = (corners.into_iter()).min_by_key(|&c| hidden(c));
    let at = match best.unwrap_or(Corner::UpperRight) {
        Corner::UpperLeft => SeriesLabelPosition::UpperLeft,
        Corner::UpperRight => SeriesLabelPosition::UpperRight,
        Corner::LowerLeft => SeriesLabelPosition::LowerLeft,
        Corner::LowerRight => SeriesLabelPosition::LowerRight,
    };
    chart
        .configure_series_labels()
        .position(at)
        .label_font(style)
        .background_style(WHITE.mix(0.85))
        .border_style(GRID)
        .draw()
}

#[derive(Clone, Copy)]
enum Corner {
    UpperLeft,
    UpperRight,
    LowerLeft,
    LowerRight,
}

/// The pixels a line through `points` passes, every few pixels.
fn trace(points: &[(i32, i32)]) -> Vec<(i32, i32)> {
    let mut marks = points.to_vec();
    for pair in points.windows(2) {
        let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
        let steps = (x1 - x0).abs().max((y1 - y0).abs()) / 3;
        for k in 1..steps {
            let f = k as f64 / steps as f64;
            let at = |a: i32, b: i32| a + ((b - a) as f64 * f).round() as i32;
            marks.push((at(x0, x1), at(y0, y1)));
        }
    }
    marks
}

/// A round axis maximum at or above `v`, and its tick step.
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

/// Ticks from 0 to `top`, `step` apart.
fn ticks(top: f64, step: f64) -> Vec<f64> {
    let n = (top / step + 1e-9).floor() as usize;
    (0..=n).map(|i| i as f64 * step).collect()
}

/// An axis of `f64` (linear or plotters' logarithmic) with the ticks given;
/// plotters' own `with_key_points` leaves such an axis without labels.
struct Ticked<R> {
    axis: R,
    ticks: Vec<f64>,
}

/// A linear axis over `range` with `ticks`.
fn linear(range: Range<f64>, ticks: Vec<f64>) -> Linear {
    let axis = range.into();
    Ticked { axis, ticks }
}

impl<R: Ranged<ValueType = f64>> Ranged for Ticked<R> {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.axis.map(value, limit)
    }

    /// The ticks, as the bold grid lines; no light ones between them.
    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        match hint.weight().allow_light_points() {
            true => vec![],
            false => self.ticks.clone(),
        }
    }

    fn range(&self) -> Range<f64> {
        self.axis.range()
    }
}

type Linear = Ticked<RangedCoordf64>;

/// `x` with `decimals` decimals, then trailing zeros dropped, then `unit`.
fn trimmed(x: f64, decimals: usize, unit: &str) -> String {
    let s = format!("{x:.decimals$}");
    let s = match s.contains('.') {
        true => s.trim_end_matches('0').trim_end_matches('.'),
        false => &s,
    };
    let s = if s == "-0" { "0" } else { s };
    format!("{s}{unit}")
}

/// The SI scale of `v`: its divisor and suffix.
fn si_unit(v: f64) -> (f64, &'static str) {
    match v.abs() {
        a if a >= 1e9 => (1e9, "G"),
        a if a >= 1e6 => (1e6, "M"),
        a if a >= 1e3 => (1e3, "k"),
        _ => (1.0, ""),
    }
}

/// A number as a label: SI suffixes with a decimal (`1.5k`, `2M`), whole
/// numbers from 10 to 999, two decimals below 10, and no digit that says
/// nothing (`5`, not `5.00`; `0.5`, not `0.50`).
fn fmt_si(v: f64) -> String {
    let (unit, suffix) = si_unit(v);
    let decimals = match v.abs() {
        a if a >= 1e3 => 1,
        a if a >= 10.0 => 0,
        _ => 2,
    };
    trimmed(v / unit, decimals, suffix)
}

/// A tick label of an axis with ticks `step` apart: as [`fmt_si`], with as
/// many decimals as the step needs so that no two ticks print alike
/// (`1.25k` beside `1.5k`, where one decimal would print `1.3k`).
fn fmt_tick(v: f64, step: f64) -> String {
    let (unit, suffix) = si_unit(v);
    let s = (step / unit).abs();
    let decimals = (0..9)
        .find(|&d| {
            let x = s * 10f64.powi(d as i32);
            (x - x.round()).abs() <= 1e-6 * x.max(1.0)
        })
        .unwrap_or(9);
    trimmed(v / unit, decimals, suffix)
}

/// Names of categories under a plot: level when each fits its slot, else
/// upright (reading upwards) so that long names neither overlap nor get
/// cut; the axis below a plot leaves them the height they need.
struct Categories<'a> {
    names: &'a [String],
    style: TextStyle<'static>,
    upright: bool,
    height: u32,
}

impl<'a> Categories<'a> {
    /// `names` under a plot `plot_w` pixels wide.
    fn new(names: &'a [String], plot_w: u32, px: f64) -> Self {
        let slot = plot_w as f64 / names.len().max(1) as f64;
        // Names may skip categories (a label every tenth): each has the
        // room up to the next.
        let named: Vec<usize> = (0..names.len()).filter(|&i| !names[i].is_empty()).collect();
        let gap = named.windows(2).map(|w| w[1] - w[0]).min().unwrap_or(1);
        let style = font(px);
        let widest = names.iter().map(|s| text_width(s, &style)).max();
        let widest = widest.unwrap_or(0);
        let upright = widest as f64 > slot * gap as f64 - 6.0;
        let height = if upright { widest } else { px as u32 } + 14;
        Categories {
            names,
            style,
            upright,
            height,
        }
    }

    /// Draw them under the plot `chart` draws into, one per equal slot.
    fn draw<Y: Ranged>(&self, root: &Area<'_>, chart: &Chart<'_, '_, Linear, Y>) -> Drawn {
        let (xs, ys) = chart.plotting_area().get_pixel_range();
        let slot = (xs.end - xs.start) as f64 / self.names.len().max(1) as f64;
        for (i, name) in self.names.iter().enumerate() {
            let x = xs.start + (slot * (i as f64 + 0.5)).round() as i32;
            let style = match self.upright {
                true => (self.style.transform(FontTransform::Rotate270))
                    .pos(Pos::new(HPos::Right, VPos::Center)),
                false => self.style.pos(Pos::new(HPos::Center, VPos::Top)),
            };
            root.draw_text(name, &style, (x, ys.end + 7))?;
        }
        Ok(())
    }
}

/// Throughput over time: one line per series (bucket `bucket_ms` wide),
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
    let bucket_s = bucket_ms as f64 / 1000.0;
    let t_max = (buckets as f64 * bucket_s).max(1e-3);
    let peak = (series.iter())
        .flat_map(|s| s.tps.iter().copied())
        .fold(0.0, f64::max);
    let (y_top, y_step) = nice_max(peak * 1.1);
    let (_, t_step) = nice_max(t_max);
    render(H, |root| {
        let y_ticks = ticks(y_top, y_step);
        let labels: Vec<String> = y_ticks.iter().map(|v| fmt_tick(*v, y_step)).collect();
        let mut chart = builder(root, title, y_area(&labels), 50).build_cartesian_2d(
            linear(0.0..t_max, ticks(t_max, t_step)),
            linear(0.0..y_top, y_ticks),
        )?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .bold_line_style(GRID)
            .label_style(font(12.0))
            .axis_desc_style(font(13.0))
            .x_desc("time since measurement start (s)")
            .y_desc(format!("{unit} ({bucket_ms} ms buckets)"))
            .x_label_formatter(&|t| fmt_tick(*t, t_step))
            .y_label_formatter(&|v| fmt_tick(*v, y_step))
            .draw()?;
        // Events: dashed vertical lines, labels staggered so they do not
        // overlap, and turned to the left of a line near the right edge.
        let (xs, ys) = chart.plotting_area().get_pixel_range();
        let mut marks = Vec::new();
        for (k, (at, label)) in events.iter().enumerate() {
            let c = MARK_COLORS[k % MARK_COLORS.len()];
            let at = at.clamp(0.0, t_max);
            chart.draw_series(std::iter::once(DashedPathElement::new(
                [(at, 0.0), (at, y_top)],
                5,
                4,
                c.stroke_width(2),
            )))?;
            let style = font(12.0).color(&c);
            let x = chart.backend_coord(&(at, 0.0)).0;
            let y = ys.start + 12 + 15 * k as i32;
            let width = text_width(label, &style) as i32;
            let (x, side, from) = match x + 4 + width <= xs.end {
                true => (x + 4, HPos::Left, x + 4),
                false => (x - 4, HPos::Right, x - 4 - width),
            };
            root.draw_text(label, &style.pos(Pos::new(side, VPos::Center)), (x, y))?;
            let label_box = (from..from + width).step_by(3);
            marks.extend(label_box.flat_map(|x| [(x, y - 5), (x, y), (x, y + 5)]));
        }
        for (k, se) in series.iter().enumerate() {
            let c = COLORS[k % COLORS.len()];
            let points: Vec<(f64, f64)> = (se.tps.iter().enumerate())
                .map(|(i, &v)| ((i as f64 + 0.5) * bucket_s, v))
                .collect();
            let pixels: Vec<_> = points.iter().map(|p| chart.backend_coord(p)).collect();
            marks.extend(trace(&pixels));
            chart
                .draw_series(LineSeries::new(points, c.stroke_width(2)))?
                .label(se.label)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(3)));
        }
        if !series.is_empty() {
            let labels: Vec<&str> = series.iter().map(|s| s.label).collect();
            use Corner::*;
            let corners = [UpperRight, UpperLeft, LowerRight, LowerLeft];
            legend(&mut chart, &labels, &marks, corners)?;
        }
        Ok(())
    })
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
    let peak = (series.iter())
        .flat_map(|s| s.1.iter().flatten().copied())
        .fold(0.0, f64::max);
    let (top, step) = nice_max(peak * 1.1);
    let y_ticks = ticks(top, step);
    let labels = y_ticks.iter().map(|v| fmt_tick(*v, step)).collect();
    let axis = linear(0.0..top, y_ticks);
    lines_on(title, x_label, y_label, xs, series, axis, labels)
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
            let positive = v.iter().map(|x| x.filter(|x| *x > 0.0 && x.is_finite()));
            (l.clone(), positive.collect())
        })
        .collect();
    let values = || series.iter().flat_map(|s| s.1.iter().flatten().copied());
    let lo = values().fold(f64::INFINITY, f64::min);
    let hi = values().fold(0.0, f64::max);
    let (lo, hi) = match lo.is_finite() {
        true => (lo.log10().floor() as i32, hi.log10().ceil() as i32),
        false => (0, 1),
    };
    let hi = hi.max(lo + 1);
    let decades: Vec<f64> = (lo..=hi).map(|e| 10f64.powi(e)).collect();
    let labels = decades.iter().map(|v| fmt_tick(*v, *v)).collect();
    let axis: Ticked<LogCoord<f64>> = Ticked {
        axis: (10f64.powi(lo)..10f64.powi(hi)).log_scale().into(),
        ticks: decades,
    };
    lines_on(title, x_label, y_label, xs, &series, axis, labels)
}

/// Lines on `y_axis`, whose ticks print as `y_labels`.
fn lines_on<Y>(
    title: &str,
    x_label: &str,
    y_label: &str,
    xs: &[String],
    series: &[(String, Vec<Option<f64>>)],
    y_axis: Ticked<Y>,
    y_labels: Vec<String>,
) -> String
where
    Y: Ranged<ValueType = f64>,
{
    render(H, |root| {
        let y_area = y_area(&y_labels);
        let cats = Categories::new(xs, plot_width(y_area), 12.0);
        let n = xs.len().max(1) as f64;
        let ticks = y_axis.ticks.clone();
        let label_of = |v: &f64| {
            let i = ticks.iter().position(|t| (t - v).abs() <= 1e-9 * t.abs());
            i.map(|i| y_labels[i].clone()).unwrap_or_default()
        };
        let mut chart = builder(root, title, y_area, cats.height + 22)
            .build_cartesian_2d(linear(-0.5..n - 0.5, vec![]), y_axis)?;
        chart
            .configure_mesh()
            .bold_line_style(GRID)
            .label_style(font(12.0))
            .axis_desc_style(font(13.0))
            .x_desc(x_label)
            .y_desc(y_label)
            .y_label_formatter(&label_of)
            .draw()?;
        cats.draw(root, &chart)?;
        let mut marks = Vec::new();
        for (k, (label, values)) in series.iter().enumerate() {
            let c = COLORS[k % COLORS.len()];
            // The legend's entry, then each run of values between gaps.
            chart
                .draw_series(LineSeries::new(std::iter::empty(), c.stroke_width(2)))?
                .label(label)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(3)));
            let points = values.iter().enumerate();
            let points: Vec<(f64, Option<f64>)> = points.map(|(i, v)| (i as f64, *v)).collect();
            for run in points.split(|p| p.1.is_none()).filter(|r| !r.is_empty()) {
                let run: Vec<(f64, f64)> = run.iter().filter_map(|&(x, v)| Some((x, v?))).collect();
                let pixels: Vec<_> = run.iter().map(|p| chart.backend_coord(p)).collect();
                marks.extend(trace(&pixels));
                chart.draw_series(LineSeries::new(run, c.stroke_width(2)))?;
            }
            // A dot per value, unless they stand so close that they would
            // only thicken the line.
            if plot_width(y_area) as f64 / n >= 8.0 {
                let dots = points.iter().filter_map(|&(x, v)| Some((x, v?)));
                chart.draw_series(dots.map(|p| Circle::new(p, 3, c.filled())))?;
            }
        }
        if !series.is_empty() {
            let labels: Vec<&str> = series.iter().map(|s| s.0.as_str()).collect();
            use Corner::*;
            let corners = [UpperLeft, UpperRight, LowerLeft, LowerRight];
            legend(&mut chart, &labels, &marks, corners)?;
        }
        Ok(())
    })
}

/// A heat map: `rows` × `cols` cells coloured by value (viridis, from dark
/// at the smallest to yellow at the largest, with a scale at the right),
/// each with its value printed in it; `None` (not measured) is a grey `n/a`.
/// Row names stand on the left, column names below.
pub fn heatmap_svg(
    title: &str,
    rows: &[String],
    cols: &[String],
    values: &[Vec<Option<f64>>],
) -> String {
    let nr = rows.len().max(values.len()).max(1);
    let widest = values.iter().map(Vec::len).max().unwrap_or(0);
    let nc = cols.len().max(widest).max(1);
    let value = |r: usize, c: usize| {
        let v = values.get(r).and_then(|row| row.get(c).copied().flatten());
        v.filter(|v| v.is_finite())
    };
    let known = || {
        values
            .iter()
            .flatten()
            .flatten()
            .copied()
            .filter(|v| v.is_finite())
    };
    let (lo, hi) = (
        known().fold(f64::INFINITY, f64::min),
        known().fold(f64::NEG_INFINITY, f64::max),
    );
    let color = move |v: f64| match hi > lo {
        true => ViridisRGB::get_color_normalized(v, lo, hi),
        false => ViridisRGB::get_color(0.5),
    };
    const SCALE: u32 = 110;
    render(H, |root| {
        let root_title = root.titled(title, title_font())?;
        let (cells, _) = root_title.split_horizontally(W - SCALE);
        let widest_row = rows.iter().map(|r| text_width(r, &font(13.0))).max();
        let y_area = widest_row.unwrap_or(0) + 16;
        let plot_w = W - SCALE - 2 * MARGIN - y_area;
        let cats = Categories::new(cols, plot_w, 13.0);
        let centres: Vec<f64> = (0..nr).map(|r| (nr - r) as f64 - 0.5).collect();
        let row_of = |y: &f64| {
            let r = (nr as f64 - 0.5 - y).round();
            (rows.get(r as usize).cloned()).unwrap_or_default()
        };
        let mut chart = ChartBuilder::on(&cells)
            .margin(MARGIN)
            .y_label_area_size(y_area)
            .x_label_area_size(cats.height)
            .build_cartesian_2d(
                linear(0.0..nc as f64, vec![]),
                linear(0.0..nr as f64, centres),
            )?;
        chart
            .configure_mesh()
            .disable_mesh()
            // No axis lines nor ticks, but the ticks' room between names and cells.
            .axis_style(TRANSPARENT)
            .label_style(font(13.0))
            .y_label_formatter(&row_of)
            .draw()?;
        cats.draw(root, &chart)?;
        let (xs, ys) = chart.plotting_area().get_pixel_range();
        let cell_h = (ys.end - ys.start) as f64 / nr as f64;
        let cell_w = (xs.end - xs.start) as f64 / nc as f64;
        for r in 0..nr {
            for c in 0..nc {
                let (x, y) = (c as f64, (nr - 1 - r) as f64);
                let corners = [(x, y + 1.0), (x + 1.0, y)];
                let (fill, text, ink) = match value(r, c) {
                    Some(v) => {
                        let fill = color(v);
                        let RGBColor(red, green, blue) = fill;
                        let light = 0.299 * red as f64 + 0.587 * green as f64 + 0.114 * blue as f64;
                        (fill, fmt_si(v), if light < 140.0 { WHITE } else { BLACK })
                    }
                    None => (NA_FILL, "n/a".to_string(), NA_TEXT),
                };
                chart.draw_series([
                    Rectangle::new(corners, fill.filled()),
                    Rectangle::new(corners, WHITE.stroke_width(2)),
                ])?;
                // As large as the cell allows, up to 16 px.
                let mut px = (cell_h * 0.32).clamp(9.0, 16.0);
                while px > 8.0 && text_width(&text, &font(px)) as f64 > cell_w - 8.0 {
                    px -= 1.0;
                }
                let at = Pos::new(HPos::Center, VPos::Center);
                let style = font(px).color(&ink).pos(at);
                chart.draw_series([Text::new(text, (x + 0.5, y + 0.5), style)])?;
            }
        }
        // The colour scale: a bar from the largest value down to the smallest.
        if lo <= hi {
            let (left, width) = (xs.end + 28, 16);
            let (top, bottom) = (ys.start, ys.end.min(ys.start + 200));
            let steps = 48;
            for j in 0..steps {
                let y0 = top + (bottom - top) * j / steps;
                let y1 = top + (bottom - top) * (j + 1) / steps;
                let v = hi - (hi - lo) * (j as f64 + 0.5) / steps as f64;
                root.draw(&Rectangle::new(
                    [(left, y0), (left + width, y1)],
                    color(v).filled(),
                ))?;
            }
            root.draw(&Rectangle::new(
                [(left, top), (left + width, bottom)],
                BLACK.stroke_width(1),
            ))?;
            let at = |y, v: f64| {
                let style = font(12.0).pos(Pos::new(HPos::Left, VPos::Center));
                root.draw_text(&fmt_si(v), &style, (left + width + 6, y))
            };
            at(top, hi)?;
            if hi > lo {
                at(bottom, lo)?;
            }
        }
        Ok(())
    })
}

/// Several panels stacked vertically into one SVG; each keeps its size.
pub fn stack_svg(panels: &[String]) -> String {
    // A panel's size, from its `<svg …>` element.
    let size = |svg: &str| {
        let tag = svg.find("<svg").map_or("", |i| &svg[i..]);
        let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
        let attr = |name: &str| {
            let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
            tag[at..].split('"').next()?.parse::<f64>().ok()
        };
        (
            attr("width").unwrap_or(W as f64),
            attr("height").unwrap_or(H as f64),
        )
    };
    let width = panels.iter().map(|p| size(p).0).fold(W as f64, f64::max);
    let height: f64 = panels.iter().map(|p| size(p).1).sum();
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">"#
    );
    let mut y = 0.0;
    for p in panels {
        // Each panel is an `<svg>` element of its own, moved down.
        let inner = p.find("<svg").map_or("", |i| p[i..].trim_end());
        s += &format!(r#"<g transform="translate(0 {y})">{inner}</g>"#);
        y += size(p).1;
    }
    s.push_str("</svg>\n");
    s
}

/// A bar chart: one bar per `(label, value)`, annotated with the value.
pub fn bars_svg(title: &str, unit: &str, bars: &[(String, f64)]) -> String {
    let n = bars.len().max(1) as f64;
    let peak = bars.iter().map(|b| b.1).fold(0.0, f64::max);
    let (top, step) = nice_max(peak * 1.1);
    render(H, |root| {
        let y_ticks = ticks(top, step);
        let labels: Vec<String> = y_ticks.iter().map(|v| fmt_tick(*v, step)).collect();
        let y_area = y_area(&labels);
        let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
        // Many bars: smaller type.
        let px = if bars.len() > 10 { 11.0 } else { 12.0 };
        let cats = Categories::new(&names, plot_width(y_area), px);
        let mut chart = builder(root, title, y_area, cats.height)
            .build_cartesian_2d(linear(-0.5..n - 0.5, vec![]), linear(0.0..top, y_ticks))?;
        chart
            .configure_mesh()
            .bold_line_style(GRID)
            .label_style(font(12.0))
            .axis_desc_style(font(13.0))
            .y_desc(unit)
            .y_label_formatter(&|v| fmt_tick(*v, step))
            .draw()?;
        cats.draw(root, &chart)?;
        let value_style = font(px - 1.0).pos(Pos::new(HPos::Center, VPos::Bottom));
        for (k, (_, value)) in bars.iter().enumerate() {
            let x = k as f64;
            // A zero bar is no rectangle, only its value.
            if *value > 0.0 {
                let corners = [(x - 0.35, 0.0), (x + 0.35, *value)];
                let fill = COLORS[k % COLORS.len()].filled();
                chart.draw_series([Rectangle::new(corners, fill)])?;
            }
            let label = Text::new(fmt_si(*value), (0, -4), value_style.clone());
            chart.draw_series([EmptyElement::at((x, *value)) + label])?;
        }
        Ok(())
    })
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

    /// Pixels of a rasterised figure that are not white.
    fn ink(svg: &str) -> usize {
        let p = resvg::tiny_skia::Pixmap::decode_png(&svg_to_png(svg).unwrap()).unwrap();
        (p.pixels().iter())
            .filter(|c| c.red() < 250 || c.green() < 250 || c.blue() < 250)
            .count()
    }

    #[test]
    fn labels_say_no_digit_for_nothing_and_no_two_ticks_alike() {
        assert_eq!(fmt_si(5.0), "5");
        assert_eq!(fmt_si(0.5), "0.5");
        assert_eq!(fmt_si(3.314), "3.31");
        assert_eq!(fmt_si(42.4), "42");
        assert_eq!(fmt_si(1500.0), "1.5k");
        assert_eq!(fmt_si(2_000_000.0), "2M");
        assert_eq!(fmt_si(0.0), "0");
        assert_eq!(fmt_tick(1250.0, 250.0), "1.25k");
        assert_eq!(fmt_tick(0.001, 0.001), "0.001");
        for peak in [
            0.3, 0.9, 1.0, 4.2, 7.5, 12.0, 230.0, 1_234.0, 2_600.0, 95_000.0, 3.3e6,
        ] {
            let (top, step) = nice_max(peak);
            let labels: Vec<String> = (ticks(top, step).iter())
                .map(|v| fmt_tick(*v, step))
                .collect();
            let mut unique = labels.clone();
            unique.dedup();
            assert_eq!(unique, labels, "ticks up to {top}");
            let zero_ending = |l: &String| {
                let number = l.trim_end_matches(['k', 'M', 'G']);
                number.contains('.') && number.ends_with('0')
            };
            assert!(!labels.iter().any(zero_ending), "{labels:?}");
        }
    }

    #[test]
    fn a_heat_map_prints_each_cell_and_greys_what_was_not_measured() {
        let rows: Vec<String> = ["lin", "causal"].map(String::from).to_vec();
        let cols: Vec<String> = ["strict", "synch", "eventual"].map(String::from).to_vec();
        let values = vec![
            vec![Some(1.0), Some(0.5), None],
            vec![Some(1500.0), Some(3.314), Some(0.0)],
        ];
        let svg = heatmap_svg("models", &rows, &cols, &values);
        for text in ["models", "lin", "causal", "strict", "synch", "eventual"] {
            assert!(svg.contains(&format!(">\n{text}\n<")), "{text} missing");
        }
        // Each value once in its cell (and the scale's ends again).
        for value in ["1", "0.5", "1.5k", "3.31", "0", "n/a"] {
            assert!(svg.contains(&format!(">\n{value}\n<")), "{value} missing");
        }
        assert!(!svg.contains("1.00") && !svg.contains("0.50"));
        assert_eq!(svg.matches(">\nn/a\n<").count(), 1);
        // Five colours and the grey: cells are drawn, not only text.
        let fills: std::collections::HashSet<&str> = (svg.split("fill=\"").skip(1))
            .filter_map(|f| f.split('"').next())
            .collect();
        assert!(fills.len() >= 6, "{fills:?}");
        assert!(ink(&svg) > 100_000, "the cells cover much of the figure");
        // Stacked, three panels rasterise one above the other.
        let stack = stack_svg(&[svg.clone(), svg.clone(), svg]);
        let png = svg_to_png(&stack).unwrap();
        let p = resvg::tiny_skia::Pixmap::decode_png(&png).unwrap();
        assert_eq!((p.width(), p.height()), (W, 3 * H));
        let bottom = &p.pixels()[(2 * H * W) as usize..];
        assert!(bottom.iter().filter(|c| c.red() < 250).count() > 100_000);
    }

    #[test]
    fn many_bars_keep_every_name_upright_and_lines_can_be_logarithmic() {
        let names: Vec<(String, f64)> = (0..25)
            .map(|i| (format!("eventual-model-{i}"), i as f64 / 7.0))
            .collect();
        let svg = bars_svg("25 models", "x", &names);
        assert!(names.iter().all(|(n, _)| svg.contains(n.as_str())));
        assert_eq!(svg.matches("rotate(270").count(), 25 + 1);
        assert!(ink(&svg) > 10_000);
        let xs: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let series = [("s".to_string(), vec![Some(0.002), None, Some(40_000.0)])];
        let svg = log_lines_svg("log", "x", "y", &xs, &series);
        for decade in [
            "0.001", "0.01", "0.1", "1", "10", "100", "1k", "10k", "100k",
        ] {
            assert!(svg.contains(&format!(">\n{decade}\n<")), "{decade} missing");
        }
        assert!(ink(&svg) > 10_000);
    }
}
