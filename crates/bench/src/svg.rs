//! SVG primitives: the pieces the demo's charts and `bypass inspect`'s ladder picture are
//! written with.
//!
//! Pictures are written by hand into a `String`; every text goes through [`escape`], so any
//! label, address or comment makes well-formed XML.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_makes_text_safe() {
        assert_eq!(escape("a<b & \"c\"> 'd'"), "a&lt;b &amp; &quot;c&quot;&gt; &apos;d&apos;");
    }

    #[test]
    fn text_is_escaped_for_xml() {
        assert_eq!(escape("<a & 'b'> \"c\"\u{1}"), "&lt;a &amp; &apos;b&apos;&gt; &quot;c&quot; ");
    }
}
