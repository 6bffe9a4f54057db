//! The book and the README (issue 44) cannot drift from the binary: the
//! command reference in docs/src/reference/ is each command's `--help` as
//! the clap definitions render it (regenerate with `HELMBENCH_BLESS=1 cargo
//! test --test it docs::`); every relative link and `#anchor` resolves under
//! mdBook's rules; every book page is in SUMMARY.md; every `helmbench …`
//! command line in a shell block is one the argument parser accepts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};

use crate::support::repo_root;

const BLESS: &str = "HELMBENCH_BLESS=1 cargo test --test it docs::";

/// README.md and every markdown file of docs/ (not the built book).
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if !p.ends_with("book") {
                    walk(&p, out);
                }
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let root = repo_root();
    let mut out = vec![root.join("README.md")];
    walk(&root.join("docs"), &mut out);
    out.sort();
    out
}

/// A page's text as mdBook sees it: `{{#include path}}` replaced by the
/// file it names (relative to the page).
fn page_text(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = String::new();
    for line in text.split_inclusive('\n') {
        match line.trim().strip_prefix("{{#include ") {
            Some(rest) => {
                let target = path
                    .parent()
                    .unwrap()
                    .join(rest.trim_end_matches("}}").trim());
                let included = std::fs::read_to_string(&target).unwrap_or_else(|e| {
                    panic!(
                        "{}: {{{{#include}}}} of {}: {e}",
                        path.display(),
                        target.display()
                    )
                });
                out.push_str(&included);
            }
            None => out.push_str(line),
        }
    }
    out
}

/// mdBook's id for a heading: lower case; alphanumerics, `_` and `-` kept,
/// whitespace to `-`, everything else dropped; a repeated id gets `-1`, `-2`.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut heading: Option<String> = None;
    for event in Parser::new(text) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let h = heading.take().unwrap();
                let id: String = h
                    .chars()
                    .filter_map(|c| {
                        if c.is_alphanumeric() || c == '_' || c == '-' {
                            Some(c.to_ascii_lowercase())
                        } else if c.is_whitespace() {
                            Some('-')
                        } else {
                            None
                        }
                    })
                    .collect();
                let n = counts.entry(id.clone()).or_default();
                ids.insert(if *n == 0 { id } else { format!("{id}-{n}") });
                *n += 1;
            }
            _ => {}
        }
    }
    ids
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

#[test]
fn links_and_anchors_resolve() {
    let root = repo_root();
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = page_text(&file);
        for (event, range) in Parser::new(&text).into_offset_iter() {
            let dest = match event {
                Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => dest_url,
                _ => continue,
            };
            if dest.contains("://") || dest.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let at = format!(
                "{}:{}",
                file.strip_prefix(&root).unwrap().display(),
                line_of(&text, range.start)
            );
            let (path, anchor) = dest.split_once('#').unwrap_or((&dest, ""));
            let target = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !target.exists() {
                broken.push(format!("{at}: {dest}: no such file"));
                continue;
            }
            if anchor.is_empty() {
                continue;
            }
            if target.extension().is_none_or(|x| x != "md") {
                broken.push(format!(
                    "{at}: {dest}: an anchor into a file that is not markdown"
                ));
            } else if !anchors(&page_text(&target)).contains(anchor) {
                broken.push(format!(
                    "{at}: {dest}: no heading with id `{anchor}` in {} (ids: {:?})",
                    target.strip_prefix(&root).unwrap_or(&target).display(),
                    anchors(&page_text(&target))
                ));
            }
        }
    }
    assert!(
        checked > 30,
        "only {checked} links found: is the parser reading the files?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_book_page_is_in_the_summary() {
    let src = repo_root().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).unwrap();
    let mut listed = BTreeSet::new();
    for event in Parser::new(&summary) {
        if let Event::Start(Tag::Link { dest_url, .. }) = event {
            assert!(
                src.join(&*dest_url).is_file(),
                "SUMMARY.md: {dest_url} is missing"
            );
            listed.insert(src.join(&*dest_url));
        }
    }
    let missing: Vec<String> = markdown_files()
        .into_iter()
        .filter(|p| p.starts_with(&src) && !p.ends_with("SUMMARY.md") && !listed.contains(p))
        .map(|p| p.strip_prefix(&src).unwrap().display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "pages mdBook would leave out (add them to docs/src/SUMMARY.md): {missing:?}"
    );
}

/// A shell line cut into commands: words (quotes and backslashes
/// undone), split at `;`, `|`, `&&`, `&`, `(`, `)`, `<(`, `$(`; a `#`
/// word ends the line; redirections and their targets are dropped.
fn shell_commands(line: &str) -> Vec<Vec<String>> {
    let mut commands = vec![Vec::new()];
    let mut word: Option<String> = None;
    let mut skip_next = false;
    let mut chars = line.chars().peekable();
    let end_word = |word: &mut Option<String>, commands: &mut Vec<Vec<String>>, skip: &mut bool| {
        if let Some(w) = word.take() {
            if *skip {
                *skip = false;
            } else {
                commands.last_mut().unwrap().push(w);
            }
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    w.push(c);
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => w.extend(chars.next()),
                        c => w.push(c),
                    }
                }
            }
            '\\' => word.get_or_insert_with(String::new).extend(chars.next()),
            '#' if word.is_none() => break,
            c if c.is_whitespace() => end_word(&mut word, &mut commands, &mut skip_next),
            ';' | '|' | '&' | '(' | ')' => {
                end_word(&mut word, &mut commands, &mut skip_next);
                commands.push(Vec::new());
            }
            '$' if chars.peek() == Some(&'(') => {
                end_word(&mut word, &mut commands, &mut skip_next);
            }
            '<' | '>' => {
                // `2>` and `2>&1`: the digit belongs to the redirection.
                if word
                    .as_deref()
                    .is_some_and(|w| w.chars().all(|c| c.is_ascii_digit()))
                {
                    word = None;
                }
                end_word(&mut word, &mut commands, &mut skip_next);
                if c == '<' && chars.peek() == Some(&'(') {
                    continue;
                }
                while chars.peek().is_some_and(|&n| n == '>' || n == '&') {
                    chars.next();
                }
                if chars.peek().is_some_and(|n| n.is_ascii_digit()) {
                    chars.next();
                } else {
                    skip_next = true;
                }
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    end_word(&mut word, &mut commands, &mut skip_next);
    commands.retain(|c| !c.is_empty());
    commands
}

/// helmbench's arguments in a command: `helmbench ARGS` or `cargo run … -- ARGS`,
/// after any `VAR=value` assignments.
fn helmbench_args(command: &[String]) -> Option<Vec<String>> {
    let start = command
        .iter()
        .position(|w| !w.contains('=') || w.starts_with('-'))?;
    let words = &command[start..];
    match words.first()?.as_str() {
        "helmbench" => Some(words[1..].to_vec()),
        "cargo" if words.get(1).is_some_and(|w| w == "run") => {
            let dashes = words.iter().position(|w| w == "--")?;
            Some(words[dashes + 1..].to_vec())
        }
        _ => None,
    }
}

#[test]
fn command_lines_in_the_docs_parse() {
    let root = repo_root();
    let mut rejected = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = page_text(&file);
        let mut block: Option<(usize, String)> = None;
        for (event, range) in Parser::new(&text).into_offset_iter() {
            match event {
                Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(lang))) => {
                    let shell = ["sh", "shell", "bash", "console", "zsh"];
                    if shell.contains(&lang.split([',', ' ']).next().unwrap_or("")) {
                        block = Some((line_of(&text, range.start) + 1, String::new()));
                    }
                }
                Event::Text(t) => {
                    if let Some((_, b)) = block.as_mut() {
                        b.push_str(&t);
                    }
                }
                Event::End(TagEnd::CodeBlock) => {
                    let Some((first, body)) = block.take() else {
                        continue;
                    };
                    let joined = body.replace("\\\n", " ");
                    for (i, line) in joined.lines().enumerate() {
                        let line = line.trim_start().trim_start_matches("$ ");
                        for command in shell_commands(line) {
                            let Some(args) = helmbench_args(&command) else {
                                continue;
                            };
                            checked += 1;
                            let argv = std::iter::once("helmbench".to_string()).chain(args);
                            if let Err(e) =
                                helmbench::cli::Cli::command().try_get_matches_from(argv)
                                && !matches!(
                                    e.kind(),
                                    clap::error::ErrorKind::DisplayHelp
                                        | clap::error::ErrorKind::DisplayVersion
                                )
                            {
                                rejected.push(format!(
                                    "{}:{}: `{line}`: {}",
                                    file.strip_prefix(&root).unwrap().display(),
                                    first + i,
                                    e.render().to_string().lines().next().unwrap_or("")
                                ));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }
    assert!(checked > 50, "only {checked} command lines found");
    assert!(
        rejected.is_empty(),
        "command lines the parser refuses:\n{}",
        rejected.join("\n")
    );
}

#[test]
fn shell_lines_are_cut_as_a_shell_would() {
    let cut = |l: &str| shell_commands(l);
    assert_eq!(
        cut(r#"helmbench score "a b" 'c d' # note"#),
        [["helmbench", "score", "a b", "c d"]]
    );
    assert_eq!(
        cut("source <(helmbench completions bash)"),
        [vec!["source"], vec!["helmbench", "completions", "bash"]]
    );
    assert_eq!(
        cut("helmbench report --format json > r.json 2>&1; helmbench runs | head"),
        [
            vec!["helmbench", "report", "--format", "json"],
            vec!["helmbench", "runs"],
            vec!["head"]
        ]
    );
    assert_eq!(
        helmbench_args(&cut("DATABASE_URL=x helmbench runs")[0]),
        Some(vec!["runs".to_string()])
    );
    assert_eq!(
        helmbench_args(&cut("cargo run --release -- run-batch --all-scenarios")[0]),
        Some(vec!["run-batch".to_string(), "--all-scenarios".to_string()])
    );
}

/// Each command's page: its long `--help` at a fixed width, env values
/// hidden (a variable set where the test runs must not change the page).
fn reference_pages() -> BTreeMap<String, String> {
    fn tame(cmd: clap::Command) -> clap::Command {
        cmd.term_width(100)
            .mut_args(|a| a.hide_env_values(true))
            .mut_subcommands(tame)
    }
    fn help(cmd: &mut clap::Command) -> String {
        let text = cmd.render_long_help().to_string();
        let text: Vec<&str> = text.lines().map(str::trim_end).collect();
        text.join("\n").trim_end().to_string()
    }
    let mut top = tame(helmbench::cli::Cli::command());
    top.build();
    let header = |title: &str| {
        format!(
            "# {title}\n\n<!-- Generated from the clap definitions by tests/it/docs.rs; do not edit. Regenerate with `{BLESS}`. -->\n\n"
        )
    };
    let mut pages = BTreeMap::new();
    let mut index = header("Command reference");
    index.push_str(
        "Each page is the command's `--help`, exactly as this version prints it; \
         `helmbench man` renders the same text as man pages.\n\n",
    );
    index.push_str("- [helmbench](helmbench.md): the global options\n");
    pages.insert(
        "helmbench".to_string(),
        format!("{}```text\n{}\n```\n", header("helmbench"), help(&mut top)),
    );
    let names: Vec<String> = top
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .map(|s| s.get_name().to_string())
        .collect();
    for name in names {
        let sub = top.find_subcommand_mut(&name).unwrap();
        let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
        let about = about.lines().next().unwrap_or("").to_string();
        let mut page = format!(
            "{}```text\n{}\n```\n",
            header(&format!("helmbench {name}")),
            help(sub)
        );
        let nested: Vec<String> = sub
            .get_subcommands()
            .filter(|s| s.get_name() != "help")
            .map(|s| s.get_name().to_string())
            .collect();
        for n in nested {
            let inner = sub.find_subcommand_mut(&n).unwrap();
            page.push_str(&format!(
                "\n## helmbench {name} {n}\n\n```text\n{}\n```\n",
                help(inner)
            ));
        }
        index.push_str(&format!("- [helmbench {name}]({name}.md): {about}\n"));
        pages.insert(name, page);
    }
    pages.insert("index".to_string(), index);
    pages
}

#[test]
fn command_reference_matches_the_binary() {
    let dir = repo_root().join("docs/src/reference");
    let bless = std::env::var_os("HELMBENCH_BLESS").is_some_and(|v| v == "1");
    let pages = reference_pages();
    assert!(pages.contains_key("run-batch") && pages.contains_key("new"));
    let mut stale = Vec::new();
    for (name, text) in &pages {
        let path = dir.join(format!("{name}.md"));
        if std::fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
            continue;
        }
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, text).unwrap();
        } else {
            stale.push(format!("docs/src/reference/{name}.md"));
        }
    }
    // A page of a command that no longer exists.
    for e in std::fs::read_dir(&dir).into_iter().flatten() {
        let path = e.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        if !pages.contains_key(&stem) {
            if bless {
                std::fs::remove_file(&path).unwrap();
            } else {
                stale.push(format!("{} (no such command)", path.display()));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "the command reference differs from what the binary prints: {stale:?}; regenerate it with `{BLESS}`"
    );
}
