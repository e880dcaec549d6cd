//! `tandem demo ddp`: the consistency/persistency trade-off made visible.
//! Five simulated nodes (the DDP paper's parameters) run YCSB-A under each
//! model; then, in seeded runs of each model, the whole cluster loses power
//! mid-run and every node recovers from its NVM. Per model: throughput
//! relative to ⟨Lin, Synch⟩, acknowledged writes lost, and read versions
//! that vanished — and none of the model's own promises broken. The figure
//! shows each measure as a 5 × 5 heat map: consistency models in rows,
//! persistency models in columns, in the paper's order.

use std::path::Path;

use tandem_ddp::simcheck::{self, CheckConfig, Crash};
use tandem_ddp::{Consistency, Model, Persistency};
use tandem_ddp_lab::bench::{run_models, DdpBenchConfig};
use tandem_report::plot::{heatmap_svg, stack_svg, write_figure};
use tandem_ycsb::Ycsb;

/// Whole-cluster crashes per model.
const CRASHES: u64 = 10;

struct Row {
    model: Model,
    normalized: f64,
    lost: u64,
    vanished: u64,
    acked: u64,
    violations: Vec<String>,
}

pub fn run(figure: &Path) -> Result<(), String> {
    let models: Vec<Model> = Model::all()
        .into_iter()
        .filter(|m| m.implemented())
        .collect();
    println!("DDP demo: 5 nodes, 20 clients each, YCSB-A, 1 µs round trip, 400 ns persists (simulated time)");
    let cfg = DdpBenchConfig::paper(Ycsb::new("ycsb-a", 1000, false)?);
    let tput = run_models(&cfg, &models, |r| {
        eprintln!(
            "  {}: {:.2} x lin-synch",
            r.model,
            r.normalized.unwrap_or(f64::NAN)
        )
    });
    let rows: Vec<Row> = models
        .iter()
        .zip(&tput)
        .map(|(&m, t)| crash_model(m, t.normalized.unwrap_or(0.0)))
        .collect();
    print_rows(&rows);
    let panels = [
        heatmap(
            "Throughput relative to lin-synch (YCSB-A; rows: consistency, columns: persistency)",
            &rows,
            |r| r.normalized,
        ),
        heatmap(
            &format!("Acknowledged writes lost in {CRASHES} whole-cluster crashes"),
            &rows,
            |r| r.lost as f64,
        ),
        heatmap(
            &format!("Read versions that vanished in {CRASHES} crashes"),
            &rows,
            |r| r.vanished as f64,
        ),
    ];
    let (svg, png) = write_figure(figure, &stack_svg(&panels))?;
    println!("figure: {} and {}", svg.display(), png.display());
    let broken: Vec<String> = rows
        .iter()
        .flat_map(|r| {
            r.violations
                .iter()
                .map(move |v| format!("{}: {v}", r.model))
        })
        .collect();
    if !broken.is_empty() {
        return Err(format!(
            "a model broke its own promises:\n{}",
            broken.join("\n")
        ));
    }
    Ok(())
}

/// One measure of every model as a heat map: a row per consistency model,
/// a column per persistency model; a model that was not run is n/a.
fn heatmap(title: &str, rows: &[Row], measure: impl Fn(&Row) -> f64) -> String {
    let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let consistency = names(&Consistency::ALL.map(Consistency::name));
    let persistency = names(&Persistency::ALL.map(Persistency::name));
    let cell = |c, p| {
        let row = rows.iter().find(|r| r.model == Model { c, p });
        row.map(&measure)
    };
    let grid: Vec<Vec<Option<f64>>> = (Consistency::ALL.iter())
        .map(|&c| Persistency::ALL.iter().map(|&p| cell(c, p)).collect())
        .collect();
    heatmap_svg(title, &consistency, &persistency, &grid)
}

/// Seeded whole-cluster crashes of `model`; its promises are checked.
fn crash_model(model: Model, normalized: f64) -> Row {
    let mut row = Row {
        model,
        normalized,
        lost: 0,
        vanished: 0,
        acked: 0,
        violations: Vec::new(),
    };
    for seed in 0..CRASHES {
        let cfg = CheckConfig {
            crash: Crash::All,
            net_faults: false,
            sessions: 40,
            keys: 200,
            ops: 150,
            ..CheckConfig::new(model, seed)
        };
        let r = simcheck::run(&cfg);
        row.lost += r.lost_acked_writes;
        row.vanished += r.vanished_reads;
        row.acked += r.completed;
        row.violations.extend(
            r.violations
                .into_iter()
                .map(|v| format!("{v} (replay: {})", r.replay)),
        );
    }
    row
}

fn print_rows(rows: &[Row]) {
    println!(
        "{:<18} {:>12} {:>14} {:>16} {:>11}",
        "model", "vs lin-synch", "acked lost", "reads vanished", "promises"
    );
    for r in rows {
        let ok = if r.violations.is_empty() {
            "kept"
        } else {
            "BROKEN"
        };
        println!(
            "{:<18} {:>12.2} {:>14} {:>16} {:>11}",
            r.model.to_string(),
            r.normalized,
            r.lost,
            r.vanished,
            ok
        );
    }
    println!("(losses over {CRASHES} seeded runs with a whole-cluster crash each; stronger models lose nothing they acknowledged)");
}
