//! The layout guard: no import cycle between the top-level modules of
//! `src/`, no circle of files inside any of them, no source file over
//! 1,000 lines, a domain that uses no crate but serde, and a store that
//! hands others only domain types (outside it, only `Store`, `StoreError`
//! and its constants are named). Read from the source text (comments,
//! strings and `#[cfg(test)]` code left out), so a new `use` that points
//! back up fails here with the path that closes the circle.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// A module path below the crate root: `["store", "reads"]`.
type ModPath = Vec<String>;

struct SourceFile {
    module: ModPath,
    /// Whether this file is a folder's `mod.rs` (or `lib.rs`).
    is_dir_module: bool,
    /// The code with comments, string literals and test-only items blanked.
    code: String,
    lines: usize,
}

pub(crate) fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

pub(crate) fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("src/main.rs") {
            out.push(path);
        }
    }
}

fn module_of(rel: &Path) -> (ModPath, bool) {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    match stem {
        "mod" => (parts, true),
        "lib" | "main" if parts.is_empty() => (parts, true),
        _ => {
            parts.push(stem.to_string());
            (parts, false)
        }
    }
}

/// Blanks comments, string and char literals (keeping line breaks).
fn strip_comments_and_strings(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i] as char;
        if s[i..].starts_with("//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if s[i..].starts_with("/*") {
            let mut depth = 0;
            while i < b.len() {
                if s[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if s[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == b'\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if c == 'r'
            && (s[i..].starts_with("r\"") || s[i..].starts_with("r#"))
            && (i == 0 || !(b[i - 1] as char).is_alphanumeric() && b[i - 1] != b'_')
        {
            let hashes = s[i + 1..].bytes().take_while(|&x| x == b'#').count();
            if s[i + 1 + hashes..].starts_with('"') {
                let close = format!("\"{}", "#".repeat(hashes));
                let start = i + 2 + hashes;
                let end = s[start..]
                    .find(&close)
                    .map_or(b.len(), |e| start + e + close.len());
                out.push_str("\"\"");
                out.extend(s[i..end].chars().filter(|&ch| ch == '\n'));
                i = end;
            } else {
                out.push(c);
                i += 1;
            }
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                if i < b.len() && b[i] == b'\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('a', '\n', '\u{..}'); a lifetime stays.
            let rest = &s[i + 1..];
            let lit_end = if rest.starts_with('\\') {
                rest.find('\'').map(|e| e + 1)
            } else {
                rest.char_indices()
                    .nth(1)
                    .filter(|(_, ch)| *ch == '\'')
                    .map(|(e, _)| e + 1)
            };
            match lit_end {
                Some(e) => {
                    out.push_str("' '");
                    i += 1 + e;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += c.len_utf8();
            // Keep multi-byte characters whole.
            while i < b.len() && !s.is_char_boundary(i) {
                i += 1;
            }
            if c.len_utf8() > 1 {
                out.pop();
                out.push(' ');
            }
        }
    }
    out
}

/// Removes every item behind `#[cfg(test)]` (a `mod tests;`, a `mod tests
/// { .. }`, an `impl .. { .. }`, a `fn`): test code may import anything.
fn strip_test_items(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at..];
        let semi = after.find(';');
        let brace = after.find('{');
        let end = match (semi, brace) {
            (Some(sc), Some(br)) if sc < br => sc + 1,
            (_, Some(br)) => {
                let mut depth = 0;
                let mut end = after.len();
                for (k, ch) in after[br..].char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = br + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (Some(sc), None) => sc + 1,
            (None, None) => after.len(),
        };
        out.extend(after[..end].chars().filter(|&c| c == '\n'));
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

fn load() -> Vec<SourceFile> {
    let root = src_dir();
    let mut paths = Vec::new();
    walk(&root, &mut paths);
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            let (module, is_dir_module) = module_of(p.strip_prefix(&root).unwrap());
            SourceFile {
                module,
                is_dir_module,
                code: strip_test_items(&strip_comments_and_strings(&text)),
                lines: text.lines().count(),
            }
        })
        .collect()
}

pub(crate) fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Parses one path or `use` group starting at `s` (after `prefix`) into
/// `out`, as lists of segments; returns the bytes read.
fn parse_tree(s: &str, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut segs = prefix.to_vec();
    let mut i = 0;
    let b = s.as_bytes();
    loop {
        while i < b.len() && (b[i] as char).is_whitespace() {
            i += 1;
        }
        if i < b.len() && b[i] == b'{' {
            i += 1;
            loop {
                while i < b.len() && (b[i] as char).is_whitespace() {
                    i += 1;
                }
                if i >= b.len() {
                    return i;
                }
                if b[i] == b'}' {
                    return i + 1;
                }
                if b[i] == b',' {
                    i += 1;
                    continue;
                }
                let n = parse_tree(&s[i..], &segs, out);
                if n == 0 {
                    i += 1;
                }
                i += n;
            }
        }
        let start = i;
        while i < b.len() && (is_ident(b[i] as char) || b[i] == b'*') {
            i += 1;
        }
        if i == start {
            out.push(segs);
            return i;
        }
        segs.push(s[start..i].to_string());
        let mut j = i;
        while j < b.len() && (b[j] as char).is_whitespace() {
            j += 1;
        }
        if s[j..].starts_with("::") {
            i = j + 2;
        } else {
            out.push(segs);
            return i;
        }
    }
}

/// Every path the code names from `crate::`, `super::` or `self::`, with
/// `use` groups expanded (`crate::{a::B, c}` gives `crate::a::B` and
/// `crate::c`), as lists of segments starting with that keyword.
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for kw in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(k) = code[from..].find(kw) {
            let at = from + k;
            from = at + kw.len();
            if at > 0 && is_ident(code[..at].chars().next_back().unwrap()) {
                continue;
            }
            let head = kw.trim_end_matches("::").to_string();
            let mut segs = vec![head];
            // `super::super::x`
            let mut rest = &code[from..];
            while rest.starts_with("super::") {
                segs.push("super".into());
                rest = &rest["super::".len()..];
            }
            parse_tree(rest, &segs, &mut out);
        }
    }
    out
}

struct Crate {
    files: Vec<SourceFile>,
    /// Which file defines a module.
    by_module: HashMap<ModPath, usize>,
    /// `pub use child::Item` in a module: the child module that holds it.
    reexports: HashMap<(ModPath, String), ModPath>,
}

impl Crate {
    fn new() -> Crate {
        let files = load();
        let by_module = files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.module.clone(), i))
            .collect();
        let mut c = Crate {
            files,
            by_module,
            reexports: HashMap::new(),
        };
        for i in 0..c.files.len() {
            let module = c.files[i].module.clone();
            for line in c.files[i].code.clone().split(';') {
                let line = line.trim();
                let Some(tree) = line
                    .strip_prefix("pub use ")
                    .or_else(|| line.strip_prefix("pub(crate) use "))
                else {
                    continue;
                };
                let tree = tree.trim_start_matches("self::");
                let mut expanded = Vec::new();
                let first = tree.split("::").next().unwrap_or("").to_string();
                let mut child = module.clone();
                child.push(first.clone());
                if !c.by_module.contains_key(&child) {
                    continue;
                }
                // Expand `child::{A, B}` with the parser above.
                let fake = format!("self::{tree}");
                expanded.extend(paths_in(&fake));
                for p in expanded {
                    let item = p.last().cloned().unwrap_or_default();
                    let item = item.split(" as ").next().unwrap_or("").to_string();
                    let mut holder = module.clone();
                    holder.extend(p[1..p.len() - 1].iter().cloned());
                    c.reexports.insert((module.clone(), item), holder);
                }
            }
        }
        c
    }

    /// The module a path from `file` lands in: the deepest module named,
    /// or the child module a `pub use` re-export takes the item from.
    fn resolve(&self, file: &SourceFile, path: &[String]) -> Option<ModPath> {
        let mut cur: ModPath = match path[0].as_str() {
            "crate" => vec![],
            "self" => file.module.clone(),
            "super" => {
                let mut m = file.module.clone();
                m.pop()?;
                m
            }
            _ => return None,
        };
        let mut rest = &path[1..];
        while rest.first().is_some_and(|s| s == "super") {
            cur.pop()?;
            rest = &rest[1..];
        }
        for seg in rest {
            let mut next = cur.clone();
            next.push(seg.clone());
            if self.by_module.contains_key(&next) {
                cur = next;
                continue;
            }
            // An item: follow a re-export down to the file that holds it.
            let mut at = cur.clone();
            while let Some(holder) = self.reexports.get(&(at.clone(), seg.clone())) {
                if *holder == at {
                    break;
                }
                at = holder.clone();
            }
            return Some(at);
        }
        Some(cur)
    }

    /// Edges between files: (from, to) as module paths, with the path that
    /// makes each (for the failure message).
    fn edges(&self) -> BTreeMap<(ModPath, ModPath), String> {
        let mut edges = BTreeMap::new();
        for f in &self.files {
            let mut add = |to: ModPath, why: String| {
                if to != f.module && self.by_module.contains_key(&to) {
                    edges.entry((f.module.clone(), to)).or_insert(why);
                }
            };
            for p in paths_in(&f.code) {
                if let Some(to) = self.resolve(f, &p) {
                    add(to, p.join("::"));
                }
            }
            // Relative paths to a child module (`classify::parse(..)`), but
            // not its declaration or a re-export of it (the facade).
            if f.is_dir_module {
                let children: BTreeSet<String> = self
                    .by_module
                    .keys()
                    .filter(|m| m.len() == f.module.len() + 1 && m.starts_with(&f.module))
                    .map(|m| m.last().unwrap().clone())
                    .collect();
                for stmt in f.code.split([';', '{', '}']) {
                    let s = stmt.trim();
                    if s.starts_with("pub use ")
                        || s.starts_with("pub(crate) use ")
                        || s.starts_with("mod ")
                        || s.starts_with("pub mod ")
                        || s.starts_with("pub(crate) mod ")
                    {
                        continue;
                    }
                    for child in &children {
                        let pat = format!("{child}::");
                        let mut from = 0;
                        while let Some(k) = s[from..].find(&pat) {
                            let at = from + k;
                            from = at + pat.len();
                            let before = s[..at].chars().next_back();
                            if before.is_some_and(|c| is_ident(c) || c == ':') {
                                continue;
                            }
                            let mut to = f.module.clone();
                            to.push(child.clone());
                            add(to, format!("{child}::"));
                        }
                    }
                }
            }
        }
        edges
    }
}

/// A cycle in `graph`, as the nodes along it, if there is one.
fn find_cycle<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Option<Vec<N>> {
    fn visit<N: Ord + Clone>(
        n: &N,
        graph: &BTreeMap<N, BTreeSet<N>>,
        state: &mut BTreeMap<N, u8>,
        stack: &mut Vec<N>,
    ) -> Option<Vec<N>> {
        state.insert(n.clone(), 1);
        stack.push(n.clone());
        for m in graph.get(n).into_iter().flatten() {
            match state.get(m).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|x| x == m).unwrap();
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(m.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(m, graph, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if state.get(n).copied().unwrap_or(0) == 0 {
            let mut stack = Vec::new();
            if let Some(c) = visit(n, graph, &mut state, &mut stack) {
                return Some(c);
            }
        }
    }
    None
}

fn describe(cycle: &[ModPath], edges: &BTreeMap<(ModPath, ModPath), String>, top: bool) -> String {
    cycle
        .windows(2)
        .map(|w| {
            let why = edges
                .iter()
                .find(|((a, b), _)| {
                    if top {
                        a.first() == w[0].first() && b.first() == w[1].first()
                    } else {
                        a == &w[0] && b == &w[1]
                    }
                })
                .map(|((a, _), why)| format!("{} uses {why}", a.join("::")))
                .unwrap_or_default();
            format!("  {} -> {}   ({why})", w[0].join("::"), w[1].join("::"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn no_import_cycle_between_top_level_modules() {
    let c = Crate::new();
    let edges = c.edges();
    let mut graph: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        let (Some(ta), Some(tb)) = (a.first(), b.first()) else {
            continue;
        };
        if ta != tb {
            graph
                .entry(vec![ta.clone()])
                .or_default()
                .insert(vec![tb.clone()]);
        }
    }
    // The guard must see the layers it guards.
    assert!(graph.len() >= 8, "too few modules read: {graph:?}");
    assert!(
        graph[&vec!["cli".to_string()]].contains(&vec!["run".to_string()]),
        "the path reader missed cli -> run"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "import cycle between top-level modules:\n{}",
            describe(&cycle, &edges, true)
        );
    }
    // The domain is the leaf every module may use: it uses none of them.
    if let Some(out) = graph.get(&vec!["domain".to_string()]) {
        panic!("domain imports {out:?}: it must stay a leaf");
    }
}

#[test]
fn no_circle_of_files_inside_a_module() {
    let c = Crate::new();
    let edges = c.edges();
    let mut graph: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        if a.first() == b.first() && !a.is_empty() {
            graph.entry(a.clone()).or_default().insert(b.clone());
        }
    }
    // Every circle, one at a time: break the first found and look again.
    let mut found = Vec::new();
    while let Some(cycle) = find_cycle(&graph) {
        found.push(describe(&cycle, &edges, false));
        let (a, b) = (&cycle[cycle.len() - 2], &cycle[cycle.len() - 1]);
        graph.get_mut(a).unwrap().remove(b);
    }
    assert!(
        found.is_empty(),
        "files that import each other in a circle:\n{}",
        found.join("\n\n")
    );
}

#[test]
fn the_cycle_finder_finds_a_planted_cycle() {
    // The guard itself: a circle a -> b -> c -> a is found, a chain is not.
    let g = |pairs: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in pairs {
            g.entry(a.to_string()).or_default().insert(b.to_string());
        }
        g
    };
    assert!(find_cycle(&g(&[("a", "b"), ("b", "c"), ("c", "a")])).is_some());
    assert!(find_cycle(&g(&[("a", "b"), ("b", "c"), ("a", "c")])).is_none());
    let code = strip_test_items(&strip_comments_and_strings(
        "use crate::{store::{A, b::C}, run};\n// crate::report::X\nlet s = \"crate::view\";\n#[cfg(test)]\nmod tests { use crate::cli; }\n",
    ));
    let mut p: Vec<String> = paths_in(&code).iter().map(|p| p.join("::")).collect();
    p.sort();
    assert_eq!(p, ["crate::run", "crate::store::A", "crate::store::b::C"]);
}

#[test]
fn no_source_file_over_1000_lines() {
    let c = Crate::new();
    let big: Vec<String> = c
        .files
        .iter()
        .filter(|f| f.lines > 1000)
        .map(|f| format!("{} ({} lines)", f.module.join("/"), f.lines))
        .collect();
    assert!(big.is_empty(), "split these by concept: {big:?}");
}

/// Every `.get(N)` / `.try_get(N)` / `.get::<T, _>(N)` in `code` (a column
/// read by position), as `line: text`.
fn positional_reads(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let mut rest = line;
        let next = |s: &str| {
            [s.find(".get"), s.find(".try_get")]
                .into_iter()
                .flatten()
                .min()
        };
        while let Some(at) = next(rest) {
            let after = &rest[at + 1..];
            let after = after
                .strip_prefix("try_get")
                .or_else(|| after.strip_prefix("get"))
                .unwrap_or(after);
            // Skip a turbofish `::<T, _>` (nested brackets included).
            let mut args = after;
            if let Some(t) = after.strip_prefix("::<") {
                let mut depth = 1;
                let end = t.char_indices().find_map(|(k, ch)| {
                    match ch {
                        '<' => depth += 1,
                        '>' => depth -= 1,
                        _ => {}
                    }
                    (depth == 0).then_some(k + 1)
                });
                args = end.map_or("", |e| &t[e..]);
            }
            if let Some(a) = args.strip_prefix('(')
                && a.trim_start().starts_with(|c: char| c.is_ascii_digit())
            {
                found.push(format!("{}: {}", n + 1, line.trim()));
            }
            rest = &rest[at + 1..];
        }
        // A tuple decoded from a row is read by position too.
        if line.contains("query_as::<_, (") {
            found.push(format!("{}: {}", n + 1, line.trim()));
        }
    }
    found
}

/// The store decodes every row by column name (a `FromRow` struct, or
/// `try_get("column")`): a read by position breaks silently when a column
/// is added to or moved in a SELECT.
#[test]
fn the_store_reads_no_column_by_position() {
    let c = Crate::new();
    let found: Vec<String> = c
        .files
        .iter()
        .filter(|f| f.module.first().is_some_and(|m| m == "store"))
        .flat_map(|f| {
            positional_reads(&f.code)
                .into_iter()
                .map(|l| format!("src/{}.rs:{l}", f.module.join("/")))
        })
        .collect();
    assert!(
        found.is_empty(),
        "decode these by column name:\n{}",
        found.join("\n")
    );
    // The guard itself: each positional form is found, a read by name is not.
    let planted = "let a: i64 = row.get(0);\nlet b = r.try_get::<Option<String>, _>( 3)?;\nlet c = row.get::<i64, _>(1);\nlet d = r.try_get(\"\")?;\nlet e = sqlx::query_as::<_, (i64, bool)>(\"\");\n";
    let hits = positional_reads(planted);
    assert_eq!(
        hits.iter().map(|h| &h[..2]).collect::<Vec<_>>(),
        ["1:", "2:", "3:", "5:"],
        "{hits:?}"
    );
}

/// What `code` names through a module called `store` that only the store
/// may name: every path from `store::` on (`crate::store::X`,
/// `super::store::X`, or `store::X` after a `use crate::store`), with `use`
/// groups expanded, whose next name is not the handle (`Store`), its error
/// (`StoreError`) or a constant (`DEFAULT_DATABASE_URL`); and the store
/// renamed (`crate::store as db`), which would hide the rest.
fn store_names_refused(code: &str) -> Vec<String> {
    let allowed = |name: &str| {
        matches!(name, "Store" | "StoreError")
            || (name.starts_with(|c: char| c.is_ascii_uppercase())
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
    };
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(k) = code[from..].find("store") {
        let at = from + k;
        from = at + "store".len();
        if at > 0 && is_ident(code[..at].chars().next_back().unwrap()) {
            continue;
        }
        let rest = &code[from..];
        if let Some(path) = rest.strip_prefix("::") {
            let mut paths = Vec::new();
            parse_tree(path, &["store".to_string()], &mut paths);
            found.extend(
                paths
                    .into_iter()
                    .filter(|p| !p.get(1).is_some_and(|name| allowed(name)))
                    .map(|p| p.join("::")),
            );
        } else if code[..at].ends_with("::") && rest.trim_start().starts_with("as ") {
            found.push("store as".to_string());
        }
    }
    found
}

/// The store owns the SQL and maps rows to the domain's types; it defines
/// no type for others. Outside `src/store`, a path through it names only
/// `Store`, `StoreError` or a constant: a record the store reads or writes
/// for another module lives in `src/domain`.
#[test]
fn outside_the_store_a_path_through_it_names_only_its_handle_error_and_constants() {
    let c = Crate::new();
    let found: Vec<String> = c
        .files
        .iter()
        .filter(|f| f.module.first().is_none_or(|m| m != "store"))
        .flat_map(|f| {
            store_names_refused(&f.code)
                .into_iter()
                .map(|p| format!("src/{}.rs: {p}", f.module.join("/")))
        })
        .collect();
    assert!(
        found.is_empty(),
        "move these types to src/domain (the store maps its rows to them):\n{}",
        found.join("\n")
    );
    // The guard itself: each way of naming a store type is found; the
    // handle, its error and constants, comments, strings, test code and
    // other names ending in `store` are not.
    let planted = strip_test_items(&strip_comments_and_strings(
        "use crate::store::{Store, Spend, runs::Owner};\nuse crate::store;\nuse super::store as db;\n\
         fn f() { store::Reuse::default(); crate::store::StoreError::NotFound(m); }\n\
         const U: &str = crate::store::DEFAULT_DATABASE_URL;\nlet s = super::store::Store::open(u);\n\
         // crate::store::Hidden\nlet q = \"store::Quoted\";\nmy_store::Thing::new();\nrestore::x();\n\
         #[cfg(test)]\nmod tests { use crate::store::Detail; }\n",
    ));
    assert_eq!(
        store_names_refused(&planted),
        [
            "store::Spend",
            "store::runs::Owner",
            "store as",
            "store::Reuse::default"
        ]
    );
}

/// The domain is a leaf among crates too: besides the standard library it
/// uses serde and serde_json, never a dependency that would tie it to a
/// database, the network or the terminal (`sqlx`, `reqwest`, `tokio`...).
#[test]
fn the_domain_uses_no_crate_but_serde() {
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap();
    let dependencies: Vec<String> = manifest
        .split("\n[")
        .find(|section| section.starts_with("dependencies]"))
        .expect("a [dependencies] section")
        .lines()
        .skip(1)
        .filter_map(|l| {
            l.split_once('=')
                .map(|(name, _)| name.trim().replace('-', "_"))
        })
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .collect();
    assert!(dependencies.iter().any(|d| d == "sqlx"), "{dependencies:?}");
    let names_crate = |code: &str, name: &str| {
        let pat = format!("{name}::");
        code.match_indices(&pat).any(|(at, _)| {
            !code[..at]
                .chars()
                .next_back()
                .is_some_and(|c| is_ident(c) || c == ':')
        })
    };
    let c = Crate::new();
    let found: Vec<String> = c
        .files
        .iter()
        .filter(|f| f.module.first().is_some_and(|m| m == "domain"))
        .flat_map(|f| {
            dependencies
                .iter()
                .filter(|d| !matches!(d.as_str(), "serde" | "serde_json"))
                .filter(|d| names_crate(&f.code, d))
                .map(|d| format!("src/{}.rs uses {d}", f.module.join("/")))
        })
        .collect();
    assert!(found.is_empty(), "{}", found.join("\n"));
    // The guard itself: a planted `sqlx::` is found, `serde::` and a path
    // ending in `sqlx` are not.
    let planted = "use serde::Serialize;\nimpl sqlx::FromRow for X {}\nlet a = my_sqlx::y();";
    assert!(names_crate(planted, "sqlx") && !names_crate(planted, "serde_json"));
    assert!(!names_crate("let a = my_sqlx::y(); b::sqlx::z();", "sqlx"));
}
