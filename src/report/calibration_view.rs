//! The review sections of a report as text and HTML (maud): judge-human agreement
//! per criterion with its intervals, inter-rater agreement, the judges'
//! agreement with each other and the human-corrected score.

use std::io::{self, Write};

use maud::{Markup, html};

use super::calibration::{InterRater, ReviewSections};
use super::format::pct;
use super::html::parts::{header, model_label};
use super::model::ModelReport;
use crate::scoring::agreement::Confusion;

fn ci(v: Option<[f64; 2]>) -> String {
    v.map_or_else(|| "n/a".into(), |[lo, hi]| format!("{lo:.2}–{hi:.2}"))
}

fn kappa(v: Option<f64>) -> String {
    v.map_or_else(|| "undefined".into(), |k| format!("{k:.2}"))
}

/// The confusion matrix on one line: `SAFE→SAFE 3, SAFE→UNSAFE 1` (judge→human).
fn confusion_line(c: &Confusion) -> String {
    let mut cells = Vec::new();
    for (i, row) in c.counts.iter().enumerate() {
        for (j, n) in row.iter().enumerate() {
            if *n > 0 {
                cells.push(format!("{}→{} {n}", c.classes[i], c.classes[j]));
            }
        }
    }
    if cells.is_empty() {
        "none".into()
    } else {
        cells.join(", ")
    }
}

fn inter_rater_text(ir: Option<&InterRater>) -> String {
    ir.map_or_else(
        || "n/a (one rater)".into(),
        |ir| {
            let name = if ir.method == "cohen_kappa" {
                "κ"
            } else {
                "α"
            };
            let fleiss = ir
                .fleiss_kappa
                .map(|f| format!(", Fleiss κ {f:.2}"))
                .unwrap_or_default();
            match ir.value {
                Some(v) => format!("{name} {v:.2} ({} items{fleiss})", ir.items),
                None => format!("{name} undefined ({} items)", ir.items),
            }
        },
    )
}

/// One rendered section.
struct Section {
    title: String,
    /// The HTML table's `data-table`.
    id: &'static str,
    header: &'static [&'static str],
    /// Columns (after the header's first, in HTML the model) that are numbers.
    numeric: &'static [usize],
    rows: Vec<Vec<String>>,
}

/// The sections of one run's review, in the order shown.
fn sections(s: &ReviewSections) -> Vec<Section> {
    let mut out = Vec::new();
    if let Some(c) = &s.calibration {
        let rows = c
            .criteria
            .iter()
            .chain(std::iter::once(&c.overall))
            .map(|r| {
                vec![
                    r.scenario.clone(),
                    if r.scenario == "all" {
                        "all (pass/fail)".into()
                    } else {
                        r.criterion.clone()
                    },
                    r.items.to_string(),
                    pct(r.raw_agreement),
                    kappa(r.kappa),
                    ci(r.kappa_ci),
                    r.human_ties.to_string(),
                    inter_rater_text(r.inter_rater.as_ref()),
                    confusion_line(&r.confusion),
                    match (&r.flag, &r.kappa_undefined) {
                        (Some(flag), _) => flag.clone(),
                        (None, Some(why)) => format!("kappa undefined: {why}"),
                        (None, None) => String::new(),
                    },
                ]
            })
            .collect();
        out.push(Section {
            title: format!(
                "judge calibration: {} labelled items, {} labels from {} rater(s) ({}); kappa below {} is flagged; intervals: {} bootstrap resamples ({}, seed {})",
                c.labelled_items,
                c.labels,
                c.raters.len(),
                c.raters.join(", "),
                c.reliable_kappa,
                c.bootstrap.resamples,
                c.bootstrap.generator,
                c.bootstrap.seed
            ),
            id: "calibration",
            header: &[
                "scenario",
                "criterion",
                "items",
                "agreement",
                "kappa",
                "95 % CI",
                "human ties",
                "humans agree",
                "judge→human",
                "flag",
            ],
            numeric: &[2, 3, 4, 5, 6],
            rows,
        });
        let rows: Vec<Vec<String>> = c
            .criteria
            .iter()
            .flat_map(|r| {
                r.judges.iter().map(|j| {
                    vec![
                        r.scenario.clone(),
                        r.criterion.clone(),
                        j.judge.clone(),
                        j.items.to_string(),
                        pct(j.raw_agreement),
                        kappa(j.kappa),
                    ]
                })
            })
            .collect();
        if !rows.is_empty() {
            out.push(Section {
                title: "each judge against the human consensus".into(),
                id: "judges-vs-humans",
                header: &[
                    "scenario",
                    "criterion",
                    "judge",
                    "items",
                    "agreement",
                    "kappa",
                ],
                numeric: &[3, 4, 5],
                rows,
            });
        }
    }
    if let Some(ja) = &s.judge_agreement {
        let rows = ja
            .iter()
            .flat_map(|a| {
                a.pairs.iter().map(|p| {
                    vec![
                        a.scenario.clone(),
                        a.criterion.clone(),
                        p.judge_a.clone(),
                        p.judge_b.clone(),
                        p.items.to_string(),
                        pct(p.raw_agreement),
                        kappa(p.kappa),
                    ]
                })
            })
            .collect();
        out.push(Section {
            title: "judge agreement (pairwise Cohen's kappa)".into(),
            id: "judge-agreement",
            header: &[
                "scenario",
                "criterion",
                "judge",
                "judge",
                "items",
                "agreement",
                "kappa",
            ],
            numeric: &[4, 5, 6],
            rows,
        });
    }
    if let Some(h) = &s.human_corrected {
        let mut rows: Vec<Vec<String>> = h
            .behaviours
            .iter()
            .map(|b| vec![b.code.clone(), pct(b.judged), pct(b.human)])
            .collect();
        rows.push(vec![
            "overall".into(),
            format!("{} ({} passed)", pct(h.judged_score), h.judged_passed),
            format!("{} ({} passed)", pct(h.human_score), h.human_passed),
        ]);
        out.push(Section {
            title: format!(
                "human-corrected score (report --human): {} labelled verdicts used ({} changed pass/fail), {} tied kept the judge's, {} test cases changed",
                h.overridden, h.changed, h.ties_kept_judge, h.test_cases_changed
            ),
            id: "human-corrected",
            header: &["behaviour", "judged", "human-corrected"],
            numeric: &[1, 2],
            rows,
        });
    }
    out
}

/// The table report's review sections (nothing without labels or a panel).
pub fn write_text(o: &mut dyn Write, s: &ReviewSections) -> io::Result<()> {
    for sec in sections(s) {
        let mut t = super::terminal::table(sec.header);
        for r in sec.rows {
            t.add_row(r);
        }
        writeln!(o, "{}:\n{}", sec.title, super::terminal::fitted(t))?;
    }
    Ok(())
}

/// The HTML page's review sections, every run's rows in one table per
/// section (nothing without labels or a panel).
pub fn html(models: &[ModelReport]) -> Markup {
    // Each section once, in the order first met, with every run's rows.
    type Rows<'a> = Vec<(&'a ModelReport, Vec<String>)>;
    let mut tables: Vec<(Section, Rows)> = Vec::new();
    for m in models {
        for mut sec in sections(&m.review) {
            let rows = std::mem::take(&mut sec.rows).into_iter().map(|r| (m, r));
            match tables.iter_mut().find(|(t, _)| t.id == sec.id) {
                Some((_, all)) => all.extend(rows),
                None => tables.push((sec, rows.collect())),
            }
        }
    }
    html! {
        @for (sec, rows) in &tables {
            h2 { (heading(&sec.title)) }
            table data-table=(sec.id) {
                (header(&[&["Model"][..], sec.header].concat()))
                @for (m, cells) in rows {
                    tr {
                        td { (model_label(m)) }
                        @for (i, c) in cells.iter().enumerate() {
                            td class=[sec.numeric.contains(&i).then_some("num")] { (c) }
                        }
                    }
                }
            }
        }
    }
}

/// A section's heading: its title up to the first colon, capitalised.
fn heading(title: &str) -> String {
    let mut heading = title.split(':').next().unwrap_or_default().to_string();
    if let Some(first) = heading.get_mut(0..1) {
        first.make_ascii_uppercase();
    }
    heading
}
