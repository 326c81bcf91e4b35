//! # Where things are written in a scenario's TOML text
//!
//! A TOML error is placed and described from the text itself, which may not parse at
//! all. [`entries`] scans it as TOML reads it: table headers and key lines, their keys
//! decoded (`[["op"]]` is `[[op]]`), strings skipped (a `[[op]]` inside a `"""` or `'''`
//! string is no header), and so are a multi-line array's element lines. [`inner`] walks
//! one value's inline tables and arrays, [`line_keys`] reads the keys a line starts with,
//! and [`string_at`] decodes a one-line string, such as a tensor's `name`.

use std::str::CharIndices;

/// A table header or a key line of the text, at the top level of its table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    /// The byte of its header or key.
    pub at: usize,
    /// The byte of a key line's value (none for a header).
    pub value: Option<usize>,
    /// The array of tables (`op`, `tensor`) and the element it lies in, if any.
    pub table: Option<(String, usize)>,
    /// Its key path inside that element (else the document): `src.tensor = "t"`, or
    /// `tensor = "t"` under `[op.src]`, is `["src", "tensor"]`; `[op.src]` is `["src"]`.
    pub keys: Vec<String>,
}

/// The headers and key lines of TOML `text`, in order.
pub(super) fn entries(text: &str) -> Vec<Entry> {
    let (mut out, mut tables) = (Vec::new(), Tables::default());
    for (at, head) in heads(text) {
        let entry = match head {
            Head::Table { array, keys } => tables.enter(at, array, keys),
            Head::Key { keys, value } => tables.key(at, keys, value),
        };
        out.push(entry);
    }
    out
}

/// The table the scan is in: the array of tables and element, and the key path to it.
#[derive(Default)]
struct Tables {
    current: Option<(String, usize)>,
    prefix: Vec<String>,
    /// The elements seen of each array of tables.
    seen: std::collections::HashMap<String, usize>,
}

impl Tables {
    /// The entry of a header at `at`, which the scan enters.
    fn enter(&mut self, at: usize, array: bool, keys: Vec<String>) -> Entry {
        let inside = self.current.as_ref().map(|(name, _)| name);
        match keys.as_slice() {
            [name] if array => {
                let n = self.seen.entry(name.clone()).or_default();
                *n += 1;
                self.current = Some((name.clone(), *n - 1));
                self.prefix.clear();
            }
            [name, sub @ ..] if Some(name) == inside && !sub.is_empty() => {
                self.prefix = sub.to_vec()
            }
            _ => (self.current, self.prefix) = (None, keys),
        }
        Entry {
            at,
            value: None,
            table: self.current.clone(),
            keys: self.prefix.clone(),
        }
    }

    /// The entry of a key line at `at` in the current table.
    fn key(&self, at: usize, keys: Vec<String>, value: usize) -> Entry {
        Entry {
            at,
            value: Some(value),
            table: self.current.clone(),
            keys: [self.prefix.clone(), keys].concat(),
        }
    }
}

/// A step into an inline value: a key of an inline table, or an element of an array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Step {
    Key(String),
    Element(usize),
}

/// A key or an element inside an inline value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Inner {
    /// The steps to it from the value.
    pub path: Vec<Step>,
    /// The byte of its key (an element's: its value's).
    pub at: usize,
    /// The bytes of its value.
    pub value: std::ops::Range<usize>,
}

/// The keys and elements inside the value at byte `at` of TOML `text` (which need not
/// parse: the walk stops where it cannot read on), in order, and the byte after the value.
pub(super) fn inner(text: &str, at: usize) -> (Vec<Inner>, usize) {
    let mut walk = Walk {
        text,
        out: Vec::new(),
    };
    let end = walk.value(at, &[]);
    (walk.out, end)
}

/// The keys the line holding byte `at` starts with (none if it starts with no key).
pub(super) fn line_keys(text: &str, at: usize) -> Vec<String> {
    let start = text
        .get(..at)
        .map_or(0, |t| t.rfind('\n').map_or(0, |n| n + 1));
    dotted_keys(text, start).map_or_else(Vec::new, |(keys, _)| keys)
}

/// [`inner`]'s walk, recording what it passes.
struct Walk<'t> {
    text: &'t str,
    out: Vec<Inner>,
}

impl Walk<'_> {
    /// Inline values nested deeper than this are not walked into.
    const DEPTH: usize = 32;

    /// Walks the value at byte `at`, reached by `path`; the byte after it.
    fn value(&mut self, at: usize, path: &[Step]) -> usize {
        let deep = path.len() >= Walk::DEPTH;
        match self.text.as_bytes().get(at) {
            Some(b'{') if !deep => self.items(at + 1, path, b'}'),
            Some(b'[') if !deep => self.items(at + 1, path, b']'),
            Some(b'"' | b'\'') => string_end(self.text, at),
            _ => {
                let rest = self.text.get(at..).unwrap_or_default();
                let end = rest.find([',', ']', '}', '\n', '#']).unwrap_or(rest.len());
                at + rest[..end].trim_end().len()
            }
        }
    }

    /// Walks an inline table's keys (`close` a brace) or an array's elements from byte
    /// `at`, after the opening bracket; the byte after the closing one.
    fn items(&mut self, mut at: usize, path: &[Step], close: u8) -> usize {
        let mut element = 0;
        loop {
            at = self.blank_lines(at);
            let (steps, value) = match self.text.as_bytes().get(at) {
                None => return at,
                Some(&c) if c == close => return at + 1,
                Some(b',') => {
                    element += 1;
                    at += 1;
                    continue;
                }
                Some(_) if close == b']' => (vec![Step::Element(element)], at),
                Some(_) => {
                    let Some((keys, end)) = dotted_keys(self.text, at) else {
                        return at;
                    };
                    if !self.text.get(end..).unwrap_or_default().starts_with('=') {
                        return end;
                    }
                    (
                        keys.into_iter().map(Step::Key).collect(),
                        blanks(self.text, end + 1),
                    )
                }
            };
            let path = [path, &steps].concat();
            let next = self.out.len();
            self.out.push(Inner {
                path: path.clone(),
                at,
                value: value..value,
            });
            let end = self.value(value, &path);
            self.out[next].value.end = end;
            if end == at {
                return end;
            }
            at = end;
        }
    }

    /// The first byte from `at` that is no blank, newline or comment.
    fn blank_lines(&self, mut at: usize) -> usize {
        loop {
            at = blanks(self.text, at);
            match self.text.as_bytes().get(at) {
                Some(b'\n' | b'\r') => at += 1,
                Some(b'#') => at = line_end(self.text, at),
                _ => return at,
            }
        }
    }
}

/// What a line of the top level starts with.
enum Head {
    Table { array: bool, keys: Vec<String> },
    Key { keys: Vec<String>, value: usize },
}

/// The heads of the top-level lines of `text` and their bytes: what starts a line
/// outside strings, comments and brackets.
fn heads(text: &str) -> Vec<(usize, Head)> {
    let (mut out, mut at, mut depth, mut line_start) = (Vec::new(), 0, 0usize, true);
    while let Some(&c) = text.as_bytes().get(at) {
        let blank = matches!(c, b' ' | b'\t' | b'\r' | b'\n' | b'#');
        at = match c {
            b'#' => line_end(text, at),
            _ if blank => at + 1,
            _ if line_start && depth == 0 => match head(text, at) {
                Some((h, end)) => {
                    out.push((at, h));
                    end
                }
                None => line_end(text, at),
            },
            b'"' | b'\'' => string_end(text, at),
            _ => at + 1,
        };
        match c {
            b'[' | b'{' if !line_start || depth > 0 => depth += 1,
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        line_start = (line_start && blank) || c == b'\n';
    }
    out
}

/// The head of the line starting at byte `at` (a header, or keys and `=`) and the byte
/// after it; none if it is neither.
fn head(text: &str, at: usize) -> Option<(Head, usize)> {
    let Some(rest) = text.get(at..)?.strip_prefix('[') else {
        let (keys, end) = dotted_keys(text, at)?;
        text.get(end..)?.starts_with('=').then_some(())?;
        let value = blanks(text, end + 1);
        return Some((Head::Key { keys, value }, value));
    };
    let array = rest.starts_with('[');
    let (keys, end) = dotted_keys(text, at + 1 + usize::from(array))?;
    let close = if array { "]]" } else { "]" };
    text.get(end..)?.starts_with(close).then_some(())?;
    Some((Head::Table { array, keys }, end + close.len()))
}

/// The keys of a dotted key from byte `at` (blanks around each), and the byte after.
fn dotted_keys(text: &str, mut at: usize) -> Option<(Vec<String>, usize)> {
    let mut keys = Vec::new();
    loop {
        let (key, end) = key_at(text, blanks(text, at))?;
        keys.push(key);
        at = blanks(text, end);
        match text.get(at..)?.starts_with('.') {
            true => at += 1,
            false => return Some((keys, at)),
        }
    }
}

/// The key at byte `at` (bare, or quoted and decoded) and the byte after it.
fn key_at(text: &str, at: usize) -> Option<(String, usize)> {
    let rest = text.get(at..)?;
    if rest.starts_with(['"', '\'']) {
        return string_at(text, at);
    }
    let bare = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let len = rest.find(|c: char| !bare(c)).unwrap_or(rest.len());
    (len > 0).then(|| (rest[..len].to_string(), at + len))
}

/// The one-line string (basic or literal) at byte `at` of `text`, decoded, and the byte
/// after its closing quote; none if there is none, it is not well formed, or it is a
/// multi-line string.
pub(super) fn string_at(text: &str, at: usize) -> Option<(String, usize)> {
    let rest = text.get(at..)?;
    if triple_quotes(rest.as_bytes()).is_some() {
        return None;
    }
    let quote = rest.chars().next().filter(|&c| c == '"' || c == '\'')?;
    let (mut out, mut chars) = (String::new(), rest.char_indices());
    chars.next();
    while let Some((i, c)) = chars.next() {
        match c {
            '\n' => return None,
            _ if c == quote => return Some((out, at + i + 1)),
            '\\' if quote == '"' => out.push(escape(&mut chars)?),
            _ => out.push(c),
        }
    }
    None
}

/// The three quotes `rest` starts with if it starts a multi-line string (basic or
/// literal).
fn triple_quotes(rest: &[u8]) -> Option<&'static [u8; 3]> {
    [b"\"\"\"", b"'''"]
        .into_iter()
        .find(|q| rest.starts_with(*q))
}

/// The character a basic string's escape (after its `\`) stands for.
fn escape(chars: &mut CharIndices<'_>) -> Option<char> {
    let digits = match chars.next()?.1 {
        'b' => return Some('\u{8}'),
        't' => return Some('\t'),
        'n' => return Some('\n'),
        'f' => return Some('\u{c}'),
        'r' => return Some('\r'),
        c @ ('"' | '\\') => return Some(c),
        'u' => 4,
        'U' => 8,
        _ => return None,
    };
    let hex: String = chars.take(digits).map(|(_, c)| c).collect();
    if hex.len() != digits || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    char::from_u32(u32::from_str_radix(&hex, 16).ok()?)
}

/// The byte after the string starting at byte `at` (one-line or multi-line, basic or
/// literal); the end of its line, or of the text, if it does not close.
fn string_end(text: &str, at: usize) -> usize {
    let rest = text.get(at..).unwrap_or_default().as_bytes();
    let Some(quotes) = triple_quotes(rest) else {
        return string_at(text, at).map_or(line_end(text, at), |(_, end)| end);
    };
    let mut i = 3;
    while i < rest.len() && !rest[i..].starts_with(quotes) {
        // a basic string's escape takes the byte after it (an escaped quote)
        i += if rest[i] == b'\\' && quotes[0] == b'"' {
            2
        } else {
            1
        };
    }
    // up to two quotes more before the closing three are the string's own
    let after = rest.get(i + 3..).unwrap_or_default();
    let own = after
        .iter()
        .take(2)
        .take_while(|&&b| b == quotes[0])
        .count();
    (at + i + 3 + own).min(text.len())
}

/// The byte of the newline ending the line byte `at` is in (or the end of the text).
fn line_end(text: &str, at: usize) -> usize {
    let rest = text.get(at..).unwrap_or_default();
    at + rest.find('\n').unwrap_or(rest.len())
}

/// The first byte from `at` that is no space or tab.
fn blanks(text: &str, at: usize) -> usize {
    let rest = text.get(at..).unwrap_or_default();
    at + rest.len() - rest.trim_start_matches([' ', '\t']).len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_the_headers_and_keys_toml_reads() {
        let text = "a = \"\"\"\n[[op]]\n\\\"\"\"\" # [[op]]\n[[ \"op\" ]]\nsrc.ap = [\n  [1, 4],\n]\n[op.src]\n'x y' = '''\n[[tensor]]'''\n[[tensor]]\n[other]\nb=2";
        let got: Vec<_> = entries(text)
            .into_iter()
            .map(|e| (e.table.map(|(t, i)| format!("{t} {i}")), e.keys.join(".")))
            .collect();
        let op = || Some("op 0".to_string());
        let want = [
            (None, "a"),
            (op(), ""),
            (op(), "src.ap"),
            (op(), "src"),
            (op(), "src.x y"),
            (Some("tensor 0".to_string()), ""),
            (None, "other"),
            (None, "other.b"),
        ];
        let want: Vec<_> = want.into_iter().map(|(t, k)| (t, k.to_string())).collect();
        assert_eq!(got, want);
        assert_eq!(entries(text)[2].value, Some(text.find("[\n").unwrap()));
    }

    #[test]
    fn an_inline_values_keys_and_elements_are_walked_in_order() {
        let text = "x = { a = [1, { b.c = 'd]' }], # note\n e = \"}\" } tail";
        let (inner, end) = inner(text, 4);
        let key = |k: &str| Step::Key(k.to_string());
        let got: Vec<_> = inner
            .iter()
            .map(|i| (i.path.clone(), &text[i.value.clone()]))
            .collect();
        let want = vec![
            (vec![key("a")], "[1, { b.c = 'd]' }]"),
            (vec![key("a"), Step::Element(0)], "1"),
            (vec![key("a"), Step::Element(1)], "{ b.c = 'd]' }"),
            (vec![key("a"), Step::Element(1), key("b"), key("c")], "'d]'"),
            (vec![key("e")], "\"}\""),
        ];
        assert_eq!(got, want);
        assert_eq!(&text[end..], " tail");
        assert_eq!(inner[3].at, text.find("b.c").unwrap());
        // unclosed, or not a key: the walk stops there
        assert_eq!(super::inner("{ a = [1, 2", 0).1, 11);
        assert_eq!(super::inner("{ a b }", 0).1, 4);
        let deep = "[".repeat(1000);
        assert!(super::inner(&deep, 0).0.len() < 100);
        assert_eq!(line_keys("a = 1\n  b.'c' 2", 12), ["b", "c"]);
        assert!(line_keys("a = 1\n[x]", 8).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn scanning_never_panics(text in "[\\[\\]{}\"'\\\\ =.#\na-fu0-9é]{0,120}") {
            for e in entries(&text) {
                let _ = string_at(&text, e.value.unwrap_or(e.at));
                let (inner, end) = inner(&text, e.value.unwrap_or(e.at));
                proptest::prop_assert!(end <= text.len());
                for i in inner {
                    proptest::prop_assert!(i.at <= i.value.start && i.value.end <= end);
                    let _ = line_keys(&text, i.value.end);
                }
            }
        }
    }

    #[test]
    fn strings_are_decoded() {
        let decoded = |s: &str| string_at(s, 0).map(|(v, _)| v);
        assert_eq!(
            decoded(r#""a\"b\\\tc\u00e9\U0001F600" x"#).as_deref(),
            Some("a\"b\\\tcé😀")
        );
        assert_eq!(decoded(r"'a\n' x").as_deref(), Some("a\\n"));
        assert_eq!(string_at("x = 'ab'", 4), Some(("ab".to_string(), 8)));
        for bad in [
            r#""\q""#,
            r#""\u00e""#,
            r#""\u+0e9""#,
            "\"ab",
            "'a\nb'",
            r#""""ab""""#,
            "'''ab'''",
            "",
            "x",
        ] {
            assert_eq!(decoded(bad), None, "{bad}");
        }
    }
}
