//! The pieces every HTML page of helmbench is built from — the `report`
//! and `compare` pages and `helmbench view`'s: the shared style, the
//! self-contained page shell, the colour-blind-safe palette, the heat-map
//! bands named in words, number cells, and text isolated from the page's
//! direction. All maud: every value is escaped by the template engine.

use maud::{DOCTYPE, Markup, PreEscaped, html};

use crate::report::format::pct;
use crate::report::model::ModelReport;

/// The style every page shares (tables, numbers, notes, breaches, bands,
/// swatches, charts); `helmbench view` serves it before its own.
pub const BASE_CSS: &str = include_str!("base.css");

/// What a standalone page adds: a centred body of readable width, and wide
/// tables that scroll on their own instead of widening the page.
const PAGE_CSS: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2rem auto;max-width:1100px;padding:0 1rem;color:#222;line-height:1.4}
h1{margin-bottom:.2rem}
table{display:block;overflow-x:auto}
.breach,tr.breach td{font-weight:600}
.curves{display:flex;flex-wrap:wrap;gap:1rem}
";

/// One colour per model, reused in every chart and the legend: Okabe and
/// Ito's palette, told apart with any common colour-vision deficiency
/// (their yellow, faint on white, replaced by grey). Every chart also
/// names the model in text, so colour is never the only cue.
const PALETTE: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000", "#999999",
];

/// The palette's colour of the `index`th model.
pub fn colour(index: usize) -> &'static str {
    PALETTE[index % PALETTE.len()]
}

/// Every page's frame: the doctype, the language, the character set, a
/// viewport for phones, the title; `head` and `body` fill the rest.
pub fn shell(title: &str, head: Markup, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                (head)
            }
            body { (body) }
        }
    }
}

/// A self-contained page (`report --format html`, `compare --format
/// html`): its style inline, no script, nothing fetched from anywhere.
pub fn document(title: &str, body: Markup) -> Markup {
    let head = html! {
        meta name="generator" content={ "helmbench " (env!("CARGO_PKG_VERSION")) };
        // Style sheets are constants of this file, not data.
        style { (PreEscaped(BASE_CSS)) (PreEscaped(PAGE_CSS)) }
    };
    shell(title, head, html! { h1 { (title) } (body) })
}

/// A header row.
pub fn header(cells: &[&str]) -> Markup {
    html! { tr { @for h in cells { th { (h) } } } }
}

/// A chart coordinate as the charts print it: one decimal.
pub fn at(v: f64) -> String {
    format!("{v:.1}")
}

/// A swatch of the `index`th model's colour.
pub fn swatch(index: usize) -> Markup {
    html! { span.swatch style={ "background:" (colour(index)) } {} }
}

/// A string from data shown inline (a model id, a reply excerpt, a
/// justification): isolated, so a right-to-left override inside it stays
/// inside.
pub fn inline(text: &str) -> Markup {
    html! { bdi { (text) } }
}

/// A model and its run, `openai/gpt-4o (run 3)`, isolated.
pub fn model_label(m: &ModelReport) -> Markup {
    inline(&format!("{} (run {})", m.model, m.run_id))
}

/// A number cell: right-aligned, or a grey `n/a` when undefined.
pub fn num_cell(value: Option<String>) -> Markup {
    match value {
        Some(v) => html! { td.num { (v) } },
        None => html! { td.num.na { "n/a" } },
    }
}

/// A percentage cell (`79.1 %`), grey `n/a` when undefined.
pub fn pct_cell(value: Option<f64>) -> Markup {
    num_cell(value.map(|v| pct(Some(v))))
}

/// A cell for a value that does not exist (a model without that pillar).
pub fn absent_cell() -> Markup {
    html! { td.na { "—" } }
}

/// A heat-map cell's band, named in the cell so that colour is not the
/// only cue.
#[derive(Clone, Copy)]
pub enum Band {
    Low,
    Mid,
    High,
}

impl Band {
    pub fn of(score: f64) -> Band {
        if score < 0.5 {
            Band::Low
        } else if score < 0.8 {
            Band::Mid
        } else {
            Band::High
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Band::Low => "low",
            Band::Mid => "mid",
            Band::High => "high",
        }
    }
}

/// Orange (0) through a pale middle to blue (1): a diverging scale that
/// people with red-green colour blindness read as well (never red against
/// green).
pub fn heat(score: f64) -> String {
    let s = score.clamp(0.0, 1.0);
    // Paler towards the middle, where the hue changes.
    let (hue, strength) = if s < 0.5 {
        (30.0, (0.5 - s) * 2.0)
    } else {
        (210.0, (s - 0.5) * 2.0)
    };
    format!("hsl({hue:.0},75%,{:.0}%)", 94.0 - 22.0 * strength)
}

/// A score's band as a word on its colour: `HIGH` on blue.
pub fn band_chip(score: f64) -> Markup {
    let band = Band::of(score).word();
    html! { span.band style={ "background:" (heat(score)) } { (band) } }
}

/// What the bands mean, in words and colours.
pub fn band_legend() -> Markup {
    html! {
        (band_chip(0.0)) " below 50 %, " (band_chip(0.65)) " from 50 % to 80 %, "
        (band_chip(1.0)) " from 80 % (orange to blue, readable with red-green colour blindness)"
    }
}
