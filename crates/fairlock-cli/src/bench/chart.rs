//! `--svg FILE`: the run as grouped bar charts, drawn with plotters' SVG
//! backend: throughput relative to rslock, Redis CPU per operation, handoff
//! latency, and Redis script time per handoff in a queue. With `--before
//! FILE` (an earlier run's `--json` output), each implementation's bar of
//! that run stands, lighter, beside this run's: before and after a change,
//! side by side.

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

/// The lighter twin of an implementation's colour, for an earlier run.
fn faded(color: RGBColor) -> RGBColor {
    let fade = |c: u8| c + ((255 - u16::from(c)) * 11 / 20) as u8;
    RGBColor(fade(color.0), fade(color.1), fade(color.2))
}

/// One panel: groups along x, one bar per implementation (and run) in each.
struct Panel {
    title: String,
    groups: Vec<String>,
    /// The case of each group.
    cases: Vec<Case>,
    /// What the panel shows, to find it in an earlier run.
    figure: Figure,
    /// Per implementation: its value in each group, if it ran there.
    bars: Vec<(Subject, Vec<Option<f64>>)>,
}

/// The figure a panel shows.
#[derive(Clone, Copy)]
enum Figure {
    /// Operations per second / rslock's in the same run.
    VsRslock,
    RedisCpuUs,
    /// Handoff p50 in PING round trips of the same run.
    HandoffPings,
    ScriptUs,
}

impl Figure {
    fn of(self, figures: &Figures, ping_us: f64) -> Option<f64> {
        match self {
            Figure::VsRslock => figures.vs_rslock,
            Figure::RedisCpuUs => figures.redis_cpu_us,
            Figure::HandoffPings => figures.handoff_p50_us.map(|p| p / ping_us),
            Figure::ScriptUs => figures.script_us,
        }
    }
}

/// One series of bars as drawn: an implementation in this run or in the
/// earlier one.
struct Bars {
    label: String,
    color: RGBColor,
    values: Vec<Option<f64>>,
}

/// An earlier run, read from its `--json` output: the summary figures the
/// chart shows, per case and implementation.
pub(crate) struct Before {
    /// Microseconds per PING round trip in that run.
    ping_us: f64,
    figures: Vec<(Case, Subject, Figures)>,
}

#[derive(Default)]
struct Figures {
    vs_rslock: Option<f64>,
    redis_cpu_us: Option<f64>,
    handoff_p50_us: Option<f64>,
    script_us: Option<f64>,
}

impl Before {
    /// Reads `path`, the output of `fairlock bench --json`; a file that is
    /// not one is refused with the reason.
    pub(crate) fn read(path: &Path) -> Result<Before, String> {
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))?;
        let ping_rate = json["ping"]["per_second_median"]
            .as_f64()
            .filter(|r| *r > 0.0)
            .ok_or("no ping.per_second_median: not the output of `fairlock bench --json`")?;
        let results = json["results"]
            .as_array()
            .ok_or("no results: not the output of `fairlock bench --json`")?;
        let mut figures = Vec::new();
        for result in results {
            let count = |field: &str| result[field].as_u64().map(|n| n as usize);
            let case = match (
                result["scenario"].as_str(),
                count("workers"),
                count("waiters"),
            ) {
                (Some("uncontended"), _, _) => Case::Uncontended,
                (Some("contended"), Some(n), _) => Case::Contended(n),
                (Some("shared"), Some(n), _) => Case::Shared(n),
                (Some("handoff"), Some(n), _) => Case::Handoff(n),
                (Some("queue"), _, Some(n)) => Case::Queue(n),
                _ => return Err(format!("a result of no known scenario: {result}")),
            };
            let Some(subject) = Subject::ALL
                .into_iter()
                .find(|s| result["implementation"].as_str() == Some(s.key()))
            else {
                continue;
            };
            let summary = &result["summary"];
            figures.push((
                case,
                subject,
                Figures {
                    vs_rslock: summary["vs_rslock"].as_f64(),
                    redis_cpu_us: summary["redis_cpu_us_per_op"].as_f64(),
                    handoff_p50_us: summary["handoff_p50_us"].as_f64(),
                    script_us: summary["script_us_per_op"].as_f64(),
                },
            ));
        }
        Ok(Before {
            ping_us: 1e6 / ping_rate,
            figures,
        })
    }

    fn figures(&self, case: Case, subject: Subject) -> Option<&Figures> {
        self.figures
            .iter()
            .find(|(c, s, _)| *c == case && *s == subject)
            .map(|(_, _, f)| f)
    }
}

pub(crate) fn write(results: &Results, path: &Path, before: Option<&Before>) -> Result<(), Error> {
    let panels = panels(results);
    let height = 360 * panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for (panel, area) in panels.iter().zip(areas.iter()) {
        draw(panel, &bars(panel, before), area)?;
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
            cases: rate_cases.clone(),
            figure: Figure::VsRslock,
            bars: per_subject(&|case, subject| {
                let rslock = results.rslock(case)?.rate;
                let own = summary(case, subject)?.rate;
                (rslock > 0.0).then(|| own / rslock)
            }),
        });
        panels.push(Panel {
            title: "Redis CPU per operation, us (lower is cheaper)".into(),
            groups: rate_cases.iter().map(|c| c.title()).collect(),
            cases: rate_cases.clone(),
            figure: Figure::RedisCpuUs,
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
                cases: latency_cases.clone(),
                figure: Figure::HandoffPings,
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
            cases: queue_cases.clone(),
            figure: Figure::ScriptUs,
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

/// The bars of a panel: each implementation's, after its earlier run's
/// (lighter) when `before` has that implementation in one of the cases.
fn bars(panel: &Panel, before: Option<&Before>) -> Vec<Bars> {
    let mut bars = Vec::new();
    for (subject, values) in &panel.bars {
        if let Some(before) = before {
            let earlier: Vec<Option<f64>> = panel
                .cases
                .iter()
                .map(|&case| {
                    let figures = before.figures(case, *subject)?;
                    panel.figure.of(figures, before.ping_us)
                })
                .collect();
            if earlier.iter().any(Option::is_some) {
                bars.push(Bars {
                    label: format!("{} (before)", subject.label()),
                    color: faded(color(*subject)),
                    values: earlier,
                });
            }
        }
        bars.push(Bars {
            label: subject.label().to_string(),
            color: color(*subject),
            values: values.clone(),
        });
    }
    bars
}

fn draw(
    panel: &Panel,
    bars: &[Bars],
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
) -> Result<(), Error> {
    let top = bars
        .iter()
        .flat_map(|b| b.values.iter().flatten().copied())
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
    let n = bars.len().max(1) as f64;
    let width = 0.8 / n;
    for (k, series) in bars.iter().enumerate() {
        let style = series.color.filled();
        let bars: Vec<(f64, f64, f64)> = series
            .values
            .iter()
            .enumerate()
            .filter_map(|(g, v)| v.map(|v| (g as f64 + 0.1 + k as f64 * width, v, 0.0)))
            .collect();
        chart
            .draw_series(
                bars.iter()
                    .map(|&(x, v, _)| Rectangle::new([(x, 0.0), (x + width * 0.9, v)], style)),
            )?
            .label(series.label.as_str())
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
