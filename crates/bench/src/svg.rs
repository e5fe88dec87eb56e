//! SVG primitives: the pieces the demo's charts and `bypass inspect`'s ladder picture are
//! written with.
//!
//! Pictures are written by hand into a `String`: [`document`] wraps a body of elements into
//! a whole SVG file; [`text`], [`line()`], [`dashed_line`], [`rect`], [`polyline`],
//! [`polygon`], [`circle`] and [`open_group`]/[`close_group`] append one element each. Every
//! text goes through [`escape`], so any label, address or comment makes well-formed XML.
//! Coordinates and lengths are written to a tenth of a pixel.

use std::fmt::Write;

/// The default colour of text.
pub const INK: &str = "#202020";

/// Return `text` escaped for XML character data and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters are not allowed in XML 1.0.
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// Return `body` wrapped into a whole SVG document `width` by `height` pixels, on a white
/// background, with its text in `font` and `title` as its title.
pub fn document(width: f64, height: f64, font: &str, title: &str, body: &str) -> String {
    let mut svg = String::with_capacity(body.len() + 512);
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height:.0}" viewBox="0 0 {width} {height:.0}" font-family="{font}">"#
    );
    let _ = writeln!(svg, "<title>{}</title>", escape(title));
    let _ = writeln!(svg, r##"<rect x="0" y="0" width="{width}" height="{height:.0}" fill="#ffffff"/>"##);
    svg.push_str(body);
    svg.push_str("</svg>\n");
    svg
}

/// Text to place: position, anchor, size, colour, weight, rotation. Start one with [`text`].
#[derive(Clone, Copy, Debug)]
pub struct Text<'a> {
    x: f64,
    y: f64,
    anchor: &'a str,
    size: f64,
    fill: &'a str,
    bold: bool,
    /// Degrees (clockwise, as SVG turns) and the point turned about.
    rotate: Option<(f64, (f64, f64))>,
}

/// Return text at `(x, y)` anchored `anchor` (`start`, `middle` or `end`): 12 px, [`INK`],
/// upright.
pub fn text(x: f64, y: f64, anchor: &str) -> Text<'_> {
    Text { x, y, anchor, size: 12.0, fill: INK, bold: false, rotate: None }
}

impl<'a> Text<'a> {
    /// Append the element showing `text` (escaped) to `svg`.
    pub fn write(&self, svg: &mut String, text: &str) {
        let weight = if self.bold { " font-weight=\"bold\"" } else { "" };
        let rotate = match self.rotate {
            Some((degrees, (x, y))) => format!(" transform=\"rotate({} {x:.1} {y:.1})\"", angle(degrees)),
            None => String::new(),
        };
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="{}" font-size="{}" fill="{}"{weight}{rotate}>{}</text>"#,
            self.x,
            self.y,
            self.anchor,
            self.size,
            self.fill,
            escape(text)
        );
    }

    /// Make the text bold.
    pub fn bold(mut self) -> Self {
        self.bold = true;
        self
    }

    /// Set the font size in pixels.
    pub fn size(mut self, size: f64) -> Self {
        self.size = size;
        self
    }

    /// Set the colour.
    pub fn fill(mut self, fill: &'a str) -> Self {
        self.fill = fill;
        self
    }

    /// Turn the text a quarter turn anticlockwise about its position, to read bottom to top
    /// (a vertical axis's title).
    pub fn rotated(self) -> Self {
        let at = (self.x, self.y);
        self.turned(-90.0, at)
    }

    /// Turn the text `degrees` clockwise about `about` (to lie along a slanted line).
    pub fn turned(mut self, degrees: f64, about: (f64, f64)) -> Self {
        self.rotate = Some((degrees, about));
        self
    }
}

/// Return `degrees` to a hundredth, whole degrees without decimals.
fn angle(degrees: f64) -> String {
    let s = format!("{degrees:.2}");
    s.strip_suffix(".00").map_or(s.clone(), str::to_string)
}

/// Append a line from `from` to `to`, `width` pixels wide in `stroke`.
pub fn line(svg: &mut String, from: (f64, f64), to: (f64, f64), stroke: &str, width: f64) {
    let ((x1, y1), (x2, y2)) = (from, to);
    let _ = writeln!(
        svg,
        r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" stroke="{stroke}" stroke-width="{width}"/>"#
    );
}

/// Append a dashed line: [`line()`] with `dashes` as its dash pattern (`"6 4"`: 6 pixels
/// drawn, 4 left out).
pub fn dashed_line(svg: &mut String, from: (f64, f64), to: (f64, f64), stroke: &str, width: f64, dashes: &str) {
    let ((x1, y1), (x2, y2)) = (from, to);
    let _ = writeln!(
        svg,
        r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" stroke="{stroke}" stroke-width="{width}" stroke-dasharray="{dashes}"/>"#
    );
}

/// A rectangle to place: corner, size, fill, and optionally rounded corners, opacity and an
/// outline. Start one with [`rect`].
#[derive(Clone, Copy, Debug)]
pub struct Rect<'a> {
    x: f64,
    y: f64,
    width: f64,
    height: f64,
    fill: &'a str,
    radius: Option<f64>,
    opacity: Option<f64>,
    stroke: Option<&'a str>,
}

/// Return a rectangle with its top left corner at `(x, y)`, `width` by `height`, filled
/// with `fill`.
pub fn rect(x: f64, y: f64, width: f64, height: f64, fill: &str) -> Rect<'_> {
    Rect { x, y, width, height, fill, radius: None, opacity: None, stroke: None }
}

impl<'a> Rect<'a> {
    /// Round the corners with radius `radius`.
    pub fn rounded(mut self, radius: f64) -> Self {
        self.radius = Some(radius);
        self
    }

    /// Fill with `opacity` (0 to 1) instead of opaque.
    pub fn opacity(mut self, opacity: f64) -> Self {
        self.opacity = Some(opacity);
        self
    }

    /// Outline with `stroke`.
    pub fn stroke(mut self, stroke: &'a str) -> Self {
        self.stroke = Some(stroke);
        self
    }

    /// Append the element to `svg`.
    pub fn write(&self, svg: &mut String) {
        let Rect { x, y, width, height, fill, .. } = *self;
        let _ = write!(svg, r#"<rect x="{x:.1}" y="{y:.1}" width="{width:.1}" height="{height:.1}""#);
        if let Some(radius) = self.radius {
            let _ = write!(svg, r#" rx="{radius}""#);
        }
        let _ = write!(svg, r#" fill="{fill}""#);
        if let Some(opacity) = self.opacity {
            let _ = write!(svg, r#" fill-opacity="{opacity}""#);
        }
        if let Some(stroke) = self.stroke {
            let _ = write!(svg, r#" stroke="{stroke}""#);
        }
        svg.push_str("/>\n");
    }
}

/// Return `list` as an SVG points list: `x,y` pairs separated by spaces.
fn points(list: impl IntoIterator<Item = (f64, f64)>) -> String {
    let points: Vec<String> = list.into_iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    points.join(" ")
}

/// Append an open line through `vertices`, `width` pixels wide in `stroke`, with round joins.
pub fn polyline(svg: &mut String, vertices: impl IntoIterator<Item = (f64, f64)>, stroke: &str, width: f64) {
    let _ = writeln!(
        svg,
        r#"<polyline points="{}" fill="none" stroke="{stroke}" stroke-width="{width}" stroke-linejoin="round"/>"#,
        points(vertices)
    );
}

/// Append a closed shape with corners `corners`, filled with `fill`.
pub fn polygon(svg: &mut String, corners: impl IntoIterator<Item = (f64, f64)>, fill: &str) {
    let _ = writeln!(svg, r#"<polygon points="{}" fill="{fill}"/>"#, points(corners));
}

/// Append a disc of radius `r` centred on `centre`, filled with `fill`.
pub fn circle(svg: &mut String, centre: (f64, f64), r: f64, fill: &str) {
    let (cx, cy) = centre;
    let _ = writeln!(svg, r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="{r}" fill="{fill}"/>"#);
}

/// Open a group: the elements up to [`close_group`] form one.
pub fn open_group(svg: &mut String) {
    svg.push_str("<g>\n");
}

/// Close the group [`open_group`] opened.
pub fn close_group(svg: &mut String) {
    svg.push_str("</g>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_makes_text_safe() {
        assert_eq!(escape("a<b & \"c\"> 'd'"), "a&lt;b &amp; &quot;c&quot;&gt; &apos;d&apos;");
    }

    #[test]
    fn angles_are_written_to_a_hundredth_whole_ones_without_decimals() {
        assert_eq!(angle(-90.0), "-90");
        assert_eq!(angle(1.6975), "1.70");
        assert_eq!(angle(-1.6975), "-1.70");
    }

    #[test]
    fn elements_are_written_to_a_tenth() {
        let mut svg = String::new();
        text(1.0, 2.04, "end").size(11.5).fill("red").bold().turned(1.6975, (3.0, 4.0)).write(&mut svg, "a<b");
        rect(0.0, 1.0, 2.0, 36.0, "#fff").rounded(5.0).opacity(0.9).stroke("#000").write(&mut svg);
        polyline(&mut svg, [(0.0, 1.0), (2.26, 3.0)], "blue", 2.2);
        assert_eq!(
            svg,
            concat!(
                r#"<text x="1.0" y="2.0" text-anchor="end" font-size="11.5" fill="red" font-weight="bold" transform="rotate(1.70 3.0 4.0)">a&lt;b</text>"#,
                "\n",
                r##"<rect x="0.0" y="1.0" width="2.0" height="36.0" rx="5" fill="#fff" fill-opacity="0.9" stroke="#000"/>"##,
                "\n",
                r#"<polyline points="0.0,1.0 2.3,3.0" fill="none" stroke="blue" stroke-width="2.2" stroke-linejoin="round"/>"#,
                "\n",
            )
        );
    }

    #[test]
    fn text_is_escaped_for_xml() {
        assert_eq!(escape("<a & 'b'> \"c\"\u{1}"), "&lt;a &amp; &apos;b&apos;&gt; &quot;c&quot; ");
    }
}
