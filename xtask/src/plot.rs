//! SVG plots of the benchmark records (plotters): for each backend and batch S, weight GB/s
//! against shape, one line per format (and per peer, dashed), with the same-run ceiling as
//! a horizontal line. Drawn from `docs/perf/<backend>.json` into `docs/perf/<backend>-s<S>.svg`.

use crate::perf_record::{Kind, Record, Series};
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// A palette that stays readable on white; series beyond it wrap around.
const COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The shapes of the series, in order of first appearance.
fn shapes(series: &[&Series]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in series {
        for p in &s.points {
            if !out.contains(&p.shape) {
                out.push(p.shape.clone());
            }
        }
    }
    out
}

/// The batches the record holds, ascending.
fn batches(r: &Record) -> Vec<usize> {
    let mut b: Vec<usize> = r.series.iter().map(|s| s.s).collect();
    b.sort_unstable();
    b.dedup();
    b
}

/// Draws every plot of one record; returns the files written.
pub fn draw(root: &Path, r: &Record) -> Result<Vec<PathBuf>, String> {
    let mut written = Vec::new();
    for s in batches(r) {
        let series: Vec<&Series> = r.series.iter().filter(|x| x.s == s).collect();
        let file = root
            .join("docs/perf")
            .join(format!("{}-s{s}.svg", r.backend));
        draw_one(&file, r, s, &series).map_err(|e| format!("{}: {e}", file.display()))?;
        written.push(file);
    }
    Ok(written)
}

fn draw_one(file: &Path, r: &Record, s: usize, series: &[&Series]) -> Result<(), String> {
    let shapes = shapes(series);
    let top = series
        .iter()
        .flat_map(|x| x.points.iter().map(|p| p.gbps))
        .fold(r.ceiling.gbps, f64::max)
        * 1.1;
    let n = shapes.len().max(1);
    let area = SVGBackend::new(file, (900, 520)).into_drawing_area();
    let e = |e: &dyn std::fmt::Display| e.to_string();
    area.fill(&WHITE).map_err(|x| e(&x))?;
    let caption = format!("{} GEMV, S = {s}: weight GB/s by shape", r.backend);
    let mut chart = ChartBuilder::on(&area)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .right_y_label_area_size(10)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..top)
        .map_err(|x| e(&x))?;
    let labels = shapes.clone();
    chart
        .configure_mesh()
        .x_labels(n)
        .x_label_formatter(&|v| {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                labels[i as usize].clone()
            } else {
                String::new()
            }
        })
        .x_desc(format!("shape [O x I]   ({}; {})", r.device, r.date))
        .y_desc("GB/s of weight bytes")
        .draw()
        .map_err(|x| e(&x))?;

    let ceiling = r.ceiling.gbps;
    chart
        .draw_series(LineSeries::new(
            vec![(-0.5, ceiling), (n as f64 - 0.5, ceiling)],
            BLACK.stroke_width(2),
        ))
        .map_err(|x| e(&x))?
        .label(format!("ceiling: {} ({ceiling:.0} GB/s)", r.ceiling.name))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(2)));

    for (k, sr) in series.iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        let pts: Vec<(f64, f64)> = sr
            .points
            .iter()
            .filter_map(|p| {
                let x = shapes.iter().position(|sh| *sh == p.shape)?;
                Some((x as f64, p.gbps))
            })
            .collect();
        let width = match sr.kind {
            Kind::Ours => 2,
            Kind::Peer => 1,
        };
        let style = colour.stroke_width(width);
        let label = match sr.kind {
            Kind::Ours => sr.label.clone(),
            Kind::Peer => format!("peer: {}", sr.label),
        };
        match sr.kind {
            Kind::Ours => {
                chart
                    .draw_series(LineSeries::new(pts.clone(), style))
                    .map_err(|x| e(&x))?
                    .label(label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 3, colour.filled())))
                    .map_err(|x| e(&x))?;
            }
            Kind::Peer => {
                chart
                    .draw_series(DashedLineSeries::new(pts.clone(), 6, 4, style))
                    .map_err(|x| e(&x))?
                    .label(label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
                chart
                    .draw_series(pts.iter().map(|&p| TriangleMarker::new(p, 4, colour)))
                    .map_err(|x| e(&x))?;
            }
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;
    area.present().map_err(|x| e(&x))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_record::{Ceiling, Point};

    #[test]
    fn draws_every_series_and_the_ceiling() {
        let dir = std::env::temp_dir().join(format!("tessera-plot-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("docs/perf")).unwrap();
        let pt = |shape: &str, gbps: f64| Point {
            shape: shape.into(),
            us: 1.0,
            gbps,
        };
        let r = Record {
            backend: "cpu".into(),
            device: "test box".into(),
            date: "2026-11-30".into(),
            command: "x".into(),
            ceiling: Ceiling {
                name: "read_bw".into(),
                gbps: 33.0,
            },
            series: vec![
                Series {
                    label: "int8-row".into(),
                    kind: Kind::Ours,
                    s: 1,
                    points: vec![pt("4096x4096", 25.0), pt("6144x16384", 28.0)],
                },
                Series {
                    label: "candle q4k".into(),
                    kind: Kind::Peer,
                    s: 1,
                    points: vec![pt("4096x4096", 20.0)],
                },
            ],
        };
        let files = draw(&dir, &r).unwrap();
        assert_eq!(files.len(), 1);
        let svg = std::fs::read_to_string(&files[0]).unwrap();
        for needle in [
            "int8-row",
            "peer: candle q4k",
            "ceiling: read_bw",
            "6144x16384",
        ] {
            assert!(svg.contains(needle), "{needle} missing from the plot");
        }
        std::fs::remove_dir_all(&dir).ok();
    }
}
