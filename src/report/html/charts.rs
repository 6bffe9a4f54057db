//! The report page's inline SVG charts: a bar per model and behaviour with
//! its floor, a detection curve per behaviour, and the quality means. Each
//! names its models and values in text (`<title>` and labels), so colour
//! is never the only cue.

use maud::{Markup, html};

use super::order::{behaviour_codes, find_behaviour};
use super::parts::{at, colour};
use crate::report::format::pct;
use crate::report::model::ModelReport;
use crate::report::quality::QualitySummary;

/// One horizontal bar per model per behaviour, with floors drawn as dashed lines.
pub fn behaviours(models: &[ModelReport]) -> Markup {
    const LABEL: f64 = 90.0;
    const BAR_AREA: f64 = 520.0;
    const BAR: f64 = 14.0;
    const TOP: f64 = 24.0;
    let codes = behaviour_codes(models);
    let width = LABEL + BAR_AREA + 80.0;
    let row = models.len() as f64 * (BAR + 2.0) + 12.0;
    let height = TOP + row * codes.len() as f64 + 8.0;
    html! {
        h2 { "Behaviour scores" }
        svg.chart data-chart="behaviours" viewBox={ "0 0 " (width) " " (height) } width=(width)
            height=(height) role="img" aria-label="Score per behaviour and model" {
            @for tick in [0.0, 0.25, 0.5, 0.75, 1.0] {
                @let x = LABEL + tick * BAR_AREA;
                line x1=(x) y1=(TOP - 4.0) x2=(x) y2=(height - 4.0) stroke="#ddd" {}
                text x=(x) y="14" text-anchor="middle" { (format!("{:.0} %", tick * 100.0)) }
            }
            @for (r, code) in codes.iter().enumerate() {
                @let y0 = TOP + r as f64 * row;
                text x=(LABEL - 6.0) y=(at(y0 + (row - 12.0) / 2.0 + 4.0)) text-anchor="end" { (code) }
                @for (i, m) in models.iter().enumerate() {
                    @let y = y0 + i as f64 * (BAR + 2.0);
                    @match find_behaviour(m, code) {
                        None => text x=(LABEL + 4.0) y=(at(y + BAR - 3.0)) fill="#777" { "no data" },
                        Some(b) => {
                            @match b.score {
                                Some(score) => {
                                    @let w = (score.clamp(0.0, 1.0) * BAR_AREA).max(1.0);
                                    rect.bar.breach[b.below_floor] x=(LABEL) y=(at(y)) width=(at(w)) height=(BAR)
                                        fill=(colour(i)) stroke=[b.below_floor.then_some("#8b0000")]
                                        stroke-width=[b.below_floor.then_some("2")] {
                                        title {
                                            (m.model) " " (code) ": " (pct(b.score))
                                            @if b.below_floor { " (below floor)" }
                                        }
                                    }
                                    text x=(at(LABEL + w + 4.0)) y=(at(y + BAR - 3.0)) {
                                        (pct(b.score)) @if b.below_floor { " ⚠ floor" }
                                    }
                                }
                                None => text.na x=(LABEL + 4.0) y=(at(y + BAR - 3.0)) fill="#777" {
                                    "n/a" title { (m.model) " " (code) ": nothing scorable" }
                                },
                            }
                            @if let Some(floor) = b.floor {
                                @let x = at(LABEL + floor.clamp(0.0, 1.0) * BAR_AREA);
                                line x1=(x) y1=(at(y - 1.0)) x2=(x) y2=(at(y + BAR + 1.0)) stroke="#8b0000"
                                    stroke-dasharray="3 2" {
                                    title { "floor " (pct(Some(floor))) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// One line chart per behaviour: detection rate by base severity, a line per model.
pub fn detection(models: &[ModelReport]) -> Markup {
    html! {
        h2 { "Detection rate by severity" }
        div.curves {
            @for code in behaviour_codes(models) { (detection_curve(models, code)) }
        }
    }
}

fn detection_curve(models: &[ModelReport], code: &str) -> Markup {
    const W: f64 = 320.0;
    const H: f64 = 220.0;
    const LEFT: f64 = 46.0;
    const RIGHT: f64 = 12.0;
    const TOP: f64 = 12.0;
    const BOTTOM: f64 = 40.0;
    let (plot_w, plot_h) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let curves: Vec<_> = models
        .iter()
        .map(|m| find_behaviour(m, code).map_or(&[][..], |b| &b.detection_curve[..]))
        .collect();
    let top_severity = curves
        .iter()
        .flat_map(|c| c.iter().map(|p| p.severity))
        .fold(10.0, f64::max)
        .ceil();
    let x_of = |s: f64| LEFT + s / top_severity * plot_w;
    let y_of = |rate: f64| TOP + (1.0 - rate) * plot_h;
    let step = if top_severity > 10.0 { 5.0 } else { 2.0 };
    let ticks = (0..)
        .map(|k| k as f64 * step)
        .take_while(|t| *t <= top_severity);
    let (bottom, middle) = (TOP + plot_h, TOP + plot_h / 2.0);
    html! {
        figure {
            figcaption { (code) }
            svg.chart data-chart="detection" data-behaviour=(code) viewBox={ "0 0 " (W) " " (H) }
                width=(W) height=(H) role="img" aria-label={ "Detection rate by severity for " (code) } {
                // Axes, grid and labels.
                @for rate in [0.0, 0.5, 1.0] {
                    @let y = y_of(rate);
                    line x1=(LEFT) y1=(y) x2=(W - RIGHT) y2=(y) stroke="#ddd" {}
                    text x=(LEFT - 4.0) y=(y + 4.0) text-anchor="end" { (format!("{:.0} %", rate * 100.0)) }
                }
                @for tick in ticks {
                    text x=(at(x_of(tick))) y=(bottom + 14.0) text-anchor="middle" { (tick) }
                }
                line x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(bottom) stroke="#555" {}
                line x1=(LEFT) y1=(bottom) x2=(W - RIGHT) y2=(bottom) stroke="#555" {}
                text x=(at(LEFT + plot_w / 2.0)) y=(H - 6.0) text-anchor="middle" { "base severity" }
                text x="12" y=(at(middle)) text-anchor="middle" transform={ "rotate(-90 12 " (at(middle)) ")" } {
                    "detection rate"
                }
                @if curves.iter().all(|c| c.is_empty()) {
                    text x=(at(LEFT + plot_w / 2.0)) y=(at(middle)) text-anchor="middle" fill="#777" {
                        "no results with base > 0"
                    }
                }
                @for (i, (m, curve)) in models.iter().zip(&curves).enumerate() {
                    @if !curve.is_empty() {
                        @let points: Vec<String> = curve
                            .iter()
                            .map(|p| format!("{:.1},{:.1}", x_of(p.severity), y_of(p.rate)))
                            .collect();
                        polyline fill="none" stroke=(colour(i)) stroke-width="2" points=(points.join(" ")) {
                            title { (m.model) }
                        }
                        @for p in curve.iter() {
                            circle cx=(at(x_of(p.severity))) cy=(at(y_of(p.rate))) r="3" fill=(colour(i)) {
                                title {
                                    (m.model) ": severity " (p.severity) " — " (p.caught) "/" (p.tests)
                                    " caught (" (pct(Some(p.rate))) ")"
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Grouped bars: the mean of each quality dimension (0-10), a bar per model.
pub fn quality(models: &[ModelReport]) -> Markup {
    const LABEL: f64 = 110.0;
    const BAR_AREA: f64 = 400.0;
    const BAR: f64 = 12.0;
    const TOP: f64 = 24.0;
    type Pick = fn(&QualitySummary) -> f64;
    let dims: [(&str, Pick); 6] = [
        ("empathy", |q| q.empathy),
        ("helpfulness", |q| q.helpfulness),
        ("safety", |q| q.safety),
        ("clarity", |q| q.clarity),
        ("overall", |q| q.overall),
        ("weighted", |q| q.weighted),
    ];
    let row = models.len() as f64 * (BAR + 2.0) + 10.0;
    let width = LABEL + BAR_AREA + 60.0;
    let height = TOP + row * dims.len() as f64 + 6.0;
    html! {
        svg.chart data-chart="quality" viewBox={ "0 0 " (width) " " (height) } width=(width)
            height=(height) role="img" aria-label="Mean quality scores per model" {
            @for tick in [0.0, 2.5, 5.0, 7.5, 10.0] {
                @let x = LABEL + tick / 10.0 * BAR_AREA;
                line x1=(x) y1=(TOP - 4.0) x2=(x) y2=(height - 4.0) stroke="#ddd" {}
                text x=(x) y="14" text-anchor="middle" { (tick) }
            }
            @for (r, (name, pick)) in dims.iter().enumerate() {
                @let y0 = TOP + r as f64 * row;
                text x=(LABEL - 6.0) y=(at(y0 + (row - 10.0) / 2.0 + 4.0)) text-anchor="end" { (name) }
                @for (i, m) in models.iter().enumerate() {
                    @let y = y0 + i as f64 * (BAR + 2.0);
                    @match &m.quality {
                        Some(q) => {
                            @let v = pick(q);
                            @let w = (v.clamp(0.0, 10.0) / 10.0 * BAR_AREA).max(1.0);
                            rect.bar x=(LABEL) y=(at(y)) width=(at(w)) height=(BAR) fill=(colour(i)) {
                                title { (m.model) " " (name) ": " (format!("{v:.2}")) }
                            }
                            text x=(at(LABEL + w + 4.0)) y=(at(y + BAR - 2.0)) { (format!("{v:.2}")) }
                        }
                        None => text x=(LABEL + 4.0) y=(at(y + BAR - 2.0)) fill="#777" { "no scored replies" },
                    }
                }
            }
        }
    }
}
