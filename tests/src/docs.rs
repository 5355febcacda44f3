//! The project's Markdown (README.md, CHANGELOG.md, docs/*.md) read as CommonMark, for the
//! tests that keep it true: the `nodecycle` commands it shows parse against the real CLI
//! (functions/ops), its relative links resolve, and docs/policy-reference.md matches the
//! policy parser (tests/tests/docs.rs).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// One Markdown file of the repository.
#[derive(Debug, Clone)]
pub struct Page {
    /// Path relative to the repository root (`README.md`, `docs/concepts.md`).
    pub path: PathBuf,
    /// Its text.
    pub text: String,
}

/// README.md, CHANGELOG.md and every `docs/*.md` under `root`, in that order (docs by name).
/// A missing README.md or docs/ directory is a panic: the tests would check nothing.
pub fn pages(root: &Path) -> Vec<Page> {
    let read = |rel: PathBuf| {
        let text = std::fs::read_to_string(root.join(&rel))
            .unwrap_or_else(|e| panic!("{}: {e}", rel.display()));
        Page { path: rel, text }
    };
    let mut out = vec![read(PathBuf::from("README.md"))];
    if root.join("CHANGELOG.md").exists() {
        out.push(read(PathBuf::from("CHANGELOG.md")));
    }
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .filter_map(|p| p.file_name().map(|n| Path::new("docs").join(n)))
        .collect();
    docs.sort();
    out.extend(docs.into_iter().map(read));
    out
}

/// A piece of code shown on a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Code {
    /// The code: one logical line of a shell block (`\` continuations joined), or an inline
    /// code span.
    pub text: String,
    /// 1-based line of the page where it starts.
    pub line: usize,
    /// From a fenced or indented code block (else an inline span).
    pub block: bool,
}

impl Page {
    fn events(&self) -> impl Iterator<Item = (Event<'_>, std::ops::Range<usize>)> {
        Parser::new_ext(&self.text, Options::ENABLE_TABLES).into_offset_iter()
    }

    fn line_of(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())]
            .matches('\n')
            .count()
            + 1
    }

    /// Every line of the code blocks whose language is a shell's (`sh`, `bash`, `console`,
    /// `shell`) or unset, with `\` continuations joined, and every inline code span.
    pub fn code(&self) -> Vec<Code> {
        let mut out = Vec::new();
        let mut shell_block: Option<(String, usize)> = None;
        for (event, range) in self.events() {
            match event {
                Event::Start(Tag::CodeBlock(kind)) => {
                    let shell = match kind {
                        CodeBlockKind::Indented => true,
                        CodeBlockKind::Fenced(lang) => {
                            matches!(lang.as_ref(), "" | "sh" | "bash" | "console" | "shell")
                        }
                    };
                    if shell {
                        shell_block = Some((String::new(), self.line_of(range.start) + 1));
                    }
                }
                Event::Text(text) => {
                    if let Some((body, _)) = shell_block.as_mut() {
                        body.push_str(&text);
                    }
                }
                Event::End(TagEnd::CodeBlock) => {
                    if let Some((body, first)) = shell_block.take() {
                        let mut pending = String::new();
                        let mut start = first;
                        for (i, line) in body.lines().enumerate() {
                            if pending.is_empty() {
                                start = first + i;
                            }
                            match line.strip_suffix('\\') {
                                Some(head) => {
                                    pending.push_str(head);
                                    pending.push(' ');
                                }
                                None => {
                                    pending.push_str(line);
                                    out.push(Code {
                                        text: std::mem::take(&mut pending),
                                        line: start,
                                        block: true,
                                    });
                                }
                            }
                        }
                    }
                }
                Event::Code(text) => out.push(Code {
                    text: text.to_string(),
                    line: self.line_of(range.start),
                    block: false,
                }),
                _ => {}
            }
        }
        out
    }

    /// Every link and image destination with its line.
    pub fn links(&self) -> Vec<(String, usize)> {
        self.events()
            .filter_map(|(event, range)| match event {
                Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                    Some((dest_url.to_string(), self.line_of(range.start)))
                }
                _ => None,
            })
            .collect()
    }

    /// The anchors of the page's headings, as GitHub makes them ([`slug`]; a repeated heading
    /// gets `-1`, `-2`, ...).
    pub fn anchors(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut heading: Option<String> = None;
        for (event, _) in self.events() {
            match event {
                Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
                Event::Text(t) | Event::Code(t) => {
                    if let Some(h) = heading.as_mut() {
                        h.push_str(&t);
                    }
                }
                Event::End(TagEnd::Heading(_)) => {
                    if let Some(h) = heading.take() {
                        let base = slug(&h);
                        let mut anchor = base.clone();
                        let mut n = 0;
                        while out.contains(&anchor) {
                            n += 1;
                            anchor = format!("{base}-{n}");
                        }
                        out.insert(anchor);
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// The headings of level `level` (e.g. 2 for `##`), as text.
    pub fn headings(&self, level: HeadingLevel) -> Vec<String> {
        let mut out = Vec::new();
        let mut heading: Option<String> = None;
        for (event, _) in self.events() {
            match event {
                Event::Start(Tag::Heading { level: l, .. }) if l == level => {
                    heading = Some(String::new())
                }
                Event::Text(t) | Event::Code(t) => {
                    if let Some(h) = heading.as_mut() {
                        h.push_str(&t);
                    }
                }
                Event::End(TagEnd::Heading(_)) => out.extend(heading.take()),
                _ => {}
            }
        }
        out
    }

    /// Every table: its rows (the header first), each a list of cells as text with code spans
    /// kept in backticks, and the line each row starts on.
    pub fn tables(&self) -> Vec<Vec<(Vec<String>, usize)>> {
        let mut tables = Vec::new();
        let mut rows: Vec<(Vec<String>, usize)> = Vec::new();
        let mut row: Option<(Vec<String>, usize)> = None;
        let mut cell: Option<String> = None;
        for (event, range) in self.events() {
            match event {
                Event::Start(Tag::Table(_)) => rows.clear(),
                Event::Start(Tag::TableHead | Tag::TableRow) => {
                    row = Some((Vec::new(), self.line_of(range.start)))
                }
                Event::Start(Tag::TableCell) => cell = Some(String::new()),
                Event::Text(t) => {
                    if let Some(c) = cell.as_mut() {
                        c.push_str(&t);
                    }
                }
                Event::Code(t) => {
                    if let Some(c) = cell.as_mut() {
                        c.push('`');
                        c.push_str(&t);
                        c.push('`');
                    }
                }
                Event::End(TagEnd::TableCell) => {
                    if let (Some(r), Some(c)) = (row.as_mut(), cell.take()) {
                        r.0.push(c.trim().to_string());
                    }
                }
                Event::End(TagEnd::TableHead | TagEnd::TableRow) => rows.extend(row.take()),
                Event::End(TagEnd::Table) => tables.push(std::mem::take(&mut rows)),
                _ => {}
            }
        }
        tables
    }
}

/// A heading's anchor as GitHub makes it: lower case, characters other than letters, digits,
/// `-`, `_` and spaces dropped, spaces as `-`.
pub fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(text: &str) -> Page {
        Page {
            path: PathBuf::from("x.md"),
            text: text.to_string(),
        }
    }

    #[test]
    fn reads_code_links_anchors_and_tables() {
        let p = page(
            "# The CLI\n\nRun `nodecycle status` or:\n\n```sh\nnodecycle plan a.yaml \\\n  --at 2026-12-01T00:00:00Z\nls\n```\n\n```yaml\nnodecycle: no\n```\n\n## Forecasting a rollout (`nodecycle simulate`)\n\n## The CLI\n\nSee [x](other.md#a-b) and ![p](pic.svg).\n\n| field | default |\n|---|---|\n| `a.b` | `720h` |\n",
        );
        let code: Vec<(String, usize, bool)> = p
            .code()
            .into_iter()
            .map(|c| (c.text, c.line, c.block))
            .collect();
        assert_eq!(
            code,
            [
                ("nodecycle status".to_string(), 3, false),
                (
                    "nodecycle plan a.yaml    --at 2026-12-01T00:00:00Z".to_string(),
                    6,
                    true
                ),
                ("ls".to_string(), 8, true),
                ("nodecycle simulate".to_string(), 15, false),
                ("a.b".to_string(), 23, false),
                ("720h".to_string(), 23, false),
            ]
        );
        assert_eq!(
            p.links(),
            [
                ("other.md#a-b".to_string(), 19),
                ("pic.svg".to_string(), 19)
            ]
        );
        let anchors: Vec<String> = p.anchors().into_iter().collect();
        assert_eq!(
            anchors,
            [
                "forecasting-a-rollout-nodecycle-simulate",
                "the-cli",
                "the-cli-1"
            ]
        );
        let tables = p.tables();
        assert_eq!(tables.len(), 1);
        let cells: Vec<Vec<String>> = tables[0].iter().map(|(r, _)| r.clone()).collect();
        assert_eq!(cells, [vec!["field", "default"], vec!["`a.b`", "`720h`"]]);
    }
}
