//! How the console shows text a user controls: escaped (maud), and with
//! every character that is invisible or changes the order text is shown
//! in made visible, as code hosts do against "Trojan Source": a
//! bidirectional control (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F,
//! U+061C), a zero-width or other format character (Unicode's `Cf`: U+200B–
//! U+200D, U+2060, U+FEFF, the soft hyphen, the tag characters, …), a
//! control character other than tab and line ends, a line or paragraph
//! separator, and the blank letters (U+115F, U+1160, U+3164, U+FFA0). Each
//! becomes a marked span, `<span class="invisible" title="…">&lt;U+202E&gt;</span>`,
//! in place of the character itself, so nothing on a page can reorder or
//! hide what is around it. Every page shows user text through [`Text`]
//! (or [`plain`] where no markup can go); the script's live rows do the same (`assets/console.js`).

use std::fmt::Write;

use maud::{Escaper, Render};

/// Whether `c` is shown as a marked `<U+XXXX>` instead of itself.
pub fn is_invisible(c: char) -> bool {
    matches!(c as u32,
        // C0 and C1 controls (but tab, line feed, carriage return), DEL.
        0x00..=0x08 | 0x0B | 0x0C | 0x0E..=0x1F | 0x7F..=0x9F
        // Format characters (Unicode 15's `Cf`).
        | 0xAD | 0x0600..=0x0605 | 0x061C | 0x06DD | 0x070F | 0x0890 | 0x0891 | 0x08E2
        | 0x180E | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F
        | 0xFEFF | 0xFFF9..=0xFFFB | 0x110BD | 0x110CD | 0x13430..=0x1343F
        | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A | 0xE0001 | 0xE0020..=0xE007F
        // Line and paragraph separators; letters drawn blank.
        | 0x2028 | 0x2029 | 0x115F | 0x1160 | 0x3164 | 0xFFA0)
}

/// What a marked character's title says it is.
fn kind(c: char) -> &'static str {
    match c as u32 {
        0x202A..=0x202E | 0x2066..=0x2069 | 0x200E | 0x200F | 0x061C => {
            "a bidirectional control: it changes the order text is shown in"
        }
        0x200B..=0x200D | 0x2060 | 0xFEFF => "a zero-width character",
        0x00..=0x1F | 0x7F..=0x9F => "a control character",
        _ => "an invisible character",
    }
}

/// `s` as plain text with every invisible character written `<U+XXXX>`:
/// for where markup cannot go (a page's title).
pub fn plain(s: &str) -> String {
    s.chars()
        .map(|c| {
            if is_invisible(c) {
                format!("<U+{:04X}>", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A user's text, to put into a page: `(Text(&name))`.
pub struct Text<'a>(pub &'a str);

impl Render for Text<'_> {
    fn render_to(&self, out: &mut String) {
        let s = self.0;
        let mut plain_from = 0;
        for (i, c) in s.char_indices() {
            if !is_invisible(c) {
                continue;
            }
            Escaper::new(out)
                .write_str(&s[plain_from..i])
                .expect("writing to a String");
            write!(
                out,
                "<span class=\"invisible\" title=\"U+{:04X}: {}\">&lt;U+{:04X}&gt;</span>",
                c as u32,
                kind(c),
                c as u32
            )
            .expect("writing to a String");
            plain_from = i + c.len_utf8();
        }
        Escaper::new(out)
            .write_str(&s[plain_from..])
            .expect("writing to a String");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> maud::Markup {
        Text(s).render()
    }

    #[test]
    fn bidi_and_zero_width_characters_are_shown_as_marked_code_points() {
        let html = text("a\u{202e}b<\u{200b}c\u{2067}\u{feff}").into_string();
        assert_eq!(
            html,
            "a<span class=\"invisible\" title=\"U+202E: a bidirectional control: it changes the order text is shown in\">&lt;U+202E&gt;</span>b&lt;\
             <span class=\"invisible\" title=\"U+200B: a zero-width character\">&lt;U+200B&gt;</span>c\
             <span class=\"invisible\" title=\"U+2067: a bidirectional control: it changes the order text is shown in\">&lt;U+2067&gt;</span>\
             <span class=\"invisible\" title=\"U+FEFF: a zero-width character\">&lt;U+FEFF&gt;</span>"
        );
    }

    #[test]
    fn every_listed_character_is_marked_and_ordinary_text_is_not() {
        for c in [
            '\u{202a}',
            '\u{202b}',
            '\u{202c}',
            '\u{202d}',
            '\u{202e}',
            '\u{2066}',
            '\u{2067}',
            '\u{2068}',
            '\u{2069}',
            '\u{200e}',
            '\u{200f}',
            '\u{061c}',
            '\u{200b}',
            '\u{200c}',
            '\u{200d}',
            '\u{2060}',
            '\u{feff}',
            '\u{ad}',
            '\u{1b}',
            '\u{7f}',
            '\u{85}',
            '\u{2028}',
            '\u{e0041}',
            '\u{3164}',
        ] {
            assert!(is_invisible(c), "U+{:04X}", c as u32);
            let html = text(&c.to_string()).into_string();
            assert!(!html.contains(c), "U+{:04X} shown raw: {html}", c as u32);
            assert!(html.contains(&format!("&lt;U+{:04X}&gt;", c as u32)));
        }
        for s in [
            "plain",
            "é漢字 ü",
            "tab\tand\nlines\r\n",
            "emoji 🎉",
            "<&\">",
        ] {
            assert!(!text(s).into_string().contains("invisible"), "{s}");
        }
        assert_eq!(text("<&\">").into_string(), "&lt;&amp;&quot;&gt;");
    }
}
