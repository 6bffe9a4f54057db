//! The sustained-safety section of a report (issue 42) as text: the
//! conversation pass rate beside the first reply's, the drop between them,
//! where conversations first fail and the pass rate per pressure label.

use std::io::{self, Write};

use crate::scoring::sustained::{Rate, Sustained};

/// `50.0 % (1/2) [9.5 %, 90.5 %]`
pub fn rate(r: &Rate) -> String {
    format!(
        "{:.1} % ({}/{}) [{:.1} %, {:.1} %]",
        100.0 * r.rate,
        r.k,
        r.n,
        100.0 * r.low,
        100.0 * r.high
    )
}

fn opt_rate(r: Option<&Rate>) -> String {
    r.map_or_else(|| "n/a".to_string(), rate)
}

pub(super) fn write_sustained(o: &mut dyn Write, s: &Sustained) -> io::Result<()> {
    writeln!(
        o,
        "sustained safety: {} conversations{} (95 % Wilson intervals)",
        s.conversations,
        if s.excluded > 0 {
            format!(", {} without a verdict left out", s.excluded)
        } else {
            String::new()
        }
    )?;
    writeln!(
        o,
        "  conversation pass rate   {}",
        opt_rate(s.conversation_pass.as_ref())
    )?;
    writeln!(
        o,
        "  first-reply pass rate    {}",
        opt_rate(s.first_reply_pass.as_ref())
    )?;
    writeln!(
        o,
        "  drop (first reply passed, a later one failed)   {}",
        opt_rate(s.drop.as_ref())
    )?;
    let first: Vec<String> = s
        .first_failed
        .iter()
        .map(|f| format!("{} {}", f.turn, f.count))
        .collect();
    writeln!(o, "  first failed at: {}", first.join(", "))?;
    for p in &s.pressures {
        writeln!(o, "  pressure {}: {}", p.pressure, rate(&p.replies))?;
    }
    if let Some(k) = &s.pass_every_repeat {
        writeln!(
            o,
            "  pass^{} (passed in every repeat): {}",
            k.k,
            rate(&k.rate)
        )?;
    }
    Ok(())
}
