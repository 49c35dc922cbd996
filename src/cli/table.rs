//! Text tables whose columns are as wide as their widest cell, so a long branch name, label
//! or user does not push the columns after it out of line. Cells are padded to the width a
//! terminal gives them (`unicode-width`); the last column is never padded, and lines carry
//! no trailing blanks.

use unicode_width::UnicodeWidthStr;

/// Space between two columns.
const GAP: &str = "  ";

/// A table: an optional header line and rows of cells, each column aligned left or right.
#[derive(Debug, Default)]
pub struct Table {
    header: Option<Vec<String>>,
    rows: Vec<Vec<String>>,
    right: Vec<usize>,
    indent: String,
}

impl Table {
    /// A table without a header line.
    pub fn new() -> Table {
        Table::default()
    }

    /// A table with a header line.
    pub fn with_header(cells: &[&str]) -> Table {
        Table {
            header: Some(cells.iter().map(|c| (*c).to_string()).collect()),
            ..Table::default()
        }
    }

    /// Right-aligns these columns (numbers, sizes).
    pub fn right(mut self, cols: &[usize]) -> Table {
        self.right = cols.to_vec();
        self
    }

    /// Starts every line with `indent`.
    pub fn indent(mut self, indent: &str) -> Table {
        self.indent = indent.to_string();
        self
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The lines of the table.
    pub fn lines(&self) -> Vec<String> {
        let all: Vec<&Vec<String>> = self.header.iter().chain(&self.rows).collect();
        let ncols = all.iter().map(|r| r.len()).max().unwrap_or(0);
        let mut widths = vec![0; ncols];
        for r in &all {
            for (i, c) in r.iter().enumerate() {
                widths[i] = widths[i].max(c.width());
            }
        }
        // A column empty in every row (and without a header) is left out, not drawn as a
        // double gap.
        all.iter()
            .map(|r| {
                let mut line = self.indent.clone();
                let mut first = true;
                for (i, c) in r.iter().enumerate() {
                    if widths[i] == 0 {
                        continue;
                    }
                    if !first {
                        line.push_str(GAP);
                    }
                    first = false;
                    let pad = " ".repeat(widths[i] - c.width());
                    if self.right.contains(&i) {
                        line.push_str(&pad);
                        line.push_str(c);
                    } else {
                        line.push_str(c);
                        if i + 1 < r.len() {
                            line.push_str(&pad);
                        }
                    }
                }
                line.trim_end().to_string()
            })
            .collect()
    }

    /// Prints the table to stdout; a reader that went away (`| head`) is not an error.
    pub fn print(&self) {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        for l in self.lines() {
            if writeln!(out, "{l}").is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_fit_the_widest_cell() {
        let mut t = Table::with_header(&["NAME", "SIZE", "NOTE"]).right(&[1]);
        t.row(vec!["a".into(), "1".into(), "x".into()]);
        t.row(vec!["a-much-longer-name".into(), "12345".into(), "".into()]);
        t.row(vec!["é日本".into(), "7".into(), "y".into()]);
        let l = t.lines();
        assert_eq!(l[0], "NAME                 SIZE  NOTE");
        assert_eq!(l[1], "a                       1  x");
        assert_eq!(l[2], "a-much-longer-name  12345");
        assert_eq!(l[3], "é日本                   7  y");
        let mut t = Table::new().indent("  ");
        t.row(vec!["a".into(), "".into(), "b".into()]);
        t.row(vec!["cc".into(), "".into(), "d".into()]);
        assert_eq!(t.lines(), vec!["  a   b", "  cc  d"]);
    }
}
