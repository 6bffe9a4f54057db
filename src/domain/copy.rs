//! What copying a SQLite database into PostgreSQL (`helmbench migrate
//! --from … --to …`, issue 34) reports: per table, the rows on each side
//! and how many the copy wrote; the steps it reports while it works; and a
//! database URL as it may be shown (its password hidden).

/// One table of a copy, in the order copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableCopy {
    pub table: String,
    /// Rows in the source.
    pub source: u64,
    /// Rows this copy wrote into the target: inserted, or (for a derived
    /// table) made equal to the source's.
    pub written: u64,
    /// The source's rows the target holds after the copy: its runs' rows
    /// (copied now or before) and its content found by key. A target that
    /// holds other files' runs has more rows; they are not counted.
    pub target: u64,
    /// Kept by the store from other tables' rows (run totals): copied
    /// last, made equal to the source's rather than only added to.
    pub derived: bool,
}

impl TableCopy {
    /// Whether the target holds every row of the source.
    pub fn matches(&self) -> bool {
        self.source == self.target
    }
}

/// What a copy says while it works, for a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyStep<'a> {
    /// A table begins: its name and its rows in the source.
    Table { table: &'a str, rows: u64 },
    /// `rows` more source rows were handled (one committed batch).
    Rows(u64),
    /// The table is done.
    TableDone,
}

/// `url` with any password replaced by `***`: the user-info part of
/// `scheme://user:password@host…` and a `password=` query parameter.
pub fn redact_password(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let (authority_end, _) = rest
        .char_indices()
        .find(|(_, c)| matches!(c, '/' | '?' | '#'))
        .unwrap_or((rest.len(), ' '));
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rfind('@') {
        Some(at) => {
            let (info, host) = authority.split_at(at);
            match info.find(':') {
                Some(colon) => format!("{}:***{host}", &info[..colon]),
                None => authority.to_string(),
            }
        }
        None => authority.to_string(),
    };
    let tail = match tail.find('?') {
        Some(q) => {
            let (path, query) = tail.split_at(q + 1);
            let params: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => p.to_string(),
                })
                .collect();
            format!("{path}{}", params.join("&"))
        }
        None => tail.to_string(),
    };
    format!("{scheme}{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden_and_the_rest_kept() {
        assert_eq!(
            redact_password("postgres://ann:s3cr@t@127.0.0.1:5432/db"),
            "postgres://ann:***@127.0.0.1:5432/db"
        );
        assert_eq!(
            redact_password("postgres://ann@127.0.0.1:5432/db?sslmode=disable&password=x"),
            "postgres://ann@127.0.0.1:5432/db?sslmode=disable&password=***"
        );
        assert_eq!(
            redact_password("sqlite://results.db"),
            "sqlite://results.db"
        );
        assert_eq!(redact_password("results.db"), "results.db");
    }
}
