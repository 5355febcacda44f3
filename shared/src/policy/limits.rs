//! Bounds on a policy document, checked on its YAML event stream (saphyr-parser) before it is
//! deserialized: a small document must not expand into a large one.
//!
//! An alias (`*a`) counts as every node of what it repeats, so `x: &a [1, ...]`,
//! `y: &b [*a, ...]`, `z: [*b, ...]` is counted as the product it expands to, without ever being
//! expanded. The check keeps one counter per anchor and one frame per open collection: its memory
//! is bounded by the document's size, whatever the document expands to.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser};

use crate::problem::join;

/// Largest document accepted, in bytes: the parser's bound on hostile input (a local file may
/// carry comments). What an SSM parameter holds is a separate, smaller bound, checked where a
/// policy is stored ([`super::stored::SSM_STANDARD_BYTES`], [`super::stored::SSM_ADVANCED_BYTES`]).
pub const MAX_BYTES: usize = 32 * 1024;
/// Largest number of nodes (scalars, lists, objects, keys included) once every alias is
/// expanded. A policy with 30 terms of 10 tags each and 20 budgets has about 1,000.
pub const MAX_NODES: usize = 10_000;
/// Largest total length of the document's scalars once every alias is expanded, in bytes.
pub const MAX_SCALAR_BYTES: usize = 256 * 1024;
/// Deepest nesting of lists and objects (a policy nests 5 levels at most).
pub const MAX_DEPTH: usize = 32;

/// A document beyond the bounds: where (field path, `""` for the document) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfBounds {
    /// Field path of the node where a bound was passed (`y[33]`), `""` for the document.
    pub path: String,
    /// What was passed and what is expected.
    pub message: String,
}

enum Kind {
    Sequence {
        index: usize,
    },
    Mapping {
        key: Option<String>,
        expect_key: bool,
    },
}

struct Frame {
    kind: Kind,
    anchor: usize,
    nodes: usize,
    bytes: usize,
}

struct Counter {
    frames: Vec<Frame>,
    anchors: HashMap<usize, (usize, usize)>,
    nodes: usize,
    bytes: usize,
}

impl Counter {
    /// Field path of the node about to be added.
    fn path(&self) -> String {
        let mut path = String::new();
        for f in &self.frames {
            match &f.kind {
                Kind::Sequence { index } => path.push_str(&format!("[{index}]")),
                Kind::Mapping {
                    key,
                    expect_key: false,
                } => path = join(&path, key.as_deref().unwrap_or("?")),
                Kind::Mapping { .. } => {}
            }
        }
        path
    }

    /// Adds a node of `nodes` nodes and `bytes` scalar bytes (an alias: what it repeats).
    fn add(&mut self, nodes: usize, bytes: usize) -> Result<(), OutOfBounds> {
        self.nodes = self.nodes.saturating_add(nodes);
        self.bytes = self.bytes.saturating_add(bytes);
        if self.nodes > MAX_NODES {
            return Err(OutOfBounds {
                path: self.path(),
                message: format!(
                    "the document expands to more than {MAX_NODES} values (an alias counts as every value it repeats); expected a policy of at most {MAX_NODES} values"
                ),
            });
        }
        if self.bytes > MAX_SCALAR_BYTES {
            return Err(OutOfBounds {
                path: self.path(),
                message: format!(
                    "the document's text expands to more than {MAX_SCALAR_BYTES} bytes (an alias counts as all the text it repeats); expected at most {MAX_SCALAR_BYTES}"
                ),
            });
        }
        for f in &mut self.frames {
            f.nodes = f.nodes.saturating_add(nodes);
            f.bytes = f.bytes.saturating_add(bytes);
        }
        Ok(())
    }

    /// A node is complete in the innermost collection: move its position on.
    fn complete(&mut self, scalar: Option<&str>) {
        let Some(f) = self.frames.last_mut() else {
            return;
        };
        match &mut f.kind {
            Kind::Sequence { index } => *index += 1,
            Kind::Mapping { key, expect_key } => {
                if *expect_key {
                    *key = Some(match scalar {
                        Some(s) if s.len() <= 64 => s.to_string(),
                        Some(s) => format!("{}...", s.chars().take(64).collect::<String>()),
                        None => "?".to_string(),
                    });
                }
                *expect_key = !*expect_key;
            }
        }
    }

    fn open(&mut self, kind: Kind, anchor: usize) -> Result<(), OutOfBounds> {
        self.add(1, 0)?;
        if self.frames.len() >= MAX_DEPTH {
            return Err(OutOfBounds {
                path: self.path(),
                message: format!(
                    "nested more than {MAX_DEPTH} levels deep; expected a policy (5 levels at most)"
                ),
            });
        }
        self.frames.push(Frame {
            kind,
            anchor,
            nodes: 1,
            bytes: 0,
        });
        Ok(())
    }

    fn close(&mut self) {
        if let Some(f) = self.frames.pop() {
            if f.anchor != 0 {
                self.anchors.insert(f.anchor, (f.nodes, f.bytes));
            }
            self.complete(None);
        }
    }
}

/// Checks `text` against [`MAX_BYTES`], [`MAX_NODES`], [`MAX_SCALAR_BYTES`] and [`MAX_DEPTH`].
/// `Ok` also for text that is not YAML at all only when the event parser accepts it; a syntax
/// error is an `OutOfBounds` at the document path with the parser's message and position.
/// Never panics; time and memory are linear in `text.len()`.
pub fn check(text: &str) -> Result<(), OutOfBounds> {
    if text.len() > MAX_BYTES {
        return Err(OutOfBounds {
            path: String::new(),
            message: format!(
                "the document is {} bytes; expected at most {MAX_BYTES} (an SSM Advanced parameter holds 8 KB)",
                text.len()
            ),
        });
    }
    let mut c = Counter {
        frames: Vec::new(),
        anchors: HashMap::new(),
        nodes: 0,
        bytes: 0,
    };
    for event in Parser::new_from_str(text) {
        let (event, _) = event.map_err(|e| OutOfBounds {
            path: String::new(),
            message: format!("not a valid YAML or JSON document: {e}"),
        })?;
        match event {
            Event::Scalar(value, _, anchor, _) => {
                c.add(1, value.len())?;
                if anchor != 0 {
                    c.anchors.insert(anchor, (1, value.len()));
                }
                c.complete(Some(&value));
            }
            Event::Alias(id) => {
                let (nodes, bytes) = c.anchors.get(&id).copied().unwrap_or((1, 0));
                c.add(nodes, bytes)?;
                c.complete(None);
            }
            Event::SequenceStart(anchor, _) => c.open(Kind::Sequence { index: 0 }, anchor)?,
            Event::MappingStart(anchor, _) => c.open(
                Kind::Mapping {
                    key: None,
                    expect_key: true,
                },
                anchor,
            )?,
            Event::SequenceEnd | Event::MappingEnd => c.close(),
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart(_)
            | Event::DocumentEnd => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The document of the report: 1,486 bytes that expand to 3,000,000 values.
    pub(crate) fn laughs(a: usize, b: usize, c: usize) -> String {
        let header = "cluster: prod\nname: general\nnodeGroup: { autoScalingGroup: prod-general }\namiSelectorTerms: [{ alias: al2023@latest }]\n";
        let list = |item: &str, n: usize| vec![item; n].join(",");
        format!(
            "{header}x: &a [{}]\ny: &b [{}]\nz: [{}]\n",
            list("1", a),
            list("*a", b),
            list("*b", c)
        )
    }

    #[test]
    fn aliases_count_as_what_they_repeat() {
        let doc = laughs(300, 200, 50);
        assert!(doc.len() < 1500, "{}", doc.len());
        let e = check(&doc).unwrap_err();
        // y's 33rd alias passes 10,000 values (301 per alias).
        assert_eq!(e.path, "y[32]", "{e:?}");
        assert!(e.message.contains("more than 10000 values"), "{e:?}");
    }

    #[test]
    fn small_documents_pass() {
        assert_eq!(check(&laughs(3, 2, 2)), Ok(()));
        assert_eq!(check("{}"), Ok(()));
        assert_eq!(check(""), Ok(()));
        let terms: Vec<String> = (0..30)
            .map(|i| format!("  - {{ name: \"img-{i}-*\", owner: self, tags: {{ a: b, c: d }} }}"))
            .collect();
        let doc = format!(
            "cluster: prod\nname: general\namiSelectorTerms:\n{}\n",
            terms.join("\n")
        );
        assert_eq!(check(&doc), Ok(()));
    }

    #[test]
    fn text_repeated_by_aliases_is_counted() {
        let big = "x".repeat(20_000);
        let doc = format!("a: &s \"{big}\"\nb: [{}]\n", vec!["*s"; 20].join(", "));
        let e = check(&doc).unwrap_err();
        assert!(e.message.contains("bytes"), "{e:?}");
        assert_eq!(e.path, "b[12]");
    }

    #[test]
    fn bytes_and_depth() {
        let e = check(&"#".repeat(MAX_BYTES + 1)).unwrap_err();
        assert_eq!(e.path, "");
        assert!(e.message.contains("bytes"), "{e:?}");
        let deep = format!("{}{}", "[".repeat(40), "]".repeat(40));
        let e = check(&deep).unwrap_err();
        assert!(e.message.contains("nested more than 32"), "{e:?}");
        let e = check(&format!("a: {{b: {}}}", "[".repeat(40))).unwrap_err();
        assert!(e.path.starts_with("a.b[0]"), "{e:?}");
    }

    #[test]
    fn syntax_errors_name_the_document() {
        let e = check("a: [1, 2\nb: 3").unwrap_err();
        assert_eq!(e.path, "");
        assert!(e.message.starts_with("not a valid YAML"), "{e:?}");
    }
}
