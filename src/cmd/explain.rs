//! `x402-probe explain`: print a check's definition as plain text for a terminal.
//!
//! `explain R3` prints one definition, `explain --list` lists every id with its title,
//! `explain operator-file` prints the operator file format. An unknown id is a usage error (exit 2)
//! that lists the valid ids.

use std::io::Write;

use crate::definitions::{self, Definition};

/// Options of `x402-probe explain`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The check id, e.g. `R3` (case-insensitive), or `operator-file`.
    #[arg(required_unless_present = "list")]
    pub id: Option<String>,
    /// List every check id with its title.
    #[arg(long, conflicts_with = "id")]
    pub list: bool,
}

/// Exit code for a usage error (as clap uses).
const USAGE_ERROR: i32 = 2;

/// Lines longer than this are wrapped.
const WIDTH: usize = 100;

pub fn run(args: Args) -> anyhow::Result<i32> {
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    Ok(explain(&args, &mut stdout.lock(), &mut stderr.lock())?)
}

/// The command's body, writing to the given streams; returns the exit code.
pub fn explain(args: &Args, out: &mut dyn Write, err: &mut dyn Write) -> std::io::Result<i32> {
    if args.list {
        out.write_all(list().as_bytes())?;
        return Ok(0);
    }
    let asked = args.id.as_deref().unwrap_or("").trim();
    if asked.eq_ignore_ascii_case("operator-file") {
        out.write_all(markdown_to_text(definitions::OPERATOR_FILE).as_bytes())?;
        return Ok(0);
    }
    match definitions::definition(asked) {
        Some(definition) => {
            out.write_all(render(definition).as_bytes())?;
            Ok(0)
        }
        None => {
            let ids: Vec<&str> = definitions::definitions().iter().map(|d| d.id).collect();
            writeln!(
                err,
                "x402-probe explain: unknown check id {asked:?}\nvalid ids: {} (or operator-file)",
                ids.join(", ")
            )?;
            Ok(USAGE_ERROR)
        }
    }
}

/// Every id with its title, dimension, kind and metric, one per line.
pub fn list() -> String {
    let mut text = String::new();
    for d in definitions::definitions() {
        text.push_str(&format!(
            "{:<4}{:<32}{:<14}{:<6}{}\n",
            d.id,
            d.title,
            d.dimension,
            d.kind.as_str(),
            d.metric.as_str()
        ));
    }
    text.push_str(
        "\n`x402-probe explain ID` prints one; `explain operator-file` the operator file format.\n",
    );
    markdown_inline(&text)
}

/// One definition as plain text.
pub fn render(definition: &Definition) -> String {
    format!(
        "{} {}\ndimension: {}   kind: {}   metric: {}\n\n{}",
        definition.id,
        definition.title,
        definition.dimension,
        definition.kind.as_str(),
        definition.metric.as_str(),
        markdown_to_text(definition.body_markdown)
    )
}

/// Inline Markdown made plain: emphasis markers, code backticks and table escapes removed.
fn markdown_inline(line: &str) -> String {
    line.replace("**", "").replace('`', "").replace("\\|", "|")
}

/// Split a table row into cells, honouring `\|` inside cells.
fn table_cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cell.push('|');
                chars.next();
            }
            '|' => cells.push(std::mem::take(&mut cell)),
            other => cell.push(other),
        }
    }
    cells.push(cell);
    cells
        .into_iter()
        .map(|c| markdown_inline(c.trim()))
        .collect()
}

fn is_separator_row(cells: &[String]) -> bool {
    cells
        .iter()
        .all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':' | ' ')))
}

/// A table as aligned columns when it fits, else one block per row.
fn render_table(rows: &[Vec<String>], out: &mut Vec<String>) {
    let Some(header) = rows.first() else {
        return;
    };
    let body: Vec<&Vec<String>> = rows[1..].iter().filter(|r| !is_separator_row(r)).collect();
    let columns = header.len();
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            std::iter::once(header)
                .chain(body.iter().copied())
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let total: usize = widths.iter().sum::<usize>() + 2 * columns;
    if total <= WIDTH {
        for row in std::iter::once(header).chain(body.iter().copied()) {
            let line: Vec<String> = (0..columns)
                .map(|i| {
                    let cell = row.get(i).map_or("", String::as_str);
                    format!("{cell:<width$}", width = widths[i])
                })
                .collect();
            out.push(format!("  {}", line.join("  ").trim_end()));
        }
        return;
    }
    for row in body {
        out.extend(wrap(&format!(
            "  {}",
            row.first().map_or("", String::as_str)
        )));
        for (i, cell) in row.iter().enumerate().skip(1) {
            let name = header.get(i).map_or("", String::as_str);
            out.extend(wrap(&format!("      {name}: {cell}")));
        }
    }
}

/// Wrap one line at [`WIDTH`], continuing with the line's indentation (two more for bullets).
fn wrap(line: &str) -> Vec<String> {
    if line.chars().count() <= WIDTH {
        return vec![line.to_string()];
    }
    let indent_len = line.len() - line.trim_start().len();
    let bullet = line.trim_start().starts_with("- ");
    let continuation = " ".repeat(indent_len + if bullet { 2 } else { 0 });
    let mut lines = Vec::new();
    let mut current = line[..indent_len].to_string();
    let mut has_words = false;
    for word in line.trim_start().split(' ') {
        let needed = current.chars().count() + usize::from(has_words) + word.chars().count();
        if has_words && needed > WIDTH {
            lines.push(std::mem::replace(&mut current, continuation.clone()));
            has_words = false;
        }
        if has_words {
            current.push(' ');
        }
        current.push_str(word);
        has_words = true;
    }
    lines.push(current);
    lines
}

/// Markdown as plain terminal text: headings in capitals, code blocks indented, tables laid out,
/// inline markup removed, long lines wrapped.
pub fn markdown_to_text(markdown: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut table: Vec<Vec<String>> = Vec::new();
    let mut in_code = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            out.push(format!("    {line}"));
            continue;
        }
        if line.trim_start().starts_with('|') {
            table.push(table_cells(line));
            continue;
        }
        if !table.is_empty() {
            render_table(&table, &mut out);
            table.clear();
        }
        if let Some(heading) = line.strip_prefix("## ") {
            out.push(heading.trim().to_uppercase());
        } else if let Some(heading) = line.strip_prefix("# ") {
            let heading = markdown_inline(heading.trim());
            out.push(heading.clone());
            out.push("=".repeat(heading.chars().count()));
        } else {
            out.extend(wrap(&markdown_inline(line)));
        }
    }
    if !table.is_empty() {
        render_table(&table, &mut out);
    }
    let mut text = out.join("\n");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_explain(id: Option<&str>, list: bool) -> (i32, String, String) {
        let args = Args {
            id: id.map(str::to_string),
            list,
        };
        let mut out = Vec::new();
        let mut err = Vec::new();
        let code = explain(&args, &mut out, &mut err).expect("writing to memory");
        (
            code,
            String::from_utf8(out).expect("utf-8"),
            String::from_utf8(err).expect("utf-8"),
        )
    }

    #[test]
    fn prints_one_definition_as_plain_text() {
        let (code, out, err) = run_explain(Some("r3"), false);
        assert_eq!(code, 0);
        assert!(err.is_empty());
        assert!(
            out.starts_with("R3 Unpaid latency\ndimension: works   kind: free   metric: curve\n")
        );
        for heading in ["WHAT", "WHY", "HOW", "OUTCOMES", "VALIDITY", "REMEDIATION"] {
            assert!(out.lines().any(|l| l == heading), "{heading} missing");
        }
        assert!(!out.contains("## ") && !out.contains('`') && !out.contains("**"));
    }

    #[test]
    fn every_definition_renders_within_the_width() {
        for d in definitions::definitions() {
            let text = render(d);
            for line in text.lines() {
                assert!(line.chars().count() <= WIDTH, "{}: {line:?}", d.id);
            }
        }
    }

    #[test]
    fn lists_every_id() {
        let (code, out, _) = run_explain(None, true);
        assert_eq!(code, 0);
        for d in definitions::definitions() {
            assert!(
                out.lines()
                    .any(|l| l.starts_with(d.id) && l.contains(d.title)),
                "{}",
                d.id
            );
        }
    }

    #[test]
    fn unknown_id_is_a_usage_error_listing_the_valid_ids() {
        let (code, out, err) = run_explain(Some("R8"), false);
        assert_eq!(code, 2);
        assert!(out.is_empty());
        assert!(err.contains("unknown check id \"R8\""));
        assert!(err.contains("R1, R2, R3") && err.contains("S5, R6"));
    }

    #[test]
    fn prints_the_operator_file_format() {
        let (code, out, _) = run_explain(Some("operator-file"), false);
        assert_eq!(code, 0);
        assert!(out.contains("x402-probe.operator/1"));
    }

    #[test]
    fn wide_tables_become_blocks_and_narrow_ones_columns() {
        let text = markdown_to_text("| a | b |\n| --- | --- |\n| x | `y\\|z` |\n");
        assert_eq!(text, "  a  b\n  x  y|z\n");
        let long = "w ".repeat(80);
        let text = markdown_to_text(&format!("| id | rule |\n| --- | --- |\n| S2 | {long}|\n"));
        assert!(text.starts_with("  S2\n      rule: w w"));
    }

    #[test]
    fn long_lines_wrap_with_their_indent() {
        let line = format!("- {}", "word ".repeat(40));
        let wrapped = wrap(line.trim_end());
        assert!(wrapped.len() > 1);
        assert!(wrapped[1].starts_with("  word"));
    }
}
