//! `--svg FILE`: the run as grouped bar charts, drawn with plotters' SVG
//! backend: throughput relative to rslock, Redis CPU per operation, handoff
//! latency, and Redis script time per handoff in a queue.

use std::path::Path;

use plotters::prelude::*;

use super::report::summarize;
use super::subject::Subject;
use super::{Case, Results};

type Error = Box<dyn std::error::Error>;

fn color(subject: Subject) -> RGBColor {
    match subject {
        Subject::NativeFair => RGBColor(31, 119, 180),
        Subject::NativeNonFair => RGBColor(158, 202, 225),
        Subject::RedissonFair => RGBColor(214, 96, 39),
        Subject::RedissonNonFair => RGBColor(253, 174, 107),
        Subject::Rslock => RGBColor(90, 90, 90),
        // Not charted (`--metrics-cost` only).
        _ => RGBColor(200, 200, 200),
    }
}

/// One panel: groups along x, one bar per implementation in each.
struct Panel {
    title: String,
    groups: Vec<String>,
    /// Per implementation: its value in each group, if it ran there.
    bars: Vec<(Subject, Vec<Option<f64>>)>,
}

pub(crate) fn write(results: &Results, path: &Path) -> Result<(), Error> {
    let panels = panels(results);
    let height = 360 * panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for (panel, area) in panels.iter().zip(areas.iter()) {
        draw(panel, area)?;
    }
    root.present()?;
    Ok(())
}

fn panels(results: &Results) -> Vec<Panel> {
    let cases = results.cases();
    let value_of = |case: Case, subject: Subject, f: &dyn Fn(Case) -> Option<f64>| {
        results
            .series
            .iter()
            .any(|s| s.case == case && s.subject == subject)
            .then(|| f(case))
            .flatten()
    };
    let summary = |case: Case, subject: Subject| {
        results
            .series
            .iter()
            .find(|s| s.case == case && s.subject == subject)
            .map(|s| summarize(&s.samples))
    };
    let mut panels = Vec::new();

    let rate_cases: Vec<Case> = cases
        .iter()
        .copied()
        .filter(|c| !matches!(c, Case::Queue(_)))
        .collect();
    let ping_us = {
        let rate = results.ping_rate();
        if rate > 0.0 { 1e6 / rate } else { 0.0 }
    };
    if !rate_cases.is_empty() {
        let per_subject = |f: &dyn Fn(Case, Subject) -> Option<f64>| {
            Subject::ALL
                .iter()
                .map(|&subject| {
                    let values = rate_cases
                        .iter()
                        .map(|&case| value_of(case, subject, &|c| f(c, subject)))
                        .collect();
                    (subject, values)
                })
                .collect::<Vec<_>>()
        };
        panels.push(Panel {
            title: "Operations per second / rslock's, same run (higher is faster)".into(),
            groups: rate_cases.iter().map(|c| c.title()).collect(),
            bars: per_subject(&|case, subject| {
                let rslock = results.rslock(case)?.rate;
                let own = summary(case, subject)?.rate;
                (rslock > 0.0).then(|| own / rslock)
            }),
        });
        panels.push(Panel {
            title: "Redis CPU per operation, us (lower is cheaper)".into(),
            groups: rate_cases.iter().map(|c| c.title()).collect(),
            bars: per_subject(&|case, subject| Some(summary(case, subject)?.redis_cpu_us)),
        });
        let latency_cases: Vec<Case> = rate_cases
            .iter()
            .copied()
            .filter(|c| !matches!(c, Case::Uncontended))
            .collect();
        if !latency_cases.is_empty() && ping_us > 0.0 {
            panels.push(Panel {
                title: "Handoff latency p50 (release sent -> next holder), in PING round trips"
                    .into(),
                groups: latency_cases.iter().map(|c| c.title()).collect(),
                bars: Subject::ALL
                    .iter()
                    .map(|&subject| {
                        let values = latency_cases
                            .iter()
                            .map(|&case| {
                                summary(case, subject)?.handoff_p50_us.map(|p| p / ping_us)
                            })
                            .collect();
                        (subject, values)
                    })
                    .collect(),
            });
        }
    }
    let queue_cases: Vec<Case> = cases
        .iter()
        .copied()
        .filter(|c| matches!(c, Case::Queue(_)))
        .collect();
    if !queue_cases.is_empty() {
        panels.push(Panel {
            title: "Queue: Redis script time per handoff, us (lower is cheaper)".into(),
            groups: queue_cases.iter().map(|c| c.title()).collect(),
            bars: Subject::ALL
                .iter()
                .filter(|s| s.queues())
                .map(|&subject| {
                    let values = queue_cases
                        .iter()
                        .map(|&case| Some(summary(case, subject)?.script_us))
                        .collect();
                    (subject, values)
                })
                .collect(),
        });
    }
    panels
}

fn draw(
    panel: &Panel,
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
) -> Result<(), Error> {
    let top = panel
        .bars
        .iter()
        .flat_map(|(_, v)| v.iter().flatten().copied())
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max);
    let top = if top > 0.0 { top * 1.2 } else { 1.0 };
    let groups = panel.groups.len().max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..groups as f64, 0.0..top)?;
    let names = panel.groups.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups * 2 + 1)
        .x_label_formatter(&move |x| {
            // A label at the middle of each group only.
            let i = x.floor();
            if (x - i - 0.5).abs() < 1e-6 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .draw()?;
    let n = panel.bars.len().max(1) as f64;
    let width = 0.8 / n;
    for (k, (subject, values)) in panel.bars.iter().enumerate() {
        let style = color(*subject).filled();
        let bars: Vec<(f64, f64, f64)> = values
            .iter()
            .enumerate()
            .filter_map(|(g, v)| v.map(|v| (g as f64 + 0.1 + k as f64 * width, v, 0.0)))
            .collect();
        chart
            .draw_series(
                bars.iter()
                    .map(|&(x, v, _)| Rectangle::new([(x, 0.0), (x + width * 0.9, v)], style)),
            )?
            .label(subject.label())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], style));
        chart.draw_series(bars.iter().map(|&(x, v, _)| {
            Text::new(
                format_value(v),
                (x, v + top * 0.02),
                ("sans-serif", 10).into_font(),
            )
        }))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

fn format_value(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}
